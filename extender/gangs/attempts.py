"""Attempts: how a gang's attempt, its holds or its reservation end; the steps several parts share (no I/O).

Owns: resetting an attempt (its reservation dropped, the pods blocked for capacity woken); recycling
holds (answered with a retry, their slots back in the gang's reservation); whether a complete quorum
may be released now, and aborting it when a member no longer fits; ending a draining or preempting
reservation; judging, at a timeout, the reserved nodes kube-scheduler never offered. Each returns the
effects it asks for and updates only the record's own bookkeeping. Must not: perform effects (the
apply step does), call the API server or block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet

from extender.gangs.effects import Answer, Count, Effect, Publish, Reserve, Tell, WakeBlocked
from extender.gangs.latency import ReleaseLatency
from extender.gangs.placement import GangPlacement
from extender.gangs.record import Attempt, GangRecord, Hold, Purpose, Reservation
from extender.gangs.settings import GangSettings
from extender.model import messages
from extender.model.gang import GangPhase, GangStatus

log = logging.getLogger(__name__)

MIN_OFFERS = 2
"""Member filter requests an attempt must have seen before a reserved node it never offered is avoided."""

MAX_AVOIDED = 10_000
"""Nodes one gang avoids at most (more starts the set afresh): bounded by the cluster anyway."""


class Attempts:
    """The shared steps: reset, recycle, release or abort, end a drain, judge the offers."""

    def __init__(self, placement: GangPlacement, settings: GangSettings, clock: Callable[[], float],
                 latency: ReleaseLatency | None = None) -> None:
        """``latency``: the recent releases' durations, for the time a release needs left on each hold."""
        self.placement = placement
        self.mirror = placement.mirror
        self.settings = settings
        self.clock = clock
        self.latency = latency or ReleaseLatency(settings.hold_seconds / 2)

    def reset(self, record: GangRecord) -> list[Effect]:
        """End the attempt: a fresh attempt and no slot reserved; capacity it held wakes the blocked pods. A
        draining or preempting gang stays so, with no slots (the queue or preemption ends that, counted,
        when it leaves the head, runs out of patience or is admitted; a preemption keeps its victims, so
        they are not chosen again while they terminate)."""
        held = record.reservation
        record.attempt = Attempt()
        kept = None
        if held is not None and held.purpose is not Purpose.ADMITTED:
            kept = Reservation(held.purpose, (), held.since, held.priority, held.victims)
        effects: list[Effect] = [Reserve(record, kept)]
        if held is not None and (held.purpose is Purpose.ADMITTED or held.slots):
            effects.append(WakeBlocked())
        return effects

    def recycle(self, record: GangRecord, holds: Sequence[Hold], now: float, message: str = "") -> list[Effect]:
        """Answer ``holds`` with a retry; their slots go back to the gang's reservation."""
        if not message:
            placed = len(self.placement.placed(self.mirror.members(record.key), record))
            last_new = (record.attempt.deadline or now) - self.settings.timeout_for(record.policy)
            message = messages.still_gathering(record.key, placed + len(record.waiting()), record.policy.min_count,
                                               max(now - last_new, 0.0))
        effects: list[Effect] = []
        if record.admitted and record.reservation is not None:  # only an admitted gang holds a reservation
            effects.append(Reserve(record, record.reservation.plus((hold.node, hold.pod.requests) for hold in holds)))
        effects += [Answer(record, hold, message) for hold in holds]
        effects.append(Count("holds_recycled", len(holds)))
        log.info("%s", message)
        return effects

    def drop_holds(self, record: GangRecord, holds: Sequence[Hold], message: str) -> list[Effect]:
        """Answer ``holds`` of members that are gone (they no longer count); their slots go back to the
        gang's reservation, for the members that replace them."""
        effects: list[Effect] = []
        if record.admitted and record.reservation is not None:
            effects.append(Reserve(record, record.reservation.plus((hold.node, hold.pod.requests) for hold in holds)))
        effects += [Answer(record, hold, message) for hold in holds]
        log.info("gang %s: %d hold(s) dropped: %s", record.key, len(holds), message)
        return effects

    def alive(self, hold: Hold) -> bool:
        """Whether the held member still exists with the uid it was held with, and is not finished."""
        pod = self.mirror.pod_by_uid(hold.pod.uid)
        return pod is not None and not pod.terminal

    def may_release(self, record: GangRecord, waiting: list[Hold], now: float,
                    arriving: Hold | None = None) -> tuple[bool, list[Effect], str]:
        """Whether the complete quorum ``waiting`` may be bound now: every counted member is alive with its
        held uid (a hold of one that is gone is answered and the gang waits: it is not complete); every
        hold has time left for writing the release down and every Binding (``ReleaseLatency.margin``:
        otherwise all of the gang's holds, ``arriving`` too, are answered with a retry together, so they
        come back together); and every member still fits where it is held (otherwise the release is
        aborted: nothing is bound, the gang is planned again). Marks the holds ``releasing`` when it may.
        Returns (may, the effects, the message the holds were answered with when all of them were, else
        "")."""
        gone = [h for h in waiting if not self.alive(h)]
        if gone:
            effects = self.drop_holds(record, gone, messages.held_members_gone(len(gone)))
            record.last_message = messages.held_members_gone(len(gone))
            return False, effects, ""
        margin = self.latency.margin()
        late = [h for h in waiting if now + margin >= h.answer_by]
        if late:
            message = messages.quorum_too_late(record.key, len(late), margin)
            record.last_message = message
            return False, self.recycle(record, waiting, now, message), message
        problem = self.placement.release_problem(waiting)
        if problem:
            message = messages.release_aborted(record.key, problem)
            effects = [Answer(record, held, message) for held in waiting]
            effects += self.reset(record)
            record.last_message = message
            log.warning("%s", message)
            effects += [Count("releases_aborted"),
                        Tell([h.pod for h in waiting], "Warning", "GangReleaseAborted", message),
                        Publish(record.key, GangStatus(GangPhase.WAITING, message, 0, record.policy.min_count))]
            return False, effects, message
        for held in waiting:
            held.releasing = True
        return True, [], ""

    @staticmethod
    def end_drain(record: GangRecord, why: str) -> list[Effect]:
        """Drop a draining or preempting reservation; the capacity it kept wakes the blocked pods."""
        log.info("gang %s: draining reservation dropped: %s", record.key, why)
        return [Reserve(record, None), Count("drains_ended"), WakeBlocked()]

    def judge_offers(self, record: GangRecord) -> str:
        """At a timeout: the reserved nodes kube-scheduler never offered in ``MIN_OFFERS`` or more member
        filter requests join the nodes the gang's plans avoid until an attempt succeeds, so a reservation
        its own filters reject (inter-pod affinity, ports, volumes: what the plan does not model) is
        planned away instead of waited on forever. Avoiding is a preference: a plan that does not fit
        without them is made with them (``domains.place_gang``). Returns what to add to the timeout message."""
        attempt = record.attempt
        reserved = record.reservation.nodes if record.reservation is not None else frozenset()
        never = reserved - attempt.offered if attempt.filters_seen >= MIN_OFFERS else set()
        attempt.offered, attempt.filters_seen = set(), 0
        if not never:
            return ""
        self.avoid(record, never)
        return messages.never_offered(sorted(never))

    @staticmethod
    def avoid(record: GangRecord, nodes: AbstractSet[str]) -> None:
        """The next plans of the gang avoid ``nodes`` (until an attempt succeeds)."""
        plans = record.plans
        plans.avoid = (plans.avoid | nodes) if len(plans.avoid) < MAX_AVOIDED else frozenset(nodes)

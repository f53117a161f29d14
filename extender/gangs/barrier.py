"""Barrier: holding each member's bind until its gang's quorum is complete, then releasing it whole (no I/O).

Owns: what a bind request does (``arrive``: bind now, wait at the barrier, or be refused; checked against
the mirror, never the request); completing a quorum (``complete``: release it when every hold has time
left and every member still fits where it is held, else recycle the late holds or abort); the outcome of
a released quorum or of an immediate bind (every hold answered; a failed Binding keeps its place
reserved); letting through the members of a release a previous leader or process left open. Each
decision is a ``BindDecision`` carrying its effects. Must not: bind, wait, call the API server or block:
the engine binds and waits, outside the lock.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from extender.cluster.mirror import ClusterMirror
from extender.gangs.attempts import Attempts
from extender.gangs.effects import Answer, Assume, Count, Effect, Forget, HoldAt, Publish, Reserve, Tell, WakeBlocked
from extender.gangs.placement import GangPlacement
from extender.gangs.record import GangRecord, Hold, Purpose, Reservation
from extender.gangs.registry import GangRegistry
from extender.gangs.settings import GangSettings
from extender.model import messages
from extender.model.cluster import PodRecord
from extender.model.gang import GangKey, GangPhase, GangPolicy, GangStatus

log = logging.getLogger(__name__)


class BindAction(enum.Enum):
    NOW = "now"          # bind at once (not a gang member, or the gang is already complete)
    WAIT = "wait"        # held: wait on the hold
    RELEASE = "release"  # this request completed the quorum: bind every hold in ``holds``
    REJECT = "reject"    # answer ``error``


@dataclass(frozen=True, slots=True)
class BindDecision:
    action: BindAction
    hold: Hold | None = None
    holds: list[Hold] = field(default_factory=list)
    error: str = ""
    effects: tuple[Effect, ...] = ()


@dataclass(frozen=True, slots=True)
class Arrival:
    """A bind request's first step: its decision, and, when it completed the quorum, the gang to release."""

    decision: BindDecision
    quorum: GangRecord | None = None


def outcomes_error(outcomes: Sequence[tuple[Hold, str]]) -> str:
    """The first error among a release's outcomes ("" : none)."""
    return next((error for _, error in outcomes if error), "")


class Barrier:
    """The bind barrier."""

    def __init__(self, registry: GangRegistry, placement: GangPlacement, attempts: Attempts, settings: GangSettings,
                 clock: Callable[[], float]) -> None:
        self.registry = registry
        self.placement = placement
        self.mirror: ClusterMirror = placement.mirror
        self.attempts = attempts
        self.settings = settings
        self.clock = clock

    def arrive(self, pod: PodRecord, node: str, policy: GangPolicy | None, arrival: float | None) -> Arrival:
        """Decide what a bind request does; a held bind is recorded (``HoldAt``). ``arrival`` is when the
        request reached the process (default now): a hold is answered by ``arrival + hold_seconds``."""
        gang = pod.gang if policy is not None else None
        existing = self.registry.get(gang) if gang is not None else None
        if existing is not None and pod.uid in existing.holds:
            return Arrival(BindDecision(BindAction.REJECT, error=messages.already_held(pod)))
        error = self.placement.fit_error(pod, node, gang)
        if error:
            return Arrival(BindDecision(BindAction.REJECT, error=error))
        approved = self.registry.take_approval(pod.uid)  # used up by any bind that gets this far
        if approved and existing is not None and existing.admitted and existing.reservation is not None:
            return Arrival(BindDecision(BindAction.NOW, effects=self._approved_takes_its_place(existing, pod, node)))
        if gang is None or policy is None or approved:
            return Arrival(BindDecision(BindAction.NOW, effects=(Assume(pod.uid, node),)))
        record = existing or self.registry.ensure(gang, policy)
        placed = self.placement.placed(self.mirror.members(gang), record)
        if len(placed) >= policy.min_count:
            return Arrival(BindDecision(BindAction.NOW, effects=(Assume(pod.uid, node),)))
        now = self.clock()
        answer_by = (now if arrival is None else arrival) + self.settings.hold_seconds
        if answer_by <= now:
            return Arrival(BindDecision(BindAction.REJECT, error=messages.bind_too_late(pod)))
        hold = Hold(pod, node, answer_by=self.registry.due_by(answer_by, record))
        effects: list[Effect] = [HoldAt(record, hold)]
        if pod.uid not in record.attempt.held_ever:
            # A member new to this attempt reached the barrier: the gang is progressing, so its deadline
            # moves (the first hold starts the clock). A member coming back after its hold was recycled is
            # not progress.
            record.attempt.held_ever.add(pod.uid)
            record.attempt.deadline = self.registry.due_by(now + self.settings.timeout_for(policy), record)
        if record.reservation is not None:
            effects.append(Reserve(record, record.reservation.using(node, pod.requests)))
        waiting = len(record.waiting()) + 1
        if len(placed) + waiting >= policy.min_count:
            return Arrival(BindDecision(BindAction.WAIT, hold=hold, effects=tuple(effects)), record)
        record.last_message = messages.holding(waiting, len(placed) + waiting, policy.min_count)
        return Arrival(BindDecision(BindAction.WAIT, hold=hold, effects=tuple(effects)))

    def complete(self, record: GangRecord, hold: Hold) -> BindDecision:
        """The quorum is complete with ``hold`` (the hold recorded): release it; or (every hold answered: the
        release aborted, or too little time left on some) reject it; or (a member gone) wait."""
        waiting = record.waiting()
        may, effects, answered = self.attempts.may_release(record, waiting, self.clock(), arriving=hold)
        if may:
            return BindDecision(BindAction.RELEASE, hold=hold, holds=waiting)
        if answered:
            return BindDecision(BindAction.REJECT, error=answered, effects=tuple(effects))
        return BindDecision(BindAction.WAIT, hold=hold, effects=tuple(effects))

    # -------------------------------------------------------------------------- outcomes
    @staticmethod
    def bound(pod: PodRecord, error: str) -> list[Effect]:
        """Outcome of an immediate bind."""
        return [Count("bind_errors"), Forget(pod.uid)] if error else []

    def released(self, gang: GangKey, outcomes: Sequence[tuple[Hold, str]]) -> list[Effect]:
        """Outcome of binding a released quorum: every hold answered; a gang complete when all bound, its
        failed members' places kept reserved otherwise (a Binding cannot be undone)."""
        record = self.registry.get(gang)
        effects: list[Effect] = []
        for hold, error in outcomes:
            effects.append(Answer(record, hold, error, bound=not error))
            if error:
                effects.append(Count("bind_errors"))
        answered = {hold.pod.uid for hold, _ in outcomes}
        settled = record is not None and not any(uid not in answered for uid in record.holds)
        failed = [hold for hold, error in outcomes if error]
        failed_uids = {hold.pod.uid for hold in failed}
        if record is not None and settled and failed:
            # A Binding cannot be undone: the members that failed keep their places reserved, so they come
            # back to the same room (nothing else may take it) and complete the gang.
            now = self.clock()
            held = record.reservation if record.admitted else None
            if record.draining or record.preempting:  # bound members make it admitted: the drain is over
                effects += [Count("drains_ended"), WakeBlocked()]
            kept = held or Reservation(Purpose.ADMITTED, (), now)
            effects.append(Reserve(record, kept.plus((h.node, h.pod.requests) for h in failed)))
            record.attempt.deadline = self.registry.due_by(now + self.settings.timeout_for(record.policy), record)
            record.attempt.held_ever = set()
            record.last_message = messages.release_partly_failed(len(failed))
        elif record is not None and settled:
            effects += self.attempts.reset(record)
            record.timeouts, record.plans.avoid, record.turn.waiting_since = 0, frozenset(), None
            record.completed += 1
            record.last_message = messages.QUORUM_BOUND
            effects.append(Count("completed"))
        bound = [h.pod for h, error in outcomes if not error]
        log.info("gang %s released at quorum: %d bound, %d failed", gang, len(bound), len(outcomes) - len(bound))
        for hold, error in outcomes:  # a Binding cannot be undone: the bound stay, the failed are retried
            if error:
                effects.append(Tell([hold.pod], "Warning", "GangBindFailed", messages.bind_failed(gang, error)))
        if bound and failed:  # refused by the API server after its siblings were bound: told, counted, finished
            partial = messages.release_partly_bound(gang, len(bound), len(outcomes), outcomes_error(outcomes))
            log.warning("%s", partial)
            effects += [Count("partially_bound"),
                        Tell([h.pod for h, _ in outcomes], "Warning", "GangPartiallyBound", partial)]
        if bound:
            message = messages.bound_together(gang, len(bound))
            effects.append(Tell(bound, "Normal", "GangBound", message))
            if record is not None and settled:
                placed = [p for p in self.placement.placed(self.mirror.members(gang), record)
                          if p.uid not in failed_uids]
                effects.append(Publish(gang, GangStatus(GangPhase.SCHEDULED, message, len(placed),
                                                        record.policy.min_count)))
        return effects

    def unrelease(self, gang: GangKey, holds: Sequence[Hold], message: str) -> list[Effect]:
        """A release that may not start (its intent could not be written down): answer its holds with a
        retry; they keep their reserved place."""
        for hold in holds:
            hold.releasing = False
        record = self.registry.get(gang)
        if record is None:
            return []
        return self.attempts.recycle(record, [h for h in holds if h.pod.uid in record.holds], self.clock(), message)

    # ------------------------------------------------------------------------- pods that go
    def member_gone(self, pod: PodRecord) -> list[Effect]:
        """``pod`` was deleted, re-created under its name, or finished: a bind held for it is answered at
        once and no longer counts toward the quorum (its place goes back to the gang's reservation, for a
        replacement). A hold picked by a release in flight is left to the release's outcome."""
        record = self.registry.get(pod.gang) if pod.gang is not None else None
        hold = record.holds.get(pod.uid) if record is not None else None
        if record is None or hold is None or hold.releasing:
            return []
        return self.attempts.drop_holds(record, [hold], messages.held_member_gone(pod))

    def member_bound(self, pod: PodRecord) -> list[Effect]:
        """Another binder bound gang member ``pod``: it takes a reserved place (once)."""
        record = self.registry.get(pod.gang) if pod.gang is not None else None
        if record is None:
            return []
        self.registry.note_bound(record.key)
        if record.reservation is None:
            return []
        return [Reserve(record, record.reservation.using(pod.node_name, pod.requests))]

    # -------------------------------------------------------------------- left-open releases
    def resume(self, pod: PodRecord, node: str) -> tuple[str, list[Effect]]:
        """A member of a release that a crash interrupted (the release journal names the node kube-scheduler
        chose): "" when it may be bound there now (assumed, like an immediate bind; report the outcome
        with ``bound``), else why not."""
        if pod.node_name:
            return messages.already_bound(pod, pod.node_name), []
        error = self.placement.fit_error(pod, node, pod.gang)
        return error, ([] if error else [Assume(pod.uid, node)])

    def approve(self, gang: GangKey, policy: GangPolicy | None, places: Sequence[tuple[PodRecord, str]]
                ) -> list[Effect]:
        """Members of a release that a previous leader started and did not finish (its intent on the
        Lease, ``places``: each unbound member and the node the release chose for it): each passes the
        barrier at its next bind request, to whatever node fits it then. Until then the room the release
        counted on stays theirs (a reservation, as for members whose Binding failed at release), so no
        other pod takes it and leaves the gang partly bound; it is given up with the gang's timeout."""
        if not places:
            return []
        pods = [pod for pod, _ in places]
        self.registry.approve(pods)
        log.info("gang %s: release left open by the previous leader: %d member(s) pass the barrier at their next "
                 "bind", gang, len(pods))
        effects: list[Effect] = []
        if policy is not None:
            record = self.registry.ensure(gang, policy)
            now = self.clock()
            if record.draining or record.preempting:  # members bound: it is admitted, the drain is over
                effects += [Count("drains_ended"), WakeBlocked()]
            kept = record.reservation if record.admitted and record.reservation is not None else \
                Reservation(Purpose.ADMITTED, (), now)
            effects.append(Reserve(record, kept.plus((node, pod.requests) for pod, node in places)))
            record.attempt.deadline = self.registry.due_by(now + self.settings.timeout_for(policy), record)
        return [*effects, Count("releases_resumed"),
                Tell(pods, "Normal", "GangReleaseResumed", messages.release_resumed_by_leader(gang, len(pods)))]

    def _approved_takes_its_place(self, record: GangRecord, pod: PodRecord, node: str) -> tuple[Effect, ...]:
        """An approved member binds now: it uses a slot of its gang's reservation; the last one ends the
        attempt (the release left open is finished)."""
        assert record.reservation is not None
        left = record.reservation.using(node, pod.requests)
        if left.slots or record.holds:
            return Assume(pod.uid, node), Reserve(record, left)
        return Assume(pod.uid, node), *self.attempts.reset(record)

    @staticmethod
    def abandoned(gang: GangKey, pods: Sequence[PodRecord]) -> list[Effect]:
        """A release left open was dropped: none of its Bindings had been made (the gang forms again)."""
        log.info("gang %s: release left open dropped: none of its Bindings was made", gang)
        return [Count("releases_abandoned"),
                Tell(list(pods), "Normal", "GangReleaseAbandoned", messages.release_abandoned(gang, len(pods)))]

    @staticmethod
    def resumed(gang: GangKey, bound: Sequence[PodRecord]) -> list[Effect]:
        """Members of an interrupted release were bound after a restart: count it and tell them."""
        if not bound:
            return []
        log.info("gang %s: release interrupted by a restart finished: %d member(s) bound", gang, len(bound))
        return [Count("releases_resumed"),
                Tell(list(bound), "Normal", "GangReleaseResumed", messages.release_resumed_after_restart(gang,
                                                                                                      len(bound)))]

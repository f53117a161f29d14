"""GangPreemption: gang-aware preemption for the head of the admission order (no I/O).

Owns: deciding when the head gang preempts (its plan fails on free capacity, it has a priority above
some running work, it may preempt, the eviction bound has room); building the victim units (a gang
evicted whole unless its group says pod by pod; a plain pod alone; gangs being placed and units a
PodDisruptionBudget forbids are never victims); reserving the place the victims free for the preemptor
(kept in the mirror like a draining reservation, so nothing else takes it as it frees); the eviction
order for the engine; what happens when evictions fail or the place is never taken; what ``explain``
shows of a preemption in progress. Must not: evict, call the API server or block (the engine runs the
evictions outside the lock and reports back through the ledger's ``evictions_done``), or choose
victims itself (``victims.choose_victims`` does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from extender.cluster.mirror import ClusterMirror
from extender.gangs import planner, victims
from extender.gangs.admission import Admission
from extender.gangs.attempts import Attempts
from extender.gangs.effects import Count, Effect, Evict, EvictionOrder, Reserve, Tell
from extender.gangs.placement import GangPlacement
from extender.gangs.record import GangRecord, Purpose, Reservation
from extender.gangs.registry import GangRegistry
from extender.gangs.settings import GangSettings
from extender.model import messages
from extender.model.cluster import PodRecord
from extender.model.gang import Code, GangKey, TopologyProblem, Verdict

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0
"""The least time between two victim searches for one gang, when the cluster changed in between."""

FAILED_BACKOFF_SECONDS = 30.0
"""After evictions failed (a budget refused midway, the API failed): no new preemption for this long."""

SETTLE_SECONDS = 60.0
"""Once every victim is gone, how long the preemptor keeps the freed place without being admitted."""

PATIENCE_SECONDS = 600.0
"""The longest a preemption waits for its victims to end (their grace periods) before it is dropped."""

Budgets = Callable[[Sequence[PodRecord]], tuple[bool, str]]


def _budget_any(_pods: Sequence[PodRecord]) -> tuple[bool, str]:
    return True, ""


class GangPreemption:
    """Preemption for the head gang."""

    def __init__(self, registry: GangRegistry, placement: GangPlacement, admission: Admission, attempts: Attempts,
                 settings: GangSettings, clock: Callable[[], float], *, enabled: bool = False,
                 budgets: Budgets | None = None, eviction_room: Callable[[int], bool] | None = None,
                 problem: Callable[[], str] | None = None) -> None:
        """``enabled``: off until an evictor is wired (the composition turns it on). ``problem``: why no
        victim may be chosen now ("": they may), e.g. the mirror or the budgets not listed yet, or this
        replica not leading."""
        self.registry = registry
        self.placement = placement
        self.mirror: ClusterMirror = placement.mirror
        self.admission = admission
        self.attempts = attempts
        self.settings = settings
        self.clock = clock
        self.enabled = enabled
        self.budgets = budgets or _budget_any
        self.eviction_room = eviction_room or (lambda _count: True)
        self.problem = problem or (lambda: "")

    # ------------------------------------------------------------------- starting one
    def start(self, record: GangRecord, now: float) -> list[Effect] | None:
        """Start a preemption for the head gang when it may and must preempt (None: not started)."""
        if not self._may_preempt(record, now):
            return None
        memo = record.preemptions
        if memo.searched is not None and (memo.searched[0] == self.mirror.generation
                                          or now - memo.searched[1] < RETRY_SECONDS):
            return None
        memo.searched = (self.mirror.generation, now)
        gang = record.key
        members = self.mirror.members(gang)
        placed = self.placement.placed(members, record)
        needed = record.policy.min_count - len(placed) - len(record.waiting())
        pending = self.placement.pending(members, record)
        if needed <= 0 or len(pending) < needed or self.admission.barrier_room(gang, needed) is not None:
            return None  # admission would refuse it even with room: nothing to evict for
        chosen = planner.pick_for_reservation(pending, needed)
        constraint = self.placement.constraint_of(record.policy, members)
        if isinstance(constraint, TopologyProblem):
            return None
        choice = victims.choose_victims(chosen, pending, self.mirror.nodes.values(), self.placement.free_for(gang),
                                        constraint, self.settings.levels_for(constraint),
                                        self.placement.placed_nodes(placed), self._units(record),
                                        record.turn.priority)
        if isinstance(choice, str) or not choice.victims:
            if isinstance(choice, str) and choice != memo.note:
                log.info("gang %s: no preemption: %s", gang, choice)
            memo.note = choice if isinstance(choice, str) else ""
            return None
        pods = [p for unit in choice.victims for p in unit.pods]
        allowed, why = self.budgets(pods)
        if not allowed:  # each unit alone is allowed, together they are not: wait for the next search
            memo.note = messages.victims_exceed_budget(why)
            return None
        if not self.eviction_room(len(pods)):
            memo.note = messages.eviction_rate_full(len(pods))
            return None
        reservation = Reservation(Purpose.PREEMPTING, choice.placement.plan.slots, now, record.turn.priority,
                                  choice.victims)
        reason = messages.preempting(gang, record.turn.priority, len(reservation.victim_uids),
                                     [unit.key for unit in choice.victims])
        record.last_message = reason
        log.info("%s", reason)
        return [Reserve(record, reservation), Evict(EvictionOrder(gang, choice.victims, reason)),
                Count("preemptions_started"), Tell(members, "Normal", "GangPreempting", reason)]

    def _may_preempt(self, record: GangRecord, now: float) -> bool:
        if not self.enabled or record.turn.problem or record.plans.never_fits is not None:
            return False
        if now < max(record.backoff_until, record.preemptions.after):
            return False
        problem = self.problem()
        if problem:
            record.preemptions.note = problem
            return False
        order = record.policy.order
        if order is not None and order.preempt_never:
            return False
        return not any(p.preempt_never for p in self.mirror.members(record.key))

    def _units(self, preemptor: GangRecord) -> list[victims.VictimUnit]:
        """Running work that could make room: whole gangs (or their pods one by one where the group says
        so) and plain pods, of lower priority; a unit a budget forbids, or a gang being placed, is kept
        but marked not evictable (``explain`` says why)."""
        singles: list[PodRecord] = []
        gangs: dict[GangKey, list[PodRecord]] = {}
        for pod in self.mirror.running_pods():
            if pod.gang is None:
                if pod.priority < preemptor.turn.priority:
                    singles.append(pod)
            elif pod.gang != preemptor.key:
                gangs.setdefault(pod.gang, []).append(pod)
        units = [self._unit(messages.unit_pod(p), (p,), "") for p in singles]
        for gang, pods in gangs.items():
            record = self.registry.get(gang)
            policy = self.mirror.gang_policy(gang)[1]
            order = policy.order if policy is not None else None
            placing = messages.UNIT_BEING_PLACED if record is not None and record.admitted else ""
            if policy is None or (order is not None and not order.disruption_all):  # no gang: pod by pod
                units += [self._unit(messages.unit_member(p, gang), (p,), placing)
                          for p in pods if p.priority < preemptor.turn.priority]
            elif max(p.priority for p in pods) < preemptor.turn.priority:
                units.append(self._unit(messages.unit_gang(gang), tuple(pods), placing))
        return units

    def _unit(self, key: str, pods: tuple[PodRecord, ...], why_not: str) -> victims.VictimUnit:
        if not why_not:
            allowed, why = self.budgets(pods)
            why_not = "" if allowed else why
        return victims.VictimUnit(key, max(p.priority for p in pods), pods, not why_not, why_not)

    # ------------------------------------------------------------------ one in progress
    def follow(self, record: GangRecord, now: float) -> list[Effect]:
        """A preemption in progress: drop its place when the victims never end or it is never taken."""
        held = record.reservation
        if held is None or held.purpose is not Purpose.PREEMPTING:
            return []
        remaining = self.remaining(record)
        if remaining and now - held.since > PATIENCE_SECONDS:
            return self._fruitless_end(record, now, f"{len(remaining)} victim(s) still not gone after "
                                                    f"{PATIENCE_SECONDS:.0f}s")
        if not remaining and now - held.since > PATIENCE_SECONDS + SETTLE_SECONDS:
            return self._fruitless_end(record, now, "its members did not take the freed place")
        return []

    def _fruitless_end(self, record: GangRecord, now: float, why: str) -> list[Effect]:
        """Drop a preemption's place; the next one for this gang waits longer each time (a gang that
        kube-scheduler rejects for what the plan does not model never takes it)."""
        memo = record.preemptions
        memo.fruitless += 1
        memo.after = now + FAILED_BACKOFF_SECONDS * 2 ** min(memo.fruitless, 6)
        return self.attempts.end_drain(record, why)

    def remaining(self, record: GangRecord) -> list[PodRecord]:
        """Victims still in the cluster, terminating ones included (kube-scheduler counts them)."""
        uids = record.reservation.victim_uids if record.reservation is not None else frozenset()
        return [p for p in map(self.mirror.pod_by_uid, uids) if p is not None]

    def victims_pending(self, record: GangRecord) -> Verdict | None:
        """While its victims are still terminating a preempting gang is not admitted: its timeout would
        run while kube-scheduler, which counts them until they are gone, places none of its members."""
        if not record.preempting:
            return None
        remaining = self.remaining(record)
        if not remaining:
            return None
        return Verdict(Code.WAIT_RESOLVABLE, messages.victims_pending(record.key, remaining))

    def admitted(self, record: GangRecord) -> list[Effect]:
        """The gang is being admitted: a preemption it had completed."""
        if not record.preempting:
            return []
        record.preemptions.fruitless = 0
        return [Count("preemptions_completed")]

    def failed(self, gang: GangKey, failed: Sequence[tuple[PodRecord, str]]) -> list[Effect]:
        """The engine ran the gang's evictions; ``failed``: the pods not evicted and why."""
        if not failed:
            return []
        now = self.clock()
        record = self.registry.get(gang)
        message = messages.evictions_failed(gang, [(f"{p.namespace}/{p.name}", why) for p, why in failed],
                                            FAILED_BACKOFF_SECONDS)
        log.warning("%s", message)
        effects: list[Effect] = [Count("preemptions_failed"),
                                 Tell(self.mirror.members(gang), "Warning", "GangPreemptionFailed", message)]
        if record is None:
            return effects
        record.preemptions.after = now + FAILED_BACKOFF_SECONDS
        if record.preempting:
            record.last_message = message
            effects += self.attempts.end_drain(record, "evictions failed")
        return effects

    @staticmethod
    def partly_evicted(unit: victims.VictimUnit, left: Sequence[PodRecord], why: str) -> list[Effect]:
        """A victim unit is left part evicted (its retries spent): told on it, counted."""
        message = messages.victim_partly_evicted(unit.key, len(unit.pods) - len(left), len(unit.pods), why)
        log.warning("%s", message)
        return [Count("victims_partly_evicted"), Tell(list(left), "Warning", "GangPartiallyEvicted", message)]

    def wanted(self, gang: GangKey) -> bool:
        """Whether a preemption's evictions are still wanted (its gang waits for them)."""
        record = self.registry.get(gang)
        return record is not None and record.preempting

    def view(self, record: GangRecord) -> dict[str, Any] | None:
        """A preemption in progress, or why none was made, for ``explain``."""
        held = record.reservation
        if held is None or held.purpose is not Purpose.PREEMPTING:
            note = record.preemptions.note
            return {"note": note} if note else None
        return {"victims": [u.key for u in held.victims[:10]], "pods": len(held.victim_uids),
                "remaining": len(self.remaining(record)),
                "sinceSeconds": round(self.clock() - held.since, 1)}

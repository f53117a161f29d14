"""GangPreemption: gang-aware preemption for the head of the admission order (no I/O).

Owns: deciding when the head gang preempts (its plan fails on free capacity, it has a priority above
some running work, it may preempt, the eviction bound has room); building the victim units (a gang
evicted whole unless its group says pod by pod; a plain pod alone; gangs being placed and units a
PodDisruptionBudget forbids are never victims); reserving the place the victims free for the preemptor
(kept in the mirror like a draining reservation, so nothing else takes it as it frees); the evictions
to run, handed to the engine through ``take_evictions``; what happens when they fail; what ``explain``
shows of a preemption in progress. Must not: evict, call the API server or block (the engine runs the
evictions outside the lock and reports back through ``evictions_done``), or choose victims itself
(``victims.choose_victims`` does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from extender.cluster.model import Code, GangKey, PodRecord, TopologyProblem, Verdict
from extender.gangs import planner, victims
from extender.gangs.queue import GangQueue
from extender.gangs.state import GangState

log = logging.getLogger(__name__)

PREEMPTING = "preempting"

RETRY_SECONDS = 5.0
"""The least time between two victim searches for one gang, when the cluster changed in between."""

FAILED_BACKOFF_SECONDS = 30.0
"""After evictions failed (a budget refused midway, the API failed): no new preemption for this long."""

SETTLE_SECONDS = 60.0
"""Once every victim is gone, how long the preemptor keeps the freed place without being admitted."""

PATIENCE_SECONDS = 600.0
"""The longest a preemption waits for its victims to end (their grace periods) before it is dropped."""


@dataclass(frozen=True, slots=True)
class EvictionOrder:
    """Evictions the engine runs outside the lock for one preemptor (one unit after another)."""

    gang: GangKey
    units: tuple[victims.VictimUnit, ...]
    reason: str


def _budget_any(_pods: Sequence[PodRecord]) -> tuple[bool, str]:
    return True, ""


class GangPreemption(GangQueue):
    """Preemption for the head gang, over the admission order."""

    def __init__(self, *args: Any, budgets: Callable[[Sequence[PodRecord]], tuple[bool, str]] | None = None,
                 eviction_room: Callable[[int], bool] | None = None, preemption: bool = False,
                 preemption_problem: Callable[[], str] | None = None, **kwargs: Any) -> None:
        """``preemption_problem``: why no victim may be chosen now ("": they may), e.g. the mirror or
        the budgets not listed yet, or this replica not leading."""
        super().__init__(*args, **kwargs)
        self.preemption = preemption  # off until an evictor is wired (the composition turns it on)
        self.budgets = budgets or _budget_any
        self.eviction_room = eviction_room or (lambda _count: True)
        self.preemption_problem = preemption_problem or (lambda: "")
        self._fruitless: dict[GangKey, int] = {}  # preemptions in a row whose place the gang did not take
        self._evictions: list[EvictionOrder] = []
        self._victims: dict[GangKey, tuple[victims.VictimUnit, ...]] = {}
        self._searched: dict[GangKey, tuple[int, float]] = {}  # (mirror.generation, when) of the last search
        self._preempt_after: dict[GangKey, float] = {}
        self.counters.update(preemptions_started=0, preemptions_completed=0, preemptions_failed=0)

    # ------------------------------------------------------------------ the engine's side
    def take_evictions(self) -> list[EvictionOrder]:
        """The evictions decided since the last call (the engine runs them outside the lock)."""
        with self.lock:
            orders, self._evictions = self._evictions, []
            return orders

    def evictions_done(self, gang: GangKey, failed: Sequence[tuple[PodRecord, str]]) -> None:
        """The engine ran a gang's evictions; ``failed``: the pods not evicted and why."""
        if not failed:
            return
        with self.lock:
            now = self.clock()
            self._preempt_after[gang] = now + FAILED_BACKOFF_SECONDS
            self.counters["preemptions_failed"] += 1
            state = self._gangs.get(gang)
            shown = "; ".join(f"{p.namespace}/{p.name}: {why}" for p, why in failed[:3])
            message = (f"gang {gang}: {len(failed)} eviction(s) failed ({shown}); the place it reserved is "
                       f"dropped and it tries again in {FAILED_BACKOFF_SECONDS:.0f}s at the earliest")
            log.warning("%s", message)
            self.on_event(self.mirror.members(gang), "Warning", "GangPreemptionFailed", message)
            if state is not None and state.drain == PREEMPTING and state.admitted_at is None:
                state.last_message = message
                self._end_drain(state, "evictions failed")

    # ------------------------------------------------------------------ the queue's hooks
    def _try_preempt(self, state: GangState, now: float) -> bool:
        """Start a preemption for the head gang when it may and must preempt (True: started)."""
        gang = state.gang
        if not self._may_preempt(state, now):
            return False
        searched = self._searched.get(gang)
        if searched is not None and (searched[0] == self.mirror.generation or now - searched[1] < RETRY_SECONDS):
            return False
        self._searched[gang] = (self.mirror.generation, now)
        members = self.mirror.members(gang)
        placed = self.placed(members, state)
        needed = state.policy.min_count - len(placed) - len(self._waiting(state))
        pending = [p for p in members if p.uid not in state.holds and not self.mirror.placement(p.uid)]
        if needed <= 0 or len(pending) < needed or self._barrier_room(gang, needed) is not None:
            return False  # admission would refuse it even with room: nothing to evict for
        chosen = planner.pick_for_reservation(pending, needed)
        constraint = self.constraint_of(state.policy, members)
        if isinstance(constraint, TopologyProblem):
            return False
        units = self._units(state)
        choice = victims.choose_victims(chosen, pending, self.mirror.nodes.values(), self._free_for(gang),
                                        constraint, self.levels_for(constraint),
                                        self.placed_nodes(placed), units, state.priority)
        if isinstance(choice, str) or not choice.victims:
            if isinstance(choice, str) and choice != state.preempt_note:
                log.info("gang %s: no preemption: %s", gang, choice)
            state.preempt_note = choice if isinstance(choice, str) else ""
            return False
        pods = [p for unit in choice.victims for p in unit.pods]
        allowed, why = self.budgets(pods)
        if not allowed:  # each unit alone is allowed, together they are not: wait for the next search
            state.preempt_note = f"the chosen victims together exceed a disruption budget: {why}"
            return False
        if not self.eviction_room(len(pods)):
            state.preempt_note = f"evicting {len(pods)} pod(s) would exceed --max-evictions-per-minute"
            return False
        self._start_preemption(state, choice, now)
        return True

    def _prune(self) -> None:
        super()._prune()
        for kept in (self._searched, self._preempt_after, self._victims, self._fruitless):
            for gang in [g for g in kept if g not in self._gangs]:
                del kept[gang]

    def _may_preempt(self, state: GangState, now: float) -> bool:
        if not self.preemption or state.order_problem or state.never_fits is not None:
            return False
        if now < max(state.backoff_until, self._preempt_after.get(state.gang, 0.0)):
            return False
        problem = self.preemption_problem()
        if problem:
            state.preempt_note = problem
            return False
        order = state.policy.order
        if order is not None and order.preempt_never:
            return False
        return not any(p.preempt_never for p in self.mirror.members(state.gang))

    def _units(self, preemptor: GangState) -> list[victims.VictimUnit]:
        """Running work that could make room: whole gangs (or their pods one by one where the group says
        so) and plain pods, of lower priority; a unit a budget forbids, or a gang being placed, is kept
        but marked not evictable (``explain`` says why)."""
        singles: list[PodRecord] = []
        gangs: dict[GangKey, list[PodRecord]] = {}
        for pod in self.mirror.running_pods():
            if pod.gang is None:
                if pod.priority < preemptor.priority:
                    singles.append(pod)
            elif pod.gang != preemptor.gang:
                gangs.setdefault(pod.gang, []).append(pod)
        units = [self._unit(f"pod {p.namespace}/{p.name}", (p,), "") for p in singles]
        for gang, pods in gangs.items():
            state = self._gangs.get(gang)
            policy = self.mirror.gang_policy(gang)[1]
            order = policy.order if policy is not None else None
            placing = "" if state is None or state.admitted_at is None else "it is being placed"
            if policy is None or (order is not None and not order.disruption_all):  # no gang: pod by pod
                units += [self._unit(f"pod {p.namespace}/{p.name} of gang {gang}", (p,), placing)
                          for p in pods if p.priority < preemptor.priority]
            elif max(p.priority for p in pods) < preemptor.priority:
                units.append(self._unit(f"gang {gang}", tuple(pods), placing))
        return units

    def _unit(self, key: str, pods: tuple[PodRecord, ...], why_not: str) -> victims.VictimUnit:
        if not why_not:
            allowed, why = self.budgets(pods)
            why_not = "" if allowed else why
        return victims.VictimUnit(key, max(p.priority for p in pods), pods, not why_not, why_not)

    def _start_preemption(self, state: GangState, choice: victims.Preemption, now: float) -> None:
        gang = state.gang
        self.mirror.reserve(gang, choice.placement.plan.slots, draining=True, priority=state.priority)
        state.drain, state.drain_since = PREEMPTING, now
        self._victims[gang] = choice.victims
        state.victims = frozenset(p.uid for unit in choice.victims for p in unit.pods)
        names = ", ".join(unit.key for unit in choice.victims[:5]) + (", ..." if len(choice.victims) > 5 else "")
        reason = (f"gang {gang} (priority {state.priority}) does not fit on free capacity: preempting "
                  f"{len(state.victims)} pod(s) in {len(choice.victims)} unit(s) of lower priority: {names}")
        state.last_message = reason
        self._evictions.append(EvictionOrder(gang, choice.victims, reason))
        self.counters["preemptions_started"] += 1
        log.info("%s", reason)
        self.on_event(self.mirror.members(gang), "Normal", "GangPreempting", reason)

    def _follow_drain(self, state: GangState, now: float) -> None:
        """A preemption in progress: drop its place when the victims never end or it is never taken."""
        if state.drain != PREEMPTING or state.drain_since is None:
            super()._follow_drain(state, now)
            return
        remaining = self._remaining(state)
        if remaining and now - state.drain_since > PATIENCE_SECONDS:
            self._fruitless_end(state, now, f"{len(remaining)} victim(s) still not gone after {PATIENCE_SECONDS:.0f}s")
        elif not remaining and now - state.drain_since > PATIENCE_SECONDS + SETTLE_SECONDS:
            self._fruitless_end(state, now, "its members did not take the freed place")

    def _fruitless_end(self, state: GangState, now: float, why: str) -> None:
        """Drop a preemption's place; the next one for this gang waits longer each time (a gang that
        kube-scheduler rejects for what the plan does not model never takes it)."""
        count = self._fruitless[state.gang] = self._fruitless.get(state.gang, 0) + 1
        self._preempt_after[state.gang] = now + FAILED_BACKOFF_SECONDS * 2 ** min(count, 6)
        self._end_drain(state, why)

    def _remaining(self, state: GangState) -> list[PodRecord]:
        """Victims still in the cluster, terminating ones included (kube-scheduler counts them)."""
        return [p for p in map(self.mirror.pod_by_uid, state.victims) if p is not None]

    def victims_pending(self, state: GangState) -> Verdict | None:
        """While its victims are still terminating a preempting gang is not admitted: its timeout would
        run while kube-scheduler, which counts them until they are gone, places none of its members."""
        if state.drain != PREEMPTING:
            return None
        remaining = self._remaining(state)
        if not remaining:
            return None
        return Verdict(Code.WAIT_RESOLVABLE, f"gang {state.gang} waits for {len(remaining)} preempted pod(s) to "
                                             f"end, e.g. {remaining[0].namespace}/{remaining[0].name}")

    def order_wanted(self, gang: GangKey) -> bool:
        """Whether a preemption's evictions are still wanted (its gang waits for them)."""
        with self.lock:
            state = self._gangs.get(gang)
            return state is not None and state.drain == PREEMPTING and state.admitted_at is None

    def _note_admitted(self, state: GangState, now: float) -> None:
        if state.drain == PREEMPTING:
            self.counters["preemptions_completed"] += 1
            self._fruitless.pop(state.gang, None)
        self._victims.pop(state.gang, None)
        state.victims = frozenset()
        super()._note_admitted(state, now)

    def _preemption_view(self, state: GangState) -> dict[str, Any] | None:
        if state.drain != PREEMPTING:
            return {"note": state.preempt_note} if state.preempt_note else None
        units = self._victims.get(state.gang, ())
        return {"victims": [u.key for u in units[:10]], "pods": len(state.victims),
                "remaining": len(self._remaining(state)),
                "sinceSeconds": round(self.clock() - (state.drain_since or self.clock()), 1)}


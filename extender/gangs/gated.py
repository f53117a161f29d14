"""FilterGate: the filter-gated mode (``--bind-mode filter-gated``), where another binder binds (no I/O).

kube-scheduler lets one extender bind; where that is another extender (GPU sharing, storage) or its
own binder, gang-extender gates at filter only: a member passes once its gang is admitted, and then
only to one reserved place.

Owns: each admitted member's *claim* on one reserved place (its filter is answered with that node
alone; a place is left for it only beside the places of the other members still to be bound, matched
slot by slot, so two members are never sent to one place); following the binds others make (bound
members are counted before the clock is read: each new one moves the attempt's deadline, minCount bound
completes the gang, also after a timeout); holding off a timeout while a member sent to its place in the
last ``hold_seconds`` may still be being bound (at most that long past the deadline); and a gang left
*partly bound* at its deadline (a Binding cannot be undone): a ``GangPartiallyBound`` Warning and the
counter ``partially_bound`` (per attempt), the places members were sent to and never bound avoided by the
next plans, then as any timeout: reservation dropped, back-off, the rest planned again around the bound
members. Must not: bind or call the API server; in the barrier mode (the default) every method here
leaves the ledger as it was.
"""

from __future__ import annotations

import logging
from typing import Any

from extender.cluster.fit import shortfall
from extender.cluster.model import GangKey, GangPhase, GangStatus, PodRecord
from extender.cluster.quantity import CPU, Resources
from extender.gangs.expiry import MAX_AVOIDED
from extender.gangs.preempting import GangPreemption
from extender.gangs.state import GangState, Hold

log = logging.getLogger(__name__)

FOLLOW_INTERVAL = 0.05
"""Seconds between two walks over admitted gangs to count their bound members."""


def _size(resources: Resources) -> tuple[int, int]:
    return resources.get(CPU, 0), resources.get("memory", 0)


def place_left(slots: list[Resources], others: list[Resources], requests: Resources) -> bool:
    """Whether one of a node's reserved ``slots`` holds ``requests`` once the ``others`` (the requests of
    members that claimed places on it) each took the smallest slot that holds them, largest first."""
    left = list(slots)
    for other in sorted(others, key=_size, reverse=True):
        holding = [kept for kept in left if shortfall(other, kept) is None]
        if holding:
            left.remove(min(holding, key=_size))
    return any(shortfall(requests, kept) is None for kept in left)


class FilterGate(GangPreemption):
    """The gated mode's claims and bind following, over the preemption layer."""

    def __init__(self, *args: Any, filter_gated: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filter_gated = filter_gated
        self._followed_at = float("-inf")
        self.counters.update(partially_bound=0)

    # ---------------------------------------------------------------------------- claims
    def claim(self, gang: GangKey, pod: PodRecord, fitting: list[str]) -> list[str]:
        """Of ``fitting`` (requested nodes where the member fits in its gang's reservation, in the
        request's order), where its filter may send it: in the barrier mode all of them; gated, one node
        where a reserved place for it is left beside the places of the other members still to be bound
        (the one it claimed before, while that is offered and holds it, else the first such), now
        claimed; none (or a pod the pod watch has not delivered: its claim could not be counted): []."""
        if not self.filter_gated:
            return fitting
        with self.lock:
            state = self._gangs.get(gang)
            if state is None or state.admitted_at is None or self.mirror.pod_by_uid(pod.uid) is None:
                return []
            slots = self.mirror.reserved_slots(gang)
            held = state.claims[pod.uid][0] if pod.uid in state.claims else None
            for node in ([held] if held in fitting else []) + [n for n in fitting if n != held]:
                others = [other.requests for uid, (at, _) in state.claims.items()
                          if at == node and uid != pod.uid and (other := self._claimant(uid)) is not None]
                if place_left([kept for at, kept in slots if at == node], others, pod.requests):
                    state.claims[pod.uid] = (node, self.clock())  # when it was last sent there
                    return [node]
            return []

    def _claimant(self, uid: str) -> PodRecord | None:
        """The member whose claim still holds a place: it exists, is not finished and is not bound yet."""
        record = self.mirror.pod_by_uid(uid)
        return record if record is not None and not record.terminal and not self.mirror.placement(uid) else None

    # ------------------------------------------------------------------------ following binds
    def sweep(self, min_interval: float = 0.0, *, release: bool = False) -> list[Any]:
        if self.filter_gated:  # binds seen before the clock is read: a bind made in time counts in time
            with self.lock:
                now = self.clock()
                full = min_interval <= 0
                if full or now - self._followed_at >= max(min_interval, FOLLOW_INTERVAL):
                    self._followed_at = now
                    # A filter's sweep follows the gangs the binder bound a member of since the last one;
                    # the tick's (min_interval 0) every gang, for what no bind shows (a lowered minCount).
                    bound = self.mirror.take_bound_gangs()
                    # an admitted gang; or one that timed out, whose members passed filter and may still bind
                    for state in [s for s in self._busy_states() if (s.admitted_at is not None or s.timeouts)
                                  and (full or s.gang in bound)]:
                        self._follow_binds(state, now)
        return super().sweep(min_interval, release=release)

    def expire_if_due(self, gang: GangKey) -> None:
        """Gated, a gang past its deadline is not timed out while a member its filter sent to a claimed
        place in the last ``hold_seconds`` may still be being bound (its place would go to others), but
        for no longer than ``hold_seconds`` past the deadline."""
        if self.filter_gated:
            with self.lock:
                state = self._gangs.get(gang)
                now = self.clock()
                if state is not None and state.deadline is not None and state.deadline <= now:
                    sent = max((at for uid, (_, at) in state.claims.items() if self._claimant(uid)), default=None)
                    if sent is not None and now < min(sent, state.deadline) + self.hold_seconds:
                        return
        super().expire_if_due(gang)

    def _follow_binds(self, state: GangState, now: float) -> None:
        """Count the gang's bound members: minCount completes it; admitted, more than last time moves its
        deadline (the binder is making progress)."""
        members = self.mirror.members(state.gang)
        placed = self.placed(members, state)
        if len(placed) >= state.policy.min_count:
            self._complete(state, placed, members)
        elif state.admitted_at is not None and len(placed) > state.bound_seen:
            state.bound_seen = len(placed)
            state.deadline = self._due_by(now + self.timeout_for(state.policy))
            state.last_message = (f"admitted: {len(placed)}/{state.policy.min_count} members bound by the binder "
                                  "(filter-gated mode)")

    def _complete(self, state: GangState, placed: list[PodRecord], members: list[PodRecord]) -> None:
        gang = state.gang
        self._reset(state)
        state.timeouts, state.avoid, state.waiting_since = 0, frozenset(), None
        state.completed += 1
        state.last_message = f"quorum reached: {len(placed)} members bound by the binder (filter-gated mode)"
        self.counters["completed"] += 1
        log.info("gang %s: %s", gang, state.last_message)
        self.on_event(placed, "Normal", "GangBound", f"gang {gang}: {state.last_message}")
        self.on_status(gang, GangStatus(GangPhase.SCHEDULED, state.last_message, len(placed), state.policy.min_count))
        self.on_wake([p for p in members if not self.mirror.placement(p.uid)])  # members beyond minCount

    def _timeout_message(self, state: GangState, waiting: list[Hold]) -> str:
        if not self.filter_gated:
            return super()._timeout_message(state, waiting)
        members = self.mirror.members(state.gang)
        placed = self.placed(members, state)
        needed = state.policy.min_count
        stuck = self._avoid_stuck_claims(state)
        message = (f"gang {state.gang} timed out after {self.timeout_for(state.policy):g}s with {len(placed)} of "
                   f"{needed} members bound; released its reservation and backing off") + self._judge_offers(state)
        if stuck:
            shown = ", ".join(sorted(stuck)[:5])
            message += f"; members sent to {shown} were never bound there: the next plans avoid them"
        if 0 < len(placed) < needed:
            self.counters["partially_bound"] += 1
            partial = (f"gang {state.gang} is partly bound: {len(placed)} of {needed} members are bound and the "
                       f"rest were not bound within {self.timeout_for(state.policy):g}s (filter-gated mode has no "
                       "bind-time barrier, and a Binding cannot be undone); the rest are planned again around "
                       "the bound members after the back-off")
            log.warning("%s", partial)
            self.on_event(members, "Warning", "GangPartiallyBound", partial)
        return message

    def _avoid_stuck_claims(self, state: GangState) -> set[str]:
        """At a timeout: the places members were sent to and never bound (a later extender or the binder
        refuses them for what gang-extender does not model) join the nodes the next plans avoid, as
        ``_judge_offers`` does for nodes never offered. Returns them."""
        stuck = {node for uid, (node, _) in state.claims.items() if self._claimant(uid)}
        if stuck:
            state.avoid = (state.avoid | stuck) if len(state.avoid) < MAX_AVOIDED else frozenset(stuck)
        return stuck

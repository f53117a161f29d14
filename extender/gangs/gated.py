"""FilterGate: the filter-gated mode (``--bind-mode filter-gated``), where another binder binds (no I/O).

kube-scheduler lets one extender bind; where that is another extender (GPU sharing, storage) or its
own binder, gang-extender gates at filter only: a member passes once its gang is admitted, and then
only to one reserved place.

Owns: each admitted member's *claim* on one reserved place (its filter is answered with that node
alone, so two members never race for one place and none is sent outside the reservation while a place
is left); following the binds others make (each new one moves the attempt's deadline; minCount bound
completes the gang); and a gang left *partly bound*: at its deadline with some but fewer than minCount
members bound (a Binding cannot be undone), a ``GangPartiallyBound`` Warning and the counter
``partially_bound``, then as any timeout: the reservation dropped, back-off, and the rest planned
again around the bound members. Must not: bind or call the API server; in the barrier mode (the
default) every method here leaves the ledger as it was.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from extender.cluster.fit import shortfall
from extender.cluster.model import GangKey, GangPhase, GangStatus, PodRecord
from extender.gangs.preempting import GangPreemption
from extender.gangs.state import GangState, Hold

log = logging.getLogger(__name__)

FOLLOW_INTERVAL = 0.05
"""Seconds between two walks over admitted gangs to count their bound members."""


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
        request's order), where its filter may send it: in the barrier mode all of them; gated, the one
        it claimed before while that is still offered, else the first whose reserved places for its
        requests are not all claimed by other members still to be bound, now claimed; none: [] ."""
        if not self.filter_gated:
            return fitting
        with self.lock:
            state = self._gangs.get(gang)
            if state is None or state.admitted_at is None:
                return []
            mine = state.claims.get(pod.uid)
            if mine is not None and mine in fitting:
                return [mine]
            slots = self.mirror.reserved_slots(gang)
            taken = Counter(node for uid, node in state.claims.items() if uid != pod.uid and self._unbound(uid))
            for node in fitting:
                room = sum(1 for at, kept in slots if at == node and shortfall(pod.requests, kept) is None)
                if room > taken[node]:
                    state.claims[pod.uid] = node
                    return [node]
            return []

    def _unbound(self, uid: str) -> bool:
        """Whether the member exists and is not bound yet (its claim still holds a place)."""
        return self.mirror.pod_by_uid(uid) is not None and not self.mirror.placement(uid)

    # ------------------------------------------------------------------------ following binds
    def sweep(self, min_interval: float = 0.0, *, release: bool = False) -> list[Any]:
        releases = super().sweep(min_interval, release=release)
        if self.filter_gated:
            with self.lock:
                now = self.clock()
                if now - self._followed_at >= max(min_interval, FOLLOW_INTERVAL):
                    self._followed_at = now
                    for state in [s for s in self._gangs.values() if s.admitted_at is not None]:
                        self._follow_binds(state, now)
        return releases

    def _follow_binds(self, state: GangState, now: float) -> None:
        """Count the admitted gang's bound members: more than last time moves its deadline (the binder
        is making progress); minCount completes it."""
        members = self.mirror.members(state.gang)
        placed = self.placed(members, state)
        if len(placed) >= state.policy.min_count:
            self._complete(state, placed, members)
        elif len(placed) > state.bound_seen:
            state.bound_seen = len(placed)
            state.deadline = now + self.timeout_for(state.policy)
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
        message = (f"gang {state.gang} timed out after {self.timeout_for(state.policy):g}s with {len(placed)} of "
                   f"{needed} members bound; released its reservation and backing off") + self._judge_offers(state)
        if placed:
            self.counters["partially_bound"] += 1
            partial = (f"gang {state.gang} is partly bound: {len(placed)} of {needed} members are bound and the "
                       f"rest were not bound within {self.timeout_for(state.policy):g}s (filter-gated mode has no "
                       "bind-time barrier, and a Binding cannot be undone); the rest are planned again around "
                       "the bound members after the back-off")
            log.warning("%s", partial)
            self.on_event(members, "Warning", "GangPartiallyBound", partial)
        return message

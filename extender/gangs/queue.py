"""GangQueue: the order in which waiting gangs are admitted, and draining reservations (no I/O).

Owns: the waiting queue (complete gangs not admitted, by priority then by how long they have waited);
admitting the gangs ahead of a gang before that gang may plan (so a younger gang never takes capacity
an older gang of equal or higher priority could use now; it may take what the older one cannot use:
backfill); the draining reservation of the head gang once it has waited longer than its maximum wait
(capacity on the nodes of its plan is reserved for it as it frees up; other work may use only what it
does not need); what ``explain`` shows of a gang's place in the order; the wait-time histogram. Must
not: call the API server, block, or plan a gang's admission itself (``ledger.admission`` does).

A draining reservation is kept in the mirror like an admitted gang's reservation, for a gang that is
not admitted: every other pod's filter and bind subtract it, and the gang's own admission plan counts
it as room, so the gang is admitted as soon as enough of it has freed up.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Sequence
from typing import Any

from extender.cluster.model import Code, GangKey, GangPolicy, NodeRecord, PodRecord, Verdict
from extender.cluster.quantity import CPU, Resources, add_into
from extender.gangs import order, planner, topology
from extender.gangs.expiry import GangExpiry
from extender.gangs.state import GangState

log = logging.getLogger(__name__)

MAX_AHEAD = 16
"""Gangs ahead of a gang admitted (when they fit) before it plans, per filter; the sweep does the same."""

ORDER_INTERVAL = 0.25
"""Seconds between two sweeps' checks of the draining reservation (started or ended as the head gang
changes). Sweeps never admit a gang: admission happens on a member's filter, so that what a filter
answers depends on the requests before it, not on a timer (a replay gives the recorded replies)."""

DRAIN_PATIENCE_SECONDS = 900.0
"""The longest a draining reservation is held without its gang being admitted; as long a rest follows."""

DISCOVER_INTERVAL = 1.0
"""Seconds between two walks over the mirror's gangs for complete gangs no filter request showed yet."""

MAX_AHEAD_SHOWN = 5
"""Gangs ahead that ``explain`` lists by name."""

DRAINING = "draining"


def _queue_key(state: GangState) -> tuple[int, float, str]:
    return order.queue_key(state.priority, state.waiting_since or 0.0, state.name)


class GangQueue(GangExpiry):
    """The admission order and draining reservations, over the clock and the book."""

    def __init__(self, *args: Any, max_wait_seconds: float = 300.0,
                 serves: Callable[[PodRecord], bool] | None = None, **kwargs: Any) -> None:
        """``serves``: whether a pod is scheduled through this extender (its schedulerName): only gangs
        with such pods waiting join the order without a filter request (``_discover``)."""
        super().__init__(*args, **kwargs)
        self.max_wait_seconds = max_wait_seconds
        self.serves = serves or (lambda _pod: True)
        self._discovered_at = float("-inf")
        self._drain_after: dict[GangKey, float] = {}  # no new drain for the gang before then
        self.waits = order.WaitHistogram()
        self._ordering = False  # inside an ordering pass: admission plans without starting another
        self._ordered_at = float("-inf")
        self.counters.update(drains_started=0, drains_ended=0)

    def admission(self, gang: GangKey, policy: GangPolicy, pod: PodRecord | None = None) -> Verdict:
        raise NotImplementedError  # the ledger's

    # ------------------------------------------------------------------------------- the queue
    def _take_turn(self, state: GangState, members: Sequence[PodRecord], now: float) -> None:
        """``state``'s gang is complete and not admitted: note it waits, and (outside a pass) admit the
        gangs ahead of it that fit now, before it plans on what they leave."""
        self._join(state, members, now)
        if not self._ordering:
            self._order_pass(now, stop_at=state)

    def _join(self, state: GangState, members: Sequence[PodRecord], now: float) -> None:
        """The gang waits from now (unless it already did): its priority, and any problem with it told."""
        if state.waiting_since is None:
            state.waiting_since = now
        self._mark_busy(state)
        state.priority, problem = order.gang_priority(state.policy.order, members)
        own = state.policy.order.problem if state.policy.order is not None else ""
        state.order_problem = "; ".join(p for p in (own, problem) if p)
        if state.order_problem and state.order_problem != state.order_problem_told:
            state.order_problem_told = state.order_problem
            self.on_event(list(members), "Warning", "GangOrderProblem", f"gang {state.gang}: {state.order_problem}")

    def _discover(self, now: float) -> None:
        """Complete gangs with a member kube-scheduler tried and could not place (its PodScheduled
        condition) join the order even without a filter request: kube-scheduler calls the extender only
        with nodes its own filters passed, so a member that fits no node as the cluster stands (the case
        for a gang that must preempt or drain) never reaches it. Members not tried yet do not count: the
        order follows what kube-scheduler has tried, not what is queued behind it."""
        if now - self._discovered_at < DISCOVER_INTERVAL:
            return
        self._discovered_at = now
        for gang in self.mirror.tried_gangs():
            state = self._gangs.get(gang)
            if state is not None and (state.waiting_since is not None or state.admitted_at is not None
                                      or state.never_fits is not None):
                continue
            policy = self.mirror.gang_policy(gang)[1]
            if policy is None or self.mirror.member_count(gang) < policy.min_count:
                continue
            members = self.mirror.members(gang)
            if not any(p.unschedulable and self.serves(p) and not self.mirror.placement(p.uid) for p in members):
                continue  # no member kube-scheduler tried and could not place
            if len(self.placed(members, state)) >= policy.min_count:
                continue  # running: a replacement member needs no admission
            if state is None:
                state = self._gangs[gang] = GangState(gang, policy)
            self._join(state, members, now)

    def _candidates(self) -> list[GangState]:
        """Waiting gangs, unordered (a gang that lost its quorum leaves the queue)."""
        waiting = []
        for state in self._busy_states():
            if state.admitted_at is not None or state.waiting_since is None or state.never_fits is not None:
                continue
            if self.mirror.member_count(state.gang) < state.policy.min_count:
                state.waiting_since = None
                continue
            waiting.append(state)
        return waiting

    def _queue(self) -> list[GangState]:
        """Waiting gangs in admission order."""
        return sorted(self._candidates(), key=_queue_key)

    def _order_pass(self, now: float, stop_at: GangState | None = None) -> None:
        """Admit, in order, the waiting gangs that fit now (up to ``stop_at``), then start or end drains.
        Runs on every filter of a waiting gang's member: it picks the first ``MAX_AHEAD`` and the head
        without sorting the whole queue (thousands of gangs may wait)."""
        self._ordering = True
        try:
            for state in heapq.nsmallest(MAX_AHEAD, self._candidates(), key=_queue_key):
                if state is stop_at:
                    break
                if now >= state.backoff_until:
                    self.admission(state.gang, state.policy)
        finally:
            self._ordering = False
        if self._update_drains(now, planning=stop_at):
            self._ordered_at = now  # else the head's drain or preemption is left to the sweep's next pass

    def sweep(self, min_interval: float = 0.0, *, release: bool = False) -> list[Any]:
        releases = super().sweep(min_interval, release=release)
        with self.lock:
            now = self.clock()
            if now - self._ordered_at >= max(min_interval, ORDER_INTERVAL):
                self._ordered_at = now
                self._prune()
                self._discover(now)
                self._update_drains(now)
        return releases

    def _note_admitted(self, state: GangState, now: float) -> None:
        """The gang was admitted: its wait is over (a drain it had became its reservation)."""
        if state.waiting_since is not None:
            self.waits.observe(state.priority, now - state.waiting_since)
        if state.drain:
            state.drain, state.drain_since = "", None
            self.counters["drains_ended"] += 1

    # ---------------------------------------------------------------- the barrier's budget
    def held_demand(self) -> int:
        """Binds that gangs may hold at once: held now, plus reserved members still to come."""
        with self.lock:
            return sum(len(self._waiting(s)) + (self.mirror.reserved_count(s.gang) if s.admitted_at is not None else 0)
                       for s in self._busy_states())

    def _barrier_room(self, gang: GangKey, needed: int) -> Verdict | None:
        """None when the gang's ``needed`` held binds fit the thread budget beside gangs in flight."""
        most = self.max_release_members
        if most is not None and needed > most:
            return Verdict(Code.WAIT_UNRESOLVABLE,
                           f"gang {gang} would release {needed} members at once but a release written on the "
                           f"leader's Lease holds at most {most}: raise --release-intents-max-bytes")
        limit = self.max_held_binds
        if limit is None:
            return None
        if needed > limit:
            return Verdict(Code.WAIT_UNRESOLVABLE,
                           f"gang {gang} would hold {needed} binds at once but gang-extender can hold at most "
                           f"{limit}: raise --threads")
        in_flight = self.held_demand()
        if in_flight + needed > limit:
            return Verdict(Code.WAIT_RESOLVABLE,
                           f"waiting for a barrier slot for gang {gang}: gangs in flight may hold {in_flight} "
                           f"binds; {needed} more would exceed the limit of {limit} (--threads)")
        return None

    # ------------------------------------------------------------------------------ draining
    def _update_drains(self, now: float, planning: GangState | None = None) -> bool:
        """Only the head of the queue drains, and only once it has waited longer than its maximum wait.
        A head that is ``planning`` (a member's filter is admitting it) neither starts a preemption nor
        a drain here: its own plan comes first, and the sweep's pass takes it up if that plan fails
        (searching victims for every gang that would fit anyway was a third of the filter's time with
        thousands of small gangs). Returns False when it left the head so."""
        head = min(self._candidates(), key=_queue_key, default=None)
        for state in self._busy_states():
            if state.drain and state is not head and state.admitted_at is None:
                self._end_drain(state, "it is no longer first in the admission order")
        if head is None or head.waiting_since is None:
            return True
        if head.drain:
            self._follow_drain(head, now)
        elif head is planning:
            return False
        elif self._try_preempt(head, now):
            return True
        elif (now - head.waiting_since >= order.max_wait(head.policy.order, self.max_wait_seconds)
              and now >= self._drain_after.get(head.gang, 0.0)):
            self._start_drain(head, now)
        return True

    def _prune(self) -> None:
        """Forget what is kept per gang for gangs the ledger no longer tracks."""
        for gang in [g for g in self._drain_after if g not in self._gangs]:
            del self._drain_after[gang]

    def _try_preempt(self, state: GangState, now: float) -> bool:
        """Start a preemption for the head gang (the preemption layer's; here: never)."""
        return False

    def _follow_drain(self, state: GangState, now: float) -> None:
        """A draining reservation ends when its gang is admitted, leaves the head, or has held it for
        ``DRAIN_PATIENCE_SECONDS`` without being admitted (a gang kube-scheduler keeps rejecting for
        what the plan does not model would otherwise hold the place for ever); then it rests as long."""
        since = state.drain_since
        if state.drain == DRAINING and since is not None and now - since > DRAIN_PATIENCE_SECONDS:
            self._drain_after[state.gang] = now + DRAIN_PATIENCE_SECONDS
            self._end_drain(state, f"not admitted after {DRAIN_PATIENCE_SECONDS:.0f}s of draining")

    def _start_drain(self, state: GangState, now: float) -> None:
        gang = state.gang
        members = self.mirror.members(gang)
        placed = self.placed(members, state)
        needed = state.policy.min_count - len(placed) - len(self._waiting(state))
        pending = [p for p in members if p.uid not in state.holds and not self.mirror.placement(p.uid)]
        if needed <= 0 or not pending:
            return
        chosen = planner.pick_for_reservation(pending, needed)
        capacity = self._capacity_for(gang)
        placement = topology.place_gang(chosen, pending, self.mirror.nodes.values(), capacity,
                                        lambda node: capacity(node).get(CPU, 0), state.constraint,
                                        self.levels_for(state.constraint), bound_nodes=self.placed_nodes(placed))
        if not placement.plan.complete:
            return  # not even an empty cluster (less other gangs' reservations) holds it: nothing to drain
        self.mirror.reserve(gang, placement.plan.slots, draining=True, priority=state.priority)
        state.drain, state.drain_since = DRAINING, now
        nodes = sorted(placement.plan.per_node())
        waited = now - (state.waiting_since or now)
        state.last_message = (f"waited {waited:.0f}s, longer than its maximum wait: capacity freeing up on "
                              f"{len(nodes)} node(s) is reserved for it as it frees (a draining reservation)")
        self.counters["drains_started"] += 1
        log.info("gang %s: %s", gang, state.last_message)
        self.on_event(members, "Normal", "GangDraining", f"gang {gang} {state.last_message}: "
                      f"{', '.join(nodes[:10])}{', ...' if len(nodes) > 10 else ''}")

    def _end_drain(self, state: GangState, why: str) -> None:
        self.mirror.reserve(state.gang, ())
        state.drain, state.drain_since = "", None
        self.counters["drains_ended"] += 1
        log.info("gang %s: draining reservation dropped: %s", state.gang, why)
        self._capacity_freed()

    def _capacity_for(self, gang: GangKey) -> Callable[[NodeRecord], Resources]:
        """A node's allocatable less other gangs' reservations: what the gang could have once the pods
        running there end."""
        def capacity(node: NodeRecord) -> Resources:
            room = self.mirror.free(node.name, gang)
            add_into(room, self.mirror.used(node.name))
            return room
        return capacity

    # ------------------------------------------------------------------------------- metrics
    def order_stats(self) -> tuple[int, int, list[tuple[int, list[tuple[str, int]], float]]]:
        """(gangs waiting their turn, gangs draining, the wait histogram per priority)."""
        with self.lock:
            queue = self._queue()
            return len(queue), sum(1 for s in queue if s.drain), self.waits.snapshot()

    # ------------------------------------------------------------------------------- explain
    def order_view(self, gang: GangKey) -> dict[str, Any] | None:
        """The gang's place in the admission order for ``explain`` (None: it is not waiting)."""
        with self.lock:
            state = self._gangs.get(gang)
            if state is None or state.admitted_at is not None or state.waiting_since is None:
                return None
            queue = self._queue()
            if state not in queue:
                return None
            now = self.clock()
            position = queue.index(state)
            ahead = [{"gang": str(s.gang), "priority": s.priority,
                      "waitingSeconds": round(now - (s.waiting_since or 0))}
                     for s in queue[:min(position, MAX_AHEAD_SHOWN)]]
            view: dict[str, Any] = {
                "position": position + 1, "of": len(queue), "priority": state.priority,
                "waitingSeconds": round(now - state.waiting_since, 1),
                "maxWaitSeconds": order.max_wait(state.policy.order, self.max_wait_seconds),
                "ahead": ahead,
            }
            if state.order_problem:
                view["problem"] = state.order_problem
            if state.drain == DRAINING:
                view["draining"] = self._drain_progress(state)
            preemption = self._preemption_view(state)
            if preemption:
                view["preemption"] = preemption
            return view

    def _preemption_view(self, state: GangState) -> dict[str, Any] | None:
        """A preemption in progress, or why none was made (the preemption layer's; here: none)."""
        return None

    def _drain_progress(self, state: GangState) -> dict[str, Any]:
        """A draining reservation: its nodes, how many members it is for, since when. How many fit in it
        now is planned by ``explanation.explain`` after the lock is released, from ``drain_to_place``."""
        slots = self.mirror.reserved_slots(state.gang)
        return {"nodes": sorted({name for name, _ in slots})[:20], "members": len(slots),
                "sinceSeconds": round(self.clock() - (state.drain_since or self.clock()), 1)}

    def drain_to_place(self, gang: GangKey) -> tuple[tuple[PodRecord, ...], tuple[NodeRecord, ...]]:
        """For ``explain``: the unplaced members a draining reservation is for (as many as its slots) and
        the nodes it holds places on; empty when the gang is not draining."""
        with self.lock:
            state = self._gangs.get(gang)
            if state is None or state.drain != DRAINING:
                return (), ()
            slots = self.mirror.reserved_slots(gang)
            nodes = sorted({name for name, _ in slots})
            members = [p for p in self.mirror.members(gang) if not self.mirror.placement(p.uid)][:len(slots)]
            return tuple(members), tuple(self.mirror.nodes[n] for n in nodes if n in self.mirror.nodes)

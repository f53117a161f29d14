"""GangQueue: the order in which waiting gangs are admitted, and draining reservations (no I/O).

Owns: the waiting queue (complete gangs not admitted, by priority then by how long they have waited);
which gangs come before a gang (the ledger admits those that fit first, so a younger gang never takes
capacity an older gang of equal or higher priority could use now; it may take what the older one
cannot use: backfill); gangs found from pods kube-scheduler marked Unschedulable; the draining
reservation of the head gang once it has waited longer than its maximum wait (capacity on the nodes of
its plan is reserved for it as it frees up; other work may use only what it does not need); what
``explain`` shows of a gang's place in the order; the wait-time histogram. Must not: plan a gang's
admission (``admission`` does), start a preemption (``preemption`` does), call the API server or block.

A draining reservation is kept in the mirror like an admitted gang's reservation, for a gang that is
not admitted: every other pod's filter and bind subtract it, and the gang's own admission plan counts
it as room, so the gang is admitted as soon as enough of it has freed up.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Sequence
from typing import Any

from extender.cluster.mirror import ClusterMirror
from extender.gangs import domains, order, planner
from extender.gangs.attempts import Attempts
from extender.gangs.effects import Count, Effect, Reserve, Tell
from extender.gangs.placement import GangPlacement
from extender.gangs.record import GangRecord, Purpose, Reservation
from extender.gangs.registry import GangRegistry
from extender.gangs.settings import GangSettings
from extender.model import messages
from extender.model.cluster import NodeRecord, PodRecord
from extender.model.gang import GangKey
from extender.model.quantity import CPU, Resources, add_into

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


def _queue_key(record: GangRecord) -> tuple[int, float, str]:
    return order.queue_key(record.turn.priority, record.turn.waiting_since or 0.0, record.name)


class GangQueue:
    """The admission order and draining reservations."""

    def __init__(self, registry: GangRegistry, placement: GangPlacement, attempts: Attempts, settings: GangSettings,
                 clock: Callable[[], float], serves: Callable[[PodRecord], bool] | None = None) -> None:
        """``serves``: whether a pod is scheduled through this extender (its schedulerName): only gangs
        with such pods waiting join the order without a filter request (``discover``)."""
        self.registry = registry
        self.placement = placement
        self.mirror: ClusterMirror = placement.mirror
        self.attempts = attempts
        self.settings = settings
        self.clock = clock
        self.serves = serves or (lambda _pod: True)
        self.waits = order.WaitHistogram()
        self._discovered_at = float("-inf")
        self._ordered_at = float("-inf")

    # ------------------------------------------------------------------------------- the queue
    def join(self, record: GangRecord, members: Sequence[PodRecord], now: float) -> list[Effect]:
        """The gang is complete and not admitted: it waits from now (unless it already did); its priority,
        and any problem with it told."""
        turn = record.turn
        if turn.waiting_since is None:
            turn.waiting_since = now
        self.registry.mark_waiting(record)
        turn.priority, problem = order.gang_priority(record.policy.order, members)
        own = record.policy.order.problem if record.policy.order is not None else ""
        turn.problem = "; ".join(p for p in (own, problem) if p)
        if turn.problem and turn.problem != turn.problem_told:
            turn.problem_told = turn.problem
            return [Tell(list(members), "Warning", "GangOrderProblem", messages.gang_said(record.key, turn.problem))]
        return []

    def _candidates(self) -> list[GangRecord]:
        """Waiting gangs, unordered (a gang that lost its quorum leaves the queue)."""
        waiting = []
        for record in self.registry.waiting_turn():
            if record.admitted or record.plans.never_fits is not None:
                continue
            if self.mirror.member_count(record.key) < record.policy.min_count:
                record.turn.waiting_since = None
                continue
            waiting.append(record)
        return waiting

    def ordered(self) -> list[GangRecord]:
        """Waiting gangs in admission order."""
        return sorted(self._candidates(), key=_queue_key)

    def head(self) -> GangRecord | None:
        return min(self._candidates(), key=_queue_key, default=None)

    def ahead(self, of: GangRecord | None, now: float) -> list[GangRecord]:
        """The gangs to admit (when they fit) before ``of`` plans: the first ``MAX_AHEAD`` in the order
        before it, not backing off. Picked without sorting the whole queue (thousands may wait)."""
        first = heapq.nsmallest(MAX_AHEAD, self._candidates(), key=_queue_key)
        cut = first.index(of) if of in first else len(first)
        return [record for record in first[:cut] if now >= record.backoff_until]

    def admitted(self, record: GangRecord, now: float) -> list[Effect]:
        """The gang is being admitted: its wait is over (a drain it had becomes its reservation)."""
        if record.turn.waiting_since is not None:
            self.waits.observe(record.turn.priority, now - record.turn.waiting_since)
        return [Count("drains_ended")] if record.draining or record.preempting else []

    # --------------------------------------------------------------------- the sweep's pass
    def pass_due(self, min_interval: float, now: float) -> bool:
        """Whether the sweep's pass over the order (discover, drains) runs now; stamps it when it does."""
        if now - self._ordered_at < max(min_interval, ORDER_INTERVAL):
            return False
        self._ordered_at = now
        return True

    def passed(self, now: float) -> None:
        """A pass over the drains ran now (a filter's, for its own gang): the sweep's may wait."""
        self._ordered_at = now

    def discover(self, now: float) -> tuple[list[GangRecord], list[Effect]] | None:
        """Complete gangs with a member kube-scheduler tried and could not place (its PodScheduled
        condition) join the order even without a filter request: kube-scheduler calls the extender only
        with nodes its own filters passed, so a member that fits no node as the cluster stands (the case
        for a gang that must preempt or drain, or that never fits) never reaches it. Members not tried yet
        do not count: the order follows what kube-scheduler has tried, not what is queued behind it.
        Returns the gangs that joined and what joining asks for; None when the walk is not due (every
        ``DISCOVER_INTERVAL``)."""
        if now - self._discovered_at < DISCOVER_INTERVAL:
            return None
        self._discovered_at = now
        joined: list[GangRecord] = []
        effects: list[Effect] = []
        for gang in self.mirror.tried_gangs():
            record = self.registry.get(gang)
            if record is not None and (record.turn.waiting_since is not None or record.admitted
                                       or record.plans.never_fits is not None):
                continue
            policy = self.mirror.gang_policy(gang)[1]
            if policy is None or self.mirror.member_count(gang) < policy.min_count:
                continue
            members = self.mirror.members(gang)
            if not any(p.unschedulable and self.serves(p) and not self.mirror.placement(p.uid) for p in members):
                continue  # no member kube-scheduler tried and could not place
            if len(self.placement.placed(members, record)) >= policy.min_count:
                continue  # running: a replacement member needs no admission
            record = record or self.registry.ensure(gang, policy)
            effects += self.join(record, members, now)
            joined.append(record)
        return joined, effects

    # ------------------------------------------------------------------------------ draining
    def end_stale_drains(self, head: GangRecord | None) -> list[Effect]:
        """Only the head drains: the drains of gangs no longer first end."""
        effects: list[Effect] = []
        for record in self.registry.draining():
            if record is not head:
                effects += self.attempts.end_drain(record, "it is no longer first in the admission order")
        return effects

    def drain_due(self, head: GangRecord, now: float) -> bool:
        """Whether the head has waited longer than its maximum wait (and is not resting from a drain)."""
        since = head.turn.waiting_since
        return (since is not None and now - since >= order.max_wait(head.policy.order, self.settings.max_wait_seconds)
                and now >= head.turn.drain_after)

    def follow_drain(self, record: GangRecord, now: float) -> list[Effect]:
        """A draining reservation ends when its gang is admitted, leaves the head, or has held it for
        ``DRAIN_PATIENCE_SECONDS`` without being admitted (a gang kube-scheduler keeps rejecting for
        what the plan does not model would otherwise hold the place for ever); then it rests as long."""
        held = record.reservation
        if held is not None and held.purpose is Purpose.DRAINING and now - held.since > DRAIN_PATIENCE_SECONDS:
            record.turn.drain_after = now + DRAIN_PATIENCE_SECONDS
            return self.attempts.end_drain(record, f"not admitted after {DRAIN_PATIENCE_SECONDS:.0f}s of draining")
        return []

    def start_drain(self, record: GangRecord, now: float) -> list[Effect]:
        gang = record.key
        members = self.mirror.members(gang)
        placed = self.placement.placed(members, record)
        needed = record.policy.min_count - len(placed) - len(record.waiting())
        pending = self.placement.pending(members, record)
        if needed <= 0 or not pending:
            return []
        chosen = planner.pick_for_reservation(pending, needed)
        capacity = self._capacity_for(gang)
        constraint = record.plans.constraint
        placement = domains.place_gang(chosen, pending, self.mirror.nodes.values(), capacity,
                                       lambda node: capacity(node).get(CPU, 0), constraint,
                                       self.settings.levels_for(constraint),
                                       bound_nodes=self.placement.placed_nodes(placed))
        if not placement.plan.complete:
            return []  # not even an empty cluster (less other gangs' reservations) holds it: nothing to drain
        nodes = sorted(placement.plan.per_node())
        record.last_message = messages.draining(now - (record.turn.waiting_since or now), len(nodes))
        log.info("gang %s: %s", gang, record.last_message)
        return [Reserve(record, Reservation(Purpose.DRAINING, placement.plan.slots, now, record.turn.priority)),
                Count("drains_started"),
                Tell(members, "Normal", "GangDraining", messages.draining_event(gang, record.last_message, nodes))]

    def _capacity_for(self, gang: GangKey) -> Callable[[NodeRecord], Resources]:
        """A node's allocatable less other gangs' reservations: what the gang could have once the pods
        running there end."""
        def capacity(node: NodeRecord) -> Resources:
            room = self.mirror.free(node.name, gang)
            add_into(room, self.mirror.used(node.name))
            return room
        return capacity

    # ------------------------------------------------------------------------------- metrics
    def stats(self) -> tuple[int, int, list[tuple[int, list[tuple[str, int]], float]]]:
        """(gangs waiting their turn, gangs draining, the wait histogram per priority)."""
        queue = self.ordered()
        return len(queue), sum(1 for r in queue if r.draining or r.preempting), self.waits.snapshot()

    # ------------------------------------------------------------------------------- explain
    def order_view(self, record: GangRecord) -> dict[str, Any] | None:
        """The gang's place in the admission order for ``explain`` (None: it is not waiting); the
        ledger's view adds what preemption shows."""
        if record.admitted or record.turn.waiting_since is None:
            return None
        queue = self.ordered()
        if record not in queue:
            return None
        now = self.clock()
        position = queue.index(record)
        ahead = [{"gang": str(r.key), "priority": r.turn.priority,
                  "waitingSeconds": round(now - (r.turn.waiting_since or 0))}
                 for r in queue[:min(position, MAX_AHEAD_SHOWN)]]
        view: dict[str, Any] = {
            "position": position + 1, "of": len(queue), "priority": record.turn.priority,
            "waitingSeconds": round(now - record.turn.waiting_since, 1),
            "maxWaitSeconds": order.max_wait(record.policy.order, self.settings.max_wait_seconds),
            "ahead": ahead,
        }
        if record.turn.problem:
            view["problem"] = record.turn.problem
        if record.draining and record.reservation is not None:
            slots = record.reservation.slots
            view["draining"] = {"nodes": sorted({name for name, _ in slots})[:20], "members": len(slots),
                                "sinceSeconds": round(now - record.reservation.since, 1)}
        return view

    def drain_to_place(self, record: GangRecord | None) -> tuple[tuple[PodRecord, ...], tuple[NodeRecord, ...]]:
        """For ``explain``: the unplaced members a draining reservation is for (as many as its slots) and
        the nodes it holds places on; empty when the gang is not draining."""
        if record is None or not record.draining or record.reservation is None:
            return (), ()
        slots = record.reservation.slots
        nodes = sorted({name for name, _ in slots})
        members = [p for p in self.mirror.members(record.key) if not self.mirror.placement(p.uid)][:len(slots)]
        return tuple(members), tuple(self.mirror.nodes[n] for n in nodes if n in self.mirror.nodes)

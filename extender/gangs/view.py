"""LedgerView: what the rest of the extender may read of the ledger, copied under the lock (no I/O).

Owns: the facts ``explain`` shows about one gang (``facts``, then ``explain``: the facts, the nodes and a
copy of the free capacity taken in one short hold of the lock, the plan and the shortfall computed after
it is released); the gangs whose explanation is published; the numbers ``/metrics`` exports (counters,
held binds and their demand, admitted gangs, the order's size and wait histogram); whether any pod still
waits on the extender's own work (leadership asks). Must not: change anything, call the API server or
block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from extender.cluster.mirror import ClusterMirror
from extender.cluster.reservations import per_node
from extender.gangs import explanation
from extender.gangs.admission import Admission
from extender.gangs.placement import GangPlacement
from extender.gangs.preemption import GangPreemption
from extender.gangs.queue import GangQueue
from extender.gangs.record import GangRecord
from extender.gangs.registry import GangRegistry
from extender.gangs.settings import GangSettings
from extender.gangs.state import GangEntry, LedgerState, Reserved
from extender.gangs.waitlist import Waitlist
from extender.model.cluster import PodRecord
from extender.model.gang import NONE, GangKey, GangPolicy, TopologyProblem


class LedgerView:
    """Read-only queries over the ledger's parts."""

    def __init__(self, registry: GangRegistry, placement: GangPlacement, waitlist: Waitlist, admission: Admission,
                 queue: GangQueue, preemption: GangPreemption, settings: GangSettings,
                 clock: Callable[[], float]) -> None:
        self.registry = registry
        self.mirror: ClusterMirror = registry.mirror
        self.lock = registry.lock
        self.placement = placement
        self.waitlist = waitlist
        self.admission = admission
        self.queue = queue
        self.preemption = preemption
        self.settings = settings
        self.clock = clock

    # ------------------------------------------------------------------------------- metrics
    def counters(self) -> dict[str, int]:
        with self.lock:
            return dict(self.registry.counters)

    def held_count(self) -> int:
        with self.lock:
            return sum(len(r.holds) for r in self.registry.holding())

    def admitted_count(self) -> int:
        with self.lock:
            return sum(1 for r in self.registry.holding() if r.admitted)

    def held_demand(self) -> int:
        """Binds gangs may hold at once: held now, plus reserved members still to come."""
        with self.lock:
            return self.admission.held_demand()

    @property
    def max_held_binds(self) -> int | None:
        return self.settings.max_held_binds

    def order_stats(self) -> tuple[int, int, list[tuple[int, list[tuple[str, int]], float]]]:
        """(gangs waiting their turn, gangs draining, the wait histogram per priority)."""
        with self.lock:
            return self.queue.stats()

    def pending(self) -> bool:
        """Whether some pod still waits on this extender's own work: a bind held, a gang admitted or
        backing off, a rejected member or a pod blocked for capacity to wake up."""
        with self.lock:
            if self.waitlist.waiting():
                return True
            now = self.clock()
            return any(r.holds or r.admitted or r.backoff_until > now for r in self.registry.busy())

    # ------------------------------------------------------------------------------ published
    def state(self, wall_now: float, scheduler_names: Sequence[str]) -> LedgerState:
        """What only this ledger knows of the gangs, for what-if questions asked elsewhere (``LedgerState``):
        the busy gangs' places in the order, never-fits verdicts and reservations (one slot per node, what
        it keeps there), and the pods accounted ahead of the API server; ledger times turned into
        wall-clock times (``wall_now`` is now)."""
        with self.lock:
            offset = wall_now - self.clock()
            gangs = []
            for record in self.registry.busy():
                held = record.reservation
                never = record.plans.never_fits
                if record.turn.waiting_since is None and held is None and never is None:
                    continue
                reserved = None if held is None else Reserved(held.purpose, held.since + offset, held.priority,
                                                              tuple(per_node(held.slots).items()))
                since = record.turn.waiting_since
                gangs.append(GangEntry(record.key, record.turn.priority, None if since is None else since + offset,
                                       never.message if never is not None else "", reserved))
            settings = self.settings
            return LedgerState(wall_now, tuple(sorted(gangs, key=lambda e: str(e.gang))), self.mirror.assumed(),
                               tuple(scheduler_names), self.preemption.enabled, settings.topology_levels,
                               settings.max_held_binds, settings.max_release_members, settings.max_wait_seconds)

    # ------------------------------------------------------------------------------- explain
    def known_gangs(self) -> list[GangKey]:
        """Every gang the ledger has a record or a waiting message for (the gangs whose explanation is
        published), in a stable order."""
        with self.lock:
            return sorted({*self.registry.gangs(), *self.waitlist.gangs()}, key=str)

    def facts(self, gang: GangKey) -> explanation.GangFacts:
        """Everything known about ``gang``, copied under the lock for ``explanation.explain``."""
        with self.lock:
            exists, policy = self.mirror.gang_policy(gang)
            members = tuple(self.mirror.members(gang))
            record = self.registry.get(gang)
            meta = self.mirror.group_meta(gang.group)
            now = self.clock()
            placements = {p.uid: node for p in members if (node := self.mirror.placement(p.uid))}
            api_version, template = (meta.api_version, meta.template) if meta else ("", "")
            if record is None:
                return explanation.GangFacts(gang, exists, policy, members, placements, frozenset(), {},
                                             timeout_seconds=self.settings.timeout_for(policy) if policy else 0.0,
                                             message=self.waitlist.message(gang), api_version=api_version,
                                             template=template)
            waiting = frozenset(h.pod.uid for h in record.waiting())
            constraint = self.placement.constraint_of(policy, members) if policy is not None else NONE
            deadline = record.attempt.deadline
            return explanation.GangFacts(
                gang, exists, policy, members, placements, waiting, self.mirror.reservation(gang),
                admitted=record.admitted, timeout_seconds=self.settings.timeout_for(record.policy),
                deadline_in=None if deadline is None else deadline - now,
                backoff_in=max(record.backoff_until - now, 0.0), timeouts=record.timeouts,
                completed=record.completed, message=record.last_message,
                never_fits=record.plans.never_fits.message if record.plans.never_fits else "",
                api_version=api_version, template=template,
                topology=self._topology_view(gang, policy, members, record), order=self._order_view(record),
                draining=self.queue.drain_to_place(record), constraint=constraint,
                levels=tuple(self.settings.levels_for(constraint)) if not isinstance(constraint, TopologyProblem)
                else ())

    def order_view(self, gang: GangKey) -> dict[str, Any] | None:
        """The gang's place in the admission order, and its preemption, for ``explain`` (None: it is not
        waiting its turn)."""
        with self.lock:
            record = self.registry.get(gang)
            return self._order_view(record) if record is not None else None

    def _order_view(self, record: GangRecord) -> dict[str, Any] | None:
        view = self.queue.order_view(record)
        if view is not None:
            preemption = self.preemption.view(record)
            if preemption:
                view["preemption"] = preemption
        return view

    def _topology_view(self, gang: GangKey, policy: GangPolicy | None, members: tuple[PodRecord, ...],
                       record: GangRecord) -> dict[str, Any] | None:
        """What ``explain`` shows of the gang's topology constraint (None: it has none)."""
        constraint = self.placement.constraint_of(policy, members) if policy is not None else record.plans.constraint
        domain = record.attempt.domain if record.admitted else self.placement.domain_of(gang)
        return explanation.topology_view(constraint, domain, record.plans.other_domains)

    def explain(self, gang: GangKey) -> dict[str, Any]:
        """The explanation of one gang (``GET /explain``): its facts, the nodes and a copy of the free
        capacity are taken in one short hold of the lock; the plan and the shortfall over every node, the
        long part, run after it is released, so filters and binds do not wait for them."""
        with self.lock:
            facts = self.facts(gang)
            nodes = list(self.mirror.nodes.values())
            capacity = self.mirror.capacity(gang)
        return explanation.explain(facts, nodes, capacity.free)

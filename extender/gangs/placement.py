"""GangPlacement: where a gang's members are and may go, as the parts of the ledger ask it (no I/O).

Owns: which gang a pod belongs to and its policy (``gang_of``); its members bound or being bound
(``placed``) and their nodes; its topology constraint (merged over the group and its members) and the
domain its required key keeps it in (``domain_of``, with the node names of each domain cached per set
of nodes and labels); the free capacity a gang's plan sees; and whether a member fits a node now
(``fit_error``) or a complete quorum may still be bound where it is held (``release_problem``). Must
not: change a record or the mirror (the constraint read for a gang is remembered on its record's
plans), call the API server or block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from extender.cluster.fit import placement_failure, shortfall
from extender.cluster.mirror import ClusterMirror
from extender.cluster.records import pod_placement
from extender.cluster.topology_constraints import merge
from extender.gangs import planner
from extender.gangs.domains import Domain
from extender.gangs.record import GangRecord, Hold
from extender.model import messages
from extender.model.cluster import NodeRecord, PodRecord
from extender.model.gang import NONE, GangKey, GangPolicy, Parsed, TopologyConstraint
from extender.model.quantity import Resources

MAX_DOMAINS = 100_000
"""Domains whose node names are cached at most (more starts the cache afresh)."""


class GangPlacement:
    """Reads of the mirror (and the records) that several parts of the ledger share."""

    def __init__(self, mirror: ClusterMirror, records: Callable[[GangKey], GangRecord | None]) -> None:
        self.mirror = mirror
        self._records = records
        self._domain_nodes: dict[Domain, tuple[int, frozenset[str]]] = {}  # per node_set_generation

    def gang_of(self, pod: PodRecord) -> tuple[GangKey | None, GangPolicy | None]:
        """(gang, policy) of a gang member; (gang, None) while its group definition is not seen yet;
        (None, None) for a pod of no gang or of a non-gang ("basic") group."""
        if pod.gang is None:
            return None, None
        exists, policy = self.mirror.gang_policy(pod.gang)
        if not exists and pod.link_policy is not None:
            exists, policy = True, pod.link_policy
        if exists and policy is None:
            return None, None
        return pod.gang, policy

    def placed(self, members: Sequence[PodRecord], record: GangRecord | None) -> list[PodRecord]:
        """Members bound or being bound (a released quorum counts), not those waiting at the barrier."""
        waiting = {uid for uid, hold in record.holds.items() if not hold.releasing} if record else set()
        return [p for p in members if p.uid not in waiting and self.mirror.placement(p.uid)]

    def pending(self, members: Sequence[PodRecord], record: GangRecord | None) -> list[PodRecord]:
        """Members neither held nor placed (the ones a plan is for)."""
        holds = record.holds if record is not None else {}
        return [p for p in members if p.uid not in holds and not self.mirror.placement(p.uid)]

    def placed_nodes(self, members: Sequence[PodRecord]) -> list[NodeRecord]:
        """The nodes of the members bound or being bound (they pin a topology domain)."""
        nodes = (self.mirror.nodes.get(self.mirror.placement(p.uid)) for p in members)
        return [node for node in nodes if node is not None]

    # ------------------------------------------------------------------------------ topology
    @staticmethod
    def constraint_of(policy: GangPolicy, members: Sequence[PodRecord]) -> Parsed:
        """The gang's effective topology constraint: its group object's and its members' merged."""
        if policy.topology is NONE and all(p.topology is NONE for p in members):
            return NONE  # the common case, without a merge per member
        return merge(policy.topology, [(p.name, p.topology) for p in members])

    def domain_of(self, gang: GangKey) -> Domain | None:
        """The domain of its *required* topology key that a gang must keep its members in: while
        admitted, that of its reservation; otherwise that of its placed members. None: no required
        key, or nothing pins a domain yet. (A preferred level narrower than the required key steers
        the reserved members; it never excludes a node.)"""
        record = self._records(gang)
        key = self._constraint_known(gang, record).required
        if not key:
            return None
        if record is not None and record.admitted and record.attempt.domain is not None:
            within = record.attempt.domain.within(key)
            if within is not None:
                return within
        value = self.mirror.member_label(gang, key)
        return None if value is None else Domain((key,), (value,))

    def _constraint_known(self, gang: GangKey, record: GangRecord | None) -> TopologyConstraint:
        """The gang's constraint as last planned; read from the mirror when this process has not planned
        the gang (a restart or a takeover): kept on its record, read again each time without one."""
        if record is not None and record.plans.constraint_known:
            return record.plans.constraint
        _, policy = self.mirror.gang_policy(gang)
        parsed = self.constraint_of(policy, self.mirror.members(gang)) if policy else NONE
        constraint = parsed if isinstance(parsed, TopologyConstraint) else NONE
        if record is not None:
            record.plans.constraint, record.plans.constraint_known = constraint, True
        return constraint

    def nodes_in(self, domain: Domain) -> frozenset[str]:
        """The names of the nodes in ``domain``, computed once per set of nodes and labels."""
        generation = self.mirror.node_set_generation
        known = self._domain_nodes.get(domain)
        if known is not None and known[0] == generation:
            return known[1]
        if len(self._domain_nodes) >= MAX_DOMAINS:
            self._domain_nodes.clear()
        names = frozenset(name for name, node in self.mirror.nodes.items() if domain.holds(node))
        self._domain_nodes[domain] = (generation, names)
        return names

    def _domain_error(self, gang: GangKey | None, node: NodeRecord) -> str:
        """Why ``node`` is outside the topology domain of ``gang`` ("" when it is inside or there is none)."""
        domain = self.domain_of(gang) if gang is not None else None
        if domain is None or domain.holds(node):
            return ""
        return messages.outside_domain(node.name, gang, domain)

    # ------------------------------------------------------------------------------ capacity
    def free_for(self, gang: GangKey) -> Callable[[NodeRecord], Resources]:
        return lambda node: self.mirror.free(node.name, gang)

    def free_cpu_for(self, gang: GangKey) -> planner.FreeCpu:
        """Every node's free cpu as ``gang`` sees it, each read from the mirror when the plan first asks for it,
        or all at once when it is about to read every node (read it under the mirror's lock, as the ordered
        walk is)."""
        mirror = self.mirror
        return planner.FreeCpu(None, lambda least: mirror.nodes_by_free_cpu(gang, least), mirror.nodes,
                               cpu_of=lambda name: mirror.free_cpu(name, gang), size=mirror.node_count(),
                               every=lambda: mirror.free_cpu_by_node(gang))

    def fit_error(self, pod: PodRecord, node: str, gang: GangKey | None) -> str:
        """Why ``pod`` cannot go to ``node`` now (unknown node; its taints, selector or affinity exclude
        the pod; not enough free room); "" if it can. The request is trusted for none of it."""
        record = self.mirror.nodes.get(node)
        if record is None:
            return messages.node_unknown_at_bind(node)
        reason = placement_failure(pod_placement(pod), record) or self._domain_error(gang, record)
        if reason:
            return messages.does_not_fit(pod, node, reason)
        free = self.mirror.free(node, gang, priority=pod.priority)
        lacking = shortfall(pod.requests, free)
        if lacking is None:
            return ""
        return messages.no_room_left(pod, node, lacking, free)

    def release_problem(self, holds: Sequence[Hold]) -> str:
        """Why the quorum ``holds`` may not be bound now: a member whose node is gone, excludes it
        (taints, selector, affinity) or is over-committed as the mirror sees it now (every held member
        is already counted in its node's use); "" when all of them still fit."""
        for hold in holds:
            node = self.mirror.nodes.get(hold.node)
            if node is None:
                return messages.member_node_gone(hold.pod, hold.node)
            reason = placement_failure(pod_placement(hold.pod), node) or self._domain_error(hold.pod.gang, node)
            if reason:
                return messages.member_no_longer_fits(hold.pod, hold.node, reason)
            used = self.mirror.used(node.name)
            for resource, wanted in hold.pod.requests.items():
                amount = used.get(resource, 0)
                if wanted > 0 and amount > node.allocatable.get(resource, 0):
                    return messages.member_node_overcommitted(hold.pod, hold.node, resource, amount,
                                                              node.allocatable.get(resource, 0))
        return ""

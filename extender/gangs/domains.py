"""Topology-aware placement of a gang (pure): which domain the rest of a gang goes to, and why.

Owns: turning a gang's effective topology constraint and the level order (``--topology-levels``,
widest first, ``kubernetes.io/hostname`` implied narrowest) into a ladder of levels to try; grouping
nodes into domains (nodes sharing one value of a label; a node without the label is in no domain of
that level); choosing the domain; and what the best other domains lack.

- **Required** key R: every member in one domain of R; members already bound pin the domain. With a
  preferred key P narrower than R as well, one (R, P) domain is tried first, then each wider level
  up to R, always inside one R domain.
- **Preferred** key P alone: the narrowest level, from P upwards, at which one domain holds the whole
  gang (the bound members' nodes included), then across domains (the plain planner).
- **Best fit** among the domains of a level that hold the gang: the least free cpu (the planner's
  measure: what is left after placing the gang is that minus the gang's cpu), then the domain
  values (deterministic). A domain whose free cpu is below the gang's is never planned.

Members are placed inside a domain by ``planner.plan`` unchanged (first-fit, most-allocated first,
the same predicates as the filter verb).
Must not: keep state, take locks, read the clock, or parse Kubernetes objects (``cluster.topology_constraints``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from extender.cluster.topology_constraints import HOSTNAME, TopologyConstraint
from extender.gangs import planner
from extender.gangs.planner import Plan
from extender.model import messages
from extender.model.cluster import NodeRecord, PodRecord
from extender.model.quantity import CPU, Resources

Rung = tuple[str, ...]
"""The label keys of one level: a domain is the nodes with the same value of each; () is every node."""


@dataclass(frozen=True, slots=True, order=True)
class Domain:
    keys: Rung
    values: tuple[str, ...]

    def within(self, key: str) -> Domain | None:
        """This domain cut down to its levels up to and including ``key`` (None: ``key`` is not one)."""
        if key not in self.keys:
            return None
        end = self.keys.index(key) + 1
        return Domain(self.keys[:end], self.values[:end])

    def holds(self, node: NodeRecord) -> bool:
        """Whether ``node`` is in the domain (every node is in the domain across domains)."""
        return all(node.labels.get(key) == value for key, value in zip(self.keys, self.values, strict=True))

    @property
    def level(self) -> str:
        """The narrowest label key of the domain ("" across domains)."""
        return self.keys[-1] if self.keys else ""

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in zip(self.keys, self.values, strict=True)) or messages.ACROSS_DOMAINS


ACROSS = Domain((), ())


@dataclass(frozen=True, slots=True)
class DomainReport:
    """Another domain of the chosen (or last tried) level and what it lacks ("" if it holds the gang too)."""

    domain: Domain
    nodes: int
    free_cpu: int
    lacks: str


@dataclass(frozen=True, slots=True)
class TopologyPlan:
    """Where the members go. ``domain`` is None when no allowed domain holds them all: ``plan`` is then
    incomplete (the closest domain's, or across domains for a preferred constraint) with a
    ``blocking`` reason that names the topology."""

    plan: Plan
    domain: Domain | None
    first_choice: bool  # the domain is at the constraint's first level (False: a preferred fallback)
    others: tuple[DomainReport, ...] = ()
    closest: DomainReport | None = None  # when no domain holds the gang: the one with the most free cpu

    @property
    def level(self) -> str:
        return self.domain.level if self.domain is not None else ""


def ladder(constraint: TopologyConstraint, levels: Sequence[str] = ()) -> list[Rung]:
    """The levels to try, first choice first."""
    order = list(levels) if HOSTNAME in levels else [*levels, HOSTNAME]
    required, preferred = constraint.required, constraint.preferred
    if required:
        if not preferred or preferred == required:
            return [(required,)]
        if required in order and preferred in order:
            wide, narrow = order.index(required), order.index(preferred)
            if narrow <= wide:
                return [(required,)]  # the preferred level is implied by the required one
            return [(required, order[i]) for i in range(narrow, wide, -1)] + [(required,)]
        return [(required, preferred), (required,)]
    if not preferred:
        return [()]
    if preferred in order:
        return [(order[i],) for i in range(order.index(preferred), -1, -1)] + [()]
    return [(preferred,), ()]


Domains = dict[tuple[str, ...], list[NodeRecord]]


def group(nodes: Iterable[NodeRecord], rung: Rung,
          free_cpu: Callable[[NodeRecord], int]) -> tuple[Domains, dict[tuple[str, ...], int]]:
    """The domains of one level (label values -> nodes; nodes lacking one of the labels left out) and
    each domain's free cpu (nodes with none or less count 0), in one pass over the nodes."""
    if isinstance(free_cpu, planner.FreeCpu):
        free_cpu.fill()  # every labelled node is read: all at once
    if len(rung) == 1:
        by_value, free_by_value = _group_by(nodes, rung[0], free_cpu)
        return ({(value,): members for value, members in by_value.items()},
                {(value,): cpu for value, cpu in free_by_value.items()})
    domains: Domains = {}
    free: dict[tuple[str, ...], int] = {}
    for node in nodes:
        labels = node.labels
        if all(key in labels for key in rung):
            values = tuple(labels[key] for key in rung)
            domains.setdefault(values, []).append(node)
            free[values] = free.get(values, 0) + max(free_cpu(node), 0)
    return domains, free


def _group_by(nodes: Iterable[NodeRecord], key: str,
              free_cpu: Callable[[NodeRecord], int]) -> tuple[dict[str, list[NodeRecord]], dict[str, int]]:
    """``group`` for one label key: the hot loop of a constrained plan, kept flat (no tuple per node)."""
    domains: dict[str, list[NodeRecord]] = {}
    free: dict[str, int] = {}
    for node in nodes:
        value = node.labels.get(key)
        if value is None:
            continue
        cpu = free_cpu(node)
        found = domains.get(value)
        if found is None:
            domains[value] = [node]
            free[value] = cpu if cpu > 0 else 0
        else:
            found.append(node)
            if cpu > 0:
                free[value] += cpu
    return domains, free


def _pinned(bound_nodes: Sequence[NodeRecord], rung: Rung) -> tuple[tuple[str, ...] | None, str]:
    """(the domain the bound members' nodes pin, why none can) -- (None, "") when nothing is bound."""
    pinned: tuple[str, ...] | None = None
    for node in bound_nodes:
        missing = [key for key in rung if key not in node.labels]
        if missing:
            return None, messages.bound_node_unlabelled(node.name, missing[0])
        values = tuple(node.labels[key] for key in rung)
        if pinned is not None and values != pinned:
            return None, messages.bound_in_two_domains(Domain(rung, pinned), Domain(rung, values))
        pinned = values
    return pinned, ""


@dataclass(slots=True)
class _Rung:
    """One level's domains, their free cpu, and the outcome of trying them."""

    rung: Rung
    domains: dict[tuple[str, ...], list[NodeRecord]]
    free: dict[tuple[str, ...], int]
    allowed: list[tuple[str, ...]]  # the domains that may hold the gang (the pinned one, or all)
    problem: str = ""
    chosen: tuple[str, ...] | None = None
    plans: dict[tuple[str, ...], Plan] = field(default_factory=dict)


class _Search:
    """The members, the nodes and the capacity callbacks, shared by every level tried."""

    def __init__(self, members: Sequence[PodRecord], nodes: list[NodeRecord],
                 free_of: Callable[[NodeRecord], Resources], free_cpu: Callable[[NodeRecord], int]) -> None:
        self.members = members
        self.nodes = nodes
        self.free_of = free_of
        self.free_cpu = free_cpu
        self.demand = sum(pod.requests.get(CPU, 0) for pod in members)

    def plan_in(self, level: _Rung, values: tuple[str, ...]) -> Plan:
        found = level.plans.get(values)
        if found is None:
            found = level.plans[values] = planner.plan(self.members, level.domains[values], self.free_of, self.free_cpu)
        return found

    def try_level(self, rung: Rung, bound_nodes: Sequence[NodeRecord]) -> _Rung:
        """Plan the level's allowed domains tightest first (free cpu, then values); the first that
        holds every member is chosen."""
        domains, free = group(self.nodes, rung, self.free_cpu)
        pinned, problem = _pinned(bound_nodes, rung)
        if problem:
            return _Rung(rung, domains, free, [], problem)
        allowed = [pinned] if pinned is not None else list(domains)
        level = _Rung(rung, domains, free, [v for v in allowed if v in domains])
        if pinned is not None and pinned not in domains:  # the bound members' nodes were not passed in
            level.problem = messages.bound_domain_has_no_nodes(Domain(rung, pinned))
            return level
        for values in sorted((v for v in level.allowed if free[v] >= self.demand), key=lambda v: (free[v], v)):
            if self.plan_in(level, values).complete:
                level.chosen = values
                break
        return level

    def lacks(self, level: _Rung, values: tuple[str, ...]) -> str:
        if values not in level.allowed:
            return messages.DOMAIN_LACKS_BOUND_MEMBERS
        if level.free[values] < self.demand:
            return messages.domain_lacks_free_cpu(level.free[values], self.demand)
        result = self.plan_in(level, values)
        if result.complete:
            return ""
        return messages.domain_fits_some(len(result.slots), len(self.members), result.blocking)

    def report(self, level: _Rung, values: tuple[str, ...]) -> DomainReport:
        return DomainReport(Domain(level.rung, values), len(level.domains[values]), level.free[values],
                            self.lacks(level, values))

    def others(self, level: _Rung, count: int) -> tuple[DomainReport, ...]:
        """The ``count`` roomiest domains of the level other than the chosen one, and what they lack."""
        ranked = sorted((v for v in level.domains if v != level.chosen), key=lambda v: (-level.free[v], v))
        return tuple(self.report(level, values) for values in ranked[:count])


def place(members: Sequence[PodRecord], nodes: Iterable[NodeRecord], free_of: Callable[[NodeRecord], Resources],
          free_cpu: Callable[[NodeRecord], int], constraint: TopologyConstraint, levels: Sequence[str] = (),
          bound_nodes: Sequence[NodeRecord] = (), report: int = 3) -> TopologyPlan:
    """Place ``members`` (the gang's members still to place) under ``constraint``.

    ``free_of(node)`` is the capacity available to the gang (other gangs' reservations subtracted),
    ``free_cpu(node)`` its cpu, cheaper; ``bound_nodes`` the nodes of the gang's bound members (they
    pin a required domain, and a preferred domain must hold them too). ``report`` other domains of
    the chosen (or last tried) level are described with what they lack. Deterministic.
    """
    node_list = list(nodes)
    rungs = ladder(constraint, levels)
    if rungs == [()]:
        unconstrained = planner.plan(members, node_list, free_of, free_cpu)
        return TopologyPlan(unconstrained, ACROSS if unconstrained.complete else None, True)
    search = _Search(members, node_list, free_of, free_cpu)
    last: _Rung | None = None
    for index, rung in enumerate(rungs):
        if not rung:  # a preferred constraint no domain of any level could satisfy: across domains
            across = planner.plan(members, node_list, free_of, free_cpu)
            others = search.others(last, report) if last is not None else ()
            return TopologyPlan(across, ACROSS if across.complete else None, False, others)
        last = search.try_level(rung, bound_nodes)
        if last.chosen is not None:
            return TopologyPlan(search.plan_in(last, last.chosen), Domain(rung, last.chosen), index == 0,
                                search.others(last, report))
    assert last is not None
    return _no_domain(search, last, report)


def place_gang(chosen: Sequence[PodRecord], pending: Sequence[PodRecord], nodes: Iterable[NodeRecord],
               free_of: Callable[[NodeRecord], Resources], free_cpu: Callable[[NodeRecord], int],
               constraint: TopologyConstraint, levels: Sequence[str] = (),
               bound_nodes: Sequence[NodeRecord] = (), avoid: frozenset[str] = frozenset()) -> TopologyPlan:
    """``place`` for admission: where ``chosen`` (the members reserved for, a subset of ``pending``)
    go. A preferred level is chosen for the whole gang, every pending member (the narrowest level
    with one domain that holds them all), and ``chosen`` are placed inside that domain. Nodes in
    ``avoid`` are left out unless the gang fits nowhere without them."""
    node_list = list(nodes)
    if avoid:
        preferred = place_gang(chosen, pending, [n for n in node_list if n.name not in avoid], free_of, free_cpu,
                               constraint, levels, bound_nodes)
        if preferred.plan.complete:
            return preferred
    if constraint.preferred and len(pending) > len(chosen):
        whole = place(pending, node_list, free_of, free_cpu, constraint, levels, bound_nodes)
        if whole.domain is not None and whole.domain.keys:
            domain = whole.domain
            within = planner.plan(chosen, [n for n in node_list if domain.holds(n)], free_of, free_cpu)
            if within.complete:
                return TopologyPlan(within, domain, whole.first_choice, whole.others)
    return place(chosen, node_list, free_of, free_cpu, constraint, levels, bound_nodes)


def _no_domain(search: _Search, level: _Rung, report: int) -> TopologyPlan:
    """A required constraint that no allowed domain of its level satisfies."""
    key = level.rung[-1]
    needed = len(search.members)
    if level.problem or not level.allowed:
        why = level.problem or messages.no_node_labelled(level.rung)
        blocking = messages.no_domain_can_hold(key, why)
        return TopologyPlan(Plan((), tuple(search.members), blocking), None, False, search.others(level, report))
    closest = min(level.allowed, key=lambda v: (-level.free[v], v))
    inner = search.plan_in(level, closest)
    closest_report = search.report(level, closest)
    blocking = messages.no_domain_holds_all(key, needed, closest_report.domain, closest_report.nodes,
                                            closest_report.lacks)
    return TopologyPlan(Plan(inner.slots, inner.unplaced, blocking), None, False, search.others(level, report),
                        closest_report)


def never_fits(members: Sequence[PodRecord], nodes: Iterable[NodeRecord], constraint: TopologyConstraint,
               bound_nodes: Sequence[NodeRecord] = ()) -> str | None:
    """For a required constraint: why no domain could hold ``members`` even with every node empty
    (allocatable), naming the largest domain and what it lacks; None when one could (or no required key)."""
    if not constraint.required:
        return None
    result = place(members, nodes, lambda node: node.allocatable, lambda node: node.allocatable.get(CPU, 0),
                   TopologyConstraint(constraint.required, required_source=constraint.required_source),
                   bound_nodes=bound_nodes, report=0)
    if result.domain is not None:
        return None
    key = constraint.required
    closest = result.closest
    if closest is None:
        return result.plan.blocking
    demand = sum(pod.requests.get(CPU, 0) for pod in members)
    lacks = closest.lacks if closest.free_cpu >= demand else messages.domain_lacks_allocatable_cpu(
        closest.free_cpu, demand)
    return messages.no_domain_even_empty(key, len(members), closest.domain, closest.nodes, lacks)


def where(constraint: TopologyConstraint, placement: TopologyPlan) -> str:
    """Where a constrained gang was placed, for messages ("" without a constraint or a domain)."""
    if constraint.empty or placement.domain is None:
        return ""
    return messages.placed_in_domain(placement.domain, constraint.describe())

"""Growth: the fewest new nodes, of a shape the cluster already has, after which a gang's plan completes (pure).

Owns: the node shapes of a cluster (allocatable, taints and labels but the host name: a new node of a
shape is in the same topology domains as the nodes it copies), and for a gang whose plan does not
complete, the smallest number of new empty nodes of one shape after which the same plan
(``domains.place_gang``: the same members, free capacity, constraint and levels) completes. Shapes are
tried most promising first (the fewest nodes their domain would need by cpu, then the most common), at
most ``MAX_SHAPES`` of them, and shapes a plan cannot tell apart (they differ only by labels no member
selects and no topology level uses) once. Must not: keep state, read the clock or change its inputs; decide whether
a gang should wait for nodes (the callers say when it is the answer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.cluster.fit import placement_failure
from extender.cluster.records import pod_placement
from extender.gangs import domains
from extender.gangs.domains import TopologyPlan
from extender.gangs.planner import FreeCpu, copies
from extender.labelkeys import HOSTNAME
from extender.model.cluster import NodeRecord, PodRecord, Taint
from extender.model.gang import TopologyConstraint
from extender.model.quantity import CPU, Resources, describe

MAX_SHAPES = 8
"""Shapes planned with new nodes, most promising first (each costs a few plans)."""

NEW_NODE_PREFIX = "new-"
"""The names of the nodes a growth plan adds: ``new-<n>`` (never a name the cluster has: a suffix is
added until it is not)."""


@dataclass(frozen=True, slots=True)
class NodeShape:
    """Nodes that differ only by name: what a new one of them would have, an example and how many there are."""

    allocatable: tuple[tuple[str, int], ...]
    labels: tuple[tuple[str, str], ...]  # without the host name label
    taints: tuple[Taint, ...]
    named: bool  # its nodes carry the host name label (a new one gets its own name there)
    example: str
    count: int

    def node(self, name: str) -> NodeRecord:
        labels = dict(self.labels)
        if self.named:
            labels[HOSTNAME] = name
        return NodeRecord(name, dict(self.allocatable), labels, self.taints)

    def to_json(self) -> dict[str, Any]:
        return {"like": self.example, "nodesOfThisShape": self.count, "allocatable": describe(dict(self.allocatable)),
                "labels": dict(self.labels), **({"taints": [f"{t.key}={t.value}:{t.effect}" for t in self.taints]}
                                                if self.taints else {})}


@dataclass(frozen=True, slots=True)
class Growth:
    """``nodes`` new nodes of ``shape`` complete the plan, which then is ``placement`` (its new nodes
    named ``new-...``); ``tried`` of ``shapes`` shapes were planned."""

    shape: NodeShape
    nodes: int
    placement: TopologyPlan
    tried: int
    shapes: int

    def to_json(self) -> dict[str, Any]:
        domain = self.placement.domain
        return {"nodes": self.nodes, "shape": self.shape.to_json(),
                "domain": str(domain) if domain is not None and domain.keys else None,
                "shapesTried": self.tried, "shapes": self.shapes}


def shapes(nodes: Iterable[NodeRecord]) -> list[NodeShape]:
    """The cluster's node shapes (cordoned nodes are not copied), most common first, then by example name."""
    found: dict[tuple[tuple[tuple[str, int], ...], tuple[tuple[str, str], ...], tuple[Taint, ...], bool],
                list[str]] = {}
    for node in nodes:
        if node.unschedulable:
            continue
        labels = tuple(sorted((k, v) for k, v in node.labels.items() if k != HOSTNAME))
        key = (tuple(sorted(node.allocatable.items())), labels, node.taints, HOSTNAME in node.labels)
        found.setdefault(key, []).append(node.name)
    out = [NodeShape(allocatable, labels, taints, named, min(names), len(names))
           for (allocatable, labels, taints, named), names in found.items()]
    return sorted(out, key=lambda s: (-s.count, s.example))


def _new_names(taken: Mapping[str, object] | set[str], count: int) -> list[str]:
    names: list[str] = []
    index = 0
    while len(names) < count:
        index += 1
        name = f"{NEW_NODE_PREFIX}{index}"
        if name not in taken:
            names.append(name)
    return names


def smallest_growth(chosen: Sequence[PodRecord], pending: Sequence[PodRecord], nodes: Sequence[NodeRecord],
                    free_of: Callable[[NodeRecord], Resources], free_cpu: Callable[[NodeRecord], int],
                    constraint: TopologyConstraint, levels: Sequence[str] = (),
                    bound_nodes: Sequence[NodeRecord] = ()) -> Growth | None:
    """The fewest new nodes of one existing shape after which ``chosen`` are placed whole (None: no shape
    tried does it, or the cluster has no node to copy). The count is found by doubling then halving, so
    it is the smallest that completes the plan if adding a node never undoes a complete plan (first fit
    does not promise it; a smaller count may exist)."""
    if not chosen:
        return None
    known = {node.name for node in nodes}
    all_shapes = shapes(nodes)
    useful = _distinct([s for s in all_shapes if _holds_one(chosen, s)], chosen, constraint, levels)
    # The existing nodes' free capacity is the same in every plan tried: read it once.
    base_cpu = {node.name: free_cpu(node) for node in nodes}
    base_free: dict[str, Resources] = {}

    def existing_free(node: NodeRecord) -> Resources:
        found = base_free.get(node.name)
        if found is None:
            found = base_free[node.name] = free_of(node)
        return found  # the planner copies what it is given before changing it

    def cpu_of(node: NodeRecord) -> int:
        return base_cpu[node.name]

    ranked = sorted(useful, key=lambda s: (_cpu_bound(s, chosen, nodes, cpu_of, constraint), -s.count, s.example))
    best: Growth | None = None
    tried = 0
    names = _new_names(known, len(chosen))
    for shape in ranked[:MAX_SHAPES]:
        if best is not None and _cpu_bound(shape, chosen, nodes, cpu_of, constraint) >= best.nodes:
            continue
        tried += 1

        def place(count: int, shape: NodeShape = shape) -> TopologyPlan:
            added = [shape.node(name) for name in names[:count]]
            extra = {node.name: node for node in added}

            def free(node: NodeRecord) -> Resources:
                return dict(node.allocatable) if node.name in extra else existing_free(node)

            cpu = FreeCpu({**base_cpu, **{node.name: node.allocatable.get(CPU, 0) for node in added}})
            return domains.place_gang(chosen, pending, [*nodes, *added], free, cpu, constraint, levels, bound_nodes)

        limit = len(chosen) if best is None else best.nodes - 1
        found = _smallest(place, limit)
        if found is not None:
            best = Growth(shape, found[0], found[1], tried, len(all_shapes))
    if best is not None:
        return Growth(best.shape, best.nodes, best.placement, tried, len(all_shapes))
    return None


def _smallest(place: Callable[[int], TopologyPlan], limit: int) -> tuple[int, TopologyPlan] | None:
    """The smallest count in 1..``limit`` whose plan completes, by doubling then halving (None: not even
    ``limit``)."""
    if limit < 1:
        return None
    low, high, plan = 0, 1, None
    while True:
        trial = place(high)
        if trial.plan.complete:
            plan = trial
            break
        if high >= limit:
            return None
        low, high = high, min(high * 2, limit)
    while high - low > 1:
        middle = (low + high) // 2
        trial = place(middle)
        if trial.plan.complete:
            high, plan = middle, trial
        else:
            low = middle
    return high, plan


def _distinct(candidates: Sequence[NodeShape], chosen: Sequence[PodRecord], constraint: TopologyConstraint,
              levels: Sequence[str]) -> list[NodeShape]:
    """``candidates`` less the shapes a plan cannot tell from one before them: the same allocatable and
    taints, the same members placeable on them, the same values of the labels that make topology domains
    (none without a constraint). Many shapes differing by a label nothing selects cost one search."""
    keys = () if constraint.empty else tuple(sorted({constraint.required, constraint.preferred, *levels} - {""}))
    placements = list(dict.fromkeys(pod_placement(p) for p in chosen))
    kept: dict[tuple[object, ...], NodeShape] = {}
    for shape in candidates:
        node = shape.node(NEW_NODE_PREFIX)
        labels = dict(shape.labels)
        sign = (shape.allocatable, shape.taints, tuple(placement_failure(p, node) is None for p in placements),
                tuple(labels.get(key) for key in keys if key != HOSTNAME))
        kept.setdefault(sign, shape)
    return list(kept.values())


def _holds_one(chosen: Sequence[PodRecord], shape: NodeShape) -> bool:
    """Whether an empty node of ``shape`` could hold one of the members (else it cannot help)."""
    node = shape.node("shape")
    return any(placement_failure(pod_placement(p), node) is None and copies(p.requests, node.allocatable) > 0
               for p in chosen)


def _cpu_bound(shape: NodeShape, chosen: Sequence[PodRecord], nodes: Sequence[NodeRecord],
               free_cpu: Callable[[NodeRecord], int], constraint: TopologyConstraint) -> int:
    """A guess at the new nodes of ``shape`` needed, from cpu alone: the members' cpu less what is free in
    the domain a new node would join (its required key's, else the cluster), over one node's cpu."""
    demand = sum(p.requests.get(CPU, 0) for p in chosen)
    labels = dict(shape.labels)
    key = constraint.required
    if key and key not in labels:
        return 1 << 30  # a new node of this shape is in no domain of the required key
    within = [n for n in nodes if not key or n.labels.get(key) == labels.get(key)]
    free = sum(max(free_cpu(n), 0) for n in within)
    per_node = dict(shape.allocatable).get(CPU, 0)
    if demand <= free:
        return 1
    return -(-(demand - free) // per_node) if per_node > 0 else 1 << 30

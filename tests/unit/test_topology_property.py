"""Topology placement properties (issue 12), for random clusters, gangs, constraints and level orders.

- a plan under a required key never leaves one domain of that key (the bound members' one, if any);
- no plan over-commits a node: the slots on a node never exceed what ``free_of`` gave for it;
- the domain chosen is at the first level of the ladder (for a preferred key: the narrowest level)
  at which some domain can hold the gang, and the best fit there: checked against a brute-force
  reference that plans *every* domain of every level with the plain planner (no cpu pre-filter).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.cluster.topology_constraints import HOSTNAME, TopologyConstraint
from extender.gangs.domains import ACROSS, Domain, ladder, place
from extender.gangs.planner import plan
from extender.model.cluster import NodeRecord, PodRecord, Taint
from extender.model.quantity import Resources

ZONE, BLOCK, RACK = "zone", "example.com/block", "example.com/rack"
GI = 2**30
TAINT = Taint("dedicated", "x", "NoSchedule")
Cluster = tuple[list[NodeRecord], dict[str, Resources]]


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    nodes, free = [], {}
    for i in range(draw(st.integers(0, 28))):
        name = f"n{i:02d}"
        zone, block, rack = draw(st.sampled_from("ab")), draw(st.sampled_from("12")), draw(st.sampled_from("xy"))
        labels = {ZONE: zone, BLOCK: zone + block, RACK: zone + block + rack, HOSTNAME: name}
        for key in (ZONE, BLOCK, RACK):
            if draw(st.integers(0, 9)) == 0:
                del labels[key]  # some nodes lack a level's label
        if draw(st.integers(0, 19)) == 0:
            labels[RACK] = "x"  # a rack value shared across blocks
        taints = (TAINT,) if draw(st.integers(0, 7)) == 0 else ()
        nodes.append(NodeRecord(name, {"cpu": 8000, "memory": 32 * GI, "pods": 110}, labels, taints))
        node_free: Resources = {
            "cpu": draw(st.sampled_from([-1000, 0, 1000, 2000, 3000, 4000, 8000])),
            "memory": draw(st.sampled_from([0, 2 * GI, 8 * GI, 32 * GI])),
            "pods": draw(st.sampled_from([0, 1, 3, 110])),
        }
        free[name] = {k: v for k, v in node_free.items() if v}
    return nodes, free


@st.composite
def gangs(draw: st.DrawFn) -> list[PodRecord]:
    members = []
    for s in range(draw(st.integers(1, 2))):
        requests = {"cpu": draw(st.sampled_from([0, 1000, 2000, 4000])),
                    "memory": draw(st.sampled_from([0, GI, 4 * GI])), "pods": 1}
        spec: dict[str, Any] = {}
        if draw(st.booleans()):
            spec["tolerations"] = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
        if draw(st.integers(0, 5)) == 0:
            spec["nodeSelector"] = {ZONE: "a"}
        for i in range(draw(st.integers(1, 5))):
            members.append(PodRecord(f"u{s}{i}", "ml", f"m{s}-{i}", "", {k: v for k, v in requests.items() if v},
                                     None, spec=spec))
    return members


KEYS = st.sampled_from(["", "", ZONE, BLOCK, RACK, HOSTNAME])
LEVEL_ORDERS = st.sampled_from([(), (ZONE, BLOCK, RACK), (ZONE, RACK), (BLOCK, RACK, HOSTNAME), (ZONE,)])


def cpu_of(free: dict[str, Resources], node: NodeRecord) -> int:
    return free[node.name].get("cpu", 0)


def reference(members: list[PodRecord], nodes: list[NodeRecord], free: dict[str, Resources],
              rungs: list[tuple[str, ...]], bound: list[NodeRecord]) -> tuple[int, Domain] | None:
    """(ladder index, domain) of the first level where some domain holds the whole gang, best fit first."""
    for index, rung in enumerate(rungs):
        if not rung:
            complete = plan(members, nodes, lambda n: free[n.name]).complete
            return (index, ACROSS) if complete else None
        domains: dict[tuple[str, ...], list[NodeRecord]] = {}
        for node in nodes:
            if all(key in node.labels for key in rung):
                domains.setdefault(tuple(node.labels[key] for key in rung), []).append(node)
        fitting = []
        for values, domain_nodes in domains.items():
            if not all(b in domain_nodes for b in bound):
                continue  # the whole gang, bound members included, must be in the domain
            if plan(members, domain_nodes, lambda n: free[n.name]).complete:
                fitting.append((sum(max(cpu_of(free, n), 0) for n in domain_nodes), values))
        if fitting:
            return index, Domain(rung, min(fitting)[1])
    return None


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), gangs(), KEYS, KEYS, LEVEL_ORDERS, st.data())
def test_topology_placement_properties(cluster: Cluster, members: list[PodRecord], required: str, preferred: str,
                                       levels: tuple[str, ...], data: st.DataObject) -> None:
    nodes, free = cluster
    picks = data.draw(st.lists(st.integers(0, len(nodes) - 1), max_size=2, unique=True)) if nodes else []
    bound = [nodes[i] for i in picks]
    constraint = TopologyConstraint(required, preferred)
    result = place(members, nodes, lambda n: free[n.name], lambda n: cpu_of(free, n), constraint, levels, bound)

    # no plan over-commits a node
    for node, totals in result.plan.per_node().items():
        for name, amount in totals.items():
            assert amount <= free[node].get(name, 0), (node, name, amount, free[node])

    # a required plan never leaves one domain (the bound members' one)
    if required:
        by_name = {n.name: n for n in nodes}
        placed = [by_name[node] for node, _ in result.plan.slots]
        values = {n.labels.get(required) for n in placed + (bound if result.domain is not None else [])}
        assert None not in values and len(values) <= 1, values
        if result.domain is not None:
            assert result.domain.keys[0] == required

    # the first level of the ladder (the narrowest, for a preferred key) where a domain holds the gang;
    # the best fit there
    rungs = ladder(constraint, levels)
    if preferred and not required:  # from the preferred key's level to each wider one, then across domains
        order = [*levels, HOSTNAME] if HOSTNAME not in levels else list(levels)
        narrow_to_wide = order[:order.index(preferred) + 1][::-1] if preferred in order else [preferred]
        assert rungs == [(key,) for key in narrow_to_wide] + [()]
    expected = reference(members, nodes, free, rungs, bound)
    if expected is None:
        assert result.domain is None and not result.plan.complete
    else:
        index, domain = expected
        assert result.domain == domain
        assert result.plan.complete
        assert result.first_choice == (index == 0)
        inside = {n.name for n in nodes
                  if all(n.labels.get(k) == v for k, v in zip(domain.keys, domain.values, strict=True))}
        assert {node for node, _ in result.plan.slots} <= inside

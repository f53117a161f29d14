"""planner.plan gives the same plan as the straightforward planner, while building only the free capacity
of the nodes it visits.

``reference_plan`` below is the planner as it was before ``plan`` learned to order nodes by a cheap
free-cpu key and to build a node's free capacity only on first visit: it copies every node's free
capacity up front. Hypothesis draws clusters (free capacity that may be negative, taints, zones) and
gangs (several shapes, cpu-less members, zone selectors, tolerations) and checks that both give the
same slots, the same unplaced members and the same blocking reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.cluster.fit import placement_failure
from extender.gangs import domains
from extender.gangs.planner import FreeCpu, Plan, _Shape, _shapes, copies, plan
from extender.model.cluster import NodeRecord, PodRecord, Taint
from extender.model.quantity import PODS, Resources, add_into, describe

GI = 2**30
GPU = "nvidia.com/gpu"


# ------------------------------------------------------------------------------ the reference
def reference_plan(members: Sequence[PodRecord], nodes: Iterable[NodeRecord],
                   free_of: Callable[[NodeRecord], Resources]) -> Plan:
    node_list = list(nodes)
    free = {node.name: dict(free_of(node)) for node in node_list}
    order = sorted(node_list, key=lambda n: (free[n.name].get("cpu", 0), n.name))
    slots: list[tuple[str, Resources]] = []
    unplaced: list[PodRecord] = []
    blocking = ""
    for shape in _shapes(members):
        remaining = list(shape.pods)
        for node in order:
            if not remaining:
                break
            if placement_failure(shape.placement, node) is not None:
                continue
            count = min(copies(shape.requests, free[node.name]), len(remaining))
            for _ in range(count):
                remaining.pop()
                slots.append((node.name, shape.requests))
                add_into(free[node.name], shape.requests, -1)
        if remaining:
            unplaced.extend(remaining)
            if not blocking:
                blocking = reference_blocking_reason(shape, node_list, free)
    return Plan(tuple(slots), tuple(unplaced), blocking)


def reference_blocking_reason(shape: _Shape, nodes: Sequence[NodeRecord], free: Mapping[str, Resources]) -> str:
    eligible = [n for n in nodes if placement_failure(shape.placement, n) is None]
    if not eligible:
        return "no node matches its nodeSelector, affinity and tolerations"
    short: Resources = {}
    for name, amount in shape.requests.items():
        if name == PODS:
            continue
        best = max(free[n.name].get(name, 0) for n in eligible)
        if amount > best:
            short[name] = amount - best
    if short:
        return f"no node has {describe({k: shape.requests[k] for k in short})} free " \
               f"(largest free falls short by {describe(short)})"
    return f"no node has {describe(shape.requests)} free at once"


# ------------------------------------------------------------------------------ the strategies
TAINT = Taint("dedicated", "contention", "NoSchedule")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeRecord], dict[str, Resources]]:
    count = draw(st.integers(0, 24))
    nodes, free = [], {}
    for i in range(count):
        zone = draw(st.sampled_from(["a", "b"]))
        tainted = draw(st.booleans()) and draw(st.booleans())
        allocatable = {"cpu": 8000, "memory": 32 * GI, "pods": 110}
        nodes.append(NodeRecord(f"node-{i:02d}", allocatable, {"zone": zone}, (TAINT,) if tainted else (),
                                draw(st.integers(0, 9)) == 0))
        node_free: Resources = {
            # coarse values make ties (same free cpu: ordered by name) and exact fits common
            "cpu": draw(st.sampled_from([-1000, 0, 500, 1000, 2000, 3000, 4000, 6000, 8000])),
            "memory": draw(st.sampled_from([0, GI, 4 * GI, 8 * GI, 16 * GI, 32 * GI])),
            "pods": draw(st.sampled_from([0, 1, 2, 110])),
        }
        if draw(st.booleans()):
            node_free[GPU] = draw(st.integers(0, 4))
        free[f"node-{i:02d}"] = {k: v for k, v in node_free.items() if v}  # like add_into: no zeros
    return nodes, free


@st.composite
def gangs(draw: st.DrawFn) -> list[PodRecord]:
    shapes = draw(st.lists(st.fixed_dictionaries({
        "cpu": st.sampled_from([0, 250, 1000, 2000, 3000, 8000]),
        "memory": st.sampled_from([0, GI, 4 * GI, 16 * GI]),
        "gpu": st.sampled_from([0, 0, 1, 2]),
        "zone": st.sampled_from([None, "a", "b"]),
        "tolerates": st.booleans(),
        "count": st.integers(1, 6),
    }), min_size=1, max_size=3))
    members = []
    for s, shape in enumerate(shapes):
        requests = {"cpu": shape["cpu"], "memory": shape["memory"], "pods": 1, GPU: shape["gpu"]}
        requests = {k: v for k, v in requests.items() if v}
        spec: dict[str, Any] = {}
        if shape["zone"]:
            spec["nodeSelector"] = {"zone": shape["zone"]}
        if shape["tolerates"]:
            spec["tolerations"] = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
        for i in range(shape["count"]):
            name = f"m-{s}-{i}"
            members.append(PodRecord(f"uid-{name}", "default", name, "", requests, None, spec=spec))
    return members


# ------------------------------------------------------------------------------ the properties
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), gangs())
def test_plan_matches_the_reference(cluster: tuple[list[NodeRecord], dict[str, Resources]],
                                    members: list[PodRecord]) -> None:
    nodes, free = cluster
    visited: list[str] = []

    def free_of(node: NodeRecord) -> Resources:
        visited.append(node.name)
        return free[node.name]

    expected = reference_plan(members, nodes, lambda node: free[node.name])
    assert plan(members, nodes, free_of, lambda node: free[node.name].get("cpu", 0)) == expected
    assert len(visited) == len(set(visited)), "a node's free capacity was built twice"
    assert plan(members, nodes, lambda node: free[node.name]) == expected  # no cheap key given
    by_name = FreeCpu({n.name: free[n.name].get("cpu", 0) for n in nodes})
    assert plan(members, nodes, lambda node: free[node.name], by_name) == expected  # the key as a mapping
    keys = sorted((cpu, name) for name, cpu in by_name.items())
    indexed = FreeCpu(by_name, lambda least: iter([n for c, n in keys if least <= 0 or c >= least]),
                      {n.name: n for n in nodes})
    assert plan(members, nodes, lambda node: free[node.name], indexed) == expected  # the order from an index
    lazy = FreeCpu(None, indexed.ordered, indexed.records, cpu_of=by_name.__getitem__, size=len(nodes))
    assert plan(members, nodes, lambda node: free[node.name], lazy) == expected  # each node's cpu read when asked
    assert plan(members, nodes[1:], lambda node: free[node.name], indexed) == reference_plan(
        members, nodes[1:], lambda node: free[node.name])  # a subset of the nodes: the index is not used
    assert all(free[n.name] == dict(free[n.name]) for n in nodes)  # the caller's dicts are not modified


def test_plan_builds_free_capacity_only_for_the_nodes_it_visits() -> None:
    """1,000 nodes, most of them too full for a member: the cheap key passes over them."""
    nodes = [NodeRecord(f"node-{i:04d}", {"cpu": 8000, "memory": 32 * GI, "pods": 110}, {}) for i in range(1000)]
    free = {n.name: {"cpu": 500 if i < 900 else 8000, "memory": 32 * GI, "pods": 100} for i, n in enumerate(nodes)}
    members = [PodRecord(f"uid-{i}", "default", f"m-{i}", "", {"cpu": 2000, "memory": GI, "pods": 1}, None)
               for i in range(8)]
    visited: list[str] = []

    def free_of(node: NodeRecord) -> Resources:
        visited.append(node.name)
        return free[node.name]

    result = plan(members, nodes, free_of, lambda node: free[node.name]["cpu"])
    assert result == reference_plan(members, nodes, lambda node: free[node.name])
    assert result.complete and result.per_node() == {"node-0900": {"cpu": 8000, "memory": 4 * GI, "pods": 4},
                                                     "node-0901": {"cpu": 8000, "memory": 4 * GI, "pods": 4}}
    assert visited == ["node-0900", "node-0901"]


def test_a_free_cpu_read_when_asked_reads_only_the_nodes_the_plan_walks() -> None:
    """Admission's key (``GangPlacement.free_cpu_for``): with the nodes' order from the mirror's index, a gang
    that fits the first nodes of 1,000 has the free cpu of those nodes computed, not of every node."""
    nodes = [NodeRecord(f"node-{i:04d}", {"cpu": 8000, "memory": 32 * GI, "pods": 110}, {}) for i in range(1000)]
    cpu = {n.name: 8000 - i for i, n in enumerate(nodes)}  # node-0999 has the least free cpu: it comes first
    members = [PodRecord(f"uid-{i}", "default", f"m-{i}", "", {"cpu": 2000, "memory": GI, "pods": 1}, None)
               for i in range(8)]
    asked: list[str] = []

    def cpu_of(name: str) -> int:
        asked.append(name)
        return cpu[name]

    order = [n.name for n in reversed(nodes)]
    lazy = FreeCpu(None, lambda least: iter(order), {n.name: n for n in nodes}, cpu_of=cpu_of, size=len(nodes))
    result = plan(members, nodes, lambda node: {**node.allocatable, "cpu": cpu[node.name]}, lazy)
    assert result.complete and set(result.per_node()) == {"node-0999", "node-0998", "node-0997"}
    assert len(asked) <= 4 and len(asked) == len(set(asked)), asked
    with pytest.raises(KeyError):
        lazy["no-such-node"]


def test_a_free_cpu_read_when_asked_makes_every_entry_at_once_for_a_reader_of_them_all() -> None:
    """A plan over a subset of the nodes (a heap of them all), a topology level's domains (every labelled
    node) and a walk that goes past 1/8 of the nodes (a gang that does not fit) take every node's free cpu
    in one pass (``every``) instead of a call per node."""
    nodes = [NodeRecord(f"node-{i:04d}", {"cpu": 8000, "memory": 32 * GI, "pods": 110}, {"rack": f"r{i % 10}"})
             for i in range(1000)]
    cpu = {n.name: 8000 - i for i, n in enumerate(nodes)}
    records = {n.name: n for n in nodes}
    asked: list[str] = []
    passes: list[int] = []

    def lazy() -> FreeCpu:
        asked.clear()
        passes.clear()
        return FreeCpu(None, lambda least: iter([n.name for n in reversed(nodes)]), records,
                       cpu_of=lambda name: asked.append(name) or cpu[name], size=len(nodes),
                       every=lambda: passes.append(1) or dict(cpu))

    def free_of(node: NodeRecord) -> Resources:
        return {**node.allocatable, "cpu": cpu[node.name]}

    fits = [PodRecord(f"uid-{i}", "default", f"m-{i}", "", {"cpu": 2000, "memory": GI, "pods": 1}, None)
            for i in range(8)]
    assert plan(fits, nodes[1:], free_of, lazy()).complete
    assert passes == [1] and asked == []
    domains.group(nodes, ("rack",), lazy())
    assert passes == [1] and asked == []
    too_big = [PodRecord("uid-big", "default", "big", "", {"cpu": 9000, "memory": GI, "pods": 1}, None)]
    assert not plan(too_big, nodes, free_of, lazy()).complete
    assert passes == [1] and len(asked) <= len(nodes) // 8 + 1

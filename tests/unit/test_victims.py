"""Choosing preemption victims for a gang (gangs/victims.py).

Two racks of two nodes (8 cpu each); every running pod is in a unit (a single pod or a whole gang) or
is a high-priority pod that is never a candidate; the free capacity is allocatable less what runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from extender.cluster.topology_constraints import HOSTNAME, NONE, TopologyConstraint
from extender.gangs import domains as gt
from extender.gangs.victims import NO_VICTIMS, VictimChoice, VictimUnit, choose_victims, frees
from extender.model.cluster import NodeRecord, PodRecord, Taint
from extender.model.gang import GangKey, GroupKind, GroupRef
from extender.model.quantity import Resources, add_into

RACK = "example.com/rack"
CPU = 1000
HIGH = 100  # the preemptor's priority
TAINT = Taint("dedicated", "x", "NoSchedule")


def node(name: str, rack: str, taints: tuple[Taint, ...] = ()) -> NodeRecord:
    return NodeRecord(name, {"cpu": 8 * CPU, "pods": 110}, {RACK: rack, HOSTNAME: name}, taints)


NODES = [node("r1-n0", "r1"), node("r1-n1", "r1"), node("r2-n0", "r2"), node("r2-n1", "r2")]


def pod(name: str, on: str, cpu: int, priority: int = 0, gang: GangKey | None = None) -> PodRecord:
    return PodRecord(f"uid-{name}", "work", name, on, {"cpu": cpu * CPU, "pods": 1}, gang, priority=priority)


def single(name: str, on: str, cpu: int, priority: int, evictable: bool = True, why_not: str = "") -> VictimUnit:
    return VictimUnit(f"pod work/{name}", priority, (pod(name, on, cpu, priority),), evictable, why_not)


def gang(name: str, placed: Sequence[tuple[str, int]], priority: int) -> VictimUnit:
    key = GangKey(GroupRef(GroupKind.ANNOTATION, "work", name))
    pods = tuple(pod(f"{name}-{i}", on, cpu, priority, key) for i, (on, cpu) in enumerate(placed))
    return VictimUnit(f"gang work/{name}", priority, pods)


def members(count: int, cpu: int) -> list[PodRecord]:
    return [PodRecord(f"uid-m{i}", "ml", f"m{i}", "", {"cpu": cpu * CPU, "pods": 1}, None, priority=HIGH)
            for i in range(count)]


def choose(preemptor: list[PodRecord], units: Sequence[VictimUnit], others: Iterable[PodRecord] = (),
           nodes: Sequence[NodeRecord] = NODES, constraint: TopologyConstraint = NONE,
           bound: Sequence[NodeRecord] = ()) -> VictimChoice | str:
    used: dict[str, Resources] = {}
    for running in [*(p for u in units for p in u.pods), *others]:
        add_into(used.setdefault(running.node_name, {}), running.requests)

    def free_of(n: NodeRecord) -> Resources:
        room = dict(n.allocatable)
        add_into(room, used.get(n.name, {}), -1)
        return room

    return choose_victims(preemptor, preemptor, nodes, free_of, constraint, (RACK,), bound, units, HIGH)


def victims(result: VictimChoice | str) -> list[str]:
    assert isinstance(result, VictimChoice), result
    assert result.placement.plan.complete
    return [unit.key for unit in result.victims]


def test_no_victims_when_the_free_capacity_suffices() -> None:
    units = [single("low", "r1-n0", 8, 0)]
    result = choose(members(1, 8), units)  # three nodes are empty
    assert isinstance(result, VictimChoice)
    assert result.victims == () and result.freed == {}
    assert result.placement.plan.complete


def test_a_gang_is_evicted_whole_never_split() -> None:
    # Every node is full; one 4-cpu member needs half of one node, but the only victim is a gang on all four.
    units = [gang("batch", [(n.name, 8) for n in NODES], 1)]
    result = choose(members(1, 4), units)
    assert victims(result) == ["gang work/batch"]
    assert isinstance(result, VictimChoice)
    assert result.freed == {n.name: {"cpu": 8 * CPU, "pods": 1} for n in NODES}  # all of it, not one node


def test_the_lowest_priority_is_chosen_before_a_higher_one() -> None:
    units = [single("a-dear", "r1-n0", 8, 50), single("z-cheap", "r1-n1", 8, 1),
             single("b", "r2-n0", 8, 60), single("c", "r2-n1", 8, 70)]
    assert victims(choose(members(1, 8), units)) == ["pod work/z-cheap"]


def test_a_single_pod_is_preferred_to_a_gang_of_the_same_priority() -> None:
    units = [gang("a-gang", [("r1-n0", 4), ("r1-n0", 4)], 5), single("z-pod", "r1-n1", 8, 5),
             single("x", "r2-n0", 8, 90), single("y", "r2-n1", 8, 90)]
    assert victims(choose(members(1, 8), units)) == ["pod work/z-pod"]


def test_a_victim_the_plan_can_do_without_is_left_out() -> None:
    # Priority order adds the 2-cpu pod first, then the 6-cpu one beside it; 6 cpu is all it needs.
    units = [single("small", "r1-n0", 2, 1), single("big", "r1-n0", 6, 2),
             single("x", "r1-n1", 8, 90), single("y", "r2-n0", 8, 90), single("z", "r2-n1", 8, 90)]
    assert victims(choose(members(1, 6), units)) == ["pod work/big"]


def test_equal_or_higher_priority_is_never_chosen() -> None:
    units = [single("same", "r1-n0", 8, HIGH), single("higher", "r1-n1", 8, HIGH + 1),
             single("x", "r2-n0", 8, HIGH), single("lower", "r2-n1", 8, HIGH - 1)]
    assert victims(choose(members(1, 8), units)) == ["pod work/lower"]
    result = choose(members(2, 8), units)
    assert isinstance(result, str)
    assert result.startswith("even evicting every eligible unit (1 units, 1 pods) leaves 1/2 members placed")
    only_equal = choose(members(1, 8), units[:3], others=[pod("hi", "r2-n1", 8, HIGH)])
    assert only_equal == f"{NO_VICTIMS}: 3 running unit(s) have priority {HIGH} or higher"


def test_an_unevictable_unit_is_never_chosen() -> None:
    units = [single("guarded", "r1-n0", 8, 0, evictable=False, why_not="PodDisruptionBudget web allows 0"),
             single("dear", "r1-n1", 8, 50), single("x", "r2-n0", 8, 90), single("y", "r2-n1", 8, 90)]
    assert victims(choose(members(1, 8), units)) == ["pod work/dear"]
    result = choose(members(1, 8), units[:1], others=[pod(n.name, n.name, 8, HIGH) for n in NODES[1:]])
    assert result == f"{NO_VICTIMS}: 1 may not be evicted (pod work/guarded: PodDisruptionBudget web allows 0)"


def test_victims_in_one_rack_when_the_preemptor_needs_one_rack() -> None:
    # The two cheapest victims are in different racks; r1 also runs a pod it may not evict.
    units = [single("cheap-r1", "r1-n0", 8, 1), single("cheap-r2", "r2-n0", 8, 1), single("next-r2", "r2-n1", 8, 2)]
    others = [pod("keep", "r1-n1", 8, HIGH)]
    assert sorted(victims(choose(members(2, 8), units, others))) == ["pod work/cheap-r1", "pod work/cheap-r2"]
    result = choose(members(2, 8), units, others, constraint=TopologyConstraint(required=RACK))
    assert sorted(victims(result)) == ["pod work/cheap-r2", "pod work/next-r2"]
    assert isinstance(result, VictimChoice)
    assert {slot_node for slot_node, _ in result.placement.plan.slots} == {"r2-n0", "r2-n1"}
    assert str(result.placement.domain) == f"{RACK}=r2"


def test_bound_members_pin_the_rack_the_victims_come_from() -> None:
    units = [single("cheap-r2", "r2-n0", 8, 1), single("dear-r1", "r1-n0", 8, 50)]
    others = [pod("keep-1", "r1-n1", 8, HIGH), pod("keep-2", "r2-n1", 8, HIGH)]
    free = choose(members(1, 8), units, others, constraint=TopologyConstraint(required=RACK))
    assert victims(free) == ["pod work/cheap-r2"]
    pinned = choose(members(1, 8), units, others, constraint=TopologyConstraint(required=RACK), bound=[NODES[1]])
    assert victims(pinned) == ["pod work/dear-r1"]


def test_a_unit_only_on_nodes_the_preemptor_cannot_use_is_no_candidate() -> None:
    nodes = [node("tainted", "r1", (TAINT,)), node("plain", "r1")]
    units = [single("cheap", "tainted", 8, 0), single("dear", "plain", 8, 50)]
    assert victims(choose(members(1, 8), units, nodes=nodes)) == ["pod work/dear"]
    result = choose(members(1, 8), units[:1], others=[pod("hi", "plain", 8, HIGH)], nodes=nodes)
    assert result == f"{NO_VICTIMS}: 1 run only on nodes none of the members can use"


def test_a_reason_when_no_victim_set_works() -> None:
    units = [single(n.name, n.name, 8, 1) for n in NODES]
    result = choose(members(1, 9), units)  # 9 cpu: no node holds it even empty
    assert isinstance(result, str)
    assert result == ("even evicting every eligible unit (4 units, 4 pods) leaves 0/1 members placed: "
                      "no node has cpu=9 free (largest free falls short by cpu=1)")
    full = [pod(n.name, n.name, 8, HIGH) for n in NODES]
    assert choose(members(1, 8), [], others=full) == f"{NO_VICTIMS}: no running units"


def test_frees_sums_the_bound_pods_of_each_unit_per_node() -> None:
    units = [gang("g", [("r1-n0", 2), ("r1-n0", 3), ("r2-n0", 1), ("", 4)], 1), single("p", "r2-n0", 1, 1)]
    assert frees(units) == {"r1-n0": {"cpu": 5 * CPU, "pods": 2}, "r2-n0": {"cpu": 2 * CPU, "pods": 2}}
    assert frees([]) == {}


def test_inputs_are_not_mutated() -> None:
    units = [single("small", "r1-n0", 2, 1), single("big", "r1-n0", 6, 2), single("x", "r1-n1", 8, 90)]
    preemptor = members(2, 6)
    others = [pod("hi-0", "r2-n0", 8, HIGH), pod("hi-1", "r2-n1", 8, HIGH)]
    # repr, not deepcopy: the records are frozen (compiled by mypyc, a frozen dataclass cannot be deep-copied);
    # repr shows every list and dict inside them, the parts that could be mutated
    before = repr((units, preemptor, NODES, others))
    assert victims(choose(preemptor, units, others)) == ["pod work/big", "pod work/x"]
    assert repr((units, preemptor, NODES, others)) == before


def test_a_victim_kept_before_a_later_one_was_left_out_is_tried_again() -> None:
    """First fit's outcome need not grow with capacity. Members need (2 cpu, 1Gi) and (1 cpu, 4Gi); n0
    has (1 cpu, 4Gi) free. Freeing p4's 1 cpu on n0 as well lets the first member take n0, where the
    second one needed to go: with p4, p0 and p1 the plan fails, without p4 it completes. The removal
    pass keeps p2 (tried first: without it, with p4, the plan fails), then leaves out p3 and p4; p2 is
    tried again against what is left, and can be spared."""
    gi = 2**30
    nodes = [NodeRecord("n0", {"cpu": 4 * CPU, "memory": 6 * gi, "pods": 110}, {}),
             NodeRecord("n1", {"cpu": 6 * CPU, "memory": 4 * gi, "pods": 110}, {})]

    def unit(name: str, priority: int, on: str, cpu: int, memory: int) -> VictimUnit:
        requests = {k: v for k, v in {"cpu": cpu * CPU, "memory": memory * gi}.items() if v} | {"pods": 1}
        return VictimUnit(f"pod work/{name}", priority, (PodRecord(name, "work", name, on, requests, None),))

    units = [unit("p0", 2, "n1", 3, 2), unit("p1", 2, "n1", 2, 3), unit("p2", 3, "n1", 1, 3),
             unit("p3", 1, "n1", 0, 0), unit("p4", 0, "n0", 1, 1), unit("p5", 3, "n0", 2, 1)]
    preemptor = [PodRecord("m0", "ml", "m0", "", {"cpu": 2 * CPU, "memory": gi, "pods": 1}, None),
                 PodRecord("m1", "ml", "m1", "", {"cpu": 1 * CPU, "memory": 4 * gi, "pods": 1}, None)]
    assert victims(choose(preemptor, units, nodes=nodes)) == ["pod work/p0", "pod work/p1"]


def test_a_few_plans_in_all_not_one_per_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    """40 full nodes in 10 racks of 4, each running ten 3-cpu single pods (400 units); 8 members of 8
    cpu need 24 victims. The prefix takes O(log units) plans, victims off the plan's nodes are left out
    at once, and a set in which some shape of the members has no room (in any rack the plan may use,
    for a required rack: the pinned one when a member is bound) is never planned (measured: 7 to 9)."""
    plans = [0]
    place_gang = gt.place_gang

    def counted(*args: Any, **kwargs: Any) -> gt.TopologyPlan:
        plans[0] += 1
        return place_gang(*args, **kwargs)

    monkeypatch.setattr(gt, "place_gang", counted)
    nodes = [NodeRecord(f"r{r}-n{n}", {"cpu": 32 * CPU, "pods": 110}, {RACK: f"r{r}", HOSTNAME: f"r{r}-n{n}"})
             for r in range(10) for n in range(4)]
    units = [single(f"{n.name}-{i}", n.name, 3, (i * 7 + len(n.name)) % 10) for n in nodes for i in range(10)]
    others = [pod(f"{n.name}-keep", n.name, 2, HIGH) for n in nodes]
    rack = TopologyConstraint(required=RACK)
    for constraint, bound, racks in ((NONE, (), {"r0", "r1"}), (rack, (), {"r0"}), (rack, (nodes[37],), {"r9"})):
        plans[0] = 0
        result = choose(members(8, 8), units, others, nodes=nodes, constraint=constraint, bound=bound)
        assert len(victims(result)) == 24
        assert isinstance(result, VictimChoice)
        assert {unit.pods[0].node_name[:2] for unit in result.victims} == racks
        assert plans[0] <= 10, (constraint, bound)

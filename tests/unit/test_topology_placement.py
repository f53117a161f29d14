"""Topology-aware placement (issue 12): the level ladder, domains, best fit, pinning, fallback, fail-fast.

A small cluster of 2 zones x 2 blocks x 2 racks x 2 nodes (8 cpu each) where each test sets the free
cpu per node; members ask for whole cpus.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from extender.cluster.topology_constraints import HOSTNAME, TopologyConstraint
from extender.gangs import domains as gt
from extender.gangs import planner
from extender.gangs.domains import ACROSS, Domain, DomainReport, ladder, never_fits, place
from extender.gangs.planner import plan
from extender.model.cluster import NodeRecord, PodRecord, Taint
from extender.model.quantity import Resources

ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "example.com/block", "example.com/rack"
LEVELS = (ZONE, BLOCK, RACK)
CPU = 1000


def cluster() -> list[NodeRecord]:
    nodes = []
    for z in "ab":
        for b in "12":
            for r in "xy":
                for n in "01":
                    name = f"{z}{b}{r}{n}"
                    nodes.append(NodeRecord(name, {"cpu": 8 * CPU, "memory": 32 * 2**30, "pods": 110},
                                            {ZONE: z, BLOCK: z + b, RACK: z + b + r, HOSTNAME: name}))
    return nodes


NODES = cluster()


def members(count: int, cpu: int = 4, prefix: str = "m") -> list[PodRecord]:
    return [PodRecord(f"uid-{prefix}{i}", "ml", f"{prefix}{i}", "", {"cpu": cpu * CPU, "pods": 1}, None)
            for i in range(count)]


def capacity(free_cpu: Mapping[str, int], default: int = 0) -> tuple[
        dict[str, Resources], list[str]]:
    """Free resources per node (cpu in whole cpus, by node name prefix) and a log of free_of calls."""
    free: dict[str, Resources] = {}
    for node in NODES:
        cpu = next((v for prefix, v in sorted(free_cpu.items(), key=lambda kv: -len(kv[0]))
                    if node.name.startswith(prefix)), default)
        free[node.name] = {"cpu": cpu * CPU, "pods": 110}
    return free, []


def run(gang: list[PodRecord], free_cpu: Mapping[str, int], constraint: TopologyConstraint,
        levels: tuple[str, ...] = LEVELS, bound: tuple[str, ...] = (), nodes: list[NodeRecord] | None = None,
        report: int = 3) -> gt.TopologyPlan:
    free, _ = capacity(free_cpu)
    by_name = {n.name: n for n in NODES}
    return place(gang, nodes or NODES, lambda n: free[n.name], lambda n: free[n.name]["cpu"], constraint, levels,
                 [by_name[b] for b in bound], report)


def required(key: str) -> TopologyConstraint:
    return TopologyConstraint(required=key)


def preferred(key: str) -> TopologyConstraint:
    return TopologyConstraint(preferred=key)


def nodes_of(result: gt.TopologyPlan) -> set[str]:
    return {node for node, _ in result.plan.slots}


# ------------------------------------------------------------------------------------ the ladder
@pytest.mark.parametrize(("constraint", "levels", "rungs"), [
    (TopologyConstraint(), LEVELS, [()]),
    (required(RACK), LEVELS, [(RACK,)]),
    (required(RACK), (), [(RACK,)]),
    (preferred(RACK), LEVELS, [(RACK,), (BLOCK,), (ZONE,), ()]),
    (preferred(BLOCK), LEVELS, [(BLOCK,), (ZONE,), ()]),
    (preferred(RACK), (), [(RACK,), ()]),  # no levels: only the constraint's key
    (preferred(HOSTNAME), LEVELS, [(HOSTNAME,), (RACK,), (BLOCK,), (ZONE,), ()]),  # hostname implied narrowest
    (preferred(HOSTNAME), (), [(HOSTNAME,), ()]),
    (preferred("other"), LEVELS, [("other",), ()]),
    (TopologyConstraint(ZONE, RACK), LEVELS, [(ZONE, RACK), (ZONE, BLOCK), (ZONE,)]),
    (TopologyConstraint(BLOCK, RACK), LEVELS, [(BLOCK, RACK), (BLOCK,)]),
    (TopologyConstraint(RACK, ZONE), LEVELS, [(RACK,)]),  # preferred wider than required: implied
    (TopologyConstraint(RACK, RACK), LEVELS, [(RACK,)]),
    (TopologyConstraint(ZONE, RACK), (), [(ZONE, RACK), (ZONE,)]),  # order unknown: both, then required
])
def test_ladder(constraint: TopologyConstraint, levels: tuple[str, ...], rungs: list[tuple[str, ...]]) -> None:
    assert ladder(constraint, levels) == rungs


# ------------------------------------------------------------------------------------ domains
def test_group_leaves_out_nodes_without_the_label_and_counts_no_negative_cpu() -> None:
    nodes = [NodeRecord("n1", {}, {RACK: "r1"}), NodeRecord("n2", {}, {RACK: "r1"}), NodeRecord("n3", {}, {}),
             NodeRecord("n4", {}, {RACK: ""}), NodeRecord("n5", {}, {RACK: "r2", ZONE: "a"})]
    cpu = {"n1": 3000, "n2": -1000, "n3": 5000, "n4": 0, "n5": 7000}
    domains, free = gt.group(nodes, (RACK,), lambda n: cpu[n.name])
    assert {v: [n.name for n in ns] for v, ns in domains.items()} == {("r1",): ["n1", "n2"], ("",): ["n4"],
                                                                      ("r2",): ["n5"]}
    assert free == {("r1",): 3000, ("",): 0, ("r2",): 7000}
    domains, free = gt.group(nodes, (ZONE, RACK), lambda n: cpu[n.name])
    assert {v: [n.name for n in ns] for v, ns in domains.items()} == {("a", "r2"): ["n5"]}
    assert str(Domain((ZONE, RACK), ("a", "r2"))) == f"{ZONE}=a, {RACK}=r2" and str(ACROSS) == "across domains"


# ------------------------------------------------------------------------------------ required
def test_required_rack_best_fit_is_the_tightest_rack_that_holds_the_gang() -> None:
    # 4 x 4 cpu: rack a1x has 6+6 (holds 2), a1y 8+8 (holds 4, 16 free), b2y 8+12 -> 20 free (holds 4)
    result = run(members(4), {"a1x": 6, "a1y": 8, "b2y0": 8, "b2y1": 12}, required(RACK))
    assert result.domain == Domain((RACK,), ("a1y",)) and result.first_choice and result.level == RACK
    assert result.plan.complete and nodes_of(result) == {"a1y0", "a1y1"}
    assert result.others == (
        DomainReport(Domain((RACK,), ("b2y",)), 2, 20 * CPU, ""),  # holds it too, with more left over
        DomainReport(Domain((RACK,), ("a1x",)), 2, 12 * CPU, "has cpu=12 free of the cpu=16 needed"),
        DomainReport(Domain((RACK,), ("a2x",)), 2, 0, "has cpu=0 free of the cpu=16 needed"),
    )
    two = run(members(2), {"a1x": 6, "a1y": 8}, required(RACK))  # a1x (12 free) holds 2 x 4 cpu; a1y too
    assert two.domain == Domain((RACK,), ("a1x",)) and two.others[0].lacks == ""
    three = run(members(3), {"a1x": 6, "a1y": 8, "b1x": 2}, required(RACK))  # 12 cpu free, but 6 per node
    assert three.domain == Domain((RACK,), ("a1y",))
    assert DomainReport(Domain((RACK,), ("a1x",)), 2, 12 * CPU, "2 of 3 members fit: no node has cpu=4 free "
                                                                "(largest free falls short by cpu=2)") in three.others


def test_required_ties_break_by_domain_value() -> None:
    result = run(members(2), {"b1y": 4, "a2x": 4, "a1x": 4}, required(RACK))
    assert result.domain == Domain((RACK,), ("a1x",))


def test_required_rack_that_no_rack_holds_waits_with_the_closest() -> None:
    result = run(members(5), {"a1x": 8, "b2y": 8, "a2": 8}, required(RACK))  # every rack holds 4; block a2 holds 8
    assert result.domain is None and not result.plan.complete and not result.first_choice
    assert len(result.plan.slots) == 4 and len(result.plan.unplaced) == 1
    assert result.plan.blocking == ("no example.com/rack domain holds all 5 of them; the roomiest, "
                                    "example.com/rack=a1x (2 nodes), has cpu=16 free of the cpu=20 needed")
    assert result.closest == DomainReport(Domain((RACK,), ("a1x",)), 2, 16 * CPU,
                                          "has cpu=16 free of the cpu=20 needed")


def test_required_nodes_without_the_label_are_not_eligible() -> None:
    unlabelled = [NodeRecord(f"bare{i}", {"cpu": 64 * CPU}, {}) for i in range(2)]
    free = {n.name: {"cpu": 64 * CPU, "pods": 110} for n in unlabelled}
    result = place(members(2), unlabelled, lambda n: free[n.name], lambda n: free[n.name]["cpu"], required(RACK))
    assert result.domain is None and result.plan.slots == ()
    assert result.plan.blocking == ("no example.com/rack domain can hold the gang: no node has the label "
                                    "example.com/rack")
    mixed = run(members(2), {"a": 8}, required("example.com/missing"))
    assert mixed.domain is None


def test_required_with_bound_members_is_pinned_to_their_domain() -> None:
    # b2y is the tightest fitting rack, but a bound member on a1x0 pins rack a1x
    result = run(members(2), {"a1x": 8, "b2y": 4}, required(RACK), bound=("a1x0",))
    assert result.domain == Domain((RACK,), ("a1x",)) and nodes_of(result) <= {"a1x0", "a1x1"}
    assert DomainReport(Domain((RACK,), ("b2y",)), 2, 8 * CPU, "does not hold the gang's bound members") \
        in result.others
    pinned_full = run(members(3), {"a1x": 4, "b2y": 8}, required(RACK), bound=("a1x0",))
    assert pinned_full.domain is None and "the roomiest, example.com/rack=a1x (2 nodes), " \
        "has cpu=8 free of the cpu=12 needed" in pinned_full.plan.blocking


def test_required_with_bound_members_in_two_domains_or_off_the_label() -> None:
    split = run(members(1), {"a": 8}, required(RACK), bound=("a1x0", "a1y0"))
    assert split.domain is None and split.plan.blocking == (
        "no example.com/rack domain can hold the gang: bound members are in two domains: example.com/rack=a1x and "
        "example.com/rack=a1y")
    bare = NodeRecord("bare", {"cpu": 8 * CPU}, {})
    free = {n.name: {"cpu": 8 * CPU, "pods": 110} for n in [*NODES, bare]}
    off = place(members(1), [*NODES, bare], lambda n: free[n.name], lambda n: free[n.name]["cpu"], required(RACK),
                bound_nodes=[bare])
    assert off.plan.blocking == ("no example.com/rack domain can hold the gang: a bound member's node bare has no "
                                 "label example.com/rack")


def test_required_skips_a_rack_its_members_cannot_run_on() -> None:
    tainted = [NodeRecord(n.name, n.allocatable, n.labels, (Taint("maintenance", "", "NoSchedule"),))
               if n.labels[RACK] == "a1x" else n for n in NODES]
    result = run(members(2), {"a1x": 4, "b1x": 8}, required(RACK), nodes=tainted)
    assert result.domain == Domain((RACK,), ("b1x",))


def test_domains_short_of_cpu_are_never_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    free, _ = capacity({"a1x": 1, "a1y": 1, "b1x": 8})
    planned: list[list[str]] = []

    def spy(gang: list[PodRecord], nodes: list[NodeRecord], *args: object) -> gt.Plan:
        planned.append([n.name for n in nodes])
        return plan(gang, nodes, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(planner, "plan", spy)
    result = place(members(2), NODES, lambda n: free[n.name], lambda n: free[n.name]["cpu"], required(RACK), report=0)
    assert result.domain == Domain((RACK,), ("b1x",))
    assert planned == [["b1x0", "b1x1"]]  # racks a1x and a1y (2 cpu free of 8) and the empty ones: not planned


# ------------------------------------------------------------------------------------ preferred
def test_preferred_rack_lands_in_a_rack_when_one_holds_the_gang() -> None:
    result = run(members(4), {"a": 8}, preferred(RACK))
    assert result.domain == Domain((RACK,), ("a1x",)) and result.first_choice


def test_preferred_rack_falls_back_to_one_block_then_one_zone_then_across() -> None:
    # every node 4 free: a rack holds 2, a block 4, a zone 8
    block = run(members(3), {"": 4}, preferred(RACK))
    assert block.domain == Domain((BLOCK,), ("a1",)) and not block.first_choice and block.level == BLOCK
    zone = run(members(6), {"": 4}, preferred(RACK))
    assert zone.domain == Domain((ZONE,), ("a",)) and zone.level == ZONE and len(nodes_of(zone)) == 6
    across = run(members(12), {"": 4}, preferred(RACK))
    assert across.domain == ACROSS and across.plan.complete and across.level == ""
    assert across.others[0] == DomainReport(Domain((ZONE,), ("a",)), 8, 32 * CPU,
                                            "has cpu=32 free of the cpu=48 needed")
    too_big = run(members(17), {"": 4}, preferred(RACK))
    assert too_big.domain is None and not too_big.plan.complete


def test_preferred_without_levels_tries_only_its_key_then_across() -> None:
    result = run(members(3), {"": 4}, preferred(RACK), levels=())
    assert result.domain == ACROSS and result.plan.complete


def test_preferred_domain_must_hold_the_bound_members_too() -> None:
    # rack b1x would hold both, but a member is bound in rack a1y, which cannot: the gang goes to block a1
    result = run(members(2), {"a1x": 4, "a1y": 2, "b1x": 8}, preferred(RACK), bound=("a1y0",))
    assert result.domain == Domain((BLOCK,), ("a1",)) and nodes_of(result) == {"a1x0", "a1x1"}


def test_required_block_preferred_rack_tries_racks_inside_one_block() -> None:
    constraint = TopologyConstraint(BLOCK, RACK)
    in_rack = run(members(2), {"": 4}, constraint)
    assert in_rack.domain == Domain((BLOCK, RACK), ("a1", "a1x")) and in_rack.first_choice
    in_block = run(members(3), {"": 4}, constraint)
    assert in_block.domain == Domain((BLOCK,), ("a1",)) and not in_block.first_choice
    nowhere = run(members(5), {"": 4}, constraint)
    assert nowhere.domain is None and "no example.com/block domain holds all 5" in nowhere.plan.blocking


def test_unconstrained_is_the_plain_planner() -> None:
    free, _ = capacity({"": 4})
    result = place(members(5), NODES, lambda n: free[n.name], lambda n: free[n.name]["cpu"], TopologyConstraint())
    assert result.plan == plan(members(5), NODES, lambda n: free[n.name])
    assert result.domain == ACROSS and result.first_choice and result.others == ()


# ------------------------------------------------------------------------------------ fail fast
def test_never_fits_names_the_largest_domain_and_what_it_lacks() -> None:
    # a rack has 2 x 8 allocatable cpu: 5 members of 4 cpu can never fit one rack
    message = never_fits(members(5), NODES, required(RACK))
    assert message == ("no example.com/rack domain can hold all 5 members even when empty; the largest, "
                       "example.com/rack=a1x (2 nodes), has cpu=16 allocatable of the cpu=20 needed")
    assert never_fits(members(4), NODES, required(RACK)) is None  # busy or not, a rack could hold it
    assert never_fits(members(5), NODES, preferred(RACK)) is None  # only required constraints fail fast
    assert never_fits(members(5), NODES, required(BLOCK)) is None
    big = NodeRecord("big", {"cpu": 64 * CPU, "pods": 110}, {RACK: "z"})
    assert never_fits(members(5), [*NODES, big], required(RACK)) is None
    assert never_fits(members(1), NODES, required("example.com/missing")) == (
        "no example.com/missing domain can hold the gang: no node has the label example.com/missing")


def test_never_fits_counts_what_does_not_fit_besides_cpu() -> None:
    gpu_nodes = [NodeRecord(f"g{i}", {"cpu": 64 * CPU, "pods": 110, "nvidia.com/gpu": 4}, {RACK: f"r{i // 2}"})
                 for i in range(4)]
    gang = [PodRecord(f"u{i}", "ml", f"g{i}", "", {"cpu": CPU, "pods": 1, "nvidia.com/gpu": 4}, None)
            for i in range(3)]
    assert never_fits(gang, gpu_nodes, required(RACK)) == (
        "no example.com/rack domain can hold all 3 members even when empty; the largest, example.com/rack=r0 "
        "(2 nodes), 2 of 3 members fit: no node has nvidia.com/gpu=4 free (largest free falls short by "
        "nvidia.com/gpu=4)")

"""The smallest fix by new nodes (``gangs.growth``) and ``explain``'s ``fix`` for a waiting gang: the
fewest nodes of a shape the cluster has, in the right domain, after which the same plan completes; the
gangs ahead, the victims, or never."""

from __future__ import annotations

from collections.abc import Sequence

from extender import explain
from extender.cluster.mirror import ClusterMirror
from extender.cluster.records import node_record, pod_record
from extender.gangs import growth
from extender.gangs.ledger import GangLedger
from extender.gangs.settings import GangSettings
from extender.model.cluster import NodeRecord, PodRecord
from extender.model.gang import NONE, PASS, GroupKind, TopologyConstraint
from tests.builders import FakeClock, node, pod
from tests.unit.test_preempting import podgroup

RACK = "example.com/rack"


def nodes(count: int, cpu: str = "4", prefix: str = "n", **labels: str) -> list[NodeRecord]:
    return [node_record(node(f"{prefix}{i}", cpu=cpu, labels={"kubernetes.io/hostname": f"{prefix}{i}", **labels}))
            for i in range(count)]


def members(count: int, cpu: str = "3", **kwargs: object) -> list[PodRecord]:
    return [pod_record(pod(f"m{i}", cpu=cpu, memory="1Mi", **kwargs)) for i in range(count)]  # type: ignore[arg-type]


def grow(chosen: Sequence[PodRecord], cluster: Sequence[NodeRecord], used: dict[str, int] | None = None,
         constraint: TopologyConstraint = NONE) -> growth.Growth | None:
    """The growth for ``chosen`` when ``used`` cpu (millicores by node) is taken."""
    taken = used or {}

    def free(n: NodeRecord) -> dict[str, int]:
        room = dict(n.allocatable)
        room["cpu"] -= taken.get(n.name, 0)
        return room
    return growth.smallest_growth(chosen, chosen, cluster, free, lambda n: free(n)["cpu"], constraint)


def test_one_node_per_member_that_finds_no_room() -> None:
    cluster = nodes(4)
    found = grow(members(4), cluster, {"n0": 4000, "n1": 4000})
    assert found is not None and found.nodes == 2, found
    assert found.shape.to_json()["allocatable"].startswith("cpu=4") and found.shape.count == 4
    assert sum(1 for name, _ in found.placement.plan.slots if name.startswith("new-")) == 2


def test_nothing_to_add_is_not_a_fix_and_a_full_cluster_needs_a_node_per_member() -> None:
    cluster = nodes(2)
    assert grow(members(2), cluster) is not None  # fits already: one node "added" is the least it tries
    found = grow(members(3), cluster, {"n0": 4000, "n1": 4000})
    assert found is not None and found.nodes == 3


def test_the_fewest_nodes_of_the_best_shape_not_of_the_most_common() -> None:
    cluster = [*nodes(6), *nodes(1, cpu="16", prefix="big")]
    used = {n.name: int(n.allocatable["cpu"]) for n in cluster}  # everything is full
    found = grow(members(5), cluster, used)
    assert found is not None and found.nodes == 1 and found.shape.example == "big0", found


def test_a_required_rack_gets_its_nodes_in_the_rack_closest_to_holding_it() -> None:
    cluster = [*nodes(2, prefix="a", **{RACK: "a"}), *nodes(3, prefix="b", **{RACK: "b"})]
    used = {"b0": 4000, "b1": 4000, "b2": 4000}  # rack a is free: 2 of 3 members fit there
    found = grow(members(3), cluster, used, TopologyConstraint(RACK))
    assert found is not None and found.nodes == 1 and dict(found.shape.labels)[RACK] == "a", found
    assert str(found.placement.domain) == f"{RACK}=a"


def test_shapes_that_cannot_hold_a_member_are_not_copied() -> None:
    tainted = [node_record(node(f"t{i}", cpu="64", taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]))
               for i in range(3)]
    found = grow(members(2), [*nodes(1), *tainted], {"n0": 4000})
    assert found is not None and found.nodes == 2 and found.shape.example == "n0"
    assert grow(members(2, cpu="8"), [*nodes(1), *tainted]) is None  # only the tainted nodes are big enough


def test_shapes_a_plan_cannot_tell_apart_are_searched_once() -> None:
    """Racks are shapes of their own; without a constraint and with no member selecting the label, one of
    them is searched; with a required rack each is a candidate; a member selecting the label keeps the rack
    it selects."""
    cluster = [node for rack in "abcde" for node in nodes(2, prefix=rack, **{RACK: rack})]
    full = {n.name: 2000 for n in cluster}  # 2 cpu free everywhere: by cpu alone one node might do
    anywhere = grow(members(2), cluster, full)
    assert anywhere is not None and anywhere.tried == 1 and anywhere.shapes == 5, anywhere
    in_a_rack = grow(members(2), cluster, full, TopologyConstraint(RACK))
    assert in_a_rack is not None and in_a_rack.nodes == 2, in_a_rack
    assert [s.example for s in growth._distinct(growth.shapes(cluster), members(2), TopologyConstraint(RACK), ())] == [
        "a0", "b0", "c0", "d0", "e0"]
    chosen = members(2, node_selector={RACK: "d"})
    picky = grow(chosen, cluster, full)
    assert picky is not None and picky.tried == 1 and dict(picky.shape.labels)[RACK] == "d", picky


def test_explain_gives_the_smallest_fix_and_adding_it_admits_the_gang() -> None:
    """A gang of 3 x 3 cpu on four 4-cpu nodes, three of them full: explain says add two nodes like the
    others; once two such nodes exist the same gang is admitted."""
    mirror = ClusterMirror()
    clock = FakeClock()
    ledger = GangLedger(mirror, GangSettings(timeout_seconds=30.0, backoff_seconds=10.0), clock=clock)
    for raw in (node(f"n{i}") for i in range(4)):
        mirror.upsert_node(raw)
    for i in range(3):
        mirror.upsert_pod(pod(f"busy{i}", cpu="4", memory="1Mi", node=f"n{i}"))
    mirror.upsert_group(GroupKind.PODGROUP, podgroup("g", 3))
    gang_pods = []
    for i in range(3):
        raw = pod(f"g-{i}", cpu="3", memory="1Mi")
        raw["spec"]["schedulingGroup"] = {"podGroupName": "g"}
        gang_pods.append(mirror.upsert_pod(raw))
    gang = gang_pods[0].gang
    assert gang is not None
    policy = mirror.gang_policy(gang)[1]
    assert policy is not None
    assert ledger.admit(gang, policy) != PASS
    fix = ledger.view.explain(gang)["fix"]
    assert fix["kind"] == "addNodes" and fix["nodes"] == 2 and fix["shape"]["like"] == "n0", fix
    assert fix["shape"]["allocatable"] == "cpu=4, memory=16Gi, pods=110", fix
    assert "Fix:         add 2 node(s) like n0 (cpu=4, memory=16Gi, pods=110)\n" in explain.render(
        {"gangs": [ledger.view.explain(gang)]})
    for name in ("x1", "x2"):
        mirror.upsert_node(node(name))
    assert ledger.admit(gang, policy) == PASS

"""extender.gangs.admission.quorum and .planner: the quorum gate, the admission planner and the exact messages users
see (``extender.model.messages``)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cluster.reservations import consume_slot
from extender.gangs.admission import quorum
from extender.gangs.planner import Plan, pick_for_reservation, plan, size_key
from extender.model import messages
from extender.model.cluster import NodeRecord, PodRecord, Taint
from extender.model.gang import PASS, Code, GangKey, GangPolicy, GroupKind, GroupRef, Verdict

GI = 2**30
WORKERS = GangKey(GroupRef(GroupKind.WORKLOAD, "default", "training", "workers"))
WORKERS_1 = GangKey(GroupRef(GroupKind.WORKLOAD, "default", "training", "workers"), "1")
WHOLE_WORKLOAD = GangKey(GroupRef(GroupKind.WORKLOAD, "default", "training"))
PG = GangKey(GroupRef(GroupKind.COSCHEDULING, "ml", "pg"))
ANNOTATED = GangKey(GroupRef(GroupKind.ANNOTATION, "ml", "g"))

WORKER = {"cpu": 2000, "memory": 4 * GI, "pods": 1}


def member(name: str, requests: dict[str, int] | None = None, spec: dict[str, Any] | None = None,
           gang: GangKey = WORKERS) -> PodRecord:
    return PodRecord(uid=f"uid-{name}", namespace="default", name=name, node_name="",
                     requests=dict(requests or WORKER), gang=gang, spec=spec)


def node(name: str, cpu: int = 4000, memory: int = 16 * GI, labels: dict[str, str] | None = None,
         taints: tuple[Taint, ...] = (), unschedulable: bool = False) -> NodeRecord:
    return NodeRecord(name, {"cpu": cpu, "memory": memory, "pods": 110}, labels or {}, taints, unschedulable)


def allocatable(n: NodeRecord) -> dict[str, int]:
    return n.allocatable


NODES = [node("node-1"), node("node-2"), node("node-3"), node("node-4")]


# ------------------------------------------------------------------------------------------ quorum
@pytest.mark.parametrize(
    ("gang", "exists", "policy", "members", "expected"),
    [
        (WORKERS, False, None, 3, Verdict(Code.WAIT_UNRESOLVABLE,
         "waiting for gang default/training/workers: Workload default/training pod group 'workers' does not exist")),
        (WORKERS_1, False, None, 0, Verdict(Code.WAIT_UNRESOLVABLE,
         "waiting for gang default/training/workers[1]: Workload default/training pod group 'workers' does not "
         "exist")),
        (WHOLE_WORKLOAD, False, None, 1, Verdict(Code.WAIT_UNRESOLVABLE,
         "waiting for gang default/training: Workload default/training does not exist")),
        (PG, False, None, 5, Verdict(Code.WAIT_UNRESOLVABLE,
         "waiting for gang ml/pg: PodGroup ml/pg does not exist")),
        (ANNOTATED, False, None, 1, Verdict(Code.WAIT_UNRESOLVABLE,
         "waiting for gang ml/g: group ml/g does not exist")),
        (WORKERS, True, GangPolicy(4), 3, Verdict(Code.WAIT_UNRESOLVABLE,
         "waiting for gang default/training/workers: 3/4 pods exist")),
        (WORKERS, True, GangPolicy(4), 0, Verdict(Code.WAIT_UNRESOLVABLE,
         "waiting for gang default/training/workers: 0/4 pods exist")),
        (WORKERS_1, True, GangPolicy(2), 1, Verdict(Code.WAIT_UNRESOLVABLE,
         "waiting for gang default/training/workers[1]: 1/2 pods exist")),
        (PG, True, GangPolicy(3, 10.0), 2, Verdict(Code.WAIT_UNRESOLVABLE, "waiting for gang ml/pg: 2/3 pods exist")),
        (WORKERS, True, GangPolicy(4), 4, PASS),
        (WORKERS, True, GangPolicy(4), 7, PASS),
        (WORKERS, True, None, 1, PASS),  # a "basic" pod group: no gang constraint
    ],
)
def test_quorum(gang: GangKey, exists: bool, policy: GangPolicy | None, members: int, expected: Verdict) -> None:
    verdict = quorum(gang, exists, policy, members)
    assert verdict == expected
    assert verdict.passes is (expected.code is Code.PASS)


# -------------------------------------------------------------------------------------------- plan
def test_plan_places_identical_members_tightly() -> None:
    members = [member(f"w-{i}") for i in range(4)]
    result = plan(members, NODES, allocatable)
    assert result.complete
    assert result.unplaced == ()
    assert result.blocking == ""
    assert [n for n, _ in result.slots] == ["node-1", "node-1", "node-2", "node-2"]
    assert all(requests == WORKER for _, requests in result.slots)
    assert result.per_node() == {"node-1": {"cpu": 4000, "memory": 8 * GI, "pods": 2},
                                 "node-2": {"cpu": 4000, "memory": 8 * GI, "pods": 2}}


def test_plan_prefers_the_most_allocated_nodes() -> None:
    free = {"node-1": {"cpu": 4000, "memory": 16 * GI, "pods": 110},
            "node-2": {"cpu": 2000, "memory": 16 * GI, "pods": 110},
            "node-3": {"cpu": 3000, "memory": 16 * GI, "pods": 110},
            "node-4": {"cpu": 0, "memory": 16 * GI, "pods": 110}}
    result = plan([member(f"w-{i}") for i in range(3)], NODES, lambda n: free[n.name])
    assert result.complete
    assert [n for n, _ in result.slots] == ["node-2", "node-3", "node-1"]
    assert free["node-1"]["cpu"] == 4000  # the planner works on copies


def test_plan_limits_copies_by_every_resource() -> None:
    nodes = [node("a", cpu=16000, memory=8 * GI), node("b", cpu=16000, memory=8 * GI)]
    result = plan([member(f"w-{i}") for i in range(4)], nodes, allocatable)
    assert [n for n, _ in result.slots] == ["a", "a", "b", "b"]


def test_plan_respects_pod_capacity() -> None:
    nodes = [NodeRecord("a", {"cpu": 64000, "memory": 64 * GI, "pods": 1}, {}),
             NodeRecord("b", {"cpu": 64000, "memory": 64 * GI, "pods": 3}, {})]
    result = plan([member(f"w-{i}") for i in range(4)], nodes, allocatable)
    assert [n for n, _ in result.slots] == ["a", "b", "b", "b"]


def test_plan_respects_node_selector() -> None:
    nodes = [node("node-1"), node("node-2"), node("node-3", labels={"pool": "gpu"}),
             node("node-4", labels={"pool": "gpu"})]
    members = [member(f"w-{i}", spec={"nodeSelector": {"pool": "gpu"}}) for i in range(4)]
    result = plan(members, nodes, allocatable)
    assert result.complete
    assert result.per_node() == {"node-3": {"cpu": 4000, "memory": 8 * GI, "pods": 2},
                                 "node-4": {"cpu": 4000, "memory": 8 * GI, "pods": 2}}


def test_plan_respects_taints_and_tolerations() -> None:
    taint = Taint("dedicated", "ml", "NoSchedule")
    nodes = [node("node-1", taints=(taint,)), node("node-2"), node("node-3", unschedulable=True), node("node-4")]
    plain = plan([member(f"w-{i}") for i in range(4)], nodes, allocatable)
    assert sorted({n for n, _ in plain.slots}) == ["node-2", "node-4"]
    tolerating = [member(f"w-{i}", spec={"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml",
                                                           "effect": "NoSchedule"}]}) for i in range(4)]
    result = plan(tolerating, nodes, allocatable)
    assert [n for n, _ in result.slots] == ["node-1", "node-1", "node-2", "node-2"]


def test_plan_places_largest_shapes_first() -> None:
    big = {"cpu": 3000, "memory": GI, "pods": 1}
    small = {"cpu": 1000, "memory": GI, "pods": 1}
    members = [member("s-0", small), member("s-1", small), member("b-0", big), member("b-1", big)]
    result = plan(members, [node("a"), node("b")], allocatable)
    assert result.complete
    assert result.slots == (("a", big), ("b", big), ("a", small), ("b", small))


def test_plan_reports_unplaced_members_and_why() -> None:
    members = [member(f"w-{i}") for i in range(5)]
    result = plan(members, [node("a"), node("b")], allocatable)
    assert not result.complete
    assert len(result.slots) == 4
    assert len(result.unplaced) == 1
    assert result.blocking == "no node has cpu=2 free (largest free falls short by cpu=2)"


@pytest.mark.parametrize(
    ("members", "nodes", "blocking"),
    [
        ([member("w", {"cpu": 8000, "memory": GI, "pods": 1})], [node("a"), node("b", cpu=6000)],
         "no node has cpu=8 free (largest free falls short by cpu=2)"),
        ([member("w", {"cpu": 8000, "memory": 32 * GI, "pods": 1})], [node("a")],
         "no node has cpu=8, memory=32Gi free (largest free falls short by cpu=4, memory=16Gi)"),
        ([member("w", {"cpu": 500, "nvidia.com/gpu": 1, "pods": 1})], [node("a")],
         "no node has nvidia.com/gpu=1 free (largest free falls short by nvidia.com/gpu=1)"),
        ([member("w", {"cpu": 3000, "memory": 10 * GI, "pods": 1})],
         [node("a", cpu=4000, memory=4 * GI), node("b", cpu=1000, memory=16 * GI)],
         "no node has cpu=3, memory=10Gi, pods=1 free at once"),
        ([member("w", spec={"nodeSelector": {"pool": "gpu"}})], [node("a"), node("b")],
         "no node matches its nodeSelector, affinity and tolerations"),
        ([member("w")], [node("a", taints=(Taint("x", "", "NoExecute"),))],
         "no node matches its nodeSelector, affinity and tolerations"),
        ([member("w")], [], "no node matches its nodeSelector, affinity and tolerations"),
    ],
)
def test_plan_blocking_reason(members: list[PodRecord], nodes: list[NodeRecord], blocking: str) -> None:
    result = plan(members, nodes, allocatable)
    assert result.slots == ()
    assert result.unplaced == tuple(members)
    assert result.blocking == blocking


def test_plan_blocking_reason_is_from_the_first_unplaced_shape() -> None:
    big = {"cpu": 8000, "memory": GI, "pods": 1}
    members = [member("b", big), member("s", spec={"nodeSelector": {"pool": "none"}})]
    result = plan(members, [node("a")], allocatable)
    assert len(result.unplaced) == 2
    assert result.blocking == "no node has cpu=8 free (largest free falls short by cpu=4)"


def test_plan_is_deterministic() -> None:
    members = [member(f"w-{i}", {"cpu": 1000 * (i % 3 + 1), "memory": GI, "pods": 1}) for i in range(9)]
    first = plan(members, NODES, allocatable)
    assert all(plan(list(members), list(NODES), allocatable) == first for _ in range(5))
    assert plan(list(reversed(members)), list(reversed(NODES)), allocatable).slots == first.slots


def test_plan_of_nothing() -> None:
    result = plan([], NODES, allocatable)
    assert result == Plan((), (), "")
    assert result.complete
    assert result.per_node() == {}


# -------------------------------------------------------------------------------------- messages
def test_admission_wait_message() -> None:
    result = plan([member(f"w-{i}") for i in range(5)], [node("a"), node("b")], allocatable)
    assert messages.capacity_wait(WORKERS, len(result.slots), 5, result.blocking) == (
        "waiting for capacity for gang default/training/workers: 4/5 remaining members fit; "
        "no node has cpu=2 free (largest free falls short by cpu=2)")


def test_never_fits_message() -> None:
    members = [member(f"w-{i}", {"cpu": 6000, "memory": GI, "pods": 1}) for i in range(2)]
    result = plan(members, NODES, allocatable)
    assert messages.never_fits(WORKERS_1, len(result.slots), 2, len(NODES), result.blocking) == (
        "gang default/training/workers[1] can never fit this cluster: only 0 of 2 members fit "
        "on 4 nodes even when they are empty; no node has cpu=6 free (largest free falls short "
        "by cpu=2)")


def test_never_fits_message_partial() -> None:
    members = [member(f"w-{i}", spec={"nodeSelector": {"pool": "gpu"}}) for i in range(3)]
    nodes = [node("gpu-1", labels={"pool": "gpu"}), node("cpu-1")]
    result = plan(members, nodes, allocatable)
    assert messages.never_fits(PG, len(result.slots), 3, 2, result.blocking) == (
        "gang ml/pg can never fit this cluster: only 2 of 3 members fit on 2 nodes even when "
        "they are empty; no node has cpu=2 free (largest free falls short by cpu=2)")


# ------------------------------------------------------------------------------ pick_for_reservation
def test_pick_for_reservation_takes_the_largest() -> None:
    pods = [member("a", {"cpu": 1000, "pods": 1}), member("b", {"cpu": 3000, "pods": 1}),
            member("c", {"cpu": 2000, "memory": GI, "pods": 1}), member("d", {"cpu": 2000, "pods": 1})]
    assert [p.name for p in pick_for_reservation(pods, 2)] == ["b", "c"]
    assert [p.name for p in pick_for_reservation(pods, 10)] == ["b", "c", "d", "a"]
    assert pick_for_reservation(pods, 0) == []
    assert pick_for_reservation(pods, -1) == []
    assert pick_for_reservation([], 3) == []


def test_pick_for_reservation_breaks_ties_by_name() -> None:
    pods = [member("w-1"), member("w-3"), member("w-2")]
    assert [p.name for p in pick_for_reservation(pods, 2)] == ["w-3", "w-2"]


@pytest.mark.parametrize(
    ("requests", "key"),
    [
        ({}, (0, 0, ())),
        ({"cpu": 1, "memory": 2, "pods": 1}, (1, 2, (("cpu", 1), ("memory", 2), ("pods", 1)))),
        ({"nvidia.com/gpu": 1}, (0, 0, (("nvidia.com/gpu", 1),))),
    ],
)
def test_size_key(requests: dict[str, int], key: tuple[Any, ...]) -> None:
    assert size_key(requests) == key


# ------------------------------------------------------------------------------------ consume_slot
SMALL = {"cpu": 1000, "pods": 1}
BIG = {"cpu": 2000, "pods": 1}


@pytest.mark.parametrize(
    ("slots", "node_name", "requests", "left"),
    [
        # same node, the slot covers the request
        ([("a", BIG), ("b", SMALL)], "b", SMALL, [("a", BIG)]),
        ([("a", SMALL), ("a", BIG)], "a", BIG, [("a", SMALL)]),
        ([("a", BIG), ("a", SMALL)], "a", SMALL, [("a", SMALL)]),  # first covering slot on that node
        # elsewhere: a slot with the same requests
        ([("a", BIG), ("b", SMALL)], "c", SMALL, [("a", BIG)]),
        # the node's slot is too small and no slot has equal requests: the first slot goes
        ([("b", BIG), ("a", SMALL)], "a", {"cpu": 1500, "pods": 1}, [("a", SMALL)]),
        # nothing left to drop
        ([], "a", SMALL, []),
    ],
)
def test_consume_slot(slots: list[tuple[str, dict[str, int]]], node_name: str, requests: dict[str, int],
                      left: list[tuple[str, dict[str, int]]]) -> None:
    consume_slot(slots, node_name, requests)
    assert slots == left


def test_consume_slot_shrinks_a_plan_one_by_one() -> None:
    result = plan([member(f"w-{i}") for i in range(4)], NODES, allocatable)
    slots = list(result.slots)
    for landed in ["node-2", "node-1", "node-4", "node-1"]:
        before = len(slots)
        consume_slot(slots, landed, WORKER)
        assert len(slots) == before - 1
    assert slots == []


def test_keys_hash_once_and_like_their_fields() -> None:
    """Group and gang keys keep their hash (they are looked up on every request): equal keys made apart
    hash alike and find each other, a changed copy hashes anew, and a pickled key finds its equal in a
    process whose string hashes differ."""
    import dataclasses
    import os
    import pickle
    import subprocess
    import sys

    again = GangKey(GroupRef(GroupKind.WORKLOAD, "default", "training", "workers"), "1")
    assert again == WORKERS_1 and hash(again) == hash(WORKERS_1) and {WORKERS_1: 1}[again] == 1
    assert hash(again.group) == hash(WORKERS.group) and again.group is not WORKERS.group
    other = dataclasses.replace(WORKERS_1, replica="2")
    assert other != WORKERS_1 and {WORKERS_1: 1}.get(other) is None and hash(other) == hash(GangKey(WORKERS.group, "2"))
    assert {PG: 1, ANNOTATED: 2, WORKERS: 3, WORKERS_1: 4, WHOLE_WORKLOAD: 5}[pickle.loads(pickle.dumps(PG))] == 1
    found = subprocess.run(
        [sys.executable, "-c", "import pickle, sys\n"
         "from extender.model.gang import GangKey, GroupKind, GroupRef\n"
         "key = pickle.loads(sys.stdin.buffer.read())\n"
         "print({GangKey(GroupRef(GroupKind.WORKLOAD, 'default', 'training', 'workers'), '1'): 'found'}.get(key))"],
        input=pickle.dumps(WORKERS_1), capture_output=True, check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert found.strip() == b"found"

"""ClusterMirror: capacity accounting, generations and the change log, relists, groups, reservations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.cluster import mirror
from extender.cluster.mirror import ClusterMirror
from extender.cluster.signature import signature
from extender.model.gang import GangKey, GangPolicy, GroupKind, GroupRef
from tests.builders import Reserved, coscheduling_podgroup, node, pod, workload

GIB = 2**30


def used(cpu: int, memory_gib: int, pods: int) -> dict[str, int]:
    return {"cpu": cpu, "memory": memory_gib * GIB, "pods": pods}


@pytest.fixture
def m() -> ClusterMirror:
    mirror = ClusterMirror()
    for name in ("n1", "n2"):
        mirror.upsert_node(node(name))
    return mirror


# ------------------------------------------------------------------------------------------ nodes
def test_node_records_and_node_set_generation() -> None:
    m = ClusterMirror()
    m.upsert_node(node("n1", cpu="2", memory="4Gi", labels={"zone": "a"},
                       taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]))
    record = m.nodes["n1"]
    assert record.allocatable == {"cpu": 2000, "memory": 4 * GIB, "pods": 110}
    assert record.labels == {"zone": "a"}
    assert [(t.key, t.value, t.effect) for t in record.taints] == [("gpu", "yes", "NoSchedule")]
    assert m.node_set_generation == 1
    generation = m.generation
    m.upsert_node(node("n1", cpu="2", memory="4Gi", labels={"zone": "a"},
                       taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]))
    assert m.generation == generation, "an identical update changes nothing"
    m.upsert_node(node("n1", cpu="2", memory="4Gi", labels={"zone": "b"}))
    assert m.generation == generation + 1 and m.node_set_generation == 2  # relabel: topology domains changed
    m.upsert_node(node("n1", cpu="2", memory="4Gi", labels={"zone": "b"}))  # taints only: the same domains
    assert m.node_set_generation == 2
    m.upsert_node(node("n1", cpu="3", memory="4Gi", labels={"zone": "b"}))
    assert m.node_set_generation == 3
    m.delete_node("n1")
    m.delete_node("n1")  # deleting twice is harmless
    assert m.nodes == {} and m.node_set_generation == 4


# ------------------------------------------------------------------------------------ accounting
def test_bound_pods_use_capacity_until_deleted_or_terminal(m: ClusterMirror) -> None:
    web = pod("web", uid="u1", cpu="1", memory="2Gi", node="n1")
    m.upsert_pod(web)
    assert m.used("n1") == used(1000, 2, 1)
    assert m.free("n1", None) == {"cpu": 3000, "memory": 14 * GIB, "pods": 109}
    m.upsert_pod(pod("web", uid="u1", cpu="1", memory="2Gi", node="n1", phase="Succeeded"))
    assert m.used("n1") == {}
    m.upsert_pod(web)
    assert m.used("n1") == used(1000, 2, 1)
    m.delete_pod("u1")
    m.delete_pod("u1")
    assert m.used("n1") == {} and m.pod_count == 0
    assert m.pod("default", "web") is None


def test_moving_a_pod_moves_its_usage(m: ClusterMirror) -> None:
    m.upsert_pod(pod("web", uid="u1", cpu="1", node="n1"))
    m.upsert_pod(pod("web", uid="u1", cpu="1", node="n2"))
    assert m.used("n1") == {} and m.used("n2") == used(1000, 1, 1)


def test_assume_forget_and_bind_locally(m: ClusterMirror) -> None:
    record = m.upsert_pod(pod("web", uid="u1", cpu="1"))
    assert m.placement("u1") == "" and m.used("n1") == {}
    m.assume("u1", "n1")
    assert m.placement("u1") == "n1" and m.used("n1") == used(1000, 1, 1)
    m.forget("u1")
    m.forget("u1")  # forgetting twice is harmless
    assert m.placement("u1") == "" and m.used("n1") == {}
    m.assume("u1", "n2")
    m.bind_locally("u1", "n2")
    bound = m.pod("default", "web")
    assert bound is not None and bound.node_name == "n2" and bound.requests == record.requests
    m.forget("u1")  # the assumption became a binding: nothing to forget
    assert m.used("n2") == used(1000, 1, 1) and m.used("n1") == {}
    m.assume("u1", "n1")  # a bound pod cannot be assumed elsewhere
    assert m.placement("u1") == "n2" and m.used("n1") == {}
    m.assume("missing", "n1")
    m.bind_locally("missing", "n1")
    assert m.used("n1") == {}


def test_watch_confirming_an_assumed_bind_is_not_counted_twice(m: ClusterMirror) -> None:
    m.upsert_pod(pod("web", uid="u1", cpu="1"))
    m.assume("u1", "n1")
    m.upsert_pod(pod("web", uid="u1", cpu="1", node="n1"))
    assert m.used("n1") == used(1000, 1, 1)
    m.forget("u1")  # a late failure report cannot undo what the API server shows
    assert m.used("n1") == used(1000, 1, 1) and m.placement("u1") == "n1"


def test_watch_showing_another_node_than_assumed_wins(m: ClusterMirror) -> None:
    m.upsert_pod(pod("web", uid="u1", cpu="1"))
    m.assume("u1", "n1")
    m.upsert_pod(pod("web", uid="u1", cpu="1", node="n2"))
    assert m.used("n1") == {} and m.used("n2") == used(1000, 1, 1)
    m.forget("u1")
    assert m.used("n1") == {} and m.used("n2") == used(1000, 1, 1)
    m.delete_pod("u1")
    assert m.used("n2") == {}


def test_recreated_pod_with_the_same_name_replaces_the_old_one(m: ClusterMirror) -> None:
    m.upsert_group(GroupKind.COSCHEDULING, coscheduling_podgroup("g", 2))
    m.upsert_pod(pod("w", uid="old", cpu="1", pod_group="g", node="n1"))
    gang = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "g"))
    assert m.member_count(gang) == 1
    m.upsert_pod(pod("w", uid="new", cpu="2", pod_group="g"))
    current = m.pod("default", "w")
    assert current is not None and current.uid == "new"
    assert m.pod_by_uid("old") is None and m.pod_count == 1
    assert m.used("n1") == {}
    assert [p.uid for p in m.members(gang)] == ["new"]
    m.delete_pod("old")  # a late DELETE of the old uid must not remove the new pod
    assert m.pod("default", "w") is not None


def test_members_exclude_terminal_pods_and_are_sorted(m: ClusterMirror) -> None:
    m.upsert_group(GroupKind.WORKLOAD, workload("job", {"workers": 2}))
    for name in ("w-2", "w-0", "w-1"):
        m.upsert_pod(pod(name, uid=f"u-{name}", workload="job", pod_group="workers"))
    m.upsert_pod(pod("w-3", uid="u-w-3", workload="job", pod_group="workers", phase="Failed"))
    gang = GangKey(GroupRef(GroupKind.WORKLOAD, "default", "job", "workers"))
    assert [p.name for p in m.members(gang)] == ["w-0", "w-1", "w-2"]
    assert m.member_count(gang) == 3 and list(m.gangs()) == [gang]
    assert m.gang_policy(gang) == (True, GangPolicy(2))
    m.upsert_pod(pod("w-0", uid="u-w-0", workload="job", pod_group="workers", phase="Succeeded"))
    assert m.member_count(gang) == 2
    for name in ("w-1", "w-2"):
        m.delete_pod(f"u-{name}")
    assert m.member_count(gang) == 0 and list(m.gangs()) == []


def test_annotation_gang_policy_comes_from_its_pods(m: ClusterMirror) -> None:
    gang = GangKey(GroupRef(GroupKind.ANNOTATION, "default", "g"))
    assert m.gang_policy(gang) == (False, None)
    m.upsert_pod(pod("a", annotations={"gang-extender.io/group": "g", "gang-extender.io/min-count": "2"}))
    m.upsert_pod(pod("b", annotations={"gang-extender.io/group": "g", "gang-extender.io/min-count": "3"}))
    assert m.gang_policy(gang) == (True, GangPolicy(3))


# --------------------------------------------------------------------------------- change log
def test_changed_since_lists_the_nodes_touched(m: ClusterMirror) -> None:
    start = m.generation
    assert m.changed_since(start) == set()
    m.upsert_pod(pod("web", uid="u1", node="n1"))
    middle = m.generation
    m.assume("u1", "n2")  # no effect on a bound pod: nothing touched
    assert m.generation == middle
    m.upsert_node(node("n3"))
    m.set_reservation(GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "g")), [("n2", {"cpu": 1000})])
    assert m.changed_since(start) == {"n1", "n2", "n3"}
    assert m.changed_since(middle) == {"n2", "n3"}
    assert m.changed_since(m.generation) == set()
    assert m.changed_since(m.generation + 5) == set()


def test_changed_since_is_none_once_the_log_overflowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mirror, "CHANGE_LOG_SIZE", 4)
    m = ClusterMirror()
    m.upsert_node(node("n1"))
    first = m.generation
    for cpu in range(2, 8):
        m.upsert_node(node(f"n{cpu}", cpu=str(cpu)))
    assert m.changed_since(0) is None
    assert m.changed_since(first) is None
    # The last 4 changes are still in the log: a cache 4 generations behind refreshes incrementally.
    assert m.changed_since(m.generation - 4) == {"n4", "n5", "n6", "n7"}
    assert m.changed_since(m.generation - 5) is None


# ------------------------------------------------------------------------------------------ relists
def test_replace_nodes_removes_missing_and_skips_malformed(m: ClusterMirror) -> None:
    m.upsert_pod(pod("web", uid="u1", node="n1"))
    m.replace_nodes([node("n2", cpu="8"), node("n3"), {"metadata": {}},
                     node("bad", cpu="lots")])
    assert sorted(m.nodes) == ["n2", "n3"]
    assert m.nodes["n2"].allocatable["cpu"] == 8000
    assert m.rejected_objects == 2
    assert m.pod("default", "web") is not None  # pods on a deleted node stay until the pod watch says so


def test_replace_pods_removes_missing_and_skips_malformed(m: ClusterMirror) -> None:
    m.upsert_pod(pod("gone", uid="u-gone", node="n1"))
    m.upsert_pod(pod("kept", uid="u-kept", node="n2"))
    m.replace_pods([
        pod("kept", uid="u-kept", node="n2"),
        pod("new", uid="u-new", node="n2", cpu="2"),
        {"metadata": {"namespace": "default"}},                                   # no name
        pod("badcpu", cpu="lots"),                                                 # bad quantity
        pod("badgang", annotations={"gang-extender.io/group": "g"}),              # gang without min-count
    ])
    assert m.rejected_objects == 3
    assert m.pod("default", "gone") is None and m.used("n1") == {}
    assert m.used("n2") == used(3000, 2, 2)
    assert m.pod_count == 2


def test_replace_groups_only_touches_its_kind(m: ClusterMirror) -> None:
    m.upsert_group(GroupKind.WORKLOAD, workload("job", {"workers": 2, "launcher": None}))
    m.upsert_group(GroupKind.COSCHEDULING, coscheduling_podgroup("pg", 3))
    m.upsert_group(GroupKind.COSCHEDULING, coscheduling_podgroup("old", 3))
    m.replace_groups(GroupKind.COSCHEDULING, [coscheduling_podgroup("pg", 4), {"metadata": {}},
                                              coscheduling_podgroup("zero", 0)])
    assert m.rejected_objects == 2
    assert m.gang_policy(GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "pg"))) == (True, GangPolicy(4))
    assert m.gang_policy(GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "old"))) == (False, None)
    workers = GangKey(GroupRef(GroupKind.WORKLOAD, "default", "job", "workers"))
    launcher = GangKey(GroupRef(GroupKind.WORKLOAD, "default", "job", "launcher"))
    assert m.gang_policy(workers) == (True, GangPolicy(2))
    assert m.gang_policy(launcher) == (True, None)
    # Editing a Workload that drops a pod group forgets it; deleting the Workload forgets all.
    m.upsert_group(GroupKind.WORKLOAD, workload("job", {"workers": 3}))
    assert m.gang_policy(workers) == (True, GangPolicy(3)) and m.gang_policy(launcher) == (False, None)
    m.delete_group(GroupKind.WORKLOAD, "default", "job")
    assert m.gang_policy(workers) == (False, None)


# ------------------------------------------------------------------------------------ reservations
def test_reservations_are_free_only_for_their_own_gang(m: ClusterMirror) -> None:
    a = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "a"))
    b = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "b"))
    m.upsert_pod(pod("web", uid="u1", cpu="1", node="n1"))
    m.set_reservation(a, [("n1", {"cpu": 2000, "pods": 1})])
    assert m.free("n1", a)["cpu"] == 3000
    assert m.free("n1", a, include_own_reservation=False)["cpu"] == 1000
    assert m.free("n1", b)["cpu"] == 1000
    assert m.free("n1", None)["cpu"] == 1000
    assert m.own_reservation("n1", a) == {"cpu": 2000, "pods": 1}
    assert m.own_reservation("n1", b) is None and m.own_reservation("n2", a) is None
    assert m.reservation(a) == {"n1": {"cpu": 2000, "pods": 1}}
    generation = m.generation
    m.set_reservation(a, [("n1", {"cpu": 2000, "pods": 1})])
    assert m.generation == generation, "an unchanged reservation touches nothing"
    m.set_reservation(a, [("n2", {"cpu": 1000})])
    assert m.reservation(a) == {"n2": {"cpu": 1000}}
    assert m.changed_since(generation) == {"n1", "n2"}
    m.set_reservation(a, [])
    assert m.reservation(a) == {} and m.free("n2", None)["cpu"] == 4000


def test_a_draining_reservation_takes_only_what_is_free_beyond_admitted_ones(m: ClusterMirror) -> None:
    """A draining reservation covers busy capacity and is kept as that frees: a gang admitted on the node
    keeps the room it reserved (subtracting the drain whole would leave it 1 cpu short until the busy
    pod ends), everyone else sees only what is left beyond both, and the drain gets what frees."""
    admitted = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "admitted"))
    drainer = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "drainer"))
    m.upsert_pod(pod("busy", uid="u1", cpu="1", node="n1"))
    m.set_reservation(admitted, [("n1", {"cpu": 2000})])
    m.set_reservation(drainer, [("n1", {"cpu": 2000})], holds_off=0)

    def free_cpu(gang: GangKey | None, own: bool = True) -> int:
        return m.free("n1", gang, include_own_reservation=own)["cpu"]

    assert free_cpu(admitted) == 2000  # its whole reservation: the drain waits for the busy cpu
    assert free_cpu(admitted, own=False) == 0
    assert free_cpu(None) == 0 and free_cpu(drainer) == 1000  # the drainer plans as before
    for gang in (None, admitted, drainer):
        assert m.free_cpu_by_node(gang)["n1"] == free_cpu(gang)
    m.set_reservation(drainer, [("n1", {"cpu": 2000}), ("n2", {"cpu": 1000})], holds_off=0)  # still draining
    m.set_reservation(drainer, [("n1", {"cpu": 2000})], holds_off=0)
    assert free_cpu(admitted) == 2000 and m.free("n2", None)["cpu"] == 4000
    m.delete_pod("u1")
    assert free_cpu(admitted) == 2000 and free_cpu(None) == 0  # the freed cpu went to the drain
    m.set_reservation(drainer, [("n1", {"cpu": 2000})])  # admitted from its drain: subtracted whole
    m.upsert_pod(pod("busy-again", uid="u2", cpu="1", node="n1"))
    assert free_cpu(admitted) == 1000 and free_cpu(None) == -1000


def test_free_cpu_by_node_is_the_cpu_of_free(m: ClusterMirror) -> None:
    """The planner's cheap sort key: every node's free cpu, as ``free`` computes it, for any gang."""
    a = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "a"))
    b = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "b"))
    m.upsert_node(node("n3", cpu="2"))
    m.upsert_node(node("no-cpu", cpu="0"))
    m.upsert_pod(pod("web", uid="u1", cpu="1500m", node="n1"))
    m.upsert_pod(pod("mem-only", uid="u2", cpu=None, node="n2"))
    m.upsert_pod(pod("over", uid="u3", cpu="3", node="n3"))  # overcommitted: negative free cpu
    m.upsert_pod(pod("assumed", uid="u4", cpu="500m"))
    m.assume("u4", "n2")
    m.upsert_pod(pod("on-a-deleted-node", uid="u5", cpu="1", node="gone"))
    m.set_reservation(a, [("n1", {"cpu": 2000, "pods": 1}), ("n3", {"memory": GIB})])
    m.set_reservation(b, [("n1", {"cpu": 500}), ("n2", {"cpu": 1000})])
    for gang in (None, a, b):
        assert m.free_cpu_by_node(gang) == {name: m.free(name, gang).get("cpu", 0) for name in m.nodes}
    assert m.free_cpu_by_node(None) == {"n1": 0, "n2": 2500, "n3": -1000, "no-cpu": 0}
    assert m.free_cpu_by_node(a) == {"n1": 2000, "n2": 2500, "n3": -1000, "no-cpu": 0}


def test_a_draining_reservation_holds_off_only_pods_of_its_priority_or_lower(m: ClusterMirror) -> None:
    """The drain is the head gang's turn in the order: a pod of higher priority than that gang goes
    first, as it would in the order; equal and lower ones wait behind it. Admitted reservations hold
    off every priority."""
    drainer = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "drainer"))
    admitted = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "admitted"))
    m.set_reservation(drainer, [("n1", {"cpu": 3000})], holds_off=100)
    assert m.free("n1", None)["cpu"] == 1000  # no pod in particular: held off
    assert m.free("n1", None, priority=100)["cpu"] == 1000 and m.free("n1", None, priority=-5)["cpu"] == 1000
    assert m.free("n1", None, priority=101)["cpu"] == 4000
    m.set_reservation(admitted, [("n1", {"cpu": 1000})])
    assert m.free("n1", None, priority=10**6)["cpu"] == 3000 and m.free("n1", None, priority=100)["cpu"] == 0


OPS = st.lists(st.tuples(st.sampled_from(["node", "drop-node", "pod", "drop-pod", "finish", "assume", "forget"]),
                         st.integers(0, 3), st.integers(0, 5), st.integers(0, 3)), max_size=40)


GANGS = [GangKey(GroupRef(GroupKind.COSCHEDULING, "default", g)) for g in ("a", "b")]


def apply(m: ClusterMirror, op: str, n: int, p: int, cpu: int, reserved: Reserved) -> None:
    """One random step of the mirror's life: nodes, pods, assumed binds and gangs' reservations."""
    name, uid, gang = f"n{n}", f"u{p}", GANGS[p % 2]
    if op == "node":
        m.upsert_node(node(name, cpu=str(cpu + 1)))
    elif op == "drop-node":
        m.delete_node(name)
    elif op == "pod":
        m.upsert_pod(pod(f"p{p}", uid=uid, cpu=f"{cpu * 300}m", node=name if cpu else None))
    elif op == "drop-pod":
        m.delete_pod(uid)
    elif op == "finish" and m.pod_by_uid(uid) is not None:
        m.upsert_pod(pod(f"p{p}", uid=uid, cpu="300m", node=name, phase="Succeeded"))
    elif op == "assume" and m.pod_by_uid(uid) is not None:
        m.assume(uid, name)
    elif op == "forget":
        m.forget(uid)
    elif op in ("reserve", "drain"):  # a reservation, or the same slots turned draining (or back)
        slots = [(f"n{(n + i) % 4}", {"cpu": 500 * (cpu + 1)}) for i in range(p % 3 + 1)]
        reserved.set(gang, slots, cpu if op == "drain" else None)
    elif op == "trim":
        reserved.set(gang, reserved.slots.get(gang, [])[:cpu], reserved.holds_off.get(gang))
    elif op == "use":
        reserved.use(gang, name, {"cpu": 500 * (cpu + 1)})


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_free_cpu_by_node_follows_every_change(ops: list[tuple[str, int, int, int]]) -> None:
    """Kept as pods and nodes come and go (not recomputed per call): always what ``free`` computes."""
    m = ClusterMirror()
    reserved = Reserved(m)
    for op in ops:
        apply(m, *op, reserved)
        assert m.free_cpu_by_node(None) == {nm: m.free(nm, None).get("cpu", 0) for nm in m.nodes}


RESERVING = st.lists(st.tuples(
    st.sampled_from(["node", "drop-node", "pod", "drop-pod", "finish", "assume", "forget", "reserve", "drain",
                     "trim", "use"]),
    st.integers(0, 3), st.integers(0, 5), st.integers(0, 3)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(RESERVING)
def test_nodes_by_free_cpu_is_the_sorted_order_of_free_cpu_by_node(ops: list[tuple[str, int, int, int]]) -> None:
    """The admission order kept as nodes, pods and reservations (admitted and draining) change is always
    what sorting ``free_cpu_by_node`` gives, for a gang with no reservation and for gangs with one."""
    m = ClusterMirror()
    reserved = Reserved(m)
    for op in ops:
        apply(m, *op, reserved)
        for for_gang in (None, *GANGS):
            free = m.free_cpu_by_node(for_gang)
            for least in (0, 1, 1000, 2500):
                want = [nm for cpu_, nm in sorted((c, nm) for nm, c in free.items()) if least <= 0 or cpu_ >= least]
                assert list(m.nodes_by_free_cpu(for_gang, least)) == want, (for_gang, least, free)


def test_a_reservation_turned_draining_reorders_its_nodes() -> None:
    """The same slots, admitted then draining: what other gangs see on the node changes (a drain takes
    only what is free), though no total changed, so the order (and the node's generation) follows."""
    m = ClusterMirror()
    gang = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "g"))
    m.upsert_node(node("x-busy", cpu="4"))
    m.upsert_node(node("a-full", cpu="1"))
    m.upsert_pod(pod("p", uid="u", cpu="3", node="x-busy"))
    m.upsert_pod(pod("q", uid="v", cpu="1", node="a-full"))
    m.set_reservation(gang, [("x-busy", {"cpu": 2000})])
    assert list(m.nodes_by_free_cpu(None, 0)) == ["x-busy", "a-full"]  # -1000, then 0
    generation = m.generation
    m.set_reservation(gang, [("x-busy", {"cpu": 2000})], holds_off=0)
    assert m.free_cpu_by_node(None) == {"x-busy": 0, "a-full": 0}
    assert list(m.nodes_by_free_cpu(None, 0)) == ["a-full", "x-busy"] and m.generation > generation


# ------------------------------------------------------------------- pods as the watch read them
def test_as_read_holds_an_unbound_pod_at_the_version_the_mirror_holds(m: ClusterMirror) -> None:
    web = pod("web")
    uid, version = web["metadata"]["uid"], web["metadata"]["resourceVersion"]
    record = m.upsert_pod(web)
    read = m.as_read(uid, version)
    assert read is not None and read[0] is record and read[1] == signature(web)
    assert m.as_read(uid, "another") is None and m.as_read(uid, "") is None
    newer = {**web, "metadata": {**web["metadata"], "resourceVersion": "newer"}}
    m.upsert_pod(newer)
    assert m.as_read(uid, version) is None and m.as_read(uid, "newer") is not None
    m.upsert_pod({**newer, "metadata": {**newer["metadata"], "resourceVersion": "bound"},
                  "spec": {**newer["spec"], "nodeName": "n1"}})
    assert m.as_read(uid, "bound") is None and m.as_read(uid, "newer") is None  # bound: not filtered again
    m.delete_pod(uid)
    m.upsert_pod(web)
    assert m.as_read(uid, version) is not None
    m.upsert_pod_record(record)  # a record read elsewhere: the version it came from is not known
    assert m.as_read(uid, version) is None
    m.upsert_pod(web)
    m.delete_pod(uid)
    assert m.as_read(uid, version) is None
    m.upsert_pod({**web, "status": {"phase": "Failed"}})
    assert m.as_read(uid, version) is None  # terminal
    unversioned = pod("plain")
    del unversioned["metadata"]["resourceVersion"]
    m.upsert_pod(unversioned)
    assert m.as_read(unversioned["metadata"]["uid"], "") is None
    m.upsert_pod(web)
    m.bind_locally(uid, "n1")
    assert m.as_read(uid, version) is None


def test_a_pod_whose_spec_the_signature_cannot_read_is_mirrored_without_a_read_version(m: ClusterMirror) -> None:
    odd = pod("odd")
    odd["spec"]["volumes"] = 5  # the record does not read volumes; the signature does
    record = m.upsert_pod(odd)
    assert m.pod_by_uid(record.uid) == record
    assert m.as_read(record.uid, odd["metadata"]["resourceVersion"]) is None


def test_as_read_holds_the_record_the_mirror_keeps(m: ClusterMirror) -> None:
    web = pod("web")
    kept = m.upsert_pod(web)
    m.upsert_pod({**web})  # the same pod again: an equal record, the first one kept
    read = m.as_read(kept.uid, web["metadata"]["resourceVersion"])
    assert read is not None and read[0] is m.pod_by_uid(kept.uid) is kept

"""Gang scheduling end to end: a real kube-scheduler v1.35 calls gang-extender over HTTP.

Every scenario has its own namespace and its own labelled nodes (its pods select them), samples the
bindings every 100 ms to catch a partial gang, and afterwards no node may be over-committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane, wait_for
from support import (
    ROOT,
    WAIT,
    Extender,
    Sampler,
    all_bound,
    bound,
    check_invariants,
    create,
    events,
    pod,
    pod_spec,
    pods,
    recorded,
    scenario,
    scheduling_with_extender,
    stays_unbound,
    workload,
)

pytestmark = pytest.mark.e2e



@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "manifests" / "crds" / "scheduling.x-k8s.io_podgroups.yaml"))
    wait_for(lambda: "podgroups" in cp.kubectl("api-resources", "--api-group=scheduling.x-k8s.io").stdout,
             timeout=30, what="the PodGroup CRD to be served")
    with scheduling_with_extender(cp, tmp_path_factory.mktemp("extender")) as ext:
        yield {"cp": cp, "ext": ext}


@pytest.fixture(autouse=True)
def invariants(cluster: dict[str, Any]) -> Iterator[None]:
    """After every scenario: no node over-committed, no bind outside the extender's filter reply."""
    yield
    check_invariants(cluster["cp"], cluster["ext"])


def _gang(ns: str, prefix: str, count: int, selector: dict[str, str], *, cpu: str = "1", workload_name: str = "w",
          group: str = "workers", replica: str | None = None, anti: str | None = None) -> list[dict[str, Any]]:
    ref = {"name": workload_name, "podGroup": group}
    if replica is not None:
        ref["podGroupReplicaKey"] = replica
    spec = pod_spec(cpu=cpu, selector=selector, workload_ref=ref, anti_affinity_label=anti)
    labels = {"anti": anti} if anti else {}
    return [pod(ns, f"{prefix}{i}", spec, labels) for i in range(count)]


def test_job_of_four_binds_whole(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "s1-job", 2)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": ns},
           "spec": {"parallelism": 4, "completions": 4, "template": {
               "spec": pod_spec(cpu="1", selector=labels, workload_ref={"name": "train", "podGroup": "workers"})}}}
    with Sampler(cp, ns) as sampler:
        create(cp, workload(ns, "train", {"workers": 4}), job)
        all_bound(cp, ns, "train-", 4, nodes)
    assert sampler.partial("train-", 4) == []


def test_room_for_three_waits_then_binds_when_a_node_is_added(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "s2-room", 3)
    with Sampler(cp, ns) as sampler:
        create(cp, workload(ns, "w", {"workers": 4}), *_gang(ns, "m", 4, labels, cpu="3"))
        stays_unbound(cp, ns, "m", 8)
        nodes |= set(cp.add_nodes(1, cpu="4", labels=labels, prefix=f"{ns}-extra"))
        all_bound(cp, ns, "m", 4, nodes)
    assert sampler.partial("m", 4) == []


def test_unplaceable_member_times_out_releases_and_retries(cluster: dict[str, Any]) -> None:
    """Admission cannot see pod anti-affinity, so 3 of 4 members get held; the gang must time out
    (no member bound), back off, and complete once a fourth node exists."""
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "s2-timeout", 3)
    with Sampler(cp, ns) as sampler:
        create(cp, workload(ns, "w", {"workers": 4}), *_gang(ns, "m", 4, labels, anti="s2t"))
        wait_for(lambda: events(cp, ns, "GangTimeout"), timeout=WAIT, what="a GangTimeout event")
        assert bound(cp, ns, "m") == {}
        nodes |= set(cp.add_nodes(1, cpu="4", labels=labels, prefix=f"{ns}-extra"))
        placed = all_bound(cp, ns, "m", 4, nodes)
    assert len(set(placed.values())) == 4  # anti-affinity honoured by the scheduler
    assert sampler.partial("m", 4) == []


def test_three_of_four_pods_wait_for_the_fourth(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "s3-quorum", 2)
    members = _gang(ns, "m", 4, labels)
    with Sampler(cp, ns) as sampler:
        create(cp, workload(ns, "w", {"workers": 4}), *members[:3])
        stays_unbound(cp, ns, "m", 5)
        create(cp, members[3])
        all_bound(cp, ns, "m", 4, nodes)
    assert sampler.partial("m", 4) == []


def test_competing_gangs_never_split_the_cluster(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "s4-compete", 4)
    a = _gang(ns, "a", 4, labels, cpu="3", workload_name="wa")
    b = _gang(ns, "b", 4, labels, cpu="3", workload_name="wb")
    interleaved = [p for pair in zip(a, b, strict=True) for p in pair]
    with Sampler(cp, ns) as sampler:
        create(cp, workload(ns, "wa", {"workers": 4}), workload(ns, "wb", {"workers": 4}), *interleaved)
        wait_for(lambda: len(bound(cp, ns, "a")) == 4 or len(bound(cp, ns, "b")) == 4, timeout=WAIT,
                 what="one gang to complete")
        winner, loser = ("a", "b") if len(bound(cp, ns, "a")) == 4 else ("b", "a")
        stays_unbound(cp, ns, loser, 5)
        cp.kubectl("delete", "pods", "-n", ns, *[f"{winner}{i}" for i in range(4)], "--wait=false")
        all_bound(cp, ns, loser, 4, nodes)
    assert sampler.partial("a", 4) == [] and sampler.partial("b", 4) == []


def test_replica_keys_are_independent_gangs(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "s5-replicas", 2)
    r0 = _gang(ns, "r0-", 2, labels, replica="0")
    r1 = _gang(ns, "r1-", 2, labels, replica="1")
    with Sampler(cp, ns) as sampler:
        create(cp, workload(ns, "w", {"workers": 2}), *r0, r1[0])
        all_bound(cp, ns, "r0-", 2, nodes)
        stays_unbound(cp, ns, "r1-", 4)
        create(cp, r1[1])
        all_bound(cp, ns, "r1-", 2, nodes)
    assert sampler.partial("r0-", 2) == [] and sampler.partial("r1-", 2) == []


def test_plain_pods_schedule_alongside_a_waiting_gang(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "s6-plain", 2)
    plain = [pod(ns, f"plain{i}", pod_spec(cpu="500m", selector=labels)) for i in range(3)]
    create(cp, workload(ns, "w", {"workers": 4}), *_gang(ns, "m", 3, labels))
    create(cp, *plain)
    all_bound(cp, ns, "plain", 3, nodes)
    assert bound(cp, ns, "m") == {}


def test_extender_killed_while_holding_binds(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ext: Extender = cluster["ext"]
    ns, labels, nodes = scenario(cp, "s7-crash", 3)
    with Sampler(cp, ns) as sampler:
        create(cp, workload(ns, "w", {"workers": 4}), *_gang(ns, "m", 4, labels, anti="s7"))
        wait_for(lambda: ext.metrics().get("gang_extender_held_binds", 0) >= 1, timeout=WAIT,
                 what="binds held at the barrier")
        ext.kill()
        assert bound(cp, ns, "m") == {}
        ext.start()
        stays_unbound(cp, ns, "m", 2)
        nodes |= set(cp.add_nodes(1, cpu="4", labels=labels, prefix=f"{ns}-extra"))
        all_bound(cp, ns, "m", 4, nodes)
    assert sampler.partial("m", 4) == []


def test_identical_pods_share_filter_results(cluster: dict[str, Any]) -> None:
    """16 identical plain pods are answered from one signature entry; then a gang of 16 members with the
    same spec makes no entry of its own (its members are steered to their reservation, and any that is
    not reads the plain pods' entry: the gang is not part of the signature)."""
    cp: ControlPlane = cluster["cp"]
    ext: Extender = cluster["ext"]
    ns, labels, nodes = scenario(cp, "s8-cache", 8)  # 8 x 4 cpu: room for both sets of 16 x 1 cpu

    def counters() -> tuple[float, float]:
        values = ext.metrics()
        return (values.get("gang_extender_filter_cache_hits_total", 0),
                values.get("gang_extender_filter_cache_misses_total", 0))

    hits_before, misses_before = counters()
    create(cp, *[pod(ns, f"p{i}", pod_spec(cpu="1", selector=labels)) for i in range(16)])
    all_bound(cp, ns, "p", 16, nodes)
    hits, misses = counters()
    assert hits - hits_before >= 8, f"only {hits - hits_before} filter cache hits for 16 identical pods"
    assert misses - misses_before <= 2, f"{misses - misses_before} misses for 16 identical pods"
    steered = ext.metrics().get("gang_extender_filter_steered_total", 0)
    with Sampler(cp, ns) as sampler:
        create(cp, workload(ns, "w", {"workers": 16}), *_gang(ns, "m", 16, labels, cpu="1"))
        all_bound(cp, ns, "m", 16, nodes)
    assert counters()[1] - misses <= 1, "the gang's members were evaluated under a signature of their own"
    assert ext.metrics().get("gang_extender_filter_steered_total", 0) - steered >= 8, "members were not steered"
    assert sampler.partial("m", 16) == []


def test_gang_larger_than_the_cluster_fails_fast(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, _ = scenario(cp, "s9-toobig", 2)
    create(cp, workload(ns, "w", {"workers": 4}), *_gang(ns, "m", 4, labels, cpu="3"))
    wait_for(lambda: events(cp, ns, "GangNeverFits"), timeout=WAIT, what="a GangNeverFits event")
    message = events(cp, ns, "GangNeverFits")[0]["message"]
    assert "can never fit" in message and "only 2 of 4 members fit" in message, message
    assert "cpu=3" in message, message
    assert bound(cp, ns, "m") == {}


def test_members_no_node_can_hold_are_told_never_fits_though_kube_scheduler_rejects_them_first(
        cluster: dict[str, Any]) -> None:
    """Members asking more than any node's allocatable: kube-scheduler's own resource filter rejects them
    before the extender is called, yet the gang is told ``GangNeverFits`` with its reason, on the group
    object, and the published explanation says NeverFits (not waiting for capacity)."""
    cp: ControlPlane = cluster["cp"]
    ext: Extender = cluster["ext"]
    ns, labels, _ = scenario(cp, "s9b-nonodefits", 4)
    create(cp, workload(ns, "w", {"workers": 2}), *_gang(ns, "m", 2, labels, cpu="6"))

    def rejected_by_kube_scheduler() -> bool:
        conditions = [c for p in pods(cp, ns) for c in p.get("status", {}).get("conditions", [])
                      if c.get("type") == "PodScheduled"]
        return len(conditions) == 2 and all("Insufficient cpu" in c.get("message", "") for c in conditions)
    wait_for(rejected_by_kube_scheduler, timeout=WAIT, what="kube-scheduler to reject both members for cpu")
    wait_for(lambda: events(cp, ns, "GangNeverFits"), timeout=WAIT, what="a GangNeverFits event")
    event = events(cp, ns, "GangNeverFits")[0]
    assert event["involvedObject"]["kind"] == "Workload" and event["involvedObject"]["name"] == "w", event
    assert "can never fit this cluster: only 0 of 2 members fit" in event["message"], event["message"]
    filtered = [e for e in recorded(ext.record_path)
                if e["verb"] == "filter" and e["request"]["Pod"]["metadata"]["namespace"] == ns]
    assert filtered == [], "the extender was asked to filter a member: this test no longer shows the case"
    answer = ext.explain(ns, "w")
    assert answer["gangs"][0]["state"] == "NeverFits", answer
    assert bound(cp, ns, "m") == {}


def test_scheduler_plugins_podgroup(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "s10-podgroup", 2)
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "pg", "namespace": ns}, "spec": {"minMember": 3}}
    members = [pod(ns, f"pg{i}", pod_spec(cpu="1", selector=labels), {"scheduling.x-k8s.io/pod-group": "pg"})
               for i in range(3)]
    with Sampler(cp, ns) as sampler:
        create(cp, group, *members[:2])
        stays_unbound(cp, ns, "pg", 4)
        create(cp, members[2])
        all_bound(cp, ns, "pg", 3, nodes)
    assert sampler.partial("pg", 3) == []


def test_annotation_gang(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "s11-annotation", 2)
    annotations = {"gang-extender.io/group": "g", "gang-extender.io/min-count": "2"}
    members = [pod(ns, f"an{i}", pod_spec(cpu="1", selector=labels), annotations=annotations) for i in range(2)]
    create(cp, members[0])
    stays_unbound(cp, ns, "an", 4)
    create(cp, members[1])
    all_bound(cp, ns, "an", 2, nodes)


def test_shipped_manifest_paths_exist() -> None:
    assert (ROOT / "manifests" / "scheduler-config.yaml").is_file()
    assert Path(__file__).parent.joinpath("support.py").is_file()

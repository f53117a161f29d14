"""The quorum gate on Kubernetes v1.37: members that come before their quorum cost kube-scheduler nothing.

The chart's MutatingAdmissionPolicy (values ``gang.quorumGate``, rendered by the pinned helm, for the
scheduler name these tests' kube-scheduler serves) sets the scheduling gate ``gang-extender.io/quorum`` on
each pod created for it; gang-extender removes it once the pod's gang has its quorum, and at once from a pod
of no gang. Until then kube-scheduler never tries the pod: no filter request reaches the extender, no
``FailedScheduling`` Event, no back-off; then the gang goes through filter and the barrier whole. The extender
runs as its own identity, under the shipped RBAC and pod-writes admission policy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helmchart
import pytest
from controlplane import ControlPlane, wait_for
from identities import extender_kubeconfig, install, wait_until_in_force
from support import (
    Extender,
    Sampler,
    all_bound,
    check_invariants,
    create,
    events,
    install_quorum_gate,
    pod,
    pod_spec,
    recorded,
    scenario,
    scheduling_with_extender,
)

from extender.kube.client import KubeClient
from extender.model.cluster import QUORUM_GATE

pytestmark = pytest.mark.e2e

API = "scheduling.k8s.io/v1beta1"
SCHEDULER = "default-scheduler"  # the profile of manifests/scheduler-config.yaml, which these tests run


def gates(obj: dict[str, Any]) -> list[str]:
    return [g["name"] for g in obj["spec"].get("schedulingGates") or []]


@pytest.fixture(scope="module")
def cluster(control_plane_137: ControlPlane, helm_bin: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, Any]]:
    """The mutating policy in force, and the extender running as its own identity (manifests/rbac: RBAC and the
    pod-writes policy, in force too), so that its removals pass exactly what a cluster would enforce."""
    cp = install(control_plane_137)
    cp.create_namespace("quorum-gate-probe")
    install_quorum_gate(cp, helmchart.quorum_gate_objects(helm_bin, SCHEDULER), probe_namespace="quorum-gate-probe",
                        gate=QUORUM_GATE)
    probe = pod("quorum-gate-probe", "probe", {"containers": [{"name": "main", "image": "pause"}]},
                annotations={"gang-extender.io/group": "probe", "gang-extender.io/min-count": "1"})
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                  "seccompProfile": {"type": "RuntimeDefault"}}  # that namespace enforces PodSecurity restricted
    own = {**probe, "metadata": {**probe["metadata"], "namespace": helmchart.NAMESPACE},
           "spec": {"containers": [{"name": "main", "image": "pause", "securityContext": restricted}]}}
    made = cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(own))
    assert gates(json.loads(made.stdout)) == [], "a pod of the release's own namespace was gated"
    container = {"containers": [{"name": "main", "image": "pause"}]}
    for name, labels, notes, gated in [  # only a gang member is gated (lifting a gate is an API write)
            ("plain", {}, {}, False),
            ("empty-label", {"scheduling.x-k8s.io/pod-group": ""}, {}, False),
            ("empty-annotation", {}, {"gang-extender.io/group": ""}, False),
            ("coscheduling", {"scheduling.x-k8s.io/pod-group": "pg"}, {}, True),
            ("annotated", {}, {"gang-extender.io/group": "g", "gang-extender.io/min-count": "2"}, True)]:
        candidate = pod("quorum-gate-probe", name, container, labels=labels, annotations=notes)
        made = cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(candidate))
        assert (gates(json.loads(made.stdout)) == [QUORUM_GATE]) is gated, (name, made.stdout)
    workdir = tmp_path_factory.mktemp("extender-quorum-gate")
    kubeconfig = extender_kubeconfig(cp, "second-scheduler", workdir)
    cp.request("POST", "/api/v1/namespaces/quorum-gate-probe/pods", probe)
    kube = KubeClient(kubeconfig)
    try:
        wait_until_in_force("gang-extender-pod-writes", lambda: kube.request(
            "PATCH", "/api/v1/namespaces/quorum-gate-probe/pods/probe", {"dryRun": "All"},
            body={"metadata": {"labels": {"app": "probe"}}}, content_type="application/merge-patch+json"),
            lambda error: error.status == 403 and "gang-extender-pod-writes" in str(error))
    finally:
        kube.close()
    with scheduling_with_extender(cp, workdir, kubeconfig=kubeconfig) as ext:
        yield {"cp": cp, "ext": ext}


@pytest.fixture(autouse=True)
def invariants(cluster: dict[str, Any]) -> Iterator[None]:
    yield
    check_invariants(cluster["cp"], cluster["ext"])


def annotated(ns: str, name: str, group: str, min_count: int, selector: dict[str, str]) -> dict[str, Any]:
    return pod(ns, name, pod_spec(cpu="1", selector=selector),
               annotations={"gang-extender.io/group": group, "gang-extender.io/min-count": str(min_count)})


def get(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cp.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return found


def scheduling_gated(obj: dict[str, Any]) -> bool:
    """kube-scheduler saw the pod and keeps it out of its queue: PodScheduled False, reason SchedulingGated."""
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
               for c in (obj.get("status") or {}).get("conditions") or [])


def filtered(ext: Extender, ns: str) -> set[str]:
    """Names of the pods of ``ns`` the extender answered a filter request for."""
    return {e["request"]["Pod"]["metadata"]["name"] for e in recorded(ext.record_path)
            if e["verb"] == "filter" and e["request"]["Pod"]["metadata"]["namespace"] == ns}


def test_early_members_wait_gated_with_no_attempt_then_bind_whole(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ext: Extender = cluster["ext"]
    ns, labels, nodes = scenario(cp, "qg-early")
    members = [annotated(ns, f"train-{i}", "train", 3, labels) for i in range(3)]
    with Sampler(cp, ns) as sampler:
        create(cp, *members[:2])
        wait_for(lambda: all(scheduling_gated(get(cp, ns, f"train-{i}")) for i in range(2)), timeout=30,
                 what="the two early members held at kube-scheduler's gate (PodScheduled: SchedulingGated)")
        # The system is running meanwhile: a pod of no gang (not gated: the fixture shows it) is bound.
        create(cp, pod(ns, "lone", pod_spec(cpu="1", selector=labels)))
        all_bound(cp, ns, "lone", 1, nodes)
        for i in range(2):
            early = get(cp, ns, f"train-{i}")
            assert gates(early) == [QUORUM_GATE] and not early["spec"].get("nodeName"), early
        assert "lone" in filtered(ext, ns) and not filtered(ext, ns) & {"train-0", "train-1"}
        # No filter comes to say why they wait: the extender says it (as a filter would have). Its walk may
        # have seen one member only ("1/3"): repeats of a GangWaiting Event that differ only in their counts
        # are suppressed for a minute (kube.events.COARSE_REASONS), so either count may be the one told.
        wait_for(lambda: any(re.search(r"\b[12]/3 pods exist", e["message"]) for e in events(cp, ns, "GangWaiting")),
                 timeout=30, what="a GangWaiting Event saying 1/3 or 2/3 pods exist")
        create(cp, members[2])
        placed = all_bound(cp, ns, "train-", 3, nodes)
    assert sampler.partial("train-", 3) == []
    assert all(gates(get(cp, ns, name)) == [] for name in placed)
    tried = {e["involvedObject"]["name"] for e in events(cp, ns, "FailedScheduling")}
    assert not tried & set(placed), f"members tried before their quorum: {sorted(tried)}"
    removed = {k: v for k, v in ext.metrics().items() if k.startswith("gang_extender_quorum_gates_removed_total")}
    assert removed['gang_extender_quorum_gates_removed_total{outcome="sent"}'] >= 3, removed  # the 3 members
    assert removed['gang_extender_quorum_gates_removed_total{outcome="failed"}'] == 0, removed  # none sent twice


def test_other_gates_stay_and_a_group_object_after_its_pods_releases_them(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "qg-late-group")
    spec = pod_spec(cpu="1", selector=labels)
    spec["schedulingGroup"] = {"podGroupName": "pg"}
    held = {**spec, "schedulingGates": [{"name": "example.com/quota"}]}
    create(cp, pod(ns, "pg-0", spec), pod(ns, "pg-1", held))
    wait_for(lambda: all(scheduling_gated(get(cp, ns, f"pg-{i}")) for i in range(2)), timeout=30,
             what="both members held at kube-scheduler's gate")
    assert gates(get(cp, ns, "pg-1")) == ["example.com/quota", QUORUM_GATE]
    with Sampler(cp, ns) as sampler:
        create(cp, {"apiVersion": API, "kind": "PodGroup", "metadata": {"name": "pg", "namespace": ns},
                    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})
        # The quorum exists once the PodGroup does: the extender's walk removes its gate from both; the
        # other gate, not its own, keeps pg-1 (and so the gang) waiting.
        wait_for(lambda: gates(get(cp, ns, "pg-0")) == [] and gates(get(cp, ns, "pg-1")) == ["example.com/quota"],
                 timeout=30, what="the quorum gate removed from both members, the other gate kept")
        cp.request("PATCH", f"/api/v1/namespaces/{ns}/pods/pg-1", [{"op": "remove", "path": "/spec/schedulingGates"}],
                   content_type="application/json-patch+json")
        all_bound(cp, ns, "pg-", 2, nodes)
    assert sampler.partial("pg-", 2) == []

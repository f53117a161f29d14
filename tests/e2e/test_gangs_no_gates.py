"""Gangs on a control plane with no alpha/beta feature gates and no ``--runtime-config`` (Kubernetes 1.35,
what a managed cluster gives you): no Workload API at all, only the scheduler-plugins PodGroup CRD and
the annotation form. The CRD is installed *after* gang-extender started: re-discovery must pick it up
without a restart, and removing it must stop the watch."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from controlplane import ControlPlane, wait_for
from support import (
    ROOT,
    Extender,
    Sampler,
    all_bound,
    check_invariants,
    create,
    events,
    pod,
    pod_spec,
    scenario,
    scheduling_with_extender,
    stays_unbound,
)

pytestmark = pytest.mark.e2e

CRD = ROOT / "manifests" / "crds" / "scheduling.x-k8s.io_podgroups.yaml"
CRD_WATCH = "podgroups.scheduling.x-k8s.io"


def readyz(ext: Extender) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(ext.url + "/readyz", timeout=5) as reply:
            return dict(json.load(reply))
    except urllib.error.HTTPError as exc:  # 503 while a watch is not synced: the body says which
        return dict(json.load(exc))


@pytest.fixture(scope="module")
def cluster(control_plane_no_gates: ControlPlane, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, Any]]:
    cp = control_plane_no_gates
    with scheduling_with_extender(cp, tmp_path_factory.mktemp("extender-no-gates"),
                                  "--discovery-interval-seconds", "1") as ext:
        yield {"cp": cp, "ext": ext}


@pytest.fixture(autouse=True)
def invariants(cluster: dict[str, Any]) -> Iterator[None]:
    yield
    check_invariants(cluster["cp"], cluster["ext"])


def test_no_gate_and_no_workload_api(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    assert cp.feature_gates == {} and cp.runtime_config == []
    assert "scheduling.k8s.io/v1alpha1" not in cp.kubectl("api-versions").stdout
    metrics = cp.metrics("kube-apiserver")
    assert re.search(r'^kubernetes_feature_enabled\{name="GenericWorkload",stage="ALPHA"\} 0$', metrics, re.M)
    ready = readyz(cluster["ext"])
    assert ready["ready"] is True and set(ready["watches"]) == {"nodes", "pods", "poddisruptionbudgets"}, ready
    assert ready["groupApis"] == {}, ready


def test_annotation_gang(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "ng-annotation")
    annotations = {"gang-extender.io/group": "g", "gang-extender.io/min-count": "3"}
    gang = [pod(ns, f"an{i}", pod_spec(cpu="1", selector=labels), annotations=annotations) for i in range(3)]
    with Sampler(cp, ns) as sampler:
        create(cp, *gang[:2])
        stays_unbound(cp, ns, "an", 4)
        create(cp, gang[2])
        all_bound(cp, ns, "an", 3, nodes)
    assert sampler.partial("an", 3) == []


def test_crd_installed_later_is_discovered_and_its_podgroups_get_status(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ext: Extender = cluster["ext"]
    cp.kubectl("apply", "-f", str(CRD))
    wait_for(lambda: CRD_WATCH in readyz(ext).get("watches", {}) and readyz(ext)["ready"], timeout=30,
             what="gang-extender to discover and list the PodGroup CRD without a restart")
    assert readyz(ext)["groupApis"] == {CRD_WATCH: "v1alpha1"}
    assert ext.starts == 1
    ns, labels, nodes = scenario(cp, "ng-podgroup")
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "pg", "namespace": ns}, "spec": {"minMember": 3}}
    members = [pod(ns, f"pg{i}", pod_spec(cpu="1", selector=labels), {"scheduling.x-k8s.io/pod-group": "pg"})
               for i in range(3)]

    def status() -> dict[str, Any]:
        return dict(cp.request("GET", f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/pg")
                    .get("status") or {})

    with Sampler(cp, ns) as sampler:
        create(cp, group, *members[:2])
        stays_unbound(cp, ns, "pg", 4)
        wait_for(lambda: status().get("phase") == "Pending", timeout=30, what="status.phase Pending")
        wait_for(lambda: bool(events(cp, ns, "GangWaiting")), timeout=30, what="a GangWaiting event")
        message = events(cp, ns, "GangWaiting")[0]["message"]  # 1/3 or 2/3: the watch may lag the create
        assert re.fullmatch(rf"waiting for gang {ns}/pg: [12]/3 pods exist", message), message
        create(cp, members[2])
        all_bound(cp, ns, "pg", 3, nodes)
    assert sampler.partial("pg", 3) == []
    wait_for(lambda: status() == {"phase": "Scheduled", "scheduled": 3}, timeout=30,
             what="status.phase Scheduled with 3 scheduled")
    printed = cp.kubectl("get", "podgroups.scheduling.x-k8s.io", "pg", "-n", ns).stdout
    assert re.search(r"^pg\s+Scheduled\s+3\s+3\s", printed, re.M), printed


def test_crd_removed_stops_its_watch(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ext: Extender = cluster["ext"]
    cp.kubectl("delete", "-f", str(CRD), "--wait=true", timeout=120)
    wait_for(lambda: CRD_WATCH not in readyz(ext).get("watches", {}), timeout=30,
             what="gang-extender to stop watching the removed CRD")
    ready = readyz(ext)
    assert ready["ready"] is True and ready["groupApis"] == {}, ready

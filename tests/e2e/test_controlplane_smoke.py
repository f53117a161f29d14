"""The e2e harness itself works: a plain kube-scheduler (no extender) binds a Job's pods to fake nodes,
the Workload API is served and ``spec.workloadRef`` survives a round trip, and the in-tree
GangScheduling gate is off."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from controlplane import ControlPlane, wait_for

pytestmark = pytest.mark.e2e

PLAIN_SCHEDULER: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [{"schedulerName": "default-scheduler"}],
}
PAUSE = "registry.k8s.io/pause:3.10"


def _pods(cp: ControlPlane, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cp.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")[
        "items"
    ]
    return items


def test_plain_scheduler_binds_job_pods(control_plane: ControlPlane) -> None:
    cp = control_plane
    nodes = set(cp.add_nodes(3, prefix="smoke-"))
    cp.create_namespace("smoke")
    cp.start_scheduler(PLAIN_SCHEDULER)
    try:
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "trio", "namespace": "smoke"},
            "spec": {
                "parallelism": 3,
                "completions": 3,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "pause", "image": PAUSE, "resources": {"requests": {"cpu": "100m"}}}],
                    }
                },
            },
        }
        cp.kubectl("apply", "-f", "-", input=json.dumps(job))

        def all_bound() -> bool:
            pods = _pods(cp, "smoke", "job-name%3Dtrio")
            return len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods)

        wait_for(all_bound, timeout=60, what="the Job's 3 pods to be bound")
        bound_to = [p["spec"]["nodeName"] for p in _pods(cp, "smoke", "job-name%3Dtrio")]
        assert set(bound_to) <= nodes, bound_to
        # The in-tree gang plugin must stay off: all-or-nothing is the extender's job.
        assert re.search(
            r'^kubernetes_feature_enabled\{name="GangScheduling",stage="ALPHA"\} 0$', cp.metrics("kube-scheduler"), re.M
        )
    finally:
        cp.stop_scheduler()


def test_workload_api_and_workload_ref(control_plane: ControlPlane) -> None:
    cp = control_plane
    resources = cp.kubectl("api-resources", "--api-group=scheduling.k8s.io").stdout
    assert re.search(r"^workloads\s+scheduling\.k8s\.io/v1alpha1\s+true\s+Workload\b", resources, re.M), resources

    cp.create_namespace("wl")
    workload = {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "gang", "namespace": "wl"},
        "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 2}}}]},
    }
    cp.kubectl("create", "-f", "-", input=json.dumps(workload))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "member-0", "namespace": "wl"},
        "spec": {
            "workloadRef": {"name": "gang", "podGroup": "workers"},
            "containers": [{"name": "pause", "image": PAUSE}],
        },
    }
    cp.kubectl("create", "-f", "-", input=json.dumps(pod))
    got = json.loads(cp.kubectl("get", "pod", "member-0", "-n", "wl", "-o", "json").stdout)
    assert got["spec"]["workloadRef"] == {"name": "gang", "podGroup": "workers"}

    gates = cp.metrics("kube-apiserver")
    assert re.search(r'^kubernetes_feature_enabled\{name="GenericWorkload",stage="ALPHA"\} 1$', gates, re.M)
    assert re.search(r'^kubernetes_feature_enabled\{name="GangScheduling",stage="ALPHA"\} 0$', gates, re.M)

"""The kwok test bed: kwok (hack/kwok_harness.py) stands in for kubelets on a real API server.

Pods bound to kwok nodes turn Running; a delete with a grace period and an eviction through the
Eviction API complete (the pod is gone); kwok nodes are Ready and come back to Ready; and with
kube-scheduler + gang-extender a gang runs on kwok nodes and, once it is deleted gracefully, a second
gang gets its capacity. Pods on the control plane's plain fake nodes are the control experiment: kwok
leaves them alone, so they stay Pending and their graceful deletion never finishes.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from controlplane import ControlPlane, wait_for
from kwok_harness import NODE_LABEL, POD_CIDR, Kwok, is_ready
from support import (
    Sampler,
    all_bound,
    check_invariants,
    create,
    pod,
    pod_spec,
    scheduling_with_extender,
    stays_unbound,
    workload,
)

pytestmark = pytest.mark.e2e

GRACE = 30  # seconds: far longer than any wait below, so only kwok can end a deletion in time
SETTLE = 10.0  # bound for kwok to play a stage (it takes ~0.1 s)


@pytest.fixture(scope="module")
def bed(control_plane: ControlPlane, kwok: Kwok) -> Iterator[dict[str, Any]]:
    """A namespace and two kwok nodes (4 cpu) for the pod-level tests; pods there are bound by name."""
    cp = control_plane
    cp.create_namespace("kwok-bed")
    nodes = kwok.add_nodes(2, prefix="bed-", cpu="4", memory="8Gi", labels={"e2e-scenario": "kwok-bed"})
    yield {"cp": cp, "ns": "kwok-bed", "nodes": nodes}


def _bound_pod(ns: str, name: str, node: str) -> dict[str, Any]:
    spec = pod_spec(cpu="100m", selector={}, grace_seconds=GRACE)
    return pod(ns, name, {**spec, "nodeName": node})


def _get(cp: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    """The pod, or None once the API server answers 404."""
    status, body = cp.api.request_raw("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    if status == 404:
        return None
    assert status == 200, body
    found: dict[str, Any] = json.loads(body)
    return found


def _running(cp: ControlPlane, ns: str, name: str) -> bool:
    found = _get(cp, ns, name)
    return found is not None and found["status"].get("phase") == "Running"


def _gone(cp: ControlPlane, ns: str, name: str) -> bool:
    return _get(cp, ns, name) is None


def _start(cp: ControlPlane, ns: str, name: str, node: str) -> None:
    create(cp, _bound_pod(ns, name, node))
    wait_for(lambda: _running(cp, ns, name), timeout=SETTLE, what=f"pod {name} Running")


def test_a_pod_bound_to_a_kwok_node_runs(bed: dict[str, Any]) -> None:
    cp, ns, node = bed["cp"], bed["ns"], bed["nodes"][0]
    _start(cp, ns, "runs", node)
    status = cp.request("GET", f"/api/v1/namespaces/{ns}/pods/runs")["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Ready"] == "True" and conditions["ContainersReady"] == "True", conditions
    assert [s["state"].keys() for s in status["containerStatuses"]] == [{"running": {}}.keys()]
    assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network(POD_CIDR)
    assert status["hostIP"] == "127.0.0.1"


def test_a_graceful_delete_completes(bed: dict[str, Any]) -> None:
    cp, ns, node = bed["cp"], bed["ns"], bed["nodes"][0]
    _start(cp, ns, "graceful", node)
    reply = cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/graceful", {"gracePeriodSeconds": GRACE})
    assert reply["metadata"].get("deletionTimestamp"), "the API server deleted the pod at once: not graceful"
    t0 = time.monotonic()
    wait_for(lambda: _gone(cp, ns, "graceful"), timeout=SETTLE, what="the graceful deletion to complete")
    assert time.monotonic() - t0 < GRACE


def test_an_eviction_removes_the_pod(bed: dict[str, Any]) -> None:
    cp, ns, node = bed["cp"], bed["ns"], bed["nodes"][1]
    _start(cp, ns, "evicted", node)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "evicted", "namespace": ns}}
    cp.request("POST", f"/api/v1/namespaces/{ns}/pods/evicted/eviction", eviction)
    wait_for(lambda: _gone(cp, ns, "evicted"), timeout=SETTLE, what="the evicted pod to disappear")


def test_pods_on_plain_nodes_are_left_alone(bed: dict[str, Any]) -> None:
    """The control experiment: without kwok (a node lacking the label) a bound pod stays Pending and a
    graceful delete leaves it Terminating."""
    cp, ns = bed["cp"], bed["ns"]
    (plain,) = cp.add_nodes(1, prefix="plain-", labels={"e2e-scenario": "kwok-bed"})
    assert NODE_LABEL not in cp.request("GET", f"/api/v1/nodes/{plain}")["metadata"]["labels"]
    create(cp, _bound_pod(ns, "unmanaged", plain))
    time.sleep(1.5)
    assert cp.request("GET", f"/api/v1/namespaces/{ns}/pods/unmanaged")["status"]["phase"] == "Pending"
    cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/unmanaged", {"gracePeriodSeconds": GRACE})
    time.sleep(1.5)
    left = _get(cp, ns, "unmanaged")
    assert left is not None and left["metadata"].get("deletionTimestamp")
    cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/unmanaged", {"gracePeriodSeconds": 0})
    cp.delete_node(plain)


def test_kwok_nodes_are_ready_and_come_back_to_ready(bed: dict[str, Any]) -> None:
    cp, node = bed["cp"], bed["nodes"][1]
    assert all(is_ready(cp.request("GET", f"/api/v1/nodes/{n}")) for n in bed["nodes"])
    # What the node lifecycle controller would write after missed heartbeats:
    not_ready = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                 "message": "Kubelet stopped posting node status."}
    cp.request("PATCH", f"/api/v1/nodes/{node}/status", {"status": {"conditions": [not_ready]}},
               content_type="application/strategic-merge-patch+json")
    wait_for(lambda: is_ready(cp.request("GET", f"/api/v1/nodes/{node}")), timeout=SETTLE,
             what=f"kwok to make {node} Ready again")


def test_a_gang_runs_on_kwok_nodes_and_its_capacity_is_reused(
        control_plane: ControlPlane, kwok: Kwok, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Two kwok nodes of 4 cpu; gangs a and b of 4 x 2 cpu each: b fits only in what a frees."""
    cp, ns = control_plane, "kwok-gangs"
    cp.create_namespace(ns)
    labels = {"e2e-scenario": ns}
    nodes = set(kwok.add_nodes(2, prefix="gang-", cpu="4", memory="8Gi", labels=labels))

    def gang(prefix: str, name: str) -> list[dict[str, Any]]:
        spec = pod_spec(cpu="2", selector=labels, workload_ref={"name": name, "podGroup": "workers"},
                        grace_seconds=GRACE)
        return [pod(ns, f"{prefix}{i}", spec) for i in range(4)]

    with scheduling_with_extender(cp, tmp_path_factory.mktemp("kwok-extender")) as ext, Sampler(cp, ns) as sampler:
        create(cp, workload(ns, "wa", {"workers": 4}), *gang("a", "wa"))
        all_bound(cp, ns, "a", 4, nodes)
        wait_for(lambda: all(_running(cp, ns, f"a{i}") for i in range(4)), timeout=SETTLE, what="gang a Running")
        create(cp, workload(ns, "wb", {"workers": 4}), *gang("b", "wb"))
        stays_unbound(cp, ns, "b", 2)
        for i in range(4):
            reply = cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/a{i}", {"gracePeriodSeconds": GRACE})
            assert reply["metadata"].get("deletionTimestamp"), f"a{i} was not deleted gracefully"
        all_bound(cp, ns, "b", 4, nodes)
        wait_for(lambda: all(_running(cp, ns, f"b{i}") for i in range(4)), timeout=SETTLE, what="gang b Running")
        assert not any(name.startswith("a") for name in _pod_names(cp, ns)), "gang a's pods are still there"
        check_invariants(cp, ext)
    assert sampler.partial("a", 4) == [] and sampler.partial("b", 4) == []


def _pod_names(cp: ControlPlane, ns: str) -> list[str]:
    return [p["metadata"]["name"] for p in cp.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]]

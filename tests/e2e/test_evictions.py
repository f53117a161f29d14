"""Evictions on a real kube-apiserver (1.35) with kube-controller-manager's disruption controller:
``KubeClient.evict`` creates a policy/v1 Eviction (the pod is being deleted, or gone); a name that now
belongs to another pod, or no pod, is ``GoneError``; a PodDisruptionBudget that allows no disruption
makes the API answer 429, ``BudgetError``; a pod under two budgets is refused (500,
``EvictionError``); a finished or Pending pod is evicted whatever its budget; and ``DisruptionBudgets``
fed by the real watch (with pod records from the real pod watch) predicts these answers, naming the
budget (stricter for the Pending pod).

No kubelet runs here: a pod is made Running and Ready by patching its status as an administrator, which
is what the disruption controller counts as healthy and what makes the Eviction API consult budgets (a
Pending pod is deleted without a budget check).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from controlplane import ControlPlane, wait_for
from support import PAUSE

from extender.cluster.budgets import DisruptionBudgets
from extender.cluster.mirror import ClusterMirror
from extender.errors import BudgetError, EvictionError, GoneError
from extender.kube.client import KubeClient
from extender.model.cluster import PodRecord
from extender.wiring.feeds import MirrorFeeds

pytestmark = pytest.mark.e2e

NS = "evictions"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[dict[str, Any]]:
    """The namespace and a node; an admin ``KubeClient``; the pod watch into a mirror and the
    PodDisruptionBudget watch into ``DisruptionBudgets``, both started as the extender starts them."""
    cp = control_plane
    cp.create_namespace(NS)
    (node,) = cp.add_nodes(1, prefix="ev-")
    kube = KubeClient(cp.kubeconfig)
    mirror, budgets, stop = ClusterMirror(), DisruptionBudgets(), threading.Event()
    feeds = MirrorFeeds(mirror, kube, stop)
    reflectors = [*feeds.core(), feeds.budgets(budgets)]
    for reflector in reflectors:
        reflector.start()
    try:
        wait_for(lambda: all(r.synced.is_set() for r in reflectors), timeout=30, what="the watches to list")
        yield {"cp": cp, "node": node, "kube": kube, "mirror": mirror, "budgets": budgets}
    finally:
        stop.set()
        kube.close()


def _running_pod(cp: ControlPlane, name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    """A pod bound to ``node``, then Running and Ready (an administrator writes what a kubelet would)."""
    created: dict[str, Any] = cp.request("POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": PAUSE}]}})
    cp.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status",
               {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
               content_type="application/merge-patch+json")
    return created


def _pdb(cp: ControlPlane, name: str, min_available: int, labels: dict[str, str]) -> None:
    cp.request("POST", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": NS},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}}})


def _pod(cp: ControlPlane, name: str) -> dict[str, Any] | None:
    status, body = cp.api.request_raw("GET", f"/api/v1/namespaces/{NS}/pods/{name}")
    assert status in (200, 404), (status, body)
    return cp.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}") if status == 200 else None


def _records(mirror: ClusterMirror, *names: str) -> list[PodRecord]:
    """The mirror's records of these pods, once the pod watch shows each Running with its labels."""
    def seen() -> bool:
        return all((r := mirror.pod(NS, n)) is not None and r.labels for n in names)

    wait_for(seen, timeout=30, what=f"the pod watch to deliver {names}")
    return [r for n in names if (r := mirror.pod(NS, n)) is not None]


def test_evict_deletes_the_pod_of_that_uid_only(cluster: dict[str, Any]) -> None:
    cp, kube, node = cluster["cp"], cluster["kube"], cluster["node"]
    pod = _running_pod(cp, "plain", node, {"app": "plain"})
    uid = pod["metadata"]["uid"]
    with pytest.raises(GoneError, match="the UID in the precondition"):
        kube.evict(NS, "plain", "not-" + uid)  # another pod of the same name: not ours to evict
    current = _pod(cp, "plain")
    assert current is not None and not current["metadata"].get("deletionTimestamp")

    kube.evict(NS, "plain", uid)
    after = _pod(cp, "plain")  # bound to a node, so deleted gracefully (no kubelet confirms it here)
    assert after is None or after["metadata"].get("deletionTimestamp"), after
    with pytest.raises(GoneError):
        kube.evict(NS, "no-such-pod", "")


def test_a_budget_at_its_minimum_refuses_with_429_and_the_mirror_predicts_it(cluster: dict[str, Any]) -> None:
    cp, kube, node, mirror, budgets = (cluster[k] for k in ("cp", "kube", "node", "mirror", "budgets"))
    pods = [_running_pod(cp, f"db-{i}", node, {"app": "db"}) for i in range(2)]
    _pdb(cp, "db", 2, {"app": "db"})

    # The disruption controller computes the status: both pods healthy, none may go.
    def computed() -> bool:
        budget = budgets.get(NS, "db")
        return budget is not None and budget.disruptions_allowed is not None
    wait_for(computed, timeout=60, what="the disruption controller to compute the budget's status")
    status = cp.request("GET", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/db")["status"]
    assert status["currentHealthy"] == 2 and status["disruptionsAllowed"] == 0, status

    records = _records(mirror, "db-0", "db-1")
    assert [r.labels for r in records] == [(("app", "db"),)] * 2
    ok, reason = budgets.allowed(records[:1])
    assert not ok and f"PodDisruptionBudget {NS}/db" in reason and "the 0 disruption(s)" in reason

    with pytest.raises(BudgetError, match="429"):
        kube.evict(NS, "db-0", pods[0]["metadata"]["uid"])
    current = _pod(cp, "db-0")
    assert current is not None and not current["metadata"].get("deletionTimestamp")


def test_a_budget_with_room_for_one_takes_one_eviction_then_refuses(cluster: dict[str, Any]) -> None:
    cp, kube, node, mirror, budgets = (cluster[k] for k in ("cp", "kube", "node", "mirror", "budgets"))
    pods = [_running_pod(cp, f"web-{i}", node, {"app": "web"}) for i in range(2)]
    _pdb(cp, "web", 1, {"app": "web"})

    def allows_one() -> bool:
        budget = budgets.get(NS, "web")
        return budget is not None and budget.disruptions_allowed == 1
    wait_for(allows_one, timeout=60, what="the budget web to allow one disruption")
    records = _records(mirror, "web-0", "web-1")
    assert budgets.allowed(records[:1]) == (True, "")
    ok, reason = budgets.allowed(records)  # both at once: one too many
    assert not ok and f"evicting 2 pod(s) selected by PodDisruptionBudget {NS}/web exceeds the 1" in reason

    kube.evict(NS, "web-0", pods[0]["metadata"]["uid"])
    with pytest.raises(BudgetError):
        kube.evict(NS, "web-1", pods[1]["metadata"]["uid"])

    def spent() -> bool:
        budget = budgets.get(NS, "web")
        return budget is not None and budget.disruptions_allowed == 0
    wait_for(spent, timeout=30, what="the watch to show the budget spent")
    assert not budgets.allowed(records[1:])[0]


def test_a_pod_under_two_budgets_is_never_evicted_and_the_mirror_says_why(cluster: dict[str, Any]) -> None:
    cp, kube, node, mirror, budgets = (cluster[k] for k in ("cp", "kube", "node", "mirror", "budgets"))
    pod = _running_pod(cp, "shared-0", node, {"app": "shared", "tier": "cache"})
    _pdb(cp, "by-app", 0, {"app": "shared"})
    _pdb(cp, "by-tier", 0, {"tier": "cache"})
    wait_for(lambda: budgets.get(NS, "by-app") is not None and budgets.get(NS, "by-tier") is not None,
             timeout=30, what="the watch to deliver both budgets")
    ok, reason = budgets.allowed(_records(mirror, "shared-0"))
    assert not ok and f"more than one PodDisruptionBudget ({NS}/by-app, {NS}/by-tier)" in reason
    with pytest.raises(EvictionError, match=r"500 .*more than one PodDisruptionBudget") as caught:
        kube.evict(NS, "shared-0", pod["metadata"]["uid"])
    assert type(caught.value) is EvictionError


def test_finished_and_pending_pods_are_evicted_whatever_their_budget(cluster: dict[str, Any]) -> None:
    """The Eviction API deletes a terminal or Pending pod without a budget check: the mirror agrees for
    the terminal one and is stricter for the Pending one (it does not keep a bound pod's phase)."""
    cp, kube, node, mirror, budgets = (cluster[k] for k in ("cp", "kube", "node", "mirror", "budgets"))
    done = _running_pod(cp, "finished-0", node, {"app": "finished"})
    cp.request("PATCH", f"/api/v1/namespaces/{NS}/pods/finished-0/status", {"status": {"phase": "Succeeded"}},
               content_type="application/merge-patch+json")
    pending: dict[str, Any] = cp.request("POST", f"/api/v1/namespaces/{NS}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "finished-1", "namespace": NS,
                                                        "labels": {"app": "finished"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": PAUSE}]}})
    _pdb(cp, "finished", 5, {"app": "finished"})
    wait_for(lambda: (b := budgets.get(NS, "finished")) is not None and b.disruptions_allowed == 0, timeout=60,
             what="the disruption controller to compute the budget finished")
    wait_for(lambda: (r := mirror.pod(NS, "finished-0")) is not None and r.terminal, timeout=30,
             what="the pod watch to show finished-0 Succeeded")
    terminal, bound_pending = _records(mirror, "finished-0", "finished-1")
    assert budgets.allowed([terminal]) == (True, "")
    assert not budgets.allowed([bound_pending])[0]  # stricter than the API server, which deletes it
    kube.evict(NS, "finished-0", done["metadata"]["uid"])
    kube.evict(NS, "finished-1", pending["metadata"]["uid"])
    for name in ("finished-0", "finished-1"):
        after = _pod(cp, name)
        assert after is None or after["metadata"].get("deletionTimestamp"), after

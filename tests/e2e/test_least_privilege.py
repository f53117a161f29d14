"""Least privilege, enforced: the extender's own identity in every topology, its exact RBAC verbs, and the
ValidatingAdmissionPolicy that confines its pod writes, checked on a real kube-apiserver.

- Every shipped topology gives the extender credentials of its own (the ServiceAccount
  gang-scheduler/gang-extender), never kube-scheduler's, and kube-scheduler never the extender's.
- That identity, reached the way each topology reaches it (the sidecar's token Secret, the static pod's
  kubeconfig written by extender-kubeconfig.sh), can do exactly the verbs of extender/kube/client.py (plus
  Leases in gang-scheduler) and is refused a list of others.
- Acting as that identity with the extender's own client: an image, label, toleration or foreign
  annotation patch is refused by the policy; its wake-up annotation patch, a Binding, an Event and an
  Eviction pass; deleting a pod or writing a node is refused by RBAC. Its quorum-gate removal passes, and
  nothing more in a pod's spec.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from identities import (
    EXTENDER_SA,
    EXTENDER_USER,
    IN_CLUSTER,
    MANIFESTS,
    NAMESPACE,
    TOKEN_SECRET,
    TOPOLOGIES,
    built,
    extender_kubeconfig,
    extender_pod,
    install,
    refused,
    wait_until_in_force,
    whoami,
)
from support import PAUSE

from extender.errors import KubeError
from extender.kube.client import KubeClient
from extender.kube.events import WAKE_ANNOTATION
from extender.model.cluster import QUORUM_GATE

pytestmark = pytest.mark.e2e

POLICY = "gang-extender-pod-writes"

# What extender/kube/client.py calls, as `kubectl auth can-i --list` prints it: resource -> verbs.
EXTENDER_GRANTS = {
    "nodes": {"list", "watch"},
    "pods": {"get", "list", "watch", "patch"},
    "pods/binding": {"create"},
    "pods/eviction": {"create"},
    "poddisruptionbudgets.policy": {"list", "watch"},
    "events": {"create"},
    "workloads.scheduling.k8s.io": {"list", "watch"},
    "podgroups.scheduling.k8s.io": {"list", "watch"},
    "podgroups.scheduling.x-k8s.io": {"list", "watch"},
    "podgroups.scheduling.k8s.io/status": {"patch"},
    "podgroups.scheduling.x-k8s.io/status": {"patch"},
    "topologies.kueue.x-k8s.io": {"list", "watch"},
}
# Leader election and release intents: Leases, in the namespace gang-scheduler only; get and update of
# the extender's own Lease only (`kubectl auth can-i --list` shows such a rule as "resource[name]").
NAMESPACED_GRANTS = {NAMESPACE: {"leases.coordination.k8s.io": {"create"},
                                 "leases.coordination.k8s.io[gang-extender]": {"get", "update"}}}
# The default-scheduler topology's static pods elect on a Lease of their own (role-lease.yaml there): get and
# update of that one more, and its Role, for that topology only.
TOPOLOGY_LEASE = {"default-scheduler": "gang-extender-default-scheduler"}
TOPOLOGY_LEASE_ROLE = {"default-scheduler": "gang-extender:default-scheduler-lease"}


def namespaced_grants(topology: str, namespace: str) -> dict[str, set[str]]:
    grants = dict(NAMESPACED_GRANTS.get(namespace, {}))
    if namespace == NAMESPACE and topology in TOPOLOGY_LEASE:
        grants[f"leases.coordination.k8s.io[{TOPOLOGY_LEASE[topology]}]"] = {"get", "update"}
    return grants


# (verb, resource, extra kubectl args): must all be refused to the extender's ServiceAccount.
EXTENDER_DENIED = [
    ("delete", "pods", []), ("create", "pods", []), ("update", "pods", []),
    ("patch", "pods", ["--subresource=status"]), ("get", "nodes", []), ("update", "nodes", []),
    ("patch", "nodes", []), ("delete", "nodes", []), ("get", "secrets", []), ("list", "secrets", []),
    ("get", "configmaps", []), ("list", "events", []), ("patch", "events", []),
    ("create", "events.events.k8s.io", []), ("get", "workloads.scheduling.k8s.io", []),
    ("create", "workloads.scheduling.k8s.io", []), ("get", "podgroups.scheduling.x-k8s.io", []),
    ("update", "podgroups.scheduling.x-k8s.io", ["--subresource=status"]),
    ("patch", "podgroups.scheduling.x-k8s.io", []), ("patch", "podgroups.scheduling.k8s.io", []),
    ("update", "podgroups.scheduling.k8s.io", ["--subresource=status"]), ("get", "podgroups.scheduling.k8s.io", []),
    ("create", "podgroups.scheduling.k8s.io", []), ("delete", "podgroups.scheduling.x-k8s.io", []),
    ("get", "topologies.kueue.x-k8s.io", []), ("create", "topologies.kueue.x-k8s.io", []),
    ("update", "leases.coordination.k8s.io", []), ("delete", "leases.coordination.k8s.io", ["-n", NAMESPACE]),
    ("list", "leases.coordination.k8s.io", ["-n", NAMESPACE]), ("create", "leases.coordination.k8s.io", []),
    ("get", "leases.coordination.k8s.io/gang-scheduler", ["-n", NAMESPACE]),
    ("update", "leases.coordination.k8s.io/other", ["-n", NAMESPACE]),
    ("create", "serviceaccounts", ["--subresource=token"]), ("get", "secrets", ["-n", NAMESPACE]),
    ("update", "pods", ["--subresource=ephemeralcontainers"]), ("get", "poddisruptionbudgets.policy", []),
    ("create", "poddisruptionbudgets.policy", []), ("delete", "poddisruptionbudgets.policy", []),
    ("patch", "poddisruptionbudgets.policy", ["--subresource=status"]),
    ("escalate", "clusterroles", []), ("impersonate", "serviceaccounts", []),
    ("create", "validatingadmissionpolicybindings.admissionregistration.k8s.io", []),
    ("delete", "validatingadmissionpolicies.admissionregistration.k8s.io", []),
]


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> ControlPlane:
    return install(control_plane)


# ---------------------------------------------------------------------------- who runs as whom
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_the_extender_has_credentials_of_its_own(k8s_bin_dir: Path, topology: str) -> None:
    """The sidecar mounts the gang-extender token Secret where in-cluster clients look, and nothing else
    of the kind; kube-scheduler mounts a token of the pod's ServiceAccount only; no token is mounted
    automatically. The static pod uses its own kubeconfig file, not kube-scheduler's."""
    pod, container = extender_pod(k8s_bin_dir, topology)
    if topology == "default-scheduler":
        kubeconfig = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--kubeconfig="))
        assert kubeconfig == "/etc/kubernetes/gang-extender.conf"
        assert not any("scheduler.conf" in str(v) for v in pod["volumes"]), pod["volumes"]
        return
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "gang-scheduler"
    (scheduler,) = pod["containers"]
    mounts = {c["name"]: {m["mountPath"]: m["name"] for m in c["volumeMounts"]} for c in (container, scheduler)}
    extender_volume = volumes[mounts["gang-extender"][IN_CLUSTER]]
    assert extender_volume["secret"]["secretName"] == TOKEN_SECRET
    assert {i["key"] for i in extender_volume["secret"]["items"]} == {"token", "ca.crt", "namespace"}
    scheduler_volume = volumes[mounts["kube-scheduler"][IN_CLUSTER]]
    assert [s for s in scheduler_volume["projected"]["sources"] if "serviceAccountToken" in s], scheduler_volume
    # Neither container can read the other's token.
    assert extender_volume["name"] not in mounts["kube-scheduler"].values()
    assert scheduler_volume["name"] not in mounts["gang-extender"].values()
    objects = built(k8s_bin_dir, topology)
    (secret,) = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == TOKEN_SECRET]
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == EXTENDER_SA


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_only_the_extender_holds_the_extender_role(k8s_bin_dir: Path, topology: str) -> None:
    """No shipped binding grants the gang-extender roles to kube-scheduler's identity (or anyone else)."""
    bindings = [o for o in built(k8s_bin_dir, topology) if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    mine = [b for b in bindings if b["roleRef"]["name"].startswith("gang-extender")]
    own_lease_role = [TOPOLOGY_LEASE_ROLE[topology]] if topology in TOPOLOGY_LEASE_ROLE else []
    assert {b["roleRef"]["name"] for b in mine} == {"gang-extender", "gang-extender:leases", *own_lease_role}
    for binding in mine:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": EXTENDER_SA, "namespace": NAMESPACE}]


# ----------------------------------------------------------------------------------------- RBAC
def _kubectl_as(cp: ControlPlane, kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cp.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)


def _can_i_list(cp: ControlPlane, kubeconfig: str, namespace: str) -> dict[str, set[str]]:
    """``kubectl auth can-i --list`` as resource -> verbs (non-resource URLs under their path)."""
    proc = _kubectl_as(cp, kubeconfig, "auth", "can-i", "--list", "-n", namespace)
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    columns = [header.index(name) for name in ("Resources", "Non-Resource URLs", "Resource Names", "Verbs")]
    grants: dict[str, set[str]] = {}
    for row in rows:
        if not row.strip():
            continue
        resource, url, names, verbs = (row[a:b].strip() for a, b in zip(columns, [*columns[1:], None], strict=True))
        for name in names.strip("[]").split() or [""]:
            key = f"{resource or url}[{name}]" if name else resource or url
            grants.setdefault(key, set()).update(verbs.strip("[]").split())
    return grants


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_the_topologys_extender_identity_has_exactly_its_verbs(installed: ControlPlane, tmp_path: Path,
                                                              topology: str) -> None:
    cp = installed
    cp.kubectl("apply", "-k", str(MANIFESTS / topology))  # its own bindings too
    extender = extender_kubeconfig(cp, topology, tmp_path)
    assert whoami(cp, extender) == EXTENDER_USER
    nobody = cp.service_account_kubeconfig(NAMESPACE, "default")  # same namespace, no bindings
    for namespace in (NAMESPACE, "default", "kube-system"):
        granted, baseline = _can_i_list(cp, extender, namespace), _can_i_list(cp, nobody, namespace)
        extra = {r: v - baseline.get(r, set()) for r, v in granted.items() if v - baseline.get(r, set())}
        assert extra == {**EXTENDER_GRANTS, **namespaced_grants(topology, namespace)}, namespace
    # The same, one verb at a time and across all namespaces, for the APIs this control plane serves
    # (`can-i VERB RESOURCE` resolves the resource through discovery and says "no" to an unserved one,
    # e.g. the 1.36+ podgroups.scheduling.k8s.io on 1.35; the --list check above reads the rules).
    served = set(cp.kubectl("api-resources", "-o", "name").stdout.split())
    for resource, verbs in EXTENDER_GRANTS.items():
        name, _, sub = resource.partition("/")
        if name not in served:
            continue
        for verb in verbs:
            args = ["auth", "can-i", verb, name, "--all-namespaces", *([f"--subresource={sub}"] if sub else [])]
            assert _kubectl_as(cp, extender, *args).stdout.strip() == "yes", (verb, resource)


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_the_topologys_extender_identity_is_refused_everything_else(installed: ControlPlane, tmp_path: Path,
                                                                    topology: str) -> None:
    cp = installed
    cp.kubectl("apply", "-k", str(MANIFESTS / topology))
    extender = extender_kubeconfig(cp, topology, tmp_path)
    allowed = []
    for verb, resource, extra in EXTENDER_DENIED:
        scope = [] if "-n" in extra else ["--all-namespaces"]
        proc = _kubectl_as(cp, extender, "auth", "can-i", verb, resource, *scope, *extra)
        if proc.stdout.strip() != "no":
            allowed.append((verb, resource, extra, proc.stdout.strip(), proc.stderr.strip()))
    assert allowed == []


# --------------------------------------------------------------------------- admission policy
def _by_policy(error: KubeError) -> bool:
    return error.status == 403 and f"ValidatingAdmissionPolicy '{POLICY}'" in str(error)


def _wait_for_the_policy(kube: KubeClient, path: str) -> None:
    """Until the API server's policy informer has it (~1 s after apply): a dry-run patch (it changes
    nothing) of a label, a foreign annotation and the spec at once is refused by the policy (by any one
    of its checks, so that the test still reaches each check when another is broken)."""
    probe = {"metadata": {"labels": {"app": "probe"}, "annotations": {"probe": "1"}},
             "spec": {"activeDeadlineSeconds": 3600}}

    wait_until_in_force(POLICY, lambda: kube.request("PATCH", path, {"dryRun": "All"}, body=probe,
                                                     content_type="application/merge-patch+json"), _by_policy)


def _pod(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "vap"},
                         "annotations": {"team": "a"}},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": PAUSE}]}}


def test_the_admission_policy_confines_the_extenders_pod_writes(installed: ControlPlane, tmp_path: Path) -> None:
    cp = installed
    cp.create_namespace("vap")
    (node,) = cp.add_nodes(1, prefix="vap-")
    kube = KubeClient(extender_kubeconfig(cp, "second-scheduler", tmp_path))
    path = "/api/v1/namespaces/vap/pods/target"
    merge = "application/merge-patch+json"
    json_patch = "application/json-patch+json"
    try:
        cp.request("POST", "/api/v1/namespaces/vap/pods", _pod("vap", "target"))
        _wait_for_the_policy(kube, "/api/v1/namespaces/vap/pods/target")
        before = cp.request("GET", path)

        forbidden = {
            "image": (json_patch, [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil:1"}]),
            "label": (merge, {"metadata": {"labels": {"app": "stolen"}}}),
            "toleration": (json_patch, [{"op": "add", "path": "/spec/tolerations/-",
                                         "value": {"operator": "Exists"}}]),
            "foreign annotation": (merge, {"metadata": {"annotations": {"team": "b"}}}),
            "foreign annotation removed": (merge, {"metadata": {"annotations": {"team": None}}}),
        }
        for what, (content_type, body) in forbidden.items():
            error = refused(f"{what} patch by the extender's identity", lambda ct=content_type, b=body: kube.request(
                "PATCH", path, body=b, content_type=ct))
            assert _by_policy(error), (what, str(error))

        # What it owns passes: events.PodWaker's patch through the extender's own client, a Binding, an Event.
        kube.annotate_pod("vap", "target", {WAKE_ANNOTATION: "1.000"})
        assert cp.request("GET", path)["metadata"]["annotations"] == {"team": "a", WAKE_ANNOTATION: "1.000"}
        kube.bind("vap", "target", before["metadata"]["uid"], node)
        assert cp.request("GET", path)["spec"]["nodeName"] == node
        kube.create_event({"apiVersion": "v1", "kind": "Pod", "namespace": "vap", "name": "target",
                           "uid": before["metadata"]["uid"]}, "Normal", "GangBound", "vap test")
        reasons = [e["reason"] for e in cp.request("GET", "/api/v1/namespaces/vap/events")["items"]]
        assert "GangBound" in reasons

        # Verbs it does not need are refused before admission: RBAC.
        deleted = refused("pod delete by the extender's identity", lambda: kube.request("DELETE", path))
        assert deleted.status == 403 and "cannot delete resource" in str(deleted), str(deleted)
        node_write = refused("node patch by the extender's identity", lambda: kube.request(
            "PATCH", f"/api/v1/nodes/{node}", content_type=merge, body={"metadata": {"labels": {"x": "y"}}}))
        assert node_write.status == 403 and "cannot patch resource" in str(node_write), str(node_write)

        # The policy binds the extender's identity only: an administrator's label patch still passes.
        cp.request("PATCH", path, {"metadata": {"labels": {"app": "relabelled"}}}, content_type=merge)
        assert cp.request("GET", path)["metadata"]["labels"] == {"app": "relabelled"}

        # An Eviction (preemption) passes the policy: the bound pod is being deleted gracefully.
        kube.evict("vap", "target", before["metadata"]["uid"])
        assert cp.request("GET", path)["metadata"].get("deletionTimestamp")
    finally:
        kube.close()


def test_the_admission_policy_lets_the_extender_remove_its_quorum_gate_and_nothing_more(
        installed: ControlPlane, tmp_path: Path) -> None:
    """events.PodUngater's patch passes; removing another gate, every gate, or the quorum gate with any other
    change is refused by the policy; a patch for a pod re-created under the name fails its uid test."""
    cp = installed
    cp.create_namespace("vap-gate")
    kube = KubeClient(extender_kubeconfig(cp, "second-scheduler", tmp_path))
    path = "/api/v1/namespaces/vap-gate/pods/gated"
    json_patch = "application/json-patch+json"
    try:
        held = _pod("vap-gate", "gated")
        held["spec"]["schedulingGates"] = [{"name": "example.com/quota"}, {"name": QUORUM_GATE}]
        uid = cp.request("POST", "/api/v1/namespaces/vap-gate/pods", held)["metadata"]["uid"]
        _wait_for_the_policy(kube, path)
        forbidden = {
            "another gate removed": [{"op": "remove", "path": "/spec/schedulingGates/0"}],
            "every gate removed": [{"op": "remove", "path": "/spec/schedulingGates"}],
            "the quorum gate and a deadline": [{"op": "remove", "path": "/spec/schedulingGates/1"},
                                               {"op": "add", "path": "/spec/activeDeadlineSeconds", "value": 60}],
        }
        for what, body in forbidden.items():
            error = refused(f"{what} by the extender's identity", lambda b=body: kube.request(
                "PATCH", path, body=b, content_type=json_patch))
            assert _by_policy(error), (what, str(error))
        stale = refused("a removal for another uid", lambda: kube.remove_scheduling_gate(
            "vap-gate", "gated", "not-" + uid, QUORUM_GATE, 1))
        assert stale.status == 422, str(stale)  # the uid test failed (the same call with the uid passes below)
        kube.remove_scheduling_gate("vap-gate", "gated", uid, QUORUM_GATE, 1)
        assert cp.request("GET", path)["spec"]["schedulingGates"] == [{"name": "example.com/quota"}]
    finally:
        kube.close()

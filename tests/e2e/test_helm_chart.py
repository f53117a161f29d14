"""charts/gang-extender on a real local control plane (kube-apiserver, kube-controller-manager 1.35).

- ``helm template`` of every overlay's values passes ``kubectl apply --dry-run=server --validate=strict``
  with no warning, and the chart's pod passes the ``restricted`` Pod Security Standard.
- ``helm install`` as docs/deploy.md gives it, then the installed configuration runs: kube-scheduler
  with the installed ConfigMap and the ServiceAccount gang-scheduler, gang-extender with the installed
  sidecar's flags and the token its container mounts (the Secret the token controller filled); a gang
  of 4 is bound whole. No kubelet runs, so no image is pulled: the processes are started here, as
  tests/e2e/test_manifests.py does for the kustomize topologies.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import helmchart as hc
import pytest
import yaml
from controlplane import ControlPlane, tail, wait_for
from identities import EXTENDER_USER, MANIFESTS, NAMESPACE, TOKEN_SECRET, whoami
from identities import _from_secret_mount as secret_mount_kubeconfig
from support import (
    Extender,
    Sampler,
    bound,
    events,
    https_ok,
    metrics_here,
    metrics_only,
    spawn_scheduler_as_pod,
    stop_process_group,
)

pytestmark = pytest.mark.e2e

WAIT = 60.0
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"}


@pytest.fixture(scope="module")
def plane(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with the PodGroup CRD (the example gang uses it); nothing of gang-extender yet."""
    control_plane.kubectl("apply", "-k", str(MANIFESTS / "crds"))
    wait_for(lambda: "podgroups" in control_plane.kubectl("api-resources", "--api-group=scheduling.x-k8s.io").stdout,
             timeout=30, what="the PodGroup CRD to be served")
    return control_plane


@pytest.mark.parametrize("overlay", sorted(hc.OVERLAYS))
def test_rendered_chart_passes_server_dry_run(plane: ControlPlane, helm_bin: Path, overlay: str) -> None:
    if "namespace/" + NAMESPACE not in plane.kubectl("get", "namespaces", "-o", "name").stdout:
        plane.create_namespace(NAMESPACE, labels=RESTRICTED)
    manifest = hc.template(helm_bin, [hc.OVERLAYS[overlay]]).stdout
    proc = plane.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=manifest, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines and all(line.endswith("(server dry run)") for line in lines), proc.stdout
    assert len(lines) == len([d for d in yaml.safe_load_all(manifest) if d])
    assert "warning" not in proc.stderr.lower(), proc.stderr
    # Pod Security is enforced when the Deployment's pod is created, not on the Deployment.
    spec = hc.pod_spec(yaml.safe_load_all(manifest))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "chart-pod-security", "namespace": NAMESPACE},
           "spec": {**spec, "serviceAccountName": "default"}}
    proc = plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert proc.returncode == 0 and "warning" not in proc.stderr.lower(), proc.stderr
    loose = copy.deepcopy(pod)  # the check has teeth
    loose["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    proc = plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(loose), check=False)
    assert proc.returncode != 0 and 'violates PodSecurity "restricted' in proc.stderr, proc.stderr


def _installed(plane: ControlPlane, helm_bin: Path) -> list[dict[str, Any]]:
    """``helm install`` as docs/deploy.md says, then the objects the release holds, read back from the
    API server (``helm get manifest`` names them)."""
    hc.helm(helm_bin, "install", hc.RELEASE, str(hc.CHART), "-n", NAMESPACE, "--create-namespace",
            "--set", "gang.timeoutSeconds=12", kubeconfig=plane.kubeconfig)
    plane.kubectl("label", "namespace", NAMESPACE, "--overwrite", *(f"{k}={v}" for k, v in RESTRICTED.items()))
    manifest = hc.helm(helm_bin, "get", "manifest", hc.RELEASE, "-n", NAMESPACE, kubeconfig=plane.kubeconfig).stdout
    live = []
    for doc in (d for d in yaml.safe_load_all(manifest) if d):
        meta = doc["metadata"]
        where = ["-n", meta["namespace"]] if meta.get("namespace") else []
        live.append(json.loads(plane.kubectl("get", doc["kind"], meta["name"], *where, "-o", "json").stdout))
    return live


def test_helm_install_schedules_a_gang(plane: ControlPlane, helm_bin: Path, tmp_path: Path) -> None:
    live = _installed(plane, helm_bin)
    assert {o["kind"] for o in live} >= {"Deployment", "ConfigMap", "ValidatingAdmissionPolicy", "ClusterRole"}

    def filled() -> bool:
        data = plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{TOKEN_SECRET}").get("data") or {}
        return {"token", "ca.crt", "namespace"} <= set(data)

    wait_for(filled, timeout=30, what=f"the token controller to fill {NAMESPACE}/{TOKEN_SECRET}")
    pod = hc.pod_spec(live)
    (sidecar,) = pod["initContainers"]
    extender = secret_mount_kubeconfig(plane, pod, sidecar, tmp_path)  # the token the chart mounts
    scheduler = plane.service_account_kubeconfig(NAMESPACE, pod["serviceAccountName"])
    assert whoami(plane, extender) == EXTENDER_USER

    shipped = [a for a in sidecar["args"] if not a.startswith(("--host=", "--port=", "--threads=", "--release-"))]
    assert "--gang-timeout-seconds=12" in shipped
    shipped, metrics_port = metrics_here(shipped)
    ext = Extender(extender, tmp_path, log=print, args=shipped)  # its own --release-journal, in tmp_path
    ext.start()
    config = hc.scheduler_configuration(live)
    config["clientConnection"] = {"kubeconfig": scheduler}
    config["extenders"][0]["urlPrefix"] = ext.url
    proc, port, log_path = spawn_scheduler_as_pod(plane, config, scheduler, tmp_path)
    try:
        wait_for(lambda: https_ok(port, "/readyz"), timeout=WAIT, what="gang-scheduler /readyz")
        plane.create_namespace("helm-gang")
        plane.add_nodes(2, prefix="helm-gang-")
        with Sampler(plane, "helm-gang") as sampler:
            plane.kubectl("apply", "-n", "helm-gang", "-f", str(MANIFESTS / "examples" / "podgroup-job.yaml"))
            wait_for(lambda: len(bound(plane, "helm-gang", "training-pg-")) == 4, timeout=WAIT,
                     what="the gang of 4 bound")
        assert sampler.partial("training-pg-", 4) == []
        scheduled = events(plane, "helm-gang", "Scheduled")
        assert scheduled and all(
            (e.get("reportingComponent") or e["source"].get("component")) == "gang-scheduler" for e in scheduled)
        assert "forbidden" not in log_path.read_text().lower(), tail(log_path)
        metrics = ext.metrics()
        assert metrics.get('gang_extender_events_total{outcome="failed"}', 0) == 0, metrics
        assert " 403" not in ext.log_path.read_text(), tail(ext.log_path)
        assert 'verb="bind"' in metrics_only(metrics_port)  # what Prometheus scrapes; no verb there
    finally:
        stop_process_group(proc)
        ext.stop()
    hc.helm(helm_bin, "uninstall", hc.RELEASE, "-n", NAMESPACE, kubeconfig=plane.kubeconfig)
    left = plane.kubectl("get", "clusterroles,clusterrolebindings,validatingadmissionpolicies", "-o", "name").stdout
    assert "gang-extender" not in left, left

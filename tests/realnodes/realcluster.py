"""Helpers of the real-node tier's tests: the images, the cluster, the chart installed with helm, gangs of
pods whose containers run, and a sampler that fails on a partly bound gang.

Owns: what a test on real nodes asks of the cluster (objects as dicts, kubectl as admin, waits on
conditions). Must not: start or stop anything (``conftest.py`` and ``hack/real-nodes/realnodes.py`` do).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helmchart
import yaml
from controlplane import ControlPlane, wait_for
from realnodes import PAUSE_IMAGE, RealNodes

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.35.4"  # the scheduler image's version: the control plane's (hack/build-k8s.sh's default)
NAMESPACE = "gang-scheduler"
RELEASE = "gang-extender"
SCHEDULER_NAME = "gang-scheduler"
#: A gang whose last members land within this of the first is "bound whole" (the binds of one released
#: quorum land within milliseconds of each other; the sampler polls every 0.2 s).
PARTIAL_GRACE = 3.0
#: A worker: says where it runs, then waits for SIGTERM (a real process in a real container).
WORKER = ("import os, signal, sys, time; "
          "print('worker', os.environ['POD'], 'on', os.environ['NODE'], flush=True); "
          "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); "
          "time.sleep(86400)")


@dataclass(frozen=True)
class Images:
    extender: str = "gang-extender:dev"
    scheduler: str = f"localhost/kube-scheduler:v{K8S_VERSION}"

    @property
    def all(self) -> list[str]:
        return [self.extender, self.scheduler]


@dataclass
class RealCluster:
    plane: ControlPlane
    nodes: RealNodes
    images: Images = field(default_factory=Images)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl(*args, input=input, check=check)

    def apply(self, objects: Sequence[Mapping[str, Any]]) -> None:
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([dict(o) for o in objects]))

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return list(self.get("pods", "-n", namespace, "-l", selector)["items"])

    def events(self, namespace: str, reason: str) -> list[dict[str, Any]]:
        return list(self.get("events", "-n", namespace, "--field-selector", f"reason={reason}")["items"])

    def lease_holder(self, name: str, namespace: str = NAMESPACE) -> str:
        status, body = self.plane.api.request_raw(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
        if status != 200:
            return ""
        return str((json.loads(body).get("spec") or {}).get("holderIdentity") or "")

    def create_namespace(self, name: str) -> None:
        self.plane.create_namespace(name)

    # ---- the chart -----------------------------------------------------------------------------------
    def helm_install(self, helm_bin: Path, sets: Sequence[str] = (), values: Sequence[Path] = ()
                     ) -> subprocess.CompletedProcess[str]:
        """``helm install`` of charts/gang-extender as shipped, pointed at the images built here, with
        ``values`` files and ``sets`` (``--set``) as a user gives them."""
        args = ["install", RELEASE, str(helmchart.CHART), "--namespace", NAMESPACE, "--create-namespace",
                "--set", f"image.repository={self.images.extender.rsplit(':', 1)[0]}",
                "--set", f"image.tag={self.images.extender.rsplit(':', 1)[1]}",
                "--set", f"scheduler.image.repository={self.images.scheduler.rsplit(':', 1)[0]}",
                "--set", f"scheduler.image.tag={self.images.scheduler.rsplit(':', 1)[1]}"]
        for path in values:
            args += ["--values", str(path)]
        for pair in sets:
            args += ["--set", pair]
        return helmchart.helm(helm_bin, *args, kubeconfig=self.plane.kubeconfig)

    def helm_uninstall(self, helm_bin: Path, timeout: float = 120.0) -> None:
        """``helm uninstall`` of the release; returns once its pods are gone (a terminating replica still
        counts in kube-scheduler's pod affinity: the next release's pods would wait for it)."""
        helmchart.helm(helm_bin, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait",
                       kubeconfig=self.plane.kubeconfig)
        wait_for(lambda: not self.pods(NAMESPACE, "app.kubernetes.io/name=gang-scheduler"), timeout=timeout,
                 interval=0.5, what=f"the pods of release {RELEASE} gone")

    def wait_rollout(self, replicas: int, timeout: float = 240.0) -> list[dict[str, Any]]:
        """Wait until the gang-scheduler Deployment has ``replicas`` ready pods (both containers ready)."""
        def ready() -> bool:
            deployment = self.get("deployment", "gang-scheduler", "-n", NAMESPACE)
            status = deployment.get("status", {})
            return status.get("readyReplicas", 0) == replicas and status.get("updatedReplicas", 0) == replicas

        try:
            wait_for(ready, timeout=timeout, interval=1.0, what=f"{replicas} ready gang-scheduler replicas")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.diagnostics(NAMESPACE)}") from exc
        return [p for p in self.pods(NAMESPACE, "app.kubernetes.io/name=gang-scheduler")
                if not p["metadata"].get("deletionTimestamp")]

    def diagnostics(self, namespace: str) -> str:
        out = [self.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout,
               self.kubectl("describe", "pods", "-n", namespace, check=False).stdout[-6000:],
               self.kubectl("logs", "-n", namespace, "-l", "app.kubernetes.io/name=gang-scheduler",
                            "--all-containers", "--tail=30", check=False).stdout]
        return "\n".join(out)


def gang_pod(namespace: str, name: str, group: str, min_count: int, *, cpu: str = "100m",
             scheduler: str = SCHEDULER_NAME, image: str = "gang-extender:dev") -> dict[str, Any]:
    """A member of an annotation gang whose container runs :data:`WORKER`."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"gang": group},
                     "annotations": {"gang-extender.io/group": group, "gang-extender.io/min-count": str(min_count)}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "worker", "image": image, "command": ["python", "-c", WORKER],
                "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                "resources": {"requests": {"cpu": cpu, "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
            }],
        },
    }  # fmt: skip


class GangSampler:
    """Samples a gang's pods; fails when some but not all are bound for longer than PARTIAL_GRACE."""

    def __init__(self, cluster: RealCluster, namespace: str, group: str, size: int, *,
                 select: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None) -> None:
        """``select``: which of the group's pods form the gang now (default: all; e.g. only the newest
        generation while a controller replaces them)."""
        self.cluster, self.namespace, self.group, self.size = cluster, namespace, group, size
        self.select = select
        self.partial_since: float | None = None
        self.last: list[dict[str, Any]] = []

    def sample(self) -> list[dict[str, Any]]:
        pods = self.cluster.pods(self.namespace, f"gang={self.group}")
        self.last = self.select(pods) if self.select is not None else pods
        bound = [p for p in self.last if p["spec"].get("nodeName")]
        now = time.monotonic()
        if 0 < len(bound) < self.size:
            self.partial_since = self.partial_since or now
            assert now - self.partial_since < PARTIAL_GRACE, (
                f"gang {self.group}: {len(bound)} of {self.size} bound for {PARTIAL_GRACE}s")
        else:
            self.partial_since = None
        return self.last

    def until(self, condition: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self.sample()):
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n"
                                     + self.cluster.diagnostics(self.namespace))
            time.sleep(0.2)


def all_running(pods: Sequence[Mapping[str, Any]], size: int) -> bool:
    """``size`` pods, each bound with its container running."""
    def running(pod: Mapping[str, Any]) -> bool:
        statuses = pod.get("status", {}).get("containerStatuses") or []
        return bool(statuses) and all("running" in (s.get("state") or {}) for s in statuses)

    return len(pods) == size and all(p["spec"].get("nodeName") and running(p) for p in pods)


def bound_count(pods: Sequence[Mapping[str, Any]]) -> int:
    return sum(1 for p in pods if p["spec"].get("nodeName"))



# ---- what a node enforces: a container's cgroup ---------------------------------------------------------------
CGROUP_FS = Path("/sys/fs/cgroup")
CFS_PERIOD_US = 100_000  # the kubelet's CPU CFS quota period (its default, cpuCFSQuotaPeriod 100ms)
_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def quantity_bytes(quantity: str) -> int:
    """A memory quantity as the chart's values write it ("700Mi", "1Gi", "1048576") in bytes."""
    for suffix, factor in _BINARY_SUFFIXES.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


def quantity_millicpu(quantity: str) -> int:
    """A CPU quantity ("1500m", "2") in millicores."""
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def expected_cgroup(resources: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """What the kubelet writes into a container's cgroup for ``resources`` (requests.cpu, limits.cpu,
    limits.memory), by file relative to the cgroup mount (cgroup v1: under the controller's hierarchy),
    computed as the kubelet does (MilliCPUToShares, MilliCPUToQuota; on v2 the shares converted to a weight)."""
    memory = quantity_bytes(resources["limits"]["memory"])
    quota = quantity_millicpu(resources["limits"]["cpu"]) * CFS_PERIOD_US // 1000
    shares = quantity_millicpu(resources["requests"]["cpu"]) * 1024 // 1000
    if (CGROUP_FS / "cgroup.controllers").exists():  # cgroup v2
        return {"memory.max": str(memory), "cpu.max": f"{quota} {CFS_PERIOD_US}",
                "cpu.weight": str(1 + ((shares - 2) * 9999) // 262142)}
    return {"memory/memory.limit_in_bytes": str(memory), "cpu/cpu.cfs_quota_us": str(quota),
            "cpu/cpu.cfs_period_us": str(CFS_PERIOD_US), "cpu/cpu.shares": str(shares)}


def host_cgroup(nodes: RealNodes, pod: Mapping[str, Any], container: str, files: Sequence[str]) -> dict[str, str]:
    """``files`` (keys of :func:`expected_cgroup`) of the cgroup the node's kubelet made for ``container`` of
    ``pod``, read on this machine: ``<cgroupRoot>/kubepods/<QoS class>/pod<uid>/<container id>`` (the kubelets
    use the cgroupfs driver under their own cgroup roots)."""
    statuses = pod["status"].get("initContainerStatuses", []) + pod["status"].get("containerStatuses", [])
    container_id = next(s["containerID"] for s in statuses if s["name"] == container).split("://", 1)[1]
    node = next(n for n in nodes.nodes if n.name == pod["spec"]["nodeName"])
    out: dict[str, str] = {}
    for name in files:
        controller, _, file = name.rpartition("/")
        kubepods = CGROUP_FS / controller / node.cgroup_root.lstrip("/") / "kubepods"
        found = list(kubepods.glob(f"**/pod{pod['metadata']['uid']}/{container_id}"))
        assert len(found) == 1, f"the cgroup of {pod['metadata']['name']}/{container} under {kubepods}: {found}"
        out[name] = (found[0] / file).read_text().strip()
    return out


# ---- the default-scheduler topology (manifests/default-scheduler) ------------------------------------------
#: The static extender's port on the real nodes: not the shipped 8888 (the host's network namespace is the
#: machine's, shared with everything else on it); its Lease, as shipped: the topology's own, not the chart's
#: ``gang-extender`` (two topologies in one cluster must elect apart).
DEFAULT_EXTENDER_PORT = 17288
DEFAULT_EXTENDER_LEASE = "gang-extender-default-scheduler"
DEFAULT_SCHEDULER_DIR = ROOT / "manifests" / "default-scheduler"
#: Images the examples and tests/e2e/test_external_cluster.py name, which cannot be pulled here: tagged in
#: every node's containerd from images that are there (gang-extender:dev has ``sh`` and ``sleep``).
EXTERNAL_IMAGE_ALIASES = {
    "registry.k8s.io/e2e-test-images/busybox:1.36.1-1": "gang-extender:dev",
    "registry.k8s.io/pause:3.10": PAUSE_IMAGE,
}


def static_extender_pod(kubeconfig: Path) -> dict[str, Any]:
    """manifests/default-scheduler/gang-extender-static-pod.yaml, with its kubeconfig at ``kubeconfig`` and
    :data:`DEFAULT_EXTENDER_PORT` (nothing else changes: its Lease, :data:`DEFAULT_EXTENDER_LEASE`, is the
    manifest's own, apart from the chart's ``gang-extender``)."""
    pod = yaml.safe_load((DEFAULT_SCHEDULER_DIR / "gang-extender-static-pod.yaml").read_text())
    container = pod["spec"]["containers"][0]
    assert "--port=8888" in container["args"], container["args"]
    container["args"] = [f"--port={DEFAULT_EXTENDER_PORT}" if a == "--port=8888" else a for a in container["args"]]
    assert f"--lease-name={DEFAULT_EXTENDER_LEASE}" in container["args"], container["args"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == 8888
        container[probe]["httpGet"]["port"] = DEFAULT_EXTENDER_PORT
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "kubeconfig")
    volume["hostPath"]["path"] = str(kubeconfig)
    return dict(pod)


def deploy_default_scheduler(cluster: RealCluster) -> None:
    """The default-scheduler topology of docs/deploy.md on the real nodes, after the chart (whose ServiceAccount
    gang-scheduler/gang-extender and token Secret it uses, as manifests/default-scheduler's ../rbac would
    create them): extender-kubeconfig.sh writes the static pod's kubeconfig, the static pod runs on the first
    node (host network), a Role lets it hold its own Lease, and the control plane's kube-scheduler restarts
    with manifests/default-scheduler/kube-scheduler-config.yaml."""
    node = cluster.nodes.nodes[0]
    kubeconfig = node.dir / "gang-extender.conf"
    script = subprocess.run(
        ["sh", str(DEFAULT_SCHEDULER_DIR / "extender-kubeconfig.sh"), cluster.plane.server, str(kubeconfig)],
        env={**os.environ, "KUBECTL": str(cluster.plane.bin_dir / "kubectl"), "KUBECONFIG": cluster.plane.kubeconfig},
        capture_output=True, text=True, timeout=60, check=False)
    assert script.returncode == 0, script.stderr
    # The topology's own Lease Role, as shipped (the rest of ../rbac is the chart's, already installed).
    cluster.kubectl("apply", "-f", str(DEFAULT_SCHEDULER_DIR / "role-lease.yaml"))
    (node.static_pod_dir / "gang-extender.yaml").write_text(yaml.safe_dump(static_extender_pod(kubeconfig)))
    mirror = f"gang-extender-{node.name}"

    def ready() -> bool:
        proc = cluster.kubectl("get", "pod", "-n", "kube-system", mirror, "-o", "json", check=False)
        if proc.returncode != 0:
            return False
        statuses = json.loads(proc.stdout).get("status", {}).get("containerStatuses") or []
        return bool(statuses) and all(s.get("ready") for s in statuses)

    try:
        wait_for(ready, timeout=120, interval=0.5, what=f"the static pod kube-system/{mirror} ready")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{cluster.diagnostics('kube-system')}") from exc
    config = yaml.safe_load((DEFAULT_SCHEDULER_DIR / "kube-scheduler-config.yaml").read_text())
    assert config["extenders"][0]["urlPrefix"] == "http://127.0.0.1:8888"
    config["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{DEFAULT_EXTENDER_PORT}"
    cluster.plane.stop_scheduler()
    cluster.plane.start_scheduler(config)


def remove_default_scheduler(cluster: RealCluster) -> None:
    """Undo :func:`deploy_default_scheduler`: the control plane's kube-scheduler without the extender again,
    the static pod, its kubeconfig and its Lease's Role gone (the static pod uses the chart's ServiceAccount
    token, which a ``helm uninstall`` of the chart revokes)."""
    cluster.plane.stop_scheduler()
    cluster.plane.start_scheduler()
    node = cluster.nodes.nodes[0]
    (node.static_pod_dir / "gang-extender.yaml").unlink(missing_ok=True)
    mirror = f"gang-extender-{node.name}"
    wait_for(lambda: cluster.kubectl("get", "pod", "-n", "kube-system", mirror, check=False).returncode != 0,
             timeout=60, interval=0.5, what=f"the static pod kube-system/{mirror} gone")
    (node.dir / "gang-extender.conf").unlink(missing_ok=True)
    cluster.kubectl("delete", "-n", NAMESPACE, "rolebinding,role", "gang-extender:default-scheduler-lease",
                    "--ignore-not-found")


# ---- job controllers (tests/realnodes/test_jobset.py, test_training_operator.py) ---------------------------
def deploy_controller(cluster: RealCluster, manifests: Path, image: str, namespace: str, deployment: str,
                      probe: Mapping[str, Any]) -> None:
    """Apply a job controller's rendered manifests (server-side: its CRDs are large), with its image imported
    into the nodes; wait until its Deployment is ready and its webhooks accept ``probe`` (a server-side dry
    run): they answer once the controller has written its certificate and the CA into their configurations."""
    cluster.nodes.import_images([image])
    cluster.kubectl("apply", "--server-side", "-f", str(manifests))

    def ready() -> bool:
        status = cluster.get("deployment", deployment, "-n", namespace).get("status", {})
        return bool(status.get("readyReplicas"))

    def accepted() -> bool:
        return cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(dict(probe)),
                               check=False).returncode == 0

    try:
        wait_for(ready, timeout=240, interval=1.0, what=f"{namespace}/{deployment} ready")
        wait_for(accepted, timeout=120, interval=1.0, what=f"{namespace}/{deployment}'s webhooks to accept a job")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{cluster.diagnostics(namespace)}") from exc


def worker_container(name: str, script: str = WORKER, cpu: str = "100m") -> dict[str, Any]:
    """A container of gang-extender's image running ``script`` (:data:`WORKER`: says where it runs, waits)."""
    return {
        "name": name, "image": "gang-extender:dev", "command": ["python", "-c", script],
        "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"requests": {"cpu": cpu, "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
    }  # fmt: skip

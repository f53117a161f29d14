"""gang-extender on a cluster you already run (e.g. the kind cluster of hack/kind-e2e.sh), not a local one.

Skipped unless ``GANG_E2E_KUBECONFIG`` names a kubeconfig. The cluster runs gang-extender as
docs/deploy.md describes: the default-scheduler topology (with the 1.35 Workload API) for the Workload
tests, the second scheduler ``gang-scheduler`` for the PodGroup test; a test whose part is missing skips.
kubectl comes from PATH or ``GANG_E2E_KUBECTL``. Each test works in a namespace of its own, deleted after.
Only bindings (``spec.nodeName``) are checked, so image pulls and node sizes do not matter.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "examples"
KUBECONFIG = os.environ.get("GANG_E2E_KUBECONFIG", "")
KUBECTL = os.environ.get("GANG_E2E_KUBECTL", "kubectl")
WAIT = 180.0       # a gang that timed out backs off (10 s, doubling) before it is retried
PARTIAL_GRACE = 3.0  # the binds of a released quorum land within milliseconds of each other
PAUSE = "registry.k8s.io/pause:3.10"

if not KUBECONFIG:
    pytest.skip("GANG_E2E_KUBECONFIG is not set (no external cluster to test)", allow_module_level=True)


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([KUBECTL, f"--kubeconfig={KUBECONFIG}", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


def bound(namespace: str, prefix: str) -> dict[str, str]:
    pods = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods
            if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")}


class Watch:
    """Polls a gang's bindings; fails on a partial gang lasting longer than PARTIAL_GRACE."""

    def __init__(self, namespace: str, prefix: str, size: int) -> None:
        self.namespace, self.prefix, self.size = namespace, prefix, size
        self.partial_since: float | None = None

    def sample(self) -> int:
        count = len(bound(self.namespace, self.prefix))
        now = time.monotonic()
        if 0 < count < self.size:
            self.partial_since = self.partial_since or now
            assert now - self.partial_since < PARTIAL_GRACE, f"{count} of {self.size} {self.prefix}* bound"
        else:
            self.partial_since = None
        return count

    def until(self, condition: Callable[[int], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self.sample()):
            assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
            time.sleep(0.5)

    def stays_unbound(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.sample() == 0, f"a member of {self.prefix}* was bound before its gang reached quorum"
            time.sleep(0.5)


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"gang-e2e-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    deadline = time.monotonic() + 30
    while kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode != 0:
        assert time.monotonic() < deadline, "no default ServiceAccount"
        time.sleep(0.5)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def _serves(group: str, resource: str) -> bool:
    out = kubectl("api-resources", f"--api-group={group}", "-o", "name", check=False).stdout.split()
    return f"{resource}.{group}" in out


def _require_workload_api() -> None:
    if not _serves("scheduling.k8s.io", "workloads"):
        pytest.skip("the cluster does not serve scheduling.k8s.io/v1alpha1 workloads")


def _pod(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def test_workload_example_binds_whole(namespace: str) -> None:
    _require_workload_api()
    watch = Watch(namespace, "training-", 4)
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "workload-job.yaml"))
    watch.until(lambda n: n == 4, WAIT, "the 4 workers of the Workload example to be bound")


def test_workload_gang_waits_for_its_last_member(namespace: str) -> None:
    _require_workload_api()
    workload = {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
                "metadata": {"name": "quorum", "namespace": namespace},
                "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 4}}}]}}
    spec = {"workloadRef": {"name": "quorum", "podGroup": "workers"}, "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": PAUSE, "resources": {"requests": {"cpu": "10m"}}}]}
    members = [_pod(namespace, f"member-{i}", spec) for i in range(4)]
    first_three = {"apiVersion": "v1", "kind": "List", "items": [workload, *members[:3]]}
    kubectl("apply", "-f", "-", stdin=json.dumps(first_three))
    watch = Watch(namespace, "member-", 4)
    watch.stays_unbound(15)
    kubectl("apply", "-f", "-", stdin=json.dumps(members[3]))
    watch.until(lambda n: n == 4, WAIT, "all 4 members bound once the fourth exists")


def test_podgroup_example_on_the_second_scheduler(namespace: str) -> None:
    lease = kubectl("get", "lease", "gang-scheduler", "-n", "gang-scheduler", "-o", "json", check=False)
    if lease.returncode != 0 or not _serves("scheduling.x-k8s.io", "podgroups"):
        pytest.skip("manifests/second-scheduler (and manifests/crds) are not deployed")
    assert json.loads(lease.stdout)["spec"].get("holderIdentity"), "no gang-scheduler holds its leader Lease"
    watch = Watch(namespace, "training-pg-", 4)
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "podgroup-job.yaml"))
    watch.until(lambda n: n == 4, WAIT, "the 4 workers of the PodGroup example to be bound")
    events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    scheduled = [e for e in events if e.get("reason") == "Scheduled"]
    assert scheduled and all((e.get("reportingComponent") or e["source"].get("component")) == "gang-scheduler"
                             for e in scheduled), scheduled

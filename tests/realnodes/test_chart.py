"""The chart, installed with ``helm install`` into a cluster of real kubelets, from the images built here.

charts/gang-extender as shipped (kube-scheduler "gang-scheduler" with gang-extender as its native
sidecar, exec and HTTPS probes, the metrics listener, RBAC, admission policies), with 2 replicas: the
required anti-affinity puts one on each node, kube-scheduler and the extender each elect a leader on
their own Lease (the extender competes once its kube-scheduler calls it: the leading kube-scheduler's
sidecar leads), and both reach the API server through the ``kubernetes`` Service (kube-proxy). Then
gangs of pods whose containers really run (``python`` in gang-extender's image) are scheduled whole
by the leading pair; the leading replica is killed and the other takes over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from controlplane import wait_for
from realcluster import (
    EXTERNAL_IMAGE_ALIASES,
    NAMESPACE,
    GangSampler,
    RealCluster,
    all_running,
    bound_count,
    deploy_default_scheduler,
    gang_pod,
)

pytestmark = [pytest.mark.e2e, pytest.mark.realnodes]

ROOT = Path(__file__).resolve().parents[2]
KUBECTL_GANG = str(Path(sys.executable).with_name("kubectl-gang"))


def leaders(cluster: RealCluster) -> tuple[str, str]:
    """(kube-scheduler's Lease holder, the extender's), each as the pod name its identity starts with."""
    return (cluster.lease_holder("gang-scheduler").split("_")[0], cluster.lease_holder("gang-extender").split("_")[0])


def test_two_replicas_one_per_node_one_scheduler_leading(chart: RealCluster) -> None:
    pods = chart.wait_rollout(2)
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(chart.nodes.names)
    for pod in pods:
        spec = pod["spec"]
        assert spec["securityContext"]["runAsUser"] == 65532
        assert [c["name"] for c in spec["initContainers"]] == ["gang-extender"]
        assert spec["initContainers"][0]["restartPolicy"] == "Always"  # the native sidecar
        assert spec["initContainers"][0]["image"] == chart.images.extender
        assert spec["containers"][0]["image"] == chart.images.scheduler
        statuses = pod["status"]["initContainerStatuses"] + pod["status"]["containerStatuses"]
        assert all(s["ready"] and "running" in s["state"] for s in statuses), statuses
    names = {p["metadata"]["name"] for p in pods}
    wait_for(lambda: leaders(chart)[0] in names, timeout=60, what="kube-scheduler's Lease held by a gang-scheduler pod")


def test_metrics_listener_on_the_pod_ip(chart: RealCluster) -> None:
    for pod in chart.wait_rollout(2):
        url = f"http://{pod['status']['podIP']}:9090/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = resp.read().decode()
        assert "gang_extender_" in body, f"{url} has no gang_extender_ metric"


def _run_gang(chart: RealCluster, namespace: str, group: str, size: int) -> list[dict[str, object]]:
    """Create a gang of ``size`` with one member held back until the gang is seen waiting; return its
    pods once all are bound whole and running."""
    chart.create_namespace(namespace)
    members = [gang_pod(namespace, f"{group}-{i}", group, size) for i in range(size)]
    sampler = GangSampler(chart, namespace, group, size)
    chart.apply(members[:-1])
    wait_for(lambda: bool(chart.events(namespace, "GangWaiting")), timeout=120, interval=0.5,
             what=f"a GangWaiting Event for {namespace}/{group}")
    assert bound_count(sampler.sample()) == 0, f"a member of {group} was bound before its gang was complete"
    chart.apply(members[-1:])
    sampler.until(lambda pods: all_running(pods, size), timeout=180, what=f"gang {group} bound and running")
    return sampler.last


def test_gang_of_running_pods_scheduled_whole(chart: RealCluster) -> None:
    pods = _run_gang(chart, "ml", "train", 4)
    scheduler_leader, extender_leader = leaders(chart)
    assert extender_leader == scheduler_leader, "the leading kube-scheduler's own extender leads"
    assert {p["spec"]["nodeName"] for p in pods} <= set(chart.nodes.names)
    for pod in pods:
        name = pod["metadata"]["name"]
        logs = chart.kubectl("logs", "-n", "ml", name).stdout
        assert f"worker {name} on {pod['spec']['nodeName']}" in logs, logs

    listing = subprocess.run([KUBECTL_GANG, f"--kubeconfig={chart.plane.kubeconfig}", "list", "-n", "ml"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    row = next(line.split() for line in listing.splitlines() if line.startswith("train "))
    assert row[1:5] == ["annotations", "4", "4", "4"] and row[5] == "Bound", listing
    explained = subprocess.run([KUBECTL_GANG, f"--kubeconfig={chart.plane.kubeconfig}", "explain", "ml/train"],
                               capture_output=True, text=True, timeout=60, check=True).stdout
    assert "ml/train" in explained, explained


def test_leading_replica_killed_the_other_takes_over(chart: RealCluster) -> None:
    pods = chart.wait_rollout(2)
    names = {p["metadata"]["name"] for p in pods}
    _run_gang(chart, "before", "before", 2)  # so that both Leases are held, by one pod
    victim, extender_leader = leaders(chart)
    assert victim == extender_leader and victim in names
    survivor = (names - {victim}).pop()
    chart.kubectl("delete", "pod", "-n", NAMESPACE, victim, "--grace-period=0", "--force")
    wait_for(lambda: leaders(chart)[0] == survivor, timeout=120, interval=0.5,
             what=f"{survivor} to take kube-scheduler's Lease over from {victim}")
    _run_gang(chart, "eval", "eval", 2)
    # The Deployment replaces the killed replica; the new one joins as a follower.
    chart.wait_rollout(2)
    assert leaders(chart) == (survivor, survivor)
    status = json.loads(chart.kubectl("get", "deployment", "gang-scheduler", "-n", NAMESPACE, "-o", "json").stdout)
    assert status["status"]["readyReplicas"] == 2


def test_external_cluster_suite_on_the_real_nodes(chart: RealCluster) -> None:
    """tests/e2e/test_external_cluster.py against this cluster, none of it skipped: the chart is the
    second-scheduler topology; the default-scheduler topology (manifests/default-scheduler: the static pod,
    its kubeconfig script, the scheduler configuration) is added beside it. The examples' images, which
    cannot be pulled here, are tags of images the nodes have."""
    chart.nodes.tag_images(EXTERNAL_IMAGE_ALIASES)
    deploy_default_scheduler(chart)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         str(ROOT / "tests" / "e2e" / "test_external_cluster.py")],
        env={**os.environ, "GANG_E2E_KUBECONFIG": chart.plane.kubeconfig,
             "GANG_E2E_KUBECTL": str(chart.plane.bin_dir / "kubectl")},
        cwd=ROOT, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, check=False)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    sys.stderr.write(f"tests/e2e/test_external_cluster.py: {summary}\n")
    assert proc.returncode == 0 and "skipped" not in summary and "3 passed" in summary, proc.stdout[-6000:]

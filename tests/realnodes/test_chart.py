"""The chart, installed with ``helm install`` into a cluster of real kubelets, from the images built here.

charts/gang-extender as shipped (kube-scheduler "gang-scheduler" with gang-extender as its native
sidecar, exec and HTTPS probes, the metrics listener, RBAC, admission policies), with 2 replicas: the
required anti-affinity puts one on each node, kube-scheduler and the extender each elect a leader on
their own Lease (the extender competes once its kube-scheduler calls it: the leading kube-scheduler's
sidecar leads), and both reach the API server through the ``kubernetes`` Service (kube-proxy). Then
gangs of pods whose containers really run (``python`` in gang-extender's image) are scheduled whole
by the leading pair; the leading replica is killed and the other takes over. Last, the release is
installed again as a user changes it with a values file (1 replica, schedulerName ml-gang-scheduler,
gang.bindMode filter-gated, TLS with client certificates, other resources): the containers run with those
resources (pod spec and cgroups), a gang naming that scheduler runs whole through the HTTPS extender and is
bound by kube-scheduler's own binder, and the extender's port refuses requests without the certificate.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane import CertPair, Pki, wait_for
from realcluster import (
    EXTERNAL_IMAGE_ALIASES,
    NAMESPACE,
    SCHEDULER_NAME,
    GangSampler,
    RealCluster,
    all_running,
    bound_count,
    deploy_default_scheduler,
    expected_cgroup,
    gang_pod,
    host_cgroup,
    quantity_bytes,
    quantity_millicpu,
    remove_default_scheduler,
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


def _run_gang(chart: RealCluster, namespace: str, group: str, size: int, *, scheduler: str = SCHEDULER_NAME,
              new_namespace: bool = True) -> list[dict[str, Any]]:
    """Create a gang of ``size`` with one member held back until the gang is seen waiting; return its
    pods once all are bound whole and running."""
    if new_namespace:
        chart.create_namespace(namespace)
    members = [gang_pod(namespace, f"{group}-{i}", group, size, scheduler=scheduler) for i in range(size)]
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
    victim_node = next(p["spec"]["nodeName"] for p in pods if p["metadata"]["name"] == victim)
    # The Deployment replaces the killed replica at once; on the victim's node (the anti-affinity allows no
    # other) it could start before the Lease expires and win it, and the takeover shown would be the
    # newcomer's. Cordoned, the node keeps its running pods but takes no new one until the survivor leads.
    chart.kubectl("cordon", victim_node)
    try:
        chart.kubectl("delete", "pod", "-n", NAMESPACE, victim, "--grace-period=0", "--force")
        wait_for(lambda: leaders(chart)[0] == survivor, timeout=120, interval=0.5,
                 what=f"{survivor} to take kube-scheduler's Lease over from {victim}")
        _run_gang(chart, "eval", "eval", 2)
    finally:
        chart.kubectl("uncordon", victim_node)
    # The replacement replica starts on the uncordoned node and joins as a follower.
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
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
             str(ROOT / "tests" / "e2e" / "test_external_cluster.py")],
            env={**os.environ, "GANG_E2E_KUBECONFIG": chart.plane.kubeconfig,
                 "GANG_E2E_KUBECTL": str(chart.plane.bin_dir / "kubectl")},
            cwd=ROOT, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, check=False)
    finally:
        remove_default_scheduler(chart)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    sys.stderr.write(f"tests/e2e/test_external_cluster.py: {summary}\n")
    assert proc.returncode == 0 and "skipped" not in summary and "3 passed" in summary, proc.stdout[-6000:]


# ---- the chart's other values: the release installed again with a values file -----------------------------
#: The values a user changes, in one release (replicas 1; metrics stay on): a scheduler name of its own,
#: the filter-gated bind mode, HTTPS with client certificates, and resources other than the defaults (each
#: container's differ from the other's, so that a swap shows).
CUSTOM_SCHEDULER = "ml-gang-scheduler"
EXTENDER_RESOURCES = {"requests": {"cpu": "300m", "memory": "200Mi"}, "limits": {"cpu": "1500m", "memory": "700Mi"}}
SCHEDULER_RESOURCES = {"requests": {"cpu": "150m", "memory": "96Mi"}, "limits": {"cpu": "1", "memory": "384Mi"}}
CUSTOM_VALUES = {
    "replicas": 1,
    "schedulerName": CUSTOM_SCHEDULER,
    "gang": {"bindMode": "filter-gated"},
    "tls": {"enabled": True, "secretName": "gang-extender-tls", "requireClientCertificate": True},
    "extender": {"resources": EXTENDER_RESOURCES},
    "scheduler": {"resources": SCHEDULER_RESOURCES},
}
TLS_DIR = "/etc/gang-extender/tls"
#: Run in the extender container (kubectl exec): four requests to its verbs' port, 127.0.0.1:8888. Reads the
#: client certificate and key of another CA from stdin (JSON); prints what each request got (JSON).
TLS_ATTEMPTS = f"""
import json, ssl, sys, urllib.error, urllib.request
other = json.load(sys.stdin)
for name in ("crt", "key"):
    with open("/tmp/other-ca-client." + name, "w") as f:
        f.write(other[name])
d = "{TLS_DIR}/"
def context(cert=None):
    c = ssl.create_default_context(cafile=d + "ca.crt")
    if cert:
        c.load_cert_chain(cert + ".crt", cert + ".key")
    return c
attempts = {{
    "plain HTTP": ("http://127.0.0.1:8888/healthz", None),
    "HTTPS without a client certificate": ("https://127.0.0.1:8888/healthz", context()),
    "HTTPS with another CA's client certificate": ("https://127.0.0.1:8888/healthz", context("/tmp/other-ca-client")),
    "HTTPS with the Secret's client certificate": ("https://127.0.0.1:8888/healthz", context(d + "client")),
}}
out = {{}}
for name, (url, ctx) in attempts.items():
    try:
        with urllib.request.urlopen(url, timeout=10, context=ctx) as resp:
            out[name] = "HTTP %d" % resp.status
    except Exception as exc:
        cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        out[name] = "failed: %s: %s" % (type(cause).__name__, cause)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class ValuesRelease:
    cluster: RealCluster
    pod: dict[str, Any]
    other_ca_client: CertPair  # a client certificate the extender must refuse


@pytest.fixture(scope="module")
def values_release(chart: RealCluster, helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> ValuesRelease:
    """After the tests above, the release uninstalled and installed again as a user installs it with other
    values: the TLS Secret created first as docs/deploy.md says (its five files), then ``helm install`` with
    :data:`CUSTOM_VALUES` in a values file; its one pod ready by its own probes (HTTPS with the client
    certificate). Not ``helm upgrade`` from the two replicas: on two nodes the new pod cannot be placed
    while both old ones exist (their required anti-affinity), and kube-scheduler retried it only after its
    5-minute flush of unschedulable pods, once the old one that made room was gone."""
    chart.helm_uninstall(helm_bin)
    work = tmp_path_factory.mktemp("values-release")
    pki = Pki(work / "pki")
    serving = pki.issue("tls", "gang-extender", server_ips=["127.0.0.1"])
    client = pki.issue("client", "kube-scheduler")
    other_ca_client = Pki(work / "other-ca").issue("client", "kube-scheduler")
    chart.kubectl("create", "secret", "generic", "gang-extender-tls", "-n", NAMESPACE,
                  f"--from-file=ca.crt={pki.ca.cert}", f"--from-file=tls.crt={serving.cert}",
                  f"--from-file=tls.key={serving.key}", f"--from-file=client.crt={client.cert}",
                  f"--from-file=client.key={client.key}")
    values = work / "values.yaml"
    values.write_text(yaml.safe_dump(CUSTOM_VALUES))
    chart.helm_install(helm_bin, values=[values])
    [pod] = chart.wait_rollout(1)
    return ValuesRelease(chart, pod, other_ca_client)


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}


def _resources_as_numbers(resources: dict[str, dict[str, str]]) -> dict[str, dict[str, int]]:
    return {kind: {"cpu": quantity_millicpu(values["cpu"]), "memory": quantity_bytes(values["memory"])}
            for kind, values in resources.items()}


def test_values_release_containers_run_with_their_resources(values_release: ValuesRelease) -> None:
    """extender.resources and scheduler.resources: in the pod spec, and enforced by the node's kernel (the
    containers' cgroups read on the host, and the extender's from inside its container)."""
    cluster, pod = values_release.cluster, values_release.pod
    containers = _containers(pod)
    for name, resources in (("gang-extender", EXTENDER_RESOURCES), ("kube-scheduler", SCHEDULER_RESOURCES)):
        assert _resources_as_numbers(containers[name]["resources"]) == _resources_as_numbers(resources), (
            f"{name}: {containers[name]['resources']}")
        expected = expected_cgroup(resources)
        assert host_cgroup(cluster.nodes, pod, name, list(expected)) == expected, f"{name}'s cgroup"
    expected = expected_cgroup(EXTENDER_RESOURCES)
    script = ("import json; print(json.dumps("
              f"{{k: open('/sys/fs/cgroup/' + k).read().strip() for k in {list(expected)!r}}}))")
    inside = cluster.kubectl("exec", "-n", NAMESPACE, pod["metadata"]["name"], "-c", "gang-extender", "--",
                             "python", "-c", script)
    assert json.loads(inside.stdout) == expected


def test_values_release_renders_https_filter_gated_for_its_scheduler_name(values_release: ValuesRelease) -> None:
    """The configuration kube-scheduler runs with (the ConfigMap its pod mounts): the profile and Lease are the
    scheduler name, the extender is dialled over HTTPS with the client certificate, and has no bindVerb
    (kube-scheduler's own binder binds); the extender's flags say the same; kube-scheduler leads on its Lease."""
    cluster, pod = values_release.cluster, values_release.pod
    config_map = next(v["configMap"]["name"] for v in pod["spec"]["volumes"] if v["name"] == "config")
    config = yaml.safe_load(cluster.get("configmap", config_map, "-n", NAMESPACE)["data"]["config.yaml"])
    assert [p["schedulerName"] for p in config["profiles"]] == [CUSTOM_SCHEDULER]
    assert config["leaderElection"]["resourceName"] == CUSTOM_SCHEDULER
    [extender] = config["extenders"]
    assert "bindVerb" not in extender, extender
    assert extender["filterVerb"] == "filter" and extender["ignorable"] is False
    assert extender["urlPrefix"] == "https://127.0.0.1:8888" and extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {"caFile": f"{TLS_DIR}/ca.crt", "certFile": f"{TLS_DIR}/client.crt",
                                     "keyFile": f"{TLS_DIR}/client.key"}
    args = _containers(pod)["gang-extender"]["args"]
    assert {"--bind-mode=filter-gated", f"--scheduler-names={CUSTOM_SCHEDULER}", f"--tls-cert-file={TLS_DIR}/tls.crt",
            f"--tls-key-file={TLS_DIR}/tls.key", f"--tls-client-ca-file={TLS_DIR}/ca.crt"} <= set(args), args
    wait_for(lambda: cluster.lease_holder(CUSTOM_SCHEDULER).split("_")[0] == pod["metadata"]["name"], timeout=60,
             interval=0.5, what=f"kube-scheduler's Lease {CUSTOM_SCHEDULER} held by {pod['metadata']['name']}")


def _extender_requests(cluster: RealCluster, pod: dict[str, Any]) -> dict[str, float]:
    """gang_extender_requests_total by verb (all outcomes), from the metrics listener on the pod IP."""
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:9090/metrics", timeout=5) as resp:
        body = resp.read().decode()
    totals: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith("gang_extender_requests_total{"):
            labels, value = line[len("gang_extender_requests_total{"):].rsplit("} ", 1)
            verb = dict(pair.split("=", 1) for pair in labels.split(","))["verb"].strip('"')
            totals[verb] = totals.get(verb, 0.0) + float(value)
    return totals


def _scheduled_by(cluster: RealCluster, namespace: str) -> dict[str, set[str]]:
    """Pod name -> who reported it Scheduled: the Event's reporting instance, ``<profile>-<host name>`` (a
    scheduler in a pod: the pod's name)."""
    out: dict[str, set[str]] = {}
    for event in cluster.events(namespace, "Scheduled"):
        out.setdefault(event["involvedObject"]["name"], set()).add(str(event.get("reportingInstance")))
    return out


def test_gang_with_the_scheduler_name_runs_whole_through_https_bound_by_kube_scheduler(
        values_release: ValuesRelease) -> None:
    """Pods naming ml-gang-scheduler: held while the gang is incomplete, then bound whole and Running, each
    reported Scheduled by the release's kube-scheduler; the extender, reached over HTTPS, was never asked to
    bind (filter-gated: kube-scheduler's default binder made the Bindings). Pods naming other schedulers are
    not this one's: one naming gang-scheduler (no longer served) stays pending, one naming default-scheduler
    is placed by the control plane's default-scheduler."""
    cluster, pod = values_release.cluster, values_release.pod
    namespace, this_one = "values", f"{CUSTOM_SCHEDULER}-{pod['metadata']['name']}"
    cluster.create_namespace(namespace)
    others = [gang_pod(namespace, "other-gang-scheduler", "other-gang-scheduler", 1, scheduler="gang-scheduler"),
              gang_pod(namespace, "other-default-scheduler", "other-default-scheduler", 1,
                       scheduler="default-scheduler")]
    for other in others:  # plain pods, not gang members
        del other["metadata"]["annotations"]
    cluster.apply(others)
    # Held while 3 of 4 exist (GangWaiting, from the extender's filter: kube-scheduler reached it over HTTPS).
    pods = _run_gang(cluster, namespace, "custom", 4, scheduler=CUSTOM_SCHEDULER, new_namespace=False)
    requests = _extender_requests(cluster, pod)
    assert requests.get("bind", 0) == 0, f"the extender was asked to bind in the filter-gated mode: {requests}"
    wait_for(lambda: all(_scheduled_by(cluster, namespace).get(p["metadata"]["name"]) for p in pods), timeout=30,
             interval=0.5, what="a Scheduled Event for each member")
    scheduled = _scheduled_by(cluster, namespace)
    assert all(scheduled[p["metadata"]["name"]] == {this_one} for p in pods), scheduled
    wait_for(lambda: all_running(cluster.pods(namespace, "gang=other-default-scheduler"), 1), timeout=60,
             interval=0.5, what="the pod naming default-scheduler running")
    scheduled = _scheduled_by(cluster, namespace)
    by = scheduled.get("other-default-scheduler", set())
    assert by and not any(i.endswith(f"-{pod['metadata']['name']}") for i in by), f"other-default-scheduler: {by}"
    # Created before the gang, which this scheduler has since placed whole: it was never this scheduler's.
    [unserved] = cluster.pods(namespace, "gang=other-gang-scheduler")
    assert not unserved["spec"].get("nodeName"), (
        f"other-gang-scheduler bound to {unserved['spec']['nodeName']} by {scheduled.get('other-gang-scheduler')}")


def test_extender_port_refuses_plain_http_and_clients_without_the_certificate(values_release: ValuesRelease) -> None:
    """tls.requireClientCertificate: in the extender's own network namespace (kubectl exec), its verbs' port
    answers only HTTPS with a client certificate the Secret's CA signed; from the pod network (this machine)
    the port is not reachable at all (it listens on 127.0.0.1)."""
    cluster, pod = values_release.cluster, values_release.pod
    other = values_release.other_ca_client
    proc = cluster.kubectl("exec", "-i", "-n", NAMESPACE, pod["metadata"]["name"], "-c", "gang-extender", "--",
                           "python", "-c", TLS_ATTEMPTS,
                           input=json.dumps({"crt": other.cert.read_text(), "key": other.key.read_text()}))
    results = json.loads(proc.stdout)
    sys.stderr.write(f"the extender's port, from its own container: {results}\n")
    assert results.pop("HTTPS with the Secret's client certificate") == "HTTP 200", results
    # Each failed on the port that has just answered the certificate's holder.
    assert all(result.startswith("failed: ") for result in results.values()), results
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((pod["status"]["podIP"], 8888), timeout=5).close()

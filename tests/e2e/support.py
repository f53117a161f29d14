"""End-to-end helpers: run gang-extender as a real process, build objects, watch bindings.

Used by the e2e tests and by hack/demo.py. The extender is started exactly as users start it
(``gang-extender serve``) and kube-scheduler reaches it over HTTP on loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from controlplane import ControlPlane, free_ports, tail, wait_for

ROOT = Path(__file__).resolve().parents[2]
PAUSE = "registry.k8s.io/pause:3.10"
GANG_EXTENDER = str(Path(sys.executable).with_name("gang-extender"))
E2E_GANG_TIMEOUT = 12  # above kube-scheduler's 10 s maximum pod back-off, as docs/deploy.md advises


def scheduler_config(url: str, *, http_timeout: str = "30s", prioritize: bool = False,
                     preempt: bool = False) -> dict[str, Any]:
    """The shipped KubeSchedulerConfiguration (manifests/) with its extender URL pointed at ``url``;
    ``prioritize`` makes sure the extender's prioritize verb is configured (weight 1), ``preempt`` its
    preempt verb."""
    import yaml

    config: dict[str, Any] = yaml.safe_load((ROOT / "manifests" / "scheduler-config.yaml").read_text())
    for extender in config["extenders"]:
        extender["urlPrefix"] = url
        extender["httpTimeout"] = http_timeout
        if prioritize:
            extender["prioritizeVerb"] = "prioritize"
            extender["weight"] = 1
        if preempt:
            extender["preemptVerb"] = "preempt"
    config.pop("clientConnection", None)
    config.pop("leaderElection", None)
    return config


def metrics_here(args: Iterable[str]) -> tuple[list[str], int]:
    """Shipped sidecar args with their ``--metrics-address`` (the pod IP's port 9090, one pod per address
    in a cluster) moved to a free loopback port of this shared host: (args, that port)."""
    port = free_ports(1)[0]
    out = [f"--metrics-address=127.0.0.1:{port}" if a.startswith("--metrics-address=") else a for a in args]
    assert out != list(args), f"no --metrics-address in the shipped args {list(args)}"
    return out, port


def metrics_only(port: int, wanted: str = "gang_extender_requests_total") -> str:
    """The metrics-only listener on ``port``: GET /metrics names ``wanted`` (returned: the scrape), and a
    verb or the explain path sent there is refused (POST: 501, GET: 404)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        scraped = reply.read().decode()
    assert wanted in scraped, scraped[:2000]
    for method, path, status in (("POST", "/filter", 501), ("POST", "/bind", 501), ("GET", "/explain", 404)):
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"{}" if method == "POST" else None,
                                         method=method)
        try:
            urllib.request.urlopen(request, timeout=10).close()
            raise AssertionError(f"{method} {path} was served on the metrics port")
        except urllib.error.HTTPError as exc:
            assert exc.code == status, (method, path, exc.code)
    return scraped


class Extender:
    """``gang-extender serve`` as a child process, restartable, killable."""

    def __init__(self, kubeconfig: str, workdir: Path, *, args: Iterable[str] = (), log: Callable[[str], None],
                 tls_context: ssl.SSLContext | None = None) -> None:
        """``tls_context``: the extender serves HTTPS (its args carry --tls-*); probes use this client context."""
        self.kubeconfig = kubeconfig
        self.port = free_ports(1)[0]
        self.tls_context = tls_context
        self.url = f"{'https' if tls_context else 'http'}://127.0.0.1:{self.port}"
        self.log_path = workdir / "gang-extender.log"
        self.record_path = workdir / "requests.jsonl"
        self.journal_path = workdir / "releases.jsonl"  # kept across restarts, like the emptyDir in manifests/
        self.args = [*args, "--record-file", str(self.record_path), "--release-journal", str(self.journal_path)]
        self._log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 30.0) -> None:
        self.starts += 1
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [GANG_EXTENDER, "serve", "--kubeconfig", self.kubeconfig, "--port", str(self.port), *self.args],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        started = time.monotonic()
        try:
            wait_for(self.ready, timeout=timeout, interval=0.1, what="gang-extender /readyz")
        except Exception as exc:
            raise RuntimeError(f"gang-extender did not become ready: {exc}\n{tail(self.log_path)}") from None
        self._log(f"[e2e] gang-extender ready on {self.url} in {time.monotonic() - started:.1f}s")

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"gang-extender exited with {self.proc.returncode}\n{tail(self.log_path)}")
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=2, context=self.tls_context) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=5, context=self.tls_context) as reply:
            text = reply.read().decode()
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def explain(self, namespace: str, name: str) -> dict[str, Any]:
        """The extender's ``GET /explain/NAMESPACE/NAME`` answer."""
        with urllib.request.urlopen(f"{self.url}/explain/{namespace}/{name}", timeout=10,
                                    context=self.tls_context) as reply:
            answer: dict[str, Any] = json.loads(reply.read())
        return answer

    def fit(self, objects: list[dict[str, Any]]) -> dict[str, Any]:
        """The extender's ``POST /fit`` answer for ``objects``."""
        request = urllib.request.Request(f"{self.url}/fit", data=json.dumps(objects).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60, context=self.tls_context) as reply:
            answer: dict[str, Any] = json.loads(reply.read())
        return answer

    def kill(self) -> None:
        """kill -9, as a crash would."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None


# ------------------------------------------------------------------------------------- objects
def workload(namespace: str, name: str, groups: Mapping[str, int | None], annotations: Mapping[str, str] | None = None
             ) -> dict[str, Any]:
    pod_groups = [{"name": g, "policy": {"gang": {"minCount": n}} if n else {"basic": {}}} for g, n in groups.items()]
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
            "spec": {"podGroups": pod_groups}}


def pod_spec(*, cpu: str, selector: Mapping[str, str], workload_ref: Mapping[str, str] | None = None,
             anti_affinity_label: str | None = None, grace_seconds: int = 0) -> dict[str, Any]:
    """A pause pod requesting ``cpu`` and 256Mi on a node matching ``selector``.

    ``grace_seconds`` is its terminationGracePeriodSeconds. The default 0 makes the API server remove a
    bound pod at once on delete (nothing else would: the control plane has no kubelets); on kwok nodes
    (``hack/kwok_harness.py``) give it a nonzero value, so a delete or an eviction goes through
    Terminating and kwok completes it, as a kubelet would.
    """
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": dict(selector),
        "terminationGracePeriodSeconds": grace_seconds,
        "containers": [{"name": "main", "image": PAUSE,
                        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
    }
    if workload_ref:
        spec["workloadRef"] = dict(workload_ref)
    if anti_affinity_label:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"anti": anti_affinity_label}},
            "topologyKey": "kubernetes.io/hostname"}]}}
    return spec


def pod(namespace: str, name: str, spec: Mapping[str, Any], labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                         "annotations": dict(annotations or {})},
            "spec": dict(spec)}


def create(cp: ControlPlane, *objects: Mapping[str, Any]) -> None:
    cp.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def install_quorum_gate(cp: ControlPlane, objects: Iterable[Mapping[str, Any]], *, probe_namespace: str,
                        gate: str) -> None:
    """Create the quorum-gate policy ``objects`` (``helmchart.quorum_gate_objects``) and return once the API
    server applies it: a gang member created (dry run) in ``probe_namespace`` (which must exist) comes back with
    the scheduling gate ``gate`` (the policy reaches admission a moment after it is stored)."""
    create(cp, *objects)
    probe = pod(probe_namespace, "quorum-gate-probe", {"containers": [{"name": "main", "image": "pause"}]},
                annotations={"gang-extender.io/group": "probe", "gang-extender.io/min-count": "1"})

    def gated_at_creation() -> bool:
        made = json.loads(cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                     input=json.dumps(probe)).stdout)
        return gate in [g["name"] for g in made["spec"].get("schedulingGates") or []]

    wait_for(gated_at_creation, timeout=60, what="the quorum-gate MutatingAdmissionPolicy to be in force")


def pods(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cp.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    return items


def bound(cp: ControlPlane, namespace: str, prefix: str = "") -> dict[str, str]:
    """pod name -> node, for the bound pods whose name starts with ``prefix``."""
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods(cp, namespace)
            if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")}


def events(cp: ControlPlane, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = cp.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if e.get("reason") == reason]


class Sampler:
    """Polls a namespace's bindings every ``interval`` seconds and remembers every sample.

    ``partial(prefix, min_count)`` lists samples where a gang was bound but short of quorum for
    longer than ``grace`` (the binds of one released quorum land within milliseconds of each other).
    """

    def __init__(self, cp: ControlPlane, namespace: str, interval: float = 0.1) -> None:
        self.cp, self.namespace, self.interval = cp, namespace, interval
        self.samples: list[tuple[float, dict[str, str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        with contextlib.suppress(Exception):  # a last sample: what the test waited for, seen here too
            self.samples.append((time.monotonic(), bound(self.cp, self.namespace)))

    def _run(self) -> None:
        while not self._stop.is_set():
            # a transient API error (e.g. an apiserver restart) is just a missed sample
            with contextlib.suppress(Exception):
                self.samples.append((time.monotonic(), bound(self.cp, self.namespace)))
            self._stop.wait(self.interval)

    def max_bound(self, prefix: str) -> int:
        return max((sum(1 for n in s if n.startswith(prefix)) for _, s in self.samples), default=0)

    def partial_runs(self, prefix: str, min_count: int) -> list[tuple[float, float]]:
        """(first, last) sample time of every run of samples in which the pods ``prefix*`` were bound but
        fewer than ``min_count``."""
        runs: list[tuple[float, float]] = []
        first = last = None
        for at, sample in self.samples:
            count = sum(1 for name in sample if name.startswith(prefix))
            if 0 < count < min_count:
                first = at if first is None else first
                last = at
            elif first is not None and last is not None:
                runs.append((first, last))
                first = last = None
        if first is not None and last is not None:
            runs.append((first, last))
        return runs

    def partial(self, prefix: str, min_count: int, grace: float = 2.0) -> list[tuple[float, float]]:
        """The runs of partial binding that lasted longer than ``grace``."""
        return [(first, last) for first, last in self.partial_runs(prefix, min_count) if last - first > grace]


@contextlib.contextmanager
def scheduling_with_extender(cp: ControlPlane, workdir: Path, *extra_args: str, preempt: bool = False,
                             kubeconfig: str = "") -> Iterator[Extender]:
    """gang-extender (short gang timeout and back-off, recording on) and a kube-scheduler that calls it
    with the shipped configuration (plus ``preemptVerb`` with ``preempt``); both stopped afterwards.
    ``kubeconfig``: the extender's identity (default: the admin's)."""
    ext = Extender(kubeconfig or cp.kubeconfig, workdir, log=print,
                   args=["--gang-timeout-seconds", str(E2E_GANG_TIMEOUT), "--gang-backoff-seconds", "2",
                         "--log-level", "INFO", *extra_args])
    ext.start()
    cp.start_scheduler(scheduler_config(ext.url, preempt=preempt))
    try:
        yield ext
    finally:
        cp.stop_scheduler()
        ext.stop()
        print(f"[e2e] extender log: {ext.log_path}")


def check_invariants(cp: ControlPlane, ext: Extender) -> None:
    """No node over-committed, and no bind outside the extender's last filter reply for the pod."""
    assert overcommitted_nodes(cp) == []
    assert binds_outside_filter_replies(ext.record_path) == []


WAIT = 60.0  # generous bound for kube-scheduler's own back-off (1-10 s) to retry a pod


def scenario(cp: ControlPlane, name: str, nodes: int = 2, cpu: str = "4") -> tuple[str, dict[str, str], set[str]]:
    """A namespace and its own labelled nodes (the scenario's pods select them): (namespace, labels, nodes)."""
    cp.create_namespace(name)
    labels = {"e2e-scenario": name}
    return name, labels, set(cp.add_nodes(nodes, cpu=cpu, labels=labels, prefix=f"{name}-n"))


def stays_unbound(cp: ControlPlane, ns: str, prefix: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert bound(cp, ns, prefix) == {}, "a member was bound before its gang reached quorum"
        time.sleep(0.2)


def all_bound(cp: ControlPlane, ns: str, prefix: str, count: int, nodes: set[str]) -> dict[str, str]:
    """Wait until ``count`` pods ``prefix*`` are bound, all to ``nodes``; their placements."""
    wait_for(lambda: len(bound(cp, ns, prefix)) == count, timeout=WAIT, what=f"{count} pods {prefix}* bound")
    placed = bound(cp, ns, prefix)
    assert set(placed.values()) <= nodes, placed
    return placed


def recorded(record_path: Path) -> Iterator[dict[str, Any]]:
    """The extender's recorded exchanges (``--record-file``) that were answered 200, in order."""
    if not record_path.exists():
        return
    for line in record_path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            # A line a kill -9 cut short (recordings written before lines went out in one write). A
            # lost filter record can only make a bind look unverified, never hide a wrong one.
            continue
        if entry["status"] == 200 and isinstance(entry["request"], dict):
            yield entry


def _feasible(entry: dict[str, Any]) -> tuple[tuple[str, str], set[str]]:
    meta = entry["request"]["Pod"]["metadata"]
    return (meta["namespace"], meta["name"]), set(entry["reply"]["NodeNames"] or [])


def binds_outside_filter_replies(record_path: Path) -> list[str]:
    """Successful binds whose node was not feasible in the extender's last filter reply for that pod.

    Reads the extender's request recording (``--record-file``). kube-scheduler binds only to a node
    that passed every filter, so any entry here would mean a reply was ignored or wrong.
    """
    feasible: dict[tuple[str, str], set[str]] = {}
    problems: list[str] = []
    for entry in recorded(record_path):
        request, reply = entry["request"], entry["reply"]
        if entry["verb"] == "filter":
            key, nodes = _feasible(entry)
            feasible[key] = nodes
        elif entry["verb"] == "bind" and not reply["Error"]:
            key = (request["PodNamespace"], request["PodName"])
            if request["Node"] not in feasible.get(key, set()):
                problems.append(f"{key[0]}/{key[1]} bound to {request['Node']}, filter said {feasible.get(key)}")
    return problems


def placements_outside_filter_replies(record_path: Path, placements: Mapping[tuple[str, str], str]) -> list[str]:
    """Pods (namespace, name) -> node placed by another binder whose node was not feasible in the
    extender's last filter reply for that pod (the filter-gated mode, where binds do not pass through it)."""
    feasible = dict(_feasible(e) for e in recorded(record_path) if e["verb"] == "filter")
    return [f"{ns}/{name} bound to {node}, filter said {feasible.get((ns, name))}"
            for (ns, name), node in sorted(placements.items()) if node not in feasible.get((ns, name), set())]


def overcommitted_nodes(cp: ControlPlane) -> list[str]:
    """Nodes whose bound pods request more cpu than the node has allocatable."""
    from extender.model.quantity import to_units

    allocatable = {n["metadata"]["name"]: to_units("cpu", n["status"]["allocatable"]["cpu"])
                   for n in cp.request("GET", "/api/v1/nodes")["items"]}
    used: dict[str, int] = {}
    for p in cp.request("GET", "/api/v1/pods")["items"]:
        node = p["spec"].get("nodeName")
        if node and p.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            for c in p["spec"]["containers"]:
                cpu = (c.get("resources") or {}).get("requests", {}).get("cpu")
                if cpu:
                    used[node] = used.get(node, 0) + to_units("cpu", cpu)
    return [n for n, u in used.items() if u > allocatable.get(n, 0)]


def stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it if it has not ended within 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def spawn_scheduler_as_pod(cp: ControlPlane, config: dict[str, Any], kubeconfig: str, workdir: Path
                           ) -> tuple[subprocess.Popen[bytes], int, Path]:
    """kube-scheduler as the shipped pod (second-scheduler overlay, Helm chart) runs it: ``--config``
    only, with its ServiceAccount's credentials (``kubeconfig``; in the pod these default to the
    in-cluster ones). Returns (the process, its secure port, its log)."""
    import yaml

    port = free_ports(1)[0]
    config_path = workdir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    cwd = workdir / "cwd"
    cwd.mkdir()
    log_path = workdir / "gang-scheduler.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(cp.bin_dir / "kube-scheduler"), f"--config={config_path}",
             f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
             "--bind-address=127.0.0.1", f"--secure-port={port}", "--v=2"],
            cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, port, log_path


def https_ok(port: int, path: str) -> bool:
    """An unauthenticated HTTPS GET of a local endpoint, as the kubelet's httpGet probes make it."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", timeout=2, context=context) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False

"""Shared by hack/record_corpus.py and bench/e2e_scheduling.py: cluster shapes, workloads, timing.

A *plan* is the list of objects a run creates (Workloads, then Pods in creation order) plus the gangs
they form, so both scripts build the same kinds of pods and measure them the same way:

- :func:`corpus_plan`: the recorded corpus: gangs of 2-64 (Workload ``minCount``) with identical and
  non-identical members and replica keys, plain pods (identical "Deployment" pods, unique pods, zone
  selectors, anti-affinity that makes a pod unsignable) and the contention case (gangs that cannot
  all fit in their pool, created interleaved).
- :func:`e2e_plan`: the scheduling benchmark: ``gangs`` gangs of ``size`` identical members on the
  general pool, and the contention mix (``contention_gangs`` gangs of 8 whole-node members on a
  16-node pool that holds two of them at a time), in gangs (1.35's Workloads or 1.37's PodGroups) or not.

:class:`BindWatch` watches every pod and records, with ``time.monotonic()``, when each pod was first
seen bound (``spec.nodeName``) and when it was deleted: one watch stream instead of polling lists,
so measuring does not load the API server.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT / "hack", ROOT / "tests" / "e2e"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
if str(ROOT) not in sys.path:  # last: a compiled tree on PYTHONPATH (``make compiled``) is the one imported
    sys.path.append(str(ROOT))

from controlplane import ApiError, ControlPlane  # noqa: E402

PAUSE = "registry.k8s.io/pause:3.10"
WORKLOAD_API = "scheduling.k8s.io/v1alpha1"  # 1.35's Workload
PODGROUP_API = "scheduling.k8s.io/v1beta1"   # 1.37's PodGroup
GENERAL = {"pool": "general"}
CONTENTION = {"pool": "contention"}
CONTENTION_NODES = 16  # 4 cpu each; contention members ask 3 cpu, so one member per node
ZONES = ("zone-a", "zone-b", "zone-c")


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ plans
@dataclass
class Gang:
    key: str            # namespace/workload/podGroup[/replica]
    members: list[str]  # "namespace/name" of its pods
    min_count: int
    kind: str           # identical | mixed | contention


@dataclass
class Plan:
    namespaces: list[str]
    workloads: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    gangs: list[Gang] = field(default_factory=list)
    background: list[dict[str, Any]] = field(default_factory=list)  # created already bound (spec.nodeName)

    def gang_of(self) -> dict[str, Gang]:
        return {m: g for g in self.gangs for m in g.members}


def add_pools(cp: ControlPlane, general: int, *, contention: int = CONTENTION_NODES) -> list[str]:
    """``general`` nodes (8 cpu / 32Gi, spread over three zones) and the contention pool (4 cpu / 16Gi)."""
    names: list[str] = []
    per_zone = [general // len(ZONES) + (1 if i < general % len(ZONES) else 0) for i in range(len(ZONES))]
    for zone, count in zip(ZONES, per_zone, strict=True):
        names += cp.add_nodes(count, cpu="8", memory="32Gi", labels={**GENERAL, "topology.kubernetes.io/zone": zone},
                              prefix="node-")
    if contention:
        names += cp.add_nodes(contention, cpu="4", memory="16Gi", labels=CONTENTION, prefix="pool-c-")
    return names


def workload(namespace: str, name: str, groups: Mapping[str, int]) -> dict[str, Any]:
    return {"apiVersion": WORKLOAD_API, "kind": "Workload", "metadata": {"name": name, "namespace": namespace},
            "spec": {"podGroups": [{"name": g, "policy": {"gang": {"minCount": n}}} for g, n in groups.items()]}}


def podgroup(namespace: str, name: str, min_count: int) -> dict[str, Any]:
    return {"apiVersion": PODGROUP_API, "kind": "PodGroup", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


def group_collection(obj: Mapping[str, Any]) -> str:
    """The API path that creates ``obj``, a Workload or a PodGroup."""
    return f"/apis/{obj['apiVersion']}/namespaces/{obj['metadata']['namespace']}/{obj['kind'].lower()}s"


def pod(namespace: str, name: str, *, cpu: str, memory: str, selector: Mapping[str, str],
        ref: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
        affinity: Mapping[str, Any] | None = None, scheduling_group: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "nodeSelector": dict(selector),
        "containers": [{"name": "main", "image": PAUSE, "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if ref:
        spec["workloadRef"] = dict(ref)
    if scheduling_group:  # 1.37: the pod's PodGroup
        spec["schedulingGroup"] = {"podGroupName": scheduling_group}
    if affinity:
        spec["affinity"] = dict(affinity)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})}, "spec": spec}


def _gang_pods(namespace: str, wl: str, size: int, *, gangs: bool, selector: Mapping[str, str],
               shape: Callable[[int], tuple[str, str]], group: str = "workers", replica: str | None = None,
               prefix: str | None = None, api: str = "workload") -> tuple[list[dict[str, Any]], list[str]]:
    """A gang's pods: with ``api="workload"`` each refers to the Workload ``wl``'s pod group ``group``; with
    ``api="podgroup"`` to the PodGroup ``wl``; ``gangs=False``: to nothing."""
    ref = {"name": wl, "podGroup": group, **({"podGroupReplicaKey": replica} if replica is not None else {})}
    stem = prefix or (f"{wl}-{replica}" if replica is not None else wl)
    pods = []
    for i in range(size):
        cpu, memory = shape(i)
        pods.append(pod(namespace, f"{stem}-{i}", cpu=cpu, memory=memory, selector=selector,
                        ref=ref if gangs and api == "workload" else None, labels={"job": wl},
                        scheduling_group=wl if gangs and api == "podgroup" else None))
    return pods, [f"{namespace}/{p['metadata']['name']}" for p in pods]


def group_object(api: str, namespace: str, name: str, min_count: int) -> dict[str, Any]:
    """A gang's group object: the Workload ``name`` with the pod group ``workers`` (``api="workload"``) or the
    PodGroup ``name`` (``api="podgroup"``)."""
    if api == "podgroup":
        return podgroup(namespace, name, min_count)
    return workload(namespace, name, {"workers": min_count})


def gang_key(api: str, namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if api == "podgroup" else f"{namespace}/{name}/workers"


def contention_mix(namespace: str, count: int, *, gangs: bool, api: str = "workload"
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Gang]]:
    """``count`` gangs of 8 members of 3 cpu on the 16-node pool (room for two gangs), created interleaved."""
    workloads, per_gang, plan_gangs = [], [], []
    for g in range(count):
        wl = f"contend-{g}"
        workloads.append(group_object(api, namespace, wl, 8))
        pods, names = _gang_pods(namespace, wl, 8, gangs=gangs, selector=CONTENTION, shape=lambda _i: ("3", "4Gi"),
                                 api=api)
        per_gang.append(pods)
        plan_gangs.append(Gang(gang_key(api, namespace, wl), names, 8, "contention"))
    interleaved = [p for i in range(8) for pods in per_gang for p in pods[i:i + 1]]
    return workloads, interleaved, plan_gangs


def e2e_plan(*, gangs: bool, gang_count: int = 250, size: int = 8, contention_gangs: int = 6,
             namespace: str = "bench", api: str = "workload") -> tuple[Plan, Plan]:
    """(throughput phase, contention phase). ``gangs=False``: the same pods in no gang. ``api``: gangs as
    1.35's Workloads (``workload``) or 1.37's PodGroups (``podgroup``)."""
    ns = namespace
    workloads, pods, plan_gangs = [], [], []
    for g in range(gang_count):
        wl = f"job-{g:04d}"
        workloads.append(group_object(api, ns, wl, size))
        members, names = _gang_pods(ns, wl, size, gangs=gangs, selector=GENERAL, shape=lambda _i: ("500m", "1Gi"),
                                    api=api)
        pods += members
        plan_gangs.append(Gang(gang_key(api, ns, wl), names, size, "identical"))
    throughput = Plan([ns], workloads if gangs else [], pods, plan_gangs)
    cws, cpods, cgangs = contention_mix("contend", contention_gangs, gangs=gangs, api=api)
    return throughput, Plan(["contend"], cws if gangs else [], cpods, cgangs)


def _mixed_member(i: int) -> tuple[str, str]:
    return ("2", "8Gi") if i == 0 else (f"{500 + 250 * (i % 4)}m", f"{1 + i % 3}Gi")


def _same_member(shape: tuple[str, str], _i: int) -> tuple[str, str]:
    return shape


def corpus_plan(seed: int = 4, general_nodes: int = 984) -> Plan:
    """The recorded corpus (see the module docstring); deterministic for a seed."""
    rng = random.Random(seed)
    ns = "corpus"
    workloads: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    gangs: list[Gang] = []
    sizes = [2] * 16 + [4] * 12 + [8] * 14 + [16] * 6 + [32] * 3 + [64] * 2
    rng.shuffle(sizes)
    for g, size in enumerate(sizes):
        wl = f"train-{g:02d}"
        shape: Callable[[int], tuple[str, str]]
        if g % 3 == 1:   # non-identical members: a bigger first member, then requests that vary by index
            kind, shape = "mixed", _mixed_member
        else:
            kind = "identical"
            shape = functools.partial(_same_member, rng.choice([("500m", "1Gi"), ("1", "2Gi"), ("2", "4Gi")]))
        if size == 2 and g % 4 == 0:  # two replicas of one pod group: independent gangs
            workloads.append(workload(ns, wl, {"workers": size}))
            for replica in ("0", "1"):
                members, names = _gang_pods(ns, wl, size, gangs=True, selector=GENERAL, shape=shape, replica=replica)
                pods += members
                gangs.append(Gang(f"{ns}/{wl}/workers/{replica}", names, size, kind))
            continue
        workloads.append(workload(ns, wl, {"workers": size}))
        members, names = _gang_pods(ns, wl, size, gangs=True, selector=GENERAL, shape=shape)
        pods += members
        gangs.append(Gang(f"{ns}/{wl}/workers", names, size, kind))
    plain: list[dict[str, Any]] = []
    for d, (cpu, memory, count) in enumerate([("100m", "128Mi", 150), ("250m", "512Mi", 150), ("500m", "1Gi", 100),
                                              ("1", "2Gi", 60), ("2", "4Gi", 40)]):
        plain += [pod(ns, f"web{d}-{i:03d}", cpu=cpu, memory=memory, selector=GENERAL, labels={"app": f"web{d}"})
                  for i in range(count)]
    for i in range(60):  # one of a kind: a signature never seen again
        plain.append(pod(ns, f"batch-{i:02d}", cpu=f"{rng.randrange(100, 3000, 10)}m",
                         memory=f"{rng.randrange(128, 6000)}Mi", selector=GENERAL, labels={"app": "batch"}))
    for i in range(45):  # pinned to a zone
        plain.append(pod(ns, f"zonal-{i:02d}", cpu="500m", memory="1Gi",
                         selector={**GENERAL, "topology.kubernetes.io/zone": ZONES[i % 3]}, labels={"app": "zonal"}))
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    for i in range(20):  # anti-affinity: the extender cannot share results for these (unsignable)
        plain.append(pod(ns, f"spread-{i:02d}", cpu="250m", memory="256Mi", selector=GENERAL,
                         labels={"app": "spread"}, affinity=anti))
    rng.shuffle(plain)
    # Interleave plain pods between gangs, as independent controllers would create them.
    mixed: list[dict[str, Any]] = []
    step = max(1, len(plain) // max(1, len(pods) // 8))
    gang_iter = iter(pods)
    for i in range(0, len(plain), step):
        mixed += plain[i:i + step]
        mixed += [p for _, p in zip(range(8), gang_iter, strict=False)]
    mixed += list(gang_iter)
    cws, cpods, cgangs = contention_mix(ns, 4, gangs=True)
    return Plan([ns], workloads + cws, mixed + cpods, gangs + cgangs, background_pods(rng, ns, general_nodes))


def background_pods(rng: random.Random, namespace: str, general_nodes: int) -> list[dict[str, Any]]:
    """Pods already running when the recording starts (created bound, never scheduled): about a third of
    the general nodes carry 1-7 cpu of them, so free capacity differs from node to node and some nodes
    are too full for the larger pods."""
    pods = []
    for i in range(general_nodes):
        if rng.random() < 0.35:
            cpu = rng.choice(["1", "2", "4", "6", "7"])
            p = pod(namespace, f"running-{i:04d}", cpu=cpu, memory=f"{int(cpu) * 3}Gi", selector=GENERAL,
                    labels={"app": "running"})
            p["spec"]["nodeName"] = f"node-{i}"
            pods.append(p)
    return pods


# --------------------------------------------------------------------------------------- creating
HOLD_GATE = "gang-extender.io/bench-hold"


def create_objects(cp: ControlPlane, plan: Plan, *, workers: int = 16, gated: bool = False) -> dict[str, float]:
    """Create the plan's namespaces, Workloads, background pods and Pods (in order); returns pod key ->
    monotonic time its POST returned."""
    for ns in plan.namespaces:
        with contextlib.suppress(ApiError):
            cp.create_namespace(ns)
    for wl in plan.workloads:
        cp.request("POST", group_collection(wl), wl)
    created: dict[str, float] = {}

    def create(p: dict[str, Any]) -> None:
        ns = p["metadata"]["namespace"]
        if gated and not p["spec"].get("nodeName"):
            p = {**p, "spec": {**p["spec"], "schedulingGates": [{"name": HOLD_GATE}]}}
        cp.request("POST", f"/api/v1/namespaces/{ns}/pods", p)
        created[f"{ns}/{p['metadata']['name']}"] = time.monotonic()

    # Gang members are created in order by a pool of workers: a gang's members within milliseconds.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(create, plan.background))
        list(pool.map(create, plan.pods))
    return created


def create_paced(cp: ControlPlane, plan: Plan, gangs_per_second: float, *, workers: int = 16) -> tuple[
        dict[str, float], float]:
    """Create the plan's namespaces and Workloads, then its gangs at a fixed rate: gang ``i``'s members
    are posted (in parallel) at ``start + i / gangs_per_second``, whatever the scheduler does, so the
    arrival rate is the same for every configuration. Returns pod key -> monotonic time its POST
    returned, and the largest delay of a gang's last POST returning behind the gang's due time (the
    client or kube-apiserver falling behind the schedule)."""
    for ns in plan.namespaces:
        with contextlib.suppress(ApiError):
            cp.create_namespace(ns)
    for wl in plan.workloads:
        cp.request("POST", group_collection(wl), wl)
    by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in plan.pods}
    created: dict[str, float] = {}

    def create(key: str) -> None:
        p = by_key[key]
        cp.request("POST", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)
        created[key] = time.monotonic()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        start = time.monotonic()
        futures = []
        for i, gang in enumerate(plan.gangs):
            due = start + i / gangs_per_second
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            futures += [pool.submit(create, key) for key in gang.members]
        for future in futures:
            future.result()
    lag = max((max(created[m] for m in g.members) - (start + i / gangs_per_second) for i, g in enumerate(plan.gangs)),
              default=0.0)
    return created, lag


def ungate(cp: ControlPlane, keys: Sequence[str], *, workers: int = 16) -> dict[str, float]:
    """Remove the hold gate from ``keys`` in about that order (a few in parallel); key -> monotonic time.

    kube-scheduler queues an ungated pod at the moment it is ungated, so the scheduling order follows
    ``keys``: the members of a gang reach the scheduler together, as when a controller creates a job.
    """
    released: dict[str, float] = {}
    patch = [{"op": "remove", "path": "/spec/schedulingGates"}]

    def release(key: str) -> None:
        ns, name = key.split("/", 1)
        cp.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", patch, content_type="application/json-patch+json")
        released[key] = time.monotonic()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(release, keys))
    return released


def delete_pods(cp: ControlPlane, keys: Iterable[str]) -> None:
    for key in keys:
        ns, name = key.split("/", 1)
        with contextlib.suppress(ApiError):
            cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0")


# ---------------------------------------------------------------------------------------- watching
class BindWatch:
    """One watch on all pods: first time each pod is seen bound, first time seen with no scheduling gate after
    one (``ungated``), and when it is deleted (monotonic)."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.bound: dict[str, float] = {}
        self.gated: set[str] = set()
        self.ungated: dict[str, float] = {}
        self.node: dict[str, str] = {}
        self.deleted: dict[str, float] = {}
        self.events = 0
        self.error = ""
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._conn: http.client.HTTPSConnection | None = None
        rv = cp.request("GET", "/api/v1/pods?limit=1")["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(rv,), name="bind-watch", daemon=True)
        self._thread.start()

    def _run(self, rv: str) -> None:
        while not self._stop.is_set():
            try:
                rv = self._watch(rv)
            except Exception as exc:  # a broken stream: note it and watch again from the last version seen
                if self._stop.is_set():
                    break
                self.error = f"{type(exc).__name__}: {exc}"
                log(f"[watch] pod watch broke ({self.error}); resuming from resourceVersion {rv}")
                time.sleep(0.2)
        with self._changed:
            self._changed.notify_all()

    def _watch(self, rv: str) -> str:
        conn = http.client.HTTPSConnection("127.0.0.1", self.cp.apiserver_port, context=self.cp.api.context)
        self._conn = conn
        try:
            conn.request("GET", f"/api/v1/pods?watch=true&resourceVersion={rv}&timeoutSeconds=3600",
                         headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"watch answered HTTP {resp.status}: {resp.read()[:300]!r}")
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    return rv
                now = time.monotonic()
                event = json.loads(line)
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                if event.get("type") == "ERROR":
                    raise RuntimeError(f"watch ERROR event: {obj}")
                rv = str(meta.get("resourceVersion") or rv)
                key = f"{meta.get('namespace')}/{meta.get('name')}"
                with self._changed:
                    self.events += 1
                    if event.get("type") == "DELETED":
                        self.deleted.setdefault(key, now)
                    else:
                        node = (obj.get("spec") or {}).get("nodeName")
                        if (obj.get("spec") or {}).get("schedulingGates"):
                            self.gated.add(key)
                        elif key in self.gated and key not in self.ungated:
                            self.ungated[key] = now
                        if node and key not in self.bound:
                            self.bound[key] = now
                            self.node[key] = node
                    self._changed.notify_all()
            return rv
        finally:
            conn.close()

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return predicate()
                self._changed.wait(min(left, 1.0))
            return True

    def bound_count(self, keys: Sequence[str]) -> int:
        return sum(1 for k in keys if k in self.bound)

    def close(self) -> None:
        self._stop.set()
        if self._conn is not None and self._conn.sock is not None:
            with contextlib.suppress(OSError):
                self._conn.sock.shutdown(2)
        self._thread.join(5)


# ---------------------------------------------------------------------------------------- snapshot
_DROP_META = ("managedFields", "resourceVersion", "generation", "selfLink")


def cluster_snapshot(cp: ControlPlane) -> dict[str, Any]:
    """Nodes, Pods and Workloads as one Kubernetes ``List`` (the ``--cluster-snapshot`` format), trimmed of
    fields the extender never reads (managedFields, node images and conditions, pod status details) and
    of the bench's hold gate (pods appear as the scheduler saw them once released)."""
    items: list[dict[str, Any]] = []
    for path, kind, api in (("/api/v1/nodes", "Node", "v1"), ("/api/v1/pods", "Pod", "v1"),
                            (f"/apis/{WORKLOAD_API}/workloads", "Workload", WORKLOAD_API)):
        for obj in cp.request("GET", path)["items"]:
            obj["apiVersion"], obj["kind"] = api, kind
            for key in _DROP_META:
                obj["metadata"].pop(key, None)
            if kind == "Node":
                status = obj.get("status", {})
                obj["status"] = {k: status[k] for k in ("capacity", "allocatable") if k in status}
            elif kind == "Pod":
                obj["status"] = {"phase": obj.get("status", {}).get("phase", "Pending")}
                obj["spec"].pop("schedulingGates", None)  # as the scheduler saw them: released
            items.append(obj)
    return {"apiVersion": "v1", "kind": "List", "items": items}


# ---------------------------------------------------------------------------------------- numbers
def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# ---------------------------------------------------------------------------------------- extender
def extender_process(kubeconfig: str, workdir: Path, *, args: Sequence[str] = (), record: bool = False) -> Any:
    """``gang-extender serve`` as tests/e2e/support.Extender runs it; recording only when ``record``."""
    from support import Extender

    ext = Extender(kubeconfig, workdir, args=args, log=log)
    if not record and "--record-file" in ext.args:  # support.Extender always records; production does not
        at = ext.args.index("--record-file")
        del ext.args[at:at + 2]
    return ext


def extender_metrics(ext: Any, timeout: float = 60.0) -> dict[str, float]:
    """The extender's /metrics, retried for up to ``timeout`` seconds: when every worker thread holds a bind,
    even /metrics waits for a thread. Empty if it never answered."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return dict(ext.metrics())
        except Exception as exc:
            if time.monotonic() > deadline:
                log(f"[extender] /metrics did not answer within {timeout:.0f}s ({type(exc).__name__}: {exc})")
                return {}
            time.sleep(1.0)


def delete_namespace_pods(cp: ControlPlane, namespace: str) -> None:
    """Delete every pod of ``namespace`` at once (no grace: there is no kubelet to wait for)."""
    cp.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")


def metric(text_or_values: Mapping[str, float], name: str) -> float:
    """Sum of every sample whose name (with labels) starts with ``name``."""
    return sum(v for k, v in text_or_values.items() if k == name or k.startswith(name + "{"))

"""The barrier under churn (issue 26), shared by tests/e2e/test_churn_soak.py (a short run, part of
``make test``) and hack/churn.py (``make churn``, the long run whose figures docs/reliability.md reports).

``churn_soak``: the HA topology of tests/e2e/ha.py, two ``pairs.Pair`` (kube-scheduler + its own
gang-extender, leader election on both, ``--bind-parallelism 1`` so that a kill can land inside a
release), each kube-scheduler calling its extender through an ``observe.RecordingProxy``, and a
``bindtap.BindingTap`` on the API server's Bindings. Three threads and the main one act at random:

- the feeder creates a gang every ``interval`` (0.5-1.5 x) seconds, 2-6 members of 500m cpu, minCount
  = size, as annotations (70 %) or a scheduler-plugins PodGroup (30 %); a third of the gangs have their
  last member behind a scheduling gate, lifted 1-6 s later; one item in five is a plain pod. It deletes
  the oldest whole gangs and bound plain pods to keep about 70 % of the cpu requested;
- the churner, every ``churn_interval`` (0.5-1.5 x) seconds, picks a member of a gang that is waiting
  at the barrier (one of its binds is held by the extender: the proxy has it in flight), preferring the
  held member itself, and deletes it *only if it is still unbound* (a delete with preconditions on its
  uid and resourceVersion: a Binding changes the resourceVersion), then re-creates it under its name (a
  new uid), as Job, JobSet and StatefulSet controllers do; at most 3 times per gang;
- the main thread kills (SIGKILL, both processes) the pair whose kube-scheduler leads, every
  ``kill_gap`` seconds after the previous takeover, alternately at a random moment and aimed (when the
  pod watch shows a gang's first member bound and not its last), waits until the other pair holds both
  Leases and restarts the killed pair as the standby.

At the end the feeder and churner stop, every gate is lifted and every live gang must be bound whole.

Judged (``problems``):

- gangs completed (> 0) and every gang created bound whole or deliberately deleted (after it was whole);
- partial gangs: from the pod watch, per gang, the stretches in which 0 < (its existing members bound) <
  minCount (the gang's deliberate deletion ends its timeline). A stretch may last ``GRACE`` seconds, or,
  when a leader kill falls in it (from 1 s before), that kill's takeover (kill -> first binding by the
  new leader) + ``KILL_GRACES[leases]`` (5 s; 15 s with the shipped Leases): a release cut by a kill is
  partly bound until the next leader lets the rest through at their next attempt (docs/reliability.md
  #25). Longer: partial, unless a Binding of the gang reached the API server in the stretch and was not
  made (``refused_bindings``: the churner deleted that member between the release's check and its
  Binding, which no barrier can prevent; the API-refusal case the extender must report,
  ``GangPartiallyBound``, and repair): those are counted apart (``partial_refused``) and are a problem
  only if not reported or the gang was not whole afterwards;
- over-commits: the pod watch replayed in the API server's order (bindings add a pod's cpu to its
  node, deletions take it away), ``support.overcommitted_nodes`` every 2 s and at the end;
- zombie binds: a Binding the tap allowed at ``a`` (its commit is after ``a`` and before the watch saw
  it) with no bind request for that pod and node, through either proxy, that kube-scheduler was still
  waiting for at ``a``: arrived before ``a``, not answered by the extender before ``a``, kube-scheduler
  not gone before ``a``, and ``a`` within its ``httpTimeout`` of the request's arrival. A Binding whose
  request's reply was the proxy's 502 (its extender was killed: the reply never came) is counted apart
  as *posthumous* (sent by the killed leader, committed after its death), not as a zombie;
- the system ran the whole time: filters, bind requests, bindings and churn per ``INTERVAL`` seconds,
  and the longest time without a binding.

Times: ``time.monotonic()`` of the test process (proxies, watch, tap, kills); ``time.time()`` only to
compare with Lease acquireTimes.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import random
import socket
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bindtap import PROBE, BindingTap
from controlplane import ApiError, ControlPlane, wait_for
from ha import EXTENDER_LEASE, Kill, _changed
from observe import Exchange, RecordingProxy, wait_on
from pairs import SCHEDULER_LEASE, LeaseState, Log, Pair, lease, scheduler_election
from support import ROOT, overcommitted_nodes, pod, pod_spec, scheduler_config

from extender.model.quantity import to_units

GRACE = 2.0        # seconds a gang may be partly bound with no kill in the stretch
KILL_GRACE = 5.0   # ... beyond the takeover when a kill falls in it (as tests/e2e/ha.py; test Leases)
# With the shipped 15 s Leases no one leads for 15-21 s: the cut gang's unbound members' attempts fail
# meanwhile and kube-scheduler's pod back-off grows to its maximum (podMaxBackoffSeconds, 10 s by default,
# which the shipped configuration keeps); the new leader lets them through only at their next attempt.
KILL_GRACES = {"test": KILL_GRACE, "shipped": KILL_GRACE + 10.0}
INTERVAL = 10.0    # seconds per row of the activity table
HTTP_TIMEOUT = 30.0  # kube-scheduler's extender httpTimeout (the shipped scheduler configuration)
MAX_REPLACEMENTS = 3  # per gang
GATE = "e2e.gang-extender.io/held-back"
PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"
ANNOTATION_GROUP = "gang-extender.io/group"
ANNOTATION_MIN = "gang-extender.io/min-count"
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"

# (extender: duration, renew deadline, retry; kube-scheduler: duration, renew deadline, retry)
LEASES: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "test": ((4, 2.5, 0.5), (4, 3, 1)),          # tests/e2e/ha.py's, for short runs
    "shipped": ((15, 10, 2), (15, 10, 2)),       # gang-extender's defaults (manifests/ha, the chart) and
}                                               # kube-scheduler's (the shipped configuration sets none)


def extender_args(namespace: str, leases: str) -> list[str]:
    args = ["--gang-timeout-seconds", "12", "--gang-backoff-seconds", "2", "--bind-parallelism", "1",
            "--leader-election", "on", "--lease-namespace", namespace, "--lease-name", EXTENDER_LEASE]
    if leases == "test":  # "shipped": no flags, the defaults are the shipped values
        duration, renew, retry = LEASES["test"][0]
        args += ["--lease-duration-seconds", f"{duration:g}", "--lease-renew-deadline-seconds", f"{renew:g}",
                 "--lease-retry-period-seconds", f"{retry:g}"]
    return args


# ------------------------------------------------------------------------------------- audit
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources: [{group: "", resources: ["pods", "pods/binding", "pods/eviction", "pods/status"]}]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
"""


class AuditedControlPlane(ControlPlane):
    """A ``ControlPlane`` whose kube-apiserver also writes an audit log (``audit_path``) of pod creates,
    deletes and Bindings: who deleted a pod (the harness sends no User-Agent; gang-extender's client is
    python-urllib3; kube-scheduler and the controllers name themselves), as the API server saw it."""

    @property
    def audit_path(self) -> Path:
        return self.workdir / "audit.log"

    def _spawn(self, name: str, argv: list[str], env: Any = None) -> Any:
        if name == "kube-apiserver":
            policy = self.workdir / "audit-policy.yaml"
            policy.write_text(AUDIT_POLICY)
            argv = [*argv, f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_path}",
                    "--audit-log-maxsize=0"]
        return super()._spawn(name, argv, env)


def audit_figures(cp: ControlPlane, ns: str) -> dict[str, Any]:
    """Pod deletes in ``ns`` by anyone but the harness, and Bindings by anyone but gang-extender (its
    client, python-urllib3), from the audit log (empty when the control plane keeps none)."""
    path = getattr(cp, "audit_path", None)
    if path is None or not path.exists():
        return {"audit": False}
    foreign_deletes, foreign_bindings, deletes = [], [], 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        ref = entry.get("objectRef") or {}
        if entry.get("stage") != "ResponseComplete" or ref.get("namespace") != ns or ref.get("name") == PROBE:
            continue
        agent = str(entry.get("userAgent") or "")
        code = (entry.get("responseStatus") or {}).get("code")
        if entry.get("verb") == "delete" and not ref.get("subresource"):
            deletes += 1
            if agent:
                foreign_deletes.append((ref.get("name"), agent[:60], code, entry.get("requestReceivedTimestamp")))
        if ref.get("subresource") == "binding" and not agent.startswith("python-urllib3") and code == 201:
            foreign_bindings.append((ref.get("name"), agent[:60], entry.get("requestReceivedTimestamp")))
        if ref.get("subresource") == "eviction" or entry.get("verb") == "deletecollection":
            foreign_deletes.append((ref.get("name"), f"{entry.get('verb')} {ref.get('subresource') or ''} "
                                    f"{agent[:40]}", code, entry.get("requestReceivedTimestamp")))
    return {"audit": True, "pod_deletes": deletes, "pod_deletes_not_by_the_harness": foreign_deletes,
            "bindings_not_by_gang_extender": foreign_bindings}


# ------------------------------------------------------------------------------------- pod watch
@dataclass
class Life:
    """One pod (one uid) as the watch saw it."""

    uid: str
    name: str
    cpu: int
    created: float
    node: str = ""
    bound: float | None = None
    bound_order: int = 0
    deleted: float | None = None
    deleted_order: int = 0


class UidWatch:
    """List + watch of one namespace's pods, per uid (a name re-created is another life), resumed from
    the last resourceVersion when the API server ends the watch."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.cp, self.namespace = cp, namespace
        self.lives: dict[str, Life] = {}
        self.error: str | None = None
        self.resumes = 0
        self._order = 0
        self._rv = ""
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._conn: http.client.HTTPSConnection | None = None
        self._thread = threading.Thread(target=self._run, name=f"uid-watch-{namespace}", daemon=True)

    def __enter__(self) -> UidWatch:
        listed = self.cp.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        for item in listed["items"]:
            self._note(item, "ADDED")
        self._rv = listed["metadata"]["resourceVersion"]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            conn = http.client.HTTPSConnection("127.0.0.1", self.cp.apiserver_port, context=self.cp.api.context,
                                               timeout=400)
            self._conn = conn
            try:
                conn.request("GET", f"/api/v1/namespaces/{self.namespace}/pods?watch=1&timeoutSeconds=300"
                                    f"&allowWatchBookmarks=true&resourceVersion={self._rv}",
                             headers={"Accept": "application/json"})
                response = conn.getresponse()
                if response.status != 200:
                    raise RuntimeError(f"pod watch refused: {response.status} {response.read()[:300]!r}")
                while not self._stop.is_set():
                    line = response.readline()
                    if not line:
                        break  # the API server's timeoutSeconds: resume from self._rv
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        raise RuntimeError(f"watch error: {obj}")
                    self._rv = obj.get("metadata", {}).get("resourceVersion") or self._rv
                    if kind != "BOOKMARK":
                        self._note(obj, str(kind))
            except Exception as exc:  # reported through .error
                if not self._stop.is_set():
                    self.error = f"{type(exc).__name__}: {exc}"
                    with self._changed:
                        self._changed.notify_all()
                    return
            finally:
                conn.close()
            self.resumes += 1

    def _note(self, obj: dict[str, Any], kind: str) -> None:
        seen = time.monotonic()
        meta, spec = obj["metadata"], obj["spec"]
        uid = meta["uid"]
        with self._changed:
            self._order += 1
            life = self.lives.get(uid)
            if life is None:
                cpu = sum(to_units("cpu", (c.get("resources") or {}).get("requests", {}).get("cpu", "0"))
                          for c in spec["containers"])
                life = self.lives[uid] = Life(uid, meta["name"], cpu, seen)
            if spec.get("nodeName") and life.bound is None:
                life.node, life.bound, life.bound_order = spec["nodeName"], seen, self._order
            if kind == "DELETED" and life.deleted is None:
                life.deleted, life.deleted_order = seen, self._order
            self._changed.notify_all()

    def wait(self, condition: Callable[[UidWatch], bool], timeout: float, what: str) -> None:
        wait_on(self._changed, lambda: condition(self), lambda: self.error, timeout, what)

    def snapshot(self) -> list[Life]:
        with self._changed:
            return [Life(**vars(life)) for life in self.lives.values()]

    def alive(self, names: Sequence[str]) -> list[Life]:
        """The current (not deleted) lives of these names (caller holds no lock)."""
        wanted = set(names)
        with self._changed:
            return [life for life in self.lives.values() if life.name in wanted and life.deleted is None]


# ------------------------------------------------------------------------------------- the work
@dataclass
class Gang:
    name: str
    size: int
    kind: str  # "annotation" or "podgroup"
    created: float
    gated: str | None = None       # the member created behind a scheduling gate
    ungate_at: float | None = None
    ungated: float | None = None
    replaced: int = 0
    whole: float | None = None     # when the feeder first saw it whole (its clean-up check)
    deleting: float | None = None  # when the feeder began deleting it (it was whole)

    @property
    def members(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.size)]


@dataclass
class ChurnOp:
    gang: str
    member: str
    old_uid: str
    new_uid: str
    at: float
    held: bool  # its bind was held at the barrier (in flight at a proxy) when it was picked


class Work:
    """The feeder and the churner (threads); see the module docstring."""

    def __init__(self, cp: ControlPlane, ns: str, selector: dict[str, str], proxies: Sequence[RecordingProxy], *,
                 seed: int, capacity_cpu: float, interval: float, churn_interval: float,
                 utilization: float = 0.7, log: Log = print) -> None:
        self.cp, self.ns, self.selector, self.proxies, self.log = cp, ns, selector, list(proxies), log
        self.interval, self.churn_interval = interval, churn_interval
        self.rng = random.Random(seed)
        self.churn_rng = random.Random(seed + 1)
        self.pod_cpu = 0.5
        self.target_cpu = capacity_cpu * utilization
        self.gangs: dict[str, Gang] = {}
        self.plain: dict[str, float] = {}        # plain pod -> created
        self.deleted: set[str] = set()           # gangs and plain pods deleted (whole and bound)
        self.churn: list[ChurnOp] = []
        self.churn_conflicts = 0                 # picked, but bound or changed before the delete: left alone
        self.deletes: list[tuple[float, str, str]] = []  # (at, pod, why): every pod delete the harness sent
        self.vanished: list[tuple[float, str, str, str]] = []  # (at, pod, uid gone, uid created again)
        self.watch: UidWatch | None = None       # set by churn_soak: what ``_recreate_vanished`` reads
        self.errors: list[str] = []
        self._live: list[tuple[str, int]] = []   # oldest first
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._guard, args=(self._feed,), name="churn-feeder", daemon=True),
                         threading.Thread(target=self._guard, args=(self._churn,), name="churn-churner", daemon=True)]

    def __enter__(self) -> Work:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _guard(self, loop: Callable[[], None]) -> None:
        while not self._stop.is_set():
            try:
                loop()
            except Exception as exc:  # reported through .errors; the run goes on
                self.errors.append(f"{time.monotonic():.1f} {type(exc).__name__}: {exc}"[:500])
                self.log(f"[churn] error: {self.errors[-1]}")
                self._stop.wait(0.5)

    # ----------------------------------------------------------------------------- feeder
    def _feed(self) -> None:
        n = 0
        while not self._stop.is_set():
            self._make_room()
            self._create(n)
            n += 1
            self._stop.wait(self.interval * self.rng.uniform(0.5, 1.5))

    def _member(self, gang: Gang, name: str, *, gated: bool = False) -> dict[str, Any]:
        spec = pod_spec(cpu="500m", selector=self.selector)
        if gated:
            spec["schedulingGates"] = [{"name": GATE}]
        if gang.kind == "podgroup":
            return pod(self.ns, name, spec, labels={PODGROUP_LABEL: gang.name})
        return pod(self.ns, name, spec, annotations={ANNOTATION_GROUP: gang.name, ANNOTATION_MIN: str(gang.size)})

    def _create(self, n: int) -> None:
        now = time.monotonic()
        if self.rng.random() < 0.2:
            name = f"p{n}"
            self.cp.request("POST", f"/api/v1/namespaces/{self.ns}/pods", pod(self.ns, name, pod_spec(
                cpu="500m", selector=self.selector)))
            with self._lock:
                self.plain[name] = now
                self._live.append((name, 1))
            return
        size = self.rng.randint(2, 6)
        gang = Gang(f"g{n}", size, "podgroup" if self.rng.random() < 0.3 else "annotation", now)
        if self.rng.random() < 1 / 3:
            gang.gated, gang.ungate_at = gang.members[-1], now + self.rng.uniform(1.0, 6.0)
        if gang.kind == "podgroup":
            self.cp.request("POST", PODGROUPS.format(ns=self.ns), {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": gang.name, "namespace": self.ns}, "spec": {"minMember": size}})
        with self._lock:
            self.gangs[gang.name] = gang
            self._live.append((gang.name, size))
        for member in gang.members:
            self.cp.request("POST", f"/api/v1/namespaces/{self.ns}/pods",
                            self._member(gang, member, gated=member == gang.gated))

    def _make_room(self) -> None:
        """Delete the oldest whole gangs / bound plain pods while the live pods request more than the target."""
        with self._lock:
            live = list(self._live)
        requested = sum(size for _, size in live) * self.pod_cpu
        if requested + 6 * self.pod_cpu <= self.target_cpu:
            return
        items = self.cp.request("GET", f"/api/v1/namespaces/{self.ns}/pods")["items"]
        placed = {p["metadata"]["name"] for p in items if p["spec"].get("nodeName")}
        for name, size in live:
            if requested + 6 * self.pod_cpu <= self.target_cpu:
                return
            members = [name] if name in self.plain else self.gangs[name].members
            if not all(m in placed for m in members):
                continue
            if name in self.gangs:
                self.gangs[name].deleting = time.monotonic()
            for member in members:
                self.deletes.append((time.monotonic(), member, "clean-up"))
                self.cp.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{member}?gracePeriodSeconds=0")
            if name in self.gangs and self.gangs[name].kind == "podgroup":
                with contextlib.suppress(ApiError):
                    self.cp.request("DELETE", PODGROUPS.format(ns=self.ns) + f"/{name}")
            with self._lock:
                self._live.remove((name, size))
                self.deleted.add(name)
            requested -= size * self.pod_cpu

    # ----------------------------------------------------------------------------- churner
    def _churn(self) -> None:
        next_churn = time.monotonic() + self.churn_interval * self.churn_rng.uniform(0.5, 1.5)
        while not self._stop.is_set():
            self.ungate_due()
            self.recreate_vanished()
            if time.monotonic() >= next_churn:
                self._replace_one()
                next_churn = time.monotonic() + self.churn_interval * self.churn_rng.uniform(0.5, 1.5)
            self._stop.wait(0.1)

    def recreate_vanished(self) -> None:
        """Create again, as a Job controller would, a member the harness re-created that was then deleted
        by no one the harness knows of. kube-apiserver does that (docs/reliability.md §26): a status
        patch of the old pod (kube-scheduler's, after its failed bind) that meets it with its grace-0
        deletion under way is turned into a delete of the name (``ShouldDeleteDuringUpdate``, then a
        delete without the old uid), which removes the new pod if it was created meanwhile."""
        if self.watch is None:
            return
        with self._lock:
            gangs = [g for g in self.gangs.values() if g.deleting is None and g.replaced]
        replaced_again = {op.old_uid for op in self.churn}
        for gang in gangs:
            present = {life.name for life in self.watch.alive(gang.members)}
            for member in gang.members:
                ops = [op for op in self.churn if op.member == member]
                if member in present or not ops or ops[-1].new_uid in replaced_again:
                    continue
                with self.watch._changed:
                    life = self.watch.lives.get(ops[-1].new_uid)
                    gone = life is not None and life.deleted is not None
                if not gone or any(uid == ops[-1].new_uid for _, _, uid, _ in self.vanished):
                    continue
                try:
                    created = self.cp.request("POST", f"/api/v1/namespaces/{self.ns}/pods", self._member(gang, member))
                except ApiError as exc:
                    if exc.status == 409:  # created again meanwhile: the watch has not seen it yet
                        continue
                    raise
                self.vanished.append((time.monotonic(), member, ops[-1].new_uid, created["metadata"]["uid"]))
                self.log(f"[churn] {member} (uid {ops[-1].new_uid[:8]}) vanished after its re-creation: created "
                         "again")

    def ungate_due(self, everyone: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            due = [g for g in self.gangs.values() if g.gated and g.ungated is None and g.deleting is None
                   and (everyone or (g.ungate_at or 0) <= now)]
        for gang in due:
            assert gang.gated is not None
            try:
                self.cp.request("PATCH", f"/api/v1/namespaces/{self.ns}/pods/{gang.gated}",
                                [{"op": "remove", "path": "/spec/schedulingGates"}],
                                content_type="application/json-patch+json")
            except ApiError as exc:
                if exc.status not in (404, 422):  # 422: no gates left (a replaced member: created ungated)
                    raise
            gang.ungated = time.monotonic()

    def held(self) -> set[str]:
        """Names of pods whose bind request the extender has not answered yet (held at the barrier)."""
        prefix = self.ns + "/"
        return {e.pod.removeprefix(prefix) for proxy in self.proxies for e in proxy.binds_in_flight()
                if e.pod.startswith(prefix)}

    def _replace_one(self) -> None:
        held = self.held()
        with self._lock:
            waiting = [g for g in self.gangs.values() if g.deleting is None and g.replaced < MAX_REPLACEMENTS
                       and any(m in held for m in g.members)]
        if not waiting:
            return
        gang = self.churn_rng.choice(sorted(waiting, key=lambda g: g.name))
        candidates = [m for m in gang.members if m != gang.gated or gang.ungated is not None]
        held_ones = [m for m in candidates if m in held]
        member = self.churn_rng.choice(held_ones if held_ones and self.churn_rng.random() < 0.7 else candidates)
        try:
            current = self.cp.request("GET", f"/api/v1/namespaces/{self.ns}/pods/{member}")
        except ApiError as exc:
            if exc.status == 404:
                return
            raise
        if current["spec"].get("nodeName"):
            self.churn_conflicts += 1
            return
        meta = current["metadata"]
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}}
        self.deletes.append((time.monotonic(), member, f"replace {meta['uid'][:8]}"))
        try:
            self.cp.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{member}", options)
        except ApiError as exc:
            if exc.status in (404, 409):  # bound (or changed) since the read: not a waiting member any more
                self.churn_conflicts += 1
                return
            raise
        gang.replaced += 1
        deadline = time.monotonic() + 10
        while True:  # re-created at once under its name, as a Job or JobSet controller would
            try:
                created = self.cp.request("POST", f"/api/v1/namespaces/{self.ns}/pods", self._member(gang, member))
                break
            except ApiError as exc:
                if exc.status != 409 or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.churn.append(ChurnOp(gang.name, member, meta["uid"], created["metadata"]["uid"], time.monotonic(),
                                  member in held))

    # ----------------------------------------------------------------------------- queries
    def live(self) -> dict[str, int]:
        with self._lock:
            return dict(self._live)


# ------------------------------------------------------------------------------------- the soak
def churn_soak(cp: ControlPlane, ns: str, workdir: Path, *, seconds: float, seed: int, log: Log,
               leases: str = "test", kill_gap: tuple[float, float] = (3.0, 10.0), nodes: int = 6, node_cpu: int = 4,
               interval: float = 0.8, churn_interval: float = 1.5, converge_seconds: float = 180.0
               ) -> dict[str, Any]:
    rng = random.Random(seed)
    cp.kubectl("apply", "-f", str(ROOT / "manifests" / "crds" / "scheduling.x-k8s.io_podgroups.yaml"))
    wait_for(lambda: "podgroups" in cp.kubectl("api-resources", "--api-group=scheduling.x-k8s.io").stdout,
             timeout=30, what="the PodGroup CRD to be served")
    cp.create_namespace(ns)
    selector = {"e2e-scenario": ns}
    cp.add_nodes(nodes, cpu=str(node_cpu), labels=selector, prefix=f"{ns}-n")
    scheduler_lease = LEASES[leases][1]
    pairs = [Pair(cp, label, workdir / label, extender_args(ns, leases), scheduler_election(*scheduler_lease), log)
             for label in ("a", "b")]
    proxies = {p.label: RecordingProxy(p.ext.url) for p in pairs}
    kills: list[Kill] = []
    unplanned: list[str] = []
    overcommit_samples: list[tuple[float, list[str]]] = []
    with contextlib.ExitStack() as stack:
        for pair in pairs:
            proxy = stack.enter_context(proxies[pair.label])
            pair.config = {**scheduler_config(proxy.url), "leaderElection": pair.config["leaderElection"]}
        tap = stack.enter_context(BindingTap(cp, [ns], name=f"e2e-binding-tap-{ns}"))
        try:
            for pair in pairs:
                pair.start()
            watch = stack.enter_context(UidWatch(cp, ns))
            stop_sampling = threading.Event()
            sampler = threading.Thread(target=_sample_overcommits, args=(cp, overcommit_samples, stop_sampling),
                                       daemon=True)
            sampler.start()
            stack.callback(sampler.join, 10)
            stack.callback(stop_sampling.set)
            work = Work(cp, ns, selector, list(proxies.values()), seed=seed, capacity_cpu=nodes * node_cpu,
                        interval=interval, churn_interval=churn_interval, log=log)
            work.watch = watch
            started = time.monotonic()
            with work:
                end = started + seconds
                number = 0
                while time.monotonic() < end:
                    gap = rng.uniform(*kill_gap)
                    if time.monotonic() + gap >= end:
                        break
                    number += 1
                    kill = _kill_round(cp, ns, pairs, watch, work, number, aimed=number % 2 == 0, gap=gap, rng=rng,
                                       unplanned=unplanned, log=log)
                    kills.append(kill)
                wait_for(lambda: time.monotonic() >= end, timeout=seconds + 60, interval=0.2, what="the soak's end")
            stopped = time.monotonic()
            work.ungate_due(everyone=True)
            converged = _converge(work, watch, converge_seconds)
            if converged:
                log(f"[churn] {converged}")
            ended = time.monotonic()
            time.sleep(1.0)  # late bindings, replies and tap records, if any, are recorded too
            for pair in pairs:
                if not pair.alive():
                    unplanned.append(f"{pair.label} found dead at the end")
        finally:
            for pair in pairs:
                pair.stop()
        exchanges = {label: proxy.exchanges() for label, proxy in proxies.items()}
        tapped = tap.records()
    final_overcommits = overcommitted_nodes(cp)
    audit = audit_figures(cp, ns)
    _first_binds(kills, watch.snapshot())
    figures = _figures(ns, watch, work, kills, exchanges, tapped, float(node_cpu), started, stopped, ended,
                       partly_bound_reports(cp, ns), KILL_GRACES[leases])
    figures.update(
        leases={"name": leases, "extender": LEASES[leases][0], "kube_scheduler": scheduler_lease},
        kill_grace_s=KILL_GRACES[leases],
        soak_seconds=round(stopped - started, 1), converge_seconds=round(ended - stopped, 1),
        unplanned_restarts=unplanned, pair_starts={p.label: p.starts for p in pairs},
        watch_error=watch.error, watch_resumes=watch.resumes, feeder_errors=work.errors[:10],
        overcommits_sampled=[(round(at - started, 1), found) for at, found in overcommit_samples if found],
        overcommit_samples=len(overcommit_samples), overcommitted_nodes_at_end=final_overcommits, **audit,
        logs={p.label: {"extender": str(p.ext.log_path), "requests": str(p.record_path),
                        "kube_scheduler": str(cp.log_path(p.scheduler))} for p in pairs})
    return figures


def _converge(work: Work, watch: UidWatch, seconds: float) -> str:
    """Until every live gang and plain pod is bound ("") or ``seconds`` pass (why not). The feeder keeps
    creating work when nothing whole can be deleted, so the live pods may request more than the nodes
    hold when it stops: the oldest whole gangs and bound plain pods are still deleted to make room (as
    the feeder does), so the last gangs can be placed."""
    deadline = time.monotonic() + seconds
    while True:
        live = work.live()
        wanted = [m for name in live for m in ([name] if name in work.plain else work.gangs[name].members)]
        try:
            left = min(2.0, max(deadline - time.monotonic(), 0.1))
            watch.wait(lambda w, wanted=wanted: _all_bound(w, wanted), timeout=left,
                       what=f"all {len(wanted)} live pods bound")
            return ""
        except AssertionError as exc:
            if time.monotonic() >= deadline or watch.error:
                return str(exc)
        try:
            work._make_room()
        except ApiError as exc:  # the next round tries again
            work.log(f"[churn] making room at the end: {exc}")


def _all_bound(watch: UidWatch, names: Sequence[str]) -> bool:
    alive = {life.name: life for life in watch.lives.values() if life.deleted is None}
    return all(name in alive and alive[name].bound is not None for name in names)


def _sample_overcommits(cp: ControlPlane, out: list[tuple[float, list[str]]], stop: threading.Event) -> None:
    while not stop.wait(2.0):
        with contextlib.suppress(Exception):
            out.append((time.monotonic(), overcommitted_nodes(cp)))


# ------------------------------------------------------------------------------------- kills
def _leader(pairs: Sequence[Pair], unplanned: list[str], log: Log) -> Pair:
    """The pair whose kube-scheduler leads; a pair that died on its own is restarted (and reported)."""
    def one() -> bool:
        for pair in pairs:
            if not pair.alive():
                unplanned.append(f"{pair.label} at {time.monotonic():.1f}")
                log(f"[churn] pair {pair.label} exited without being killed: restarted")
                pair.kill()
                pair.start()
        return sum(p.leads() for p in pairs) == 1

    wait_for(one, timeout=90, interval=0.05, what="one leading kube-scheduler")
    return next(p for p in pairs if p.leads())


def _mid_release(watch: UidWatch, work: Work, armed: float) -> bool:
    """A gang of 3 or more with some members bound, all of them after ``armed``, not all of them."""
    with work._lock:
        gangs = [g for g in work.gangs.values() if g.size >= 3 and g.deleting is None]
    for gang in gangs:
        alive = watch.alive(gang.members)
        bound = [life for life in alive if life.bound is not None]
        if bound and len(bound) < gang.size and all(life.bound > armed for life in bound):  # type: ignore[operator]
            return True
    return False


def _kill_round(cp: ControlPlane, ns: str, pairs: Sequence[Pair], watch: UidWatch, work: Work, number: int, *,
                aimed: bool, gap: float, rng: random.Random, unplanned: list[str], log: Log) -> Kill:
    leader = _leader(pairs, unplanned, log)
    wait_for(leader.extender_leads, timeout=90, interval=0.05, what=f"extender {leader.label} leading")
    scheduler_before = (lease(cp, *SCHEDULER_LEASE) or LeaseState("", 0, 0)).holder
    extender_before = (lease(cp, ns, EXTENDER_LEASE) or LeaseState("", 0, 0)).holder
    time.sleep(gap)
    if aimed:
        armed = time.monotonic()
        try:
            watch.wait(lambda w: _mid_release(w, work, armed), timeout=20, what="a gang's first member bound")
        except AssertionError:
            log("[churn] no release seen within 20 s: killing anyway")
    kill = Kill(number, aimed, leader.label, time.time(), time.monotonic())
    leader.kill()
    with work._lock:
        gangs = [g for g in work.gangs.values() if g.deleting is None]
    for gang in gangs:
        bound = sum(1 for life in watch.alive(gang.members) if life.bound is not None)
        if 0 < bound < gang.size:
            kill.cut.append((gang.name, bound, gang.size))
    taken = _changed(cp, *SCHEDULER_LEASE, scheduler_before, timeout=60)
    kill.scheduler_s = None if taken is None else round(taken.acquired - kill.at_wall, 2)
    taken = _changed(cp, ns, EXTENDER_LEASE, extender_before, timeout=60)
    kill.extender_s = None if taken is None else round(taken.acquired - kill.at_wall, 2)
    time.sleep(rng.uniform(0.0, 1.0))
    leader.start()  # the standby now
    log(f"[churn] kill {number} ({'aimed' if aimed else 'random'}) of pair {leader.label}: cut {kill.cut}; "
        f"kube-scheduler took over after {kill.scheduler_s} s, extender after {kill.extender_s} s")
    return kill


def _first_binds(kills: list[Kill], lives: Sequence[Life]) -> None:
    """Each kill's first binding by the new leader: the first the watch saw from 0.5 s after the kill to the
    next kill (earlier ones may be Bindings the killed extender sent just before it died)."""
    seen = sorted(life.bound for life in lives if life.bound is not None)
    for i, kill in enumerate(kills):
        until = kills[i + 1].at_mono if i + 1 < len(kills) else float("inf")
        first = next((at for at in seen if kill.at_mono + 0.5 < at < until), None)
        kill.first_bind_s = None if first is None else round(first - kill.at_mono, 2)


# ------------------------------------------------------------------------------------- figures
def partial_stretches(gang: Gang, lives: Sequence[Life], ended: float) -> list[tuple[float, float]]:
    """(first, last) of every stretch in which 0 < bound members (of those existing) < minCount, in the
    watch's order, until the gang's deliberate deletion began (the first deletion of a bound member: only
    the feeder's clean-up of a whole gang deletes one) or the run ended."""
    names = set(gang.members)
    events: list[tuple[int, float, int]] = []  # (order, seen, +1 bound / -1 bound member deleted)
    for life in lives:
        if life.name in names and life.bound is not None:
            events.append((life.bound_order, life.bound, 1))
            if life.deleted is not None:
                events.append((life.deleted_order, life.deleted, -1))
    stretches: list[tuple[float, float]] = []
    bound, start, until = 0, None, ended
    for _, seen, step in sorted(events):
        if step < 0:
            until = seen
            break
        bound += step
        if 0 < bound < gang.size and start is None:
            start = seen
        elif bound >= gang.size and start is not None:
            stretches.append((start, seen))
            start = None
    if start is not None:
        stretches.append((start, until))
    return stretches


def judge_stretch(first: float, last: float, kills: Sequence[Kill], kill_grace: float = KILL_GRACE
                  ) -> dict[str, Any] | None:
    """A stretch is allowed ``GRACE``, or from a kill in it (from 1 s before it) that kill's takeover +
    ``kill_grace``; the worst part over its allowance, or None."""
    starts = [(first, GRACE, 0)]
    for kill in sorted(kills, key=lambda k: k.at_mono):
        if first - 1.0 <= kill.at_mono <= last:
            at = max(kill.at_mono, first)
            starts = [s for s in starts if s[0] < at] + [(at, kill.takeover() + kill_grace, kill.number)]
    worst = None
    for i, (start, allowance, number) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else last
        if end - start > allowance and (worst is None or end - start - allowance > worst["excess"]):
            worst = {"seconds": round(end - start, 2), "allowed": round(allowance, 2),
                     "excess": round(end - start - allowance, 2), "after_kill": number or None}
    return worst


def zombie_binds(ns: str, lives: Sequence[Life], tapped: Sequence[Any], exchanges: dict[str, list[Exchange]]
                 ) -> dict[str, Any]:
    """Each binding the watch saw, matched to the tap's record of its Binding and to the bind requests of
    that pod and node (see the module docstring)."""
    by_pod: dict[str, list[tuple[str, Exchange]]] = {}
    for label, items in exchanges.items():
        for e in items:
            if e.verb == "bind":
                by_pod.setdefault(e.pod, []).append((label, e))
    zombies: list[dict[str, Any]] = []
    posthumous: list[dict[str, Any]] = []  # allowed after its sender's death was seen by the proxy
    cut_by_kill: list[dict[str, Any]] = []  # allowed before it: its sender was killed before answering
    untapped: list[str] = []
    bound_though_error: list[dict[str, Any]] = []
    for life in lives:
        if life.bound is None:
            continue
        records = [r for r in tapped if r.pod == life.name and r.node == life.node and r.allowed
                   and r.answered is not None and r.answered <= life.bound and (not r.uid or r.uid == life.uid)]
        if not records:
            untapped.append(life.name)
            continue
        allowed_at = records[-1].answered
        mine = [(label, e) for label, e in by_pod.get(f"{ns}/{life.name}", []) if e.node == life.node]
        covering = [(label, e) for label, e in mine
                    if e.arrival <= allowed_at and (e.caller_gone is None or e.caller_gone >= allowed_at)
                    and allowed_at - e.arrival <= HTTP_TIMEOUT and (e.answered is None or e.answered >= allowed_at)]
        if not covering:
            history = [(label, round(e.arrival, 2), None if e.answered is None else round(e.answered, 2), e.status,
                        (e.error or "")[:80], None if e.caller_gone is None else round(e.caller_gone, 2))
                       for label, e in mine]
            zombies.append({"pod": life.name, "uid": life.uid, "node": life.node, "binding_allowed_at":
                            round(allowed_at, 2), "seen": round(life.bound, 2),
                            "requests (proxy, arrival, answered, status, error, caller gone)": history})
        elif all(e.status == 502 for _, e in covering):  # its extender was killed before it answered
            died = min((e.answered for _, e in covering if e.answered is not None), default=allowed_at)
            (posthumous if allowed_at > died else cut_by_kill).append(
                {"pod": life.name, "allowed_after_death_s": round(allowed_at - died, 3)})
        elif all(e.error for _, e in covering if e.status == 200):
            bound_though_error.append({"pod": life.name, "errors": [e.error for _, e in covering][:2]})
    allowed_not_bound = [r.pod for r in tapped if r.allowed and not any(
        life.name == r.pod and life.node == r.node and life.bound is not None for life in lives)]
    return {"zombies": zombies, "posthumous": posthumous, "bindings_of_killed_senders": cut_by_kill,
            "untapped": untapped,
            "bound_though_answered_error": bound_though_error, "tap_allowed_not_bound": allowed_not_bound}


def _overcommits(lives: Sequence[Life], node_cpu: float) -> list[str]:
    events: list[tuple[int, int, str, str, int]] = []
    for life in lives:
        if life.bound is not None:
            events.append((life.bound_order, 0, life.name, life.node, life.cpu))
            if life.deleted is not None:
                events.append((life.deleted_order, 1, life.name, life.node, life.cpu))
    used: dict[str, int] = {}
    found = []
    capacity = to_units("cpu", f"{node_cpu:g}")
    for order, kind, name, node, cpu in sorted(events):
        used[node] = used.get(node, 0) + (cpu if kind == 0 else -cpu)
        if kind == 0 and used[node] > capacity:
            found.append(f"{node} at {used[node]}m after {name} (event {order})")
    return found


def _activity(lives: Sequence[Life], exchanges: dict[str, list[Exchange]], churn: Sequence[ChurnOp],
              kills: Sequence[Kill], started: float, stopped: float) -> dict[str, Any]:
    rows = []
    t = started
    all_exchanges = [e for items in exchanges.values() for e in items]
    bound_at = sorted(life.bound for life in lives if life.bound is not None)
    while t < stopped:
        u = min(t + INTERVAL, stopped)

        def within(at: float | None, lo: float = t, hi: float = u) -> bool:
            return at is not None and lo <= at < hi

        rows.append({"from_s": round(t - started), "seconds": round(u - t, 1),
                     "filters": sum(within(e.arrival) for e in all_exchanges if e.verb == "filter"),
                     "bind_requests": sum(within(e.arrival) for e in all_exchanges if e.verb == "bind"),
                     "bindings": sum(within(at) for at in bound_at), "replaced": sum(within(op.at) for op in churn),
                     "kills": sum(within(k.at_mono) for k in kills)})
        t = u
    during = [at for at in bound_at if started <= at <= stopped]
    points = [started, *during, stopped]
    gaps = [b - a for a, b in itertools.pairwise(points)]
    return {"per_interval": rows, "longest_without_binding_s": round(max(gaps, default=0.0), 2)}


def _stats(values: list[float | None]) -> dict[str, Any]:
    seen = [v for v in values if v is not None]
    return {"p50": round(statistics.median(seen), 2) if seen else None, "max": max(seen, default=None),
            "min": min(seen, default=None), "missing": len(values) - len(seen), "values": values}


def refused_bindings(gang: Gang, lives: Sequence[Life], tapped: Sequence[Any], first: float, last: float
                     ) -> list[str]:
    """Members of ``gang`` whose Binding reached the API server (the tap) in [first - 1 s, last] and was not
    made: no life of that pod (by the Binding's uid) bound to that node after it (the API server refused it:
    in this soak, because the churner deleted the member between the release's check and its Binding)."""
    names = set(gang.members)
    refused = []
    for r in tapped:
        if r.pod not in names or not first - 1.0 <= r.received <= last:
            continue
        made = any(life.name == r.pod and life.node == r.node and life.bound is not None
                   and life.bound >= r.received and (not r.uid or life.uid == r.uid) for life in lives)
        if not made:
            refused.append(r.pod)
    return refused


def partly_bound_reports(cp: ControlPlane, ns: str) -> set[str]:
    """The gangs (namespace/name) gang-extender reported partly bound (a ``GangPartiallyBound`` Event)."""
    items = cp.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    found = set()
    for event in items:
        if event.get("reason") == "GangPartiallyBound":
            words = str(event.get("message") or "").split()
            if len(words) > 1 and words[0] == "gang":
                found.add(words[1])
    return found


def _figures(ns: str, watch: UidWatch, work: Work, kills: list[Kill], exchanges: dict[str, list[Exchange]],
             tapped: Sequence[Any], node_cpu: float, started: float, stopped: float, ended: float,
             partly_bound_reported: set[str], kill_grace: float) -> dict[str, Any]:
    lives = watch.snapshot()
    partial, completed, not_whole = [], 0, []
    by_gang: dict[str, list[Life]] = {}
    names = {m: g.name for g in work.gangs.values() for m in g.members}
    for life in lives:
        if life.name in names:
            by_gang.setdefault(names[life.name], []).append(life)
    refused_stretches: list[dict[str, Any]] = []
    for gang in work.gangs.values():
        mine = by_gang.get(gang.name, [])
        stretches = partial_stretches(gang, mine, ended)
        for first, last in stretches:
            worst = judge_stretch(first, last, kills, kill_grace)
            if worst is not None:
                near = [op.member for op in work.churn if op.gang == gang.name and first - 1.0 <= op.at <= last]
                row = {"gang": gang.name, "size": gang.size, "kind": gang.kind, "from_s": round(first - started, 2),
                       **worst, "replaced_meanwhile": near}
                refused = refused_bindings(gang, mine, tapped, first, last)
                if refused:  # the documented case: the API server refused a Binding of the release
                    refused_stretches.append({**row, "refused": refused, "repaired": last < ended,
                                              "reported": f"{ns}/{gang.name}" in partly_bound_reported})
                else:
                    partial.append(row)
        if _whole(gang, mine):
            completed += 1
        elif gang.name not in work.deleted:
            not_whole.append({"gang": gang.name, "size": gang.size,
                              "bound": sum(1 for life in mine if life.bound is not None and life.deleted is None),
                              "pods (name, uid, created, bound, deleted; s from the start)": [
                                  (life.name, life.uid[:8], _rel(life.created, started), _rel(life.bound, started),
                                   _rel(life.deleted, started)) for life in sorted(mine, key=lambda x: x.created)],
                              "replaced": [(op.member, op.old_uid[:8], op.new_uid[:8], _rel(op.at, started))
                                           for op in work.churn if op.gang == gang.name],
                              "harness deletes": [(_rel(at, started), name, why) for at, name, why in work.deletes
                                                  if name in gang.members]})
    plain_unbound = [p for p in work.plain if p not in work.deleted and not any(
        life.name == p and life.bound is not None and life.deleted is None for life in lives)]
    bind_errors = [e for items in exchanges.values() for e in items if e.verb == "bind" and e.error]
    cut = [{"kill": k.number, "aimed": k.aimed, "cut": k.cut,
            "whole_after_kill_s": {g: _whole_after(work.gangs[g], by_gang.get(g, []), k) for g, _, _ in k.cut}}
           for k in kills if k.cut]
    return {
        "gangs": len(work.gangs), "gangs_podgroup": sum(g.kind == "podgroup" for g in work.gangs.values()),
        "gangs_gated": sum(g.gated is not None for g in work.gangs.values()),
        "gangs_completed": completed, "gangs_deleted_whole": len([g for g in work.deleted if g in work.gangs]),
        "gangs_not_whole_at_end": not_whole, "plain_pods": len(work.plain), "plain_not_bound_at_end": plain_unbound,
        "pods_created": len(lives), "bindings": sum(1 for life in lives if life.bound is not None),
        "replaced": len(work.churn), "replaced_while_held": sum(op.held for op in work.churn),
        "gangs_with_replacements": len({op.gang for op in work.churn}),
        "replace_conflicts": work.churn_conflicts,
        "vanished_recreated": [(round(at - started, 2), pod, gone[:8], again[:8])
                               for at, pod, gone, again in work.vanished],
        "kills": len(kills), "aimed": sum(k.aimed for k in kills), "releases_cut": cut,
        "takeover_scheduler_s": _stats([k.scheduler_s for k in kills]),
        "takeover_extender_s": _stats([k.extender_s for k in kills]),
        "takeover_first_bind_s": _stats([k.first_bind_s for k in kills]),
        "partial_gangs": partial, "partial_refused": refused_stretches,
        "partial_refused_not_repaired_or_not_reported": [
            r for r in refused_stretches if not (r["repaired"] and r["reported"])],
        "overcommits": _overcommits(lives, node_cpu),
        **zombie_binds(ns, lives, tapped, exchanges),
        "bind_requests": sum(1 for items in exchanges.values() for e in items if e.verb == "bind"),
        "bind_requests_answered_error": len(bind_errors),
        "filters": sum(1 for items in exchanges.values() for e in items if e.verb == "filter"),
        "activity": _activity(lives, exchanges, work.churn, kills, started, stopped),
    }


def _rel(at: float | None, started: float) -> float | None:
    return None if at is None else round(at - started, 2)


def _whole(gang: Gang, lives: Sequence[Life]) -> bool:
    """Whether ``size`` members of the gang were bound at once at some moment (bound members are deleted
    only with the whole gang)."""
    return sum(1 for life in lives if life.bound is not None) >= gang.size


def _whole_after(gang: Gang, lives: Sequence[Life], kill: Kill) -> float | None:
    """Seconds from the kill to the gang's last member bound (None: never whole)."""
    seen = sorted(life.bound for life in lives if life.bound is not None)
    return round(seen[gang.size - 1] - kill.at_mono, 2) if len(seen) >= gang.size else None


def problems(figures: dict[str, Any]) -> list[str]:
    """The invariants ``figures`` break (empty: none)."""
    found = [f"{key}: {figures[key]}" for key in (
        "partial_gangs", "partial_refused_not_repaired_or_not_reported", "overcommits", "overcommits_sampled",
        "overcommitted_nodes_at_end", "zombies", "untapped",
        "gangs_not_whole_at_end", "plain_not_bound_at_end", "feeder_errors", "unplanned_restarts",
        "pod_deletes_not_by_the_harness", "bindings_not_by_gang_extender") if figures.get(key)]
    if figures["gangs_completed"] == 0:
        found.append("no gang completed")
    if figures["watch_error"]:
        found.append(f"pod watch: {figures['watch_error']}")
    for key in ("takeover_scheduler_s", "takeover_extender_s", "takeover_first_bind_s"):
        if figures[key]["missing"]:
            found.append(f"{key}: no takeover seen after {figures[key]['missing']} kill(s)")
    return found


def summary(figures: dict[str, Any]) -> str:
    """The headline figures on one line."""
    return (f"{figures['gangs_completed']} gangs completed of {figures['gangs']} ({figures['gangs_deleted_whole']} "
            f"deleted whole, {len(figures['gangs_not_whole_at_end'])} not whole at the end), "
            f"{figures['replaced']} members replaced ({figures['replaced_while_held']} while held; "
            f"{len(figures.get('vanished_recreated', []))} vanished after their re-creation, created again), "
            f"{figures['kills']} kills ({len(figures['releases_cut'])} cut a release), "
            f"partial {len(figures['partial_gangs'])} (+{len(figures['partial_refused'])} where the API server "
            f"refused a Binding, {sum(r['repaired'] and r['reported'] for r in figures['partial_refused'])} of "
            f"them reported and repaired), over-commits {len(figures['overcommits'])}, "
            f"zombie binds {len(figures['zombies'])} (posthumous {len(figures['posthumous'])}), "
            f"takeover first bind p50 {figures['takeover_first_bind_s']['p50']} / max "
            f"{figures['takeover_first_bind_s']['max']} s; longest without a binding "
            f"{figures['activity']['longest_without_binding_s']} s")


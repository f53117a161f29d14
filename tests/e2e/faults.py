"""Fault scenarios against a real control plane, shared by tests/e2e/test_faults.py (short runs, part of
``make test``) and hack/faults.py (``make faults``, the long runs whose figures docs/reliability.md reports).

Each scenario returns a dict of figures; the callers assert on them.

- ``kill_during_gangs``: gangs keep arriving while gang-extender is ``kill -9``-ed at random moments
  and restarted; afterwards every gang must be bound whole, no pod bound twice or to a node the
  extender did not answer, no bind the extender answered OK missing from the API.
- ``apiserver_restart``: kube-apiserver is SIGKILLed and restarted while gangs wait; /readyz must show
  503 while a watch is broken and 200 once relisted; the waiting gangs then complete.
- ``bind_refused_mid_gang``: a ValidatingAdmissionPolicy denies ``pods/binding`` for one member of a
  gang at the moment the quorum is released; the refusal must be reported (Event ``GangBindFailed``,
  metric ``gang_extender_gangs_bind_errors_total``), the gang told partly bound (Event
  ``GangPartiallyBound``, metric ``gang_extender_gangs_partially_bound_total``), the other members stay
  bound, and the refused one binds once the policy is lifted.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controlplane import ApiError, ControlPlane, wait_for
from support import Extender, Sampler, bound, create, events, overcommitted_nodes, pod, pod_spec, pods

Log = Callable[[str], None]
ANNOTATION_GROUP = "gang-extender.io/group"
ANNOTATION_MIN = "gang-extender.io/min-count"


def _gang_pods(ns: str, name: str, size: int, selector: dict[str, str], cpu: str = "1") -> list[dict[str, Any]]:
    spec = pod_spec(cpu=cpu, selector=selector)
    annotations = {ANNOTATION_GROUP: name, ANNOTATION_MIN: str(size)}
    return [pod(ns, f"{name}-{i}", spec, annotations=annotations) for i in range(size)]


def recorded_binds(record_path: Path) -> list[tuple[str, str, str]]:
    """(namespace/name, node, error) of every recorded bind reply; a line cut short by kill -9 is skipped."""
    binds = []
    if not record_path.exists():
        return binds
    for line in record_path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        request, reply = entry.get("request"), entry.get("reply")
        if entry.get("verb") == "bind" and entry.get("status") == 200 and isinstance(request, dict):
            binds.append((f"{request['PodNamespace']}/{request['PodName']}", request["Node"], reply["Error"]))
    return binds


def binding_figures(cp: ControlPlane, ns: str, sampler: Sampler, record_path: Path, gangs: dict[str, int]
                    ) -> dict[str, Any]:
    """Partial gangs, double bindings (a pod seen on two nodes, or answered OK for two nodes), lost bindings
    (answered OK but not bound in the API), pods not bound, over-committed nodes."""
    final = bound(cp, ns)
    seen: dict[str, set[str]] = {}
    for _, sample in sampler.samples:
        for name, node in sample.items():
            seen.setdefault(name, set()).add(node)
    answered_ok: dict[str, set[str]] = {}
    for key, node, error in recorded_binds(record_path):
        namespace, _, name = key.partition("/")
        if namespace == ns and not error:
            answered_ok.setdefault(name, set()).add(node)
    return {
        "gangs": len(gangs),
        "pods": sum(gangs.values()),
        "gangs_bound_whole": sum(1 for g, n in gangs.items() if sum(1 for p in final if p.startswith(g + "-")) == n),
        "pods_not_bound": sum(gangs.values()) - len(final),
        "partial_gangs": sorted(g for g, n in gangs.items() if sampler.partial(g + "-", n)),
        "double_bindings": sorted(p for p, nodes in seen.items() if len(nodes) > 1)
        + sorted(p for p, nodes in answered_ok.items() if len(nodes) > 1),
        "lost_bindings": sorted(p for p, nodes in answered_ok.items() if final.get(p) not in nodes),
        "overcommitted_nodes": overcommitted_nodes(cp),
        "bind_ok_replies": sum(len(v) for v in answered_ok.values()),
    }


def partial_seconds(sampler: Sampler, gang: str, size: int) -> float:
    """The longest time the gang was seen with some but not all members bound."""
    return round(max((last - first for first, last in sampler.partial_runs(gang + "-", size)), default=0.0), 1)


def partial_while_up(runs: list[tuple[float, float]], outages: list[tuple[float, float]]) -> float:
    """The longest time a gang stayed partial while the extender was up: a run that an outage
    (killed, ready again) overlaps counts only from the moment the extender was ready again (nothing
    can bind the rest of a release while it is down); any other run counts whole."""
    longest = 0.0
    for first, last in runs:
        readies = [ready for killed, ready in outages if killed <= last and ready >= first]
        longest = max(longest, last - max([first, *readies]))
    return round(longest, 1)


# ------------------------------------------------------------------------------------- kill -9
def kill_during_gangs(cp: ControlPlane, ext: Extender, ns: str, *, kills: int, seed: int, log: Log,
                      nodes: int = 12, converge_seconds: float = 180.0) -> dict[str, Any]:
    """One new gang per round, 2..6 members. Even rounds race: all but the last member created at once,
    the last within 2 s, ``kill -9`` at an independent random moment within 2.5 s. Odd rounds hold: the
    members cannot all be placed yet, so binds are held at the barrier when the kill comes, and the
    missing node is added after the restart. Each kill is followed by a restart after up to 1 s."""
    rng = random.Random(seed)
    cp.create_namespace(ns)
    selector = {"e2e-scenario": ns}
    cp.add_nodes(nodes, cpu="8", labels=selector, prefix=f"{ns}-n")
    gangs: dict[str, int] = {}
    kills_with_held_binds = 0
    interrupted: set[str] = set()
    downtime: list[float] = []
    outages: list[tuple[float, float]] = []  # (killed, ready again)
    started = time.monotonic()
    with Sampler(cp, ns) as sampler:
        for round_ in range(kills):
            name, size = f"g{round_}", rng.randint(2, 6)
            gangs[name] = size
            held = round_ % 2 == 1
            if held:
                # Binds held for sure: the members repel each other (pod anti-affinity, which the
                # extender does not evaluate) and have one node too few, so size-1 binds wait at the
                # barrier; the missing node comes after the restart.
                own = {"faults-held": f"{ns}-{name}"}  # not the shared selector: other gangs stay off
                cp.add_nodes(size - 1, cpu="8", labels=own, prefix=f"{ns}-{name}-n")
                spec = pod_spec(cpu="1", selector=own, anti_affinity_label=name)
                annotations = {ANNOTATION_GROUP: name, ANNOTATION_MIN: str(size)}
                members = [pod(ns, f"{name}-{i}", spec, {"anti": name}, annotations) for i in range(size)]
                create(cp, *members)
                with contextlib.suppress(TimeoutError):
                    wait_for(lambda: ext.metrics().get("gang_extender_held_binds", 0) >= 1, timeout=10)
                time.sleep(rng.uniform(0.0, 1.5))
                last_at, kill_at = 0.0, 1.0
            else:
                members = _gang_pods(ns, name, size, selector)
                create(cp, *members[:-1])
                # the last member and the kill at independent random moments: the kill lands before the
                # quorum, around the release, or after the gang is bound
                last_at, kill_at, t0 = rng.uniform(0.0, 2.0), rng.uniform(0.0, 2.5), time.monotonic()
                if last_at < kill_at:
                    time.sleep(max(0.0, last_at - (time.monotonic() - t0)))
                    create(cp, members[-1])
                time.sleep(max(0.0, kill_at - (time.monotonic() - t0)))
            with contextlib.suppress(OSError, ValueError):
                kills_with_held_binds += ext.metrics().get("gang_extender_held_binds", 0) > 0
            killed = time.monotonic()
            ext.kill()
            # Bindings in flight finish (or not) without the extender: a gang caught between 0 and all of
            # its members bound right after the kill was being released when the process died.
            now_bound = bound(cp, ns)
            for gang, count in gangs.items():
                placed = sum(1 for p in now_bound if p.startswith(gang + "-"))
                if 0 < placed < count:
                    interrupted.add(gang)
            if last_at >= kill_at:
                create(cp, members[-1])  # created while the extender is down
            down = time.monotonic()
            time.sleep(rng.uniform(0.0, 1.0))
            ext.start()
            downtime.append(time.monotonic() - down)
            outages.append((killed, time.monotonic()))
            if held:
                cp.add_nodes(1, cpu="8", labels=own, prefix=f"{ns}-{name}-x")
            log(f"[faults] kill {round_ + 1}/{kills}: gang {name} ({size}); {len(bound(cp, ns))} pods bound so far")
        total = sum(gangs.values())
        wait_for(lambda: len(bound(cp, ns)) == total, timeout=converge_seconds, interval=0.5,
                 what=f"all {total} pods of {len(gangs)} gangs bound")
        converged = time.monotonic()
        time.sleep(1.0)
    figures = binding_figures(cp, ns, sampler, ext.record_path, gangs)
    # A gang caught mid-release is partial while the extender is down: Kubernetes binds one pod per call
    # and no process can finish the release meanwhile. What must not happen is that it stays partial once
    # the extender is back: with --release-journal the restarted extender binds the rest before it is
    # ready. Partial gang = partial for longer than the sampler's grace (2 s) while the extender was up.
    runs = {g: sampler.partial_runs(g + "-", size) for g, size in gangs.items()}
    while_up = {g: partial_while_up(r, outages) for g, r in runs.items() if r}
    figures.update(partial_gangs=sorted(g for g, seconds in while_up.items() if seconds > 2.0),
                   partial_seen=sorted(while_up),
                   partial_seconds_while_up=while_up)
    figures.update(kills=kills, kills_with_held_binds=int(kills_with_held_binds),
                   gangs_caught_mid_release=sorted(interrupted),
                   partial_seconds={g: partial_seconds(sampler, g, gangs[g]) for g in figures["partial_seen"]},
                   extender_starts=ext.starts,
                   max_restart_seconds=round(max(downtime), 2), seconds=round(converged - started, 1))
    return figures


# ------------------------------------------------------------------------- kill -9 inside releases
def kill_mid_release(cp: ControlPlane, ext: Extender, ns: str, *, rounds: int, log: Log, size: int = 6
                     ) -> dict[str, Any]:
    """kill -9 aimed inside a release: one gang of ``size`` per round; the extender binds a released
    quorum one Binding at a time (``--bind-parallelism 1``, a release then takes tens of milliseconds)
    and is killed the moment a poll sees the gang's first member bound. A round whose gang is partly
    bound right after the kill has cut a release. The extender restarts at once; figures: how long each
    such gang stayed partial after the extender was ready again (with the release journal: it finished
    the release before turning ready) and in total."""
    cp.create_namespace(ns)
    selector = {"e2e-scenario": ns}
    cp.add_nodes(rounds * size // 8 + 2, cpu="8", labels=selector, prefix=f"{ns}-n")
    normal_args = list(ext.args)
    ext.stop()
    ext.args = [*normal_args, "--bind-parallelism", "1"]
    ext.start()
    gangs: dict[str, int] = {}
    cut: dict[str, int] = {}  # gang -> members bound right after the kill
    whole_after_ready: dict[str, float] = {}
    outages: list[tuple[float, float]] = []
    try:
        with Sampler(cp, ns) as sampler:
            for round_ in range(rounds):
                name = f"m{round_}"
                gangs[name] = size
                create(cp, *_gang_pods(ns, name, size, selector))
                wait_for(lambda name=name: bool(bound(cp, ns, name + "-")), timeout=60, interval=0.005,
                         what=f"first member of {name} bound")
                killed = time.monotonic()
                ext.kill()
                placed = len(bound(cp, ns, name + "-"))
                if placed < size:
                    cut[name] = placed
                ext.start()
                ready = time.monotonic()
                outages.append((killed, ready))
                wait_for(lambda name=name: len(bound(cp, ns, name + "-")) == size, timeout=120, interval=0.05,
                         what=f"gang {name} whole")
                if name in cut:
                    whole_after_ready[name] = round(max(time.monotonic() - ready, 0.0), 2)
                log(f"[faults] mid-release kill {round_ + 1}/{rounds}: {name} had {placed}/{size} bound at the "
                    f"kill; whole {whole_after_ready.get(name, 0.0)} s after the restart")
            time.sleep(1.0)
    finally:
        ext.stop()
        ext.args = normal_args
        ext.start()
    figures = binding_figures(cp, ns, sampler, ext.record_path, gangs)
    runs = {g: sampler.partial_runs(g + "-", n) for g, n in gangs.items()}
    while_up = {g: partial_while_up(r, outages) for g, r in runs.items() if r}
    figures.update(rounds=rounds, releases_cut=cut, whole_after_ready_seconds=whole_after_ready,
                   partial_gangs=sorted(g for g, seconds in while_up.items() if seconds > 2.0),
                   partial_seconds_while_up=while_up,
                   partial_seconds={g: partial_seconds(sampler, g, gangs[g]) for g in cut},
                   resumed_events=len(events(cp, ns, "GangReleaseResumed")))
    return figures


# ------------------------------------------------------------------------------- API server restart
class ReadyzPoller:
    """Samples GET /readyz every 100 ms: (monotonic time, status) with 0 for no answer."""

    def __init__(self, ext: Extender) -> None:
        self.ext = ext
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ReadyzPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            status = 0
            try:
                with urllib.request.urlopen(self.ext.url + "/readyz", timeout=2, context=self.ext.tls_context) as r:
                    status = r.status
            except urllib.error.HTTPError as exc:
                status = exc.code
                exc.close()
            except OSError:
                status = 0
            self.samples.append((time.monotonic(), status))
            self._stop.wait(0.1)


def apiserver_restart(cp: ControlPlane, ext: Extender, ns: str, *, restarts: int, log: Log,
                      down_seconds: float = 5.0) -> dict[str, Any]:
    """Per restart: a gang of 4 with 3 pods (waiting for quorum) and a gang of 3 that does not fit yet
    (waiting for capacity) are pending; kube-apiserver is SIGKILLed and restarted; then the 4th pod and
    a node are added and both gangs must bind."""
    cp.create_namespace(ns)
    gangs: dict[str, int] = {}
    outages: list[dict[str, Any]] = []
    relists_before = ext.metrics().get('gang_extender_watch_relists_total{resource="pods"}', 0)
    with Sampler(cp, ns) as sampler, ReadyzPoller(ext) as poller:
        for round_ in range(restarts):
            selector = {"e2e-scenario": ns, "round": str(round_)}  # each round on its own node(s)
            cp.add_nodes(1, cpu="4", labels=selector, prefix=f"{ns}-r{round_}-n")
            quorum, capacity = f"q{round_}", f"c{round_}"
            gangs[quorum], gangs[capacity] = 4, 3
            quorum_pods = _gang_pods(ns, quorum, 4, selector, cpu="500m")
            create(cp, *quorum_pods[:3], *_gang_pods(ns, capacity, 3, selector, cpu="1500m"))
            time.sleep(3.0)  # both gangs seen and waiting
            assert bound(cp, ns, quorum) == {} and bound(cp, ns, capacity) == {}
            # ControlPlane.restart_apiserver() is stop + start; the two halves apart give a known outage.
            killed = time.monotonic()
            cp.stop_apiserver()  # SIGKILL
            time.sleep(down_seconds)
            starting = time.monotonic()
            cp.start_apiserver()
            wait_for(lambda: bool(poller.samples) and poller.samples[-1][1] == 200, timeout=60,
                     what="/readyz 200 after the restart")
            ready_again = time.monotonic()
            down = [s for t, s in poller.samples if killed <= t <= starting]
            first_503 = next((t for t, s in poller.samples if t >= killed and s == 503), None)
            outages.append({
                "apiserver_down_seconds": round(starting - killed, 1),
                "readyz_samples_while_down": len(down),
                "readyz_503_while_down": down.count(503),
                "readyz_200_while_down_after_first_503": sum(
                    1 for t, s in poller.samples if first_503 is not None and first_503 <= t <= starting and s == 200),
                "first_503_after_seconds": None if first_503 is None else round(first_503 - killed, 2),
                "ready_again_after_start_seconds": round(ready_again - starting, 1)})
            log(f"[faults] apiserver restart {round_ + 1}/{restarts}: {outages[-1]}")
            create(cp, quorum_pods[3])
            cp.add_nodes(1, cpu="4", labels=selector, prefix=f"{ns}-r{round_}-extra")
            total = sum(gangs.values())
            # kube-scheduler's own informers back off too after repeated API server failures (client-go:
            # up to minutes); the gangs bind once it relists pods, whatever the extender does.
            wait_for(lambda: len(bound(cp, ns)) == total, timeout=240, interval=0.5,  # noqa: B023
                     what=f"gangs {quorum} and {capacity} bound after the restart")
            outages[-1]["gangs_bound_after_seconds"] = round(time.monotonic() - ready_again, 1)
            outages[-1]["readyz_not_200_after_recovery"] = sum(
                1 for t, s in poller.samples if t > ready_again and s != 200)
        time.sleep(1.0)
    figures = binding_figures(cp, ns, sampler, ext.record_path, gangs)
    figures.update(restarts=restarts, outages=outages, extender_starts=ext.starts,
                   pod_relists=ext.metrics().get('gang_extender_watch_relists_total{resource="pods"}', 0)
                   - relists_before)
    return figures


# ---------------------------------------------------------------------------- bind refused mid-gang
DENY_POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "e2e-deny-binding"},
    "spec": {"failurePolicy": "Fail",
             "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                     "operations": ["CREATE"], "resources": ["pods/binding"]}]},
             "validations": [{"expression": "!object.metadata.name.endsWith('-refused')",
                              "message": "binding refused by e2e-deny-binding (fault injection)"}]}}
DENY_BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "e2e-deny-binding"},
    "spec": {"policyName": "e2e-deny-binding", "validationActions": ["Deny"]}}


def _policy_enforced(cp: ControlPlane, ns: str) -> bool:
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "probe-refused", "namespace": ns},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "nowhere"}}
    try:
        cp.request("POST", f"/api/v1/namespaces/{ns}/pods/probe-refused/binding?dryRun=All", binding)
    except ApiError as exc:
        return "e2e-deny-binding" in exc.body
    return False


def bind_refused_mid_gang(cp: ControlPlane, ext: Extender, ns: str, *, log: Log) -> dict[str, Any]:
    cp.create_namespace(ns)
    selector = {"e2e-scenario": ns}
    cp.add_nodes(2, cpu="4", labels=selector, prefix=f"{ns}-n")
    create(cp, DENY_POLICY, DENY_BINDING)
    wait_for(lambda: _policy_enforced(cp, ns), timeout=30, what="the ValidatingAdmissionPolicy to deny bindings")
    errors_before = ext.metrics().get("gang_extender_gangs_bind_errors_total", 0)
    partial_before = ext.metrics().get("gang_extender_gangs_partially_bound_total", 0)
    spec = pod_spec(cpu="1", selector=selector)
    annotations = {ANNOTATION_GROUP: "r", ANNOTATION_MIN: "4"}
    names = ["r-0", "r-1", "r-2", "r-3-refused"]
    with Sampler(cp, ns) as sampler:
        create(cp, *(pod(ns, n, spec, annotations=annotations) for n in names))
        wait_for(lambda: bool(events(cp, ns, "GangBindFailed")), timeout=60, what="a GangBindFailed event")
        time.sleep(3.0)  # kube-scheduler retries the refused member; it stays refused
        bound_while_denied = sorted(bound(cp, ns))
        failed_events = events(cp, ns, "GangBindFailed")
        bind_errors = ext.metrics().get("gang_extender_gangs_bind_errors_total", 0) - errors_before
        partial_metric = ext.metrics().get("gang_extender_gangs_partially_bound_total", 0) - partial_before
        partial_events = events(cp, ns, "GangPartiallyBound")
        cp.request("DELETE", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/e2e-deny-binding")
        cp.request("DELETE", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/e2e-deny-binding")
        lifted = time.monotonic()
        wait_for(lambda: len(bound(cp, ns)) == 4, timeout=90, interval=0.5, what="all 4 bound once the policy is gone")
        completed_after = time.monotonic() - lifted
    final = bound(cp, ns)
    figures = {
        "bound_while_denied": bound_while_denied,
        "gang_bind_failed_events": len(failed_events),
        "event_example": failed_events[0]["message"] if failed_events else "",
        "event_pods": sorted({e["involvedObject"]["name"] for e in failed_events}),
        "bind_errors_metric": bind_errors,
        "partially_bound_metric": partial_metric,
        "partially_bound_events": [e["message"] for e in partial_events],
        "members_bound_at_the_end": len(final),
        "seconds_to_complete_after_policy_removed": round(completed_after, 1),
        "pods_on_two_nodes": sorted(p for p in final if len({s.get(p) for _, s in sampler.samples} - {None}) > 1),
        "overcommitted_nodes": overcommitted_nodes(cp),
    }
    log(f"[faults] bind refused mid-gang: {figures}")
    return figures


# ------------------------------------------------------------------------ release cut by a crash
def release_cut_by_crash(cp: ControlPlane, ext: Extender, ns: str, *, log: Log) -> dict[str, Any]:
    """The exact state kill -9 leaves when it lands inside a release, made on purpose: the extender is
    stopped; a gang of 4 exists; its release journal says the quorum was released to 4 nodes; only the
    first Binding reached the API server. The members carry a schedulerName no scheduler serves, so
    nothing but the journal can bind the other three. The extender is started again: before /readyz
    turns 200 it must have bound them to the journal's nodes (and only them: a member re-created after
    the crash is a different pod and stays pending)."""
    cp.create_namespace(ns)
    selector = {"e2e-scenario": ns}
    nodes = sorted(cp.add_nodes(4, cpu="4", labels=selector, prefix=f"{ns}-n"))
    spec = {**pod_spec(cpu="1", selector=selector), "schedulerName": "e2e-no-scheduler"}
    annotations = {ANNOTATION_GROUP: "cut", ANNOTATION_MIN: "4"}
    ext.stop()
    create(cp, *(pod(ns, f"cut-{i}", spec, annotations=annotations) for i in range(4)))
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(cp, ns)}
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "cut-0", "namespace": ns},
               "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[0]}}
    cp.request("POST", f"/api/v1/namespaces/{ns}/pods/cut-0/binding", binding)
    # cut-3 was deleted and re-created after the crash: same name, new uid.
    cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/cut-3?gracePeriodSeconds=0")
    wait_for(lambda: "cut-3" not in {p["metadata"]["name"] for p in pods(cp, ns)}, timeout=30, what="cut-3 gone")
    create(cp, pod(ns, "cut-3", spec, annotations=annotations))
    journal = {"release": 1, "gang": f"{ns}/cut",
               "pods": [[ns, f"cut-{i}", uids[f"cut-{i}"], nodes[i]] for i in range(4)]}
    with ext.journal_path.open("ab") as out:
        out.write(json.dumps(journal).encode() + b"\n")
    ext.start()
    at_ready = bound(cp, ns, "cut-")
    log(f"[faults] release cut by a crash: bound when the extender turned ready: {at_ready}")
    time.sleep(1.0)
    return {
        "bound_at_ready": at_ready,
        "bound_after": bound(cp, ns, "cut-"),
        "journal_nodes": {f"cut-{i}": nodes[i] for i in range(4)},
        "resumed_metric": ext.metrics().get("gang_extender_gangs_releases_resumed_total", 0.0),
        "resumed_events": [(e["involvedObject"]["name"], e["message"]) for e in events(cp, ns, "GangReleaseResumed")],
        "unfinished_after": _unfinished(ext.journal_path),
    }


def _unfinished(path: Path) -> list[int]:
    started: set[int] = set()
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "done" in record:
            started.discard(record["done"])
        else:
            started.add(record["release"])
    return sorted(started)

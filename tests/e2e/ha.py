"""Killing the leader of a highly available gang-scheduler, shared by tests/e2e/test_ha.py (a short run,
part of ``make test``) and hack/ha.py (``make ha``, the long run whose figures docs/reliability.md reports).

``leader_kills``: two ``pairs.Pair`` (kube-scheduler + its own gang-extender, as the two pods of
manifests/ha) on one local control plane. Each kube-scheduler elects on the Lease
kube-system/kube-scheduler (4 s / 3 s / 1 s); each extender runs with ``--leader-election on`` on the
Lease ``<ns>/gang-extender`` (4 s / 2.5 s / 0.5 s) and binds a released quorum one Binding at a time
(``--bind-parallelism 1``), so that a kill aimed at a release lands inside it. A ``pairs.Feeder`` keeps
creating gangs and plain pods on a few nodes and deleting old ones. Each round ``kill -9``s both
processes of the pair whose kube-scheduler leads, at a random moment or aimed (the pod watch shows a
gang's first member bound and not its last), waits until the other pair took over (its kube-scheduler
holds the Lease; with election on, its extender holds its own) and restarts the killed pair, which
becomes the standby.

Figures (a dict; ``problems`` says which break an invariant):

- takeover per kill: kill → the new kube-scheduler's ``acquireTime``; kill → the new extender's Lease
  ``acquireTime``; kill → the first pod the new leader bound (the first binding the pod watch saw from
  0.5 s after the kill on). p50 and max of each;
- double bindings: a pod answered OK for two different nodes (both extenders' recordings, every life);
  lost bindings: answered OK for a node the pod was never bound to;
- over-commit: the pod watch replayed in the API server's order (bindings add a pod's cpu to its node,
  deletions take it away): every moment a node's pods requested more cpu than it has;
- partial gangs: a gang is partly bound from its first member's binding to its last; every stretch of
  that time must end within 5 s, or within the takeover time (kill → first bind) + 5 s when a kill
  began it (a stretch ends at the next kill or when the gang is whole). Over that: partial;
- pods left unbound at the end, releases a kill cut, processes that exited without being killed.

Times are the test process's: ``time.time()`` to compare with Lease times and the recordings (one
machine, one clock), ``time.monotonic()`` with the pod watch.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane import ApiError, ControlPlane, wait_for
from observe import Binding, PodWatch
from pairs import SCHEDULER_LEASE, Feeder, LeaseState, Log, Pair, lease, scheduler_election
from support import overcommitted_nodes, pods

from extender.model.quantity import to_units

EXTENDER_LEASE = "gang-extender"
PARTIAL_GRACE = 5.0  # seconds a gang may stay partly bound beyond the takeover time


@dataclass
class Kill:
    number: int
    aimed: bool
    leader: str            # the pair killed
    at_wall: float
    at_mono: float
    cut: list[tuple[str, int, int]] = field(default_factory=list)  # (gang, bound, members) right after the kill
    scheduler_s: float | None = None   # kill -> the new kube-scheduler's acquireTime
    extender_s: float | None = None    # kill -> the new extender's acquireTime
    first_bind_s: float | None = None  # kill -> the first pod the new leader bound (pod watch)

    def takeover(self) -> float:
        if self.first_bind_s is not None:
            return self.first_bind_s
        return max(self.scheduler_s or 0.0, self.extender_s or 0.0)


def extender_args(namespace: str, election: bool) -> list[str]:
    args = ["--gang-timeout-seconds", "12", "--gang-backoff-seconds", "2", "--bind-parallelism", "1"]
    if election:
        args += ["--leader-election", "on", "--lease-namespace", namespace, "--lease-name", EXTENDER_LEASE,
                 "--lease-duration-seconds", "4", "--lease-renew-deadline-seconds", "2.5",
                 "--lease-retry-period-seconds", "0.5"]
    return args


def leader_kills(cp: ControlPlane, ns: str, workdir: Path, *, kills: int, seed: int, log: Log,
                 election: bool = True, nodes: int = 6, node_cpu: int = 4, converge_seconds: float = 120.0
                 ) -> dict[str, Any]:
    rng = random.Random(seed)
    cp.create_namespace(ns)
    selector = {"e2e-scenario": ns}
    cp.add_nodes(nodes, cpu=str(node_cpu), labels=selector, prefix=f"{ns}-n")
    args = extender_args(ns, election)
    pairs = [Pair(cp, label, workdir / label, args, scheduler_election(4, 3, 1), log) for label in ("a", "b")]
    done: list[Kill] = []
    unplanned: list[str] = []
    started = time.monotonic()
    try:
        for pair in pairs:
            pair.start()
        with PodWatch(cp, ns) as watch, Feeder(cp, ns, selector, seed=seed, capacity_cpu=nodes * node_cpu) as feeder:
            for number in range(kills):
                kill = _kill_round(cp, ns, pairs, watch, feeder, number, aimed=number % 2 == 1, rng=rng,
                                   election=election, unplanned=unplanned, log=log)
                done.append(kill)
            feeder.stop()
            _converge(watch, feeder, converge_seconds, log)
            ended = time.monotonic()
            time.sleep(1.0)
    finally:
        for pair in pairs:
            pair.stop()
    _first_binds(done, watch)
    figures = _figures(cp, ns, watch, feeder, done, pairs, float(node_cpu), ended)
    figures.update(unplanned_restarts=unplanned, seconds=round(ended - started, 1),
                   pair_starts={p.label: p.starts for p in pairs}, extender_election=election,
                   watch_error=watch.error)
    return figures


def _converge(watch: PodWatch, feeder: Feeder, seconds: float, log: Log) -> None:
    """Until every live gang and plain pod is bound, else AssertionError after ``seconds``. The feeder
    creates work even when nothing whole can be deleted (while a takeover holds scheduling up), so the
    live pods may request more than the nodes hold when it stops: the oldest whole gangs and bound plain
    pods are still deleted to make room, as the feeder does, so the last gangs can be placed."""
    deadline = time.monotonic() + seconds
    while True:
        wanted = [m for name, size in feeder.live().items() for m in _members(name, size, feeder.plain)]
        try:
            watch.wait(lambda w, wanted=wanted: all(m in w.bindings for m in wanted),
                       timeout=min(2.0, max(deadline - time.monotonic(), 0.1)),
                       what=f"all {len(wanted)} live pods bound")
            return
        except AssertionError:
            if time.monotonic() >= deadline or watch.error:
                raise
        try:
            feeder.make_room()
        except ApiError as exc:  # the next round tries again
            log(f"[ha] making room at the end: {exc}")


def _members(name: str, size: int, plain: Sequence[str]) -> list[str]:
    return [name] if name in plain else [f"{name}-{i}" for i in range(size)]


def _leader(pairs: Sequence[Pair], unplanned: list[str], log: Log) -> Pair:
    """The pair whose kube-scheduler leads; a pair that died on its own is restarted (and reported)."""
    def one() -> bool:
        for pair in pairs:
            if not pair.alive():
                unplanned.append(f"{pair.label} at {time.monotonic():.1f}")
                log(f"[ha] pair {pair.label} exited without being killed: restarted")
                pair.kill()
                pair.start()
        return sum(p.leads() for p in pairs) == 1

    wait_for(one, timeout=60, interval=0.05, what="one leading kube-scheduler")
    return next(p for p in pairs if p.leads())


def _mid_release(watch: PodWatch, sizes: dict[str, int], armed: int) -> str | None:
    """A gang of 3 or more with some members bound, all of them after ``armed`` (watch order), not all."""
    counts: dict[str, int] = {}
    early: set[str] = set()
    for binding in watch.bindings.values():
        gang = binding.pod.rpartition("-")[0]
        if sizes.get(gang, 0) >= 3:
            counts[gang] = counts.get(gang, 0) + 1
            if binding.order <= armed:
                early.add(gang)
    return next((g for g, n in counts.items() if g not in early and n < sizes[g]), None)


def _changed(cp: ControlPlane, namespace: str, name: str, before: str, timeout: float) -> LeaseState | None:
    """The Lease once held by someone other than ``before`` (None if not within ``timeout``)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = lease(cp, namespace, name)
        if state is not None and state.holder and state.holder != before:
            return state
        time.sleep(0.05)
    return None


def _kill_round(cp: ControlPlane, ns: str, pairs: Sequence[Pair], watch: PodWatch, feeder: Feeder, number: int, *,
                aimed: bool, rng: random.Random, election: bool, unplanned: list[str], log: Log) -> Kill:
    leader = _leader(pairs, unplanned, log)
    if election:  # the extender Lease's holder before the kill must be the leading pair's extender
        wait_for(leader.extender_leads, timeout=60, interval=0.05, what=f"extender {leader.label} leading")
    scheduler_before = (lease(cp, *SCHEDULER_LEASE) or LeaseState("", 0, 0)).holder
    extender_before = (lease(cp, ns, EXTENDER_LEASE) or LeaseState("", 0, 0)).holder if election else ""
    if aimed:
        armed = max((b.order for b in watch.ordered()), default=0)
        try:
            watch.wait(lambda w: _mid_release(w, feeder.sizes(), armed) is not None, timeout=30,
                       what="a gang's first member bound")
        except AssertionError:
            log("[ha] no release seen within 30 s: killing anyway")
    else:
        time.sleep(rng.uniform(0.2, 3.0))
    kill = Kill(number + 1, aimed, leader.label, time.time(), time.monotonic())
    leader.kill()
    now = {p["metadata"]["name"]: bool(p["spec"].get("nodeName")) for p in pods(cp, ns)}
    for gang, size in feeder.sizes().items():  # some members bound, another one not (a gang being deleted:
        members = [now[m] for i in range(size) if (m := f"{gang}-{i}") in now]  # its rest is all bound)
        if any(members) and not all(members):
            kill.cut.append((gang, sum(members), size))
    taken = _changed(cp, *SCHEDULER_LEASE, scheduler_before, timeout=30)
    kill.scheduler_s = None if taken is None else round(taken.acquired - kill.at_wall, 2)
    if election:
        taken = _changed(cp, ns, EXTENDER_LEASE, extender_before, timeout=30)
        kill.extender_s = None if taken is None else round(taken.acquired - kill.at_wall, 2)
    time.sleep(rng.uniform(0.0, 1.0))
    leader.start()  # the standby now: the other pair's kube-scheduler holds the Lease
    log(f"[ha] kill {kill.number} ({'aimed' if aimed else 'random'}) of pair {leader.label}: cut {kill.cut}; "
        f"kube-scheduler took over after {kill.scheduler_s} s, extender after {kill.extender_s} s")
    return kill


def recorded_binds(path: Path) -> list[tuple[float, str, str, str]]:
    """(answered at, pod, node, Error) of every bind the extender answered (time.time() clock)."""
    found = []
    if not path.exists():
        return found
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by kill -9
        request, reply = entry.get("request"), entry.get("reply")
        if entry.get("verb") == "bind" and entry.get("status") == 200 and isinstance(request, dict):
            found.append((entry["arrival"] + entry["latency_seconds"], str(request.get("PodName")),
                          str(request.get("Node")), str((reply or {}).get("Error") or "")))
    return found


def _first_binds(kills: list[Kill], watch: PodWatch) -> None:
    """Each kill's first binding by the new leader: the first the pod watch saw from 0.5 s after the kill
    (earlier ones may be Bindings the killed extender sent just before it died; no one leads for
    seconds after a kill) to the next kill."""
    seen = sorted(b.seen for b in watch.ordered())
    for i, kill in enumerate(kills):
        until = kills[i + 1].at_mono if i + 1 < len(kills) else float("inf")
        first = next((at for at in seen if kill.at_mono + 0.5 < at < until), None)
        kill.first_bind_s = None if first is None else round(first - kill.at_mono, 2)


def _overcommits(watch: PodWatch, node_cpu: float) -> list[str]:
    """Moments (watch order) a node's bound pods requested more cpu than it has."""
    events: list[tuple[int, int, str, str, int]] = []  # (order, 0 bind / 1 delete, pod, node, millicores)
    for binding in watch.bindings.values():
        events.append((binding.order, 0, binding.pod, binding.node, binding.cpu))
        if binding.pod in watch.deleted:
            events.append((watch.deleted[binding.pod][0], 1, binding.pod, binding.node, binding.cpu))
    used: dict[str, int] = {}
    found = []
    for order, kind, pod, node, cpu in sorted(events):
        used[node] = used.get(node, 0) + (cpu if kind == 0 else -cpu)
        if kind == 0 and used[node] > to_units("cpu", str(node_cpu)):
            found.append(f"{node} at {used[node]}m after {pod} (event {order})")
    return found


def _partial_excess(first: float, last: float, kills: Sequence[Kill]) -> dict[str, float] | None:
    """A gang partly bound from ``first`` to ``last``: each stretch of it must end within 5 s, or within
    takeover + 5 s when a kill began it (a kill up to 1 s before ``first`` counts: a Binding sent just
    before it may land after). The worst stretch over its allowance, or None."""
    starts = [(first, PARTIAL_GRACE)]
    for kill in sorted(kills, key=lambda k: k.at_mono):
        if first - 1.0 <= kill.at_mono <= last:
            at = max(kill.at_mono, first)
            starts = [s for s in starts if s[0] < at] + [(at, kill.takeover() + PARTIAL_GRACE)]
    worst = None
    for i, (start, allowance) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else last
        if end - start > allowance and (worst is None or end - start - allowance > worst["excess"]):
            worst = {"seconds": round(end - start, 2), "allowed": round(allowance, 2),
                     "excess": round(end - start - allowance, 2), "partial_seconds": round(last - first, 2)}
    return worst


def _whole_after(gang: str, size: int, kill: Kill, bindings: dict[str, Binding]) -> float | None:
    """Seconds from the kill to the gang's last member bound (None: never whole)."""
    seen = [bindings[f"{gang}-{i}"].seen for i in range(size) if f"{gang}-{i}" in bindings]
    return round(max(seen) - kill.at_mono, 2) if len(seen) == size else None


def _stats(values: list[float | None]) -> dict[str, Any]:
    seen = [v for v in values if v is not None]
    return {"p50": round(statistics.median(seen), 2) if seen else None, "max": max(seen, default=None),
            "missing": len(values) - len(seen), "values": values}


def _figures(cp: ControlPlane, ns: str, watch: PodWatch, feeder: Feeder, kills: list[Kill], pairs: Sequence[Pair],
             node_cpu: float, ended: float) -> dict[str, Any]:
    answered: dict[str, set[str]] = {}
    answered_by: dict[str, set[str]] = {}
    for pair in pairs:
        for _, pod, node, error in recorded_binds(pair.record_path):
            if not error:
                answered.setdefault(pod, set()).add(node)
                answered_by.setdefault(pod, set()).add(pair.label)
    bindings = dict(watch.bindings)
    partial = []
    for gang, size in feeder.sizes().items():
        seen = [bindings[f"{gang}-{i}"].seen for i in range(size) if f"{gang}-{i}" in bindings]
        if seen:
            over = _partial_excess(min(seen), max(seen) if len(seen) == size else ended, kills)
            if over is not None:
                partial.append({"gang": gang, **over})
    live = feeder.live()
    unbound = [m for name, size in live.items() for m in _members(name, size, feeder.plain) if m not in bindings]
    return {
        "kills": len(kills), "aimed": sum(k.aimed for k in kills),
        "releases_cut": [{"kill": k.number, "aimed": k.aimed, "cut": k.cut,
                          "whole_after_kill_s": {g: _whole_after(g, size, k, bindings) for g, _, size in k.cut}}
                         for k in kills if k.cut],
        "takeover_scheduler_s": _stats([k.scheduler_s for k in kills]),
        "takeover_extender_s": _stats([k.extender_s for k in kills]),
        "takeover_first_bind_s": _stats([k.first_bind_s for k in kills]),
        "gangs": len(feeder.gangs), "plain_pods": len(feeder.plain), "pods_bound": len(bindings),
        "deleted": len(feeder.deleted), "pods_not_bound": unbound,
        "double_bindings": sorted(p for p, nodes in answered.items() if len(nodes) > 1),
        "lost_bindings": sorted(p for p, nodes in answered.items()
                                if p not in bindings or bindings[p].node not in nodes),
        "answered_ok_by_both_pairs": sorted(p for p, who in answered_by.items() if len(who) > 1),
        "overcommits": _overcommits(watch, node_cpu), "overcommitted_nodes_at_end": overcommitted_nodes(cp),
        "partial_gangs": partial, "feeder_errors": feeder.errors[:5],
    }


def problems(figures: dict[str, Any]) -> list[str]:
    """The invariants ``figures`` break (empty: none)."""
    found = [f"{key}: {figures[key]}" for key in ("double_bindings", "lost_bindings", "overcommits",
                                                  "overcommitted_nodes_at_end", "partial_gangs", "pods_not_bound",
                                                  "feeder_errors") if figures[key]]
    if figures["watch_error"]:
        found.append(f"pod watch: {figures['watch_error']}")
    for key in ("takeover_scheduler_s", "takeover_first_bind_s") + (
            ("takeover_extender_s",) if figures["extender_election"] else ()):
        if figures[key]["missing"]:
            found.append(f"{key}: no takeover seen after {figures[key]['missing']} kill(s)")
    return found

#!/usr/bin/env python3
"""How long one gang explanation holds the mirror lock, and what it does to a concurrent filter (in process).

The cluster: ``--nodes`` nodes (8, 16, 32 or 64 cpu, 4Gi a cpu, three zones; one in 100 has 8 GPUs),
each running one pod of a random size (seeded; on a GPU node it uses 7 of the 8 GPUs). The gang: a
Workload pod group of ``--members`` members (minCount = members) in five shapes (1 cpu; 4 cpu; 8 cpu
in zone-a; 16 cpu; 2 cpu + 1 GPU): the GPU members do not fit, so the gang waits for capacity and its
explanation plans the pending members and looks for the largest shortfall. One member is filtered
first, so the ledger tracks the gang (its place in the order is part of the explanation). Runtime:
``composition.from_snapshot``, as ``gang-extender serve --cluster-snapshot`` builds it.

Measured, per members count:

- ``hold``: the longest single hold of the mirror lock during one ``Engine.explain`` (what ``GET
  /explain`` computes) and one ``reporting.explained`` (the GangState publisher's call), recorded by
  a wrapper around the lock that times its outermost acquire/release in the explaining thread (its own
  Python acquire/release adds about a microsecond per nested acquire: ``--copy-phase`` times the copy
  with the plain lock);
- ``filter``: the latency of ``Engine.filter`` for a plain pod with a cached signature and 500
  NodeNames (kube-scheduler's share at 5,000 nodes), called 2 ms after the last answer from the main
  thread (serially, as kube-scheduler's scheduling cycle calls it), first alone, then while another
  thread runs explanations back to back; from the call, and from when it was due (2 ms after the last
  answer: this adds the wait for the GIL after the pause, which a request arriving on a socket has too).

    .venv/bin/python bench/explain_lock.py [--nodes 5000] [--members 300 1000] [--seconds 5]
    .venv/bin/python bench/explain_lock.py --profile      # + cProfile of one explanation
    .venv/bin/python bench/explain_lock.py --drain        # the gang draining (max wait 0 s)
    .venv/bin/python bench/explain_lock.py --copy-phase   # + explain's copy phase under the plain lock
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from extender.config import Settings
from extender.engine.requests import FilterArgs
from extender.wiring import composition
from extender.wiring.reporting import explained
from extender.wiring.runtime import Runtime

NAMESPACE = "bench"
SHAPES: tuple[tuple[str, str, dict[str, str], dict[str, str]], ...] = (
    ("1", "2Gi", {}, {}),
    ("4", "16Gi", {}, {}),
    ("8", "32Gi", {"topology.kubernetes.io/zone": "zone-a"}, {}),
    ("16", "64Gi", {}, {}),
    ("2", "8Gi", {}, {"nvidia.com/gpu": "1"}),
)


def node(i: int, rng: random.Random) -> dict[str, Any]:
    cpu = rng.choice((8, 16, 32, 64))
    allocatable = {"cpu": str(cpu), "memory": f"{cpu * 4}Gi", "pods": "110"}
    if i % 100 == 0:
        allocatable["nvidia.com/gpu"] = "8"
    labels = {"kubernetes.io/hostname": f"node-{i:05d}", "topology.kubernetes.io/zone": f"zone-{'abc'[i % 3]}"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i:05d}", "labels": labels},
            "status": {"allocatable": allocatable, "capacity": allocatable}}


def pod(name: str, cpu: str, memory: str, *, node_name: str = "", selector: dict[str, str] | None = None,
        extra: dict[str, str] | None = None, workload: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "default-scheduler", "containers": [
        {"name": "main", "image": "registry.k8s.io/pause:3.10",
         "resources": {"requests": {"cpu": cpu, "memory": memory, **(extra or {})}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if selector:
        spec["nodeSelector"] = selector
    if workload:
        spec["workloadRef"] = {"name": workload, "podGroup": "workers"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
            "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def cluster(nodes: int, members: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(every object of the snapshot, the gang's members)."""
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = []
    for i in range(nodes):
        n = node(i, rng)
        cpu = int(n["status"]["allocatable"]["cpu"])
        objects.append(n)
        used = rng.randrange(cpu)
        gpus = {"nvidia.com/gpu": "7"} if "nvidia.com/gpu" in n["status"]["allocatable"] else {}
        if used or gpus:
            objects.append(pod(f"running-{i:05d}", str(used), f"{used * 3}Gi", node_name=n["metadata"]["name"],
                               extra=gpus))
    objects.append({"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
                    "metadata": {"name": "train", "namespace": NAMESPACE},
                    "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": members}}}]}})
    gang = [pod(f"train-{i:04d}", cpu, memory, selector=selector, extra=extra, workload="train")
            for i, (cpu, memory, selector, extra) in ((i, SHAPES[i % len(SHAPES)]) for i in range(members))]
    return objects + gang, gang


class TimedLock:
    """The mirror's RLock, recording how long ``watched`` threads hold it (outermost acquire to release)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._depth = threading.local()
        self.watched: set[int] = set()
        self.holds: list[float] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = bool(self._inner.acquire(blocking, timeout))
        if got:
            depth = getattr(self._depth, "n", 0)
            if depth == 0:
                self._depth.start = time.perf_counter()
            self._depth.n = depth + 1
        return got

    def release(self) -> None:
        self._depth.n -= 1
        if self._depth.n == 0 and threading.get_ident() in self.watched:
            self.holds.append(time.perf_counter() - self._depth.start)
        self._inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def build(nodes: int, members: int, seed: int, drain: bool = False) -> tuple[Runtime, list[str], TimedLock]:
    objects, gang = cluster(nodes, members, seed)
    with tempfile.TemporaryDirectory(prefix="gang-explain-") as tmp:
        path = Path(tmp) / "snapshot.json"
        path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        runtime = composition.from_snapshot(Settings(cluster_snapshot=str(path), gang_timeout_seconds=3600,
                                                     max_wait_seconds=0 if drain else 300))
    lock = TimedLock(runtime.mirror.lock)
    runtime.mirror.lock = lock  # type: ignore[assignment]
    runtime.ledger.lock = lock  # type: ignore[assignment]  # the ledger shares the mirror's lock
    names = [f"node-{i:05d}" for i in range(nodes)]
    verdict = runtime.engine.filter(FilterArgs(pod=gang[0], node_names=names, nodes=None))
    assert not verdict.feasible, "the gang is meant to wait for capacity"
    for _ in range(3 if drain else 0):  # past its max wait of 0 s, the head gang drains (a sweep starts it)
        time.sleep(0.1)
        runtime.engine.sweep()
    return runtime, names, lock


def explain_once(runtime: Runtime) -> dict[str, Any]:
    (answer,) = runtime.engine.explain(NAMESPACE, "train")
    return answer


def holds(runtime: Runtime, lock: TimedLock, samples: int) -> tuple[list[float], list[float], list[float]]:
    """(longest hold per /explain, longest hold per published explanation, wall time per /explain), ms."""
    gang = next(iter(runtime.mirror.find_gangs(NAMESPACE, "train")))
    lock.watched = {threading.get_ident()}
    explain_holds, publish_holds, walls = [], [], []
    for _ in range(samples):
        lock.holds.clear()
        start = time.perf_counter()
        explain_once(runtime)
        walls.append((time.perf_counter() - start) * 1e3)
        explain_holds.append(max(lock.holds) * 1e3)
        lock.holds.clear()
        explained(runtime.ledger, runtime.mirror, gang)
        publish_holds.append(max(lock.holds) * 1e3)
    lock.watched = set()
    return explain_holds, publish_holds, walls


def copy_phase(runtime: Runtime, lock: TimedLock, samples: int) -> list[float]:
    """What ``GangLedger.explain`` does under the lock (facts, node records, ``ClusterMirror.capacity``),
    timed with the plain RLock back in place (the wrapper's Python acquire/release costs about a
    microsecond per nested acquire, and the copy phase takes the lock a few times per member), ms."""
    gang = next(iter(runtime.mirror.find_gangs(NAMESPACE, "train")))
    runtime.mirror.lock = runtime.ledger.lock = lock._inner
    taken = []
    for _ in range(samples):
        start = time.perf_counter()
        with runtime.ledger.lock:
            runtime.ledger.view.facts(gang)
            list(runtime.mirror.nodes.values())
            runtime.mirror.capacity(gang)
        taken.append((time.perf_counter() - start) * 1e3)
    runtime.mirror.lock = runtime.ledger.lock = lock  # type: ignore[assignment]
    return taken


def filters(runtime: Runtime, names: list[str], seconds: float, busy: bool) -> tuple[list[float], list[float]]:
    """Filter latency (ms) of a cached plain pod, one 2 ms after the last answer, for ``seconds``, with
    explanations running back to back in another thread when ``busy``: (from the call, from when it was
    due: the second also counts the wait of the caller's thread for the GIL after its 2 ms pause, as a
    request arriving on a socket would wait for it)."""
    plain = pod("plain", "500m", "1Gi")
    share = names[:500]
    runtime.engine.filter(FilterArgs(pod=dict(plain), node_names=share, nodes=None))  # warm its signature
    stop = threading.Event()
    explainer = threading.Thread(target=lambda: [explain_once(runtime) for _ in iter(stop.is_set, True)],
                                 daemon=True)
    if busy:
        explainer.start()
        time.sleep(0.05)
    taken: list[float] = []
    since_due: list[float] = []
    end = time.perf_counter() + seconds
    i, due = 0, time.perf_counter()
    while time.perf_counter() < end:
        i += 1
        request = {**plain, "metadata": {**plain["metadata"], "name": f"plain-{i}", "uid": f"uid-plain-{i}"}}
        start = time.perf_counter()
        runtime.engine.filter(FilterArgs(pod=request, node_names=share, nodes=None))
        done = time.perf_counter()
        taken.append((done - start) * 1e3)
        since_due.append((done - due) * 1e3)
        due = done + 0.002
        time.sleep(0.002)
    stop.set()
    if busy:
        explainer.join()
    return taken, since_due


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):7.2f}  p99 {p99:7.2f}  max {ordered[-1]:7.2f}  (n={len(ordered)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--members", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--samples", type=int, default=20, help="explanations timed per members count [20]")
    parser.add_argument("--seconds", type=float, default=5.0, help="of filters, alone and beside explanations [5]")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="cProfile one explanation per members count")
    parser.add_argument("--copy-phase", action="store_true",
                        help="also time explain's copy under the plain lock (needs ClusterMirror.capacity)")
    parser.add_argument("--drain", action="store_true",
                        help="a max wait of 0 s: the gang drains (its explanation also plans the drain's progress)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for members in args.members:
        runtime, names, lock = build(args.nodes, members, args.seed, args.drain)
        answer = explain_once(runtime)
        print(f"\n{members} members on {args.nodes} nodes: state {answer['state']}, "
              f"shortfall {(answer['shortfall'] or {}).get('reason')}")
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(explain_once, runtime)
            pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
        explain_holds, publish_holds, walls = holds(runtime, lock, args.samples)
        print(f"  lock hold, /explain      ms: {summary(explain_holds)}")
        print(f"  lock hold, publisher     ms: {summary(publish_holds)}")
        print(f"  /explain wall time       ms: {summary(walls)}")
        if args.copy_phase:
            print(f"  copy phase, plain lock   ms: {summary(copy_phase(runtime, lock, args.samples))}")
        for busy in (False, True):
            taken, since_due = filters(runtime, names, args.seconds, busy)
            what = "beside explains" if busy else "alone"
            print(f"  filter {what:16}  ms: {summary(taken)}")
            print(f"  ... from when due       ms: {summary(since_due)}")
        runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

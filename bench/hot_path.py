#!/usr/bin/env python3
"""The hot path's own cost, in process: two builds of ``extender`` side by side, interleaved (issue 29).

    .venv/bin/python bench/hot_path.py --trees .,build/compiled --rounds 6     # A/B: ratios B / A
    .venv/bin/python bench/hot_path.py --profile                               # where the time goes

Each tree is a directory holding ``extender/`` (``.`` for this checkout's source; ``make compiled``
builds ``build/compiled``, the same source with the hot-path modules compiled by mypyc next to it).
The parent runs one child process per tree per round, the order of the trees rotated every round so a
drift in the machine's load falls on both alike, and checks that each child imported ``extender`` from
its own tree and, for a compiled tree, that the compiled modules are the ``.so`` files. One child
(``--child``) times, on the snapshot of ``bench/filter_latency.py`` (5,000 nodes, 2 bound pods each),
plus ``--gangs`` pending Workloads of 8 members (500m / 1Gi):

- ``noop``, ``hit``, ``miss``, ``gang`` at 5,000 names through the Flask test client (no HTTP),
  interleaved: the do-nothing route, a cache hit, a cache miss (a new signature every request), a
  member steered to its admitted gang's reservation (``bench/filter_latency.py``'s variants);
- ``pod_record``, ``node_record``, ``signature``: ``records.pod_record`` and ``signature.signature``
  of the Job pod of ``bench/pod_parse.py`` (already parsed by orjson), ``records.node_record`` of a
  node of the snapshot, in batches of 200 calls, interleaved;
- ``gang cycle``: for each pending gang, its 8 members filtered at 5,000 names (the first admits the
  gang, the others are steered to its reservation) and bound, each bind from its own thread (held at
  the barrier until the 8th, then the quorum is bound in memory by the snapshot binder): the CPU
  (``time.thread_time``) of the admitting filter, of the 7 others and of the 8 bind requests, per gang.

Wall-clock medians for the first two groups, CPU for the last; the parent prints every run's medians
and, per case, the ratio of each later tree to the first within each round, and the median ratio;
then the same normalised by what ran beside each case in its own process, which a change in the
machine's load between two runs does not move as much: a filter less ``noop`` (interleaved request by
request), a reader over ``reference`` (a pure-Python walk of the same pod, never compiled, interleaved
batch by batch), a gang cycle over the reference timed after each cycle.
With ``--profile`` one process (this checkout's ``extender``, whichever build it imports) runs
cProfile over hit and miss filters and over gang cycles, and prints the share of time per module.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import os
import pstats
import runpy
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NAMES = 5000
GANG_SIZE = 8

def compiled_modules() -> list[str]:
    """The modules the compiled build compiles (``COMPILED`` in extender/native.py)."""
    return list(runpy.run_path(str(ROOT / "extender" / "native.py"))["COMPILED"])


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- child
def gang_objects(count: int) -> list[dict[str, Any]]:
    """``count`` Workloads (one pod group, minCount 8) and their pending members."""
    import filter_latency as fl

    items: list[dict[str, Any]] = []
    for g in range(count):
        name = f"job-{g}"
        items.append({"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
                      "metadata": {"name": name, "namespace": fl.NAMESPACE},
                      "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
                               "podGroups": [{"name": "workers", "policy": {"gang": {"minCount": GANG_SIZE}}}]}})
        for m in range(GANG_SIZE):
            member = fl.pod(f"{name}-{m}", cpu="500m", memory="1Gi")
            member["spec"]["workloadRef"] = {"name": name, "podGroup": "workers"}
            items.append(member)
    return items


def reference(obj: object) -> int:
    """Pure Python of the kind the readers do (walking dicts and lists, testing types), never compiled:
    timed beside the cases in the same run, it tells how fast the machine was going then."""
    if isinstance(obj, dict):
        return len(obj) + sum(reference(v) for k, v in obj.items() if isinstance(k, str))
    if isinstance(obj, list):
        return sum(reference(v) for v in obj)
    return 1 if isinstance(obj, str) and obj else 0


class Bench:
    """One process's app on the snapshot, and the cases timed against it."""

    def __init__(self, gangs: int, tmp: Path) -> None:
        import filter_latency as fl

        from extender.config import Settings
        from extender.http.app import create_app

        listing = fl.snapshot(NAMES, 2)
        listing["items"].extend(gang_objects(gangs))
        path = tmp / "cluster.json"
        path.write_bytes(orjson.dumps(listing))
        self.app = create_app(Settings(cluster_snapshot=str(path), gang_timeout_seconds=3600, log_level="WARNING"))
        fl.add_noop_route(self.app)
        self.client = self.app.test_client()
        self.names = [fl.node_name(i) for i in range(NAMES)]
        self.fl = fl
        self.gangs = [[p for p in listing["items"] if p.get("kind") == "Pod"
                       and (p["spec"].get("workloadRef") or {}).get("name") == f"job-{g}"] for g in range(gangs)]
        self.node_obj = listing["items"][0]

    def close(self) -> None:
        self.app.extensions["gang_extender"].runtime.close()

    def post(self, path: str, body: bytes) -> bytes:
        reply = self.client.post(path, data=body, content_type="application/json")
        if reply.status_code != 200:
            raise SystemExit(f"{path}: HTTP {reply.status_code}: {reply.data[:300]!r}")
        return bytes(reply.data)

    def filters(self, requests: int) -> dict[str, list[float]]:
        """noop / hit / miss / gang at 5,000 names, interleaved; seconds per request."""
        wanted = ("noop", "hit", "miss", "gang")
        kinds = [v for v in self.fl.variants(self.names, iter(range(10**9))) if v.name in wanted]
        for variant in kinds:  # admits the training gang, fills the hit entry, checks each reply kind
            for i in range(10):
                problem = variant.check(orjson.loads(self.post(variant.path, variant.body(-1 - i))))
                if problem:
                    raise SystemExit(f"{variant.name}: {problem}")
        gc.collect()
        for i in range(requests):
            for variant in kinds:
                body = variant.body(i)
                started = time.perf_counter()
                self.client.post(variant.path, data=body, content_type="application/json")
                variant.samples.append(time.perf_counter() - started)
        return {v.name: v.samples for v in kinds}

    def readers(self, batches: int, batch: int = 200) -> dict[str, list[float]]:
        """pod_record / node_record / signature of parsed objects; seconds per call (batches of ``batch``)."""
        import pod_parse

        from extender.cluster.records import node_record, pod_record
        from extender.cluster.signature import signature

        pod_obj = orjson.loads(orjson.dumps(pod_parse.api_pod(3)))
        node_obj = self.node_obj
        cases: dict[str, Callable[[], object]] = {
            "pod_record": lambda: pod_record(pod_obj),
            "node_record": lambda: node_record(node_obj),
            "signature": lambda: signature(pod_obj),
            "reference": lambda: reference(pod_obj),
        }
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(batches):
            for name, call in cases.items():
                started = time.perf_counter()
                for _ in range(batch):
                    call()
                samples[name].append((time.perf_counter() - started) / batch)
        return samples

    def gang_cycle(self, members: list[dict[str, Any]]) -> tuple[float, float, float]:
        """CPU seconds of the first member's filter (it admits the gang), of the other 7 filters and of the
        8 bind requests, for one pending gang: each member
        filtered, then bound from its own thread (held at the barrier, assumed on its node, before the next
        member is filtered, as kube-scheduler's binding cycle assumes a pod before the next scheduling cycle)."""
        mirror = self.app.extensions["gang_extender"].runtime.mirror
        filter_cpu: list[float] = []
        bind_cpu: list[float] = []
        errors: list[str] = []

        def bind(member: dict[str, Any], node: str) -> None:
            body = orjson.dumps({"PodName": member["metadata"]["name"], "PodNamespace": member["metadata"]["namespace"],
                                 "PodUID": member["metadata"]["uid"], "Node": node})
            client = self.app.test_client()
            before = time.thread_time()
            reply = client.post("/bind", data=body, content_type="application/json")
            bind_cpu.append(time.thread_time() - before)
            error = orjson.loads(reply.data).get("Error") if reply.status_code == 200 else reply.status
            if error:
                errors.append(f"{member['metadata']['name']}: {error}")

        threads: list[threading.Thread] = []
        for member in members:
            body = orjson.dumps({"Pod": member, "Nodes": None, "NodeNames": self.names})
            before = time.thread_time()
            reply = orjson.loads(self.post("/filter", body))
            filter_cpu.append(time.thread_time() - before)
            feasible = reply.get("NodeNames") or []
            if not feasible:
                raise SystemExit(f"{member['metadata']['name']}: no feasible node: {reply.get('FailedNodes')}"[:400])
            thread = threading.Thread(target=bind, args=(member, feasible[0]), daemon=True)
            thread.start()
            threads.append(thread)
            uid, deadline = member["metadata"]["uid"], time.monotonic() + 5
            while not mirror.placement(uid) and not errors and time.monotonic() < deadline:
                time.sleep(0.0002)  # held at the barrier (assumed), or bound
        for thread in threads:
            thread.join(30)
        deadline = time.monotonic() + 30
        while len(bind_cpu) < len(members) and not errors and time.monotonic() < deadline:
            time.sleep(0.001)
        if errors or len(bind_cpu) != len(members):
            raise SystemExit(f"binds failed: {errors[:3]} ({len(bind_cpu)} of {len(members)} answered)")
        return filter_cpu[0], sum(filter_cpu[1:]), sum(bind_cpu)

    def gang_cycles(self, count: int) -> dict[str, list[float]]:
        import pod_parse

        pod_obj = orjson.loads(orjson.dumps(pod_parse.api_pod(3)))
        out: dict[str, list[float]] = {"gang cycle: filter admitting the gang (CPU)": [],
                                       "gang cycle: 7 steered filters (CPU)": [], "gang cycle: 8 binds (CPU)": []}
        references: list[float] = []
        for members in self.gangs[:count]:
            for key, value in zip(out, self.gang_cycle(members), strict=True):
                out[key].append(value)
            before = time.thread_time()
            for _ in range(100):
                reference(pod_obj)
            references.append(time.thread_time() - before)
        out["gang cycle: reference (CPU)"] = references
        return out


def child(args: argparse.Namespace) -> dict[str, Any]:
    import extender

    compiled = {}
    for name in compiled_modules():
        try:
            compiled[name] = importlib.import_module(name).__file__ or ""
        except ImportError as exc:
            compiled[name] = f"ImportError: {exc}"
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args.gangs, Path(tmp))
        try:
            samples = bench.filters(args.requests)
            samples.update(bench.readers(args.batches))
            samples.update(bench.gang_cycles(args.gangs))
        finally:
            bench.close()
    return {"extender": extender.__file__, "files": compiled,
            "medians": {name: statistics.median(s) for name, s in samples.items()},
            "n": {name: len(s) for name, s in samples.items()}}


# ------------------------------------------------------------------------------------------- profile
def module_of(filename: str) -> str:
    if filename.startswith("~") or filename == "<built-in>":
        return "(built-in calls)"
    path = Path(filename)
    for anchor in ("extender", "flask", "werkzeug", "cachetools", "orjson", "prometheus_client"):
        if anchor in path.parts:
            i = len(path.parts) - 1 - path.parts[::-1].index(anchor)
            return ".".join([*path.parts[i:-1], path.stem])
    return path.name


def shares(stats: pstats.Stats, top: int) -> list[str]:
    """CPU time per module: a function's own time, plus the time of the built-in functions it called
    (``len``, ``dict.get``, ``orjson.dumps``, a lock's ``acquire``), which cProfile lists apart."""
    by_module: dict[str, float] = defaultdict(float)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, _, tottime, _, callers) in raw.items():
        module = module_of(filename)
        if module != "(built-in calls)" or not callers:
            by_module[module] += tottime
            continue
        for (caller_file, _, _), (_, _, caller_tt, _) in callers.items():  # the callee's time per caller
            by_module[module_of(caller_file)] += caller_tt
    total = sum(by_module.values())
    lines = [f"| module | share of CPU (own + built-ins it called) | ms (total {total * 1000:.0f}) |",
             "|---|---:|---:|"]
    for module, seconds in sorted(by_module.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"| `{module}` | {seconds / total * 100:.1f} % | {seconds * 1000:.1f} |")
    ours = sum(seconds for module, seconds in by_module.items() if module.startswith("extender."))
    lines.append(f"| all of `extender.*` | {ours / total * 100:.1f} % | {ours * 1000:.1f} |")
    return lines


def profile(args: argparse.Namespace) -> None:
    import extender

    progress(f"[hot_path] profiling extender from {extender.__file__}")
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args.gangs, Path(tmp))
        try:
            kinds = {v.name: v for v in bench.fl.variants(bench.names, iter(range(10**9)))}
            for name in ("hit", "miss", "gang"):
                for i in range(10):
                    bench.post(kinds[name].path, kinds[name].body(-1 - i))
            for name in ("hit", "miss"):
                variant = kinds[name]
                bodies = [variant.body(i) for i in range(args.requests if name == "hit" else args.requests // 6)]
                prof = cProfile.Profile()  # one thread that never waits: wall time, the cheaper timer
                prof.enable()
                for body in bodies:
                    bench.client.post(variant.path, data=body, content_type="application/json")
                prof.disable()
                stats = pstats.Stats(prof)
                print(f"\n### Filter {name} at 5,000 names, {len(bodies)} requests (Flask test client), cProfile\n")
                print("\n".join(shares(stats, args.top)))
                if args.functions:
                    stats.sort_stats("tottime").print_stats(args.functions)
            # the gang cycle: every thread profiled (threading.setprofile can't reach a Profile object per thread)
            profiles: list[cProfile.Profile] = []
            lock = threading.Lock()
            real_post = type(bench.client).post

            def profiled_post(client: Any, *a: Any, **k: Any) -> Any:
                prof = cProfile.Profile(timer=time.thread_time)
                prof.enable()
                try:
                    return real_post(client, *a, **k)
                finally:
                    prof.disable()
                    with lock:
                        profiles.append(prof)

            for name, path in (("binds", "/bind"), ("filters", "/filter")):
                profiles.clear()
                def post(client: Any, url: str, *a: Any, _path: str = path, **k: Any) -> Any:
                    return profiled_post(client, url, *a, **k) if url == _path else real_post(client, url, *a, **k)
                type(bench.client).post = post  # type: ignore[method-assign,assignment]
                try:
                    start = len(bench.gangs) // 2 if name == "filters" else 0
                    for members in bench.gangs[start:start + args.gangs // 2]:
                        bench.gang_cycle(members)
                finally:
                    type(bench.client).post = real_post  # type: ignore[method-assign]
                stats = pstats.Stats(profiles[0])
                for prof in profiles[1:]:
                    stats.add(prof)
                print(f"\n### Gang cycle, the {name} ({len(profiles)} requests: {args.gangs // 2} gangs of 8 at 5,000 "
                      "names; binds held at the barrier), cProfile, thread CPU time\n")
                print("\n".join(shares(stats, args.top)))
                if args.functions:
                    stats.sort_stats("tottime").print_stats(args.functions)
        finally:
            bench.close()


# -------------------------------------------------------------------------------------------- parent
def check_child(tree: str, result: dict[str, Any], compiled: bool) -> None:
    origin = Path(result["extender"]).resolve()
    if not origin.is_relative_to(Path(tree).resolve()):
        raise SystemExit(f"tree {tree} imported extender from {origin}")
    kinds = {name: file.endswith(".so") for name, file in result["files"].items()}
    if compiled and not all(kinds.values()):
        raise SystemExit(f"tree {tree}: not compiled: {[n for n, so in kinds.items() if not so]}")
    if not compiled and any(kinds.values()):
        raise SystemExit(f"tree {tree}: compiled modules in the source tree: {[n for n, so in kinds.items() if so]}")


def parent(args: argparse.Namespace) -> None:
    trees = [t for t in args.trees.split(",") if t]
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    for r in range(args.rounds):
        order = trees[r % len(trees):] + trees[:r % len(trees)]
        for tree in order:
            load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
            progress(f"[hot_path] round {r + 1}/{args.rounds}, {tree}: load average {load}")
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
            done = subprocess.run([sys.executable, __file__, "--child", "--requests", str(args.requests),
                                   "--batches", str(args.batches), "--gangs", str(args.gangs)],
                                  env=env, cwd="/", capture_output=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"child for {tree} failed:\n{done.stderr.decode()[-3000:]}")
            result = orjson.loads(done.stdout)
            check_child(tree, result, compiled=any(f.endswith(".so") for f in result["files"].values()))
            result["load"] = load
            runs[tree].append(result)
    base = trees[0]
    cases = list(runs[base][0]["medians"])
    print(f"\n## {' vs '.join(trees)}: {args.rounds} rounds, order rotated; per run: {args.requests} filters per "
          f"kind, {args.batches} batches of 200 reader calls, {args.gangs} gang cycles\n")
    unit = {c: ("µs", 1e6) for c in cases}
    print("| case | " + " | ".join(f"{t}: median of each run" for t in trees) + " | "
          + " | ".join(f"{t} / {base}, each round" for t in trees[1:]) + " | "
          + " | ".join(f"median {t} / {base}" for t in trees[1:]) + " |")
    print("|---|" + "---|" * (len(trees) + 2 * (len(trees) - 1)))
    for case in cases:
        name, scale = unit[case]
        cells = [", ".join(f"{run['medians'][case] * scale:.1f}" for run in runs[t]) for t in trees]
        ratios = [[b["medians"][case] / a["medians"][case] for a, b in zip(runs[base], runs[t], strict=True)]
                  for t in trees[1:]]
        print(f"| {case} ({name}) | " + " | ".join(cells) + " | " +
              " | ".join(", ".join(f"{x:.2f}" for x in rs) for rs in ratios) + " | " +
              " | ".join(f"**{statistics.median(rs):.2f}**" for rs in ratios) + " |")
    print("\nThe same, each run normalised by what ran beside it in that process: a filter less the do-nothing "
          "route (`noop`, interleaved request by request), a reader over the pure-Python `reference` (interleaved "
          "batch by batch), a gang cycle over the reference timed after each cycle.\n")
    print("| case | normalised as | " + " | ".join(f"{t}: each run" for t in trees) + " | "
          + " | ".join(f"{t} / {base}, each round" for t in trees[1:]) + " | "
          + " | ".join(f"median {t} / {base}" for t in trees[1:]) + " |")
    print("|---|---|" + "---|" * (len(trees) + 2 * (len(trees) - 1)))
    for case in cases:
        if case in ("noop", "reference", "gang cycle: reference (CPU)"):
            continue
        if case in ("hit", "miss", "gang"):
            how, norm = "µs less noop", (lambda m, c=case: (m[c] - m["noop"]) * 1e6)
        elif case.startswith("gang cycle"):
            how, norm = "/ reference", (lambda m, c=case: m[c] / m["gang cycle: reference (CPU)"])
        else:
            how, norm = "/ reference", (lambda m, c=case: m[c] / m["reference"])
        cells = [", ".join(f"{norm(run['medians']):.2f}" for run in runs[t]) for t in trees]
        ratios = [[norm(b["medians"]) / norm(a["medians"]) for a, b in zip(runs[base], runs[t], strict=True)]
                  for t in trees[1:]]
        print(f"| {case} | {how} | " + " | ".join(cells) + " | " +
              " | ".join(", ".join(f"{x:.2f}" for x in rs) for rs in ratios) + " | " +
              " | ".join(f"**{statistics.median(rs):.2f}**" for rs in ratios) + " |")
    loads = "; ".join(f"{t}: {' / '.join(r['load'] for r in runs[t])}" for t in trees)
    print(f"\nLoad average before each run: {loads}")
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(runs, option=orjson.OPT_INDENT_2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", default=".,build/compiled",
                        help="directories holding extender/, comma-separated; ratios are to the first "
                             "[.,build/compiled]")
    parser.add_argument("--rounds", type=int, default=6, help="child runs per tree [6]")
    parser.add_argument("--requests", type=int, default=300, help="filter requests per kind per run [300]")
    parser.add_argument("--batches", type=int, default=200, help="batches of 200 reader calls per case per run [200]")
    parser.add_argument("--gangs", type=int, default=60, help="gang cycles per run [60]")
    parser.add_argument("--json", help="write every run's medians here")
    parser.add_argument("--profile", action="store_true", help="cProfile in this process instead (see above)")
    parser.add_argument("--top", type=int, default=25, help="--profile: modules listed [25]")
    parser.add_argument("--functions", type=int, default=0, help="--profile: also the N functions with most own time")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    if args.child:
        print(orjson.dumps(child(args)).decode())
    elif args.profile:
        profile(args)
    else:
        parent(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

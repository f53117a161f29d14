"""Same-run comparison of two source trees: filter latency, corpus replay check and timed replay.

    .venv/bin/python bench/compare_trees.py --parent /work/wt-parent --rounds 3
    .venv/bin/python bench/compare_trees.py --parent 59b48f4 --current HEAD --rounds 3 --speeds 1,4

Runs this checkout's benchmark scripts (``bench/filter_latency.py``, ``bench/loadtest.py``, both with
this checkout's ``.venv``) against the server code of two trees, ``--current`` and ``--parent``.
Each is a directory holding ``extender/`` (a worktree, or ``.`` for this working tree as it is) or a
commit of this repository, exported with ``git archive`` into ``--out``/trees; the default
``--current HEAD`` measures the last commit, not uncommitted edits. The tree is chosen with
``PYTHONPATH=<tree>``: a bench script's own directory is first on ``sys.path``, then
``PYTHONPATH``, then the editable install, so the server subprocess imports ``extender`` from that
tree; the script checks this before it starts. Both trees share the venv's libraries and the
corpus in ``tests/data/corpus`` of this checkout.

In order:

1. ``loadtest.py --verify`` once per tree: the corpus replayed in recorded order, with and without
   its binds, every reply compared byte for byte with the recorded one;
2. ``--rounds`` rounds; each round runs ``filter_latency.py --sizes 5000 --iterations N --variants
   V`` and then (unless ``--no-replay``) ``loadtest.py --modes timed --speeds S --no-verify`` for all
   trees, the order of the trees rotated every round (A B, B A, ...; A B C, B C A, C A B, ...) so
   that a drift in the machine's load does not favour one tree;
3. with ``--in-process N``, also every round and tree, N requests per variant of noop, hit and gang
   through the Flask test client in one process (no HTTP, no scheduling noise between client and
   server), reported minus noop: the filter handler's own cost;
4. prints Markdown tables: per tree and variant every round's median and p90 at 5,000 names and
   the hit/noop ratio; per tree and speed every round's p50/p99/max and errors; the verify counts;
   and the 1-minute load average before each run.

Raw output (each run's ``--json`` and its stdout) goes to ``--out`` (default ``out/compare-trees``).
Exit status 1 if a verify reply differs or a replay has errors. Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VARIANTS = ("noop", "hit", "hit-rotated", "miss", "gang")


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def commit_of(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--", "extender"],
                           capture_output=True, text=True, check=False)
    return (done.stdout.strip() or "?") + (" (extender/ modified)" if dirty.stdout.strip() else "")


def resolve_tree(spec: str, workdir: Path) -> tuple[Path, str]:
    """A directory is used as it is; anything else is a commit of this repository, exported to ``workdir``."""
    if Path(spec).is_dir():
        return Path(spec).resolve(), commit_of(Path(spec))
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", f"{spec}^{{commit}}"],
                         capture_output=True, text=True, check=False).stdout.strip()
    if not rev:
        raise SystemExit(f"{spec!r} is neither a directory nor a commit of {ROOT}")
    tree = workdir / rev
    if not (tree / "extender").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "extender"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree, rev


def env_for(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def check_tree(tree: Path) -> None:
    """Refuse to run unless ``extender`` imports from ``tree`` under PYTHONPATH (run from outside any tree)."""
    done = subprocess.run([sys.executable, "-c", "import extender; print(extender.__file__)"],
                          env=env_for(tree), cwd="/", capture_output=True, text=True, check=False)
    origin = Path(done.stdout.strip() or "/nonexistent").resolve()
    if done.returncode != 0 or not origin.is_relative_to(tree.resolve()):
        raise SystemExit(f"PYTHONPATH={tree} imports extender from {origin}: {done.stderr[-500:]}")


def run(label: str, tree: Path, argv: list[str], out: Path) -> tuple[dict[str, Any], str]:
    """One bench script run against ``tree``; returns its --json output and the load average before it."""
    json_path = out / f"{label}.json"
    load = loadavg()
    progress(f"[compare] {label}: load average {load}: {' '.join(argv)}")
    started = time.monotonic()
    with (out / f"{label}.md").open("wb") as stdout, (out / f"{label}.log").open("wb") as stderr:
        done = subprocess.run([sys.executable, *argv, "--json", str(json_path)], env=env_for(tree), cwd=ROOT,
                              stdout=stdout, stderr=stderr, check=False)
    if done.returncode not in (0, 1) or not json_path.exists():
        raise SystemExit(f"{label} failed ({done.returncode}); see {out / (label + '.log')}")
    progress(f"[compare] {label}: {time.monotonic() - started:.0f} s")
    return orjson.loads(json_path.read_bytes()), load


def in_process(requests: int) -> dict[str, float]:
    """Child (``--in-process-child``): the handler's own time at 5,000 names, no HTTP, no other process.

    ``filter_latency``'s snapshot and request bodies through the Flask test client of the tree on
    ``PYTHONPATH`` (its noop route added): median microseconds of ``requests`` calls per variant,
    noop, hit and gang interleaved. Subtracting noop leaves what the filter itself costs.
    """
    import tempfile

    import filter_latency as fl  # this directory is first on sys.path

    from extender.config import Settings
    from extender.http.app import create_app

    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "cluster.json"
        snapshot.write_bytes(orjson.dumps(fl.snapshot(5000, 2)))
        app = create_app(Settings(cluster_snapshot=str(snapshot), gang_timeout_seconds=3600, log_level="WARNING"))
        fl.add_noop_route(app)
        client = app.test_client()
        names = [fl.node_name(i) for i in range(5000)]
        kinds = [v for v in fl.variants(names, iter(range(10**9))) if v.name in ("noop", "hit", "gang")]
        for variant in kinds:  # admits the gang, fills the hit entry, checks every reply kind once
            for i in range(20):
                reply = client.post(variant.path, data=variant.body(-1 - i), content_type="application/json")
                problem = variant.check(orjson.loads(reply.data)) if reply.status_code == 200 else reply.status
                if problem:
                    raise SystemExit(f"{variant.name}: {problem}")
        for i in range(requests):
            for variant in kinds:
                body = variant.body(i)
                started = time.perf_counter()
                client.post(variant.path, data=body, content_type="application/json")
                variant.samples.append(time.perf_counter() - started)
        app.extensions["gang_extender"].runtime.close()
    return {v.name: statistics.median(v.samples) * 1e6 for v in kinds}


def in_process_rows(results: dict[str, list[dict[str, float]]]) -> list[str]:
    lines = ["| tree | noop µs, each run | hit - noop µs, each run | gang - noop µs, each run | "
             "medians: hit - noop / gang - noop |", "|---|---|---|---|---:|"]
    for tree, runs in results.items():
        noop = [r["noop"] for r in runs]
        hit = [r["hit"] - r["noop"] for r in runs]
        gang = [r["gang"] - r["noop"] for r in runs]
        lines.append(f"| {tree} | {' '.join(f'{x:.0f}' for x in noop)} | {' '.join(f'{x:.0f}' for x in hit)} | "
                     f"{' '.join(f'{x:.0f}' for x in gang)} | {statistics.median(hit):.0f} / "
                     f"{statistics.median(gang):.0f} |")
    return lines


def filter_rows(results: dict[str, list[tuple[dict[str, Any], str]]]) -> list[str]:
    lines = ["| tree | variant | median ms, each round | p90 ms, each round | median of rounds | median / noop |",
             "|---|---|---|---|---:|---:|"]
    for tree, rounds in results.items():
        per = {v: [r["results"]["5000"][v] for r, _ in rounds if v in r["results"]["5000"]] for v in VARIANTS}
        noop = statistics.median(s["median"] for s in per["noop"])
        for variant, stats in per.items():
            if not stats:
                continue
            medians = [s["median"] * 1000 for s in stats]
            p90s = [s["p90"] * 1000 for s in stats]
            mid = statistics.median(medians)
            lines.append(f"| {tree} | {variant} | {', '.join(f'{m:.3f}' for m in medians)} | "
                         f"{', '.join(f'{p:.3f}' for p in p90s)} | {mid:.3f} | {mid / (noop * 1000):.2f}x |")
    ran = [v for v in VARIANTS[1:] if all(v in r["results"]["5000"] for rounds in results.values() for r, _ in rounds)]
    lines += ["", "| tree | " + " | ".join(f"{v} / noop, each round" for v in ran) + " |", "|---|" + "---|" * len(ran)]
    for tree, rounds in results.items():
        cells = [", ".join(f"{r['results']['5000'][v]['median'] / r['results']['5000']['noop']['median']:.2f}"
                           for r, _ in rounds) for v in ran]
        lines.append(f"| {tree} | " + " | ".join(cells) + " |")
    return lines


def replay_rows(results: dict[str, list[tuple[dict[str, Any], str]]]) -> list[str]:
    lines = ["| tree | run | p50 ms | p90 ms | p99 ms | max ms | errors | service p99 ms | server CPU | load avg |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for tree, rounds in results.items():
        for i, (res, load) in enumerate(rounds, 1):
            for r in res["runs"]:
                lat = r["lat_ms"]
                lines.append(f"| {tree} | round {i}, {r['name']} | {lat['p50']:.2f} | {lat['p90']:.2f} | "
                             f"{lat['p99']:.2f} | {lat['max']:.2f} | {r['errors']} | {r['service_ms']['p99']:.2f} | "
                             f"{r['server_cpu'] * 100:.0f} % | {load} |")
    return lines


def verify_rows(results: dict[str, tuple[dict[str, Any], str]]) -> tuple[list[str], bool]:
    lines = ["| tree | replay | verb | replies | exact | other |", "|---|---|---|---:|---:|---|"]
    exact_all = True
    for tree, (res, _) in results.items():
        for v in res["verify"]:
            name = "filters + prioritize + binds, in order" if v["with_binds"] else "filters only, start snapshot"
            for verb, counts in v["outcomes"].items():
                total, exact = sum(counts.values()), counts.get("exact", 0)
                other = ", ".join(f"{k}: {n}" for k, n in sorted(counts.items()) if k != "exact") or "none"
                exact_all &= not v["with_binds"] or exact == total
                lines.append(f"| {tree} | {name} | {verb} | {total:,} | {exact:,} | {other} |")
    return lines, exact_all


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parent", required=True,
                        help="the other tree: a directory holding extender/, or a commit (exported with git archive)")
    parser.add_argument("--current", default="HEAD",
                        help="the tree(s) compared with it, the same way, comma-separated [HEAD: this checkout's "
                             "last commit, exported, so uncommitted edits are not measured; '.' for the working tree]")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of filter latency + timed replay [3]")
    parser.add_argument("--iterations", type=int, default=500, help="filter_latency.py --iterations [500]")
    parser.add_argument("--variants", default="hit,hit-rotated,miss,gang",
                        help="filter_latency.py --variants (noop always runs) [hit,hit-rotated,miss,gang]")
    parser.add_argument("--speeds", default="1", help="loadtest.py timed --speeds [1]")
    parser.add_argument("--no-replay", action="store_true", help="rounds of filter latency only")
    parser.add_argument("--no-verify", action="store_true", help="skip the byte-for-byte corpus replay")
    parser.add_argument("--in-process", type=int, default=0, metavar="N",
                        help="also, every round and tree, N in-process requests per variant (noop, hit, gang) "
                             "through the Flask test client [0: skip; 3000 takes ~10 s]")
    parser.add_argument("--in-process-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "compare-trees", help="raw output directory")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


Results = dict[str, list[tuple[dict[str, Any], str]]]  # tree -> (a run's --json, load average before it)
InProcess = dict[str, list[dict[str, float]]]  # tree -> medians in µs by variant, one dict per run


def rounds(args: argparse.Namespace, trees: dict[str, Path]) -> tuple[Results, Results, InProcess]:
    """``--rounds`` rounds over every tree, the order rotated each round: filter latency, replay, in process."""
    filters: Results = {name: [] for name in trees}
    replays: Results = {name: [] for name in trees}
    inproc: InProcess = {name: [] for name in trees}
    filter_argv = ["bench/filter_latency.py", "--sizes", "5000", "--iterations", str(args.iterations),
                   "--variants", args.variants]
    replay_argv = ["bench/loadtest.py", "--modes", "timed", "--speeds", args.speeds, "--no-verify"]
    items = list(trees.items())
    for r in range(args.rounds):
        order = items[r % len(items):] + items[:r % len(items)]  # every tree takes every place in turn
        for name, tree in order:
            filters[name].append(run(f"filter-r{r + 1}-{name.split()[1]}", tree, filter_argv, args.out))
        for name, tree in [] if args.no_replay else order:
            replays[name].append(run(f"replay-r{r + 1}-{name.split()[1]}", tree, replay_argv, args.out))
        for name, tree in order if args.in_process else []:
            progress(f"[compare] in-process-r{r + 1}-{name.split()[1]}: load average {loadavg()}")
            done = subprocess.run([sys.executable, __file__, "--parent", ".", "--in-process-child",
                                   str(args.in_process)], env=env_for(tree), cwd=ROOT, capture_output=True, check=True)
            inproc[name].append(orjson.loads(done.stdout))
    return filters, replays, inproc


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.in_process_child:
        print(orjson.dumps(in_process(args.in_process_child)).decode())
        return 0
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    trees: dict[str, Path] = {}
    for role, spec in [*(("current", c) for c in args.current.split(",") if c), ("parent", args.parent)]:
        path, rev = resolve_tree(spec, args.out / "trees")
        trees[f"{role} {rev}"] = path
    for tree in trees.values():
        check_tree(tree)
    progress(f"[compare] {', '.join(f'{k} = {v}' for k, v in trees.items())}; output in {args.out}")
    verified: dict[str, tuple[dict[str, Any], str]] = {}
    for name, tree in [] if args.no_verify else trees.items():
        verified[name] = run(f"verify-{name.split()[1]}", tree, ["bench/loadtest.py", "--verify"], args.out)
    filters, replays, inproc = rounds(args, trees)

    print(f"\n## Filter latency at 5,000 names ({args.iterations} requests per variant per run)\n")
    print("\n".join(filter_rows(filters)))
    print("\nLoad average before each filter run: " + "; ".join(
        f"{name}: {' / '.join(load for _, load in runs)}" for name, runs in filters.items()))
    if not args.no_replay:
        print(f"\n## Timed replay of the corpus (--speeds {args.speeds}, one connection)\n")
        print("\n".join(replay_rows(replays)))
    if args.in_process:
        print(f"\n## In process at 5,000 names (Flask test client, {args.in_process} requests per variant per run)\n")
        print("\n".join(in_process_rows(inproc)))
    ok = all(r["errors"] == 0 for runs in replays.values() for res, _ in runs for r in res["runs"])
    if verified:
        lines, exact = verify_rows(verified)
        print("\n## Same answers? The corpus replayed in recorded order\n")
        print("\n".join(lines))
        ok &= exact
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

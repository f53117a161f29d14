#!/usr/bin/env python3
"""Record the replay corpus: what a real kube-scheduler v1.35.4 asks gang-extender, with the answers.

How to re-record (about 3 minutes on 2 cores; needs the binaries of ``hack/build-k8s.sh``)::

    .venv/bin/python hack/record_corpus.py            # writes tests/data/corpus/
    .venv/bin/python hack/record_corpus.py --out /tmp/corpus --keep   # elsewhere; keep logs

What it does:

1. starts the local control plane (``hack/controlplane.py``) with 1,000 fake nodes: 984 "general"
   nodes (8 cpu / 32Gi, three zones) and a 16-node "contention" pool (4 cpu / 16Gi);
2. starts ``gang-extender serve --record-file`` against it (production settings otherwise);
3. creates everything (``bench/workloads.py:corpus_plan``), every pod held by a scheduling gate:
   background pods already bound to about a third of the general nodes; gangs of 2-64 (Workload
   ``minCount``, identical and non-identical members, replica keys); plain pods (Deployment-like
   identical pods, one-of-a-kind pods, zone selectors, anti-affinity); and four contention gangs of 8
   whole-node members for a pool that holds two, interleaved;
4. waits until the extender's mirror holds every pod, then takes the **snapshot** (a Kubernetes
   ``List`` of Nodes, Pods and Workloads, trimmed of fields the extender never reads): the state the
   extender had when the first request arrived;
5. starts kube-scheduler with the shipped configuration (``manifests/scheduler-config.yaml``) plus
   the optional prioritize verb (so the corpus holds all three verbs), removes the gates in plan
   order (so a gang's members reach the scheduler together, as when a controller creates a job;
   released all at once, the scheduler's queue would be in random order, see docs/performance.md
   "A backlog of gangs") and records until every pod that can be placed is
   bound, then ``--linger`` seconds more (retries of the losing contention gangs); stops the
   scheduler, then the extender;
6. writes ``requests.jsonl.gz`` (the recorder's lines, verbs ``--verbs``, sorted by arrival),
   ``snapshot.json.gz`` and ``corpus.json`` (what was recorded, counts, request rates).

Check a corpus with ``.venv/bin/python bench/loadtest.py --verify`` (replays it in order against
the snapshot and compares every reply; see docs/performance.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import workloads as wl  # noqa: E402
from controlplane import ControlPlane, find_bin_dir  # noqa: E402

OUT = ROOT / "tests" / "data" / "corpus"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output directory [{OUT.relative_to(ROOT)}]")
    parser.add_argument("--general-nodes", type=int, default=984, help="general-pool nodes (+16 contention) [984]")
    parser.add_argument("--verbs", default="filter,prioritize,bind",
                        help="verbs kept in the corpus [filter,prioritize,bind]")
    parser.add_argument("--linger", type=float, default=10.0,
                        help="seconds to keep recording after the placeable pods are bound [10]")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds [600]")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, raw recording)")
    args = parser.parse_args(argv)

    # SIGTERM unwinds like Ctrl-C, so the extender and the control plane are stopped on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt()))
    bin_dir = find_bin_dir()
    workdir = Path(tempfile.mkdtemp(prefix="gang-corpus-"))
    plan = wl.corpus_plan(general_nodes=args.general_nodes)
    contention = [g for g in plan.gangs if g.kind == "contention"]
    placeable = [p for g in plan.gangs if g.kind != "contention" for p in g.members]
    plain = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in plan.pods
             if not p["spec"].get("workloadRef")]
    wl.log(f"[corpus] plan: {len(plan.gangs)} gangs ({len(contention)} contention), {len(plan.pods)} pods to "
           f"schedule ({len(plain)} plain), {len(plan.background)} background pods; work dir {workdir}")
    with ControlPlane(bin_dir, workdir / "cluster", log=wl.log, keep=True) as cp:
        nodes = wl.add_pools(cp, args.general_nodes)
        ext = wl.extender_process(cp.kubeconfig, workdir, record=True)
        ext.start()
        try:
            t0 = time.monotonic()
            wl.create_objects(cp, plan, gated=True)
            wl.log(f"[corpus] created {len(plan.workloads)} Workloads and {len(plan.pods) + len(plan.background)} "
                   f"pods in {time.monotonic() - t0:.1f}s (held by a scheduling gate)")
            expected = len(plan.pods) + len(plan.background)
            deadline = time.monotonic() + 60
            while wl.metric(ext.metrics(), "gang_extender_mirror_pods") < expected:
                if time.monotonic() > deadline:
                    raise SystemExit("the extender's mirror did not see every pod within 60 s")
                time.sleep(0.2)
            snapshot = wl.cluster_snapshot(cp)
            kinds = Counter(o["kind"] for o in snapshot["items"])
            wl.log(f"[corpus] snapshot: {dict(kinds)}")
            watch = wl.BindWatch(cp)
            started = time.monotonic()
            cp.start_scheduler(scheduler_config(ext.url))
            keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in plan.pods]
            wl.ungate(cp, keys)
            wl.log(f"[corpus] released {len(keys)} pods in plan order in {time.monotonic() - started:.1f}s")
            want_contention = 2 * 8  # the pool holds two contention gangs
            contention_pods = [p for g in contention for p in g.members]

            def done() -> bool:
                return (watch.bound_count(placeable) == len(placeable) and watch.bound_count(plain) == len(plain)
                        and watch.bound_count(contention_pods) >= want_contention)

            last = 0.0
            while not watch.wait(done, timeout=5.0):
                if time.monotonic() - started > args.timeout:
                    raise SystemExit(f"not every placeable pod was bound within {args.timeout:.0f}s; "
                                     f"see {workdir}")
                if time.monotonic() - last > 5:
                    last = time.monotonic()
                    wl.log(f"[corpus] {time.monotonic() - started:5.1f}s: {len(watch.bound)} bound")
            placed = time.monotonic() - started
            wl.log(f"[corpus] every placeable pod bound after {placed:.1f}s; lingering {args.linger:g}s")
            time.sleep(args.linger)
            cp.stop_scheduler()
            ext_metrics = ext.metrics()
            watch.close()
        finally:
            ext.stop()
        version = cp.kubectl("version", "-o", "json", check=False).stdout
    raw = [json.loads(line) for line in ext.record_path.read_text().splitlines()]
    verbs = set(args.verbs.split(","))
    kept = sorted((r for r in raw if r["verb"] in verbs), key=lambda r: r["arrival"])
    write(args.out, kept, snapshot, meta={
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "hack/record_corpus.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "git_commit": git_commit(),
        "kubernetes": server_version(version),
        "python": platform.python_version(),
        "nodes": len(nodes),
        "pods_scheduled": len(plan.pods),
        "pods_background": len(plan.background),
        "gangs": Counter(g.kind for g in plan.gangs),
        "gang_sizes": Counter(str(g.min_count) for g in plan.gangs),
        "all_placeable_bound_after_seconds": round(placed, 2),
        "requests_recorded": Counter(r["verb"] for r in raw),
        "requests_kept": Counter(r["verb"] for r in kept),
        "statuses": Counter(str(r["status"]) for r in raw),
        "filter_rate": rates([r["arrival"] for r in raw if r["verb"] == "filter"]),
        "filter_node_names": spread([len(r["request"].get("NodeNames") or []) for r in raw if r["verb"] == "filter"]),
        "extender_metrics": {k: v for k, v in ext_metrics.items()
                             if k.startswith(("gang_extender_filter_cache_", "gang_extender_gangs_"))},
    })
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    else:
        wl.log(f"[corpus] kept {workdir}")
    return 0


def scheduler_config(url: str) -> dict[str, object]:
    """The shipped configuration with the optional prioritize verb configured too."""
    from support import scheduler_config as shipped

    return shipped(url, prioritize=True)


def rates(arrivals: list[float]) -> dict[str, float]:
    """Request rate over the recording: mean over the busy span, and the busiest 1-second window."""
    if len(arrivals) < 2:
        return {}
    arrivals = sorted(arrivals)
    per_second = Counter(int(a - arrivals[0]) for a in arrivals)
    span = arrivals[-1] - arrivals[0]
    return {"requests": len(arrivals), "span_seconds": round(span, 2),
            "mean_per_second": round(len(arrivals) / span, 1), "peak_1s": max(per_second.values())}


def spread(values: list[int]) -> dict[str, float]:
    values = sorted(values)
    return {"min": values[0], "median": values[len(values) // 2], "max": values[-1]} if values else {}


def git_commit() -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True,
                          check=False)
    return proc.stdout.strip()


def server_version(text: str) -> str:
    try:
        return str(json.loads(text)["serverVersion"]["gitVersion"])
    except (ValueError, KeyError):
        return "unknown"


def write(out: Path, records: list[dict[str, object]], snapshot: dict[str, object], meta: dict[str, object]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same recording gives the same bytes (no churn in git)
    with gzip.GzipFile(out / "requests.jsonl.gz", "wb", compresslevel=9, mtime=0) as f:
        for record in records:
            f.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
    with gzip.GzipFile(out / "snapshot.json.gz", "wb", compresslevel=9, mtime=0) as f:
        f.write(json.dumps(snapshot, separators=(",", ":")).encode())
    meta["files"] = {p.name: p.stat().st_size for p in (out / "requests.jsonl.gz", out / "snapshot.json.gz")}
    (out / "corpus.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    wl.log(f"[corpus] wrote {out}: " + ", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in meta["files"].items()))  # type: ignore[attr-defined]
    wl.log(json.dumps(meta, indent=2, sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())

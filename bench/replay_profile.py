"""Where the slow filter replies of the corpus spend their time: the replay in process, one request at a time.

    .venv/bin/python bench/replay_profile.py                      # filter time by kind of request
    .venv/bin/python bench/replay_profile.py --profile --top 40   # and cProfile of the slowest kind

Replays the corpus (``tests/data/corpus``) in recorded order through the Flask test client of
``extender.http.app.create_app`` over the start snapshot, filters, prioritize and binds (binds from
threads, as ``bench/loadtest.py --verify`` does), so every request meets the state it met in the
recording. No HTTP server, no other process: the time measured is the handler's own CPU, free of
scheduling noise. Prints the filter latency by kind of request (cache hit, miss, gang admission,
gang member steered to its reservation, waiting gang member), the time of the ``GangLedger.admission``
calls inside those filters by outcome, the garbage collector's pauses during the replay (they land on
whichever request is running) and, with ``--profile``, the functions cProfile saw for the slowest kind.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadtest

from extender.config import Settings
from extender.http.app import create_app


def kind_of(app: Any, record: dict[str, Any], before: dict[str, int], after: dict[str, int]) -> str:
    """What the extender did for this filter, read from its counters around the call."""
    d = {k: after[k] - before[k] for k in after}
    if d["admitted"]:
        return "gang admitted (plans the reservation)"
    pod = record["request"]["Pod"]
    if pod.get("spec", {}).get("workloadRef"):
        if not record["reply"].get("NodeNames"):
            return "gang member, told to wait"
        if not d["hits"] and not d["misses"]:  # steering looks at the reservation's nodes only
            return "gang member, steered to its reservation"
        return "gang member, cache hit" if d["hits"] else "gang member, cache miss"
    if d["unsignable"]:
        return "plain pod, unsignable (anti-affinity)"
    return "plain pod, cache hit" if d["hits"] else "plain pod, cache miss"


def counters(app: Any) -> dict[str, int]:
    rt = app.extensions["gang_extender"].runtime
    stats = rt.cache.stats()
    return {"hits": stats["hits"], "misses": stats["misses"], "unsignable": stats["unsignable"],
            "admitted": rt.ledger.view.counters()["admitted"]}


def time_admission(ledger: Any, times: dict[str, list[float]]) -> None:
    """Wrap ``ledger.admission`` to record how long each call takes, by outcome."""
    admission = ledger.admission

    def timed(*args: Any, **kwargs: Any) -> Any:
        admitted = ledger.view.counters()["admitted"]
        started = time.perf_counter()
        verdict = admission(*args, **kwargs)
        elapsed = (time.perf_counter() - started) * 1000
        if ledger.view.counters()["admitted"] > admitted:
            times["admits the gang (plans its reservation)"].append(elapsed)
        elif verdict.passes:
            times["passes (gang admitted or complete)"].append(elapsed)
        else:
            times["tells the member to wait"].append(elapsed)
        return verdict

    ledger.admission = timed


def time_collections(pauses: dict[int, list[float]]) -> None:
    """Record how long each garbage collection takes, by generation."""
    started: list[float] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            pauses[info["generation"]].append((time.perf_counter() - started[0]) * 1000)

    gc.callbacks.append(callback)


def print_table(times: dict[str, list[float]], what: str) -> None:
    print(f"| {what} | calls | share of time | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    total = sum(sum(v) for v in times.values())
    everything = [v for values in times.values() for v in values]
    for kind, values in [*sorted(times.items(), key=lambda kv: -sum(kv[1])), ("**all**", everything)]:
        ordered = sorted(values)
        print(f"| {kind} | {len(values)} | {sum(values) / total * 100:.0f} % | "
              + " | ".join(f"{loadtest.percentile(ordered, q):.2f}" for q in (50, 90, 99)) + f" | {ordered[-1]:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=loadtest.CORPUS)
    parser.add_argument("--profile", action="store_true",
                        help="also run cProfile (times then include its overhead, about 2x) and print the functions "
                             "of the slowest kind")
    parser.add_argument("--top", type=int, default=25, help="cProfile lines for the slowest kind [25]")
    args = parser.parse_args(argv)
    corpus = loadtest.load_corpus(args.corpus)
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "snapshot.json"
        snapshot.write_bytes(corpus.snapshot)
        app = create_app(Settings(cluster_snapshot=str(snapshot), gang_timeout_seconds=3600, log_level="WARNING"))
        client = app.test_client()
        times: dict[str, list[float]] = defaultdict(list)
        stats: dict[str, pstats.Stats] = {}
        threads: list[threading.Thread] = []
        rt = app.extensions["gang_extender"].runtime
        admissions: dict[str, list[float]] = defaultdict(list)
        time_admission(rt.ledger, admissions)
        pauses: dict[int, list[float]] = defaultdict(list)
        time_collections(pauses)
        for record in corpus.records:
            body = orjson.dumps(record["request"])
            if record["verb"] == "bind":
                held = rt.ledger.view.held_count()
                thread = threading.Thread(target=client.post, args=("/bind",), daemon=True,
                                          kwargs={"data": body, "content_type": "application/json"})
                thread.start()
                threads.append(thread)
                deadline = time.monotonic() + 2
                while thread.is_alive() and rt.ledger.view.held_count() <= held and time.monotonic() < deadline:
                    time.sleep(0.0005)
                continue
            if record["verb"] != "filter":
                client.post("/" + record["verb"], data=body, content_type="application/json")
                continue
            before = counters(app)
            profile = cProfile.Profile()
            started = time.perf_counter()
            if args.profile:
                profile.enable()
            client.post("/filter", data=body, content_type="application/json")
            if args.profile:
                profile.disable()
            elapsed = time.perf_counter() - started
            kind = kind_of(app, record, before, counters(app))
            times[kind].append(elapsed * 1000)
            if not args.profile:
                pass
            elif kind in stats:
                stats[kind].add(profile)
            else:
                stats[kind] = pstats.Stats(profile)
        for thread in threads:
            thread.join(5)
        rt.close()
    print("\n## Filter time by kind of request, in process (no HTTP), the corpus replayed in order\n")
    print_table(times, "kind of filter request")
    print("\n## GangLedger.admission inside those filters, by outcome\n")
    print_table(admissions, "admission outcome")
    print("\n## Garbage collections during the replay (this process also holds the corpus)\n")
    print("| generation | collections | p50 ms | max ms |")
    print("|---:|---:|---:|---:|")
    for generation, values in sorted(pauses.items()):
        ordered = sorted(values)
        print(f"| {generation} | {len(values)} | {loadtest.percentile(ordered, 50):.2f} | {ordered[-1]:.2f} |")
    if not args.profile:
        return 0
    slowest = max(times, key=lambda k: sorted(times[k])[len(times[k]) // 2])
    print(f"\n## Where \"{slowest}\" spends its time (cProfile, cumulative, all such requests)\n")
    out = io.StringIO()
    stats[slowest].stream = out  # type: ignore[attr-defined]
    stats[slowest].sort_stats("cumulative").print_stats(args.top)
    text = out.getvalue()
    print("```\n" + text[text.find("ncalls"):].rstrip() + "\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())

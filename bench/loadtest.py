"""Replay load test: the recorded kube-scheduler requests against ``gang-extender serve --cluster-snapshot``.

The corpus (``tests/data/corpus/``, recorded by ``hack/record_corpus.py``) holds what a real
kube-scheduler v1.35.4 sent the extender for 1,179 pods on 1,000 nodes, with the replies it got, and
the cluster snapshot at the moment the recording started. The load generator is **wrk** (Debian's
4.1.0) driven by ``bench/replay.lua``; this script prepares the inputs, starts a fresh server for
every run, reads ``/metrics`` before and after, and turns wrk's raw samples into tables.

Runs (each against a fresh server: empty cache, empty gang ledger):

- ``timed``: one pass over the corpus at the recorded arrival times, ``--speeds`` times faster
  (1 = exactly the rate and bursts kube-scheduler produced), over one connection as kube-scheduler
  sends filters (one scheduling cycle at a time);
- ``rate``: open loop at fixed request rates (``--rates``), cycling through the corpus for
  ``--duration`` seconds over ``--connections`` connections; latency counted from when each request
  was due (corrected for coordinated omission, as wrk2 does);
- ``closed``: closed loop, as fast as replies come, on 1 and ``--connections`` connections: the
  server's maximum throughput.

First (``--no-verify`` skips it; ``--verify`` does only this) the corpus is replayed in recorded order
with one connection and every reply compared with the recorded one: filters only against the start
snapshot, and filters + prioritize + binds (binds change the in-memory state as they changed the
cluster, so the replies should be the same, byte for byte).

Run: ``make loadtest`` (= ``.venv/bin/python bench/loadtest.py``), ``--quick`` for a few seconds' smoke
run, ``--help`` for the options. Results and how to read them: docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "corpus"
LUA = Path(__file__).resolve().with_name("replay.lua")
GANG_EXTENDER = str(Path(sys.executable).with_name("gang-extender"))
P99_FLOOR_MS = 5.0
VERB_PATHS = {"filter": "/filter", "prioritize": "/prioritize", "bind": "/bind"}


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ corpus
@dataclass
class Corpus:
    records: list[dict[str, Any]]     # the recorder's lines, in arrival order
    snapshot: bytes                   # the --cluster-snapshot file (JSON)
    meta: dict[str, Any]

    def of(self, verbs: Sequence[str]) -> list[dict[str, Any]]:
        return [r for r in self.records if r["verb"] in verbs and r["status"] == 200]


def load_corpus(directory: Path) -> Corpus:
    with gzip.open(directory / "requests.jsonl.gz", "rb") as f:
        records = [orjson.loads(line) for line in f if line.strip()]
    records.sort(key=lambda r: r["arrival"])
    with gzip.open(directory / "snapshot.json.gz", "rb") as f:
        snapshot = f.read()
    meta_path = directory / "corpus.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return Corpus(records, snapshot, meta)


def write_bodies(path: Path, records: Sequence[dict[str, Any]], *, speed: float = 0.0) -> None:
    """One request per line for replay.lua: ``[due_us\\t]path\\tbody`` (due only for a timed replay)."""
    t0 = records[0]["arrival"] if records else 0.0
    with path.open("wb") as f:
        for r in records:
            prefix = f"{(r['arrival'] - t0) / speed * 1e6:.0f}\t".encode() if speed else b""
            f.write(prefix + VERB_PATHS[r["verb"]].encode() + b"\t" + orjson.dumps(r["request"]) + b"\n")


# ------------------------------------------------------------------------------------------ server
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """``gang-extender serve --cluster-snapshot`` (production CLI, gunicorn, one gthread worker)."""

    def __init__(self, snapshot: Path, workdir: Path, extra: Sequence[str] = ()) -> None:
        self.port = free_port()
        self.log_path = workdir / f"server-{self.port}.log"
        argv = [GANG_EXTENDER, "serve", "--cluster-snapshot", str(snapshot), "--host", "127.0.0.1",
                "--port", str(self.port),
                "--gang-timeout-seconds", "3600",  # no binds in a filter replay: admitted gangs must not expire
                "--log-level", "WARNING", *extra]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                if self.get("/readyz")[0] == 200:
                    break
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"server not ready after 120 s:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for line in self.get("/metrics")[1].decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    values[name] = float(value)
        return values

    def worker_cpu_seconds(self) -> float:
        """CPU time (user + system) of gunicorn's worker so far."""
        try:
            child = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()[0]
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


@contextlib.contextmanager
def server(snapshot: Path, workdir: Path, extra: Sequence[str] = ()) -> Iterator[Server]:
    srv = Server(snapshot, workdir, extra)
    try:
        yield srv
    finally:
        srv.stop()


# ------------------------------------------------------------------------------------------ stats
def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def cache_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    def d(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    hits, misses = d("gang_extender_filter_cache_hits_total"), d("gang_extender_filter_cache_misses_total")
    return {"hits": hits, "misses": misses, "unsignable": d("gang_extender_filter_cache_unsignable_total"),
            "hit_ratio": hits / (hits + misses) if hits + misses else float("nan"),
            "server_errors": d('gang_extender_requests_total{outcome="error",verb="filter"}')
            + d('gang_extender_requests_total{outcome="bad_request",verb="filter"}')}


@dataclass
class Run:
    name: str
    mode: str
    target: str                      # what was asked: "400/s", "1x recorded", "4 conn"
    seconds: float = 0.0
    replies: int = 0
    errors: int = 0
    first_error: str = ""
    lat_ms: dict[str, float] = field(default_factory=dict)
    service_ms: dict[str, float] = field(default_factory=dict)
    per_verb: dict[str, dict[str, float]] = field(default_factory=dict)
    cache: dict[str, float] = field(default_factory=dict)
    server_cpu: float = float("nan")  # worker CPU seconds / wall seconds
    loadavg: str = ""
    samples: list[float] = field(default_factory=list)  # corrected latencies, ms (for plots)
    slowest: list[str] = field(default_factory=list)    # the slowest replies and what they were

    @property
    def throughput(self) -> float:
        return self.replies / self.seconds if self.seconds else float("nan")


def summarize(values_us: Sequence[float]) -> dict[str, float]:
    ordered = sorted(v / 1000 for v in values_us)
    return {"p50": percentile(ordered, 50), "p90": percentile(ordered, 90), "p99": percentile(ordered, 99),
            "max": ordered[-1] if ordered else float("nan"), "n": len(ordered)}


# ------------------------------------------------------------------------------------------ wrk
def ensure_wrk() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise SystemExit("wrk is not installed: `make loadtest` installs it (apt-get install -y wrk), "
                         "or install it yourself")
    return path


def run_wrk(srv: Server, bodies: Path, workdir: Path, *, connections: int, rate: float, seconds: float,
            records: Sequence[dict[str, Any]], label: str) -> Run:
    """One wrk run of replay.lua over ``bodies`` (written from ``records``, in that order)."""
    out = workdir / f"wrk-{label.replace(' ', '_').replace('/', '_')}.json"
    env = {**os.environ, "REPLAY_BODIES": str(bodies), "REPLAY_THREADS": str(connections),
           "REPLAY_RATE": f"{rate:g}", "REPLAY_OUT": str(out)}
    argv = [ensure_wrk(), "-t", str(connections), "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
            "--timeout", "10s", "-s", str(LUA), f"http://127.0.0.1:{srv.port}"]
    before, cpu0 = srv.metrics(), srv.worker_cpu_seconds()
    started = time.monotonic()
    with (workdir / "wrk.log").open("ab") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        requests0 = _requests_total(before)
        while proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
                break
            elapsed = time.monotonic() - started
            with contextlib.suppress(OSError):
                done = _requests_total(srv.metrics()) - requests0
                progress(f"    {label}: {elapsed:4.0f}/{seconds:.0f}s, {done:,.0f} replies "
                         f"({done / elapsed:,.0f}/s)")
    wall = time.monotonic() - started
    after, cpu1 = srv.metrics(), srv.worker_cpu_seconds()
    if proc.returncode != 0:
        raise SystemExit(f"wrk exited with {proc.returncode}; see {workdir / 'wrk.log'}")
    raw = json.loads(out.read_text())
    lat: list[float] = []
    service: list[float] = []
    by_verb: dict[str, list[float]] = {}
    verb_of_index = [r["verb"] for r in records]
    errors = sum(t["errors"] for t in raw["threads"]) + sum(raw["socket_errors"].values()) + raw["non_2xx"]
    first_error = next((t["first_error"] for t in raw["threads"] if t["first_error"]), "")
    slowest: list[tuple[float, int]] = []
    for t in raw["threads"]:
        lat += t["lat"]
        service += t["service"]
        for value, index in zip(t["lat"], t["index"], strict=True):
            by_verb.setdefault(verb_of_index[int(index)], []).append(value)
            slowest.append((value, int(index)))
    slowest.sort(reverse=True)
    run = Run(label, "", "", seconds=raw["duration_us"] / 1e6, replies=len(lat), errors=errors,
              first_error=first_error, lat_ms=summarize(lat), service_ms=summarize(service),
              per_verb={v: summarize(values) for v, values in by_verb.items()}, cache=cache_delta(before, after),
              server_cpu=(cpu1 - cpu0) / wall, loadavg=loadavg(), samples=[v / 1000 for v in lat],
              slowest=[f"{v / 1000:.1f} ms: {_describe(records[i])}" for v, i in slowest[:8]])
    return run


def _describe(record: dict[str, Any]) -> str:
    """Which recorded request this was: verb, pod, names sent, and what the recorded reply said."""
    request = record["request"]
    meta = request.get("Pod", {}).get("metadata", {}) if isinstance(request, dict) else {}
    reply = record["reply"]
    brief = _brief(reply) if isinstance(reply, dict) else ""
    return (f"#{record.get('index', '?')} {record['verb']} {meta.get('namespace')}/{meta.get('name')}, "
            f"{len(request.get('NodeNames') or [])} names; recorded {record['latency_seconds'] * 1000:.1f} ms, {brief}")


def _requests_total(values: dict[str, float]) -> float:
    return sum(v for k, v in values.items() if k.startswith("gang_extender_requests_total{"))


def loadavg() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


# ------------------------------------------------------------------------------------------ verify
def compare(verb: str, recorded: Any, replayed: Any) -> str:
    """"exact", or the kind of difference."""
    if recorded == replayed:
        return "exact"
    if verb == "filter":
        if (recorded.get("NodeNames") or []) == (replayed.get("NodeNames") or []):
            return "same feasible nodes, other reasons"
        if set(recorded.get("NodeNames") or []) == set(replayed.get("NodeNames") or []):
            return "same feasible nodes, other order"
        if not recorded.get("NodeNames") and replayed.get("NodeNames"):
            return "recorded none feasible, replay some"
        if recorded.get("NodeNames") and not replayed.get("NodeNames"):
            return "recorded some feasible, replay none"
        return "other feasible nodes"
    if verb == "prioritize":
        return "other scores"
    return "other bind outcome"


def verify(corpus: Corpus, workdir: Path, snapshot: Path, *, with_binds: bool,
           limit: int | None = None) -> dict[str, Any]:
    """Replay in recorded order with one connection; count replies equal to the recorded ones.

    Binds are sent from their own threads (a gang member's bind is held until its gang's quorum) and
    the next request waits until the extender has taken the bind: answered it, or holds it. ``limit``
    replays about the first ``limit`` requests: it goes on until no bind is held at a gang barrier.
    """
    verbs = ("filter", "prioritize", "bind") if with_binds else ("filter",)
    records = corpus.of(verbs)
    outcomes: dict[str, Counter[str]] = {v: Counter() for v in verbs}
    examples: dict[str, str] = {}
    drift: list[float] = []  # per filter: |recorded feasible xor replayed feasible| / |union|
    binds: list[tuple[dict[str, Any], threading.Thread, list[Any]]] = []
    # Holds last as long as the replay needs: a slow replay (a loaded machine) must not answer a held
    # bind with a retry where the recorded run, at kube-scheduler's pace, bound it.
    with server(snapshot, workdir, ["--scheduler-http-timeout-seconds", "3600"]) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        headers = {"Content-Type": "application/json"}

        def post(path: str, body: bytes, into: list[Any]) -> None:
            c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=3700)
            try:
                c.request("POST", path, body, headers)
                into.append(orjson.loads(c.getresponse().read()))
            except (OSError, http.client.HTTPException, orjson.JSONDecodeError) as exc:
                into.append({"Error": f"replay: {type(exc).__name__}: {exc}"})
            finally:
                c.close()

        for i, r in enumerate(records):
            if limit is not None and i >= limit and (
                    not with_binds or srv.metrics().get("gang_extender_held_binds", 0.0) == 0):
                break
            body = orjson.dumps(r["request"])
            if r["verb"] == "bind":
                held_before = srv.metrics().get("gang_extender_held_binds", 0.0)
                reply: list[Any] = []
                thread = threading.Thread(target=post, args=("/bind", body, reply), daemon=True)
                thread.start()
                # wait until the extender has taken the bind: answered, or holding it at the gang barrier
                deadline = time.monotonic() + 30
                while (thread.is_alive() and srv.metrics().get("gang_extender_held_binds", 0.0) <= held_before
                       and time.monotonic() < deadline):
                    time.sleep(0.001)
                binds.append((r, thread, reply))
                continue
            conn.request("POST", VERB_PATHS[r["verb"]], body, headers)
            replayed = orjson.loads(conn.getresponse().read())
            outcome = compare(r["verb"], r["reply"], replayed)
            outcomes[r["verb"]][outcome] += 1
            if r["verb"] == "filter":
                recorded_set, replayed_set = set(r["reply"]["NodeNames"] or []), set(replayed["NodeNames"] or [])
                union = recorded_set | replayed_set
                drift.append(len(recorded_set ^ replayed_set) / len(union) if union else 0.0)
            if outcome != "exact" and outcome not in examples:
                pod = r["request"]["Pod"]["metadata"]
                examples[outcome] = (f"{pod['namespace']}/{pod['name']}: recorded "
                                     f"{_brief(r['reply'])}, replay {_brief(replayed)}")
        deadline = time.monotonic() + 10
        for r, thread, reply in binds:
            thread.join(max(0.0, deadline - time.monotonic()))
            outcomes["bind"][compare("bind", r["reply"], reply[0]) if reply else "no answer (still held)"] += 1
        conn.close()
    drift.sort()
    return {"with_binds": with_binds, "outcomes": {v: dict(c) for v, c in outcomes.items()}, "examples": examples,
            "feasible_set_difference": {"median": percentile(drift, 50), "p90": percentile(drift, 90),
                                        "max": drift[-1] if drift else float("nan")}}


def _brief(reply: Any) -> str:
    if isinstance(reply, dict) and "NodeNames" in reply:
        failed = {**(reply.get("FailedNodes") or {}), **(reply.get("FailedAndUnresolvableNodes") or {})}
        reason = next(iter(failed.values()), "")
        return f"{len(reply.get('NodeNames') or [])} feasible / {len(failed)} failed ({reason[:90]!r})"
    return json.dumps(reply)[:120]


# ------------------------------------------------------------------------------------------ output
def fmt(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def table(runs: Sequence[Run]) -> str:
    lines = ["| run | target | replies | seconds | throughput /s | p50 ms | p90 ms | p99 ms | max ms | errors "
             "| cache hit ratio | server CPU | load avg |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        lines.append(f"| {r.mode} | {r.target} | {r.replies:,} | {r.seconds:.1f} | {fmt(r.throughput, 0)} | "
                     f"{fmt(r.lat_ms['p50'])} | {fmt(r.lat_ms['p90'])} | {fmt(r.lat_ms['p99'])} | "
                     f"{fmt(r.lat_ms['max'])} | {r.errors} | {fmt(r.cache.get('hit_ratio', float('nan')) * 100, 1)} % "
                     f"| {fmt(r.server_cpu * 100, 0)} % | {r.loadavg} |")
    return "\n".join(lines)


def verify_table(results: Sequence[dict[str, Any]]) -> str:
    lines = ["| replay | verb | replies | exact | differences | feasible-set difference (median / p90 / max) |",
             "|---|---|---:|---:|---|---|"]
    for res in results:
        name = "filters + prioritize + binds, in order" if res["with_binds"] else "filters only, start snapshot"
        for verb, counts in res["outcomes"].items():
            total = sum(counts.values())
            exact = counts.get("exact", 0)
            other = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()) if k != "exact") or "none"
            diff = res["feasible_set_difference"] if verb == "filter" else None
            spread = (" / ".join(f"{diff[k] * 100:.1f} %" for k in ("median", "p90", "max")) if diff else "")
            lines.append(f"| {name} | {verb} | {total:,} | {exact:,} ({exact / max(total, 1) * 100:.1f} %) | {other} "
                         f"| {spread} |")
    return "\n".join(lines)


def machine() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    wrk = subprocess.run([ensure_wrk(), "--version"], capture_output=True, text=True, check=False)
    return {"nproc": str(os.cpu_count()), "cpu": cpu,
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "wrk": " ".join((wrk.stdout or wrk.stderr or "wrk ?").split()[:2])}


# ------------------------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="recorded corpus directory [tests/data/corpus]")
    parser.add_argument("--verbs", default="filter", help="verbs replayed by wrk: filter[,prioritize] [filter]")
    parser.add_argument("--speeds", default="1,4,8", help="timed replays: times the recorded speed [1,4,8]")
    parser.add_argument("--rates", default="100,200,400,800", help="open-loop rates, requests/s [100,200,400,800]")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per rate and closed-loop run [20]")
    parser.add_argument("--connections", type=int, default=4, help="connections for rate/closed runs [4]")
    parser.add_argument("--timed-connections", type=int, default=1,
                        help="connections for timed replays [1: kube-scheduler sends filters one at a time]")
    parser.add_argument("--modes", default="timed,rate,closed", help="which runs [timed,rate,closed]")
    parser.add_argument("--verify", action="store_true", help="only compare replies with the recorded ones")
    parser.add_argument("--no-verify", action="store_true", help="skip that comparison before the load runs")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 s at 100/s and closed loop, 1 connection")
    parser.add_argument("--json", type=Path, help="write every number (and latency samples) here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (bodies, wrk and server logs)")
    args = parser.parse_args(argv)

    if args.quick:
        args.modes, args.rates, args.duration, args.connections = "rate,closed", "100", 2.0, 1
    corpus = load_corpus(args.corpus)
    workdir = Path(tempfile.mkdtemp(prefix="gang-loadtest-"))
    snapshot = workdir / "snapshot.json"
    snapshot.write_bytes(corpus.snapshot)
    meta = corpus.meta
    progress(f"[loadtest] corpus {args.corpus}: " + ", ".join(f"{v} {n}" for v, n in
             sorted(Counter(r["verb"] for r in corpus.records).items())) +
             f"; recorded with {meta.get('kubernetes', '?')}, {meta.get('nodes', '?')} nodes; "
             f"recorded filter rate {meta.get('filter_rate', {}).get('mean_per_second', '?')}/s mean, "
             f"{meta.get('filter_rate', {}).get('peak_1s', '?')} in the busiest second")
    out: dict[str, Any] = {"machine": machine(), "corpus": meta, "runs": [], "verify": []}
    try:
        if not args.no_verify and not args.quick:
            for with_binds in (False, True):
                progress(f"[loadtest] verify: {'filters + prioritize + binds' if with_binds else 'filters only'}, "
                         "in recorded order, one connection")
                out["verify"].append(verify(corpus, workdir, snapshot, with_binds=with_binds))
            print("\n## Same answers? The corpus replayed in recorded order\n")
            print(verify_table(out["verify"]))
            for res in out["verify"]:
                for kind, example in res["examples"].items():
                    print(f"\n- e.g. {kind}: {example}")
            if args.verify:
                return 0
        verbs = [v.strip() for v in args.verbs.split(",") if v.strip()]
        records = corpus.of(verbs)
        modes = set(args.modes.split(","))
        runs: list[Run] = []
        info = out["machine"]
        progress(f"[loadtest] {info['nproc']} cpu {info['cpu']}, {info['python']}, {info['wrk']}; "
                 f"replaying {len(records):,} requests ({', '.join(verbs)}); work dir {workdir}")
        for i, record in enumerate(records):
            record["index"] = i
        if "timed" in modes:
            span = float(records[-1]["arrival"] - records[0]["arrival"])
            for speed in (float(s) for s in args.speeds.split(",") if s.strip()):
                bodies = workdir / f"bodies-timed-{speed:g}.txt"
                write_bodies(bodies, records, speed=speed)
                label = f"timed {speed:g}x"
                progress(f"[loadtest] {label}: one pass of {len(records):,} requests at {speed:g}x the recorded "
                         f"times ({span / speed:.1f}s)")
                with server(snapshot, workdir) as srv:
                    run = run_wrk(srv, bodies, workdir, connections=args.timed_connections, rate=-speed,
                                  seconds=span / speed + 2, records=records, label=label)
                run.seconds = span / speed  # one pass; wrk's own duration includes the idle tail
                run.mode = "timed"
                run.target = (f"{speed:g}x recorded ({len(records) / span * speed:,.0f}/s mean), "
                              f"{args.timed_connections} conn")
                runs.append(_report(run))
        bodies = workdir / "bodies.txt"
        write_bodies(bodies, records)
        if "rate" in modes:
            for rate in (float(r) for r in args.rates.split(",") if r.strip()):
                label = f"rate {rate:g}/s"
                progress(f"[loadtest] {label}: open loop, {args.connections} connection(s), {args.duration:g}s")
                with server(snapshot, workdir) as srv:
                    run = run_wrk(srv, bodies, workdir, connections=args.connections, rate=rate,
                                  seconds=args.duration, records=records, label=label)
                run.mode, run.target = "open loop", f"{rate:g}/s, {args.connections} conn"
                runs.append(_report(run))
        if "closed" in modes:
            for conns in sorted({1, args.connections}):
                label = f"closed {conns} conn"
                progress(f"[loadtest] {label}: closed loop, {args.duration:g}s")
                with server(snapshot, workdir) as srv:
                    run = run_wrk(srv, bodies, workdir, connections=conns, rate=0, seconds=args.duration,
                                  records=records, label=label)
                run.mode, run.target = "closed loop", f"{conns} conn"
                runs.append(_report(run))
        print(f"\n## Replay load test ({info['nproc']} cpu {info['cpu']}; {meta.get('nodes', '?')} nodes; "
              f"{len(records):,} recorded {'/'.join(verbs)} requests; {info['wrk']})\n")
        print(table(runs))
        floor = [r for r in runs if r.mode != "closed loop"]
        verdicts = []
        for r in floor:
            ok = r.lat_ms["p99"] < P99_FLOOR_MS and r.errors == 0
            verdicts.append(f"- {r.name}: p99 {fmt(r.lat_ms['p99'])} ms, {r.errors} errors: "
                            f"{'MET' if ok else 'NOT MET'}")
        if verdicts:
            print(f"\nFloor (p99 < {P99_FLOOR_MS:g} ms, zero errors) at fixed rates:\n" + "\n".join(verdicts))
        errors = [f"- {r.name}: {r.first_error}" for r in runs if r.first_error]
        if errors:
            print("\nFirst error per run:\n" + "\n".join(errors))
        print("\nSlowest replies per run (corrected latency; #index in the replayed sequence):")
        for r in runs:
            print(f"\n- {r.name}:\n" + "\n".join(f"  - {line}" for line in r.slowest[:5]))
        out["runs"] = [{**{k: v for k, v in vars(r).items()}, "throughput": r.throughput} for r in runs]
        return 0 if all(r.errors == 0 for r in runs) else 1
    finally:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_bytes(orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY))
            progress(f"[loadtest] wrote {args.json}")
        if args.keep:
            progress(f"[loadtest] kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _report(run: Run) -> Run:
    progress(f"    -> {run.replies:,} replies in {run.seconds:.1f}s ({run.throughput:,.0f}/s), p50 "
             f"{fmt(run.lat_ms['p50'])} p99 {fmt(run.lat_ms['p99'])} max {fmt(run.lat_ms['max'])} ms, "
             f"{run.errors} errors, cache hit ratio {fmt(run.cache.get('hit_ratio', float('nan')) * 100, 1)} %, "
             f"server CPU {fmt(run.server_cpu * 100, 0)} %")
    return run


if __name__ == "__main__":
    sys.exit(main())

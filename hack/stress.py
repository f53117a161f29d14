#!/usr/bin/env python3
"""``make stress``: load against a live ``gang-extender serve --cluster-snapshot`` (gunicorn), with figures.

1. **Filter at 10x the nominal rate for 60 s.** Nominal: kube-scheduler's default client QPS is 50
   (``clientConnection.qps``), which caps its binds, so a scheduler at full speed places ~50 pods/s and
   calls filter ~50 times/s. The run sends 500 filter/s open-loop (each request has a fixed send time;
   latency counts from that time, so a slow server is not hidden by a slow client) for 60 s over 32
   keep-alive connections: 1,000 node names per request; 70 % cache hits (pods of one Deployment),
   20 % misses (new requests every time), 10 % gang members. Figures: achieved rate, errors, p50/p90/
   p99/max latency, worker RSS at start/end/max and open file descriptors.
2. **The bind barrier with 599 held requests.** A Workload gang with minCount 600 and 600 pending pods;
   599 concurrent bind requests (one thread each) are held, then the 600th releases them all. Figures:
   held count reached, worker threads, RSS and file descriptors while held, RSS per held bind,
   release latency, and that /metrics and /healthz still answered while 599 binds were held.
3. **The same barrier with too few threads** (``--threads 256``): shows the failure mode the sizing
   rule in docs/decisions/0001-one-worker.md prevents (with ``--skip-starvation`` to leave it out).

Usage: .venv/bin/python hack/stress.py [--rate 500] [--seconds 60] [--members 600] [--json FILE]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

from controlplane import free_ports, tail, wait_for  # noqa: E402

BIN = Path(sys.executable).parent


def log(message: str) -> None:
    print(f"[stress] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------- snapshots
def _node(name: str, cpu: str = "4") -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": "16Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": resources, "capacity": resources}}


def _pod(name: str, cpu: str, node: str = "", workload: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}
    if node:
        spec["nodeName"] = node
    if workload:
        spec["workloadRef"] = {"name": workload, "podGroup": "workers"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def _workload(name: str, min_count: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": min_count}}}]}}


def filter_snapshot(nodes: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = [_node(f"node-{i}") for i in range(nodes)]
    items += [_pod(f"bound-{i}-{j}", "500m", node=f"node-{i}") for i in range(nodes) for j in range(2)]
    items += [_workload("train", 8), *(_pod(f"train-{i}", "1", workload="train") for i in range(8))]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def barrier_snapshot(members: int) -> dict[str, Any]:
    nodes = (members + 3) // 4 + 2
    items = [_node(f"node-{i}") for i in range(nodes)]
    items += [_workload("big", members), *(_pod(f"big-{i}", "1", workload="big") for i in range(members))]
    return {"apiVersion": "v1", "kind": "List", "items": items}


# ---------------------------------------------------------------------------------------- server
class Server:
    def __init__(self, workdir: Path, snapshot: dict[str, Any], args: list[str]) -> None:
        self.workdir = workdir
        path = workdir / "snapshot.json"
        path.write_text(json.dumps(snapshot))
        self.port = free_ports(1)[0]
        self.log_path = workdir / "server.log"
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "gang-extender"), "serve", "--cluster-snapshot", str(path), "--port", str(self.port),
                 *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._ready, timeout=60, what="gang-extender /readyz")
        self.worker = self._worker_pid()

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited {self.proc.returncode}:\n{tail(self.log_path)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def _worker_pid(self) -> int:
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.worker}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.worker}/task"))

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.worker}/fd"))

    def nofile_limit(self) -> str:
        for line in Path(f"/proc/{self.worker}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return " / ".join(line.split()[3:5])
        return "?"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            reply = conn.getresponse()
            return reply.status, reply.read()
        finally:
            conn.close()

    def metric(self, name: str) -> float:
        _, body = self.get("/metrics")
        for line in body.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rpartition(" ")[2])
        return 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def server_quantiles(server: Server, verb: str) -> dict[str, str]:
    """p50/p99 of the server's own latency histogram (handler time, no queueing), as bucket bounds."""
    _, body = server.get("/metrics")
    buckets = []
    for line in body.decode().splitlines():
        if line.startswith("gang_extender_request_seconds_bucket{") and f'verb="{verb}"' in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(le), float(line.rpartition(" ")[2])))
    total = buckets[-1][1] if buckets else 0.0
    found: dict[str, str] = {}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        upper = next((b for b, count in buckets if count >= q * total), float("inf"))
        found[name] = f"<= {upper * 1000:g}"
    return found


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


# ------------------------------------------------------------------------------------ 1. filter
def filter_rate(workdir: Path, *, rate: float, seconds: float, nodes: int, connections: int) -> dict[str, Any]:
    server = Server(workdir, filter_snapshot(nodes), ["--gang-timeout-seconds", "3600"])
    names = [f"node-{i}" for i in range(nodes)]
    rng = random.Random(7)

    def body(i: int) -> bytes:
        kind = rng.random()
        extra: dict[str, Any]
        if kind < 0.7:    # a Deployment's pods: same spec, new name
            cpu, extra = "250m", {}
        elif kind < 0.9:  # a new signature every time
            cpu, extra = f"{rng.randint(1, 4000)}m", {}
        else:             # a gang member
            cpu, extra = "1", {"workloadRef": {"name": "train", "podGroup": "workers"}}
        pod: dict[str, Any] = {"metadata": {"name": f"p-{i}", "namespace": "default", "uid": f"u-{i}"},
               "spec": {"containers": [{"resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}], **extra}}
        if kind >= 0.9:
            pod["metadata"]["name"] = f"train-{i % 8}"
            pod["metadata"]["uid"] = f"uid-train-{i % 8}"
        return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()

    total = int(rate * seconds)
    bodies = [body(i) for i in range(min(total, 5000))]
    for warm in bodies[:50]:  # fill the cache as a running scheduler would have
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", "/filter", body=warm, headers={"Content-Type": "application/json"})
        conn.getresponse().read()
        conn.close()
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    next_index = iter(range(total))
    rss: list[tuple[float, float, int]] = []
    start = time.monotonic() + 0.5

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                break
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            try:
                conn.request("POST", "/filter", body=bodies[i % len(bodies)],
                             headers={"Content-Type": "application/json"})
                reply = conn.getresponse()
                data = reply.read()
                ok = reply.status == 200 and b'"Error":""' in data
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
                ok, data = False, repr(exc).encode()
            done = time.monotonic()
            with lock:
                latencies.append(done - due)
                if not ok:
                    errors.append(data[:200].decode(errors="replace"))
        conn.close()

    def sample() -> None:
        while not stop.is_set():
            rss.append((time.monotonic() - start, server.rss_mb(), server.fds()))
            stop.wait(1.0)

    stop = threading.Event()
    sampler = threading.Thread(target=sample, daemon=True)
    rss_start = server.rss_mb()
    sampler.start()
    log(f"filter: {total} requests at {rate:g}/s over {connections} connections, {nodes} node names each")
    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    stop.set()
    sampler.join()
    hits = server.metric("gang_extender_filter_cache_hits_total")
    misses = server.metric("gang_extender_filter_cache_misses_total")
    result = {
        "nominal_rate": rate / 10, "target_rate": rate, "seconds": round(elapsed, 1), "requests": len(latencies),
        "achieved_rate": round(len(latencies) / elapsed, 1), "errors": len(errors), "error_examples": errors[:3],
        "latency_ms": {q: round(_percentile(latencies, p) * 1000, 2)
                       for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))},
        "cache_hit_ratio": round(hits / max(hits + misses, 1), 3),
        "rss_mb": {"start": round(rss_start, 1), "end": round(server.rss_mb(), 1),
                   "max": round(max(r for _, r, _ in rss), 1),
                   "growth_last_30s": round(rss[-1][1] - min(r for t, r, _ in rss if t >= elapsed - 30), 1)},
        "fds_max": max(f for _, _, f in rss),
        "rss_mb_every_10s": [round(r, 1) for t, r, _ in rss][::10],
        "cache_entries": server.metric("gang_extender_filter_cache_entries"),
        "server_side_ms": server_quantiles(server, "filter"),
    }
    server.stop()
    return result


# ----------------------------------------------------------------------------------- 2. barrier
def _bind(port: int, name: str, node: str, timeout: float) -> tuple[str, float]:
    body = json.dumps({"PodName": name, "PodNamespace": "default", "PodUID": f"uid-{name}", "Node": node}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/bind", body=body, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = json.loads(reply.read())
        return str(data.get("Error", data)), time.monotonic()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return f"client: {exc!r}", time.monotonic()
    finally:
        conn.close()


def barrier(workdir: Path, *, members: int, threads: int, gang_timeout: float) -> dict[str, Any]:
    server = Server(workdir, barrier_snapshot(members), ["--threads", str(threads), "--gang-timeout-seconds",
                                                         str(gang_timeout)])
    held = members - 1
    idle: dict[str, Any] = {"rss_mb": round(server.rss_mb(), 1), "threads": server.threads(), "fds": server.fds()}
    log(f"barrier: --threads {threads}: {held} concurrent binds of a {members}-member gang, then the last")
    pool = ThreadPoolExecutor(max_workers=members + 8)
    started = time.monotonic()
    futures = [pool.submit(_bind, server.port, f"big-{i}", f"node-{i // 4}", gang_timeout + 30) for i in range(held)]
    reached = 0.0
    probes_ok = True
    deadline = time.monotonic() + min(60.0, gang_timeout - 5)
    while time.monotonic() < deadline:
        try:
            reached = server.metric("gang_extender_held_binds")
        except (OSError, http.client.HTTPException):
            probes_ok = False  # no free thread to answer /metrics
        if reached >= held:
            break
        time.sleep(0.5)
    while_held: dict[str, Any] = {"held_binds": int(reached) if probes_ok else "unknown: /metrics got no thread",
                  "seconds_to_hold": round(time.monotonic() - started, 1),
                  "rss_mb": round(server.rss_mb(), 1), "threads": server.threads(), "fds": server.fds()}
    try:
        while_held["healthz"] = server.get("/healthz", timeout=5)[0]
    except (OSError, http.client.HTTPException) as exc:
        while_held["healthz"] = f"no answer: {type(exc).__name__}"
        probes_ok = False
    released = time.monotonic()
    last_error, last_done = _bind(server.port, f"big-{held}", f"node-{held // 4}", gang_timeout + 30)
    outcomes = [f.result() for f in futures]
    pool.shutdown()
    errors = [e for e, _ in outcomes if e] + ([last_error] if last_error else [])
    finish = max([last_done, *(t for _, t in outcomes)])
    result = {
        "threads": threads, "members": members, "idle": idle, "while_held": while_held,
        "probes_answered_while_held": probes_ok,
        "rss_per_held_bind_kb": round((while_held["rss_mb"] - idle["rss_mb"]) * 1024 / reached, 1) if reached else None,
        "bind_errors": len(errors), "error_examples": sorted(set(errors))[:3],
        "release_seconds": round(finish - released, 2), "nofile_limit_soft_hard": server.nofile_limit(),
    }
    server.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=500.0, help="filter requests per second (10x nominal)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--members", type=int, default=600)
    parser.add_argument("--threads", type=int, default=1024, help="--threads of the barrier run")
    parser.add_argument("--skip-filter", action="store_true")
    parser.add_argument("--skip-starvation", action="store_true")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gang-stress-") as tmp:
        if not args.skip_filter:
            (Path(tmp) / "filter").mkdir()
            result["filter"] = filter_rate(Path(tmp) / "filter", rate=args.rate, seconds=args.seconds,
                                           nodes=args.nodes, connections=args.connections)
            log(f"filter: {json.dumps(result['filter'])}")
        (Path(tmp) / "barrier").mkdir()
        result["barrier"] = barrier(Path(tmp) / "barrier", members=args.members, threads=args.threads,
                                    gang_timeout=120)
        log(f"barrier: {json.dumps(result['barrier'])}")
        if not args.skip_starvation:
            (Path(tmp) / "starved").mkdir()
            result["barrier_too_few_threads"] = barrier(Path(tmp) / "starved", members=args.members, threads=256,
                                                        gang_timeout=15)
            log(f"too few threads: {json.dumps(result['barrier_too_few_threads'])}")
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    ok = True
    if "filter" in result:
        ok &= result["filter"]["errors"] == 0
    ok &= result["barrier"]["bind_errors"] == 0 and result["barrier"]["while_held"]["held_binds"] == args.members - 1
    log("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

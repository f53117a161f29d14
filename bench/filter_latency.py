"""Filter latency benchmark: the real server (gunicorn, one gthread worker, snapshot mode) over HTTP.

One run:

1. writes a snapshot cluster (a Kubernetes ``List`` JSON in a temp dir): ``--nodes`` nodes (4 cpu,
   16Gi), ``--pods-per-node`` bound pods on each (500m, 1Gi), and one gang: a Workload
   (``scheduling.k8s.io/v1alpha1``) whose pod group ``workers`` needs ``minCount`` 8, with 8 pending
   member pods (2 cpu, 4Gi each);
2. starts ``gang-extender serve --cluster-snapshot ...`` exactly as production does (``extender.cli``:
   gunicorn, one gthread worker, keep-alive) in a subprocess, with one benchmark-only route added to
   the app that ``extender.http.app.create_app`` returns: ``POST /noop`` parses the same body with orjson
   and echoes its NodeNames in an ExtenderFilterResult (the do-nothing floor), served as the tree
   serves ``/filter`` (a direct route of the serving worker, or a Flask route in older trees);
3. measures, with one keep-alive ``http.client`` connection in a closed loop, at each ``--sizes``
   NodeNames count, these variants interleaved round-robin (so machine noise hits all alike):

   - ``noop``: the do-nothing endpoint;
   - ``hit``:  /filter for a non-gang pod whose signature is cached (warmed first; pod name and uid
     change every request, the scheduling-relevant spec does not);
   - ``miss``: /filter for a pod with a fresh signature every request (its cpu/memory requests
     change), so every node is evaluated;
   - ``gang``: /filter for a member of the admitted gang (steered to its reservation: only the nodes
     holding it are evaluated, no cache lookup; the answer lists only those nodes, steered-away nodes
     are left out of both maps);

4. prints median / p90 / p99 per variant, the ratios to ``noop``, the server's filter-cache counters
   from ``/metrics`` (proof that hits happened) and the worker's RSS, then a Markdown table.

Run: ``.venv/bin/python bench/filter_latency.py`` (``make bench``); ``--quick`` for a smoke test.
Results and how to read them: docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import http.client
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from extender.config import Settings

HERE = Path(__file__).resolve()
NAMESPACE = "bench"
GANG_NAME = "training"
GANG_GROUP = "workers"
GANG_MIN_COUNT = 8
VARIANTS = ("noop", "hit", "hit-rotated", "miss", "gang")
PRIMING_MISSES = 1  # the first hit-pod request, before any timing (a steered gang member uses no entry)
FLOOR_RATIO = 1.3  # target: cache-hit median <= 1.3x the do-nothing endpoint at 5,000 names


# ----------------------------------------------------------------------------------------- cluster
def node_name(index: int) -> str:
    return f"node-{index:05d}"


def _container(cpu: str, memory: str) -> dict[str, Any]:
    return {"name": "main", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}


def pod(name: str, *, cpu: str, memory: str, node: str = "", gang: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "default-scheduler", "containers": [_container(cpu, memory)],
                            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                             "effect": "NoExecute", "tolerationSeconds": 300}]}
    if node:
        spec["nodeName"] = node
    if gang:
        spec["workloadRef"] = {"name": GANG_NAME, "podGroup": GANG_GROUP}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "labels": {"app": "bench"}},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def gang_member(index: int) -> dict[str, Any]:
    return pod(f"{GANG_NAME}-worker-{index}", cpu="2", memory="4Gi", gang=True)


def snapshot(nodes: int, pods_per_node: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for i in range(nodes):
        name = node_name(i)
        resources = {"cpu": "4", "memory": "16Gi", "pods": "110"}
        items.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                            "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
                      "status": {"allocatable": resources, "capacity": dict(resources)}})
    for i in range(nodes):
        for j in range(pods_per_node):
            items.append(pod(f"running-{i}-{j}", cpu="500m", memory="1Gi", node=node_name(i)))
    items.append({"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
                  "metadata": {"name": GANG_NAME, "namespace": NAMESPACE},
                  "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": GANG_NAME},
                           "podGroups": [{"name": GANG_GROUP, "policy": {"gang": {"minCount": GANG_MIN_COUNT}}}]}})
    items.extend(gang_member(i) for i in range(GANG_MIN_COUNT))
    return {"apiVersion": "v1", "kind": "List", "items": items}


# ------------------------------------------------------------------------------------------ server
def noop_reply(data: bytes) -> bytes:
    """The do-nothing floor: same body, same parser, echo the names in an ExtenderFilterResult."""
    body = orjson.loads(data)
    return orjson.dumps({"Nodes": None, "NodeNames": body.get("NodeNames"), "FailedNodes": {},
                         "FailedAndUnresolvableNodes": {}, "Error": ""})


def add_noop_route(app: Any) -> None:
    """/noop as a Flask route (the way the verbs are served by a tree without direct routes)."""
    from flask import Response, request

    def noop() -> Response:
        return Response(noop_reply(request.get_data(cache=False)), mimetype="application/json")

    app.add_url_rule("/noop", "bench_noop", noop, methods=["POST"])


def add_noop_direct_route() -> None:
    """/noop as a direct route of the serving worker, where the tree serves its verbs so (the same stack)."""
    try:
        from extender.http import routes
    except ImportError:
        return
    production_direct_routes = getattr(routes, "direct_routes", None)
    if production_direct_routes is None:
        return

    def direct_routes(ext: Any) -> Any:
        table = production_direct_routes(ext)
        table["/noop"] = lambda data, _arrival: (200, noop_reply(data))
        return table

    routes.direct_routes = direct_routes  # serve (extender/http/server.py) looks it up as it loads the app


def serve(argv: list[str]) -> int:
    """Server subprocess: the production CLI (``extender.cli.main``), with /noop added to the app."""
    from extender import cli

    try:
        from extender.http import app as app_module
    except ImportError:  # a tree from before the package layout (--source-like PYTHONPATH runs)
        from extender import app as app_module

    try:  # /noop takes filter-sized bodies: the serving worker caps it like /filter
        try:
            from extender.http import framing
        except ImportError:  # a tree from before the package layout
            from extender import framing
        framing.NAME_LIST_PATHS = (*framing.NAME_LIST_PATHS, "/noop")
    except ImportError:  # an older tree still (--source-like PYTHONPATH runs): one cap for every path
        pass

    production_create_app = app_module.create_app

    def create_app(*args: Any, **kwargs: Any) -> Any:
        app = production_create_app(*args, **kwargs)
        add_noop_route(app)
        return app

    app_module.create_app = create_app  # serve (extender/http/server.py) imports it when it starts gunicorn
    add_noop_direct_route()
    return cli.main(argv)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def server(snapshot_path: Path, port: int, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    argv = [sys.executable, str(HERE), "--serve", "serve", "--cluster-snapshot", str(snapshot_path),
            "--host", "127.0.0.1", "--port", str(port),
            "--gang-timeout-seconds", "3600",  # the admitted gang must not time out during the run
            "--log-level", "WARNING"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_ready(port: int, proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                conn.close()
                return
            conn.close()
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"server not ready after {timeout:.0f}s:\n{log_path.read_text()[-4000:]}")


def worker_rss_kib(master_pid: int) -> dict[str, int]:
    """VmRSS/VmHWM of gunicorn's worker (the master's only child), in KiB; empty if unavailable."""
    try:
        children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
        status = Path(f"/proc/{children[0]}/status").read_text()
    except (OSError, IndexError):
        return {}
    out = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


# ------------------------------------------------------------------------------------------ client
class Client:
    """One keep-alive connection, one request in flight (closed loop)."""

    HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.conn.connect()
        assert self.conn.sock is not None
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path: str, body: bytes) -> tuple[float, int, bytes]:
        """(seconds from send to the last byte of the reply, status, reply body)."""
        started = time.perf_counter()
        self.conn.request("POST", path, body, self.HEADERS)
        response = self.conn.getresponse()
        data = response.read()
        elapsed = time.perf_counter() - started
        return elapsed, response.status, data

    def get(self, path: str) -> bytes:
        self.conn.request("GET", path)
        return self.conn.getresponse().read()

    def close(self) -> None:
        self.conn.close()


@dataclass
class Variant:
    name: str
    path: str
    body: Callable[[int], bytes]              # request number -> body (built outside the timed region)
    check: Callable[[dict[str, Any]], str]    # parsed reply -> "" or what is wrong
    samples: list[float] = field(default_factory=list)
    sent: int = 0  # requests of this variant sent at this size, timed or not


def request_body(pod_obj: dict[str, Any], names: list[str]) -> bytes:
    return orjson.dumps({"Pod": pod_obj, "Nodes": None, "NodeNames": names})


def variants(names: list[str], miss_counter: Iterator[int]) -> list[Variant]:
    """The four request kinds at one NodeNames size."""
    expected = set(names)

    def all_feasible(reply: dict[str, Any]) -> str:
        if reply.get("Error"):
            return f"Error: {reply['Error']}"
        got = reply.get("NodeNames") or []
        if len(got) != len(names) or set(got) != expected:
            failed = {**(reply.get("FailedNodes") or {}), **(reply.get("FailedAndUnresolvableNodes") or {})}
            return f"{len(got)}/{len(names)} feasible; e.g. {list(failed.items())[:2]}"
        return ""

    def steered_to_reservation(reply: dict[str, Any]) -> str:
        if reply.get("Error"):
            return f"Error: {reply['Error']}"
        got = reply.get("NodeNames") or []
        failed = reply.get("FailedNodes") or {}
        # Steered to the reservation: a few feasible nodes; the others are left out without a reason.
        if not got or not set(got) <= expected or len(got) >= len(names) or not set(failed) <= expected:
            return (f"{len(got)} feasible, {len(failed)} failed, "
                    f"{len(reply.get('FailedAndUnresolvableNodes') or {})} unresolvable of {len(names)}; "
                    f"e.g. {list({**failed, **(reply.get('FailedAndUnresolvableNodes') or {})}.items())[:2]}")
        return ""

    def hit_pod(i: int) -> bytes:
        return request_body(pod(f"web-{i}", cpu="250m", memory="512Mi"), names)

    def hit_rotated(i: int) -> bytes:
        # The order kube-scheduler uses when it scores a share of the nodes: the start rotates. Its own
        # signature (300m): one pod shape sees one scheduler behaviour, never both orders at once.
        start = (i * 7919) % len(names)
        return request_body(pod(f"api-{i}", cpu="300m", memory="512Mi"), names[start:] + names[:start])

    def miss_pod(_: int) -> bytes:
        # Unique across the whole run (and never the hit pod's 250m/512Mi): a signature never seen before.
        k = next(miss_counter)
        return request_body(pod(f"batch-{k}", cpu=f"{100 + k % 900}m", memory=f"{1024 + k // 900}Mi"), names)

    member = gang_member(0)
    return [
        Variant("noop", "/noop", hit_pod, all_feasible),
        Variant("hit", "/filter", hit_pod, all_feasible),
        Variant("hit-rotated", "/filter", hit_rotated, all_feasible),
        Variant("miss", "/filter", miss_pod, all_feasible),
        Variant("gang", "/filter", lambda _i: request_body(member, names), steered_to_reservation),
    ]


# ------------------------------------------------------------------------------------------- stats
def percentile(sorted_samples: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted samples."""
    if not sorted_samples:
        return float("nan")
    rank = max(1, min(len(sorted_samples), round(q / 100 * len(sorted_samples) + 0.5)))
    return sorted_samples[rank - 1]


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"n": len(ordered), "median": percentile(ordered, 50), "p90": percentile(ordered, 90),
            "p99": percentile(ordered, 99), "min": ordered[0] if ordered else float("nan")}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


# ------------------------------------------------------------------------------------------- run
def measure_size(client: Client, size: int, all_names: list[str], iterations: int, warmup: int,
                 miss_counter: Iterator[int], chosen: list[str]) -> list[Variant]:
    names = all_names[:size]
    kinds = [v for v in variants(names, miss_counter) if v.name in chosen]
    # Warm up: connection, code paths, and the cache entries of the hit and gang signatures.
    for variant in kinds:
        for i in range(warmup):
            _, status, data = client.post(variant.path, variant.body(-1 - i))
            variant.sent += 1
            problem = f"HTTP {status}" if status != 200 else variant.check(orjson.loads(data))
            if problem:
                raise SystemExit(f"{variant.name} at {size} names: unexpected reply: {problem}")
    gc.collect()
    gc.disable()  # client-side collections would land on whichever variant happens to be running
    started = time.monotonic()
    last_report = started
    try:
        for i in range(iterations):
            for variant in kinds:
                body = variant.body(i)
                elapsed, status, data = client.post(variant.path, body)
                variant.sent += 1
                if status != 200 or b'"Error":""' not in data:
                    raise SystemExit(f"{variant.name} at {size} names: HTTP {status}: {data[:300]!r}")
                variant.samples.append(elapsed)
            if i == 0 or i == iterations - 1 or time.monotonic() - last_report > 5:
                last_report = time.monotonic()
                medians = "  ".join(f"{v.name} {ms(summary(v.samples)['median'])}" for v in kinds)
                progress(f"  {size:>5} names: {i + 1:>4}/{iterations} rounds, "
                         f"{last_report - started:5.1f}s; medians ms: {medians}")
    finally:
        gc.enable()
    # Spot-check the last replies of each variant in full (outside the timed loop).
    for variant in kinds:
        _, _, data = client.post(variant.path, variant.body(iterations))
        variant.sent += 1
        problem = variant.check(orjson.loads(data))
        if problem:
            raise SystemExit(f"{variant.name} at {size} names: unexpected reply after the run: {problem}")
    return kinds


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def scrape(text: str, prefixes: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(prefixes):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def machine() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = []
    for dist in ("flask", "werkzeug", "gunicorn", "orjson", "cachetools", "prometheus-client"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions.append(f"{dist} {metadata.version(dist)}")
    return {"nproc": str(os.cpu_count()), "cpu": cpu,
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "libraries": ", ".join(versions)}


def markdown(results: dict[int, list[Variant]]) -> str:
    lines = ["| names | variant | n | median ms | p90 ms | p99 ms | median / noop |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for size, kinds in results.items():
        noop = summary(kinds[0].samples)["median"]
        for variant in kinds:
            s = summary(variant.samples)
            lines.append(f"| {size:,} | {variant.name} | {s['n']} | {ms(s['median'])} | {ms(s['p90'])} | "
                         f"{ms(s['p99'])} | {s['median'] / noop:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=None, help="NodeNames counts, comma-separated [100,1000,5000]")
    parser.add_argument("--nodes", type=int, default=None,
                        help="nodes in the snapshot, >= the largest size [5000; --quick: 1000]")
    parser.add_argument("--pods-per-node", type=int, default=2, help="bound pods on every node [2]")
    parser.add_argument("--iterations", type=int, default=None,
                        help="timed requests per variant per size [1000; --quick: 20]")
    parser.add_argument("--warmup", type=int, default=20, help="untimed requests per variant per size [20]")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 1,000 nodes, sizes up to 1,000, 20 iterations, 3 warm-up")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"which variants to run (noop is always run: it is the baseline) [{','.join(VARIANTS)}]")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (snapshot, server log)")
    args = parser.parse_args(argv)

    sizes = [int(s) for s in (args.sizes or "100,1000,5000").split(",") if s.strip()]
    if args.quick:
        if args.nodes is None:
            args.nodes = max(1000, max(sizes) if args.sizes else 0)
        if args.sizes is None:
            sizes = [s for s in sizes if s <= args.nodes]
        args.iterations = args.iterations or 20
        args.warmup = min(args.warmup, 3)
    args.nodes = args.nodes or 5000
    chosen = ["noop", *(v for v in VARIANTS if v != "noop" and v in args.variants.split(","))]
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    if max(sizes) > args.nodes:
        parser.error(f"--sizes asks for {max(sizes)} names but the snapshot has --nodes {args.nodes}")

    info = machine()
    progress(f"machine: {info['nproc']} cpu, {info['cpu']}, {info['python']}; {info['libraries']}")
    tmp = Path(tempfile.mkdtemp(prefix="gang-extender-bench-"))
    snapshot_path, log_path = tmp / "cluster.json", tmp / "server.log"
    started = time.monotonic()
    cluster = snapshot(args.nodes, args.pods_per_node)
    snapshot_path.write_bytes(orjson.dumps(cluster))
    progress(f"snapshot: {args.nodes} nodes, {args.nodes * args.pods_per_node} bound pods, gang "
             f"{NAMESPACE}/{GANG_NAME}/{GANG_GROUP} (minCount {GANG_MIN_COUNT}, {GANG_MIN_COUNT} pending members) "
             f"-> {snapshot_path} ({snapshot_path.stat().st_size / 2**20:.1f} MiB)")
    all_names = [node_name(i) for i in range(args.nodes)]
    port = free_port()
    results: dict[int, list[Variant]] = {}
    miss_counter = iter(range(10**9))
    with server(snapshot_path, port, log_path) as proc:
        wait_ready(port, proc, log_path)
        rss_start = worker_rss_kib(proc.pid)
        progress(f"server ready on 127.0.0.1:{port} after {time.monotonic() - started:.1f}s "
                 f"(gunicorn, 1 gthread worker, pid {proc.pid}); worker RSS {rss_start.get('VmRSS', 0) // 1024} MiB")
        client = Client(port)
        try:
            # Admit the gang and fill the hit signature's entry for every node before any timing.
            for variant in variants(all_names, miss_counter):
                if variant.name in ("gang", "hit", "hit-rotated"):
                    _, status, data = client.post(variant.path, variant.body(-1))
                    problem = f"HTTP {status}" if status != 200 else variant.check(orjson.loads(data))
                    if problem:
                        raise SystemExit(f"{variant.name} priming: {problem}")
            for size in sizes:
                iterations = args.iterations or 1000
                progress(f"size {size}: {iterations} rounds of {len(chosen)} variants "
                         f"({args.warmup} warm-up each)")
                results[size] = measure_size(client, size, all_names, iterations, args.warmup, miss_counter,
                                             chosen)
            metrics_text = client.get("/metrics").decode()
        finally:
            client.close()
        rss = worker_rss_kib(proc.pid)
    elapsed = time.monotonic() - started

    counters = scrape(metrics_text, ("gang_extender_filter_cache_", "gang_extender_requests_total",
                                     "gang_extender_admitted_gangs", "gang_extender_gangs_admitted"))
    defaults = Settings()
    print(f"\n## Filter latency ({info['nproc']} cpu {info['cpu']}, {info['python']}; "
          f"{args.nodes:,} nodes, run took {elapsed:.0f}s)\n")
    print(f"Server: gang-extender serve --cluster-snapshot (gunicorn, 1 gthread worker, {defaults.threads} threads, "
          f"cache-size {defaults.cache_size}, cache-ttl {defaults.cache_ttl_seconds:g}s); client: one keep-alive "
          f"connection, closed loop, variants interleaved round-robin.\n")
    print(markdown(results))
    print("\nRatios of medians:\n")
    others = [v for v in chosen if v != "noop"]
    with_miss_hit = "hit" in chosen and "miss" in chosen
    print("| names | " + " | ".join(f"{v} / noop" for v in others) + (" | miss / hit |" if with_miss_hit else " |"))
    print("|---:|" + "---:|" * (len(others) + with_miss_hit))
    floor_verdict = ""
    for size, kinds in results.items():
        med = {v.name: summary(v.samples)["median"] for v in kinds}
        cells = [f"{med[v] / med['noop']:.2f}x" for v in others]
        if with_miss_hit:
            cells.append(f"{med['miss'] / med['hit']:.1f}x")
        print(f"| {size:,} | " + " | ".join(cells) + " |")
        if size == 5000 and "hit" in med:
            ratio = med["hit"] / med["noop"]
            floor_verdict = (f"target (hit median <= {FLOOR_RATIO}x noop at 5,000 names): "
                             f"{'MET' if ratio <= FLOOR_RATIO else 'NOT MET'} ({ratio:.2f}x: "
                             f"hit {ms(med['hit'])} ms vs noop {ms(med['noop'])} ms)")
    print("\nServer counters from /metrics:\n")
    for key, value in counters.items():
        print(f"    {key} {value:g}")
    if rss:
        print(f"\nWorker memory: VmRSS {rss_start.get('VmRSS', 0) / 1024:.0f} MiB after loading the snapshot, "
              f"{rss.get('VmRSS', 0) / 1024:.0f} MiB at the end (peak {rss.get('VmHWM', 0) / 1024:.0f} MiB) with "
              f"{counters.get('gang_extender_filter_cache_entries', 0):g} cache entries")
    if floor_verdict:
        print(f"\n{floor_verdict}")
    sent = {name: sum(v.sent for kinds in results.values() for v in kinds if v.name == name) for name in VARIANTS}
    expected_hits = sent["hit"] + sent["hit-rotated"]
    expected_misses = sent["miss"] + PRIMING_MISSES + (1 if "hit-rotated" in chosen else 0)
    hits = counters.get("gang_extender_filter_cache_hits_total", -1)
    misses = counters.get("gang_extender_filter_cache_misses_total", -1)
    if (hits, misses) == (expected_hits, expected_misses):
        print(f"\nCache counters as expected: {hits:g} hits (every hit and hit-rotated request), "
              f"{misses:g} misses (every miss request + {PRIMING_MISSES} priming requests).")
    else:
        print(f"\nWARNING: expected {expected_hits} hits and {expected_misses} misses, /metrics says {hits:g} and "
              f"{misses:g}: the variants did not measure what they claim")
    if args.json:
        args.json.write_bytes(orjson.dumps({
            "machine": info, "nodes": args.nodes, "elapsed_seconds": elapsed, "counters": counters, "rss_kib": rss,
            "results": {size: {v.name: {**summary(v.samples), "samples": v.samples} for v in kinds}
                        for size, kinds in results.items()}}, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_INDENT_2))
    if args.keep:
        print(f"\nkept {tmp}")
    else:
        for path in (snapshot_path, log_path):
            path.unlink(missing_ok=True)
        tmp.rmdir()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        sys.exit(serve(sys.argv[2:]))
    sys.exit(main())

"""What one small request costs in the serving worker (extender/http/serving.py), this tree against another.

gunicorn with one ``ExtenderWorker`` (``--threads 64``) serving a Flask route that echoes a filter body's
node names; one client, one kept-alive connection, requests back to back for ``--seconds``; the worker's
CPU time (``/proc``) per request and the client's median latency. Trees alternate, ``--rounds`` times,
at each ``--names`` size (420: the recorded kube-scheduler filters; 5,000: a 65 KB reply).

Run: ``.venv/bin/python bench/worker_overhead.py --other DIR`` (DIR holds another tree's ``extender``
package, e.g. ``git archive HEAD extender | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
APP = '''
import orjson
from flask import Flask, Response, request

app = Flask("echo")


@app.post("/filter")
def filter_() -> Response:
    names = orjson.loads(request.get_data())["NodeNames"]
    return Response(orjson.dumps({"NodeNames": names, "FailedNodes": {}, "Error": ""}), mimetype="application/json")
'''


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(tree: Path, app_dir: Path, names: int, seconds: float) -> tuple[int, float, float]:
    """(requests, worker CPU µs per request, median latency µs) with the extender package of ``tree``."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", "1", "-k", "extender.http.serving.ExtenderWorker",
                             "--threads", "64", "--keep-alive", "75", "-b", f"127.0.0.1:{port}",
                             "--log-level", "warning", "echo_app:app"],
                            cwd=app_dir, env={**os.environ, "PYTHONPATH": f"{tree}:{app_dir}"}, start_new_session=True)
    body = orjson.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default"}},
                         "NodeNames": [f"node-{i:05d}" for i in range(names)]})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("POST", "/filter", body=body)
                conn.getresponse().read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        worker = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
        for _ in range(300):  # warm up
            conn.request("POST", "/filter", body=body)
            conn.getresponse().read()
        before, latencies = cpu_seconds(worker), []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            conn.request("POST", "/filter", body=body)
            conn.getresponse().read()
            latencies.append(time.perf_counter() - started)
        used = cpu_seconds(worker) - before
        return len(latencies), used / len(latencies) * 1e6, statistics.median(latencies) * 1e6
    finally:
        proc.terminate()
        proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", type=Path, required=True, help="a directory with another tree's extender package")
    parser.add_argument("--names", default="420,5000")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    app_dir = Path(tempfile.mkdtemp(prefix="worker-overhead-"))
    (app_dir / "echo_app.py").write_text(APP)
    trees = {"this tree": ROOT, str(args.other): args.other.resolve()}
    for round_ in range(args.rounds):
        for label, tree in trees.items():
            for names in map(int, args.names.split(",")):
                count, cpu_us, p50_us = measure(tree, app_dir, names, args.seconds)
                print(f"round {round_} {label:>24} names {names:5d}: {count:6d} requests, worker CPU "
                      f"{cpu_us:7.1f} µs/request, p50 {p50_us:7.1f} µs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What one HTTP request costs in CPU on this stack, outside any extender logic.

1. **Serving**: gunicorn (one worker) answering a filter body of 420 node names by echoing them: on
   gunicorn's gthread worker through a Flask route and as a bare WSGI function; on gang-extender's
   serving worker (``extender.http.serving``, as ``gang-extender serve`` runs it) through a Flask route
   and as a direct route (how it answers the verbs); a closed loop over one keep-alive connection
   (``http.client``) for ``--seconds``; the worker's CPU time (``/proc``) divided by the requests answered.
2. **A Binding through ``extender.kube.client``**: ``KubeClient.bind`` against a local stub API server (a
   ``http.server`` thread answering 201), CPU time of the calling thread per call.

    .venv/bin/python bench/request_overhead.py     # ~15 s
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # last: a compiled tree on PYTHONPATH is the one imported
    sys.path.append(str(ROOT))

from extender.kube.client import KubeClient  # noqa: E402

APPS = '''
import orjson
from flask import Flask, Response, request

flask_app = Flask("echo")


@flask_app.post("/filter")
def echo():
    args = orjson.loads(request.get_data())
    return Response(orjson.dumps({"NodeNames": args["NodeNames"], "FailedNodes": {}, "Error": ""}),
                    mimetype="application/json")


def wsgi_app(environ, start_response):
    args = orjson.loads(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))
    body = orjson.dumps({"NodeNames": args["NodeNames"], "FailedNodes": {}, "Error": ""})
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def echo(data, arrival):
    args = orjson.loads(data)
    return 200, orjson.dumps({"NodeNames": args["NodeNames"], "FailedNodes": {}, "Error": ""})


try:  # the serving worker's direct route (extender.http.serving), Flask for everything else
    from extender.http.serving import WithDirectRoutes
    direct_app = WithDirectRoutes(flask_app, {"/filter": echo})
except ImportError:  # a tree without direct routes
    direct_app = None
'''


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_pid(master: int) -> int:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return int(children[0])


def serving(app: str, body: bytes, seconds: float, workdir: Path, worker: str = "gthread") -> tuple[int, float]:
    """(requests answered, worker CPU seconds) for ``app`` under gunicorn with the ``worker`` class."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", "1", "-k", worker, "--threads", "64",
                             "--keep-alive", "75", "-b", f"127.0.0.1:{port}", "--log-level", "warning",
                             f"echo_apps:{app}"], cwd=workdir, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (
                                os.environ.get("PYTHONPATH"), str(ROOT))))})
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
                conn.getresponse().read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        worker = worker_pid(proc.pid)
        for _ in range(200):  # warm up
            conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
            conn.getresponse().read()
        before, count = cpu_seconds(worker), 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
            reply = conn.getresponse().read()
            count += 1
        assert orjson.loads(reply)["NodeNames"] == orjson.loads(body)["NodeNames"]
        return count, cpu_seconds(worker) - before
    finally:
        proc.terminate()
        proc.wait(10)


class _Created(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = b'{"kind":"Status","apiVersion":"v1","status":"Success","code":201}'
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def binding_cpu(calls: int, workdir: Path) -> float:
    """CPU seconds of the calling thread per ``KubeClient.bind`` against a local stub server."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Created)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{server.server_address[1]}"}}}}]
users: [{{name: u, user: {{token: bench}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    kube = KubeClient(str(kubeconfig))
    try:
        for _ in range(100):
            kube.bind("bench", "pod-1", "uid-1", "node-1")
        before = time.thread_time()
        for _ in range(calls):
            kube.bind("bench", "pod-1", "uid-1", "node-1")
        return (time.thread_time() - before) / calls
    finally:
        server.shutdown()
        server.server_close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0, help="closed loop per app [5]")
    parser.add_argument("--names", type=int, default=420, help="node names in the filter body [420]")
    parser.add_argument("--bindings", type=int, default=2000, help="KubeClient.bind calls [2000]")
    args = parser.parse_args()
    body = orjson.dumps({"Pod": {"metadata": {"name": "p", "namespace": "bench", "uid": "u"}},
                         "NodeNames": [f"node-{i:04d}" for i in range(args.names)]})
    with tempfile.TemporaryDirectory(prefix="gang-overhead-") as tmp:
        workdir = Path(tmp)
        (workdir / "echo_apps.py").write_text(APPS)
        print(f"| what | requests | CPU per request ({os.cpu_count()} cpu) |")
        print("|---|---:|---:|")
        ours = "extender.http.serving.ExtenderWorker"
        for app, worker, label in (("flask_app", "gthread", "gunicorn gthread + Flask route, echo"),
                                   ("wsgi_app", "gthread", "gunicorn gthread + bare WSGI function, echo"),
                                   ("flask_app", ours, "gang-extender's serving worker + Flask route, echo"),
                                   ("direct_app", ours, "gang-extender's serving worker + direct route, echo")):
            count, cpu = serving(app, body, args.seconds, workdir, worker)
            print(f"| {label} ({args.names} names) | {count:,} | {cpu / count * 1e3:.3f} ms |")
        per_call = binding_cpu(args.bindings, workdir)
        print(f"| `KubeClient.bind`, stub API server | {args.bindings:,} | {per_call * 1e3:.3f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A do-nothing kube-scheduler extender on gang-extender's HTTP stack, for the end-to-end benchmark.

``/filter`` answers every requested node feasible and ``/bind`` creates the pod's Binding, served the
way ``gang-extender serve`` serves (gunicorn, one gthread worker, Flask, orjson; the API client of
``extender.kube.client``). No mirror, no watches, no cache, no gangs. kube-scheduler configured with it
(``bench/e2e_scheduling.py --configs "ceiling;noop-extender"``) measures what the extender protocol
itself costs the scheduler on this machine: the part of the gap to the ceiling that no extender logic
can remove.

    .venv/bin/python bench/noop_extender.py --kubeconfig KUBECONFIG --port 8888
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from flask import Flask, Response, request

from extender.errors import KubeError
from extender.kube.client import KubeClient


def create_app(kubeconfig: str) -> Flask:
    app = Flask("noop-extender")
    kube = KubeClient(kubeconfig)

    def reply(body: Any) -> Response:
        return Response(orjson.dumps(body), mimetype="application/json")

    @app.post("/filter")
    def filter_() -> Response:
        args = orjson.loads(request.get_data())
        return reply({"Nodes": None, "NodeNames": args.get("NodeNames") or [], "FailedNodes": {},
                      "FailedAndUnresolvableNodes": {}, "Error": ""})

    @app.post("/bind")
    def bind() -> Response:
        args = orjson.loads(request.get_data())
        try:
            kube.bind(args["PodNamespace"], args["PodName"], args.get("PodUID") or "", args["Node"])
        except KubeError as exc:
            return reply({"Error": str(exc)})
        return reply({"Error": ""})

    @app.get("/healthz")
    def healthz() -> Response:
        return reply({"ok": True})

    return app


class NoopExtender:
    """``bench/noop_extender.py`` as a child process (its own process group), ready when constructed."""

    def __init__(self, kubeconfig: str, workdir: Path) -> None:
        import subprocess

        from support import free_ports  # tests/e2e, on sys.path through bench/workloads.py

        port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{port}"
        with open(workdir / "noop-extender.log", "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("noop_extender.py")), "--kubeconfig", kubeconfig,
                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                from controlplane import tail

                raise RuntimeError(f"noop extender did not start: {tail(workdir / 'noop-extender.log')}")
            time.sleep(0.1)

    def _healthy(self) -> bool:
        import urllib.request

        with contextlib.suppress(OSError), urllib.request.urlopen(self.url + "/healthz", timeout=2) as reply:
            return bool(reply.status == 200)
        return False

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(15)


def main() -> None:
    from gunicorn.app.base import BaseApplication

    from extender.http.server import worker_connections

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument("--threads", type=int, default=4096)
    args = parser.parse_args()

    class _Gunicorn(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            for key, value in {"bind": f"127.0.0.1:{args.port}", "workers": 1, "worker_class": "gthread",
                               "threads": args.threads, "worker_connections": worker_connections(args.threads),
                               "keepalive": 75, "loglevel": "warning"}.items():
                self.cfg.set(key, value)

        def load(self) -> Flask:
            return create_app(args.kubeconfig)

    _Gunicorn().run()


if __name__ == "__main__":
    main()

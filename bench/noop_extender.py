#!/usr/bin/env python3
"""A do-nothing kube-scheduler extender on gang-extender's HTTP stack, for the end-to-end benchmark.

``/filter`` answers every requested node feasible and ``/bind`` creates the pod's Binding, served the
way ``gang-extender serve`` serves (gunicorn, one worker of ``extender.http.serving`` reading each
request whole in its poller, the verbs as its direct routes, orjson; the API client of
``extender.kube.client``); ``--stack flask`` serves them as Flask routes on gunicorn's stock gthread
worker instead (how it served before the direct routes). No mirror, no watches, no cache, no gangs.
kube-scheduler configured with it (``bench/e2e_scheduling.py --configs "ceiling;noop-extender"``)
measures what the extender protocol itself costs the scheduler on this machine: the part of the gap to
the ceiling that no extender logic can remove.

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

from extender.config import Settings
from extender.engine.binding import BINDING_TIMEOUT, BindingSlots
from extender.errors import KubeError
from extender.kube.client import KubeClient
from extender.wiring.composition import CONNECTIONS_BESIDE_BINDS


class Verbs:
    """The two verbs, from a request body's bytes to the reply's.

    Bindings in flight are bounded as gang-extender bounds its releases' (``bind_parallelism``, over a
    pool of as many connections and the ones it keeps beside them): unbounded, a burst of binds beyond the
    pool opened a TLS connection per extra Binding and dropped it after (369 in a 4,000-pod run, ~10 % of
    this process's CPU in OpenSSL), so the baseline's CPU per pod moved with the bursts."""

    def __init__(self, kubeconfig: str) -> None:
        settings = Settings()
        self.kube = KubeClient(kubeconfig, connections=settings.bind_parallelism + CONNECTIONS_BESIDE_BINDS)
        self.slots = BindingSlots(settings.bind_parallelism)

    def filter(self, data: bytes) -> bytes:
        args = orjson.loads(data)
        return orjson.dumps({"Nodes": None, "NodeNames": args.get("NodeNames") or [], "FailedNodes": {},
                             "FailedAndUnresolvableNodes": {}, "Error": ""})

    def bind(self, data: bytes) -> bytes:
        args = orjson.loads(data)
        if not self.slots.acquire(BINDING_TIMEOUT):
            return orjson.dumps({"Error": "no Binding slot within its timeout"})
        try:
            self.kube.bind(args["PodNamespace"], args["PodName"], args.get("PodUID") or "", args["Node"])
        except KubeError as exc:
            return orjson.dumps({"Error": str(exc)})
        finally:
            self.slots.release()
        return orjson.dumps({"Error": ""})


def create_app(verbs: Verbs) -> Flask:
    app = Flask("noop-extender")

    def reply(body: bytes) -> Response:
        return Response(body, mimetype="application/json")

    app.add_url_rule("/filter", "filter", lambda: reply(verbs.filter(request.get_data())), methods=["POST"])
    app.add_url_rule("/bind", "bind", lambda: reply(verbs.bind(request.get_data())), methods=["POST"])
    app.add_url_rule("/healthz", "healthz", lambda: reply(b'{"ok":true}'))
    return app


class NoopExtender:
    """``bench/noop_extender.py`` as a child process (its own process group), ready when constructed."""

    def __init__(self, kubeconfig: str, workdir: Path, stack: str = "direct") -> None:
        import subprocess

        from support import free_ports  # tests/e2e, on sys.path through bench/workloads.py

        port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{port}"
        with open(workdir / "noop-extender.log", "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("noop_extender.py")), "--kubeconfig", kubeconfig,
                 "--port", str(port), "--stack", stack], stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
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

    from extender.http import connections, framing, serving
    from extender.http.server import worker_connections

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument("--threads", type=int, default=4096)
    parser.add_argument("--stack", choices=("direct", "flask"), default="direct",
                        help="direct: gang-extender's serving worker and direct routes (default); flask: Flask "
                             "routes on gunicorn's stock gthread worker")
    args = parser.parse_args()
    settings = Settings()  # gang-extender serve's defaults: body caps, client timeout, byte budget
    limits = connections.Limits(framing.BodyCaps(settings.max_body_bytes, settings.max_full_nodes_body_bytes),
                                settings.client_timeout_seconds, settings.request_buffer_bytes)

    class _Gunicorn(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            worker = serving.worker_class(limits) if args.stack == "direct" else "gthread"
            for key, value in {"bind": f"127.0.0.1:{args.port}", "workers": 1, "worker_class": worker,
                               "threads": args.threads, "worker_connections": worker_connections(args.threads),
                               "keepalive": 75, "loglevel": "warning"}.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            verbs = Verbs(args.kubeconfig)
            app = create_app(verbs)
            if args.stack == "flask":
                return app
            return serving.WithDirectRoutes(app, {"/filter": lambda data, _arrival: (200, verbs.filter(data)),
                                                  "/bind": lambda data, _arrival: (200, verbs.bind(data))})

    _Gunicorn().run()


if __name__ == "__main__":
    main()

"""A second scheduler extender that is kube-scheduler's binder, for the filter-gated mode's e2e tests.

A real HTTP extender (threads in the test process) in the role HAMi, gpushare, topolvm or stork play on
a cluster: ``/filter`` keeps every node it is offered (and remembers what it was offered, to show what
the extenders before it kept), ``/bind`` creates the pod's Binding through the API server. Told to, it
refuses the binds of chosen pods, as a binder whose own check fails (a device gone, a volume not
attachable) would.

Must not: look at gangs or decide anything about them; the tests judge the outcome.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from controlplane import ApiError, ControlPlane


class BinderExtender:
    """Serves ``/filter`` and ``/bind`` on a loopback port; ``url`` for the scheduler configuration."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.refuse: set[str] = set()  # "namespace/name" of pods whose binds are refused
        self.offered: dict[str, list[list[str]]] = {}  # "namespace/name" -> nodes offered, per filter call
        self.bound: dict[str, str] = {}  # "namespace/name" -> node, Bindings this binder created
        self.refused: dict[str, int] = {}  # "namespace/name" -> binds refused
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def config_entry(self) -> dict[str, Any]:
        """Its ``extenders`` entry: filters (sees what the extenders before it kept) and binds."""
        return {"urlPrefix": self.url, "filterVerb": "filter", "bindVerb": "bind", "nodeCacheCapable": True,
                "httpTimeout": "10s", "ignorable": False}

    # ------------------------------------------------------------------------------ the verbs
    def filter(self, request: dict[str, Any]) -> dict[str, Any]:
        meta = request["Pod"]["metadata"]
        names = list(request.get("NodeNames") or [])
        with self._lock:
            self.offered.setdefault(f"{meta['namespace']}/{meta['name']}", []).append(names)
        return {"NodeNames": names, "FailedNodes": {}, "Error": ""}

    def bind(self, request: dict[str, Any]) -> dict[str, Any]:
        ns, name, node = request["PodNamespace"], request["PodName"], request["Node"]
        key = f"{ns}/{name}"
        with self._lock:
            if key in self.refuse:
                self.refused[key] = self.refused.get(key, 0) + 1
                return {"Error": f"binder-extender refuses to bind {key} (told to by the test)"}
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": request["PodUID"]},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            self.cp.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)
        except ApiError as exc:
            return {"Error": f"binding {key} to {node}: {exc}"}
        with self._lock:
            self.bound[key] = node
        return {"Error": ""}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        binder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                verb = self.path.rstrip("/").rsplit("/", 1)[-1]
                reply = binder.filter(body) if verb == "filter" else binder.bind(body) if verb == "bind" else None
                data = json.dumps(reply if reply is not None else {"Error": f"no verb {verb}"}).encode()
                self.send_response(200 if reply is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@contextmanager
def binder_extender(cp: ControlPlane) -> Iterator[BinderExtender]:
    binder = BinderExtender(cp)
    binder.start()
    try:
        yield binder
    finally:
        binder.stop()

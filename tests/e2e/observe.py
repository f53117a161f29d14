"""Watching gang-extender from outside, for e2e tests that judge it by times it does not write itself.

- ``RecordingProxy``: an HTTP relay between kube-scheduler and gang-extender (threads in the test
  process). Per request it logs the verb, the pod, the bind's node, when the request arrived, when the
  extender's reply came back, when that reply was written to kube-scheduler, the reply's ``Error``,
  and when kube-scheduler hung up if it did so before the reply (its ``httpTimeout`` ran out).
- ``PodWatch``: one watch on a namespace's pods; the order (the API server's) and the local time at
  which each pod's ``spec.nodeName`` first appeared, and when a pod's scheduling gates went away.
- ``observed_scheduling``: gang-extender, the proxy in front of it and a kube-scheduler calling the proxy.

Times are ``time.monotonic()`` of the test process, so proxy and watch times compare directly.
Must not: alter a request or reply, or decide what is correct (the tests do).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from controlplane import ControlPlane, wait_for
from support import Extender, scheduler_config

from extender.model.quantity import to_units


@dataclass
class Exchange:
    """One request relayed from kube-scheduler to gang-extender."""

    verb: str
    pod: str  # namespace/name ("" if the body named none)
    node: str  # bind: the node asked for
    arrival: float
    answered: float | None = None  # the extender's reply read by the proxy
    replied: float | None = None  # the reply written back to kube-scheduler (None: not written)
    status: int = 0
    error: str | None = None  # a bind reply's Error (None: no parseable reply)
    caller_gone: float | None = None  # kube-scheduler closed its connection before the reply


def _describe(body: bytes, verb: str) -> tuple[str, str]:
    """(namespace/name, node) named by a filter or bind body; ("", "") if it names none."""
    try:
        request = json.loads(body)
    except ValueError:
        return "", ""
    if not isinstance(request, dict):
        return "", ""
    if verb == "bind":
        return f"{request.get('PodNamespace')}/{request.get('PodName')}", str(request.get("Node", ""))
    meta = (request.get("Pod") or {}).get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}", ""


class RecordingProxy:
    """Relays kube-scheduler's extender calls to ``upstream`` (an ``http://`` URL) and records each one."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="recording-proxy", daemon=True)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def exchanges(self, verb: str | None = None) -> list[Exchange]:
        with self._lock:
            return [e for e in self._exchanges if verb is None or e.verb == verb]

    def binds_in_flight(self) -> list[Exchange]:
        """Bind requests the extender has not answered yet (held at a barrier, or being bound)."""
        return [e for e in self.exchanges("bind") if e.answered is None]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection: a hang-up is about that request

            def do_POST(self) -> None:
                proxy._relay(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def _relay(self, handler: BaseHTTPRequestHandler) -> None:
        arrival = time.monotonic()
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        verb = handler.path.rstrip("/").rsplit("/", 1)[-1]
        pod, node = _describe(body, verb)
        exchange = Exchange(verb, pod, node, arrival)
        with self._lock:
            self._exchanges.append(exchange)
        upstream = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=600)
        try:
            upstream.request("POST", handler.path, body,
                             {"Content-Type": handler.headers.get("Content-Type") or "application/json"})
            self._await_reply(upstream, handler.connection, exchange)
            reply = upstream.getresponse()
            status, data = reply.status, reply.read()
        except OSError as exc:
            status, data = 502, f"proxy: extender unreachable: {exc}".encode()
        finally:
            upstream.close()
        exchange.answered, exchange.status = time.monotonic(), status
        if verb == "bind" and status == 200:
            with contextlib.suppress(ValueError, AttributeError):
                exchange.error = str(json.loads(data).get("Error") or "")
        with contextlib.suppress(OSError):
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            handler.wfile.flush()
            exchange.replied = time.monotonic()

    @staticmethod
    def _await_reply(upstream: http.client.HTTPConnection, caller: socket.socket, exchange: Exchange) -> None:
        """Block until the extender starts answering; note when the caller hangs up meanwhile."""
        assert upstream.sock is not None
        watched: list[socket.socket] = [upstream.sock, caller]
        while True:
            readable, _, _ = select.select(watched, [], [], 1.0)
            if upstream.sock in readable:
                return
            if caller in readable:
                try:
                    peeked = caller.recv(1, socket.MSG_PEEK)
                except OSError:
                    peeked = b""
                if not peeked:
                    exchange.caller_gone = time.monotonic()
                watched = [upstream.sock]


# ------------------------------------------------------------------------------------- pod watch
@dataclass(frozen=True)
class Binding:
    """A pod's ``spec.nodeName`` as first seen on the watch."""

    pod: str  # name
    node: str
    scheduler: str  # spec.schedulerName
    cpu: int  # millicores requested by its containers
    seen: float  # when the watch delivered it
    order: int  # position in the watch stream (the API server's order)


def _cpu(pod: dict[str, Any]) -> int:
    return sum(to_units("cpu", (c.get("resources") or {}).get("requests", {}).get("cpu", "0"))
               for c in pod["spec"]["containers"])


def wait_on(changed: threading.Condition, holds: Callable[[], bool], error: Callable[[], str | None],
            timeout: float, what: str) -> None:
    """Until ``holds()`` (checked each time ``changed`` is notified, and every 0.5 s), else AssertionError
    after ``timeout`` or as soon as the watch behind ``changed`` reports ``error()``."""
    deadline = time.monotonic() + timeout
    with changed:
        while not holds():
            left = deadline - time.monotonic()
            if left <= 0 or error():
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} ({error() or 'ok'})")
            changed.wait(min(left, 0.5))


class PodWatch:
    """List + watch of one namespace's pods in a thread; see the module docstring."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.cp, self.namespace = cp, namespace
        self.bindings: dict[str, Binding] = {}
        self.ungated: dict[str, tuple[int, float]] = {}  # pod -> (order, seen) when its gates went away
        self.deleted: dict[str, tuple[int, float]] = {}  # pod -> (order, seen) of its deletion
        self.error: str | None = None
        self._gated: set[str] = set()
        self._order = 0
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._conn = http.client.HTTPSConnection("127.0.0.1", cp.apiserver_port, context=cp.api.context, timeout=600)
        self._thread = threading.Thread(target=self._run, name=f"pod-watch-{namespace}", daemon=True)

    def __enter__(self) -> PodWatch:
        listed = self.cp.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        for item in listed["items"]:
            self._note(item)
        path = (f"/api/v1/namespaces/{self.namespace}/pods?watch=1&timeoutSeconds=600"
                f"&resourceVersion={listed['metadata']['resourceVersion']}")
        self._conn.request("GET", path, headers={"Accept": "application/json"})
        self._response = self._conn.getresponse()
        if self._response.status != 200:
            raise RuntimeError(f"pod watch refused: {self._response.status} {self._response.read()[:500]!r}")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            if self._conn.sock is not None:
                self._conn.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(10)
        self._conn.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                line = self._response.readline()
                if not line:
                    break
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    raise RuntimeError(f"watch error: {event.get('object')}")
                self._note(event["object"], deleted=event.get("type") == "DELETED")
        except Exception as exc:  # reported to the test through .error
            if not self._stop.is_set():
                self.error = f"{type(exc).__name__}: {exc}"
        if not self._stop.is_set() and self.error is None:
            self.error = "the pod watch ended early"

    def _note(self, pod: dict[str, Any], *, deleted: bool = False) -> None:
        seen = time.monotonic()
        name, spec = pod["metadata"]["name"], pod["spec"]
        with self._changed:
            self._order += 1
            if deleted:
                self.deleted.setdefault(name, (self._order, seen))
            if spec.get("schedulingGates"):
                self._gated.add(name)
            elif name in self._gated and name not in self.ungated:
                self.ungated[name] = (self._order, seen)
            if spec.get("nodeName") and name not in self.bindings:
                self.bindings[name] = Binding(name, spec["nodeName"], spec.get("schedulerName", ""), _cpu(pod),
                                              seen, self._order)
            self._changed.notify_all()

    def wait(self, condition: Callable[[PodWatch], bool], timeout: float, what: str) -> None:
        """Until ``condition(self)`` holds (checked on every event), else AssertionError after ``timeout``."""
        wait_on(self._changed, lambda: condition(self), lambda: self.error, timeout, what)

    def bound(self, names: Sequence[str]) -> list[Binding]:
        with self._changed:
            return [self.bindings[n] for n in names if n in self.bindings]

    def ordered(self) -> list[Binding]:
        with self._changed:
            return sorted(self.bindings.values(), key=lambda b: b.order)

    def quiet_for(self, seconds: float, timeout: float) -> None:
        """Until no pod has been bound for ``seconds`` (or ``timeout`` passed): the namespace settled."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last = max((b.seen for b in self.ordered()), default=0.0)
            if time.monotonic() - last >= seconds:
                return
            time.sleep(0.2)


# ------------------------------------------------------------------------------- the scheduling
@contextlib.contextmanager
def observed_scheduling(cp: ControlPlane, workdir: Path, extender_args: Sequence[str], *, http_timeout: str = "30s",
                        scheduler_settings: Mapping[str, Any] | None = None
                        ) -> Iterator[tuple[Extender, RecordingProxy]]:
    """gang-extender with ``extender_args``, a ``RecordingProxy`` in front of it and kube-scheduler (the
    shipped configuration, ``httpTimeout`` = ``http_timeout``, top-level fields ``scheduler_settings``
    such as ``podMaxBackoffSeconds`` set over it) calling the proxy; all stopped afterwards."""
    ext = Extender(cp.kubeconfig, workdir, log=print, args=["--log-level", "INFO", *extender_args])
    ext.start()
    try:
        with RecordingProxy(ext.url) as proxy:
            config = {**scheduler_config(proxy.url, http_timeout=http_timeout), **(scheduler_settings or {})}
            cp.start_scheduler(config)
            try:
                yield ext, proxy
            finally:
                cp.stop_scheduler()
    finally:
        ext.stop()
        print(f"[e2e] extender log: {ext.log_path}")


def remove_gates(cp: ControlPlane, namespace: str, name: str) -> None:
    cp.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
               [{"op": "remove", "path": "/spec/schedulingGates"}], content_type="application/json-patch+json")


def wait_in_flight(proxy: RecordingProxy, pods: set[str], timeout: float) -> None:
    """Until bind requests for all of ``pods`` (namespace/name) are held by the extender at once."""
    wait_for(lambda: pods <= {e.pod for e in proxy.binds_in_flight()}, timeout=timeout, interval=0.05,
             what=f"binds of {sorted(pods)} held at the barrier")

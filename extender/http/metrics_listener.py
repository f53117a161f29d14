"""The metrics-only listener (``--metrics-address``): Prometheus scrapes the pod IP here while the verbs
stay on their loopback port.

Owns: a plain-HTTP server on its own thread that answers ``GET /metrics`` (the app's registry, the text
format) and nothing else: any other path is 404 and any other method 501, so no verb, ``/explain`` or
probe is reachable through it. At most ``slots`` connections are served at once, one request each, then
closed; a request is given up (the connection cut) after ``timeout`` in all, however slowly its bytes
still come, a reply after ``timeout`` in all. A connection beyond the slots takes the slot of the oldest
one whose request has not arrived (cut at once), or is closed at once when every slot is replying, so a
flood of scrapers costs this listener's few threads and never the verbs' workers, and clients that
connect and say nothing cannot keep a scrape out. The registry is collected at most once per
``reuse_seconds`` (a scrape within that of the last one gets its text again), so scrapes cannot run the
collectors more often. A client that hangs up is logged at debug level, not as a traceback on stderr.
Must not: serve anything but the registry, or change any state.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

SLOTS = 4
TIMEOUT_SECONDS = 5.0
REUSE_SECONDS = 1.0


class _Scrape:
    """The registry's text, collected again only when the last collection is ``reuse_seconds`` old."""

    def __init__(self, registry: CollectorRegistry, reuse_seconds: float) -> None:
        self.registry, self.reuse_seconds = registry, reuse_seconds
        self._lock = threading.Lock()
        self._at, self._text = -float("inf"), b""

    def text(self) -> bytes:
        with self._lock:
            now = time.monotonic()
            if now - self._at >= self.reuse_seconds:
                self._text, self._at = generate_latest(self.registry), now
            return self._text


class _Handler(BaseHTTPRequestHandler):
    scrape: _Scrape                 # set on the subclass ``start`` makes
    server_version = "gang-extender-metrics"
    sys_version = ""

    def parse_request(self) -> bool:
        """The request line and headers are read: from now on this connection replies, it cannot be cut."""
        parsed = super().parse_request()
        self.server.request_read(self.request)  # type: ignore[attr-defined]
        return parsed

    def do_GET(self) -> None:
        if urlsplit(self.path).path != "/metrics":
            self._reply(404, b"only GET /metrics is served on this address\n", "text/plain; charset=utf-8")
            return
        self._reply(200, self.scrape.text(), CONTENT_TYPE_LATEST)

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics listener: %s " + format, self.address_string(), *args)


class MetricsListener(ThreadingHTTPServer):
    """A threading HTTP server that serves at most ``slots`` connections at once; when they are all taken,
    a new connection takes the slot of the oldest one whose request has not arrived yet (idle or trickling),
    so clients that connect and say nothing cannot keep a scraper out."""

    daemon_threads = True
    # gunicorn's reload (SIGHUP) boots the new worker while the old one drains its held binds: the new
    # listener binds beside the old one (same user only) instead of failing the worker's boot.
    allow_reuse_port = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], slots: int) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._slots = threading.BoundedSemaphore(slots)
        self._guard = threading.Lock()
        self._unread: dict[socket.socket, None] = {}  # connections still waiting for their request, oldest first
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False) and not self._evict_for(client_address):
            self.shutdown_request(request)
            return
        with self._guard:
            self._unread[request] = None
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.request_read(request)
            self._slots.release()
            raise

    def _evict_for(self, client_address: Any) -> bool:
        """Cut the oldest connection whose request has not arrived, and take its slot once its thread ends
        (a slot: True). None such (every slot is replying): the new connection is closed (False)."""
        with self._guard:
            oldest = next(iter(self._unread), None)
        if oldest is None:
            log.debug("metrics listener: %d scrapes in progress, closing %s", SLOTS, client_address)
            return False
        _cut(oldest)
        return self._slots.acquire(timeout=1.0)

    def request_read(self, request: socket.socket) -> None:
        """``request`` has been read (or given up): its connection can no longer be cut for another."""
        with self._guard:
            self._unread.pop(request, None)

    def _expire(self, request: socket.socket) -> None:
        """The request's time is up: cut the connection if its request has still not arrived."""
        with self._guard:
            unread = request in self._unread
        if unread:
            _cut(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        deadline = threading.Timer(self.RequestHandlerClass.timeout, self._expire, (request,))  # type: ignore[attr-defined]
        deadline.daemon = True
        deadline.start()
        try:
            super().process_request_thread(request, client_address)
        finally:
            deadline.cancel()
            self.request_read(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection error (reset, timeout) at debug level; anything else (a collector failing) as a warning."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            log.debug("metrics listener: %s: %s", client_address, error)
        else:
            log.warning("metrics listener: serving %s failed", client_address, exc_info=True)


def _cut(request: socket.socket) -> None:
    """Shut both directions of a connection, so a read blocked on it returns at once and nothing is replied."""
    with contextlib.suppress(OSError):  # already closed
        request.shutdown(socket.SHUT_RDWR)


def start(host: str, port: int, registry: CollectorRegistry, slots: int = SLOTS,
          timeout: float = TIMEOUT_SECONDS, reuse_seconds: float = REUSE_SECONDS) -> MetricsListener:
    """Listen on ``host:port`` (port 0: any free one, see ``server_address``) and serve on a daemon thread;
    raises OSError when the address cannot be bound."""
    handler = type("MetricsHandler", (_Handler,), {"scrape": _Scrape(registry, reuse_seconds), "timeout": timeout})
    server = MetricsListener((host, port), handler, slots)
    threading.Thread(target=server.serve_forever, name="metrics-listener", daemon=True).start()
    log.info("serving GET /metrics only on http://%s:%d", f"[{host}]" if ":" in host else host,
             server.server_address[1])
    return server

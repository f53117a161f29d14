"""The poller side of the gunicorn worker: connections, and each request read whole without a thread.

Owns: accepting connections (TLS handshakes included); reading each request's head and body on the
poller thread, under a deadline counted from its first byte (from the accept for a new connection),
with the body cap of its path (``framing``) and one byte budget over all connections (the oldest
unfinished connections are closed first, then reading stops until room is freed); refusing a request
the caps reject with its reply; closing late connections; keeping kube-scheduler's connections
accepted when the connection cap is reached (the oldest idle or unfinished connection is closed
instead). A complete request goes to ``_dispatch``, which the worker in ``serving`` implements. Must
not: hand requests to threads or parse them beyond their framing (``serving`` and gunicorn do), know
what the routes do, or decide anything about scheduling.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import ssl
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from gunicorn import sock as gsock
from gunicorn.workers.gthread import TConn, ThreadWorker

from extender.errors import RefusedError
from extender.http import framing

RECV_BYTES = 256 * 1024
ACCEPTS_PER_EVENT = 64
LINGER_SECONDS = 1.0  # a refused client's remaining bytes are read and dropped this long


@dataclass(frozen=True, slots=True)
class Limits:
    caps: framing.BodyCaps
    timeout_seconds: float   # read a request from its first byte / a new connection's accept; write a reply
    buffer_bytes: int        # request bytes held at once over all connections


class Connection(TConn):  # type: ignore[misc]
    """A connection and the request being assembled on it."""

    def __init__(self, cfg: Any, sock: Any, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.buf = bytearray()
        self.head: framing.Head | None = None
        self.arrival: float | None = None   # first byte of the request being read
        self.deadline = 0.0
        self.charge = 0                     # bytes counted against the worker's budget
        self.handshaking = False
        self.parked = False                 # head read, body waiting for room in the budget
        self.refused = False                # answered by the poller; the rest is read and dropped
        self.watching = False               # registered with the poller
        self.request_arrival: float | None = None  # of the request a thread is serving


class PollingWorker(ThreadWorker):  # type: ignore[misc]
    """gthread with request assembly in the poller; see the module docstring. A subclass hands each
    complete request to a thread (``_dispatch``)."""

    limits: Limits = Limits(framing.BodyCaps(4 * 2**20), 5.0, 16 * 2**20)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection_cap = self.cfg.worker_connections
        self.max_keepalived = self.connection_cap  # an idle connection is closed when room is needed
        self._reading: dict[Connection, None] = {}      # in the poller, oldest deadline first
        self._parked: deque[Connection] = deque()
        self._charged = 0
        self._seen_at = time.monotonic()
        self._tls: ssl.SSLContext | None = None
        self.closed_late = 0     # requests not read whole within the deadline
        self.closed_for_room = 0  # idle or unfinished connections closed to accept another

    # ---------------------------------------------------------------------------------- the loop
    def run(self) -> None:
        self.poller.register(self.method_queue.fileno(), selectors.EVENT_READ, self.method_queue.run_callbacks)
        self.set_accept_enabled(True)
        while self.alive:
            self.notify()
            self.set_accept_enabled(self._may_accept())
            self.wait_for_and_dispatch_events(timeout=self._poll_timeout())
            if not self.is_parent_alive():
                break
            self.murder_keepalived()
            self._expire()
        self._stop()

    def _stop(self) -> None:
        self.set_accept_enabled(False)
        for conn in list(self._reading):
            self._close(conn)
        self._cap_keepalive(time.monotonic() + 2.0)
        graceful = time.monotonic() + self.cfg.graceful_timeout
        while self.nr_conns > 0 and time.monotonic() < graceful:
            self.notify()
            self.wait_for_and_dispatch_events(timeout=self._poll_timeout())
            self.murder_keepalived()
            self._expire()
        self.murder_keepalived(force=True)
        self.tpool.shutdown(wait=False)
        self.poller.close()
        self.method_queue.close()
        for listener in self.sockets:
            listener.close()

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        try:
            events = self.poller.select(timeout)
        except InterruptedError:
            return
        self._seen_at = time.monotonic()  # the earliest time this process knows of these bytes
        for key, _ in events:
            key.data(key.fileobj)

    def _poll_timeout(self) -> float:
        if not self._reading:
            return 1.0
        first = next(iter(self._reading))
        return min(1.0, max(0.0, first.deadline - time.monotonic()))

    def _may_accept(self) -> bool:
        return bool(self.nr_conns < self.connection_cap or self.keepalived_conns or self._reading)

    # ------------------------------------------------------------------------------ connections
    def accept(self, listener: Any) -> None:
        for _ in range(ACCEPTS_PER_EVENT):
            if self.nr_conns >= self.connection_cap and not self._close_one_for_room():
                return
            try:
                client, address = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.log.warning("cannot accept a connection: %s", exc)
                    return
                raise
            self.nr_conns += 1
            conn = Connection(self.cfg, client, address, listener.getsockname())
            if self.cfg.is_ssl:
                if self._tls is None:
                    self._tls = gsock.ssl_context(self.cfg)
                conn.sock = self._tls.wrap_socket(
                    client, server_side=True, do_handshake_on_connect=False,
                    suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)
                conn.handshaking = True
            self._start_reading(conn, time.monotonic())
            self._watch_reading(conn)

    def _close_one_for_room(self) -> bool:
        """Close the unfinished connection or, failing that, the idle one that has waited longest."""
        if self._reading:
            victim = next(iter(self._reading))
        elif self.keepalived_conns:
            victim = self.keepalived_conns.popleft()
            self._unregister(victim)
        else:
            return False
        self.closed_for_room += 1
        self._close(victim)
        return True

    def _start_reading(self, conn: Connection, since: float) -> None:
        """Count ``conn``'s deadline from ``since``; the caller reads at once or watches it."""
        conn.deadline = since + self.limits.timeout_seconds
        self._reading[conn] = None

    def on_client_socket_readable(self, conn: Connection, client: Any) -> None:
        """A kept-alive connection sends its next request: read it now, watch it only if it is not all here."""
        self._unregister(conn)
        self.keepalived_conns.remove(conn)
        conn.arrival = self._seen_at
        self._start_reading(conn, self._seen_at)
        self._on_readable(conn)

    def _watch(self, conn: Connection, callback: Any, events: int = selectors.EVENT_READ) -> None:
        if conn.watching:
            self.poller.modify(conn.sock, events, callback)
        else:
            self.poller.register(conn.sock, events, callback)
            conn.watching = True

    def _watch_reading(self, conn: Connection) -> None:
        if conn in self._reading and not conn.parked and not conn.refused:
            self._watch(conn, lambda _: self._on_readable(conn))

    def _unregister(self, conn: Connection) -> None:
        if conn.watching:
            conn.watching = False
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.poller.unregister(conn.sock)

    def _close(self, conn: Connection) -> None:
        self._reading.pop(conn, None)
        self._unregister(conn)
        if conn.parked:
            self._parked.remove(conn)
            conn.parked = False
        self._set_charge(conn, 0)
        self.nr_conns -= 1
        conn.close()

    def _refuse(self, conn: Connection, reply: bytes) -> None:
        """Send ``reply``, stop sending, and discard what the client still sends for a second before closing,
        so that a client writing a body it was refused reads the reply instead of a reset."""
        conn.refused = True
        self._send_quietly(conn, reply)
        with contextlib.suppress(OSError, ValueError):
            conn.sock.shutdown(socket.SHUT_WR)
        conn.buf.clear()
        self._set_charge(conn, 0)
        self._reading.pop(conn, None)
        self._reading[conn] = None  # last in line: the deadline below is the latest
        conn.deadline = time.monotonic() + LINGER_SECONDS
        self._watch(conn, lambda _: self._discard(conn))

    def _discard(self, conn: Connection) -> None:
        for _ in range(16):
            try:
                if not conn.sock.recv(RECV_BYTES):
                    break
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except (OSError, ValueError):
                break
        else:
            return
        self._close(conn)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._reading:
            conn = next(iter(self._reading))
            if conn.deadline > now:
                return
            self.closed_late += 1
            self._close(conn)

    # ---------------------------------------------------------------------------------- reading
    def _on_readable(self, conn: Connection) -> None:
        try:
            self._read(conn)
        except Exception:  # a bug here must not end the worker (and every bind it holds)
            self.log.exception("error reading a request from %s", conn.client)
            if conn in self._reading:
                self._close(conn)

    def _read(self, conn: Connection) -> None:
        """Read what the socket has (up to the end of the current request), advancing after each chunk."""
        if conn.handshaking and not self._handshake(conn):
            return
        while conn in self._reading and not conn.parked and not conn.refused:
            want = conn.head.total - len(conn.buf) if conn.head is not None else RECV_BYTES
            try:
                chunk = conn.sock.recv(min(RECV_BYTES, want))
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                self._watch_reading(conn)  # the rest of the request comes later
                return
            except (OSError, ValueError):
                self._close(conn)
                return
            if not chunk:
                self._close(conn)
                return
            if conn.arrival is None:
                conn.arrival = self._seen_at
            conn.buf += chunk
            self._advance(conn)

    def _handshake(self, conn: Connection) -> bool:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(conn, lambda _: self._on_readable(conn))
            return False
        except ssl.SSLWantWriteError:
            self._watch(conn, lambda _: self._on_readable(conn), selectors.EVENT_WRITE)
            return False
        except (ssl.SSLError, OSError, ValueError) as exc:
            self.log.debug("TLS handshake failed: %s", exc)
            self._close(conn)
            return False
        conn.handshaking = False
        self._watch(conn, lambda _: self._on_readable(conn))
        return True

    def _advance(self, conn: Connection) -> None:
        """Find the head, charge the budget with the bytes held, dispatch the request once it is all here."""
        if conn.head is None:
            try:
                conn.head = framing.find_head(conn.buf, self.limits.caps)
            except RefusedError as refused:
                self._refuse(conn, framing.reply(refused.status, refused.message))
                return
            if conn.head is None:
                self._set_charge(conn, len(conn.buf))
                self._make_room(conn)
                return
            if conn.head.expects_continue and len(conn.buf) < conn.head.total:
                self._send_quietly(conn, framing.CONTINUE)
        if conn.parked:
            return
        self._set_charge(conn, len(conn.buf))  # bytes held, not promised: a slow sender holds almost nothing
        if not self._make_room(conn):
            return
        if len(conn.buf) >= conn.head.total:
            self._dispatch(conn)

    def _send_quietly(self, conn: Connection, data: bytes) -> None:
        with contextlib.suppress(OSError, ValueError):
            conn.sock.send(data)

    # ---------------------------------------------------------------------------------- budget
    def _set_charge(self, conn: Connection, charge: int) -> None:
        self._charged += charge - conn.charge
        conn.charge = charge

    def _make_room(self, conn: Connection) -> bool:
        """Keep the bytes held within the budget: close the oldest unfinished connections first; if the
        budget is still exceeded (the rest is in threads), stop reading ``conn`` until room is freed."""
        while self._charged > self.limits.buffer_bytes:
            victim = next((c for c in self._reading if c is not conn and c.charge), None)
            if victim is None:
                break
            self.closed_for_room += 1
            self._close(victim)
        if self._charged <= self.limits.buffer_bytes:
            return True
        self._unregister(conn)
        conn.parked = True
        self._parked.append(conn)
        return False

    def _unpark(self) -> None:
        while self._parked and self._charged < self.limits.buffer_bytes:
            conn = self._parked.popleft()
            conn.parked = False
            self._watch_reading(conn)
            self._advance(conn)


    # -------------------------------------------------------------------------------- threads
    def _dispatch(self, conn: Connection) -> None:
        """``conn.buf`` starts with a complete request (``conn.head``): serve it."""
        raise NotImplementedError

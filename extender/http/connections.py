"""The poller side of the gunicorn worker: connections, each request read whole, and what a client does
not take of its reply at once, all without a thread.

Owns: accepting connections (TLS handshakes included); reading each request's head and body on the
poller thread, under a deadline counted from its first byte (from the accept for a new connection),
with the body cap of its path (``framing``); sending a reply without ever waiting (``push``: the thread
sends what the socket takes at once, ``_reply`` the rest as the client takes it, under the same deadline
counted from the end of its handler); one byte budget over all connections (below); refusing a request
the caps reject with its reply; closing late connections; keeping kube-scheduler's connections
accepted when the connection cap is reached (the oldest unfinished connection, stalled reply or idle
connection is closed instead). A complete request goes to ``_dispatch``, which the worker in
``serving`` implements. Must not: hand requests to threads or parse them beyond their framing
(``serving`` and gunicorn do), know what the routes do, or decide anything about scheduling.

The byte budget (``Limits.buffer_bytes``) counts a request's bytes from its first byte read until its
handler returns, then its reply's bytes the client has not taken yet. A quarter of it (less when the
largest request would not fit in the rest: ``Limits.reserve_bytes``) is kept for small requests, those
of at most half that reserve (``Limits.small_request_bytes``: 2 MiB of the default 16 MiB; a filter of
5,000 names of 253 characters and a recorded pod is 1.28 MB): large requests never hold more than the
rest. When a request's next chunk does not fit, room is made by closing other connections
(``_victim``), oldest first: for a small request, replies to large requests and replies none of whose
bytes the client took for ``STALLED_SECONDS``, then unfinished requests, except small ones that are all
here; for a large request, only unfinished large requests (a reply to a large request otherwise keeps
its room until the client takes it or the deadline, which bounds how fast clients that do not read can
make the worker serve them). What is left waits (``parked``) until room is freed. So clients that send
large bodies, send slowly or never read their replies cannot keep kube-scheduler's small requests from
being read and answered: they compete among themselves.
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
SEND_BYTES = 256 * 1024  # one send of a reply (TLS: the same slice is sent again after a want-write)
ACCEPTS_PER_EVENT = 64
LINGER_SECONDS = 1.0  # a refused client's remaining bytes are read and dropped this long
STALLED_SECONDS = 0.2  # a reply the client took nothing of for this long may be dropped to make room


def push(sock: Any, out: deque[bytes], at: int) -> tuple[int, int]:
    """Send the chunks ``out`` (the first from offset ``at``) until they are all sent or the socket would
    block, removing the chunks sent: (offset into the first chunk left, what to wait for: 0 when all is
    sent, ``selectors.EVENT_WRITE`` or ``EVENT_READ`` (TLS), -1 when the connection failed). Never waits."""
    while out:
        chunk = out[0]
        try:
            at += sock.send(memoryview(chunk)[at:at + SEND_BYTES])  # TLS: the same slice again after a want-write
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
            return at, selectors.EVENT_WRITE
        except ssl.SSLWantReadError:
            return at, selectors.EVENT_READ
        except (OSError, ValueError):
            return at, -1
        if at >= len(chunk):
            out.popleft()
            at = 0
    return 0, 0


@dataclass(frozen=True, slots=True)
class Limits:
    caps: framing.BodyCaps
    timeout_seconds: float   # read a request from its first byte / a new connection's accept; write a reply
    buffer_bytes: int        # request (and unsent reply) bytes held at once over all connections

    @property
    def reserve_bytes(self) -> int:
        """The part of the budget large requests may not use: a quarter, or less so that the largest
        request still fits in the rest (0 when the budget is no larger than that request)."""
        largest = max(self.caps.names, self.caps.full_nodes) + framing.HEAD_MAX_BYTES
        return min(self.buffer_bytes // 4, max(0, self.buffer_bytes - largest))

    @property
    def small_request_bytes(self) -> int:
        """A request (head and body) of at most this many bytes is small: it may use the reserve."""
        return self.reserve_bytes // 2


class Connection(TConn):  # type: ignore[misc]
    """A connection and the request being assembled on it."""

    def __init__(self, cfg: Any, sock: Any, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.buf = bytearray()
        self.head: framing.Head | None = None
        self.arrival: float | None = None   # first byte of the request being read
        self.deadline = 0.0
        self.charge = 0                     # bytes counted against the worker's budget
        self.large = False                  # the request (and its reply) is over ``small_request_bytes``
        self.handshaking = False
        self.parked = False                 # head read, body waiting for room in the budget
        self.refused = False                # answered by the poller; the rest is read and dropped
        self.watching = False               # registered with the poller
        self.request_arrival: float | None = None  # of the request a thread is serving
        self.out: deque[bytes] | None = None  # the reply's chunks not sent yet (the first from ``out_at``)
        self.out_at = 0
        self.out_left = 0                   # bytes of the reply not sent yet
        self.progress = 0.0                 # when the client last took bytes of the reply
        self.keep = False                   # serve the next request after the reply


class PollingWorker(ThreadWorker):  # type: ignore[misc]
    """gthread with request assembly in the poller; see the module docstring. A subclass hands each
    complete request to a thread (``_dispatch``)."""

    limits: Limits = Limits(framing.BodyCaps(4 * 2**20), 5.0, 16 * 2**20)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection_cap = self.cfg.worker_connections
        self.max_keepalived = self.connection_cap  # an idle connection is closed when room is needed
        self._reading: dict[Connection, None] = {}      # in the poller, oldest deadline first
        self._writing: dict[Connection, None] = {}      # replies the client has not taken all of, oldest first
        self._parked: deque[Connection] = deque()
        self._charged = 0
        self._charged_large = 0  # of ``_charged``, by large requests and their replies
        self._small = self.limits.small_request_bytes
        self._large_room = self.limits.buffer_bytes - self.limits.reserve_bytes
        self._seen_at = time.monotonic()
        self._tls: ssl.SSLContext | None = None
        self.closed_late = 0     # requests not read whole, or replies not taken, within the deadline
        self.closed_for_room = 0  # connections closed to accept another or to keep within the budget

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
        self.log.info("serving worker stopped: %d connections closed to make room, %d requests or replies not "
                      "done within the deadline", self.closed_for_room, self.closed_late)
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
        deadline = min((next(iter(pending)).deadline for pending in (self._reading, self._writing) if pending),
                       default=None)
        longest = STALLED_SECONDS if self._parked else 1.0  # a reply that stalls meanwhile makes room
        if deadline is None:
            return longest
        return min(longest, max(0.0, deadline - time.monotonic()))

    def _may_accept(self) -> bool:
        return bool(self.nr_conns < self.connection_cap or self.keepalived_conns or self._reading or self._writing)

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
        """Close the unfinished connection, failing that the stalled reply, failing that the idle connection
        or the reply that has waited longest."""
        stalled = time.monotonic() - STALLED_SECONDS
        victim = (next((c for c in self._reading if not self._small_and_here(c)), None)
                  or next((c for c in self._writing if c.progress <= stalled), None))
        if victim is None and self.keepalived_conns:
            victim = self.keepalived_conns.popleft()
            self._unregister(victim)
        if victim is None:
            victim = next(iter(self._writing), None)
        if victim is None:
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
        self._writing.pop(conn, None)
        conn.out = None
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
        for pending in (self._reading, self._writing):
            while pending:
                conn = next(iter(pending))
                if conn.deadline > now:
                    break
                self.closed_late += 1
                self._close(conn)
        if self._parked:  # room freed above, or replies stalled since
            self._unpark()

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
            if (conn.head.total > self._small) is not conn.large:
                self._set_large(conn, not conn.large)
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
        if conn.large:
            self._charged_large += charge - conn.charge
        conn.charge = charge

    def _set_large(self, conn: Connection, large: bool) -> None:
        charge = conn.charge
        self._set_charge(conn, 0)
        conn.large = large
        self._set_charge(conn, charge)

    def _fits(self, conn: Connection) -> bool:
        return self._charged <= self.limits.buffer_bytes and (
            not conn.large or self._charged_large <= self._large_room)

    def _make_room(self, conn: Connection) -> bool:
        """Keep the bytes held within the budget, and a large request's within the budget less the reserve,
        by closing other connections (``_victim``); if they are still exceeded (the rest is in threads or in
        replies the client is taking), stop reading ``conn`` until room is freed."""
        while not self._fits(conn) and (victim := self._victim(conn)) is not None:
            self.closed_for_room += 1
            self._close(victim)
        if self._fits(conn):
            return True
        self._unregister(conn)
        conn.parked = True
        self._parked.append(conn)
        return False

    def _victim(self, conn: Connection) -> Connection | None:
        """The connection to close to make room for ``conn``, oldest first: for a small request, a reply to
        a large one or a stalled reply, else an unfinished request, but never a small one that is all
        here; for a large request, an unfinished large one. Runs only over budget."""
        if conn.large:
            return next((other for other in self._reading if other.large and other is not conn and other.charge),
                        None)
        stalled = time.monotonic() - STALLED_SECONDS
        for other in self._writing:
            if other.large or other.progress <= stalled:
                return other
        for other in self._reading:
            if other is not conn and other.charge and (other.large or not self._small_and_here(other)):
                return other
        return None

    @staticmethod
    def _small_and_here(conn: Connection) -> bool:
        """A small request read whole (parked: it waits for room): never closed to make room."""
        return not conn.large and conn.head is not None and len(conn.buf) >= conn.head.total

    def _unpark(self) -> None:
        """Read parked connections again, oldest first, as far as room allows (making room as when they
        were parked): a large one that does not fit stays parked and the next is tried; the first small
        one that does not fit ends it (none behind it would)."""
        for _ in range(len(self._parked)):
            if not self._parked:
                return
            conn = self._parked[0]
            if not self._fits(conn):
                if not conn.large:
                    if self._victim(conn) is None:
                        return
                else:
                    self._parked.rotate(-1)
                    continue
            self._parked.popleft()
            conn.parked = False
            self._watch_reading(conn)
            self._advance(conn)

    # ---------------------------------------------------------------------------------- writing
    def _reply(self, conn: Connection, out: deque[bytes], at: int, keep: bool) -> None:
        """Send what is left of a reply (``out``, the first chunk from ``at``; ``push``) without waiting; what
        the client does not take at once is sent as it reads, until the deadline (then the connection is
        closed). Then serve the next request (``keep``) or close the connection."""
        conn.keep = keep
        if not out:  # the usual case: the thread sent it all
            self._replied(conn)
            return
        conn.out, conn.out_at, conn.out_left = out, at, sum(map(len, out)) - at
        conn.progress = time.monotonic()
        conn.deadline = conn.progress + self.limits.timeout_seconds
        self._send(conn)

    def _on_writable(self, conn: Connection) -> None:
        if conn.out is None:  # an event from before it was closed (or its reply done) in the same poll
            return
        try:
            self._send(conn)
        except Exception:  # a bug here must not end the worker (and every bind it holds)
            self.log.exception("error writing a reply to %s", conn.client)
            if conn.out is not None:
                self._close(conn)
        self._unpark()

    def _send(self, conn: Connection) -> None:
        out = conn.out
        assert out is not None
        conn.out_at, wait = push(conn.sock, out, conn.out_at)
        if wait < 0:
            self._close(conn)
            return
        if wait:  # the client has not taken it all: the rest waits, charged
            left = sum(map(len, out)) - conn.out_at
            if left != conn.out_left:
                conn.out_left, conn.progress = left, max(conn.progress, self._seen_at)
            self._writing.setdefault(conn)
            self._set_charge(conn, left + conn.out_at + len(conn.buf))  # the first chunk is held whole
            self._watch(conn, lambda _: self._on_writable(conn), wait)
            return
        self._writing.pop(conn, None)
        conn.out = None
        self._replied(conn)

    def _replied(self, conn: Connection) -> None:
        """The reply is all sent: read the next request, wait for it, or close."""
        if not conn.keep or not self.alive:
            self._close(conn)
            return
        if conn.large:
            self._set_large(conn, False)
        self._set_charge(conn, len(conn.buf))
        if conn.buf:
            self._start_reading(conn, conn.arrival or self._seen_at)
            self._watch_reading(conn)
            self._advance(conn)
        else:
            conn.set_timeout()
            self.keepalived_conns.append(conn)
            self._watch(conn, lambda client, c=conn: self.on_client_socket_readable(c, client))

    # -------------------------------------------------------------------------------- threads
    def _dispatch(self, conn: Connection) -> None:
        """``conn.buf`` starts with a complete request (``conn.head``): serve it."""
        raise NotImplementedError

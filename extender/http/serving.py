"""The gunicorn worker: gthread, with every request read whole by the poller before a thread sees it,
and every reply the client does not take at once written by the poller after the thread is done.

Owns: the worker class gunicorn loads (``worker_class``), with its request threads (``threads``) started
ahead of need; handing a complete request (read by the poller in ``connections``) to a thread: a plain
HTTP/1.1 POST to one of the application's direct routes (``WithDirectRoutes``: the extender's verbs)
goes to its handler as the body's bytes, and its reply is written whole (``framing.answer``); any other
request goes to gunicorn's parser and the WSGI application. Either way the thread writes its reply into
memory (``Reply``) and then sends what the socket takes without waiting; the per-request arrival stamp
(``request_arrival()``, and a direct route's argument); taking the connection back after the handler,
with the rest of its reply for the poller to send (``connections``), then the next request or a close.
Must not: wait on a client on a thread (no read from it, no write that could block), know what the
routes do, or decide anything about scheduling.

Why: gunicorn's gthread hands a connection to a thread as soon as it is readable and then reads the
request with blocking, unbounded reads, so a few thousand clients sending a byte at a time hold every
thread, and a connection that sends nothing is kept for the keep-alive time (75 s). Here a thread
starts only when a request's bytes are all in memory and ends when its reply is, so a thread is never
waiting on a client; and a client that does not read its reply holds neither a thread nor its
request's bytes, only the reply's bytes it has not taken (``connections``: the byte budget). The
direct routes exist because the poller has framed the request already: gunicorn's parser, the WSGI
environ and Flask's dispatch cost about as much CPU as a backlog filter's own work (docs/decisions/0006).
"""

from __future__ import annotations

import errno
import io
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import orjson
from gunicorn import http

from extender.http import framing
from extender.http.connections import Connection, Limits, PollingWorker, push
from extender.http.threads import RequestThreads

JOIN_BYTES = 64 * 1024  # a head and a body this small go out in one send

STARTED_THREADS = 1024
"""Threads the worker starts before it serves (at most ``--threads``; fewer under a process limit:
``threads_ahead``). Each bind held at a gang barrier holds a thread until its quorum is bound, so a
backlog of gangs makes kube-scheduler's binds wait by the thousand (1,415 at once in the end-to-end
benchmark's backlog, against 150 with a do-nothing extender). A thread the pool starts on demand is
started by the poller, in ``submit``: ~0.14 ms of CPU with every request behind it waiting. Started ahead
they cost that once, at start (~0.16 s of CPU), and 15 MiB of memory (an idle worker: 65 MiB, 50 MiB with
``--threads 8``); past them the pool still grows on demand up to ``--threads`` (and never shrinks)."""

_request = threading.local()

DirectRoute = Callable[[bytes, "float | None"], "tuple[int, bytes]"]
"""A POST path's handler without WSGI: (the body, its arrival stamp) -> (status, the JSON reply)."""


class WithDirectRoutes:
    """A WSGI application whose ``routes`` (POST paths) ``ExtenderWorker`` answers from the request's
    bytes, without gunicorn's parser, WSGI or the application; every other request goes to ``app``."""

    def __init__(self, app: Any, routes: Mapping[str, DirectRoute]) -> None:
        self.app = app
        self.routes = dict(routes)

    def __call__(self, environ: Any, start_response: Any) -> Any:
        return self.app(environ, start_response)


def request_arrival() -> float | None:
    """``time.monotonic()`` when the poller first saw the current request's bytes (before any wait for
    a thread); None outside a request served by this worker (e.g. Flask's test client)."""
    return getattr(_request, "arrival", None)


class Reply:
    """What gunicorn writes for one request: it stands for the socket on the thread, and sends what the
    socket takes at once, never waiting (``push``); what it does not take is kept for the poller to send.
    The head waits for the first piece of the body, to go out with it in one send when both are small."""

    __slots__ = ("aborted", "at", "failed", "head", "out", "sock", "started")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.out: deque[bytes] = deque()  # not sent yet (the first chunk from ``at``)
        self.at = 0
        self.head: bytes | None = None
        self.started = False
        self.failed = False   # the connection failed: the rest is dropped
        self.aborted = False  # gunicorn gave up on the reply after starting it: close without sending it

    def send(self, data: bytes) -> None:
        """A whole reply, head and body, written at once (a direct route's)."""
        self.started = True
        self.out.append(data)
        self.flush()

    def flush(self) -> None:
        """Send what the socket takes now of what is written (the head too)."""
        if self.head is not None:
            self.out.append(self.head)
            self.head = None
        if self.out and not (self.failed or self.aborted):
            self.at, wait = push(self.sock, self.out, self.at)
            self.failed = wait < 0

    # ------------------------------------------------------------------ what gunicorn calls on its socket
    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        chunk = data if type(data) is bytes else bytes(data)
        if not self.started:  # the head
            self.started, self.head = True, chunk
            return
        if self.head is not None:
            if len(self.head) + len(chunk) <= JOIN_BYTES:
                chunk = self.head + chunk
            else:
                self.out.append(self.head)
            self.head = None
        self.out.append(chunk)
        self.flush()

    def sendfile(self, file: BinaryIO, offset: int = 0, count: int | None = None) -> int:
        file.seek(offset)
        data = file.read() if count is None else file.read(count)
        self.sendall(data)
        return len(data)

    def shutdown(self, how: int) -> None:
        self.aborted = True

    def gettimeout(self) -> float:  # gunicorn's error replies (util.write_error) ask; writes here never wait
        return 0.0

    def setblocking(self, flag: bool) -> None:
        pass

    def close(self) -> None:
        self.aborted = True


class _Exchange(NamedTuple):
    """The connection as gunicorn's ``handle_request`` sees it: its writes go to the ``Reply``."""

    sock: Reply
    client: Any
    server: Any


PIDS_FILES = (("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids.current"),            # cgroup v2
              ("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids/pids.current"))  # cgroup v1


def threads_ahead() -> int:
    """How many request threads to start before serving: ``STARTED_THREADS``, or half of what the
    container's process (``pids``) limit still allows if that is fewer, so that the threads the extender
    starts as it runs (a release's Bindings, more request threads) keep room."""
    for limit_path, current_path in PIDS_FILES:
        try:
            limit = Path(limit_path).read_text().strip()
            if limit == "max":
                return STARTED_THREADS
            room = int(limit) - int(Path(current_path).read_text())
        except (OSError, ValueError):
            continue
        return max(0, min(STARTED_THREADS, room // 2))
    return STARTED_THREADS


class ExtenderWorker(PollingWorker):
    """The poller's worker (``connections``) serving each complete request on a thread."""

    alive: bool  # gunicorn's: False once the worker is to stop (or restart) after the requests in hand

    def get_thread_pool(self) -> RequestThreads:
        """The pool of ``--threads`` request threads (``threads``: idle ones reused newest first)."""
        return RequestThreads(self.cfg.threads)

    def run(self) -> None:
        """Serve, with ``threads_ahead()`` request threads started first: after the application and its own
        threads (watches, binders) are up, so a process limit leaves those theirs."""
        self.tpool.start(threads_ahead())
        super().run()

    def _dispatch(self, conn: Connection) -> None:
        head = conn.head
        assert head is not None
        self._reading.pop(conn, None)
        self._unregister(conn)
        route = self._direct_route(head)
        if route is not None:
            body = bytes(memoryview(conn.buf)[head.size:head.total])
            del conn.buf[:head.total]
            self._submit(conn, self.answer, route, head, body)
            return
        if len(conn.buf) == head.total:  # the usual case: one copy
            request, conn.buf = bytes(conn.buf), bytearray()
        else:
            request = bytes(memoryview(conn.buf)[:head.total])
            del conn.buf[:head.total]
        if head.expects_continue:
            request = framing.without_expect(request, head)
        if conn.parser is None:
            conn.initialized = True
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        left = conn.parser.unreader.take_buffered()
        conn.parser.unreader.buf = io.BytesIO(request + left if left else request)  # shares ``request``
        self._submit(conn, self.handle)

    def _submit(self, conn: Connection, serve: Callable[..., bool], *args: Any) -> None:
        """``serve(conn, reply, *args)`` on a thread, then ``finish_request`` on the poller."""
        conn.request_arrival, conn.head = conn.arrival, None
        conn.arrival = self._seen_at if conn.buf else None
        reply = Reply(conn.sock)
        future = self.tpool.submit(serve, conn, reply, *args)
        future.add_done_callback(lambda done: self.method_queue.defer(self.finish_request, conn, reply, done))

    def _direct_route(self, head: framing.Head) -> DirectRoute | None:
        routes: Mapping[str, DirectRoute] | None = getattr(self.wsgi, "routes", None)
        if routes is None or head.method != "POST" or not head.plain:
            return None
        return routes.get(head.path)

    def answer(self, conn: Connection, reply: Reply, route: DirectRoute, head: framing.Head, body: bytes) -> bool:
        """Serve one request a direct route answers, its whole reply into ``reply`` and what the socket
        takes of it at once (a worker thread); whether the connection serves another request."""
        closes = head.closes
        try:
            status, payload = route(body, conn.request_arrival)
            if type(status) is not int or type(payload) is not bytes:
                raise TypeError(f"a direct route must answer (int, bytes), not ({type(status)}, {type(payload)})")
        except Exception:  # the routes answer their own errors: this is a bug in one
            self.log.exception("direct route %s failed", head.path)
            status, payload, closes = 500, orjson.dumps({"error": "internal error", "status": 500}), True
        self.nr += 1  # as gthread counts requests: --max-requests restarts the worker
        if self.nr >= self.max_requests and self.alive:
            self.log.info("Autorestarting worker after current request.")
            self.alive = False
        keep = not closes and self.alive and bool(self.cfg.keepalive) \
            and len(self.keepalived_conns) < self.max_keepalived
        if conn.sock.gettimeout() != 0.0:  # a drain of an earlier request on it may have set a timeout
            conn.sock.setblocking(False)
        reply.send(framing.answer(status, payload, keep))
        if getattr(self.log, "access_log_enabled", self.cfg.accesslog):  # as gunicorn logs what it serves
            client = conn.client[0] if isinstance(conn.client, tuple) else conn.client
            self.log.access_log.info('%s - - %s "POST %s HTTP/1.1" %d %d', client, self.log.now(), head.path,
                                     status, len(payload))
        return keep

    def handle(self, conn: Connection, reply: Reply) -> bool:
        """Serve the one request whose bytes are in the parser's buffer, its reply into ``reply``, and send
        what the socket takes of it at once (a worker thread); whether the connection serves another request."""
        keep = self._serve(conn, reply)
        if reply.head is not None:  # a reply without a body
            if conn.sock.gettimeout() != 0.0:  # the parser's drain may have set a timeout
                conn.sock.setblocking(False)
            reply.flush()
        return keep

    def _serve(self, conn: Connection, reply: Reply) -> bool:
        _request.arrival = conn.request_arrival
        try:
            request = next(conn.parser)
            exchange = _Exchange(reply, conn.client, conn.server)
            return bool(self._keepalive_after(conn, self.handle_request(request, exchange)))  # the reply is sent
        except (StopIteration, http.errors.NoMoreData):
            return False
        except OSError as exc:  # e.g. gunicorn framed the request longer than the poller: the socket does not wait
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EAGAIN):
                self.log.warning("socket error serving %s: %s", conn.client, exc)
            return False
        except Exception as exc:
            self.handle_error(None, reply, conn.client, exc)
            return False
        finally:
            _request.arrival = None

    def finish_request(self, conn: Connection, reply: Reply, future: Future[bool]) -> None:
        """Back on the poller thread: the request's bytes are free; the rest of the reply is sent as the
        client takes it, then the connection is kept for its next request, or closed (``connections``)."""
        failed = future.cancelled() or future.exception() is not None or reply.aborted or reply.failed
        left = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        if left:  # gunicorn framed the request shorter than the poller did: the rest comes first
            conn.buf[:0] = left
            conn.arrival = conn.arrival or self._seen_at
        self._set_charge(conn, len(conn.buf))
        if failed:
            self._close(conn)
        else:
            self._reply(conn, reply.out, reply.at, future.result() and self.alive)
        self._unpark()


def worker_class(limits: Limits) -> type[ExtenderWorker]:
    """The worker class gunicorn should load, with these limits."""
    return type("GangExtenderWorker", (ExtenderWorker,), {"limits": limits, "__module__": __name__})

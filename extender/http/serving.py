"""The gunicorn worker: gthread, with every request read whole by the poller before a thread sees it.

Owns: the worker class gunicorn loads (``worker_class``); handing a complete request (read by the
poller in ``connections``) to gunicorn's parser and a thread, with a deadline on writing the reply;
the per-request arrival stamp (``request_arrival()``); taking the connection back after the reply, for
its next request or to close it. Must not: read from a client on a thread, know what the routes do, or
decide anything about scheduling.

Why: gunicorn's gthread hands a connection to a thread as soon as it is readable and then reads the
request with blocking, unbounded reads, so a few thousand clients sending a byte at a time hold every
thread, and a connection that sends nothing is kept for the keep-alive time (75 s). Here a thread
starts only when a request's bytes are all in memory, so a thread is never waiting on a client.
"""

from __future__ import annotations

import errno
import io
import threading
from concurrent.futures import Future

from gunicorn import http

from extender.http import framing
from extender.http.connections import Connection, Limits, PollingWorker

_request = threading.local()


def request_arrival() -> float | None:
    """``time.monotonic()`` when the poller first saw the current request's bytes (before any wait for
    a thread); None outside a request served by this worker (e.g. Flask's test client)."""
    return getattr(_request, "arrival", None)


class ExtenderWorker(PollingWorker):
    """The poller's worker (``connections``) serving each complete request on a thread."""

    def _dispatch(self, conn: Connection) -> None:
        head = conn.head
        assert head is not None
        self._reading.pop(conn, None)
        self._unregister(conn)
        if len(conn.buf) == head.total:  # the usual case: one copy
            request, conn.buf = bytes(conn.buf), bytearray()
        else:
            request = bytes(memoryview(conn.buf)[:head.total])
            del conn.buf[:head.total]
        if head.expects_continue:
            request = framing.without_expect(request, head)
        conn.request_arrival, conn.head = conn.arrival, None
        conn.arrival = self._seen_at if conn.buf else None
        if conn.parser is None:
            conn.initialized = True
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        left = conn.parser.unreader.take_buffered()
        conn.parser.unreader.buf = io.BytesIO(request + left if left else request)  # shares ``request``
        conn.sock.settimeout(self.limits.timeout_seconds)  # bounds writing the reply
        future = self.tpool.submit(self.handle, conn)
        future.add_done_callback(lambda done: self.method_queue.defer(self.finish_request, conn, done))

    def handle(self, conn: Connection) -> bool:
        """Serve the one request whose bytes are in the parser's buffer (a worker thread)."""
        _request.arrival = conn.request_arrival
        try:
            request = next(conn.parser)
            return bool(self._keepalive_after(conn, self.handle_request(request, conn)))
        except (StopIteration, http.errors.NoMoreData):
            return False
        except TimeoutError:
            self.log.debug("client %s did not take its reply in time", conn.client)
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self.log.warning("socket error serving %s: %s", conn.client, exc)
            return False
        except Exception as exc:
            self.handle_error(None, conn.sock, conn.client, exc)
            return False
        finally:
            _request.arrival = None

    def finish_request(self, conn: Connection, future: Future[bool]) -> None:
        """Back on the poller thread: keep the connection for its next request, or close it."""
        keep = not future.cancelled() and future.exception() is None and future.result()
        left = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        if left:  # gunicorn framed the request shorter than the poller did: the rest comes first
            conn.buf[:0] = left
            conn.arrival = conn.arrival or self._seen_at
        if not keep or not self.alive:
            self._close(conn)
            self._unpark()
            return
        conn.sock.setblocking(False)
        self._set_charge(conn, len(conn.buf))
        if conn.buf:
            self._start_reading(conn, conn.arrival or self._seen_at)
            self._watch_reading(conn)
            self._advance(conn)
        else:
            conn.set_timeout()
            self.keepalived_conns.append(conn)
            self._watch(conn, lambda client, c=conn: self.on_client_socket_readable(c, client))
        self._unpark()


def worker_class(limits: Limits) -> type[ExtenderWorker]:
    """The worker class gunicorn should load, with these limits."""
    return type("GangExtenderWorker", (ExtenderWorker,), {"limits": limits, "__module__": __name__})

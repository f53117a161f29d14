"""Clients that post huge filters and never read the replies, against a live extender, while a small
kube-scheduler-like client sends filters back to back on one kept-alive connection and reads each reply.

One run:

1. starts ``gang-extender serve --cluster-snapshot`` over the HTTP tests' four-node snapshot, exactly as
   production does (gunicorn, one worker of extender/http/serving.py), default settings unless
   ``--server-args`` says otherwise;
2. starts ``--attackers`` clients (16), one thread each: connect, then send filters of ``--names``
   (15,000, the most a request may name) node names of ``--name-length`` (253) characters, about 3.9 MB
   each, one after another on the same connection, never reading a byte; when the server closes the
   connection, connect again at once;
3. meanwhile the small client posts a filter of about 3 KB (a pod with labels and annotations, the four
   snapshot nodes) and reads its reply, again and again for ``--seconds`` (20), on one kept-alive
   connection (a new one after an error), with a socket timeout of ``--client-timeout`` (10 s);
4. prints what the small client sent and got (answered = 200 within the server's deadline, 5 s by
   default), its latency p50 / p99 / max, what the attackers sent (bytes, whole requests, connections,
   and how many the server closed before one whole request was sent on them, i.e. closed to make room
   in its byte budget or cut at its deadline, or after), the worker's own count of connections closed to make
   room and cut at the deadline (logged when it stops; trees before this one do not log it), and the
   worker's RSS (sampled every 0.2 s: the largest) and peak RSS.

Run: ``.venv/bin/python bench/hostile_clients.py`` (``--source DIR`` runs the extender package from DIR
instead, e.g. an export of an older commit). Results: docs/reliability.md, "Clients that never read".
"""

from __future__ import annotations

import argparse
import errno
import http.client
import json
import re
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # last: a compiled tree on PYTHONPATH is the one imported
    sys.path.append(str(ROOT))

from tests.http.conftest import NODE_NAMES, snapshot_objects  # noqa: E402
from tests.http.live import LiveServer, proc_status  # noqa: E402

SNAPSHOT = {"apiVersion": "v1", "kind": "List", "items": snapshot_objects()}


def small_filter() -> bytes:
    """A kube-scheduler-sized filter (about 3 KB): a pod with labels and annotations, the snapshot's nodes."""
    labels = {f"app.kubernetes.io/label-{i}": f"value-{i:04d}" for i in range(20)}
    annotations = {f"example.com/annotation-{i}": "x" * 80 for i in range(20)}
    pod = {"metadata": {"name": "web-9", "namespace": "default", "uid": "u9", "labels": labels,
                        "annotations": annotations},
           "spec": {"schedulerName": "default-scheduler",
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
    return json.dumps({"Pod": pod, "NodeNames": NODE_NAMES}).encode()


def huge_filter(names: int = 15_000, length: int = 253, total: int = 4 * 2**20) -> bytes:
    """One whole HTTP request of ``total`` bytes (head included; 0: no padding): a filter naming ``names``
    nodes of ``length`` characters (unknown ones), padded with trailing whitespace (JSON allows it). At
    4 MiB, four such requests are exactly the default 16 MiB byte budget of the worker."""
    pod = {"metadata": {"name": "big", "namespace": "default", "uid": "big"}, "spec": {"containers": []}}
    node_names = [f"{i:06d}-" + "n" * (length - 7) for i in range(names)]
    body = json.dumps({"Pod": pod, "NodeNames": node_names}, separators=(",", ":")).encode()
    def head(length: int) -> bytes:
        return (f"POST /filter HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {length}\r\n\r\n").encode()
    if total:
        body += b" " * (total - len(head(len(body))) - len(body))
    return head(len(body)) + body


@dataclass
class HostileClients:
    """``count`` clients sending ``request`` back to back on each connection, never reading a reply; with
    ``stall_at``, each sends only that many bytes of it and then nothing, until the server closes it.

    Counters (read them while it runs; ints, updated under the GIL): ``bytes_sent``, ``requests_sent``
    (sent whole, i.e. taken by the kernel), ``opened``, ``open_now``, and connections the server closed
    ``closed_before_whole`` (before the kernel had taken one whole request on it: closed to make room, or
    cut at the deadline) or ``closed_after_whole`` (after: reply dropped, or closed while a request
    waited, or while the next one, sent behind it, was coming)."""

    port: int
    count: int
    request: bytes
    stall_at: int = 0
    bytes_sent: int = 0
    requests_sent: int = 0
    opened: int = 0
    open_now: int = 0
    closed_before_whole: int = 0
    closed_after_whole: int = 0
    connect_errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> HostileClients:
        for index in range(self.count):
            thread = threading.Thread(target=self._run, name=f"hostile-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)

    def __enter__(self) -> HostileClients:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def counters(self) -> dict[str, int]:
        return {"bytes_sent": self.bytes_sent, "requests_sent": self.requests_sent, "opened": self.opened,
                "closed_before_whole": self.closed_before_whole, "closed_after_whole": self.closed_after_whole}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=1)
            except OSError:
                self.connect_errors += 1
                self._stop.wait(0.05)
                continue
            self.opened += 1
            self.open_now += 1
            try:
                self._attack(sock)
            finally:
                self.open_now -= 1
                sock.close()

    def _attack(self, sock: socket.socket) -> None:
        view = memoryview(self.request)[:self.stall_at or None]
        sent = 0  # of the current request
        whole = False  # one request sent whole on this connection
        try:
            while not self._stop.is_set():
                if self.stall_at and sent == len(view):  # all it will send: wait for the server to close
                    try:
                        if not sock.recv(65536):
                            raise ConnectionResetError(errno.ECONNRESET, "closed")
                    except TimeoutError:
                        pass
                    continue
                try:
                    sent += (n := sock.send(view[sent:sent + 262144]))
                except TimeoutError:
                    continue  # the server is not reading: look at the stop flag, try again
                self.bytes_sent += n
                if sent == len(self.request):
                    self.requests_sent += 1
                    sent, whole = 0, True
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, None):
                raise
            if whole:
                self.closed_after_whole += 1
            else:
                self.closed_before_whole += 1


@dataclass
class SmallClient:
    """kube-scheduler's shape: one kept-alive connection, a filter, read the reply, the next one."""

    port: int
    body: bytes
    deadline: float          # the server's --client-timeout-seconds: a reply later than this counts as missed
    socket_timeout: float = 10.0
    sent: int = 0
    answered: int = 0        # 200 within ``deadline``
    late: int = 0            # 200 after ``deadline``
    errors: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)  # of every 200

    def run_for(self, seconds: float, at_least: int = 0) -> SmallClient:
        """Filters back to back for ``seconds`` (and at least ``at_least`` of them)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.socket_timeout)
        end = time.monotonic() + seconds
        while time.monotonic() < end or self.sent < at_least:
            self._post(conn)
        conn.close()
        return self

    def _post(self, conn: http.client.HTTPConnection) -> None:
        self.sent += 1
        started = time.monotonic()
        try:
            conn.request("POST", "/filter", body=self.body, headers={"Content-Type": "application/json"})
            reply = conn.getresponse()
            reply.read()
        except (OSError, http.client.HTTPException) as exc:
            self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
            conn.close()  # http.client connects again on the next request
            return
        took = time.monotonic() - started
        if reply.status != 200:
            self.errors[str(reply.status)] = self.errors.get(str(reply.status), 0) + 1
            return
        self.latencies.append(took)
        if took <= self.deadline:
            self.answered += 1
        else:
            self.late += 1


class RssSampler:
    """The largest VmRSS of ``pid`` seen, sampled every ``every`` seconds on a thread."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.pid, self.every, self.largest = pid, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.largest = max(self.largest, proc_status(self.pid)["VmRSS"])
            self._stop.wait(self.every)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(values)
    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)
    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": round(ordered[-1] * 1000, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attackers", type=int, default=16)
    parser.add_argument("--names", type=int, default=15_000)
    parser.add_argument("--name-length", type=int, default=253)
    parser.add_argument("--request-bytes", type=int, default=4 * 2**20,
                        help="each attacker request's size, head included, padded with whitespace (0: no padding)")
    parser.add_argument("--stall-at", type=int, default=0,
                        help="attackers send this many bytes of each request, then nothing (0: whole requests)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--deadline", type=float, default=5.0, help="the server's --client-timeout-seconds")
    parser.add_argument("--client-timeout", type=float, default=10.0, help="the small client's socket timeout")
    parser.add_argument("--server-args", default="", help="extra arguments for gang-extender serve")
    parser.add_argument("--source", type=Path, default=None, help="run the extender package from this directory")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    request = huge_filter(args.names, args.name_length, args.request_bytes)
    server_args = ["--client-timeout-seconds", str(args.deadline), *args.server_args.split()]
    workdir = Path(tempfile.mkdtemp(prefix="hostile-clients-"))
    with LiveServer(workdir, SNAPSHOT, args=server_args, source=args.source) as server:
        pid = server.worker_pid()
        idle_rss = proc_status(pid)["VmRSS"]
        small = SmallClient(server.port, small_filter(), args.deadline, args.client_timeout)
        with RssSampler(pid) as rss, HostileClients(server.port, args.attackers, request, args.stall_at) as attackers:
            started = time.monotonic()
            while attackers.bytes_sent < args.attackers * len(request) // 2 and time.monotonic() - started < 30:
                time.sleep(0.05)  # the attack is under way
            small.run_for(args.seconds)
            open_at_end = attackers.open_now
        worker = proc_status(pid)
        alive = server.alive()
    # the worker's own count, logged when it stops (this tree; None for a tree that does not log it)
    stopped = re.search(r"(\d+) connections closed to make room, (\d+) requests or replies not done",
                        server.log_path.read_text(errors="replace"))
    result: dict[str, Any] = {
        "source": str(args.source or "this tree"), "seconds": args.seconds, "server_args": server_args,
        "small_client": {"body_bytes": len(small.body), "sent": small.sent, "answered": small.answered,
                         "answered_pct": round(100 * small.answered / max(1, small.sent), 1),
                         "late": small.late, "errors": small.errors, **percentiles(small.latencies)},
        "attackers": {"clients": args.attackers, "request_bytes": len(request),
                      "bytes_sent_mb": round(attackers.bytes_sent / 1e6, 1), "requests_sent": attackers.requests_sent,
                      "connections_opened": attackers.opened, "open_at_end": open_at_end,
                      "closed_before_whole_request": attackers.closed_before_whole,
                      "closed_after_whole_request": attackers.closed_after_whole},
        "server": {"closed_for_room": int(stopped[1]) if stopped else None,
                   "closed_late": int(stopped[2]) if stopped else None},
        "worker": {"rss_idle_mb": round(idle_rss / 2**20, 1), "rss_max_mb": round(rss.largest / 2**20, 1),
                   "peak_rss_mb": round(worker["VmHWM"] / 2**20, 1), "threads_at_end": worker["Threads"]},
        "server_alive": alive,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

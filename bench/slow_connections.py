"""Slow connections against a live extender while kube-scheduler-shaped filters keep being answered.

One run:

1. starts ``gang-extender serve --cluster-snapshot`` over the recorded corpus snapshot (1,000 nodes;
   tests/data/corpus) exactly as production does (gunicorn, one worker of extender/http/serving.py);
2. measures the filter latency with no attack (``--baseline-seconds``): the corpus's filter requests (real
   kube-scheduler bodies) replayed in order, one at a time, half on one keep-alive connection and half
   on a new connection each (kube-scheduler uses both), so a refused accept shows too;
3. opens ``--connections`` slow connections (5,000) from one selector thread and keeps them open: a
   third send nothing, a third send a request head one byte at a time, a third send a complete head
   announcing a 1 MB body and then the body one byte at a time; every ``--interval`` seconds each
   connection gets its next byte; a connection the server closes is opened again at once;
4. replays the filters again during the attack (``--attack-seconds``) and prints p50 / p90 / p99 / max
   per phase, errors, how many slow connections the server closed and how long it kept them.

Run: ``.venv/bin/python bench/slow_connections.py`` (``--quick``: 500 connections, 10 s). ``--source DIR``
runs the extender package from DIR instead (e.g. ``git archive e660568 | tar -x -C DIR``: before).
Results: docs/performance.md, "Slow connections".
"""

from __future__ import annotations

import argparse
import errno
import gzip
import http.client
import json
import random
import resource
import selectors
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

from tests.http.live import LiveServer, proc_status  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "corpus"
MODES = ("idle", "head", "body")
_HEAD = (b"POST /filter HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
         b"Content-Length: 1000000\r\n\r\n")
PAYLOADS = {"idle": b"", "head": _HEAD, "body": _HEAD + b"[" * 1_000_000}


@dataclass
class _Slow:
    sock: socket.socket
    mode: str
    opened: float
    payload: bytes
    sent: int = 0


@dataclass
class SlowClients:
    """``count`` slow connections to ``port``, each fed one byte per ``interval`` from one thread."""

    port: int
    count: int
    interval: float = 1.0
    opened: int = 0
    closed_by_server: int = 0
    lifetimes: list[float] = field(default_factory=list)
    connect_errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _conns: dict[int, _Slow] = field(default_factory=dict)

    def _payload(self, mode: str) -> bytes:
        return PAYLOADS[mode]  # shared: one bytes object per mode, not per connection

    def _open(self, selector: selectors.BaseSelector, index: int) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        try:
            sock.connect(("127.0.0.1", self.port))
        except BlockingIOError:
            pass
        except OSError:
            self.connect_errors += 1
            sock.close()
            return
        mode = MODES[index % len(MODES)]
        slow = _Slow(sock, mode, time.monotonic(), self._payload(mode))
        if mode == "body":
            slow.sent = slow.payload.index(b"\r\n\r\n") + 4  # the head goes out whole, at once
            try:
                sock.send(slow.payload[:slow.sent])
            except OSError:
                slow.sent = 0
        self._conns[sock.fileno()] = slow
        selector.register(sock, selectors.EVENT_READ, index)
        self.opened += 1

    def _closed(self, selector: selectors.BaseSelector, fd: int, index: int) -> None:
        slow = self._conns.pop(fd)
        selector.unregister(slow.sock)
        slow.sock.close()
        self.closed_by_server += 1
        self.lifetimes.append(time.monotonic() - slow.opened)
        if not self._stop.is_set():
            self._open(selector, index)

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        for index in range(self.count):
            self._open(selector, index)
        next_tick = time.monotonic()
        while not self._stop.is_set():
            for key, _ in selector.select(timeout=max(0.0, next_tick - time.monotonic())):
                fd = key.fileobj.fileno()  # type: ignore[union-attr]
                try:
                    data = self._conns[fd].sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._closed(selector, fd, key.data)
            if time.monotonic() >= next_tick:
                next_tick += self.interval
                for slow in list(self._conns.values()):
                    if slow.sent < len(slow.payload):
                        try:
                            slow.sent += slow.sock.send(slow.payload[slow.sent:slow.sent + 1])
                        except OSError as exc:
                            if exc.errno not in (errno.EAGAIN, errno.ENOTCONN):
                                slow.sent = len(slow.payload)  # broken: the server's close shows up as EOF
        for slow in self._conns.values():
            slow.sock.close()
        selector.close()

    def stop(self) -> None:
        self._stop.set()


def filter_bodies() -> list[bytes]:
    bodies = []
    with gzip.open(CORPUS / "requests.jsonl.gz") as lines:
        for line in lines:
            record = json.loads(line)
            if record["verb"] == "filter":
                request = record["request"]
                bodies.append(request.encode() if isinstance(request, str) else json.dumps(request).encode())
    return bodies


def replay(port: int, bodies: list[bytes], seconds: float) -> dict[str, Any]:
    """Filters one at a time for ``seconds``: even ones on a kept-alive connection, odd ones on a new one."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    end = time.monotonic() + seconds
    index = 0
    while time.monotonic() < end:
        body = bodies[index % len(bodies)]
        conn = kept if index % 2 == 0 else http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        started = time.monotonic()
        try:
            conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
            reply = conn.getresponse()
            reply.read()
            if reply.status != 200:
                errors[str(reply.status)] = errors.get(str(reply.status), 0) + 1
            latencies.append(time.monotonic() - started)
        except OSError as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            conn.close()
        if conn is not kept:
            conn.close()
        index += 1
    kept.close()
    return {"requests": index, "errors": errors, **percentiles(latencies)}


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values) or [float("nan")]
    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)
    return {"p50_ms": at(0.50), "p90_ms": at(0.90), "p99_ms": at(0.99), "max_ms": round(ordered[-1] * 1000, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between two bytes of a connection")
    parser.add_argument("--baseline-seconds", type=float, default=20.0)
    parser.add_argument("--attack-seconds", type=float, default=40.0)
    parser.add_argument("--source", type=Path, default=None, help="run the extender package from this directory")
    parser.add_argument("--quick", action="store_true", help="500 connections, 5 s + 10 s")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.connections, args.baseline_seconds, args.attack_seconds = 500, 5.0, 10.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.connections + 1024)), hard))
    snapshot = json.loads(gzip.decompress((CORPUS / "snapshot.json.gz").read_bytes()))
    bodies = filter_bodies()
    random.seed(1)
    workdir = Path(tempfile.mkdtemp(prefix="slow-connections-"))
    with LiveServer(workdir, snapshot, source=args.source) as server:
        pid = server.worker_pid()
        baseline = replay(server.port, bodies, args.baseline_seconds)
        attackers = SlowClients(server.port, args.connections, args.interval)
        thread = threading.Thread(target=attackers.run, name="slow-clients", daemon=True)
        thread.start()
        time.sleep(min(10.0, args.attack_seconds / 4))  # let the attack build up
        worker = proc_status(pid)
        attack = replay(server.port, bodies, args.attack_seconds)
        attackers.stop()
        thread.join(30)
        alive = server.alive()
    lifetimes = sorted(attackers.lifetimes)
    result = {
        "connections": args.connections, "interval_s": args.interval, "source": str(args.source or "this tree"),
        "baseline": baseline, "attack": attack,
        "slow": {"opened": attackers.opened, "closed_by_server": attackers.closed_by_server,
                 "connect_errors": attackers.connect_errors,
                 "kept_open_s": percentiles(lifetimes) if lifetimes else None},
        "worker_during_attack": {"threads": worker["Threads"], "rss_mb": round(worker["VmRSS"] / 2**20, 1)},
        "server_alive": alive,
    }
    if result["slow"]["kept_open_s"]:  # percentiles() reports ms; lifetimes are seconds
        result["slow"]["kept_open_s"] = {k.replace("_ms", "_s"): round(v / 1000, 2)
                                         for k, v in result["slow"]["kept_open_s"].items()}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

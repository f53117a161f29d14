"""Hostile clients against a live server (extender/http/connections.py: the byte budget and its reserve for
small requests; replies the client does not take held by the poller, not a thread): clients that post 4 MiB
filters and never read the replies, or send all of one but its last byte, while a small
kube-scheduler-shaped client posts filters back to back on one kept-alive connection, reading each reply.

Before, a request's bytes stayed charged until a thread had written its reply, so four unread 4 MiB replies
held the whole 16 MiB budget until the write deadline, the small client's request waited for room, and
making room closed the oldest unfinished connection: that request. Against that code the first and third
cases here answered 2 of 706 and 3 of 781 filters within the deadline, and a filter sent while two unread
replies held both threads took 1.94 s. The floor here is 90 % answered within the deadline; measured 100 %
(docs/reliability.md, "Clients that never read"; bench/hostile_clients.py for the 20 s run).
"""

from __future__ import annotations

import contextlib
import select
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from extender.http import framing
from extender.http.connections import Limits
from tests.http.live import LiveServer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from hostile_clients import SNAPSHOT, HostileClients, SmallClient, huge_filter, small_filter  # noqa: E402

TIMEOUT = 2.0        # --client-timeout-seconds: reading a request, writing a reply; the small client's deadline
WINDOW = 5.0         # seconds the small client posts filters under attack
ANSWERED_FLOOR = 0.9  # of the small client's filters answered (200) within TIMEOUT
MIB = 2**20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("hostile"), SNAPSHOT,
                      args=["--client-timeout-seconds", str(TIMEOUT), "--threads", "8"])
    with live:
        yield live
    assert "Traceback" not in live.log_path.read_text(), live.log_tail()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class OpenSampler:
    """How many attacker connections were open, sampled every 50 ms while it runs."""

    def __init__(self, attackers: HostileClients) -> None:
        self.attackers, self.samples = attackers, list[int]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append(self.attackers.open_now)

    def __enter__(self) -> OpenSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.mark.parametrize(("readers", "stallers"), [(16, 0), (4, 0), (8, 8)],
                         ids=["16-never-read", "4-never-read", "8-never-read-8-stall"])
def test_small_filters_are_answered_while_others_post_4_mib_and_never_read(
        server: LiveServer, readers: int, stallers: int) -> None:
    attack = huge_filter()  # 4 MiB, head included: four are the whole default budget (16 MiB)
    assert len(attack) == 4 * MIB
    never_read = HostileClients(server.port, readers, attack)
    stall = HostileClients(server.port, stallers, attack, stall_at=len(attack) - 1)  # all but the last byte
    small = SmallClient(server.port, small_filter(), deadline=TIMEOUT, socket_timeout=3 * TIMEOUT)
    with never_read, stall:
        # the attack is under way: each attacker has sent at least one request's worth
        wait_for(lambda: never_read.bytes_sent >= readers * len(attack) and stall.bytes_sent >= stallers * (
            len(attack) - 1), 30, "the attackers to send")
        before = never_read.counters(), stall.counters()
        with OpenSampler(never_read) as open_never_read, OpenSampler(stall) as open_stall:
            small.run_for(WINDOW)
        after = never_read.counters(), stall.counters()
    sent = {name: after[0][name] + after[1][name] - before[0][name] - before[1][name] for name in after[0]}
    report = (f"small client: {small.sent} sent, {small.answered} answered within {TIMEOUT} s, {small.late} late, "
              f"errors {small.errors}, latencies max {max(small.latencies, default=0):.3f} s; attackers during "
              f"the window: {sent}, open (median) {statistics.median(open_never_read.samples or [0])} never "
              f"reading, {statistics.median(open_stall.samples or [0])} stalled")
    print("\n" + report)
    # the hostile load really ran meanwhile: bytes sent, connections open, the server closing them
    assert sent["bytes_sent"] >= (readers + stallers) * len(attack), report
    assert statistics.median(open_never_read.samples) >= readers // 2, report
    if stallers:
        assert statistics.median(open_stall.samples) >= stallers // 2, report
    assert sent["closed_before_whole"] + sent["closed_after_whole"] >= readers, report
    # and kube-scheduler's filters were answered, within the deadline
    assert small.sent >= 10, report
    assert small.answered >= ANSWERED_FLOOR * small.sent, report


def not_reading(port: int, request: bytes) -> socket.socket:
    """A connection that sent ``request`` and will not read (a small receive window)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request)
    return sock


def drain(sock: socket.socket) -> bytes:
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 20):
            received += chunk
    return received


def test_replies_not_taken_hold_no_thread_and_are_dropped_at_the_deadline(tmp_path: Path) -> None:
    """Two threads, two clients that never read a 4.9 MB reply: the threads are free at once (the poller
    holds the replies), and the replies are dropped at the deadline. Before, both threads waited in the
    write until the deadline, and so did a filter sent meanwhile."""
    with LiveServer(tmp_path, SNAPSHOT, args=["--client-timeout-seconds", str(TIMEOUT), "--threads", "2"]) as live:
        hostile = [not_reading(live.port, huge_filter(total=0)) for _ in range(2)]
        # both handlers have run: their replies have started to arrive
        wait_for(lambda: all(select.select([sock], [], [], 0)[0] for sock in hostile), 30, "the replies")
        replied = time.monotonic()
        small = SmallClient(live.port, small_filter(), deadline=TIMEOUT, socket_timeout=3 * TIMEOUT)
        small.run_for(0, at_least=1)
        assert small.answered == 1 and small.latencies[0] < TIMEOUT / 2, small  # not waiting for a thread
        # after the deadline, each reply was cut short: what the kernels held, then the end of the connection
        wait_for(lambda: time.monotonic() > replied + TIMEOUT + 0.5, 10, "the deadline to pass")
        for sock in hostile:
            with sock:
                head, _, body = drain(sock).partition(b"\r\n\r\n")
            length = int(head.split(b"Content-Length: ", 1)[1].split(b"\r\n", 1)[0])
            assert head.startswith(b"HTTP/1.1 200 ") and len(body) < length, (len(body), length)


def test_a_large_reply_read_slowly_arrives_whole(server: LiveServer) -> None:
    """Written by the poller as the client takes it: 15,000 names (a 4.9 MB reply) read 256 KiB at a time."""
    request = huge_filter(total=0)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(request)
        received = b""
        while b"\r\n\r\n" not in received or len(received) < received.index(b"\r\n\r\n") + 4 + int(
                received.split(b"Content-Length: ", 1)[1].split(b"\r\n", 1)[0]):
            chunk = sock.recv(256 * 1024)
            assert chunk, received[:200]
            received += chunk
            time.sleep(0.01)
    head, body = received.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 ")
    assert len(orjson.loads(body)["FailedNodes"]) == 15_000


def test_the_reserve_leaves_room_for_the_largest_request() -> None:
    default = Limits(framing.BodyCaps(4 * MIB), 5.0, 16 * MIB)
    assert (default.reserve_bytes, default.small_request_bytes) == (4 * MIB, 2 * MIB)
    # the largest request (body cap and head) must fit in what large requests may use
    tight = Limits(framing.BodyCaps(4 * MIB), 5.0, 5 * MIB)
    assert tight.reserve_bytes == MIB - framing.HEAD_MAX_BYTES
    assert tight.buffer_bytes - tight.reserve_bytes >= 4 * MIB + framing.HEAD_MAX_BYTES
    assert Limits(framing.BodyCaps(4 * MIB), 5.0, 4 * MIB).small_request_bytes == 0  # no reserve: none is small

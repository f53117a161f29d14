"""The serving worker (extender/http/serving.py) against a live server: read deadlines, idle connections, body caps
before any thread, the connection cap, the per-request arrival stamp, and 5,000 slow connections.

Timings here are generous bounds on behaviour (a connection is closed within the deadline plus slack), not
latency measurements: bench/slow_connections.py measures the filter latency under attack.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from extender.http import serving
from extender.http.framing import BIND_BODY_MAX_BYTES
from tests.http.conftest import NODE_NAMES, snapshot_objects
from tests.http.live import LiveServer, free_port, proc_status

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from slow_connections import SlowClients  # noqa: E402

TIMEOUT = 1.0  # --client-timeout-seconds of the server under test
FILTER = json.dumps({"Pod": {"metadata": {"name": "web-9", "namespace": "default", "uid": "u9"},
                             "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}},
                     "NodeNames": NODE_NAMES}).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    workdir = tmp_path_factory.mktemp("serving")
    live = LiveServer(workdir, {"apiVersion": "v1", "kind": "List", "items": snapshot_objects()},
                      args=["--client-timeout-seconds", str(TIMEOUT), "--threads", "8"])
    with live:
        yield live
    assert "Traceback" not in live.log_path.read_text(), live.log_tail()


def connect(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def closed_after(sock: socket.socket, feed: bytes = b"", every: float = 0.0) -> tuple[float, bytes]:
    """Seconds until the server closes ``sock`` (sending ``feed`` one byte per ``every``), and what it sent;
    ``sock`` is closed on return."""
    with sock:
        return _closed_after(sock, feed, every)


def _closed_after(sock: socket.socket, feed: bytes, every: float) -> tuple[float, bytes]:
    started = time.monotonic()
    received = b""
    sock.settimeout(every or 10)
    sent = 0
    while True:
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            if sent < len(feed):
                try:
                    sock.send(feed[sent:sent + 1])
                except OSError:
                    return time.monotonic() - started, received
                sent += 1
            if time.monotonic() - started > 30:
                return float("inf"), received
            continue
        except OSError:
            return time.monotonic() - started, received
        if not chunk:
            return time.monotonic() - started, received
        received += chunk


def post_filter(server: LiveServer, body: bytes = FILTER) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        return reply.status
    finally:
        conn.close()


# ------------------------------------------------------------------------------------ deadlines
def test_a_connection_that_sends_nothing_is_closed_after_the_timeout(server: LiveServer) -> None:
    elapsed, received = closed_after(connect(server))
    assert received == b""
    assert TIMEOUT - 0.1 <= elapsed <= TIMEOUT + 1.5, elapsed  # stock gthread: 5 s in a thread, then 75 s idle


def test_a_head_sent_a_byte_at_a_time_is_cut_at_the_total_deadline(server: LiveServer) -> None:
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n"
    elapsed, _ = closed_after(connect(server), head, every=0.1)
    assert elapsed <= TIMEOUT + 1.5, elapsed  # every recv gets a byte within 0.1 s: only a total deadline cuts it


def test_a_body_sent_a_byte_at_a_time_is_cut_at_the_total_deadline(server: LiveServer) -> None:
    sock = connect(server)
    sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
    elapsed, received = closed_after(sock, b"[" * 100_000, every=0.1)
    assert received == b""
    assert elapsed <= TIMEOUT + 1.5, elapsed


def test_a_request_within_the_deadline_is_served_on_a_kept_alive_connection(server: LiveServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    for _ in range(3):
        conn.request("POST", "/filter", body=FILTER)
        reply = conn.getresponse()
        assert reply.status == 200 and json.loads(reply.read())["NodeNames"]
        time.sleep(TIMEOUT * 1.2)  # idle longer than the read deadline: kept-alive connections wait longer
    conn.close()


# ------------------------------------------------------------------------------------ framing
@pytest.mark.parametrize(("path", "length"), [("/filter", 4 * 2**20 + 1), ("/bind", BIND_BODY_MAX_BYTES + 1),
                                              ("/prioritize", 10**20)])
def test_a_body_over_its_cap_is_refused_before_it_is_sent(server: LiveServer, path: str, length: int) -> None:
    sock = connect(server)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
    elapsed, received = closed_after(sock)
    assert received.startswith(b"HTTP/1.1 413 "), received
    cap = 4 * 2**20 if path != "/bind" else BIND_BODY_MAX_BYTES
    assert json.loads(received.split(b"\r\n\r\n", 1)[1]) == {"error": f"request body larger than {cap} bytes",
                                                              "status": 413}
    assert elapsed < TIMEOUT  # answered at once, not at the deadline


def test_a_chunked_body_gets_411(server: LiveServer) -> None:
    sock = connect(server)
    sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    _, received = closed_after(sock)
    assert received.startswith(b"HTTP/1.1 411 "), received


def test_expect_100_continue_gets_one_interim_reply(server: LiveServer) -> None:
    sock = connect(server)
    sock.sendall(f"POST /filter HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {len(FILTER)}\r\n"
                 f"Connection: close\r\n\r\n".encode())
    assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    sock.sendall(FILTER)
    _, received = closed_after(sock)
    assert received.startswith(b"HTTP/1.1 200 "), received
    assert b"100 Continue" not in received


def test_pipelined_requests_are_answered_in_order(server: LiveServer) -> None:
    sock = connect(server)
    one = f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: {len(FILTER)}\r\n\r\n".encode() + FILTER
    sock.sendall(one + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    _, received = closed_after(sock)
    assert received.count(b"HTTP/1.1 200 ") == 2, received
    assert received.index(b'"NodeNames"') < received.index(b'{"status":"ok"}')


# ------------------------------------------------------------------------------------ connections
def test_the_connection_cap_closes_idle_connections_instead_of_refusing(tmp_path: Path) -> None:
    live = LiveServer(tmp_path, {"apiVersion": "v1", "kind": "List", "items": snapshot_objects()},
                      args=["--threads", "4", "--client-timeout-seconds", "30"])  # cap: 4 + 256 connections
    with live:
        idle = [socket.create_connection(("127.0.0.1", live.port)) for _ in range(400)]
        time.sleep(0.5)
        started = time.monotonic()
        assert post_filter(live) == 200
        assert time.monotonic() - started < 3  # stock gthread stops accepting at the cap: this waits 30 s or more
        closed = sum(1 for sock in idle if closed_after_probe(sock))
        assert closed >= 400 - 260, closed
        for sock in idle:
            sock.close()


def closed_after_probe(sock: socket.socket) -> bool:
    sock.settimeout(0.01)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_5000_slow_connections_do_not_stop_filters(server: LiveServer) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 6000:
        pytest.skip(f"open-file hard limit {hard} < 6000")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 6000), hard))
    attackers = SlowClients(server.port, 5000, interval=0.5)
    thread = threading.Thread(target=attackers.run, daemon=True)
    thread.start()
    try:
        time.sleep(3 * TIMEOUT)  # the attack is in full swing: connections opened, cut, reopened
        statuses = [post_filter(server) for _ in range(40)]
        worker = proc_status(server.worker_pid())
    finally:
        attackers.stop()
        thread.join(30)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert statuses == [200] * 40
    assert attackers.opened >= 5000 and attackers.closed_by_server > 0
    assert worker["Threads"] < 50  # no thread waits on a slow client (8 request threads + the runtime's)


# ------------------------------------------------------------------------------------ arrival stamp
@pytest.fixture(scope="module")
def arrival_server() -> Iterator[int]:
    with gunicorn_serving() as port:
        yield port


@contextlib.contextmanager
def gunicorn_serving(*args: str) -> Iterator[int]:
    """gunicorn with one ``ExtenderWorker`` thread serving tests/http/arrival_app.py; its port."""
    port = free_port()
    worker = "extender.http.serving.ExtenderWorker"
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-k", worker, "--threads", "1", *args,
                             "-b", f"127.0.0.1:{port}", "tests.http.arrival_app:application"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        yield port
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(15)


def get(conn: http.client.HTTPConnection, path: str) -> dict[str, Any]:
    conn.request("GET", path)
    reply = conn.getresponse()
    return dict(json.loads(reply.read()))


SLEEP = 1.0  # how long the request holding the server's only thread keeps it


def stamped_while_the_only_thread_sleeps(port: int, ask: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The reply to ``ask()`` (a request to the one-thread server), from a try where it was sent while another
    request slept on the server's only thread and the poller stamped it before that thread was free; which
    try is seen from the replies' stamps (one clock for all processes), never assumed from a sleep here."""
    for _ in range(5):
        busy = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        slept: dict[str, Any] = {}
        holder = threading.Thread(target=lambda conn=busy, into=slept: into.update(get(conn, f"/sleep?{SLEEP}")))
        holder.start()
        time.sleep(0.1)  # the holder usually has the thread by now; the stamps below say whether it had
        sent = time.monotonic()
        reply = ask()
        holder.join()
        busy.close()
        freed = slept["started"] + SLEEP  # the thread was busy until at least then
        if slept["started"] <= sent and reply["arrival"] < freed:
            assert sent <= reply["arrival"]
            assert reply["started"] >= freed  # it waited for the thread; the stamp did not
            return reply
    pytest.fail("in 5 tries, no request was stamped while the only thread slept: the stamp waits for the thread")


def test_arrival_is_stamped_before_the_wait_for_a_thread(arrival_server: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", arrival_server, timeout=10)
    conn.connect()
    stamped_while_the_only_thread_sleeps(arrival_server, lambda: get(conn, "/arrival"))
    time.sleep(0.3)
    sent = time.monotonic()
    second = get(conn, "/arrival")  # the same kept-alive connection: a stamp of its own
    assert sent <= second["arrival"] <= second["started"]
    conn.close()


def test_no_arrival_outside_a_served_request() -> None:
    assert serving.request_arrival() is None


# ------------------------------------------------------------------------------------ direct routes
def post(port: int, path: str, body: bytes = b"", version: str = "HTTP/1.1", headers: str = "") -> bytes:
    """One request on a connection of its own, closed by the client's ``Connection: close``; all the server sent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"POST {path} {version}\r\nHost: x\r\nContent-Length: {len(body)}\r\n{headers}"
                 f"Connection: close\r\n\r\n".encode() + body)
    _, received = closed_after(sock)
    return received


def reply_json(received: bytes) -> dict[str, Any]:
    return dict(json.loads(received.partition(b"\r\n\r\n")[2]))


def test_a_direct_route_answers_a_plain_post_and_the_app_everything_else(arrival_server: int) -> None:
    assert reply_json(post(arrival_server, "/direct", b"0"))["direct"] is True
    assert reply_json(post(arrival_server, "/direct", b"0", version="HTTP/1.0"))["direct"] is False
    assert reply_json(post(arrival_server, "/direct?x=1", b"0"))["direct"] is False
    assert reply_json(post(arrival_server, "/direct", b"0", headers="Upgrade: h2c\r\n"))["direct"] is False
    assert reply_json(post(arrival_server, "/elsewhere", b"0"))["direct"] is False
    conn = http.client.HTTPConnection("127.0.0.1", arrival_server, timeout=10)
    assert get(conn, "/direct")["direct"] is False  # a GET: the app's
    conn.close()


def test_a_direct_route_keeps_the_connection_and_stamps_each_request(arrival_server: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", arrival_server, timeout=10)
    answers = []
    for _ in range(3):
        sent = time.monotonic()
        conn.request("POST", "/direct", body=b"0")
        reply = conn.getresponse()
        assert reply.status == 200 and reply.getheader("Connection") is None
        answers.append((sent, json.loads(reply.read())))
    conn.close()
    for sent, answer in answers:
        assert answer["direct"] and sent <= answer["arrival"] <= answer["started"]


def test_a_direct_route_is_stamped_before_the_wait_for_a_thread(arrival_server: int) -> None:
    answer = stamped_while_the_only_thread_sleeps(arrival_server, lambda: reply_json(post(arrival_server, "/direct")))
    assert answer["direct"] is True


def test_direct_and_app_requests_pipelined_on_one_connection_are_answered_in_order(arrival_server: int) -> None:
    sock = socket.create_connection(("127.0.0.1", arrival_server), timeout=10)
    sock.sendall(b"POST /direct HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n0.01"
                 b"GET /arrival HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"POST /direct HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n0"
                 b"POST /direct HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\n0.0")
    _, received = closed_after(sock)
    replies = [part for part in received.split(b"HTTP/1.1 ") if part and not part.startswith(b"100 ")]
    bodies = [json.loads(part.partition(b"\r\n\r\n")[2]) for part in replies]
    assert [(body["direct"], body.get("body")) for body in bodies] == [
        (True, "0.01"), (False, None), (True, "0"), (True, "0.0")], received
    assert replies[-1].count(b"Connection: close") == 1


def test_a_direct_route_that_raises_gets_a_500_and_the_connection_closes(arrival_server: int) -> None:
    sock = socket.create_connection(("127.0.0.1", arrival_server), timeout=10)
    sock.sendall(b"POST /broken HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n0")  # asks to keep it
    _, received = closed_after(sock)
    assert received.startswith(b"HTTP/1.1 500 Error\r\n") and b"Connection: close" in received, received
    assert reply_json(received) == {"error": "internal error", "status": 500}
    assert reply_json(post(arrival_server, "/direct", b"0"))["direct"] is True  # the worker serves on


CLOSING_HEADS = {
    "Connection: close": b"Connection: close\r\n",
    "close, then keep-alive": b"Connection: close\r\nConnection: keep-alive\r\n",  # close anywhere closes
}


@pytest.mark.parametrize("headers", CLOSING_HEADS.values(), ids=CLOSING_HEADS.keys())
def test_a_request_pipelined_after_a_direct_close_is_not_served(arrival_server: int, headers: bytes) -> None:
    sock = socket.create_connection(("127.0.0.1", arrival_server), timeout=10)
    sock.sendall(b"POST /direct HTTP/1.1\r\nHost: x\r\n" + headers + b"Content-Length: 1\r\n\r\n0"
                 b"POST /direct HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n1")
    _, received = closed_after(sock)
    assert received.count(b"HTTP/1.1 200 ") == 1 and b'"body": "0"' in received, received
    assert b"Connection: close" in received


def test_a_body_holding_a_blank_line_and_a_request_reaches_the_direct_route_whole(arrival_server: int) -> None:
    body = b"0" + b" " * 15_000 + b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"
    answer = reply_json(post(arrival_server, "/direct", body))
    assert answer["direct"] is True and answer["body"] == body.decode()


# Heads gunicorn refuses: a direct route must not read them another way (a proxy reading them gunicorn's
# way could otherwise smuggle a request past it).
MALFORMED_HEADS = {
    "space before colon": b"Content-Length : 1\r\n",
    "control in name": b"Content-Length\x0b: 1\r\nContent-Length: 1\r\n",
    "bare LF": b"X: a\nY: b\r\nContent-Length: 1\r\n",
    "folded line": b"X-A: a\r\n Connection: keep-alive\r\nContent-Length: 1\r\n",
    "NUL in a value": b"X: a\x00b\r\nContent-Length: 1\r\n",
    "unknown expectation": b"Expect: something\r\nContent-Length: 1\r\n",
    "header too long": b"X: " + b"a" * 9000 + b"\r\nContent-Length: 1\r\n",
    "too many headers": b"".join(b"X-%d: a\r\n" % i for i in range(101)) + b"Content-Length: 1\r\n",
}


@pytest.mark.parametrize("headers", MALFORMED_HEADS.values(), ids=MALFORMED_HEADS.keys())
def test_a_malformed_head_goes_to_gunicorn_which_refuses_it(arrival_server: int, headers: bytes) -> None:
    sock = socket.create_connection(("127.0.0.1", arrival_server), timeout=10)
    sock.sendall(b"POST /direct HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n0GET /arrival HTTP/1.1\r\n\r\n")
    _, received = closed_after(sock)
    assert received[9:10] == b"4" and received.count(b"HTTP/1.1 ") == 1, received  # 400, 417 or 431


def test_max_requests_closes_the_direct_routes_connection_too() -> None:
    with gunicorn_serving("--max-requests", "2") as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        closing = []
        for _ in range(2):
            conn.request("POST", "/direct", body=b"0")
            reply = conn.getresponse()
            assert json.loads(reply.read())["direct"] is True
            closing.append(reply.getheader("Connection"))
        conn.close()
    assert closing == [None, "close"]  # the worker restarts after its second request


VERB_BODIES = {
    "filter": ("/filter", FILTER),
    "filter, not JSON": ("/filter", b"{not json"),
    "filter, empty": ("/filter", b""),
    "filter, bad pod": ("/filter", json.dumps({"Pod": {}, "NodeNames": ["n"]}).encode()),
    "prioritize": ("/prioritize", FILTER),
    "preempt, bad": ("/preempt", json.dumps({"Pod": {}}).encode()),
    "bind, unknown pod": ("/bind", json.dumps({"PodName": "nobody", "PodNamespace": "default", "PodUID": "u-none",
                                               "Node": NODE_NAMES[0]}).encode()),
    "bind, bad": ("/bind", json.dumps({"PodName": 3}).encode()),
}


@pytest.mark.parametrize(("path", "body"), VERB_BODIES.values(), ids=VERB_BODIES.keys())
def test_the_verbs_answer_the_same_direct_and_through_flask(server: LiveServer, path: str, body: bytes) -> None:
    direct = post(server.port, path, body)
    through_flask = post(server.port, path + "?via=flask", body)  # a query: gunicorn and Flask serve it
    assert b"Server: gunicorn" not in direct and b"Server: gunicorn" in through_flask
    assert direct.split(b" ")[1] == through_flask.split(b" ")[1]  # the status
    assert reply_json(direct) == reply_json(through_flask)


def test_a_direct_request_is_counted_in_the_metrics(server: LiveServer) -> None:
    def filters() -> float:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        line = 'gang_extender_requests_total{outcome="ok",verb="filter"} '
        return sum(float(row[len(line):]) for row in text.splitlines() if row.startswith(line))

    before = filters()
    assert b"Server: gunicorn" not in post(server.port, "/filter", FILTER)
    assert filters() == before + 1


def test_the_direct_routes_write_the_access_log_at_debug(tmp_path: Path) -> None:
    live = LiveServer(tmp_path, {"apiVersion": "v1", "kind": "List", "items": snapshot_objects()},
                      args=["--log-level", "debug"])
    with live:
        assert b"Server: gunicorn" not in post(live.port, "/filter", FILTER)  # answered directly
        assert b"Server: gunicorn" in post(live.port, "/filter?via=flask", FILTER)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and live.log_path.read_text().count("/filter") < 2:
            time.sleep(0.05)  # the log is written by the server process: wait for both lines
        log = live.log_path.read_text()
    assert '"POST /filter HTTP/1.1" 200 ' in log and '"POST /filter?via=flask HTTP/1.1" 200 ' in log, log[-2000:]


# ------------------------------------------------------------------------------- started threads
def test_threads_ahead_leave_half_of_a_process_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limit, current = tmp_path / "pids.max", tmp_path / "pids.current"
    monkeypatch.setattr(serving, "PIDS_FILES", ((str(tmp_path / "absent.max"), str(tmp_path / "absent")),
                                                (str(limit), str(current))))
    assert serving.threads_ahead() == serving.STARTED_THREADS  # no limit found
    limit.write_text("max\n")
    current.write_text("40\n")
    assert serving.threads_ahead() == serving.STARTED_THREADS
    limit.write_text("1024\n")
    assert serving.threads_ahead() == 492  # (1024 - 40) // 2
    limit.write_text("100000\n")
    assert serving.threads_ahead() == serving.STARTED_THREADS
    limit.write_text("30\n")
    assert serving.threads_ahead() == 0
    limit.write_text("garbage\n")
    assert serving.threads_ahead() == serving.STARTED_THREADS


def test_the_worker_starts_its_threads_before_it_serves(tmp_path: Path) -> None:
    """With the default --threads the worker has started ``STARTED_THREADS`` request threads once it is ready
    (held binds in a backlog then reuse them instead of the poller starting one per new bind)."""
    live = LiveServer(tmp_path, {"apiVersion": "v1", "kind": "List", "items": snapshot_objects()})
    with live:
        assert post_filter(live) == 200
        assert proc_status(live.worker_pid())["Threads"] >= serving.STARTED_THREADS

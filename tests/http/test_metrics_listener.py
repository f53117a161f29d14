"""The metrics-only listener (extender/http/metrics_listener.py, ``--metrics-address``): GET /metrics and
nothing else, at most 4 connections at once, and, in a live ``gang-extender serve``, the verbs still only on
their own port.

Timings are generous bounds on behaviour (a held slot is freed within its timeout plus slack).
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from extender import config
from extender.errors import ConfigError
from extender.http import metrics_listener
from tests.http.conftest import NODE_NAMES, snapshot_objects
from tests.http.live import LiveServer, free_port

FILTER = json.dumps({"Pod": {"metadata": {"name": "web-9", "namespace": "default", "uid": "u9"},
                             "spec": {"containers": [{"name": "c"}]}}, "NodeNames": NODE_NAMES}).encode()


def ask(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


@pytest.fixture
def listener() -> metrics_listener.MetricsListener:
    registry = CollectorRegistry()
    Counter("gang_extender_probe", "a test counter", registry=registry).inc(3)
    server = metrics_listener.start("127.0.0.1", 0, registry, slots=4, timeout=1.0)
    yield server
    server.shutdown()
    server.server_close()


def test_only_get_metrics_is_served(listener: metrics_listener.MetricsListener) -> None:
    port = listener.server_address[1]
    status, body = ask(port, "GET", "/metrics")
    assert status == 200 and b"gang_extender_probe_total 3.0" in body
    assert ask(port, "GET", "/metrics?name[]=x")[0] == 200
    for path in ("/", "/filter", "/healthz", "/explain", "/metrics/../filter"):
        assert ask(port, "GET", path)[0] == 404, path
    for verb in ("/filter", "/prioritize", "/bind", "/metrics"):
        assert ask(port, "POST", verb, FILTER)[0] == 501, verb


def test_scrapes_within_a_second_reuse_the_last_collection() -> None:
    registry = CollectorRegistry()
    counter = Counter("gang_extender_probe", "a test counter", registry=registry)
    server = metrics_listener.start("127.0.0.1", 0, registry, reuse_seconds=0.5)
    port = server.server_address[1]
    try:
        assert b"gang_extender_probe_total 0.0" in ask(port, "GET", "/metrics")[1]
        counter.inc()
        assert b"gang_extender_probe_total 0.0" in ask(port, "GET", "/metrics")[1]  # the same collection
        time.sleep(0.6)
        assert b"gang_extender_probe_total 1.0" in ask(port, "GET", "/metrics")[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_fifth_connection_takes_the_slot_of_the_oldest_one_that_said_nothing(
        listener: metrics_listener.MetricsListener) -> None:
    """Four connections that send nothing hold the slots; a scrape arriving then cuts the oldest of them and
    is answered (were it closed instead, four idle clients reconnecting every timeout would keep every
    scrape out); the rest are given up after their 1 s timeout."""
    port = listener.server_address[1]
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
    try:
        time.sleep(0.2)  # accepted, each on its thread, waiting for a request line
        status, body = ask(port, "GET", "/metrics")
        assert status == 200 and b"gang_extender_probe_total 3.0" in body
        assert held[0].recv(100) == b""  # the oldest, cut at once
        started = time.monotonic()
        for sock in held[1:]:  # the listener gives up on each after its 1 s timeout
            assert sock.recv(100) == b""
        assert time.monotonic() - started < 5
    finally:
        for sock in held:
            sock.close()
    assert ask(port, "GET", "/metrics")[0] == 200


def test_a_fifth_connection_is_closed_while_four_are_being_answered() -> None:
    """A connection whose request has arrived is not cut for another: while four scrapes are being answered
    (their collection held up here), a fifth connection is closed without a reply; the four are answered."""
    collecting, release = threading.Event(), threading.Event()

    class Slow:
        def collect(self) -> list[Any]:
            collecting.set()
            release.wait(10)
            return []

    registry = CollectorRegistry()
    registry.register(Slow())  # type: ignore[arg-type]
    server = metrics_listener.start("127.0.0.1", 0, registry, slots=4, timeout=5.0, reuse_seconds=0.0)
    port = server.server_address[1]
    replies: list[int] = []
    scrapes = [threading.Thread(target=lambda: replies.append(ask(port, "GET", "/metrics")[0])) for _ in range(4)]
    try:
        for scrape in scrapes:
            scrape.start()
        assert collecting.wait(5)
        time.sleep(0.3)  # the other three wait for the collection, their requests read
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            extra.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert extra.recv(100) == b""  # closed without a reply
        finally:
            extra.close()
        release.set()
        for scrape in scrapes:
            scrape.join(10)
        assert replies == [200] * 4
    finally:
        release.set()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("address", "expected"), [("", None), ("0.0.0.0:9090", ("0.0.0.0", 9090)),
                                                   ("[::]:9090", ("::", 9090)), ("pod:1", ("pod", 1))])
def test_metrics_address_is_parsed(address: str, expected: tuple[str, int] | None) -> None:
    assert config.metrics_address(config.load({"metrics_address": address})) == expected


@pytest.mark.parametrize("address", ["9090", ":9090", "::9090", "0.0.0.0:0", "0.0.0.0:70000", "h:x", "0.0.0.0:8888"])
def test_a_bad_metrics_address_is_refused(address: str) -> None:
    with pytest.raises(ConfigError, match="metrics-address"):
        config.load({"metrics_address": address})


def test_a_live_server_serves_metrics_there_and_verbs_only_on_its_port(tmp_path: Path) -> None:
    metrics_port = free_port()
    live = LiveServer(tmp_path, {"apiVersion": "v1", "kind": "List", "items": snapshot_objects()},
                      args=["--metrics-address", f"127.0.0.1:{metrics_port}", "--threads", "8"])
    with live:
        assert ask(live.port, "POST", "/filter", FILTER)[0] == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
            scraped = reply.read().decode()
        assert 'gang_extender_requests_total{outcome="ok",verb="filter"} 1.0' in scraped, scraped[:2000]
        assert "gang_extender_filter_cache_hits_total" in scraped
        assert ask(metrics_port, "POST", "/filter", FILTER)[0] == 501
        assert ask(metrics_port, "GET", "/readyz")[0] == 404
    assert "serving GET /metrics only on http://127.0.0.1:" in live.log_path.read_text(), live.log_tail()
    assert "Traceback" not in live.log_path.read_text(), live.log_tail()


def test_clients_trickling_a_request_do_not_hold_the_slots_past_the_timeout(
        listener: metrics_listener.MetricsListener) -> None:
    """The timeout bounds a request in all, not each gap between its bytes: four clients that send a
    header byte every half second (each gap well within the 1 s timeout) are cut off after about a
    second, and a scrape is answered. Were the timeout per gap, they would hold every slot for as long
    as they trickle (hours: a request line and headers may be 6 MiB), and every scrape would be closed."""
    port = listener.server_address[1]
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
    for sock in held:
        sock.sendall(b"GET /metrics HTTP/1.0\r\nX-Slow: ")
    started, cut = time.monotonic(), 0
    while time.monotonic() - started < 4 and cut < len(held):
        time.sleep(0.5)
        for sock in held:
            try:
                sock.sendall(b"a")
            except OSError:
                cut += 1
    try:
        assert ask(port, "GET", "/metrics")[0] == 200  # within 4 s of trickling
    finally:
        for sock in held:
            sock.close()


def test_a_client_that_resets_is_not_logged_as_a_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    """A scraper that hangs up before its reply is a network event, not an error: nothing on stderr.
    socketserver's default prints a traceback for each such connection, so anyone who can reach the
    pod IP could write ~1.5 kB of stderr per connection (hundreds of them a second)."""
    registry = CollectorRegistry()
    Counter("gang_extender_probe", "a test counter", registry=registry)
    server = metrics_listener.start("127.0.0.1", 0, registry, slots=4, timeout=1.0)
    port = server.server_address[1]
    try:
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            sock.close()  # a reset: the reply meets a closed connection
        time.sleep(0.5)
        assert ask(port, "GET", "/metrics")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
    assert "Traceback" not in capfd.readouterr().err


def test_a_new_worker_binds_while_the_old_one_still_listens() -> None:
    """gunicorn's reload (SIGHUP) boots the new worker before the old one has drained (held binds keep it
    up to graceful_timeout): the new worker's listener must bind the port the old one still holds, or the
    worker fails to boot and gunicorn shuts down altogether (seen live: "Worker failed to boot" after a
    HUP with a bind held at its barrier)."""
    registry = CollectorRegistry()
    old = metrics_listener.start("127.0.0.1", 0, registry, timeout=1.0)
    port = old.server_address[1]
    try:
        new = metrics_listener.start("127.0.0.1", port, registry, timeout=1.0)
    finally:
        old.shutdown()
        old.server_close()
    try:
        assert ask(port, "GET", "/metrics")[0] == 200  # the new one serves once the old one is gone
    finally:
        new.shutdown()
        new.server_close()

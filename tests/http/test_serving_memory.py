"""Memory against hostile bodies, on a live server: a body at the default cap costs a bounded amount of RSS,
and the process survives many such bodies at once under a 1 GiB memory cgroup (the shipped pod limit).

The costliest body per byte found is a list of empty lists (``[],`` repeated): orjson makes a 56-byte list
object, plus its pointer, per 3 bytes. Measured figures: docs/reliability.md, "Memory".
"""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path

import pytest

from extender.config import Settings
from tests.http.conftest import NODE_NAMES, snapshot_objects
from tests.http.live import LiveServer, MemoryCgroup, proc_status

CAP = Settings().max_body_bytes
MIB = 2**20
SNAPSHOT = {"apiVersion": "v1", "kind": "List", "items": snapshot_objects()}
POD = {"metadata": {"name": "web-9", "namespace": "default", "uid": "u9"},
       "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}}


def body_of(unit: bytes, size: int = CAP) -> bytes:
    """A filter body of exactly ``size`` bytes whose NodeNames is ``unit`` repeated."""
    head = b'{"Pod":' + json.dumps(POD, separators=(",", ":")).encode() + b',"NodeNames":['
    count = (size - len(head) - 2 + 1) // len(unit)
    body = head + (unit * count)[:-1] + b"]}"
    return body + b" " * (size - len(body))  # JSON allows trailing whitespace


def post(port: int, body: bytes) -> int | str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        return reply.status
    except OSError as exc:  # closed by the server to keep within its byte budget
        return type(exc).__name__
    finally:
        conn.close()


def test_a_body_at_the_cap_costs_bounded_rss(tmp_path: Path) -> None:
    with LiveServer(tmp_path, SNAPSHOT) as live:
        pid = live.worker_pid()
        idle = proc_status(pid)["VmHWM"]
        assert post(live.port, body_of(b"[],", CAP + 1)) == 413  # refused by the poller: nothing read
        assert proc_status(pid)["VmHWM"] - idle < 4 * MIB
        assert post(live.port, body_of(b"[],")) == 400
        grown = proc_status(pid)["VmHWM"] - idle
        print(f"\npeak RSS {idle / MIB:.1f} MiB idle, +{grown / MIB:.1f} MiB for one {CAP / MIB:.0f} MiB body of []")
        assert grown < 200 * MIB  # measured +137 MiB; the 64 MiB cap before allowed ~2.1 GiB
        assert post(live.port, json.dumps({"Pod": POD, "NodeNames": NODE_NAMES}).encode()) == 200


def test_many_bodies_at_the_cap_at_once_fit_in_1_gib(tmp_path: Path) -> None:
    reason = MemoryCgroup.available()
    if reason:
        pytest.skip(reason)
    cgroup = MemoryCgroup(f"gang-extender-test-{tmp_path.name}", 2**30)
    statuses: list[int | str] = []
    hostile = body_of(b"[],")

    def send(rounds: int) -> None:
        for _ in range(rounds):
            statuses.append(post(live.port, hostile))

    live = LiveServer(tmp_path, SNAPSHOT, cgroup=cgroup)
    with live:
        senders = [threading.Thread(target=send, args=(4,)) for _ in range(16)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(300)
        assert post(live.port, json.dumps({"Pod": POD, "NodeNames": NODE_NAMES}).encode()) == 200
        peak, kills, alive = cgroup.peak_bytes(), cgroup.oom_kills(), live.alive()
        boots = live.log_path.read_text().count("Booting worker")
    print(f"\n64 bodies of {CAP / MIB:.0f} MiB from 16 clients: cgroup peak {peak / MIB:.0f} MiB, "
          f"replies {sorted({str(s): statuses.count(s) for s in statuses}.items())}")
    assert alive and kills == 0 and boots == 1, (kills, boots)
    assert peak < 2**30
    # The rest were closed to keep within the budget. How many get parsed depends on CPU: 15-16 on a quiet
    # 2-core machine, 12 with a load average of 10 (two benchmarks and a build beside it), when large requests
    # could use the whole budget; kept to 3/4 of it since (extender/http/connections.py), 11-17 with a load
    # average of 2-5.
    assert len(statuses) == 64 and statuses.count(400) >= 8

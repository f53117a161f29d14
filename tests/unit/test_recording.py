"""RequestRecorder: whole lines, one write each, a size cap."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from extender import linefile
from extender.recording import RequestRecorder


def test_each_line_is_one_write_so_a_crash_cannot_leave_half_a_line(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[int] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(linefile.os, "write", counting_write)
    recorder = RequestRecorder(tmp_path / "r.jsonl", max_bytes=10 * 2**20)
    names = [f"node-{i}" for i in range(20_000)]  # a ~250 KB body: many buffer sizes
    body = json.dumps({"NodeNames": names}).encode()
    recorder.record("filter", 1.0, 200, 0.001, body, body)
    recorder.record("bind", 2.0, 200, 0.001, b"not json", b'{"Error": ""}')
    recorder.close()
    assert len(writes) == 2 and writes[0] > 2 * len(body)
    lines = (tmp_path / "r.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and [json.loads(line)["verb"] for line in lines[:-1]] == ["filter", "bind"]
    assert json.loads(lines[1])["request"] == "not json"


def test_recording_stops_at_the_cap_and_appends_to_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"verb": "earlier"}\n')
    recorder = RequestRecorder(path, max_bytes=300)
    for i in range(10):
        recorder.record("filter", float(i), 200, 0.001, b"{}", b'{"Error": ""}')
    recorder.close()
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"verb": "earlier"}
    assert 1 < len(lines) < 10 and recorder.full and path.stat().st_size <= 300

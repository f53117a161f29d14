"""RequestRecorder: whole lines, one write each, a size cap, readable by its owner only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from extender.files import linefile, recording
from extender.files.recording import RequestRecorder


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


def test_the_recording_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """It holds whole pod bodies: created 0600 whatever the umask, and an older, wider file is narrowed."""
    old_umask = os.umask(0)
    try:
        fresh = RequestRecorder(tmp_path / "new.jsonl", max_bytes=2**20)
    finally:
        os.umask(old_umask)
    fresh.record("filter", 1.0, 200, 0.001, b"{}", b"{}")
    fresh.close()
    assert (tmp_path / "new.jsonl").stat().st_mode & 0o777 == 0o600

    wide = tmp_path / "wide.jsonl"
    wide.write_bytes(b'{"verb": "earlier"}\n')
    wide.chmod(0o664)
    RequestRecorder(wide, max_bytes=2**20).close()
    assert wide.stat().st_mode & 0o777 == 0o600
    assert wide.read_bytes() == b'{"verb": "earlier"}\n'


def test_a_recording_that_cannot_be_made_private_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Another user's file cannot be narrowed (EPERM): recording stays off, with an error, not a crash."""
    def refuse(path: Path, mode: int) -> linefile.AppendOnlyLines:
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(recording, "AppendOnlyLines", refuse)
    recorder = RequestRecorder(tmp_path / "r.jsonl", max_bytes=2**20)
    recorder.record("filter", 1.0, 200, 0.001, b"{}", b"{}")
    recorder.close()
    assert recorder.full and recorder.records == 0
    assert "request recording off" in caplog.text and "600" in caplog.text

"""RequestRecorder: an optional JSONL log of every extender request and reply.

Owns: appending one line per request (verb, arrival time, status, latency, request body, reply body)
to a file, up to a size cap, for replay load tests and post-mortems. Bodies are embedded as parsed
JSON so a line can be replayed as is. Lines go through ``linefile.AppendOnlyLines``, so a crash
(kill -9) never leaves half a line for the next process to append to. The file holds whole request
bodies, i.e. whole pods (environment variables included) and node names: it is readable by its owner
only (mode 0600; an existing file is narrowed to that, and recording stays off, with an error logged,
when it cannot be). Must not: slow requests down when disabled, or grow without bound (recording
stops at the cap, once, with a log line).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import orjson

from extender.files.linefile import AppendOnlyLines

log = logging.getLogger(__name__)

MODE = 0o600
"""Permission bits of the recording: it holds whole pod bodies."""


class RequestRecorder:
    def __init__(self, path: str | Path, max_bytes: int) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._lines: AppendOnlyLines | None = None
        self.records = 0
        try:
            self._lines = AppendOnlyLines(self.path, MODE)
        except OSError as exc:
            log.error("request recording off: cannot open %s with mode %o: %s", self.path, MODE, exc)
        self.full = self._lines is None or self._lines.size >= max_bytes

    def record(self, verb: str, arrival: float, status: int, latency: float, request: bytes, reply: bytes) -> None:
        if self.full:
            return
        try:
            request_json = orjson.Fragment(request) if _is_json(request) else request.decode("utf-8", "replace")
        except Exception:
            request_json = None
        line = orjson.dumps({"verb": verb, "arrival": round(arrival, 6), "status": status,
                             "latency_seconds": round(latency, 6), "request": request_json,
                             "reply": orjson.Fragment(reply)}) + b"\n"
        with self._lock:
            if self._lines is None:
                return
            if self._lines.size + len(line) > self.max_bytes:
                self.full = True
                log.warning("request recording stopped: %s reached %d bytes", self.path, self.max_bytes)
                return
            try:
                self._lines.append(line)
            except OSError as exc:
                self.full = True
                log.warning("request recording stopped: %s: %s", self.path, exc)
                return
            self.records += 1

    def close(self) -> None:
        with self._lock:
            if self._lines is not None:
                self._lines.close()


def _is_json(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True

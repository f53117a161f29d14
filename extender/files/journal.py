"""ReleaseJournal: a write-ahead record of gang releases, so a crash mid-release is finished on restart.

Kubernetes binds one pod per API call. When a gang reaches quorum the extender binds its held members
one Binding each; a crash between the first and the last Binding would leave the gang partly bound
until kube-scheduler retries the rest (seconds to minutes of back-off). With a journal, the release
decision — every held member and the node kube-scheduler chose for it — is appended to a file before
the first Binding and marked done after the last; on restart the extender reads the releases that
never finished and binds their remaining members before it answers any request.

Owns: the journal file: one JSON line per release (``{"release": id, "gang": {kind, namespace, name,
podGroup, replica}, "pods": [[namespace, name, uid, node], ...]}``) and per finished release (``{"done":
id}``); emptying it when no release is open and it has grown past a size; reading back the unfinished
releases (a torn last line is ignored). Must not: decide anything about gangs or bind pods (the engine
does, from what this returns), or raise into the release path (a journal that cannot be written is
logged and the release goes on).

Durability: lines go through ``linefile.AppendOnlyLines`` (one ``write(2)`` each, no fsync): they
survive a crash of the process (kill -9, OOM), which is the failure this guards against, not the loss
of the machine, where the extender's pod starts elsewhere without the file.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from extender.files.linefile import AppendOnlyLines
from extender.model.gang import GangKey

log = logging.getLogger(__name__)

COMPACT_BYTES = 1 << 20  # empty the file once it is this large and no release is open


class JournalPod(NamedTuple):
    """One member of a release and the node kube-scheduler chose for it."""

    namespace: str
    name: str
    uid: str
    node: str


@dataclass(frozen=True, slots=True)
class Release:
    """A release that was started and not marked done: the quorum's members and their nodes."""

    id: int
    gang: GangKey | None  # None: written by a version that named gangs by a string
    pods: tuple[JournalPod, ...]


def read_gang(value: object) -> GangKey | None:
    """A release's gang as written down: a key (``GangKey.to_json``), or None for the string an older
    version wrote (the engine takes the gang from the release's members then); ValueError otherwise."""
    if value is None or isinstance(value, str):
        return None
    return GangKey.from_json(value)


class ReleaseJournal:
    closes_at_once = True  # ``closed`` appends a line to a local file: it does not wait

    def __init__(self, path: str | Path, compact_bytes: int = COMPACT_BYTES) -> None:
        self.path = Path(path)
        self.compact_bytes = compact_bytes
        self._lock = threading.Lock()
        self.unfinished, last_id = _read(self.path)
        self._next_id = last_id + 1
        self._open: set[int] = {release.id for release in self.unfinished}
        self._lines = AppendOnlyLines(self.path, 0o600)

    def opened(self, gang: GangKey, pods: Sequence[tuple[str, str, str, str]]) -> int:
        """Record a release about to start; returns its id for ``closed`` (0: not recorded)."""
        with self._lock:
            release_id = self._next_id
            self._next_id += 1
            line = {"release": release_id, "gang": gang.to_json(),
                    "pods": [list(pod) for pod in pods]}
            if not self._append(line):
                return 0
            self._open.add(release_id)
            return release_id

    def closed(self, release_id: int) -> None:
        """Record that every Binding of the release was answered (bound or refused)."""
        if not release_id:
            return
        with self._lock:
            self._open.discard(release_id)
            self._append({"done": release_id})
            if not self._open and self._lines.size >= self.compact_bytes:
                try:
                    self._lines.empty()
                except OSError as exc:
                    log.warning("release journal %s: cannot empty it: %s", self.path, exc)

    def close(self) -> None:
        with self._lock:
            self._lines.close()

    def _append(self, record: dict[str, Any]) -> bool:
        data = orjson.dumps(record) + b"\n"
        try:
            written = self._lines.append(data)
        except OSError as exc:
            log.warning("release journal %s: write failed (%s); this release is not recoverable after a crash",
                        self.path, exc)
            return False
        return written == len(data)


def _read(path: Path) -> tuple[list[Release], int]:
    """The unfinished releases in ``path`` (oldest first) and the largest id seen (0: none)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    started: dict[int, Release] = {}
    last_id = 0
    for raw in data.splitlines():
        try:
            record = orjson.loads(raw)
            if "done" in record:
                started.pop(int(record["done"]), None)
                continue
            release = Release(int(record["release"]), read_gang(record["gang"]),
                              tuple(JournalPod(*(str(field) for field in pod)) for pod in record["pods"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("release journal %s: skipping an unreadable line (%d bytes)", path, len(raw))
            continue
        started[release.id] = release
        last_id = max(last_id, release.id)
    return list(started.values()), last_id

"""ReleaseIntents: the release journal kept on the leader's Lease, fenced by its resourceVersion.

A gang release (quorum reached: one Binding per held member) must be written down before its first
Binding and cleared after its last, somewhere that outlives the process *and* its node, and written so
that a replica that is no longer the leader cannot write one (and so must not bind). The place is an
annotation of the leader's own Lease (``KEY``; compact JSON ``{"next": N, "open": [{"id", "gang",
"pods": [[namespace, name, uid, node], ...]}]}``): every write of it is a PUT of the Lease carrying the
resourceVersion this replica last wrote (``LeaderElector.write``), so after a takeover it fails with
409, and each successful one renews the Lease too. The new leader finds the open releases in the
annotation of the Lease it took over (``unfinished``).

Owns: the open releases of the current leadership and their annotation (its size bounded: the API
server refuses an object whose annotations exceed 256 KiB in total). Same interface as
``journal.ReleaseJournal``. Must not: bind pods or decide anything about gangs (the engine does, from
what this returns), or write the Lease except through the elector (one writer, one lock).

``opened`` raises ``IntentNotRecordedError`` whenever the release is not known to be written: not the
leader, fenced (409), too large, or the write failed or timed out. The caller must then bind nothing
(answer the holds with a retry). A write that timed out may still have been applied: the next leader
may then find a release whose holds were answered with a retry and resume it (binding only members
still pending, same uid, at the nodes kube-scheduler chose); this leader's next write drops it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson

from extender.errors import IntentNotRecordedError, IntentsFullError, LeaseWriteError
from extender.files.journal import JournalPod, Release, read_gang
from extender.kube.leader import LeaderElector
from extender.model import messages
from extender.model.gang import GangKey

log = logging.getLogger(__name__)

KEY = "gang-extender.io/releases"
ANNOTATIONS_LIMIT = 256 * 1024  # the API server's limit on one object's annotations, keys and values summed
DEFAULT_MAX_BYTES = 128 * 1024  # the open releases' annotation, at most (~1,300 members of ~100 bytes)


def encode(releases: Sequence[Release], next_id: int) -> str:
    return orjson.dumps({"next": next_id, "open": [
        {"id": r.id, "gang": r.gang.to_json() if r.gang is not None else None, "pods": [list(pod) for pod in r.pods]}
        for r in releases]}).decode()


def decode(value: str | None) -> tuple[dict[int, Release], int]:
    """The open releases in an annotation value and the next id to use; what cannot be read is
    skipped with an error in the log (never an exception: a takeover must not fail on it)."""
    if not value:
        return {}, 1
    try:
        record = orjson.loads(value)
        entries: list[Any] = record["open"]
        next_id = int(record.get("next") or 1)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        log.error("release intents: the annotation %s cannot be read (%s; %d bytes); releases it held are "
                  "lost", KEY, exc, len(value))
        return {}, 1
    found: dict[int, Release] = {}
    for entry in entries:
        try:
            pods = tuple(JournalPod(*(str(field) for field in pod)) for pod in entry["pods"])
            release = Release(int(entry["id"]), read_gang(entry["gang"]), pods)
        except (KeyError, TypeError, ValueError) as exc:
            log.error("release intents: skipping an unreadable release (%s): %.200r", exc, entry)
            continue
        found[release.id] = release
    return found, max([next_id, *(rid + 1 for rid in found)])


class ReleaseIntents:
    """The engine's ``ReleaseLog`` on the leader's Lease (see the module docstring)."""

    closes_at_once = False  # ``closed`` writes the Lease: an API call of up to ``write_timeout``

    def __init__(self, elector: LeaderElector, *, key: str = KEY, max_bytes: int = DEFAULT_MAX_BYTES,
                 write_timeout: float = 5.0) -> None:
        self.elector = elector
        self.key = key
        self.max_bytes = max_bytes
        self.write_timeout = write_timeout
        self._open: dict[int, Release] = {}
        self._inherited: tuple[Release, ...] = ()  # open in the Lease when this leadership began
        self._next_id = 1
        elector.attach(key, self._adopt, self._provide)

    @property
    def unfinished(self) -> list[Release]:
        """Releases a previous leader (or this replica's previous leadership) left open and that are
        still open: finish each, then ``closed(release.id)``."""
        with self.elector.lock:
            return [release for release in self._inherited if release.id in self._open]

    def open_count(self) -> int:
        return len(self._open)

    def opened(self, gang: GangKey, pods: Sequence[tuple[str, str, str, str]]) -> int:
        """Write a release down before its first Binding; returns its id for ``closed``. Raises
        ``IntentNotRecordedError`` (``IntentsFullError`` when too large) if it is not known to be written."""
        members = tuple(JournalPod(*(str(field) for field in pod)) for pod in pods)
        if not self.elector.is_leader():  # before the lock: a standby's elector holds it while it reads the Lease
            raise IntentNotRecordedError(messages.intent_not_leader(gang))
        with self.elector.lock:
            if not self.elector.is_leader():
                raise IntentNotRecordedError(messages.intent_not_leader(gang))
            release = Release(self._next_id, gang, members)
            candidate = {**self._open, release.id: release}
            payload = encode(list(candidate.values()), release.id + 1)
            self._check_size(gang, payload)
            try:
                self.elector.write({self.key: payload}, self.write_timeout)
            except LeaseWriteError as exc:
                raise IntentNotRecordedError(messages.intent_not_written(gang, exc)) from exc
            self._open, self._next_id = candidate, release.id + 1
            return release.id

    def closed(self, release_id: int) -> None:
        """The release's Bindings were all answered: drop it. Never raises; if the write fails, the
        leader's next renewal writes the smaller set (and a next leader would find the release's
        members bound already)."""
        with self.elector.lock:
            if self._open.pop(release_id, None) is None:
                return
            if not self.elector.is_leader():
                return
            try:
                self.elector.write(None, self.write_timeout)
            except LeaseWriteError as exc:
                log.warning("release %d: could not clear its intent now (%s)", release_id, exc)

    def close(self) -> None:
        """Nothing to close (the elector owns the Lease); for symmetry with ``ReleaseJournal``."""

    # -------------------------------------------------------------------- the elector's hooks
    def _check_size(self, gang: GangKey, payload: str) -> None:
        size = len(payload.encode())
        if size > self.max_bytes:
            raise IntentsFullError(messages.intents_too_large(gang, size, self.max_bytes))
        others = sum(len(k.encode()) + len(v.encode())
                     for k, v in self.elector.annotations().items() if k != self.key)
        total = others + len(self.key) + size
        if total > ANNOTATIONS_LIMIT:
            raise IntentsFullError(messages.lease_annotations_too_large(gang, total, ANNOTATIONS_LIMIT))

    def _adopt(self, value: str | None) -> None:
        """Leadership gained (elector lock held): the open releases are the ones the Lease carries."""
        found, next_id = decode(value)
        self._open = found
        self._inherited = tuple(found.values())
        self._next_id = max(next_id, self._next_id)  # ids never repeat within this process either
        if found:
            log.warning("release intents: %d release(s) left open by the previous leader: %s", len(found),
                        ", ".join(f"{r.id} (gang {r.gang}, {len(r.pods)} pods)" for r in found.values()))

    def _provide(self) -> str:
        return encode(list(self._open.values()), self._next_id)

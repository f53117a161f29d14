"""StatusWriter: the status of group objects, written off the hot path, latest value wins, rate-limited.

Owns: a bounded map of the newest ``GangStatus`` per group object not yet written, drained by one
background thread that hands each to a ``write`` callable (the runtime renders and applies it); at
most one write per object per ``min_interval`` seconds and ``per_second`` overall; equal values are
written once; groups whose status another writer owns (``write`` answers ``CONFLICT``) are left alone
for the life of the process. Must not: block the caller (a full map drops and counts), render status
bodies (``groups.status_apply`` does) or import the client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from extender.model.gang import GangStatus, GroupRef

log = logging.getLogger(__name__)

SENT, SKIPPED, CONFLICT = "sent", "skipped", "conflict"
"""What ``write`` answers: written; nothing to write (the object already says it, or is gone); another
field manager owns that status (e.g. the in-tree scheduler): never write this group again."""

Write = Callable[[GroupRef, GangStatus], str]

_MAX_REMEMBERED = 50_000


class StatusWriter:
    def __init__(self, write: Write, *, min_interval: float = 5.0, per_second: float = 10.0,
                 capacity: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._write = write
        self._min_interval = min_interval
        self._interval = 1.0 / per_second
        self._capacity = capacity
        self._clock = clock
        self._cond = threading.Condition()
        self._pending: dict[GroupRef, GangStatus] = {}
        self._last: dict[GroupRef, GangStatus] = {}      # last value handed to ``write`` (any outcome)
        self._not_before: dict[GroupRef, float] = {}
        self._disowned: set[GroupRef] = set()
        self._closed = False
        self.counts = {SENT: 0, SKIPPED: 0, CONFLICT: 0, "failed": 0, "dropped": 0}
        self._thread = threading.Thread(target=self._drain, name="group-status", daemon=True)
        self._thread.start()

    def publish(self, group: GroupRef, status: GangStatus) -> None:
        """Queue ``status`` for ``group`` (replacing a queued older one); never blocks."""
        with self._cond:
            if group in self._disowned or self._pending.get(group) == status:
                return
            if group not in self._pending:
                if self._last.get(group) == status:
                    return
                if len(self._pending) >= self._capacity:
                    self.counts["dropped"] += 1
                    return
            self._pending[group] = status
            self._cond.notify()

    def disowned(self) -> set[GroupRef]:
        with self._cond:
            return set(self._disowned)

    def close(self, timeout: float = 2.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    def _next(self) -> tuple[GroupRef, GangStatus] | None:
        """The pending group whose turn it is, waiting for one (None once closed)."""
        with self._cond:
            while not self._closed:
                now = self._clock()
                due = min(((self._not_before.get(g, 0.0), g) for g in self._pending), default=None)
                if due is not None and due[0] <= now:
                    group = due[1]
                    return group, self._pending.pop(group)
                self._cond.wait(None if due is None else min(due[0] - now, 1.0))
            return None

    def _drain(self) -> None:
        while (item := self._next()) is not None:
            group, status = item
            try:
                outcome = self._write(group, status)
            except Exception as exc:  # best effort, like Events: count, log, the next change retries
                outcome = "failed"
                log.warning("status of %s %s not written: %s", group.kind.value, group, exc)
            with self._cond:
                self.counts[outcome] = self.counts.get(outcome, 0) + 1
                if outcome == CONFLICT:
                    self._disowned.add(group)
                    log.info("status of %s %s is written by another manager: gang-extender leaves it alone",
                             group.kind.value, group)
                elif outcome != "failed":
                    self._last[group] = status
                self._not_before[group] = self._clock() + self._min_interval
                if len(self._not_before) > _MAX_REMEMBERED:
                    cutoff = self._clock()
                    self._not_before = {g: t for g, t in self._not_before.items() if t > cutoff}
                    self._last = {g: s for g, s in self._last.items() if g in self._not_before}
            time.sleep(self._interval)

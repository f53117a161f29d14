"""ExplainPublisher: what the leader knows about each gang, published as ``GangState`` Events, on change only.

Owns: the rounds of publishing (every ``interval`` seconds: take the gangs' current published forms
from ``collect``, write the ones whose steady part changed since this replica last wrote them, or, for
a gang not yet complete, whose last write is ``refresh`` seconds old, so the Event outlives the API
server's Event TTL), the write budget (at most ``per_round`` writes a round, ``per_second`` overall;
the rest wait for the next round), and the Event itself: reason ``GangState``, a one-line message,
the whole published form as JSON in the annotation ``gang-extender.io/explain`` (``kubectl gang``
reads it). Every write creates a new Event (the only Event verb gang-extender holds), so a gang costs
at most one Event create per ``interval`` while it changes and one per ``refresh`` while it waits
unchanged. Must not: compute explanations (``collect`` does), block the verbs, or import the client.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

REASON = "GangState"
ANNOTATION = "gang-extender.io/explain"
"""The Event annotation holding the published form (JSON), read by ``kubectl gang``."""

Write = Callable[[dict[str, str], str, str, str, dict[str, str]], None]
"""(object reference, type, reason, message, annotations): creates one Event."""


@dataclass(frozen=True, slots=True)
class Published:
    """One gang's published form: its key, the object its Events go on, the form, what of it counts as
    a change, its one-line summary and whether it is complete (no refresh needed)."""

    key: str
    target: dict[str, str]
    value: Mapping[str, Any]
    steady: Mapping[str, Any]
    message: str
    complete: bool = False


class ExplainPublisher:
    def __init__(self, collect: Callable[[], Iterable[Published]], write: Write, *, interval: float = 15.0,
                 refresh: float = 1800.0, per_round: int = 100, per_second: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self._collect, self._write = collect, write
        self.interval, self._refresh, self._per_round = interval, refresh, per_round
        self._pause = 1.0 / per_second
        self._clock, self._sleep = clock, sleep
        self._last: dict[str, tuple[Mapping[str, Any], float]] = {}  # key -> (steady part, when written)
        self.counts = {"sent": 0, "failed": 0, "unchanged": 0, "deferred": 0}

    def due(self, item: Published, now: float) -> bool:
        last = self._last.get(item.key)
        if last is None or last[0] != item.steady:
            return True
        return not item.complete and now - last[1] >= self._refresh

    def round(self) -> int:
        """One round: write what changed (``per_round`` at most, the longest unwritten first, so a
        steady stream of changes cannot starve a gang); forget gangs no longer collected. Returns the
        number of Events written."""
        items = list(self._collect())
        seen = {item.key for item in items}
        self._last = {k: v for k, v in self._last.items() if k in seen}
        now = self._clock()
        due = [item for item in items if self.due(item, now)]
        self.counts["unchanged"] += len(items) - len(due)
        due.sort(key=lambda item: self._last[item.key][1] if item.key in self._last else float("-inf"))
        self.counts["deferred"] += max(len(due) - self._per_round, 0)
        written = 0
        for item in due[:self._per_round]:
            body = json.dumps(item.value, separators=(",", ":"), sort_keys=True)
            try:
                self._write(item.target, "Normal", REASON, item.message, {ANNOTATION: body})
            except Exception as exc:  # best effort, like every Event: the next round tries again
                self.counts["failed"] += 1
                log.warning("GangState of %s not written: %s", item.key, exc)
                continue
            self._last[item.key] = (item.steady, self._clock())
            self.counts["sent"] += 1
            written += 1
            self._sleep(self._pause)
        return written

    def forget(self) -> None:
        """Write every gang again at the next round (this replica has just become the leader)."""
        self._last = {}

    def run(self, stop: threading.Event, leading: Callable[[], bool]) -> None:
        """Rounds every ``interval`` seconds while ``leading()``, until ``stop`` is set."""
        was_leading = False
        while not stop.wait(self.interval):
            if not leading():
                was_leading = False
                continue
            if not was_leading:
                self.forget()
                was_leading = True
            try:
                self.round()
            except Exception:  # a bug here must not end the thread: the next round tries again
                log.exception("publishing gang explanations failed")

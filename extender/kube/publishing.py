"""ExplainPublisher: what the leader knows about each gang, published as ``GangState`` Events, on change only.

Owns: the rounds of publishing (every ``interval`` seconds: the known gangs from ``keys``, each
one's published form from ``explain``, written when its steady part changed since this replica last
wrote it, or, for a gang not yet complete, when its last write is ``refresh`` seconds old, so the Event
outlives the API server's Event TTL), the budgets of a round (``budget`` seconds of explaining, at most
``per_round`` writes, ``per_second`` overall; the next round goes on where it stopped), and the Event
itself: reason ``GangState``, a one-line message, the whole published form as JSON in the annotation
``gang-extender.io/explain`` (``kubectl gang`` reads it). Every write creates a new Event (the only
Event verb gang-extender holds), so a gang costs at most one Event create per ``interval`` while it
changes and one per ``refresh`` while it waits unchanged. Must not: compute explanations (``explain``
does), block the verbs, or import the client.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

REASON = "GangState"
ANNOTATION = "gang-extender.io/explain"
"""The Event annotation holding the published form (JSON), read by ``kubectl gang``."""
LEDGER_ANNOTATION = "gang-extender.io/ledger-state"
"""The annotation of the one ``GangState`` Event that holds the leader's ``LedgerState`` (on its namespace
object, in its namespace), read by ``kubectl gang fit``."""

Key = TypeVar("Key", bound=Hashable)

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
    annotation: str = ANNOTATION


class ExplainPublisher(Generic[Key]):
    def __init__(self, keys: Callable[[], Sequence[Key]], explain: Callable[[Key], Published | None], write: Write,
                 *, interval: float = 15.0, refresh: float = 1800.0, budget: float = 0.25, per_round: int = 100,
                 per_second: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 timer: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep) -> None:
        self._keys, self._explain, self._write = keys, explain, write
        self.interval, self._refresh, self._budget, self._per_round = interval, refresh, budget, per_round
        self._pause = 1.0 / per_second
        self._clock, self._timer, self._sleep = clock, timer, sleep
        self._last: dict[Key, tuple[Mapping[str, Any], float]] = {}  # key -> (steady part, when written)
        self._cursor = 0  # where in the keys the next round starts
        self.counts = {"sent": 0, "failed": 0, "unchanged": 0, "explained": 0}

    def due(self, key: Key, item: Published, now: float) -> bool:
        last = self._last.get(key)
        if last is None or last[0] != item.steady:
            return True
        return not item.complete and now - last[1] >= self._refresh

    def round(self) -> int:
        """One round: from where the last one stopped, explain gangs until ``budget`` seconds of
        explaining (each one holds the mirror's lock only to copy the gang's facts, then takes CPU from
        the verbs while it is computed: the budget bounds that) or ``per_round`` writes are spent, writing
        those that changed; gangs no longer known are forgotten. Returns the number of Events written."""
        keys = list(self._keys())
        known = set(keys)
        self._last = {k: v for k, v in self._last.items() if k in known}
        if not keys:
            return 0
        start = self._cursor % len(keys)
        spent, looked, written = 0.0, 0, 0
        for key in keys[start:] + keys[:start]:
            if spent >= self._budget or written >= self._per_round:
                break
            began = self._timer()
            item = self._explain(key)
            spent += self._timer() - began
            looked += 1
            self.counts["explained"] += 1
            if item is None:
                continue
            if not self.due(key, item, self._clock()):
                self.counts["unchanged"] += 1
                continue
            body = json.dumps(item.value, separators=(",", ":"), sort_keys=True)
            try:
                self._write(item.target, "Normal", REASON, item.message, {item.annotation: body})
            except Exception as exc:  # best effort, like every Event: the next round tries again
                self.counts["failed"] += 1
                log.warning("GangState of %s not written: %s; the rest wait for the next round", item.key, exc)
                looked -= 1  # not written: the next round starts with it
                break  # the API server refuses or is gone: one failure a round, not one per gang
            self._last[key] = (item.steady, self._clock())
            self.counts["sent"] += 1
            written += 1
            self._sleep(self._pause)
        self._cursor = start + looked
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

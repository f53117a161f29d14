"""FilterCache: filter verdicts shared by pods with the same scheduling signature.

Owns: a cachetools ``TTLCache`` (LRU order, TTL backstop) behind one lock, mapping a signature to
``NodeVerdicts`` (per-node verdicts stamped with the mirror generation they reflect), sized in node
verdicts (an entry weighs one per node it knows) so memory stays bounded however many nodes and
signatures there are; and the hit/miss/refresh/flush counters that ``/metrics`` exposes. Every flush has a named reason.
Must not: compute verdicts or read the mirror; the engine refreshes entries under the mirror lock.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cachetools import TTLCache

FIT = ""
"""Verdict: the pod fits the node."""


@dataclass(slots=True)
class NodeVerdicts:
    """Verdicts for one signature, as for a pod of no gang (a gang's own reservation is evaluated
    outside the cache). ``fit`` indexes ``verdicts`` for the fast path."""

    generation: int
    verdicts: dict[str, str] = field(default_factory=dict)  # node -> FIT or a reason
    fit: set[str] = field(default_factory=set)
    weighed: int = -1  # len(verdicts) when last stored; a stored entry that has not grown needs no put
    all_fit_names: list[str] | None = None  # a request list whose every node fits (see engine)
    all_fit_text: bytes | None = None  # that list's text as sent, when the request had one (see engine)
    all_fit_misses: int = 0  # consecutive requests that did not equal all_fit_names

    def record(self, node: str, verdict: str) -> None:
        self.verdicts[node] = verdict
        if verdict == FIT:
            self.fit.add(node)
        else:
            self.fit.discard(node)
            self.all_fit_names = self.all_fit_text = None

    def forget(self, node: str) -> None:
        """Drop a node's verdict (the node is gone: no state is kept for names the mirror does not know)."""
        if self.verdicts.pop(node, None) is not None:
            self.fit.discard(node)
            self.all_fit_names = self.all_fit_text = None


def _weight(entry: NodeVerdicts) -> int:
    return len(entry.verdicts) + 1


class _Entries(TTLCache[bytes, NodeVerdicts]):
    """TTLCache that reports why entries leave it."""

    def __init__(self, maxsize: int, ttl: float, timer: Callable[[], float],
                 on_drop: Callable[[str, int], None]) -> None:
        super().__init__(maxsize, ttl, timer, getsizeof=_weight)
        self._on_drop = on_drop

    def expire(self, time: Any = None) -> Any:
        expired = super().expire(time)
        if expired:
            self._on_drop("expired", len(expired))
        return expired

    def popitem(self) -> tuple[bytes, NodeVerdicts]:
        item = super().popitem()
        self._on_drop("evicted", 1)
        return item


class FilterCache:
    """Signature -> NodeVerdicts, thread-safe."""

    REASONS = ("expired", "evicted", "change_log_overflow", "too_large")

    def __init__(self, maxsize: int, ttl_seconds: float, timer: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self.enabled = maxsize > 0
        self._entries = _Entries(max(maxsize, 1), ttl_seconds, timer, self._dropped)
        self.hits = 0
        self.misses = 0
        self.unsignable = 0
        self.refreshed_nodes = 0
        self.flushes: Counter[str] = Counter()

    def _dropped(self, reason: str, count: int) -> None:
        self.flushes[reason] += count

    def get(self, signature: bytes) -> NodeVerdicts | None:
        if not self.enabled:
            return None
        with self._lock:
            return self._entries.get(signature)

    def put(self, signature: bytes, entry: NodeVerdicts) -> None:
        """Store (or re-store, to re-weigh a grown entry); an entry larger than the cache is dropped."""
        if not self.enabled or entry.weighed == len(entry.verdicts):
            return
        with self._lock:
            entry.weighed = len(entry.verdicts)
            try:
                self._entries[signature] = entry
            except ValueError:  # heavier than the whole cache
                self._entries.pop(signature, None)
                self.flushes["too_large"] += 1

    def discard(self, signature: bytes, reason: str) -> None:
        with self._lock:
            if self._entries.pop(signature, None) is not None:
                self.flushes[reason] += 1

    def count(self, *, hit: bool, refreshed: int = 0) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1
            self.refreshed_nodes += refreshed

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"entries": len(self._entries), "hits": self.hits, "misses": self.misses,
                    "unsignable": self.unsignable, "refreshed_nodes": self.refreshed_nodes,
                    "flushes": dict(self.flushes)}

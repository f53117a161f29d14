"""Writes to the API server that happen off the hot path: Events, wake-up nudges, quorum gates removed.

Owns: ``BackgroundWriter`` — a bounded queue drained by daemon threads at a fixed maximum rate,
counting what it sent, dropped (queue full) and failed — and its three uses: ``EventRecorder``
(Kubernetes Events on pods or on any other object, e.g. a gang's Workload or PodGroup; repeats of the
same (object, reason, message) suppressed for ``repeat_seconds``), ``PodWaker`` (annotation bumps
that make kube-scheduler retry pending pods) and ``PodUngater`` (the quorum gate removed).
Must not: block the caller, or import the client (writers are handed callables).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from extender.model.cluster import PodRecord

log = logging.getLogger(__name__)

Item = TypeVar("Item")
Sink = Callable[[dict[str, str], str, str, str], None]  # (object reference, type, reason, message)
"""An object reference has ``apiVersion``, ``kind``, ``namespace``, ``name`` and ``uid`` (may be empty)."""

COARSE_REASONS = frozenset({"GangWaiting"})
"""Reasons whose repeats are recognised without the numbers in their message (counts change often)."""
_NUMBERS = re.compile(r"\d+")


class BackgroundWriter(Generic[Item]):
    """``workers`` daemon threads (default one) writing queued items, each at most ``per_second`` a second;
    callers never block."""

    def __init__(self, name: str, *, per_second: float, capacity: int, workers: int = 1) -> None:
        self.name = name
        self._queue: queue.Queue[Item | None] = queue.Queue(maxsize=capacity)
        self._interval = 1.0 / per_second
        self._count_lock = threading.Lock()
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self.skipped = 0  # taken from the queue, nothing written (``_write`` returned False)
        self._threads = [threading.Thread(target=self._drain, name=name, daemon=True) for _ in range(workers)]
        for thread in self._threads:
            thread.start()

    def _offer(self, item: Item) -> bool:
        """Queue ``item``; False (and counted as dropped) when the queue is full."""
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def _write(self, item: Item) -> bool | None:
        """Write ``item``; False when nothing was written (not counted as sent)."""
        raise NotImplementedError

    def _failed(self, item: Item, exc: Exception) -> None:
        log.warning("%s: %r not written: %s", self.name, item, exc)

    @property
    def alive(self) -> bool:
        """Whether a writer thread still runs (until ``close`` has stopped them all)."""
        return any(thread.is_alive() for thread in self._threads)

    def close(self, timeout: float = 2.0) -> None:
        for _ in self._threads:
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)
        for thread in self._threads:
            thread.join(timeout)

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                written = self._write(item) is not False
                with self._count_lock:
                    self.sent += written
                    self.skipped += not written
            except Exception as exc:  # best effort: count, log, carry on
                with self._count_lock:
                    self.failed += 1
                self._failed(item, exc)
            time.sleep(self._interval)


@dataclass(frozen=True, slots=True)
class _Event:
    target: dict[str, str]
    event_type: str
    reason: str
    message: str


def pod_reference(pod: PodRecord) -> dict[str, str]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}


class EventRecorder(BackgroundWriter[_Event]):
    """Kubernetes Events, deduplicated."""

    def __init__(self, sink: Sink, *, repeat_seconds: float = 60.0, per_second: float = 20.0,
                 capacity: int = 10000, clock: Callable[[], float] = time.monotonic) -> None:
        self._sink = sink
        self._recent: dict[tuple[str, str, str], float] = {}
        self._repeat = repeat_seconds
        self._clock = clock
        self._lock = threading.Lock()
        super().__init__("events", per_second=per_second, capacity=capacity)

    def record(self, pods: Iterable[PodRecord], event_type: str, reason: str, message: str) -> None:
        """Queue one event per pod; never blocks."""
        self.record_on([pod_reference(pod) for pod in pods], event_type, reason, message)

    def record_on(self, targets: Iterable[dict[str, str]], event_type: str, reason: str, message: str) -> None:
        """Queue one event per object reference (see ``Sink``); never blocks."""
        now = self._clock()
        with self._lock:
            text = _NUMBERS.sub("#", message) if reason in COARSE_REASONS else message
            for target in targets:
                key = (target.get("uid") or f"{target['kind']}/{target['namespace']}/{target['name']}", reason, text)
                if now - self._recent.get(key, -1e18) < self._repeat:
                    continue
                self._recent[key] = now
                self._offer(_Event(target, event_type, reason, message))
            if len(self._recent) > 50000:
                cutoff = now - self._repeat
                self._recent = {k: t for k, t in self._recent.items() if t >= cutoff}

    def _write(self, item: _Event) -> None:
        self._sink(item.target, item.event_type, item.reason, item.message)

    def _failed(self, item: _Event, exc: Exception) -> None:
        log.warning("event %s on %s %s/%s not written: %s", item.reason, item.target["kind"],
                    item.target["namespace"], item.target["name"], exc)


WAKE_ANNOTATION = "gang-extender.io/wake"
"""Annotation gang-extender bumps on a pending pod to make kube-scheduler retry it now."""


class PodWaker(BackgroundWriter[tuple[str, str]]):
    """Makes kube-scheduler retry pending pods by touching an annotation.

    Pods an extender rejects wait in the scheduler's unschedulable pool until a cluster event (or a
    5-minute flush). When capacity frees up for reasons the scheduler cannot see (a gang's back-off
    ended, a reservation was released) the extender updates the pods itself; an update of an
    unscheduled pod moves it back to the active or back-off queue.
    """

    def __init__(self, patch: Callable[[str, str, dict[str, str]], None], *, per_second: float = 50.0,
                 capacity: int = 10000, clock: Callable[[], float] = time.time) -> None:
        self._patch = patch
        self._pending: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._clock = clock
        super().__init__("waker", per_second=per_second, capacity=capacity)

    def wake(self, pods: Iterable[PodRecord]) -> None:
        with self._lock:
            for pod in pods:
                key = (pod.namespace, pod.name)
                if not pod.bound and key not in self._pending and self._offer(key):
                    self._pending.add(key)

    def _write(self, item: tuple[str, str]) -> None:
        with self._lock:
            self._pending.discard(item)
        self._patch(item[0], item[1], {WAKE_ANNOTATION: f"{self._clock():.3f}"})

    def _failed(self, item: tuple[str, str], exc: Exception) -> None:
        log.debug("wake of %s/%s failed: %s", item[0], item[1], exc)  # the pod may be gone


class PodUngater(BackgroundWriter[PodRecord]):
    """Removes the quorum gate (``model.cluster.QUORUM_GATE``) from pods whose gang has its quorum, so that
    kube-scheduler tries them: a few writers at once (a gang's members go together), each pod queued once
    at a time. ``remove`` returns whether it removed the gate (False: not leading, nothing written); each
    removal is reported to ``removed`` (the mirror then stops counting the pod as gated before the watch
    shows it). A removal that failed (the pod changed, the API server refused) is tried again when the
    ledger's walk finds the pod still gated."""

    def __init__(self, remove: Callable[[PodRecord], bool], removed: Callable[[str], None] = lambda uid: None, *,
                 workers: int = 4, per_second: float = 1000.0, capacity: int = 10000) -> None:
        self._remove, self._removed = remove, removed
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        super().__init__("ungater", per_second=per_second, capacity=capacity, workers=workers)

    def ungate(self, pods: Iterable[PodRecord]) -> None:
        with self._lock:
            for pod in pods:
                if pod.quorum_gated and pod.uid not in self._pending and self._offer(pod):
                    self._pending.add(pod.uid)

    def _write(self, item: PodRecord) -> bool:
        try:
            if not self._remove(item):
                return False  # not leading
            self._removed(item.uid)
            return True
        finally:
            with self._lock:
                self._pending.discard(item.uid)

    def _failed(self, item: PodRecord, exc: Exception) -> None:
        log.info("quorum gate of %s/%s not removed: %s", item.namespace, item.name, exc)  # gone or changed


def log_sink(target: dict[str, str], event_type: str, reason: str, message: str) -> None:
    """Snapshot mode: events go to the log."""
    log.info("event %s %s on %s %s/%s: %s", event_type, reason, target["kind"], target["namespace"], target["name"],
             message)

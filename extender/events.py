"""EventRecorder: Kubernetes Events written off the hot path, deduplicated and rate-limited.

Owns: a bounded queue drained by one background thread that hands events to a sink (the API, or the
log in snapshot mode); suppression of repeats of the same (pod, reason) within ``repeat_seconds``;
a global rate limit. Must not: block the caller (a full queue drops and counts) or import the client.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from extender.model import PodRecord

log = logging.getLogger(__name__)

Sink = Callable[[dict[str, str], str, str, str], None]  # (pod ref, type, reason, message)


@dataclass(frozen=True, slots=True)
class _Event:
    pod: dict[str, str]
    event_type: str
    reason: str
    message: str


class EventRecorder:
    def __init__(self, sink: Sink, *, repeat_seconds: float = 60.0, per_second: float = 20.0,
                 capacity: int = 10000, clock: Callable[[], float] = time.monotonic) -> None:
        self._sink = sink
        self._queue: queue.Queue[_Event | None] = queue.Queue(maxsize=capacity)
        self._recent: dict[tuple[str, str, str], float] = {}
        self._repeat = repeat_seconds
        self._interval = 1.0 / per_second
        self._clock = clock
        self._lock = threading.Lock()
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._drain, name="events", daemon=True)
        self._thread.start()

    def record(self, pods: Iterable[PodRecord], event_type: str, reason: str, message: str) -> None:
        """Queue one event per pod; never blocks."""
        now = self._clock()
        with self._lock:
            for pod in pods:
                key = (pod.uid, reason, message)
                if now - self._recent.get(key, -1e18) < self._repeat:
                    continue
                self._recent[key] = now
                event = _Event({"namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
                               event_type, reason, message)
                try:
                    self._queue.put_nowait(event)
                except queue.Full:
                    self.dropped += 1
            if len(self._recent) > 50000:
                cutoff = now - self._repeat
                self._recent = {k: t for k, t in self._recent.items() if t >= cutoff}

    def close(self, timeout: float = 2.0) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(timeout)

    def _drain(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            try:
                self._sink(event.pod, event.event_type, event.reason, event.message)
                self.sent += 1
            except Exception as exc:  # an event is best effort: count, log, carry on
                self.failed += 1
                log.warning("event %s on %s/%s not written: %s", event.reason, event.pod["namespace"],
                            event.pod["name"], exc)
            time.sleep(self._interval)


WAKE_ANNOTATION = "gang-extender.io/wake"
"""Annotation gang-extender bumps on a pending pod to make kube-scheduler retry it now."""


class PodWaker:
    """Makes kube-scheduler retry pending pods by touching an annotation, off the hot path.

    Pods an extender rejects wait in the scheduler's unschedulable pool until a cluster event (or a
    5-minute flush). When capacity frees up for reasons the scheduler cannot see (a gang's back-off
    ended, a reservation was released) the extender updates the pods itself; an update of an
    unscheduled pod moves it back to the active or back-off queue.
    """

    def __init__(self, patch: Callable[[str, str, dict[str, str]], None], *, per_second: float = 50.0,
                 capacity: int = 10000, clock: Callable[[], float] = time.time) -> None:
        self._patch = patch
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue(maxsize=capacity)
        self._pending: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._interval = 1.0 / per_second
        self._clock = clock
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._drain, name="waker", daemon=True)
        self._thread.start()

    def wake(self, pods: Iterable[PodRecord]) -> None:
        with self._lock:
            for pod in pods:
                key = (pod.namespace, pod.name)
                if pod.bound or key in self._pending:
                    continue
                try:
                    self._queue.put_nowait(key)
                    self._pending.add(key)
                except queue.Full:
                    self.dropped += 1

    def close(self, timeout: float = 2.0) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(timeout)

    def _drain(self) -> None:
        while True:
            key = self._queue.get()
            if key is None:
                return
            with self._lock:
                self._pending.discard(key)
            try:
                self._patch(key[0], key[1], {WAKE_ANNOTATION: f"{self._clock():.3f}"})
                self.sent += 1
            except Exception as exc:  # best effort: the pod may be gone; count, log, carry on
                self.failed += 1
                log.debug("wake of %s/%s failed: %s", key[0], key[1], exc)
            time.sleep(self._interval)


def log_sink(pod: dict[str, str], event_type: str, reason: str, message: str) -> None:
    """Snapshot mode: events go to the log."""
    log.info("event %s %s on pod %s/%s: %s", event_type, reason, pod["namespace"], pod["name"], message)

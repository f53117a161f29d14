"""EventRecorder (and PodWaker): off the hot path, deduplicated, bounded, failures counted not raised."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from extender.kube.events import WAKE_ANNOTATION, EventRecorder, PodWaker
from extender.model.cluster import PodRecord
from tests.builders import FakeClock


def record(name: str, uid: str | None = None, node: str = "") -> PodRecord:
    return PodRecord(uid or f"uid-{name}", "default", name, node, {"cpu": 1000, "pods": 1}, None)


def wait_until(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


class Sink:
    """Collects events; can be made to block (``gate``) or to fail for chosen reasons."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Semaphore(0)
        self.fail_reasons: set[str] = set()

    def __call__(self, pod: dict[str, str], event_type: str, reason: str, message: str) -> None:
        self.entered.release()
        self.gate.wait(5)
        if reason in self.fail_reasons:
            raise RuntimeError("events is forbidden")
        self.events.append((pod["name"], event_type, reason, message))


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
def recorders(sink: Sink) -> Iterator[Callable[..., EventRecorder]]:
    made: list[EventRecorder] = []

    def make(**kwargs: Any) -> EventRecorder:
        recorder = EventRecorder(sink, **{"per_second": 10_000.0, **kwargs})
        made.append(recorder)
        return recorder

    yield make
    sink.gate.set()
    for recorder in made:
        recorder.close()
        assert not recorder.alive


def test_events_reach_the_sink_with_the_pod_reference(sink: Sink, recorders: Any) -> None:
    recorder = recorders()
    recorder.record([record("a"), record("b")], "Warning", "GangTimeout", "gang default/g timed out")
    wait_until(lambda: recorder.sent == 2)
    assert sink.events == [("a", "Warning", "GangTimeout", "gang default/g timed out"),
                           ("b", "Warning", "GangTimeout", "gang default/g timed out")]
    assert recorder.dropped == 0 and recorder.failed == 0


def test_repeats_within_the_window_are_suppressed(sink: Sink, recorders: Any) -> None:
    clock = FakeClock()
    recorder = recorders(repeat_seconds=60.0, clock=clock)
    pod = record("a")
    recorder.record([pod], "Warning", "GangNeverFits", "can never fit")
    recorder.record([pod], "Warning", "GangNeverFits", "can never fit")          # same: suppressed
    clock.advance(59)
    recorder.record([pod], "Warning", "GangNeverFits", "can never fit")          # still within 60 s
    recorder.record([pod], "Warning", "GangNeverFits", "can never fit: 2 nodes")  # other message
    recorder.record([pod], "Normal", "GangAdmitted", "can never fit")            # other reason
    recorder.record([record("a", uid="other")], "Warning", "GangNeverFits", "can never fit")  # other pod
    clock.advance(1)
    recorder.record([pod], "Warning", "GangNeverFits", "can never fit")          # window over
    wait_until(lambda: recorder.sent == 5)
    time.sleep(0.02)
    assert recorder.sent == 5
    assert [e[2:] for e in sink.events] == [
        ("GangNeverFits", "can never fit"), ("GangNeverFits", "can never fit: 2 nodes"),
        ("GangAdmitted", "can never fit"), ("GangNeverFits", "can never fit"), ("GangNeverFits", "can never fit")]


def test_full_queue_drops_and_counts_without_blocking(sink: Sink, recorders: Any) -> None:
    recorder = recorders(capacity=2)
    sink.gate.clear()
    recorder.record([record("first")], "Normal", "GangBound", "bound")
    assert sink.entered.acquire(timeout=2)  # the drain thread holds "first" in the (blocked) sink
    started = time.monotonic()
    recorder.record([record(f"p{i}") for i in range(5)], "Normal", "GangBound", "bound")
    assert time.monotonic() - started < 0.5, "record() must never block"
    assert recorder.dropped == 3  # two fit in the queue
    sink.gate.set()
    wait_until(lambda: recorder.sent == 3)
    assert [e[0] for e in sink.events] == ["first", "p0", "p1"]


def test_sink_failures_are_counted_not_raised(sink: Sink, recorders: Any, caplog: pytest.LogCaptureFixture) -> None:
    recorder = recorders()
    sink.fail_reasons.add("GangTimeout")
    recorder.record([record("a")], "Warning", "GangTimeout", "timed out")
    recorder.record([record("a")], "Normal", "GangBound", "bound")
    wait_until(lambda: recorder.failed == 1 and recorder.sent == 1)
    assert sink.events == [("a", "Normal", "GangBound", "bound")]
    assert "event GangTimeout on Pod default/a not written: events is forbidden" in caplog.text


def test_events_on_other_objects_are_deduplicated_per_object(sink: Sink, recorders: Any) -> None:
    recorder = recorders()
    workload = {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "namespace": "default",
                "name": "train", "uid": "w-1"}
    recorder.record_on([workload], "Normal", "GangWaiting", "waiting for gang default/train: 1/4 pods exist")
    recorder.record_on([workload], "Normal", "GangWaiting", "waiting for gang default/train: 2/4 pods exist")
    recorder.record_on([{**workload, "uid": "", "name": "other"}], "Normal", "GangWaiting", "waiting: 1/4")
    wait_until(lambda: recorder.sent == 2)
    time.sleep(0.02)
    assert [(e[0], e[3]) for e in sink.events] == [("train", "waiting for gang default/train: 1/4 pods exist"),
                                                    ("other", "waiting: 1/4")]


def test_rate_limit_spaces_events(sink: Sink, recorders: Any) -> None:
    recorder = recorders(per_second=50.0)
    started = time.monotonic()
    recorder.record([record(f"p{i}") for i in range(5)], "Normal", "GangBound", "bound")
    wait_until(lambda: recorder.sent == 5)
    assert time.monotonic() - started >= 4 * 0.02 * 0.9


def test_close_stops_the_drain_thread(sink: Sink) -> None:
    recorder = EventRecorder(sink, per_second=10_000.0)
    recorder.record([record("a")], "Normal", "GangBound", "bound")
    wait_until(lambda: recorder.sent == 1)
    recorder.close()
    assert not recorder.alive


# ---------------------------------------------------------------------------------------- PodWaker
class Patches:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str]]] = []
        self.fail: set[str] = set()

    def __call__(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        if name in self.fail:
            raise RuntimeError("pods not found")
        self.calls.append((namespace, name, annotations))


def test_waker_patches_pending_pods_once_and_skips_bound_ones() -> None:
    patches = Patches()
    patches.fail.add("gone")
    waker = PodWaker(patches, per_second=10_000.0, clock=lambda: 12.5)
    try:
        waker.wake([record("a"), record("a"), record("bound", node="n1"), record("gone")])
        wait_until(lambda: waker.sent + waker.failed == 2)
        assert patches.calls == [("default", "a", {WAKE_ANNOTATION: "12.500"})]
        assert waker.failed == 1
        waker.wake([record("a")])  # once delivered, the pod can be woken again
        wait_until(lambda: waker.sent == 2)
    finally:
        waker.close()
    assert not waker.alive

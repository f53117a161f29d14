"""Reflector: list then watch, relist on 410, back-off on failures, health flags, stop."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from extender.cluster.mirror import ClusterMirror
from extender.kube.watching import Reflector, watch_or_gone
from tests.builders import node

END = object()  # ends the current watch call (the server closed the stream)


class FakeListing:
    def __init__(self, items: list[dict[str, Any]], version: str) -> None:
        self._items = items
        self.resource_version = version

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._items)


class FakeApi:
    """list/watch callables fed by the test: queued list answers, a queue of watch events."""

    def __init__(self) -> None:
        self.list_answers: queue.Queue[tuple[list[dict[str, Any]], str] | BaseException] = queue.Queue()
        self.events: queue.Queue[Any] = queue.Queue()
        self.list_calls = 0
        self.watch_versions: list[str] = []
        self.list_gate = threading.Event()
        self.list_gate.set()

    def list(self) -> FakeListing:
        self.list_gate.wait(5)
        self.list_calls += 1
        answer = self.list_answers.get(timeout=5)
        if isinstance(answer, BaseException):
            raise answer
        return FakeListing(*answer)

    def watch(self, version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        self.watch_versions.append(version)
        while True:
            try:
                item = self.events.get(timeout=0.01)
            except queue.Empty:
                return  # a watch with nothing to say times out; the reflector calls again
            if item is END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


class Applied:
    def __init__(self) -> None:
        self.replaced: list[list[str]] = []
        self.events: list[tuple[str, str]] = []

    def replace(self, items: Any) -> None:
        self.replaced.append([obj["metadata"]["name"] for obj in items])

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((kind, obj["metadata"]["name"]))


class RecordingStop(threading.Event):
    """A stop event that records back-off waits and shortens them, so back-off is tested without sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            self.waits.append(timeout)
            timeout = min(timeout, 0.005)
        return super().wait(timeout)


def obj(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}}


def wait_until(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def stop() -> Iterator[RecordingStop]:
    event = RecordingStop()
    yield event
    event.set()


@pytest.fixture
def started(api: FakeApi, stop: RecordingStop) -> Iterator[Callable[..., tuple[Reflector, Applied]]]:
    reflectors: list[Reflector] = []

    def start(watch: Any = None, **kwargs: Any) -> tuple[Reflector, Applied]:
        applied = Applied()
        reflector = Reflector("things", api.list, watch or api.watch, applied.replace, applied.apply, stop,
                              **{"initial_backoff": 0.01, "max_backoff": 0.04, **kwargs})
        reflector.start()
        reflectors.append(reflector)
        return reflector, applied

    yield start
    stop.set()
    api.list_gate.set()
    for reflector in reflectors:
        reflector.join(2)
        assert not reflector._thread.is_alive()


def test_lists_then_applies_watch_events_in_order(api: FakeApi, started: Any) -> None:
    api.list_answers.put(([obj("a", "5"), obj("b", "6")], "10"))
    for item in [("ADDED", obj("c", "11")), ("MODIFIED", obj("a", "12")), ("BOOKMARK", obj("", "13")),
                 ("DELETED", obj("b", "14")), END]:
        api.events.put(item)
    reflector, applied = started()
    wait_until(lambda: reflector.events == 3 and "14" in api.watch_versions)
    assert reflector.synced.is_set() and reflector.healthy and reflector.last_error == ""
    assert applied.replaced == [["a", "b"]]
    assert applied.events == [("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]  # bookmarks are not applied
    assert api.watch_versions[0] == "10"  # the watch starts at the list's resourceVersion
    assert reflector.relists == 1 and reflector.errors == 0


def test_bookmark_moves_the_watch_version(api: FakeApi, started: Any) -> None:
    api.list_answers.put(([], "10"))
    api.events.put(("BOOKMARK", obj("", "99")))
    api.events.put(END)
    reflector, applied = started()
    wait_until(lambda: "99" in api.watch_versions)
    assert reflector.events == 0 and applied.events == []


def test_expired_resource_version_relists(api: FakeApi, started: Any) -> None:
    api.list_answers.put(([obj("a", "1")], "10"))
    api.list_answers.put(([obj("a", "1"), obj("b", "2")], "20"))
    api.events.put(("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"}))
    reflector, applied = started()
    wait_until(lambda: reflector.relists == 2 and "20" in api.watch_versions)
    assert applied.replaced == [["a"], ["a", "b"]]
    assert reflector.errors == 0 and reflector.healthy
    assert api.list_calls == 2


def test_http_410_on_the_watch_request_relists(api: FakeApi, started: Any) -> None:
    class GoneStatusError(Exception):
        status = 410

    api.list_answers.put(([], "10"))
    api.list_answers.put(([obj("x", "3")], "30"))
    api.events.put(GoneStatusError("Gone"))
    reflector, applied = started(watch=watch_or_gone(api.watch))
    wait_until(lambda: reflector.relists == 2)
    assert applied.replaced == [[], ["x"]]
    assert reflector.errors == 0


def test_watch_or_gone_passes_other_errors_through(api: FakeApi) -> None:
    api.events.put(RuntimeError("connection reset"))
    with pytest.raises(RuntimeError, match="connection reset"):
        list(watch_or_gone(api.watch)("1"))


def test_failed_list_backs_off_and_retries(api: FakeApi, stop: RecordingStop, started: Any) -> None:
    api.list_answers.put(RuntimeError("apiserver down"))
    api.list_answers.put(RuntimeError("apiserver still down"))
    api.list_answers.put(([obj("a", "1")], "10"))
    api.list_gate.clear()
    reflector, _ = started()
    assert not reflector.synced.is_set() and not reflector.healthy
    api.list_gate.set()
    wait_until(reflector.synced.is_set)
    assert reflector.healthy and reflector.last_error == ""
    assert reflector.errors == 2 and api.list_calls == 3
    assert stop.waits[:2] == [0.01, 0.02]  # doubling back-off


def test_initial_sync_time_counts_failed_lists_and_is_kept_across_relists(api: FakeApi, started: Any) -> None:
    now = [100.0]  # the reflector's clock: the list answers and the mirror's replace advance it

    def failing_list() -> FakeListing:
        now[0] += 2.0  # a failed list attempt takes 2 s
        raise RuntimeError("apiserver down")

    answers = iter([failing_list, api.list, api.list])

    def list_fn() -> FakeListing:
        return next(answers)()

    api.list_answers.put(([obj("a", "1")], "10"))
    api.list_answers.put(([obj("a", "1")], "20"))
    api.events.put(("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"}))
    applied = Applied()

    def replace(items: Any) -> None:
        now[0] += 3.0  # filling the mirror takes 3 s
        applied.replace(items)

    stop = RecordingStop()
    reflector = Reflector("things", list_fn, api.watch, replace, applied.apply, stop, initial_backoff=0.01,
                          clock=lambda: now[0])
    assert reflector.initial_sync_seconds is None
    reflector.start()
    try:
        wait_until(lambda: reflector.relists == 2)
    finally:
        stop.set()
        reflector.join(2)
    assert reflector.initial_sync_seconds == 5.0  # first attempt at 100, its objects in at 105; the relist: no
    assert now[0] == 108.0


def test_unhealthy_between_failure_and_relist(api: FakeApi, stop: RecordingStop, started: Any) -> None:
    api.list_answers.put(([obj("a", "1")], "10"))
    reflector, _ = started()
    wait_until(lambda: reflector.healthy)
    api.list_gate.clear()  # hold the relist so the in-between state can be observed
    api.events.put(RuntimeError("stream broken"))
    wait_until(lambda: reflector.errors == 1)
    assert not reflector.healthy and reflector.last_error == "stream broken"
    assert reflector.synced.is_set(), "synced means 'listed at least once': it stays set"
    api.list_answers.put(([obj("a", "1")], "11"))
    api.list_gate.set()
    wait_until(lambda: reflector.relists == 2)
    assert reflector.healthy and reflector.last_error == ""
    assert stop.waits[0] == 0.01


def test_watch_error_event_is_a_failure(api: FakeApi, started: Any) -> None:
    api.list_answers.put(([], "10"))
    reflector, _ = started()
    wait_until(lambda: reflector.healthy)
    api.list_gate.clear()
    api.events.put(("ERROR", {"code": 500, "message": "etcd timeout"}))
    wait_until(lambda: reflector.errors == 1)
    assert reflector.last_error == "watch error: etcd timeout" and not reflector.healthy
    api.list_answers.put(([], "11"))
    api.list_gate.set()
    wait_until(lambda: reflector.relists == 2)


def test_back_off_is_capped_and_reset_after_success(api: FakeApi, stop: RecordingStop, started: Any) -> None:
    for _ in range(5):
        api.list_answers.put(RuntimeError("down"))
    api.list_answers.put(([], "10"))
    api.list_answers.put(RuntimeError("down again"))
    api.list_answers.put(([], "20"))
    api.events.put(END)
    api.events.put(RuntimeError("watch broke"))
    reflector, _ = started()
    wait_until(lambda: reflector.relists == 2)
    assert reflector.errors == 7
    assert stop.waits[:7] == [0.01, 0.02, 0.04, 0.04, 0.04, 0.01, 0.02]


def test_last_error_is_reported_while_failing(api: FakeApi, started: Any) -> None:
    for _ in range(3):
        api.list_answers.put(PermissionError("nodes is forbidden"))
    reflector, _ = started()
    wait_until(lambda: reflector.errors >= 1)
    assert reflector.last_error == "nodes is forbidden" and not reflector.healthy
    assert not reflector.synced.is_set()
    api.list_answers.put(([], "1"))
    wait_until(reflector.synced.is_set)


def test_stop_ends_the_thread_while_watching(api: FakeApi, stop: RecordingStop) -> None:
    api.list_answers.put(([], "10"))
    applied = Applied()
    reflector = Reflector("things", api.list, api.watch, applied.replace, applied.apply, stop)
    reflector.start()
    wait_until(reflector.synced.is_set)
    stop.set()
    reflector.join(1)
    assert not reflector._thread.is_alive()


def test_stop_ends_the_thread_during_back_off(api: FakeApi) -> None:
    stop = threading.Event()
    api.list_answers.put(RuntimeError("down"))
    reflector = Reflector("things", api.list, api.watch, lambda items: None, lambda kind, o: None, stop,
                          initial_backoff=30.0)
    reflector.start()
    wait_until(lambda: reflector.errors == 1)
    started_at = time.monotonic()
    stop.set()
    reflector.join(2)
    assert not reflector._thread.is_alive()
    assert time.monotonic() - started_at < 1.0


def test_feeds_a_mirror(api: FakeApi, stop: RecordingStop) -> None:
    mirror = ClusterMirror()
    mirror.upsert_node(node("stale"))
    api.list_answers.put(([node("n1"), node("n2")], "10"))
    api.events.put(("DELETED", node("n1")))
    api.events.put(("ADDED", node("n3", cpu="8")))

    def apply(kind: str, raw: dict[str, Any]) -> None:
        if kind == "DELETED":
            mirror.delete_node(raw["metadata"]["name"])
        else:
            mirror.upsert_node(raw)

    reflector = Reflector("nodes", api.list, api.watch, mirror.replace_nodes, apply, stop)
    reflector.start()
    try:
        wait_until(lambda: reflector.events == 2)
        assert sorted(mirror.nodes) == ["n2", "n3"]
        assert mirror.nodes["n3"].allocatable["cpu"] == 8000
    finally:
        stop.set()
        reflector.join(2)

"""The request threads (extender/http/threads.py): newest idle thread first, a cap, started ahead, shut down."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from extender.http.threads import RequestThreads


@pytest.fixture
def pool() -> Iterator[RequestThreads]:
    threads = RequestThreads(4)
    yield threads
    threads.shutdown(wait=True)


def thread_name() -> str:
    return threading.current_thread().name


def settled(pool: RequestThreads, idle: int) -> RequestThreads:
    """``pool`` once ``idle`` of its threads wait for a task again (a task's future is done just before its
    thread goes back to waiting)."""
    deadline = time.monotonic() + 30
    while pool.idle != idle:
        assert time.monotonic() < deadline, f"{pool.idle} of {pool.threads} threads idle, not {idle}"
        time.sleep(0.001)
    return pool


def name_when_settled(pool: RequestThreads, idle: int) -> str:
    return str(settled(pool, idle).submit(thread_name).result(10))


def test_a_task_goes_to_the_thread_idle_for_the_shortest_time(pool: RequestThreads) -> None:
    pool.start(3)
    first = name_when_settled(pool, 3)
    assert [name_when_settled(pool, 3) for _ in range(5)] == [first] * 5  # warm, not round robin
    release = threading.Event()
    busy = settled(pool, 3).submit(release.wait, 10)  # takes ``first``
    other = name_when_settled(pool, 2)
    assert other != first
    settled(pool, 2)  # ``other`` waits again, before ``first`` does
    release.set()
    assert busy.result(10)
    assert name_when_settled(pool, 3) == first  # idle last, after ``other``
    assert pool.threads == 3


def test_past_the_cap_tasks_wait_in_order_for_the_next_free_thread(pool: RequestThreads) -> None:
    releases = [threading.Event() for _ in range(4)]
    held = [pool.submit(release.wait, 10) for release in releases]
    order: list[int] = []
    done = threading.Event()

    def note(i: int) -> bool:
        order.append(i)
        return done.wait(10)  # keeps its thread, so the next task waits for the next one freed

    queued = [pool.submit(note, i) for i in range(3)]
    assert pool.threads == 4 and not any(f.done() for f in queued)
    for i in range(3):  # one thread freed at a time: it takes the oldest task waiting
        releases[i].set()
        deadline = time.monotonic() + 30
        while len(order) < i + 1:
            assert time.monotonic() < deadline, f"task {i} never started"
            time.sleep(0.001)
    done.set()
    releases[3].set()
    assert all(f.result(10) for f in held + queued)
    assert order == [0, 1, 2]
    assert pool.threads == 4


def test_a_failing_task_hands_its_error_to_the_future_and_the_thread_goes_on(pool: RequestThreads) -> None:
    def fail() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        pool.submit(fail).result(10)
    assert settled(pool, 1).submit(lambda: 7).result(10) == 7
    assert pool.threads == 1


def test_start_never_goes_past_the_cap() -> None:
    pool = RequestThreads(2)
    before = threading.active_count()
    pool.start(5)
    assert pool.threads == 2 and threading.active_count() == before + 2
    pool.shutdown(wait=True)
    assert pool.threads == 0 and threading.active_count() == before


def test_shutdown_finishes_the_tasks_in_hand_and_refuses_new_ones() -> None:
    pool = RequestThreads(1)
    before = threading.active_count()
    release = threading.Event()
    running = pool.submit(release.wait, 10)
    queued, cancelled = pool.submit(lambda: "ran"), None
    pool.shutdown(wait=False)
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)
    release.set()
    assert running.result(10) and queued.result(10) == "ran"  # waiting tasks still run
    pool.shutdown(wait=True)
    assert threading.active_count() == before
    pool = RequestThreads(1)
    release = threading.Event()
    running = pool.submit(release.wait, 10)
    cancelled = pool.submit(lambda: "never")
    pool.shutdown(wait=False, cancel_futures=True)
    release.set()
    assert running.result(10) and cancelled.cancelled()
    pool.shutdown(wait=True)
    assert threading.active_count() == before


def test_a_thread_that_cannot_start_is_not_counted(pool: RequestThreads, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refuse)
        with pytest.raises(RuntimeError, match="can't start"):
            pool.submit(lambda: None)
    assert pool.threads == 0
    assert pool.submit(lambda: 3).result(10) == 3


def test_starting_ahead_stops_at_the_first_thread_the_system_refuses(pool: RequestThreads,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A container's process limit below the threads started ahead must not stop the worker from serving."""
    real_start = threading.Thread.start
    allowed = [2]

    def limited(self: threading.Thread) -> None:
        if allowed[0] <= 0:
            raise RuntimeError("can't start new thread")
        allowed[0] -= 1
        real_start(self)

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", limited)
        assert pool.start(4) == 2
    assert pool.threads == 2
    assert pool.submit(lambda: 5).result(10) == 5

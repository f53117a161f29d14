"""The request threads: a pool whose idle threads take the next request newest first, started ahead.

Owns: the threads that serve requests (``submit`` -> a ``concurrent.futures.Future``, as the standard
``ThreadPoolExecutor`` gunicorn's gthread worker uses, with the same cap, ``max_workers``): a task goes to
the thread that went idle last, else to a new thread while fewer than ``max_workers`` exist, else waits
in order for the next thread to finish; ``start`` starts idle threads ahead of need; ``shutdown`` lets
the tasks in hand finish, then the threads end. Must not: know what a task does, or block ``submit``
(it runs on the poller).

Why not ``ThreadPoolExecutor``: its idle threads all wait on one queue, so the thread idle longest takes
the next task. With threads started ahead for the binds gangs hold (``serving.STARTED_THREADS``), every
request then runs on the thread whose stack and state went cold the longest ago. Newest first, a quiet
extender keeps serving from the same few threads, and a burst reaches down the stack only as far as it
needs; handing a task over is one lock release (``bench/request_overhead.py``, 64 threads started:
0.238 / 0.239 ms of worker CPU per echoed filter, against 0.270 / 0.244 ms with the executor).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

log = logging.getLogger(__name__)

Task = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...]]


class _Thread:
    """One pool thread's hand-off: ``task`` is set and ``gate`` released to wake it (``None``: end)."""

    __slots__ = ("gate", "task")

    def __init__(self) -> None:
        self.gate = threading.Lock()
        self.gate.acquire()  # held while the thread has nothing to do: it waits by acquiring it again
        self.task: Task | None = None


class RequestThreads:
    """A thread pool of at most ``max_workers`` threads, idle ones reused newest first."""

    def __init__(self, max_workers: int, name: str = "request") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self._name = name
        self._lock = threading.Lock()
        self._idle: list[_Thread] = []  # a stack: the thread idle for the shortest time last
        self._waiting: deque[Task] = deque()  # tasks for which no thread was free, oldest first
        self._count = 0  # threads started and not ended
        self._running: set[threading.Thread] = set()  # those threads (``shutdown(wait=True)`` joins them)
        self._numbers = itertools.count(1)
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads started and not ended."""
        return self._count

    @property
    def idle(self) -> int:
        """Threads waiting for a task (a thread whose task is done counts once it waits again)."""
        return len(self._idle)

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on a pool thread; its outcome goes to the returned future."""
        future: Future[Any] = Future()
        task: Task = (future, fn, args)
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit to a pool that was shut down")
            if self._idle:
                thread = self._idle.pop()
                thread.task = task
                thread.gate.release()
                return future
            if self._count >= self.max_workers:
                self._waiting.append(task)
                return future
            self._count += 1
        self._spawn(task)
        return future

    def start(self, count: int) -> int:
        """Start up to ``count`` more threads now, idle (never beyond ``max_workers``); returns how many. Stops
        at the first the system refuses (a container's process limit): those are started on demand, if ever."""
        started = 0
        for _ in range(count):
            with self._lock:
                if self._closed or self._count >= self.max_workers:
                    break
                self._count += 1
            try:
                self._spawn(None)
            except RuntimeError as exc:
                log.warning("started %d of %d request threads ahead: %s", started, count, exc)
                break
            started += 1
        return started

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more tasks: idle threads end now, busy ones after the tasks in hand and those waiting (those
        cancelled with ``cancel_futures``). ``wait``: until every thread has ended."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                for future, _, _ in self._waiting:
                    future.cancel()
                self._waiting.clear()
            idle, self._idle = self._idle, []
        for thread in idle:
            thread.gate.release()  # with no task: it ends
        if wait:
            with self._lock:
                threads = list(self._running)
            for running in threads:
                if running is not threading.current_thread():
                    running.join()

    def _spawn(self, task: Task | None) -> None:
        """A new thread (already counted), serving ``task`` first if there is one. A daemon: the worker
        process ends without waiting for binds still held (gunicorn's graceful timeout has passed by then)."""
        thread = threading.Thread(target=self._serve, args=(_Thread(), task), daemon=True,
                                  name=f"{self._name}-{next(self._numbers)}")
        with self._lock:
            self._running.add(thread)
        try:
            thread.start()
        except BaseException:  # no thread to be had (a process limit): not counted, the error to the caller
            with self._lock:
                self._running.discard(thread)
                self._count -= 1
            raise

    def _serve(self, me: _Thread, task: Task | None) -> None:
        try:
            while True:
                if task is not None:
                    _run(task)
                    task = None
                task = self._next(me)
                if task is None:
                    return
        finally:
            with self._lock:
                self._count -= 1
                self._running.discard(threading.current_thread())

    def _next(self, me: _Thread) -> Task | None:
        """The next task for this thread (waiting for one while idle); None: the pool is shut down."""
        with self._lock:
            if self._waiting:
                return self._waiting.popleft()
            if self._closed:
                return None
            self._idle.append(me)
        me.gate.acquire()  # released by ``submit`` with a task, or by ``shutdown`` without one
        task, me.task = me.task, None
        return task


def _run(task: Task) -> None:
    future, fn, args = task
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args)
    except BaseException as exc:  # as ThreadPoolExecutor: the future carries it, the thread goes on
        future.set_exception(exc)
    else:
        future.set_result(result)

"""Asking: the fit oracle over the extender's own view (``POST /fit``), answered by a forked child, one
question at a time.

Owns: the copy a question is answered against (the mirror's records, the ledger's state, the
PodDisruptionBudgets and the Kueue topology levels, each copied in one short hold of its own lock), the
child process that answers it (``os.fork``: the oracle is up to seconds of pure Python at 5,000 nodes,
and in this process it would take the interpreter from the verbs), bringing the child's JSON answer back
over a pipe within ``deadline`` seconds (else the child is killed), and refusing a second question while
one is answered or sooner than ``min_interval`` after the last. Must not: hold any lock across the fork
(the child touches only the copies, made before it, and locks it makes itself), let the child write
anything but its answer, or keep anything between questions.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import math
import os
import resource
import selectors
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from extender.cluster.budgets import DisruptionBudgets
from extender.cluster.levels import TopologyLevels
from extender.cluster.mirror import ClusterMirror
from extender.errors import BadInputError, RefusedError, SubmissionError
from extender.fitting import oracle
from extender.fitting.submission import Submission
from extender.gangs.ledger import GangLedger

MIN_INTERVAL_SECONDS = 0.5
"""A question that arrives sooner than this after the last one ended is refused (429): each fork makes
the serving worker copy the memory pages it then writes (bench/fit_beside_filters.py: back-to-back
questions cut the filters' throughput in half), so a tool asking in a loop costs the verbs a bounded
share."""
DEADLINE_SECONDS = 20.0
"""A question not answered by then is dropped (the child killed) and the caller told so (503)."""
MAX_ANSWER_BYTES = 4 * 1024 * 1024
CHILD_MEMORY_BYTES = 1024 * 1024 * 1024
"""Memory the child may map beyond what it inherited; past it the question fails (503), the server lives."""
PR_SET_PDEATHSIG = 1


class Asking:
    """``ask(question)``: what the extender would do with a gang submitted now, as ``kubectl gang fit``
    answers, but over this replica's own mirror and ledger."""

    def __init__(self, mirror: ClusterMirror, ledger: GangLedger, budgets: DisruptionBudgets,
                 levels: TopologyLevels, scheduler_names: Sequence[str], *, leading: Callable[[], bool] = lambda: True,
                 deadline: float = DEADLINE_SECONDS, min_interval: float = MIN_INTERVAL_SECONDS,
                 wall: Callable[[], float] = time.time,
                 fork: bool = hasattr(os, "fork")) -> None:
        self.mirror, self.ledger, self.budgets, self.levels = mirror, ledger, budgets, levels
        self.scheduler_names = sorted(scheduler_names)
        self.leading, self.deadline, self.wall, self.fork = leading, deadline, wall, fork
        self.min_interval = min_interval
        self._one = threading.Lock()
        self._next_at = 0.0  # monotonic: when the next question may start
        self.answered = 0

    def ask(self, read_question: Callable[[], Submission]) -> dict[str, Any]:
        """The oracle's answer for the question ``read_question`` reads, in the child too (``SubmissionError``:
        it cannot be answered as asked; ``RefusedError``: 429 while another question is answered or too soon
        after the last, 503 past the deadline or when the child fails)."""
        if not self._one.acquire(blocking=False):
            raise RefusedError(429, "another fit is being answered; ask again in a moment")
        wait = 0.0
        try:
            wait = self._next_at - time.monotonic()
            if wait > 0:
                raise RefusedError(429, f"fits are answered at most every {self.min_interval}s; ask again in "
                                        f"{wait:.1f}s")
            world = self._world()

            def answer_it() -> dict[str, Any]:  # the body is read into pods here: in the child, under its limits
                return oracle.ask(world(), read_question())
            answer = self._in_child(answer_it) if self.fork else answer_it()
            if not self.leading():
                answer["notes"] = [*answer.get("notes", []), (
                    "this replica is not the leader: the reservations and the order are as this replica last saw "
                    "them (ask the leader, or use kubectl gang fit, which reads the leader's published state)")]
            answer["stateAgeSeconds"] = 0.0
            self.answered += 1
            return answer
        finally:
            if wait <= 0:
                self._next_at = time.monotonic() + self.min_interval
            self._one.release()

    def _world(self) -> Callable[[], oracle.World]:
        """Copies of everything the question reads, each taken in one short hold of its owner's lock; the
        world is built from them by the caller (in the child: none of that work is this process's)."""
        now = self.wall()
        state = self.ledger.view.state(now, self.scheduler_names)
        records = self.mirror.copy_records()
        budgets = self.budgets.copy()
        levels = self.levels.copy()
        return lambda: oracle.World(ClusterMirror.fork(records), state, now, budgets=budgets.allowed,
                                    budgets_selecting=budgets.selecting, levels=levels.levels_for)

    def _in_child(self, answer: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: answer, write, exit; never return into the server's code
            status = 0
            try:
                _become_a_child(write_end, self.deadline)
                try:
                    payload: dict[str, Any] = {"answer": answer()}
                except BadInputError as exc:
                    payload = {"refused": str(exc)}
                except RecursionError:
                    payload = {"refused": "the body nests too deeply to be a Kubernetes object"}
                except MemoryError:
                    payload = {"failed": f"the question needs more than {CHILD_MEMORY_BYTES >> 20} MiB"}
                except Exception as exc:  # the parent reports it; the child must exit
                    payload = {"failed": f"{type(exc).__name__}: {exc}"}
                data = memoryview(orjson.dumps(payload))
                while data:
                    data = data[os.write(write_end, data):]
            except BaseException:  # nothing may unwind into the parent's code
                status = 1
            finally:
                os._exit(status)
        os.close(write_end)
        raw: bytes | None = None
        try:
            raw = _read_all(read_end, time.monotonic() + self.deadline)
        finally:
            os.close(read_end)
            if raw is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if raw is None:
            raise RefusedError(503, f"the fit was not answered within {self.deadline:.0f}s")
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise RefusedError(503, "the fit's child process ended without an answer") from None
        if "refused" in payload:
            raise SubmissionError(payload["refused"])
        if "failed" in payload:
            raise RefusedError(503, f"the fit failed: {payload['failed']}")
        result: dict[str, Any] = payload["answer"]
        return result


def _become_a_child(keep: int, deadline: float) -> None:
    """What the child does first: drop every inherited file but ``keep`` and stdio (a connection the server
    closes is closed for its client at once), log nothing, collect no garbage, end itself past ``deadline``
    even if its parent is gone (SIGALRM; and SIGKILL when the parent dies), take the OOM killer's first
    pick, no more memory than ``CHILD_MEMORY_BYTES`` beyond what it inherited, and the lowest CPU
    priority."""
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        fd = int(name)
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    logging.disable(logging.CRITICAL)
    gc.disable()  # short-lived; a collection would walk (and copy) the inherited heap
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(math.ceil(deadline) + 1)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as adj:
        adj.write("1000")
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/statm") as statm:
            size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        limit = size + CHILD_MEMORY_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    _yield_the_cpu()


def _yield_the_cpu() -> None:
    """The child runs at the lowest priority (nice 19): the verbs, in the parent, come first, yet on a
    machine that is never idle the question still gets a small share and is answered (``SCHED_IDLE``
    would leave it waiting until its deadline). Lowering one's own priority needs no privilege."""
    with contextlib.suppress(OSError):
        os.nice(19)


def _read_all(fd: int, deadline: float) -> bytes | None:
    """Everything written to ``fd`` until its writer closes it (None: not by ``deadline``, or too much).
    A selector, not ``select``: the serving worker holds thousands of connections, so ``fd`` can be past
    1023."""
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                return None
            chunks.append(chunk)

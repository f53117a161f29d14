"""CPU pinning for the end-to-end benchmark's ``--pin`` variant (issue 14 section 1).

Owns: putting the driver and the control plane on one CPU and an extender on another, by CPU
affinity inheritance: Linux gives a new process (and a new thread) the affinity of the thread that
created it, so the driver pins its own main thread before it starts the control plane, and switches
that thread to the extender's CPU only while it spawns the extender (gunicorn's master, whose worker
and threads inherit it). Also reads back every thread's allowed CPUs, so a run shows that nothing
escaped. Must not: pin processes it did not start, or change anything when pinning is off.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

CONTROL_PLANE_CPU = 0
EXTENDER_CPU = 1


def available() -> bool:
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2


def pin_driver() -> None:
    """The calling thread (the driver's main thread: call before any other thread starts) and all it
    starts later, control plane included, on the control plane's CPU."""
    os.sched_setaffinity(0, {CONTROL_PLANE_CPU})


@contextlib.contextmanager
def spawning_on(cpu: int | None) -> Iterator[None]:
    """While the block runs, processes this thread starts inherit ``cpu`` (nothing when ``cpu`` is None)."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def allowed_cpus(pids: Mapping[str, Sequence[int]]) -> dict[str, list[str]]:
    """Program -> the distinct ``Cpus_allowed_list`` values of all its threads (e.g. ``["0"]``)."""
    out: dict[str, list[str]] = {}
    for name, group in pids.items():
        seen: set[str] = set()
        for pid in group:
            with contextlib.suppress(OSError):
                for task in Path(f"/proc/{pid}/task").iterdir():
                    with contextlib.suppress(OSError):
                        for line in (task / "status").read_text().splitlines():
                            if line.startswith("Cpus_allowed_list:"):
                                seen.add(line.split(":", 1)[1].strip())
        out[name] = sorted(seen)
    return out

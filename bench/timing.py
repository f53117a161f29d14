"""Timing in-process cases for the micro-benchmarks: interleaved samples and a p50/p99/max table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any


def interleaved(runs: Mapping[str, Callable[[], Any]], samples: int, title: str, *, width: int = 40,
                digits: int = 2) -> None:
    """Run every case ``samples`` times, interleaved so that each sees the same machine noise, and
    print milliseconds per case."""
    timings: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(samples):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            timings[name].append((time.perf_counter() - start) * 1000)
    print(f"\n{title}, {samples} samples per case (ms)")
    print(f"{'case':{width}} {'p50':>8} {'p99':>8} {'max':>8}")
    for name, taken in timings.items():
        taken.sort()
        p99 = taken[min(len(taken) - 1, int(len(taken) * 0.99))]
        print(f"{name:{width}} {statistics.median(taken):8.{digits}f} {p99:8.{digits}f} {taken[-1]:8.{digits}f}")

"""The admission order: which waiting gang goes first, and how long it may wait (pure).

Owns: a gang's priority (its group's, else its members' pod priority) and what is wrong with it; the
sort key of the waiting queue (higher priority first, then the longest waiting, then the name, so
the order is total and stable); a gang's maximum wait before capacity drains for it; the wait-time
histogram per priority. Must not: keep gang state, lock or call out: the ledger's ``queue`` layer
applies these under the mirror's lock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from extender.model import messages
from extender.model.cluster import PodRecord
from extender.model.gang import GangOrder

WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Upper bounds (seconds) of the wait-time histogram: from complete to admitted."""

MAX_PRIORITIES = 64
"""Distinct priorities the wait histogram keeps (more are counted under the lowest kept one)."""


def gang_priority(order: GangOrder | None, members: Iterable[PodRecord]) -> tuple[int, str]:
    """(priority, problem): the group's priority when it states one, else the members'. Members whose
    priorities differ from each other or from the group's are a problem (upstream fails such a
    group): the gang is ordered by the lowest priority involved and never preempts for it."""
    seen = {pod.priority for pod in members}
    stated = order.priority if order is not None else None
    if stated is not None:
        if seen - {stated}:
            return min(seen | {stated}), messages.priority_differs_from_group(_listed(seen), stated)
        return stated, ""
    if len(seen) > 1:
        return min(seen), messages.member_priorities_differ(_listed(seen))
    return (next(iter(seen)) if seen else 0), ""


def _listed(priorities: set[int]) -> str:
    shown = sorted(priorities)
    return ", ".join(map(str, shown[:5])) + (", ..." if len(shown) > 5 else "")


def queue_key(priority: int, waiting_since: float, name: str) -> tuple[int, float, str]:
    """Sort key of the waiting queue: higher priority, then longer waiting, then the gang's name."""
    return (-priority, waiting_since, name)


def max_wait(order: GangOrder | None, default: float) -> float:
    """How long the gang may wait at the head of the queue before a draining reservation starts."""
    if order is not None and order.max_wait_seconds is not None:
        return order.max_wait_seconds
    return default


@dataclass
class WaitHistogram:
    """Seconds from complete to admitted, per gang priority (cumulative buckets, as Prometheus has them)."""

    counts: dict[int, list[int]] = field(default_factory=dict)  # priority -> per-bucket counts (+Inf last)
    sums: dict[int, float] = field(default_factory=dict)

    def observe(self, priority: int, seconds: float) -> None:
        if priority not in self.counts and len(self.counts) >= MAX_PRIORITIES:
            priority = min(self.counts)
        counts = self.counts.setdefault(priority, [0] * (len(WAIT_BUCKETS) + 1))
        counts[bisect.bisect_left(WAIT_BUCKETS, seconds)] += 1
        self.sums[priority] = self.sums.get(priority, 0.0) + seconds

    def snapshot(self) -> list[tuple[int, list[tuple[str, int]], float]]:
        """Per priority: cumulative (upper bound, count) pairs ending with "+Inf", and the sum."""
        result = []
        for priority in sorted(self.counts):
            running, buckets = 0, []
            for bound, count in zip((*map(str, WAIT_BUCKETS), "+Inf"), self.counts[priority], strict=True):
                running += count
                buckets.append((bound, running))
            result.append((priority, buckets, self.sums[priority]))
        return result

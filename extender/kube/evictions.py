"""KubeEvictor: the engine's ``Evictor`` port over the Eviction API, under a rate bound.

Owns: ``RateBound``, a token bucket of evictions per minute (injectable clock); evicting a set of
victims all-or-nothing with respect to that bound (the tokens of the whole set are taken before the
first call, or none is tried); one Eviction call per victim through the client seam
(``EvictionApi``, which ``KubeClient`` implements), each bounded by ``timeout``; a Warning Event
``Preempted`` on each victim evicted; counts of every outcome (``EVICTION_OUTCOMES``).
Must not: choose victims, check PodDisruptionBudgets itself (the API server does, and
``cluster.budgets`` predicts it), retry, or import the client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from extender.engine.ports import EVICTION_OUTCOMES, EvictionOutcome
from extender.errors import BudgetError, EvictionError, GoneError
from extender.kube.events import EventRecorder
from extender.model import messages
from extender.model.cluster import PodRecord

log = logging.getLogger(__name__)

PREEMPTED = "Preempted"
"""The reason of the Warning Event on each evicted victim."""


class EvictionApi(Protocol):
    """What the evictor needs of the API client (``KubeClient.evict``)."""

    def evict(self, namespace: str, name: str, uid: str, timeout: float = 10.0) -> None:
        """Raises BudgetError (a budget refused), GoneError (no such pod) or EvictionError."""


class RateBound:
    """A token bucket: at most ``per_minute`` evictions in any minute, refilled continuously (a full
    bucket holds ``per_minute`` tokens, so a burst of that many is allowed after a quiet minute)."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError(f"per_minute must be > 0, got {per_minute}")
        self.capacity = float(per_minute)
        self._rate = per_minute / 60.0  # tokens a second
        self._clock = clock
        self._tokens = self.capacity
        self._at = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + max(now - self._at, 0.0) * self._rate)
        self._at = now

    def allows(self, count: int) -> bool:
        """Whether ``count`` tokens are available now (nothing is taken)."""
        with self._lock:
            self._refill()
            return count <= self._tokens

    def take(self, count: int) -> bool:
        """Take ``count`` tokens if all are available now; False (nothing taken) if not."""
        with self._lock:
            self._refill()
            if count > self._tokens:
                return False
            self._tokens -= count
            return True


class KubeEvictor:
    """``Evictor`` over the Eviction API: the API server checks PodDisruptionBudgets and deletes each
    victim gracefully. ``may_act`` gates every call (only the leader evicts: a standby's victims come
    back ``failed``)."""

    def __init__(self, client: EvictionApi, events: EventRecorder, max_per_minute: int, *,
                 clock: Callable[[], float] = time.monotonic, timeout: float = 10.0,
                 may_act: Callable[[], bool] = lambda: True) -> None:
        self._client = client
        self._events = events
        self.bound = RateBound(max_per_minute, clock)
        self._timeout = timeout
        self._may_act = may_act
        self._lock = threading.Lock()
        self.counts: dict[str, int] = dict.fromkeys(EVICTION_OUTCOMES, 0)

    def allows(self, count: int) -> bool:
        return self.bound.allows(count)

    def evict(self, victims: Sequence[PodRecord], preemptor: str, reason: str) -> list[EvictionOutcome]:
        """Evict every victim, one call each, or none when the rate bound has no room for all of them."""
        if not victims:
            return []
        if not self._may_act():
            outcomes = [EvictionOutcome(pod, "failed", messages.NOT_LEADING_EVICTS_NOTHING) for pod in victims]
        elif not self.bound.take(len(victims)):
            message = messages.rate_bound_no_room(self.bound.capacity, len(victims))
            outcomes = [EvictionOutcome(pod, "rate-limited", message) for pod in victims]
        else:
            outcomes = [self._evict_one(pod) for pod in victims]
            evicted = [o.pod for o in outcomes if o.outcome == "evicted"]
            if evicted:
                self._events.record(evicted, "Warning", PREEMPTED, messages.preempted_by(preemptor, reason))
        with self._lock:
            for outcome in outcomes:
                self.counts[outcome.outcome] += 1
        return outcomes

    def _evict_one(self, pod: PodRecord) -> EvictionOutcome:
        try:
            self._client.evict(pod.namespace, pod.name, pod.uid, timeout=self._timeout)
        except BudgetError as exc:
            log.info("eviction of %s/%s refused by a PodDisruptionBudget: %s", pod.namespace, pod.name, exc)
            return EvictionOutcome(pod, "refused-budget", str(exc))
        except GoneError as exc:
            return EvictionOutcome(pod, "gone", str(exc))
        except EvictionError as exc:
            log.warning("eviction of %s/%s failed: %s", pod.namespace, pod.name, exc)
            return EvictionOutcome(pod, "failed", str(exc))
        log.info("evicted %s/%s", pod.namespace, pod.name)
        return EvictionOutcome(pod, "evicted")

"""An in-memory ``Evictor`` at our own seam (``extender.engine.ports.Evictor``), for the engine's tests.

It records every ``evict`` call (victims, preemptor, reason) and answers each victim with the outcome
set for it (``outcomes[(namespace, name)]``, default ``evicted``). ``room`` plays the rate bound: None
is unbounded; otherwise ``allows(count)`` is ``count <= room``, and an ``evict`` call takes ``room``
for all its victims up front or answers every one ``rate-limited`` (as ``KubeEvictor`` does). The
pods it evicted are kept in ``evicted``; nothing changes in any mirror (the test does that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from extender.engine.ports import EVICTION_OUTCOMES, EvictionOutcome
from extender.model.cluster import PodRecord


@dataclass(frozen=True)
class EvictCall:
    victims: tuple[PodRecord, ...]
    preemptor: str
    reason: str


@dataclass
class FakeEvictor:
    room: int | None = None
    outcomes: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # key -> (outcome, message)
    calls: list[EvictCall] = field(default_factory=list)
    evicted: list[PodRecord] = field(default_factory=list)

    def set_outcome(self, pod: PodRecord | tuple[str, str], outcome: str, message: str = "") -> None:
        """What ``evict`` answers for this pod (a record or its (namespace, name)) from now on."""
        assert outcome in EVICTION_OUTCOMES, outcome
        key = pod.key if isinstance(pod, PodRecord) else pod
        self.outcomes[key] = (outcome, message)

    def allows(self, count: int) -> bool:
        return self.room is None or count <= self.room

    def evict(self, victims: Sequence[PodRecord], preemptor: str, reason: str) -> list[EvictionOutcome]:
        self.calls.append(EvictCall(tuple(victims), preemptor, reason))
        if not self.allows(len(victims)):
            return [EvictionOutcome(pod, "rate-limited", "no room") for pod in victims]
        if self.room is not None:
            self.room -= len(victims)
        answers = []
        for pod in victims:
            outcome, message = self.outcomes.get(pod.key, ("evicted", ""))
            if outcome == "evicted":
                self.evicted.append(pod)
            answers.append(EvictionOutcome(pod, outcome, message))
        return answers

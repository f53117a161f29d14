"""ReleaseLatency: how long releases took lately, and the time a release needs left on every hold (pure).

Owns: the durations of the last releases (writing the release down, then every Binding, as the engine
measured them) and the margin a new release needs on each of its holds before kube-scheduler gives up on
them (``margin``: twice the slowest of the last ones, at least ``FLOOR``, at most ``ceiling``; ``DEFAULT``
until one is measured). A release with less than that left on any hold does not start: the gang's holds
are recycled together and come back together. Must not: measure anything itself (the engine reports
each release), take locks or call out.
"""

from __future__ import annotations

from collections import deque

WINDOW = 32
"""Releases remembered."""

FLOOR = 0.25
"""The least margin, in seconds: a release always gets this much time for its intent and its Bindings."""

DEFAULT = 1.0
"""The margin, in seconds, before any release was measured."""


class ReleaseLatency:
    """The recent releases' durations and the margin they call for."""

    def __init__(self, ceiling: float) -> None:
        """``ceiling``: the largest margin (half of how long a bind may be held: a slower API server must
        not keep every quorum from ever being released)."""
        self.ceiling = max(ceiling, FLOOR)
        self._recent: deque[float] = deque(maxlen=WINDOW)

    def observe(self, seconds: float) -> None:
        """A release took ``seconds`` from its start to its last Binding's answer (called from any thread)."""
        self._recent.append(max(seconds, 0.0))

    def margin(self) -> float:
        recent = list(self._recent)
        wanted = 2 * max(recent) if recent else DEFAULT
        return min(max(wanted, FLOOR), self.ceiling)

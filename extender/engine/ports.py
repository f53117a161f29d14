"""The engine's ports: what the I/O edges implement for it (the API server or a snapshot binds; a
journal file or the leader's Lease records releases; the API server evicts preemption victims), and
the errors they raise.

Must not: import an edge; the edges import this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from extender.model.cluster import PodRecord
from extender.model.gang import GangKey


class Binder(Protocol):
    """The one seam through which the engine changes the cluster."""

    def bind(self, namespace: str, name: str, uid: str, node: str, timeout: float = 10.0) -> None:
        """Create the Binding; give up (BindError) after ``timeout`` seconds."""

    def read_pod(self, namespace: str, name: str, timeout: float = 10.0) -> Mapping[str, Any] | None:
        """The pod from the API server (None: it does not exist); give up after ``timeout`` seconds."""


class OpenRelease(Protocol):
    """A release written down and not closed, as read back after a restart or a takeover."""

    @property
    def gang(self) -> GangKey | None:
        """Its gang (None: written by a version that recorded no typed key)."""

    @property
    def pods(self) -> Sequence[tuple[str, str, str, str]]:
        """Its members: (namespace, name, uid, the node kube-scheduler chose)."""


class ReleaseLog(Protocol):
    """Where the engine writes a release down before its first Binding (the release journal, or the
    intents on the leader's Lease). ``closes_at_once``: ``closed`` never waits (a local file's append),
    so the thread answering the release's last member closes it; otherwise (an API write) a thread of
    the engine's own does."""

    closes_at_once: bool

    def opened(self, gang: GangKey, pods: Sequence[tuple[str, str, str, str]]) -> int:
        """Record the release; raises ReleaseNotRecordedError when it is not known to be recorded."""

    def closed(self, release_id: int) -> None: ...


EVICTION_OUTCOMES = ("evicted", "gone", "refused-budget", "failed", "rate-limited")
"""Every ``EvictionOutcome.outcome``: evicted (the API server accepted the Eviction), gone (the pod, that
uid, no longer exists), refused-budget (a PodDisruptionBudget refused: HTTP 429), failed (any other
failure, a timeout included), rate-limited (not tried: the rate bound had no room)."""


@dataclass(frozen=True, slots=True)
class EvictionOutcome:
    """What became of one victim's eviction."""

    pod: PodRecord
    outcome: str   # "evicted" | "gone" | "refused-budget" | "failed" | "rate-limited"
    message: str = ""


class Evictor(Protocol):
    """The one seam through which the engine evicts preemption victims."""

    def allows(self, count: int) -> bool:
        """Whether the rate bound has room for ``count`` evictions now."""

    def evict(self, victims: Sequence[PodRecord], preemptor: str, reason: str) -> list[EvictionOutcome]:
        """Evict every victim (one API call each, bounded by the client's timeout), one outcome per victim
        in order; all ``rate-limited`` when the rate bound has no room for all of them."""

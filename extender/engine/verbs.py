"""Engine: the extender's use cases, the verbs, as one façade over composed parts (no HTTP, no kubernetes
client).

Owns: building the verbs' parts once (``Filtering``: filter and prioritize; ``Binding``: bind and the
releases; ``Evictions``: running the preemption victims' evictions) and doing, outside the mirror's
lock, the work the ledger queued after each filter and each tick (bind the quorums it released, run the
evictions it decided), even when the request failed; the preempt verb (``preempt_verb``) and
``explain``. Must not: parse HTTP or JSON, import Flask or kubernetes, or call the API server except
through its ports.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from extender.cluster.cache import FilterCache
from extender.cluster.mirror import ClusterMirror
from extender.engine import preempt_verb
from extender.engine.binding import Binding
from extender.engine.evicting import Evictions
from extender.engine.filtering import QUORUM_WAIT_SECONDS, Filtering
from extender.engine.ports import Binder, Evictor, OpenRelease, ReleaseLog
from extender.engine.requests import BindArgs, FilterArgs, FilterResult, PreemptArgs, PreemptResult
from extender.gangs.ledger import GangLedger, Work
from extender.gangs.waitlist import Waitlist


class Engine:
    """The verbs: filter, prioritize, bind, preempt; the sweep's work outside the lock; explain."""

    def __init__(self, mirror: ClusterMirror, cache: FilterCache, ledger: GangLedger, binder: Binder,
                 *, evictor: Evictor | None = None, bind_parallelism: int = 32,
                 clock: Callable[[], float] = time.monotonic, release_log: ReleaseLog | None = None,
                 scheduler_names: frozenset[str] | None = None, answer_margin: float = 1.0,
                 may_act: Callable[[], bool] = lambda: True, time_left: Callable[[], float] = lambda: math.inf,
                 waitlist: Waitlist | None = None, quorum_wait_seconds: float = QUORUM_WAIT_SECONDS) -> None:
        """``evictor``: evicts the preemption victims the ledger chooses (None: nothing is evicted).
        ``waitlist``: the pods to wake when capacity frees, shared with the ledger (default: the
        ledger's). ``quorum_wait_seconds``: ``Filtering``'s wait for a gang being created. The rest are
        ``Binding``'s settings."""
        self.mirror = mirror
        self.cache = cache
        self.ledger = ledger
        self.filtering = Filtering(mirror, cache, ledger, waitlist or ledger.waitlist, clock)
        self.filtering.quorum_wait_seconds = quorum_wait_seconds
        self.binding = Binding(mirror, ledger, binder, bind_parallelism=bind_parallelism, clock=clock,
                               release_log=release_log, scheduler_names=scheduler_names,
                               answer_margin=answer_margin, may_act=may_act, time_left=time_left)
        self.evictor = evictor
        self.evictions = None if evictor is None else Evictions(ledger, evictor, may_act)

    @property
    def steered(self) -> int:
        """Filter requests answered with the nodes of the member's own reservation."""
        return self.filtering.steered

    @property
    def unseen(self) -> int:
        """Filter requests of gang members the pod watch had not delivered yet."""
        return self.filtering.unseen

    @property
    def quorum_waits(self) -> dict[str, int]:
        """First filters of gangs still being created that waited for their quorum, by outcome (a copy)."""
        return self.filtering.quorum_wait_counts()

    def sweep(self, min_interval: float = 0.0) -> None:
        """The ledger's sweep, then what it left to do: bind the quorums it released, run the evictions."""
        try:
            self.ledger.sweep(min_interval, release=True)
        finally:
            self._start(self.ledger.take_work())

    def _start(self, work: Work) -> None:
        self.binding.start_releases(work.releases)
        if self.evictions is not None:
            self.evictions.start(work.evictions)

    def filter(self, args: FilterArgs) -> FilterResult:
        """The filter verb; then, even when it fails (a bad request), the work its sweep queued."""
        try:
            return self.filtering.filter(args)
        finally:
            self._start(self.ledger.take_work())

    def prioritize(self, args: FilterArgs) -> list[tuple[str, int]]:
        return self.filtering.prioritize(args)

    def bind(self, args: BindArgs, arrival: float | None = None) -> str:
        return self.binding.bind(args, arrival)

    def resume_release(self, release: OpenRelease) -> dict[str, str] | None:
        """Finish or drop a release a crash interrupted (``Binding.resume_release``; None: ask again)."""
        return self.binding.resume_release(release)

    def let_through(self, release: OpenRelease) -> frozenset[str] | None:
        """Finish or drop a release a previous leader left open (``Binding.let_through``; None: ask again)."""
        return self.binding.let_through(release)

    def preempt(self, args: PreemptArgs) -> PreemptResult:
        """kube-scheduler's preemption candidates this extender allows (``preempt_verb.preempt``)."""
        return preempt_verb.preempt(self.mirror, self.ledger, args)

    def explain(self, namespace: str, name: str, pod_group: str | None = None,
                replica: str | None = None) -> list[dict[str, Any]]:
        """What the extender knows about every gang of group ``namespace/name`` (read-only)."""
        return [self.ledger.view.explain(gang) for gang in self.mirror.find_gangs(namespace, name, pod_group, replica)]

"""Leadership: which of several replicas acts, tied to the kube-scheduler that calls it.

Owns: when this replica competes for the leader Lease (``LeaderElector``'s ``eligible``): while
kube-scheduler calls it (a verb within the last lease duration), while it holds binds or has a release
open. Each kube-scheduler replica calls only its own extender on loopback and only the leading
kube-scheduler schedules, so the extender that is called is the one that leads, and one that is no
longer called hands the Lease back (two replicas on one host share a hostname: kube-scheduler's own
Lease cannot tell which extender is its sidecar). Also owns when a new leader finishes what a previous
leader left open (once nodes and pods are listed, the engine lets each open release's members through,
``Engine.let_through``; the verbs are not served as the leader before that, ``acting``) and closing
those releases once their members are bound or gone. Must not:
bind, decide gang rules, or serve HTTP.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from extender.cluster.mirror import ClusterMirror
from extender.engine.ports import OpenRelease
from extender.gangs.view import LedgerView
from extender.kube.intents import ReleaseIntents
from extender.kube.leader import LeaderElector
from extender.model import messages

log = logging.getLogger(__name__)

PENDING_IDLE_SECONDS = 330.0
"""How long a leader with pending work (gangs backing off, pods to wake) keeps the Lease without being
called: kube-scheduler retries every pod it could not schedule at least every 5 minutes
(podMaxInUnschedulablePodsDuration), so a live leading scheduler calls within that; releasing earlier
would drop the wake-ups those pods wait for, and nothing would call again."""

NOT_LEADER = messages.NOT_LEADER
"""Why a replica that does not lead answers every verb with an error (the text is ``messages``')."""


class Leadership:
    """Campaign while called; resume what a previous leader left open once this replica leads."""

    def __init__(self, idle_seconds: float, ledger: LedgerView, mirror: ClusterMirror,
                 let_through: Callable[[OpenRelease], frozenset[str] | None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``ledger``: its read-only view (held binds, pending work); ``let_through``: the engine's, for
        each release a previous leader left open (returns the uids of the members it let through)."""
        self.idle_seconds = idle_seconds
        self.ledger, self.mirror, self.clock = ledger, mirror, clock
        self.let_through = let_through
        self.elector: LeaderElector | None = None
        self.intents: ReleaseIntents | None = None
        self._called_at = float("-inf")
        self._resume = threading.Event()
        self._gained = 0   # leaderships gained (the elector's callback)
        self._settled = 0  # the last of them whose left-open releases were decided
        self._resuming: dict[int, frozenset[str]] = {}  # open release id -> uids let through, not yet bound

    def attach(self, elector: LeaderElector, intents: ReleaseIntents) -> None:
        self.elector, self.intents = elector, intents

    # --------------------------------------------------------------------------------- queries
    def called(self) -> None:
        """kube-scheduler sent a verb: this replica's scheduler is the one scheduling."""
        self._called_at = self.clock()

    def eligible(self) -> bool:
        """Whether to compete for (or keep) the Lease: called within the lease duration, holding binds
        or an open release, or with pods waiting on this replica's work and called within the time
        kube-scheduler takes at most to retry them."""
        busy = self.ledger.held_count() > 0 or (self.intents is not None and self.intents.open_count() > 0)
        idle = self.clock() - self._called_at
        return busy or idle < self.idle_seconds or (idle < PENDING_IDLE_SECONDS and self.ledger.pending())

    def is_leader(self) -> bool:
        return self.elector is not None and self.elector.is_leader()

    def acting(self) -> bool:
        """Leads, and has decided what to do with the releases previous leaders left open. Until then the
        verbs answer as a replica that does not lead: a filter or bind served earlier would not know
        which members a release lets through or the room it keeps for them (a member's bind held at the
        barrier just before its release let it through waited there for the rest of its gang)."""
        return self.is_leader() and self._settled == self._gained

    # --------------------------------------------------------------------------------- takeover
    def gained(self) -> None:
        """The elector's callback (its thread): hand the resume to ``resume_when_listed``."""
        self._gained += 1
        self._resume.set()

    def resume_when_listed(self, listed: Callable[[], bool], stop: threading.Event) -> None:
        """Run on a thread of its own: each time leadership is gained, once nodes and pods are listed,
        let the unbound members of the releases left open pass the barrier at their next bind; a release
        is closed once each of those members is bound or gone (until then a next leader would find it
        and do the same)."""
        while not stop.is_set():
            if self._resume.wait(0.5):
                while not listed() and not stop.wait(0.2):
                    pass
                self._resume.clear()
                gained = self._gained
                if self._let_through():
                    self._settled = gained
            self._close_finished()

    def _let_through(self) -> bool:
        """Whether every release left open was decided."""
        if self.intents is None or not self.is_leader():
            return False
        decided = True
        for release in self.intents.unfinished:
            if release.id in self._resuming:
                continue
            let = self.let_through(release)
            if let is None:  # the API server could not say which members are bound: ask again next round
                self._resume.set()
                decided = False
                continue
            self._resuming[release.id] = let
        return decided

    def _close_finished(self) -> None:
        if self.intents is None or not self._resuming or not self.is_leader():
            return
        for release_id, uids in list(self._resuming.items()):
            with self.mirror.lock:
                waiting = [uid for uid in uids
                           if (pod := self.mirror.pod_by_uid(uid)) is not None and not pod.node_name]
            if not waiting:
                del self._resuming[release_id]
                self.intents.closed(release_id)

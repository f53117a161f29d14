"""Runtime: the running extender's state and its lifecycle, once built (``composition`` builds it).

Owns: the parts the HTTP edge reads (mirror, cache, ledger, engine, writers, the PodDisruptionBudgets
and the evictor); starting the background
threads (the composition's ``starter`` on the ``discovery`` thread, the 1 s ``gang-sweep``); whether
the verbs may serve now (synced, leader, no stale watch) and what ``/readyz`` says; the API probe;
finishing the releases a crash interrupted (``--release-journal``) before requests are let in;
shutdown. Must not: build or wire its parts, talk to the API server except through the probe it is
handed, serve HTTP, or decide gang rules.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from extender.cluster.budgets import DisruptionBudgets
from extender.cluster.cache import FilterCache
from extender.cluster.mirror import ClusterMirror
from extender.config import Settings
from extender.engine.verbs import Engine
from extender.files.journal import ReleaseJournal
from extender.gangs.ledger import GangLedger
from extender.kube.events import EventRecorder, PodUngater, PodWaker
from extender.kube.evictions import KubeEvictor
from extender.kube.status import StatusWriter
from extender.kube.watching import Reflector
from extender.model import messages
from extender.wiring.asking import Asking
from extender.wiring.discovery import GroupWatches
from extender.wiring.leadership import Leadership

log = logging.getLogger(__name__)

SWEEP_INTERVAL_SECONDS = 1.0
API_PROBE_SECONDS = 2.0


@dataclass
class Runtime:
    settings: Settings
    mirror: ClusterMirror
    cache: FilterCache
    ledger: GangLedger
    engine: Engine
    events: EventRecorder
    waker: PodWaker
    mode: str
    status: StatusWriter | None = None
    core_reflectors: list[Reflector] = field(default_factory=list)  # nodes, pods
    group_watches: GroupWatches | None = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    discovery_error: str = ""
    discovered: bool = False  # the first discovery round succeeded and started every watch
    journal: ReleaseJournal | None = None
    resumed: bool = False  # releases a crash interrupted are finished (True at once without a journal)
    leadership: Leadership | None = None  # several replicas: only the leader acts (--leader-election on)
    api_failing_since: float | None = None  # monotonic: the API server stopped answering the probe
    starter: Callable[[], None] | None = None  # run on the `discovery` thread by start() (API mode)
    budgets: DisruptionBudgets = field(default_factory=DisruptionBudgets)  # the engine's too
    evictor: KubeEvictor | None = None  # the engine's too (API mode)
    budget_reflector: Reflector | None = None  # PodDisruptionBudgets: readiness, not staleness (API mode)
    asking: Asking | None = None  # POST /fit: the fit oracle over this replica's view
    ungater: PodUngater | None = None  # removes the quorum gate: the ledger's decisions and the tick's walk
    _synced_once: bool = False

    @property
    def reflectors(self) -> list[Reflector]:
        """Every watch that should exist now: nodes, pods, PodDisruptionBudgets and the group APIs served
        right now (a failing budget watch makes /readyz fail but not the verbs: the Eviction API itself
        enforces every budget; ``stale_problem`` reads the core watches only)."""
        groups = self.group_watches.reflectors() if self.group_watches is not None else []
        budgets = [self.budget_reflector] if self.budget_reflector is not None else []
        return [*self.core_reflectors, *budgets, *groups]

    def preemption_problem(self) -> str:
        """Why no victim may be chosen now ("" : they may): the mirror not fully listed, a core watch
        stale, or the PodDisruptionBudgets not listed or not watched (victims chosen then could be
        refused midway and a victim gang split)."""
        if not self.synced():
            return messages.NOT_FULLY_LISTED
        stale = self.stale_problem()
        if stale:
            return stale
        budgets = self.budget_reflector
        if budgets is None or not budgets.synced.is_set() or not budgets.healthy:
            return messages.BUDGETS_NOT_WATCHED
        return ""

    def start(self) -> None:
        if self.starter is not None:
            threading.Thread(target=self.starter, name="discovery", daemon=True).start()
        threading.Thread(target=self._tick, name="gang-sweep", daemon=True).start()

    def _tick(self) -> None:
        """Expire overdue gangs and end back-offs even when no request arrives; answer every held bind
        while the view of the cluster is stale; remove the quorum gate from the pods that may go to
        kube-scheduler now (``GangLedger.release_quorum_gated``: what no member's arrival decided)."""
        while not self.stop_event.wait(SWEEP_INTERVAL_SECONDS):
            try:
                self.engine.sweep()
                self.answer_held_if_stale()
            except Exception:  # the sweeper must survive anything; the next tick retries
                log.exception("gang sweep failed")
            try:
                self.ledger.release_quorum_gated()
            except Exception:  # nor keep the gates from being removed
                log.exception("quorum gate walk failed")

    def stale_problem(self, now: float | None = None) -> str:
        """Why the mirror cannot be trusted now: a core watch (nodes, pods) failing for longer than
        ``watch_stale_seconds``; "" otherwise (a shorter outage is ridden out: the watch relists)."""
        now = time.monotonic() if now is None else now
        limit = self.settings.watch_stale_seconds
        since = self.api_failing_since
        if since is not None and now - since > limit:  # a silent watch (no RST) raises nothing for minutes
            return messages.api_silent(now - since)
        for reflector in self.core_reflectors:
            failing = reflector.failing_for(now)
            if failing > limit:
                return messages.watch_failing(reflector.name, failing, reflector.last_error)
        return ""

    def probe_api(self, probe: Callable[[], None], interval: float = API_PROBE_SECONDS) -> None:
        """Ask the API server something cheap every ``interval`` (its own thread): a watch whose
        connection goes silent (a black-holed API server) fails only at its read timeout, minutes later,
        while this notices within ``interval`` + the probe's own timeout."""
        while not self.stop_event.wait(interval):
            try:
                probe()
            except Exception as exc:
                if self.api_failing_since is None:
                    self.api_failing_since = time.monotonic()
                    log.warning("the API server does not answer: %s", exc)
            else:
                self.api_failing_since = None

    def answer_held_if_stale(self, now: float | None = None) -> int:
        """While the view of the cluster is stale, answer every held bind with a retry (no release is
        decided on a frozen mirror); returns how many were answered."""
        stale = self.stale_problem(now)
        if not stale and self.leadership is not None and not self.leadership.is_leader():
            stale = messages.NOT_LEADER  # leadership lost while holding: a deposed replica releases nothing
        answered = self.ledger.answer_all_held(stale) if stale else 0
        if answered:
            log.warning("answered %d held bind(s) with a retry: %s", answered, stale)
        return answered

    def serving_problem(self, now: float | None = None) -> str:
        """Why a verb must answer the protocol's Error now (kube-scheduler retries); "" to serve. A
        verb call is also what makes a replica compete for leadership."""
        if self.leadership is not None:
            self.leadership.called()
        if not self.synced():
            return messages.NOT_SYNCED
        if self.leadership is not None and not self.leadership.acting():
            return messages.NOT_LEADER
        return self.stale_problem(now)

    def synced(self) -> bool:
        """Whether the mirror holds a full list of everything watched (answers before that could admit
        a gang against capacity whose pods are not listed yet).

        Latched: once every watch of the first discovery has listed, it stays True. A group API that
        appears later (a CRD installed) lists on its own; until it has, its gangs wait at the quorum
        gate ("PodGroup ... does not exist"), which is safe, while every other pod keeps scheduling.
        """
        if self.mode == "snapshot" or self._synced_once:
            return True
        reflectors = self.reflectors
        self._synced_once = (self.discovered and self.resumed and bool(reflectors)
                             and all(r.synced.is_set() for r in reflectors))
        return self._synced_once

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready when every watch that should exist now has listed and is healthy (always, in snapshot
        mode)."""
        if self.mode == "snapshot":
            return True, {"mode": "snapshot"}
        watches = {r.name: {"synced": r.synced.is_set(), "healthy": r.healthy, "error": r.last_error}
                   for r in self.reflectors}
        ready = (self.discovered and self.resumed and bool(watches)
                 and all(w["synced"] and w["healthy"] for w in watches.values()))
        detail: dict[str, Any] = {"mode": "api", "watches": watches}
        if not self.resumed:
            detail["releaseJournal"] = "finishing releases a crash interrupted"
        if self.group_watches is not None:
            detail["groupApis"] = self.group_watches.versions()
        if self.discovery_error:
            detail["discovery_error"] = self.discovery_error
        if self.leadership is not None:  # readiness does not depend on it: a standby must start too
            detail["leader"] = self.leadership.is_leader()
        return ready, detail

    def finish_start(self) -> None:
        """Once nodes and pods are listed: bind what the releases a crash interrupted left unbound (the
        release journal), keep the listed objects out of the garbage collector's full passes
        (``freeze_heap``), then let requests in (``synced``)."""
        for reflector in self.core_reflectors:
            while not reflector.synced.wait(0.5):
                if self.stop_event.is_set():
                    return
        if self.journal is not None:
            for release in self.journal.unfinished:
                outcomes = self.engine.resume_release(release)
                backoff = 0.5
                while outcomes is None:  # the API server could not say which members are bound: ask again
                    if self.stop_event.wait(backoff):
                        return
                    backoff = min(backoff * 2, 10.0)
                    outcomes = self.engine.resume_release(release)
                log.info("release %d of gang %s, interrupted by a restart: %s", release.id, release.gang,
                         "; ".join(f"{pod}: {outcome or 'bound now'}" for pod, outcome in outcomes.items()))
                self.journal.closed(release.id)
        freeze_heap()
        self.resumed = True

    def close(self) -> None:
        self.stop_event.set()
        if self.journal is not None:
            self.journal.close()
        if self.leadership is not None and self.leadership.elector is not None:
            intents = self.leadership.intents
            # hand the Lease back at once unless a release is still open (a successor must finish it)
            self.leadership.elector.stop(release=intents is None or intents.open_count() == 0)
        self.events.close()
        self.waker.close()
        if self.ungater is not None:
            self.ungater.close()
        if self.status is not None:
            self.status.close()


def freeze_heap() -> None:
    """Move every object alive now (the mirror as first listed: one record per node and pod) into the
    garbage collector's permanent generation. A full collection otherwise walks all of them: a 33-60 ms
    pause in the middle of the filter replay at 1,000 nodes (docs/performance.md), longer with a larger
    cluster. Objects created later are collected as usual."""
    gc.collect()
    gc.freeze()

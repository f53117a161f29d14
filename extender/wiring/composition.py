"""Composition: builds a ``Runtime`` for the API server or for a snapshot file.

Owns: creating mirror + cache + ledger + engine, the writers, the PodDisruptionBudgets and the evictor
(API mode), and wiring them to either the API server (credentials, the release journal or the release
intents on the leader's Lease, the elector, every write gated on leading, the feeds and group discovery
run by the ``discovery`` thread) or a snapshot file read once. Must not: serve HTTP, decide gang rules,
or hold state after it returns (the ``Runtime`` and the threads it starts hold it).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from extender import config
from extender.cluster.budgets import DisruptionBudgets
from extender.cluster.cache import FilterCache
from extender.cluster.levels import TopologyLevels
from extender.cluster.mirror import ClusterMirror
from extender.config import Settings
from extender.engine.ports import Binder, ReleaseLog
from extender.engine.verbs import Engine
from extender.errors import KubeError
from extender.files import snapshot
from extender.files.journal import ReleaseJournal
from extender.gangs import bind_modes
from extender.gangs.ledger import GangLedger
from extender.gangs.settings import GangSettings
from extender.kube.binder import KubeBinder
from extender.kube.client import KubeClient
from extender.kube.events import EventRecorder, PodUngater, PodWaker, log_sink
from extender.kube.evictions import EvictionApi, KubeEvictor
from extender.kube.intents import ReleaseIntents
from extender.kube.leader import LeaderElector
from extender.kube.lease import ElectionConfig, KubeLeaseApi, default_namespace
from extender.kube.publishing import ExplainPublisher
from extender.kube.status import StatusWriter
from extender.model import messages
from extender.model.cluster import QUORUM_GATE, PodRecord
from extender.wiring.asking import Asking
from extender.wiring.discovery import GroupWatches
from extender.wiring.feeds import MirrorFeeds
from extender.wiring.kueue import TopologyFeed, TopologyWatch
from extender.wiring.leadership import Leadership
from extender.wiring.reporting import GangReports, explained, ledger_state, status_writer
from extender.wiring.runtime import API_PROBE_SECONDS, Runtime, freeze_heap

log = logging.getLogger(__name__)

INTENT_BYTES_PER_MEMBER = 160
"""A release intent's bytes per member, with room to spare (namespace, name, uid, node and JSON: ~100
for typical names): 128 KiB hold the release of 819 members, the 240 KiB maximum 1,536."""

Sink = Callable[[dict[str, str], str, str, str], None]
Patch = Callable[[str, str, dict[str, str]], None]


def held_bind_budget(threads: int) -> int:
    """Binds gangs may hold at once: the worker threads less headroom kept for filter, prioritize,
    bind of non-gang pods, probes and /metrics."""
    return max(threads - max(8, threads // 8), 1)


def compose(settings: Settings, mode: str, binder_for: Callable[[ClusterMirror], Binder], sink: Sink,
            patch: Patch, apply_status: Callable[[dict[str, Any]], None] | None = None,
            release_log: ReleaseLog | None = None, journal: ReleaseJournal | None = None,
            may_act: Callable[[], bool] = lambda: True, levels: TopologyLevels | None = None,
            evictions: EvictionApi | None = None, time_left: Callable[[], float] = lambda: math.inf,
            remove_gate: Callable[[PodRecord], bool] = lambda pod: False) -> Runtime:
    """The mirror, cache, ledger, engine and writers of one extender, wired together (nothing started).

    ``levels`` gives each gang's preferred-fallback level order (default: ``--topology-levels`` only);
    ``evictions``: the Eviction API (None: no evictor, nothing is ever evicted); ``time_left``: for how
    many more seconds this replica leads (each Binding is cut to it); ``remove_gate``: removes the quorum gate
    from a pod (False: not leading, nothing written)."""
    levels = levels or TopologyLevels(config.topology_levels(settings))
    mirror = ClusterMirror()
    cache = FilterCache(settings.cache_size, settings.cache_ttl_seconds)
    events = EventRecorder(sink)
    budgets = DisruptionBudgets()
    evictor = None if evictions is None else KubeEvictor(evictions, events, settings.max_evictions_per_minute,
                                                         may_act=may_act)
    waker = PodWaker(patch)
    ungater = PodUngater(remove_gate, mirror.gate_removed)
    status = None
    if apply_status is not None and settings.group_status == "on":
        status = StatusWriter(status_writer(mirror, apply_status))
    reports = GangReports(mirror, events, status)
    served = config.scheduler_names(settings)
    # The bind mode, chosen once: a strategy the ledger composes (nothing else asks which mode runs).
    bind_mode = bind_modes.FilterGated if settings.bind_mode == "filter-gated" else bind_modes.Barrier
    holds = bind_mode.holds_binds  # no held binds: no thread budget, no release on the Lease
    gang_settings = GangSettings(
        timeout_seconds=settings.gang_timeout_seconds, backoff_seconds=settings.gang_backoff_seconds,
        hold_seconds=settings.scheduler_http_timeout_seconds - settings.bind_answer_margin_seconds,
        max_held_binds=held_bind_budget(settings.threads) if holds else None,
        max_release_members=(settings.release_intents_max_bytes // INTENT_BYTES_PER_MEMBER
                             if settings.leader_election == "on" and holds else None),
        max_wait_seconds=settings.max_wait_seconds, topology_levels=levels.static, levels=levels.levels_for)
    runtime: Runtime  # assigned below; the ledger's preemption_problem reads it
    ledger = GangLedger(mirror, gang_settings, on_event=reports.on_event, on_wake=waker.wake,
                        on_status=reports.on_status, bind_mode=bind_mode,
                        serves=lambda pod: pod.scheduler_name in served,
                        preemption=evictor is not None and settings.preemption == "on", budgets=budgets.allowed,
                        eviction_room=evictor.allows if evictor is not None else None,
                        preemption_problem=lambda: (runtime.preemption_problem() if may_act()
                                                    else messages.NOT_LEADING),
                        on_ungate=ungater.ungate)
    engine = Engine(mirror, cache, ledger, binder_for(mirror), bind_parallelism=settings.bind_parallelism,
                    release_log=release_log, scheduler_names=served,
                    answer_margin=settings.bind_answer_margin_seconds, may_act=may_act, time_left=time_left,
                    evictor=evictor, quorum_wait_seconds=settings.quorum_wait_seconds)
    runtime = Runtime(settings, mirror, cache, ledger, engine, events, waker, mode, status, journal=journal,
                      budgets=budgets, evictor=evictor, ungater=ungater,
                      asking=Asking(mirror, ledger, budgets, levels, sorted(served), leading=may_act))
    return runtime


def from_snapshot(settings: Settings) -> Runtime:
    assert settings.cluster_snapshot is not None
    objects = snapshot.read_objects(settings.cluster_snapshot)
    runtime = compose(settings, "snapshot", snapshot.SnapshotBinder, log_sink,
                      lambda namespace, name, annotations: None)
    counts = snapshot.load_into(runtime.mirror, objects)
    log.info("loaded snapshot %s: %s", settings.cluster_snapshot,
             ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    freeze_heap()
    return runtime


LEDGER_REFRESH_SECONDS = 60.0
"""The leader's ledger state is written again at least this often, changed or not: ``kubectl gang fit``
takes a state much older than this for one no leader keeps (``kubectl.fit.STALE_SECONDS``)."""

CONNECTIONS_BESIDE_BINDS = 24
"""API connections kept beside a release's Bindings: one per watch (nodes, pods, each group API and
version, PodDisruptionBudgets, Kueue Topologies) and the writers (Events, status, the Lease, evictions)."""


def from_api(settings: Settings) -> Runtime:
    kube = KubeClient(settings.kubeconfig, connections=settings.bind_parallelism + CONNECTIONS_BESIDE_BINDS)

    def apply_status(body: dict[str, Any]) -> None:
        kube.apply_status(body, "podgroups")

    journal = ReleaseJournal(settings.release_journal) if settings.release_journal else None
    if journal is not None and journal.unfinished:
        log.warning("release journal %s: %d release(s) were interrupted (a crash?); they are finished once "
                    "nodes and pods are listed", settings.release_journal, len(journal.unfinished))
    elector, intents, leading = _election(settings, kube, lambda: runtime.leadership)
    levels = TopologyLevels(config.topology_levels(settings))
    runtime = compose(settings, "api", lambda _m: KubeBinder(kube), _if(leading, kube.create_event),
                      _if(leading, kube.annotate_pod), _if(leading, apply_status), intents or journal, journal,
                      leading, levels, kube, elector.time_left if elector is not None else lambda: math.inf,
                      functools.partial(_remove_quorum_gate, kube, leading))
    if elector is not None and intents is not None:
        runtime.leadership = Leadership(settings.lease_duration_seconds, runtime.ledger.view, runtime.mirror,
                                        runtime.engine.let_through)
        runtime.leadership.attach(elector, intents)
    feeds = MirrorFeeds(runtime.mirror, kube, runtime.stop_event)
    runtime.group_watches = GroupWatches(kube.serves, feeds.start_group, feeds.stop_group)
    topology_feed = TopologyFeed(levels, kube)
    topology = TopologyWatch(kube.serves, topology_feed.start, topology_feed.stop_watch)
    publishers: list[ExplainPublisher[Any]] = []
    if settings.explain_publish_seconds > 0:
        publishers.append(ExplainPublisher(runtime.ledger.view.known_gangs,
                                           lambda gang: explained(runtime.ledger, runtime.mirror, gang),
                                           _if(leading, kube.create_event),
                                           interval=settings.explain_publish_seconds))
        namespace, names = settings.lease_namespace or default_namespace(), sorted(config.scheduler_names(settings))
        publishers.append(ExplainPublisher(lambda: ["ledger-state"],
                                           lambda _key: ledger_state(runtime.ledger, namespace, names),
                                           _if(leading, kube.create_event),
                                           interval=settings.explain_publish_seconds, refresh=LEDGER_REFRESH_SECONDS))
    runtime.starter = ApiStart(runtime, kube, feeds, runtime.group_watches, elector, topology, topology_feed,
                               publishers, leading).run
    return runtime


@dataclass
class ApiStart:
    """What the ``discovery`` thread does in API mode: discover the group APIs (retrying with back-off
    until it works once), start the node, pod and PodDisruptionBudget watches, the API probe and the elector, finish the
    start (``Runtime.finish_start``), then re-discover every ``discovery_interval_seconds``. Kueue's
    Topology API is discovered in the same rounds but apart: its failure is logged, never blocks the
    start, and its watch is not part of readiness (``wiring.kueue``)."""

    runtime: Runtime
    kube: KubeClient
    feeds: MirrorFeeds
    watches: GroupWatches
    elector: LeaderElector | None
    topology: TopologyWatch | None = None
    topology_feed: TopologyFeed | None = None
    publishers: list[ExplainPublisher[Any]] = field(default_factory=list)  # GangState Events, while leading, synced
    leading: Callable[[], bool] = lambda: True

    def discover(self) -> bool:
        """One discovery round; a failure is kept for ``/readyz`` and changes no watch."""
        self.discover_topology()
        try:
            changes = self.watches.discover()
        except KubeError as exc:
            self.runtime.discovery_error = str(exc)
            return False
        self.runtime.discovery_error = ""
        if changes:
            log.info("group APIs: %s (watching %s)", ", ".join(changes),
                     ", ".join(f"{k}/{v}" for k, v in self.watches.versions().items()) or "none")
        return True

    def discover_topology(self) -> None:
        """Kueue's Topology API: a failure is logged and keeps the current watch; it never fails the round."""
        if self.topology is None:
            return
        try:
            changes = self.topology.discover()
        except Exception as exc:  # an optional API: even an odd discovery reply must not stop the round
            log.warning("Kueue Topology discovery failed (%s: %s); keeping the current watch", type(exc).__name__, exc)
            return
        if changes:
            log.info("Kueue Topology API: %s", ", ".join(changes))

    def run(self) -> None:
        runtime = self.runtime
        backoff = 0.5
        while not self.discover():
            log.warning("API discovery failed (%s); retrying in %.1fs", runtime.discovery_error, backoff)
            if runtime.stop_event.wait(backoff):
                return
            backoff = min(backoff * 2, 30.0)
        runtime.core_reflectors = self.feeds.core()
        runtime.budget_reflector = self.feeds.budgets(runtime.budgets)
        for r in [*runtime.core_reflectors, runtime.budget_reflector]:
            r.start()
        runtime.discovered = True
        threading.Thread(target=runtime.probe_api, name="api-probe", daemon=True,
                         args=(lambda: self.kube.request("GET", "/version", timeout=API_PROBE_SECONDS),)).start()
        if runtime.leadership is not None and self.elector is not None:
            self.elector.start()
            threading.Thread(target=runtime.leadership.resume_when_listed, name="leader-resume", daemon=True,
                             args=(lambda: all(r.synced.is_set() for r in runtime.core_reflectors),
                                   runtime.stop_event)).start()
        runtime.finish_start()
        for publisher in self.publishers:
            threading.Thread(target=publisher.run, name="explain-publish", daemon=True,
                             args=(runtime.stop_event, lambda: self.leading() and runtime.synced())).start()
        while not runtime.stop_event.wait(runtime.settings.discovery_interval_seconds):
            if not self.discover():
                log.warning("API re-discovery failed (%s); keeping the current watches", runtime.discovery_error)
        self.feeds.stop_groups()
        if self.topology_feed is not None:
            self.topology_feed.stop_all()


def _election(settings: Settings, kube: KubeClient, leadership: Callable[[], Leadership | None]) -> tuple[
        LeaderElector | None, ReleaseIntents | None, Callable[[], bool]]:
    """The elector and the release intents on its Lease (``--leader-election on``), and the predicate
    every write to the cluster is gated on (always True with a single replica)."""
    if settings.leader_election != "on":
        return None, None, lambda: True
    election = ElectionConfig(settings.lease_namespace or default_namespace(), settings.lease_name,
                              settings.lease_duration_seconds, settings.lease_renew_deadline_seconds,
                              settings.lease_retry_period_seconds)

    def eligible() -> bool:
        current = leadership()
        return current is not None and current.eligible()

    def gained() -> None:
        current = leadership()
        if current is not None:
            current.gained()

    elector = LeaderElector(KubeLeaseApi(kube), election, on_started=gained, eligible=eligible)
    intents = ReleaseIntents(elector, max_bytes=settings.release_intents_max_bytes)
    return elector, intents, elector.is_leader


def _if(allowed: Callable[[], bool], write: Callable[..., None]) -> Callable[..., None]:
    """``write`` (an Event, a wake-up patch, a status apply) only while ``allowed()``: only the leader
    tells users things; a standby's writes are dropped."""
    def gated(*args: Any) -> None:
        if allowed():
            write(*args)
    return gated


def _remove_quorum_gate(kube: KubeClient, leading: Callable[[], bool], pod: PodRecord) -> bool:
    """Remove the quorum gate from ``pod`` if this replica leads; whether it did."""
    if not leading():
        return False
    kube.remove_scheduling_gate(pod.namespace, pod.name, pod.uid, QUORUM_GATE, pod.quorum_gate)
    return True


def build(settings: Settings) -> Runtime:
    return from_snapshot(settings) if settings.cluster_snapshot else from_api(settings)

"""Runtime: builds the extender's state and its I/O, starts and stops it.

Owns: wiring mirror + cache + ledger + engine to either the API server (credentials, discovery of
the group APIs it serves — the newest served version of each, re-discovered every
``discovery_interval_seconds`` so a CRD installed or removed later is followed without a restart —,
one Reflector per watched collection, an Event recorder, a group status writer) or a snapshot file;
readiness; shutdown. Must not: serve HTTP or make scheduling decisions.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from extender import config
from extender.cluster.cache import FilterCache
from extender.cluster.groups import GROUP_APIS, GroupApi, event_reference, status_apply
from extender.cluster.mirror import ClusterMirror
from extender.cluster.model import GangKey, GangStatus, GroupKind, GroupRef, PodRecord
from extender.config import Settings
from extender.engine.ports import Binder, BindError, ReleaseLog
from extender.engine.verbs import Engine
from extender.files import snapshot
from extender.files.journal import ReleaseJournal
from extender.gangs.ledger import GangLedger
from extender.kube.client import KubeClient, KubeError
from extender.kube.events import EventRecorder, PodWaker, log_sink, pod_reference
from extender.kube.intents import ReleaseIntents
from extender.kube.leader import ElectionConfig, KubeLeaseApi, LeaderElector, default_namespace
from extender.kube.status import CONFLICT, SENT, SKIPPED, StatusWriter, Write
from extender.kube.watching import Reflector, watch_or_gone
from extender.wiring.leadership import NOT_LEADER, Leadership

log = logging.getLogger(__name__)

SWEEP_INTERVAL_SECONDS = 1.0
API_PROBE_SECONDS = 2.0
INTENT_BYTES_PER_MEMBER = 160
"""A release intent's bytes per member, with room to spare (namespace, name, uid, node and JSON: ~100
for typical names): 128 KiB hold the release of 819 members, the 240 KiB maximum 1,536."""

NOT_SYNCED = ("gang-extender is starting: its first list of nodes, pods and group objects is not complete; "
              "kube-scheduler will retry")


class GroupWatches:
    """Which group APIs are watched: the newest served version of each, kept up to date.

    ``discover()`` asks ``serves(group, version, resource)`` for every known version and then starts,
    restarts (another version became the newest) or stops (no version served any more: the CRD was
    removed) one reflector per group API through ``start(api, version)`` and ``stop(api)``. A failed
    question changes nothing: the error propagates and the current watches stay.
    """

    def __init__(self, serves: Callable[[str, str, str], bool], start: Callable[[GroupApi, str], Reflector],
                 stop: Callable[[GroupApi, Reflector], None], apis: Iterable[GroupApi] = GROUP_APIS) -> None:
        self._serves, self._start, self._stop = serves, start, stop
        self.apis = tuple(apis)
        self.active: dict[GroupKind, tuple[str, Reflector]] = {}
        self.lock = threading.Lock()

    def newest_served(self) -> dict[GroupKind, str]:
        found: dict[GroupKind, str] = {}
        for api in self.apis:
            for version in api.versions:
                if self._serves(api.group, version, api.resource):
                    found[api.kind] = version
                    break
        return found

    def discover(self) -> list[str]:
        """One round; returns what changed, e.g. ``["+podgroups.scheduling.k8s.io/v1beta1"]``."""
        served = self.newest_served()
        changes: list[str] = []
        with self.lock:
            for api in self.apis:
                current = self.active.get(api.kind)
                wanted = served.get(api.kind)
                if current is not None and current[0] == wanted:
                    continue
                if current is not None:
                    del self.active[api.kind]
                    self._stop(api, current[1])
                    changes.append(f"-{api.name}/{current[0]}")
                if wanted is not None:
                    self.active[api.kind] = (wanted, self._start(api, wanted))
                    changes.append(f"+{api.name}/{wanted}")
        return changes

    def reflectors(self) -> list[Reflector]:
        with self.lock:
            return [reflector for _, reflector in self.active.values()]

    def versions(self) -> dict[str, str]:
        with self.lock:
            return {api.name: self.active[api.kind][0] for api in self.apis if api.kind in self.active}


class KubeBinder:
    """Binder over the API server: ``pods/binding`` and pod reads."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    def bind(self, namespace: str, name: str, uid: str, node: str, timeout: float = 10.0) -> None:
        try:
            self.kube.bind(namespace, name, uid, node, timeout)
        except KubeError as exc:
            raise BindError(str(exc)) from None

    def read_pod(self, namespace: str, name: str, timeout: float = 10.0) -> Mapping[str, Any] | None:
        try:
            return self.kube.read_pod(namespace, name, timeout)
        except KubeError as exc:
            raise BindError(str(exc)) from None


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
    _starter: Callable[[], None] | None = None
    _synced_once: bool = False

    @property
    def reflectors(self) -> list[Reflector]:
        """Every watch that should exist now: nodes, pods and the group APIs served right now."""
        groups = self.group_watches.reflectors() if self.group_watches is not None else []
        return [*self.core_reflectors, *groups]

    def start(self) -> None:
        if self._starter is not None:
            threading.Thread(target=self._starter, name="discovery", daemon=True).start()
        threading.Thread(target=self._tick, name="gang-sweep", daemon=True).start()

    def _tick(self) -> None:
        """Expire overdue gangs and end back-offs even when no request arrives; answer every held bind
        while the view of the cluster is stale."""
        while not self.stop_event.wait(SWEEP_INTERVAL_SECONDS):
            try:
                self.engine.sweep()
                self.answer_held_if_stale()
            except Exception:  # the sweeper must survive anything; the next tick retries
                log.exception("gang sweep failed")

    def stale_problem(self, now: float | None = None) -> str:
        """Why the mirror cannot be trusted now: a core watch (nodes, pods) failing for longer than
        ``watch_stale_seconds``; "" otherwise (a shorter outage is ridden out: the watch relists)."""
        now = time.monotonic() if now is None else now
        limit = self.settings.watch_stale_seconds
        since = self.api_failing_since
        if since is not None and now - since > limit:  # a silent watch (no RST) raises nothing for minutes
            return (f"the API server has not answered gang-extender for {now - since:.0f}s: its view of the "
                    "cluster may be stale; kube-scheduler will retry")
        for reflector in self.core_reflectors:
            failing = reflector.failing_for(now)
            if failing > limit:
                return (f"gang-extender's {reflector.name} watch has been failing for {failing:.0f}s "
                        f"({reflector.last_error or 'no detail'}): its view of the cluster may be stale; "
                        "kube-scheduler will retry")
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
            stale = NOT_LEADER  # leadership lost while holding: a deposed replica releases nothing
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
            return NOT_SYNCED
        if self.leadership is not None and not self.leadership.is_leader():
            return NOT_LEADER
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
                outcomes = self.engine.resume_release(release.gang, release.pods)
                log.info("release %d of gang %s, interrupted by a restart: %s", release.id, release.gang,
                         "; ".join(f"{pod}: {outcome or 'bound now'}" for pod, outcome in outcomes.items()))
                self.journal.closed(release.id)
        freeze_heap()
        self.resumed = True

    def close(self) -> None:
        self.stop_event.set()
        if self.journal is not None:
            self.journal.close()
        self.engine.close()
        if self.leadership is not None and self.leadership.elector is not None:
            intents = self.leadership.intents
            # hand the Lease back at once unless a release is still open (a successor must finish it)
            self.leadership.elector.stop(release=intents is None or intents.open_count() == 0)
        self.events.close()
        self.waker.close()
        if self.status is not None:
            self.status.close()


def freeze_heap() -> None:
    """Move every object alive now (the mirror as first listed: one record per node and pod) into the
    garbage collector's permanent generation. A full collection otherwise walks all of them: a 33-60 ms
    pause in the middle of the filter replay at 1,000 nodes (docs/performance.md), longer with a larger
    cluster. Objects created later are collected as usual."""
    gc.collect()
    gc.freeze()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_writer(mirror: ClusterMirror, apply: Callable[[dict[str, Any]], None],
                  now: Callable[[], str] = _now) -> Write:
    """The StatusWriter's ``write``: render the status body from the group object as the mirror has it
    now (``groups.status_apply``) and hand it to ``apply`` (server-side apply to ``/status``; a
    ``KubeError`` 409 means another manager owns that status, 404 that the object is gone)."""
    def write(group: GroupRef, status: GangStatus) -> str:
        with mirror.lock:
            meta = mirror.group_meta(group)
            members = mirror.members(GangKey(group))
            placed = sum(1 for p in members if mirror.placement(p.uid))
        if meta is None:
            return SKIPPED
        body = status_apply(group, meta, dataclasses.replace(status, bound=placed), now())
        if body is None:
            return SKIPPED
        try:
            apply(body)
        except KubeError as exc:
            if exc.status == 409:
                return CONFLICT
            if exc.status == 404:
                return SKIPPED
            raise
        return SENT
    return write


MEMBER_EVENTS = frozenset({"GangBindFailed"})
"""Reasons about one member, written on each pod named; every other gang Event is about the gang and is
written once, on its group object (``gang_event_targets``)."""


def gang_event_targets(mirror: ClusterMirror, pods: list[PodRecord]) -> list[dict[str, str]]:
    """Where an Event about the gangs of ``pods`` goes: one per gang, on its Workload or PodGroup
    (``kubectl describe workload|podgroup``); for a gang without an object (annotation gangs), on its
    member with the first name. (One Event per gang rather than per member: a gang of 8 used to cost
    ~20 Event writes; kube-scheduler's own FailedScheduling and Scheduled Events already tell each pod.)"""
    targets: dict[str, dict[str, str]] = {}
    with mirror.lock:
        for pod in pods:
            gang = pod.gang
            key = str(gang) if gang is not None else pod.uid
            if key in targets:
                continue
            target = event_reference(gang.group, mirror.group_meta(gang.group)) if gang is not None else None
            if target is None:
                members = mirror.members(gang) if gang is not None else []
                first = min([*members, *(p for p in pods if p.gang == gang)], key=lambda p: p.name)
                target = pod_reference(first)
            targets[key] = target
    return list(targets.values())


def held_bind_budget(threads: int) -> int:
    """Binds gangs may hold at once: the worker threads less headroom kept for filter, prioritize,
    bind of non-gang pods, probes and /metrics."""
    return max(threads - max(8, threads // 8), 1)


def _core(settings: Settings, binder_for: Callable[[ClusterMirror], Binder],
          sink: Callable[[dict[str, str], str, str, str], None],
          patch: Callable[[str, str, dict[str, str]], None],
          apply_status: Callable[[dict[str, Any]], None] | None = None,
          journal: ReleaseLog | None = None, may_act: Callable[[], bool] = lambda: True) -> tuple[
              ClusterMirror, FilterCache, GangLedger, Engine, EventRecorder, PodWaker, StatusWriter | None]:
    mirror = ClusterMirror()
    cache = FilterCache(settings.cache_size, settings.cache_ttl_seconds)
    events = EventRecorder(sink)
    waker = PodWaker(patch)
    status = None
    if apply_status is not None and settings.group_status == "on":
        status = StatusWriter(status_writer(mirror, apply_status))

    def on_event(pods: list[PodRecord], event_type: str, reason: str, message: str) -> None:
        if reason in MEMBER_EVENTS:
            events.record(pods, event_type, reason, message)
        else:
            events.record_on(gang_event_targets(mirror, pods), event_type, reason, message)

    def on_status(gang: GangKey, value: GangStatus) -> None:
        if status is not None and not gang.replica and gang.group.kind in (GroupKind.PODGROUP,
                                                                            GroupKind.COSCHEDULING):
            status.publish(gang.group, value)

    ledger = GangLedger(mirror, timeout_seconds=settings.gang_timeout_seconds,
                        backoff_seconds=settings.gang_backoff_seconds, on_event=on_event, on_wake=waker.wake,
                        on_status=on_status, max_held_binds=held_bind_budget(settings.threads),
                        hold_seconds=settings.scheduler_http_timeout_seconds - settings.bind_answer_margin_seconds,
                        max_release_members=(settings.release_intents_max_bytes // INTENT_BYTES_PER_MEMBER
                                             if settings.leader_election == "on" else None))
    engine = Engine(mirror, cache, ledger, binder_for(mirror), bind_parallelism=settings.bind_parallelism,
                    release_log=journal, scheduler_names=config.scheduler_names(settings),
                    answer_margin=settings.bind_answer_margin_seconds, may_act=may_act)
    return mirror, cache, ledger, engine, events, waker, status


def from_snapshot(settings: Settings) -> Runtime:
    assert settings.cluster_snapshot is not None
    objects = snapshot.read_objects(settings.cluster_snapshot)
    mirror, cache, ledger, engine, events, waker, status = _core(settings, snapshot.SnapshotBinder, log_sink,
                                                                 lambda namespace, name, annotations: None)
    counts = snapshot.load_into(mirror, objects)
    log.info("loaded snapshot %s: %s", settings.cluster_snapshot,
             ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    freeze_heap()
    return Runtime(settings, mirror, cache, ledger, engine, events, waker, "snapshot", status)


def from_api(settings: Settings) -> Runtime:
    kube = KubeClient(settings.kubeconfig)

    def apply_status(body: dict[str, Any]) -> None:
        kube.apply_status(body, "podgroups")

    journal = ReleaseJournal(settings.release_journal) if settings.release_journal else None
    if journal is not None and journal.unfinished:
        log.warning("release journal %s: %d release(s) were interrupted (a crash?); they are finished once "
                    "nodes and pods are listed", settings.release_journal, len(journal.unfinished))
    elector, intents, leading = _election(settings, kube, lambda: leadership)
    mirror, cache, ledger, engine, events, waker, status = _core(
        settings, lambda _m: KubeBinder(kube), _if(leading, kube.create_event), _if(leading, kube.annotate_pod),
        _if(leading, apply_status), intents or journal, leading)
    runtime = Runtime(settings, mirror, cache, ledger, engine, events, waker, "api", status, journal=journal)
    leadership: Leadership | None = None
    if elector is not None and intents is not None:
        leadership = runtime.leadership = Leadership(settings.lease_duration_seconds, ledger, mirror)
        leadership.attach(elector, intents)

    def reflector(name: str, path: str, replace: Callable[[Iterable[dict[str, Any]]], None],
                  apply: Callable[[str, dict[str, Any]], None],
                  stop: threading.Event | None = None) -> Reflector:
        def safe_apply(kind: str, obj: dict[str, Any]) -> None:
            try:
                apply(kind, obj)
            except ValueError as exc:
                mirror.rejected_objects += 1
                meta = obj.get("metadata") or {}
                log.warning("ignoring malformed %s %s/%s: %s", name, meta.get("namespace"), meta.get("name"),
                            exc)
        return Reflector(name, lambda: kube.list(path), watch_or_gone(lambda rv: kube.watch(path, rv)),
                         replace, safe_apply, stop or runtime.stop_event)

    def apply_node(kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            mirror.delete_node(str(obj["metadata"]["name"]))
        else:
            mirror.upsert_node(obj)

    def apply_pod(kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            meta = obj.get("metadata") or {}
            mirror.delete_pod(str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"))
        else:
            mirror.upsert_pod(obj)

    def group_replace(group_kind: GroupKind) -> Callable[[Iterable[dict[str, Any]]], None]:
        return lambda items: mirror.replace_groups(group_kind, items)

    def group_apply(group_kind: GroupKind) -> Callable[[str, dict[str, Any]], None]:
        def apply(kind: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            if kind == "DELETED":
                mirror.delete_group(group_kind, str(meta.get("namespace") or "default"), str(meta.get("name")))
            else:
                mirror.upsert_group(group_kind, obj)
        return apply

    group_stops: dict[GroupKind, threading.Event] = {}

    def start_group_watch(api: GroupApi, version: str) -> Reflector:
        stop = group_stops[api.kind] = threading.Event()
        started = reflector(api.name, api.path(version), group_replace(api.kind), group_apply(api.kind), stop)
        started.start()
        return started

    def stop_group_watch(api: GroupApi, old: Reflector) -> None:
        group_stops.pop(api.kind, threading.Event()).set()
        mirror.replace_groups(api.kind, [])  # served no more (or by another version, which relists)

    watches = GroupWatches(kube.serves, start_group_watch, stop_group_watch)
    runtime.group_watches = watches

    def discover() -> bool:
        try:
            changes = watches.discover()
        except KubeError as exc:
            runtime.discovery_error = str(exc)
            return False
        runtime.discovery_error = ""
        if changes:
            log.info("group APIs: %s (watching %s)", ", ".join(changes),
                     ", ".join(f"{k}/{v}" for k, v in watches.versions().items()) or "none")
        return True

    def run() -> None:
        backoff = 0.5
        while not discover():
            log.warning("API discovery failed (%s); retrying in %.1fs", runtime.discovery_error, backoff)
            if runtime.stop_event.wait(backoff):
                return
            backoff = min(backoff * 2, 30.0)
        runtime.core_reflectors = [reflector("nodes", "/api/v1/nodes", mirror.replace_nodes, apply_node),
                                   reflector("pods", "/api/v1/pods", mirror.replace_pods, apply_pod)]
        for r in runtime.core_reflectors:
            r.start()
        runtime.discovered = True
        threading.Thread(target=runtime.probe_api, name="api-probe", daemon=True,
                         args=(lambda: kube.request("GET", "/version", timeout=API_PROBE_SECONDS),)).start()
        if leadership is not None and elector is not None:
            elector.start()
            threading.Thread(target=leadership.resume_when_listed, name="leader-resume", daemon=True,
                             args=(lambda: all(r.synced.is_set() for r in runtime.core_reflectors),
                                   runtime.stop_event)).start()
        runtime.finish_start()
        while not runtime.stop_event.wait(settings.discovery_interval_seconds):
            if not discover():
                log.warning("API re-discovery failed (%s); keeping the current watches", runtime.discovery_error)
        for stop in group_stops.values():
            stop.set()

    runtime._starter = run
    return runtime


def _election(settings: Settings, kube: KubeClient, leadership: Callable[[], Leadership | None]) -> tuple[
        LeaderElector | None, ReleaseIntents | None, Callable[[], bool]]:
    """The elector and the release intents on its Lease (``--leader-election on``), and the predicate
    every write to the cluster is gated on (always True with a single replica)."""
    if settings.leader_election != "on":
        return None, None, lambda: True
    config = ElectionConfig(settings.lease_namespace or default_namespace(), settings.lease_name,
                            settings.lease_duration_seconds, settings.lease_renew_deadline_seconds,
                            settings.lease_retry_period_seconds)

    def eligible() -> bool:
        current = leadership()
        return current is not None and current.eligible()

    def gained() -> None:
        current = leadership()
        if current is not None:
            current.gained()

    elector = LeaderElector(KubeLeaseApi(kube), config, on_started=gained, eligible=eligible)
    intents = ReleaseIntents(elector, max_bytes=settings.release_intents_max_bytes)
    return elector, intents, elector.is_leader


def _if(allowed: Callable[[], bool], write: Callable[..., None]) -> Callable[..., None]:
    """``write`` (an Event, a wake-up patch, a status apply) only while ``allowed()``: only the leader
    tells users things; a standby's writes are dropped."""
    def gated(*args: Any) -> None:
        if allowed():
            write(*args)
    return gated


def build(settings: Settings) -> Runtime:
    return from_snapshot(settings) if settings.cluster_snapshot else from_api(settings)

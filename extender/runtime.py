"""Runtime: builds the extender's state and its I/O, starts and stops it.

Owns: wiring mirror + cache + ledger + engine to either the API server (credentials, discovery of
the group APIs it serves, one Reflector per watched collection, an Event recorder) or a snapshot
file; readiness; shutdown. Must not: serve HTTP or make scheduling decisions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender import snapshot
from extender.cache import FilterCache
from extender.cluster import ClusterMirror
from extender.config import Settings
from extender.engine import Binder, BindError, Engine
from extender.events import EventRecorder, PodWaker, log_sink
from extender.groups import COSCHEDULING_API, WORKLOAD_API
from extender.kube import KubeClient, KubeError
from extender.ledger import GangLedger
from extender.model import GroupKind, PodRecord
from extender.watching import Reflector, watch_or_gone

log = logging.getLogger(__name__)

SWEEP_INTERVAL_SECONDS = 1.0

GROUP_APIS = {GroupKind.WORKLOAD: WORKLOAD_API, GroupKind.COSCHEDULING: COSCHEDULING_API}


class KubeBinder:
    """Binder over the API server: ``pods/binding`` and pod reads."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        try:
            self.kube.bind(namespace, name, uid, node)
        except KubeError as exc:
            raise BindError(str(exc)) from None

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return self.kube.read_pod(namespace, name)
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
    reflectors: list[Reflector] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)
    discovery_error: str = ""
    _starter: Callable[[], None] | None = None

    def start(self) -> None:
        if self._starter is not None:
            threading.Thread(target=self._starter, name="discovery", daemon=True).start()
        threading.Thread(target=self._tick, name="gang-sweep", daemon=True).start()

    def _tick(self) -> None:
        """Expire overdue gangs and end back-offs even when no request arrives."""
        while not self.stop_event.wait(SWEEP_INTERVAL_SECONDS):
            try:
                self.ledger.sweep()
            except Exception:  # the sweeper must survive anything; the next tick retries
                log.exception("gang sweep failed")

    def synced(self) -> bool:
        """Whether the mirror holds a full list of everything watched (answers before that could admit
        a gang against capacity whose pods are not listed yet)."""
        if self.mode == "snapshot":
            return True
        return bool(self.reflectors) and all(r.synced.is_set() for r in self.reflectors)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready when every watch has listed at least once and is healthy (always, in snapshot mode)."""
        if self.mode == "snapshot":
            return True, {"mode": "snapshot"}
        watches = {r.name: {"synced": r.synced.is_set(), "healthy": r.healthy, "error": r.last_error}
                   for r in self.reflectors}
        ready = bool(watches) and all(w["synced"] and w["healthy"] for w in watches.values())
        detail: dict[str, Any] = {"mode": "api", "watches": watches}
        if self.discovery_error:
            detail["discovery_error"] = self.discovery_error
        return ready, detail

    def close(self) -> None:
        self.stop_event.set()
        self.engine.close()
        self.events.close()
        self.waker.close()


def _core(settings: Settings, binder_for: Callable[[ClusterMirror], Binder],
          sink: Callable[[dict[str, str], str, str, str], None],
          patch: Callable[[str, str, dict[str, str]], None]) -> tuple[
              ClusterMirror, FilterCache, GangLedger, Engine, EventRecorder, PodWaker]:
    mirror = ClusterMirror()
    cache = FilterCache(settings.cache_size, settings.cache_ttl_seconds)
    events = EventRecorder(sink)
    waker = PodWaker(patch)

    def on_event(pods: list[PodRecord], event_type: str, reason: str, message: str) -> None:
        events.record(pods, event_type, reason, message)

    ledger = GangLedger(mirror, timeout_seconds=settings.gang_timeout_seconds,
                        backoff_seconds=settings.gang_backoff_seconds, on_event=on_event, on_wake=waker.wake)
    engine = Engine(mirror, cache, ledger, binder_for(mirror), bind_parallelism=settings.bind_parallelism)
    return mirror, cache, ledger, engine, events, waker


def from_snapshot(settings: Settings) -> Runtime:
    assert settings.cluster_snapshot is not None
    objects = snapshot.read_objects(settings.cluster_snapshot)
    mirror, cache, ledger, engine, events, waker = _core(settings, snapshot.SnapshotBinder, log_sink,
                                                         lambda namespace, name, annotations: None)
    counts = snapshot.load_into(mirror, objects)
    log.info("loaded snapshot %s: %s", settings.cluster_snapshot,
             ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return Runtime(settings, mirror, cache, ledger, engine, events, waker, "snapshot")


def from_api(settings: Settings) -> Runtime:
    kube = KubeClient(settings.kubeconfig)
    mirror, cache, ledger, engine, events, waker = _core(settings, lambda _m: KubeBinder(kube), kube.create_event,
                                                         kube.annotate_pod)
    runtime = Runtime(settings, mirror, cache, ledger, engine, events, waker, "api")

    def reflector(name: str, path: str, replace: Callable[[Iterable[dict[str, Any]]], None],
                  apply: Callable[[str, dict[str, Any]], None]) -> Reflector:
        def safe_apply(kind: str, obj: dict[str, Any]) -> None:
            try:
                apply(kind, obj)
            except ValueError as exc:
                mirror.rejected_objects += 1
                meta = obj.get("metadata") or {}
                log.warning("ignoring malformed %s %s/%s: %s", name, meta.get("namespace"), meta.get("name"),
                            exc)
        return Reflector(name, lambda: kube.list(path), watch_or_gone(lambda rv: kube.watch(path, rv)),
                         replace, safe_apply, runtime.stop_event)

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

    def start() -> None:
        backoff = 0.5
        while not runtime.stop_event.is_set():
            try:
                served = {kind: api for kind, api in GROUP_APIS.items() if kube.serves(*api)}
                break
            except KubeError as exc:
                runtime.discovery_error = str(exc)
                log.warning("API discovery failed (%s); retrying in %.1fs", exc, backoff)
                runtime.stop_event.wait(backoff)
                backoff = min(backoff * 2, 30.0)
        else:
            return
        runtime.discovery_error = ""
        log.info("watching nodes, pods%s", "".join(f", {api[2]}.{api[0]}/{api[1]}" for api in served.values()))
        runtime.reflectors.append(reflector("nodes", "/api/v1/nodes", mirror.replace_nodes, apply_node))
        runtime.reflectors.append(reflector("pods", "/api/v1/pods", mirror.replace_pods, apply_pod))
        for kind, (group, version, resource) in served.items():
            runtime.reflectors.append(reflector(
                f"{resource}.{group}", f"/apis/{group}/{version}/{resource}",
                group_replace(kind), group_apply(kind)))
        for r in runtime.reflectors:
            r.start()

    runtime._starter = start
    return runtime


def build(settings: Settings) -> Runtime:
    return from_snapshot(settings) if settings.cluster_snapshot else from_api(settings)

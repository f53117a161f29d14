"""Builders for raw Kubernetes objects and extender requests, plus small in-memory test doubles.

Objects are plain camelCase dicts as the API server serves them (what the mirror and the engine read).
The doubles (``FakeClock``, ``FakeBinder``, ``EventLog``) and ``make_engine`` wire an engine the way
``extender.wiring.composition.compose`` does, with every I/O edge replaced.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.cluster.cache import FilterCache
from extender.cluster.groups import ANNOTATION_TIMEOUT, COSCHEDULING_API, COSCHEDULING_LABEL, WORKLOAD_API
from extender.cluster.mirror import ClusterMirror
from extender.cluster.reservations import Slot, consume_slot
from extender.engine.ports import ReleaseLog
from extender.engine.requests import BindArgs, FilterArgs
from extender.engine.verbs import Engine
from extender.errors import BindError
from extender.gangs import bind_modes
from extender.gangs.ledger import GangLedger
from extender.gangs.settings import GangSettings
from extender.model.cluster import PodRecord
from extender.model.gang import GangKey, GangStatus, GroupKind, GroupRef, TopologyConstraint

_uids = itertools.count(1)
_versions = itertools.count(1)  # every pod built is a new version, as the API server numbers them


def node(name: str, cpu: str = "4", memory: str = "16Gi", *, labels: Mapping[str, str] | None = None,
         taints: Sequence[Mapping[str, str]] | None = None, pods: str | None = None,
         unschedulable: bool = False, extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Node with ``status.allocatable`` cpu/memory (and ``pods`` when given)."""
    allocatable: dict[str, str] = {"cpu": cpu, "memory": memory, **(extra or {})}
    if pods is not None:
        allocatable["pods"] = pods
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def pod(name: str, uid: str | None = None, cpu: str | None = "1", memory: str | None = "1Gi", *,
        namespace: str = "default", workload: str | None = None, pod_group: str | None = None,
        replica: str | None = None, node: str | None = None, node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, str]] | None = None, labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None, phase: str | None = None,
        affinity: Mapping[str, Any] | None = None, scheduler_name: str | None = None) -> dict[str, Any]:
    """A Pod with one container requesting ``cpu``/``memory``.

    Gang links: with ``workload`` the pod has ``spec.workloadRef{name: workload, podGroup: pod_group,
    podGroupReplicaKey: replica}`` (Workload API); with only ``pod_group`` it carries the coscheduling
    label ``scheduling.x-k8s.io/pod-group: pod_group`` (scheduler-plugins PodGroup). ``uid`` defaults to
    a fresh unique value; ``metadata.resourceVersion`` is fresh for every pod built.
    """
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": requests}}],
    }
    all_labels = dict(labels or {})
    if workload is not None:
        ref = {"name": workload}
        if pod_group is not None:
            ref["podGroup"] = pod_group
        if replica is not None:
            ref["podGroupReplicaKey"] = replica
        spec["workloadRef"] = ref
    elif pod_group is not None:
        all_labels[COSCHEDULING_LABEL] = pod_group
    if node is not None:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if affinity:
        spec["affinity"] = dict(affinity)
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    metadata: dict[str, Any] = {"name": name, "namespace": namespace,
                                "uid": uid if uid is not None else f"uid-{name}-{next(_uids)}",
                                "resourceVersion": str(next(_versions)), "labels": all_labels}
    if annotations:
        metadata["annotations"] = dict(annotations)
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def workload(name: str, groups: Mapping[str, int | None], *, namespace: str = "default",
             timeout: float | None = None) -> dict[str, Any]:
    """A v1alpha1 Workload; ``groups`` maps pod group name -> gang minCount (None: a basic group)."""
    pod_groups = [
        {"name": group, "policy": {"basic": {}} if count is None else {"gang": {"minCount": count}}}
        for group, count in groups.items()
    ]
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if timeout is not None:
        metadata["annotations"] = {ANNOTATION_TIMEOUT: str(timeout)}
    return {"apiVersion": f"{WORKLOAD_API[0]}/{WORKLOAD_API[1]}", "kind": "Workload", "metadata": metadata,
            "spec": {"podGroups": pod_groups}}


def coscheduling_podgroup(name: str, min_member: int, timeout: int | None = None, *,
                          namespace: str = "default") -> dict[str, Any]:
    """A scheduler-plugins ``PodGroup`` (``scheduling.x-k8s.io/v1alpha1``)."""
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    return {"apiVersion": f"{COSCHEDULING_API[0]}/{COSCHEDULING_API[1]}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def filter_args(pod: Mapping[str, Any], names: Iterable[str]) -> FilterArgs:
    """ExtenderArgs with NodeNames (nodeCacheCapable: true)."""
    return FilterArgs(pod=dict(pod), node_names=list(names), nodes=None)


def bind_args(pod: Mapping[str, Any], node: str, *, uid: str | None = None) -> BindArgs:
    """ExtenderBindingArgs for ``pod`` (its own uid unless ``uid`` is given)."""
    meta = pod["metadata"]
    return BindArgs(meta["name"], meta.get("namespace") or "default",
                    meta.get("uid", "") if uid is None else uid, node)


# ------------------------------------------------------------------------------------ test doubles
class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeBinder:
    """In-memory ``extender.engine.ports.Binder``: records calls, fails chosen pods, can block every bind.

    ``fail[name] = message`` makes binding that pod raise ``BindError(message)``; ``gate.clear()`` makes
    binds block until ``gate.set()`` (``entered`` counts binds that reached the binder). With ``mirror``
    set it applies successful binds to it (``bind_locally``), like the snapshot binder.
    """

    mirror: ClusterMirror | None = None
    calls: list[tuple[str, str, str, str]] = field(default_factory=list)
    fail: dict[str, str] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # read_pod answers
    reads: list[tuple[str, str]] = field(default_factory=list)
    timeouts: dict[str, float] = field(default_factory=dict)  # pod name -> timeout of its last bind call
    gate: threading.Event = field(default_factory=threading.Event)
    entered: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.gate.set()

    def bind(self, namespace: str, name: str, uid: str, node: str, timeout: float = 10.0) -> None:
        self.entered.release()
        if not self.gate.wait(timeout=10):
            raise BindError("test binder gate never opened")
        with self.lock:
            self.calls.append((namespace, name, uid, node))
            self.timeouts[name] = timeout
        if name in self.fail:
            raise BindError(self.fail[name])
        if self.mirror is not None:
            self.mirror.bind_locally(uid, node)

    def read_pod(self, namespace: str, name: str, timeout: float = 10.0) -> Mapping[str, Any] | None:
        self.reads.append((namespace, name))
        return self.pods.get((namespace, name))

    @property
    def bound_names(self) -> list[str]:
        with self.lock:
            return sorted(call[1] for call in self.calls)


@dataclass
class EventLog:
    """Collects ``GangLedger`` events as (pod names, type, reason, message)."""

    events: list[tuple[tuple[str, ...], str, str, str]] = field(default_factory=list)

    def __call__(self, pods: list[PodRecord], event_type: str, reason: str, message: str) -> None:
        self.events.append((tuple(p.name for p in pods), event_type, reason, message))

    def reasons(self) -> list[str]:
        return [event[2] for event in self.events]

    def of(self, reason: str) -> list[tuple[tuple[str, ...], str, str, str]]:
        return [event for event in self.events if event[2] == reason]


@dataclass
class Harness:
    """An engine wired like ``composition.compose`` with fakes at every edge."""

    mirror: ClusterMirror
    cache: FilterCache
    ledger: GangLedger
    engine: Engine
    binder: FakeBinder
    clock: FakeClock
    events: EventLog
    woken: list[str] = field(default_factory=list)  # the names of the pods woken, in order
    statuses: list[tuple[GangKey, GangStatus]] = field(default_factory=list)  # group statuses told, in order

    def close(self) -> None:
        self.binder.gate.set()  # a test's held binds, on its own threads, make their Bindings and return

    def add(self, *objs: Mapping[str, Any]) -> None:
        """Feed Nodes, Pods, Workloads and PodGroups to the mirror (as the watches would); a Pod is also what
        the fake API server answers a read of it with (``FakeBinder.read_pod``)."""
        for obj in objs:
            kind = obj.get("kind")
            if kind == "Node":
                self.mirror.upsert_node(obj)
            elif kind == "Pod":
                self.mirror.upsert_pod(obj)
                metadata = obj["metadata"]
                self.binder.pods[(metadata.get("namespace") or "default", metadata["name"])] = dict(obj)
            elif kind == "Workload":
                self.mirror.upsert_group(GroupKind.WORKLOAD, obj)
            elif kind == "PodGroup":
                self.mirror.upsert_group(GroupKind.COSCHEDULING, obj)
            else:
                raise ValueError(f"unknown kind {kind!r}")


def wait_until(condition: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout} s")
        time.sleep(0.002)


def make_engine(*, timeout_seconds: float = 30.0, backoff_seconds: float = 10.0, cache_size: int = 4096,
                cache_ttl: float = 300.0, clock: FakeClock | None = None, binder: FakeBinder | None = None,
                bind_to_mirror: bool = False, bind_parallelism: int = 8,
                release_log: ReleaseLog | None = None, topology_levels: Sequence[str] = (),
                levels_for: Callable[[TopologyConstraint], tuple[str, ...]] | None = None,
                filter_gated: bool = False, hold_seconds: float = 29.0, max_held_binds: int | None = None,
                max_release_members: int | None = None, scheduler_names: frozenset[str] | None = None,
                may_act: Callable[[], bool] = lambda: True, real_clock: bool = False,
                lock: Any = None, time_left: Callable[[], float] = lambda: float("inf"),
                quorum_wait_seconds: float = 0.0) -> Harness:
    """Mirror + FilterCache + GangLedger(fake clock, event log) + Engine(fake binder); ``real_clock``: the
    ledger and the engine read ``time.monotonic`` instead (the harness's clock is then not theirs).
    ``quorum_wait_seconds``: 0, no filter waits for a gang being created (the tests of that wait set it)."""
    clock = clock or FakeClock()
    mirror = ClusterMirror(lock)
    cache = FilterCache(cache_size, cache_ttl)
    events = EventLog()
    woken: list[str] = []
    statuses: list[tuple[GangKey, GangStatus]] = []
    settings = GangSettings(timeout_seconds=timeout_seconds, backoff_seconds=backoff_seconds,
                            hold_seconds=hold_seconds, max_held_binds=max_held_binds,
                            max_release_members=max_release_members, topology_levels=tuple(topology_levels),
                            levels=levels_for)
    now: Callable[[], float] = time.monotonic if real_clock else clock
    ledger = GangLedger(mirror, settings, clock=now, on_event=events,
                        on_wake=lambda pods: woken.extend(p.name for p in pods),
                        on_status=lambda gang, status: statuses.append((gang, status)),
                        bind_mode=bind_modes.FilterGated if filter_gated else bind_modes.Barrier)
    binder = binder or FakeBinder()
    if bind_to_mirror:
        binder.mirror = mirror
    engine = Engine(mirror, cache, ledger, binder, bind_parallelism=bind_parallelism, clock=now,
                    release_log=release_log, scheduler_names=scheduler_names, may_act=may_act, time_left=time_left,
                    quorum_wait_seconds=quorum_wait_seconds)
    return Harness(mirror, cache, ledger, engine, binder, clock, events, woken, statuses)


def assert_demand_counted(ledger: GangLedger) -> None:
    """The registry's running count of held binds and reserved places is exact over its records, and so
    never below the barrier's budget's own count (which it stands in for while far from the limit)."""
    with ledger.lock:
        registry = ledger.registry
        exact = sum(len(record.holds) + record.reserved for record in registry.all())
        assert registry.demand_bound() == exact, (registry.demand_bound(), exact)
        assert registry.demand_bound() >= ledger.admission.held_demand()


def slots_of(ledger: GangLedger, gang: GangKey) -> tuple[tuple[str, dict[str, int]], ...]:
    """The gang's reserved slots as its record holds them (() when it holds none)."""
    record = ledger.record(gang)
    return record.reservation.slots if record is not None and record.reservation is not None else ()


@dataclass
class Reserved:
    """The gangs' slots, kept as the ledger's records keep them, and set on the mirror as its apply step does."""

    m: ClusterMirror
    slots: dict[GangKey, list[Slot]] = field(default_factory=dict)
    holds_off: dict[GangKey, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.m.listen(self)

    def set(self, gang: GangKey, slots: list[Slot], holds_off: int | None = None) -> None:
        self.slots[gang], self.holds_off[gang] = list(slots), holds_off
        self.m.set_reservation(gang, slots, holds_off)

    def member_gone(self, pod: PodRecord) -> None:
        pass

    def member_added(self, pod: PodRecord) -> None:
        pass

    def member_bound(self, pod: PodRecord) -> None:  # a member bound by another binder takes a reserved place
        assert pod.gang is not None
        if self.slots.get(pod.gang):
            self.use(pod.gang, pod.node_name, pod.requests)

    def use(self, gang: GangKey, node: str, requests: dict[str, int]) -> None:
        slots = list(self.slots.get(gang, []))
        consume_slot(slots, node, requests)
        self.set(gang, slots, self.holds_off.get(gang))


def gang_key(text: str, kind: GroupKind = GroupKind.COSCHEDULING) -> GangKey:
    """The key of gang ``namespace/name`` (a scheduler-plugins PodGroup unless ``kind`` says otherwise)."""
    namespace, _, name = text.partition("/")
    return GangKey(GroupRef(kind, namespace, name))

"""ClusterMirror: the in-memory view of the cluster the hot path reads (no I/O).

Owns: compact records of Nodes, Pods and group definitions, fed by watch events (or a snapshot);
per-node capacity in use (bound pods, pods this extender assumed while binding or holding them); an
index of pods by the gang they link to; for each unbound pod, the version the pod watch read and its
scheduling signature, so a filter of that same version reads the pod no more (``as_read``); what gangs
hold in reserve per node (``ReservedCapacity``, derived from the slots the gang ledger's records own and
set through ``set_reservation``); and a *generation* per node, bumped on every change that can alter
whether a pod fits that node, with a bounded change log so caches refresh only the nodes that changed.
It tells one listener (the gang ledger, ``listen``) of each gang member another binder bound and of each
member gone (deleted, re-created under its name, finished or terminating), under its lock. Must not:
call the API server, decide gang rules, keep gang state, or cache filter results.

Thread safety: every method that changes state or walks a collection takes ``self.lock`` (an RLock);
the point reads (``pod_by_uid``, ``pod_count``, ``member_count``, ``is_member``, ``free``,
``own_reservation``, ``used``, ``node_set_generation``) do not take it. Callers that need several
reads to be consistent, or any of the point reads consistent with other state, hold ``mirror.lock``
around them. Records are immutable and may be kept after the lock is released; the per-node dicts
returned by accessors are live and must be read under the lock (``capacity``: a copy, for slow readers).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from extender.cluster.capacity import Capacity, free_on, with_requests
from extender.cluster.cpu_order import CpuOrder
from extender.cluster.group_index import GroupIndex, ObjectKey
from extender.cluster.groups import GroupMeta
from extender.cluster.records import node_record, pod_record, resource_version, unreadable_gated_record
from extender.cluster.reservations import ReservedCapacity, Slot
from extender.cluster.signature import signature
from extender.model.cluster import NodeRecord, PodRecord
from extender.model.gang import GangKey, GangPolicy, GroupKind, GroupRef
from extender.model.quantity import CPU, Resources

CHANGE_LOG_SIZE = 8192
"""How many node changes a cache may lag behind and still refresh incrementally."""

MAX_AWAITED = 1024
"""Pods waited for at once (``wait_for_pod``)."""


class MemberListener(Protocol):
    """Who the mirror tells, under its lock, of the gang members whose change a gang's record must follow."""

    def member_bound(self, pod: PodRecord) -> None:
        """``pod`` was bound by another binder: not a bind this extender assumed, and not bound before."""

    def member_gone(self, pod: PodRecord) -> None:
        """``pod`` (as it was) is gone: deleted, re-created under its name with a new uid, finished or being
        deleted."""

    def member_added(self, pod: PodRecord) -> None:
        """``pod``, a gang member the mirror had not seen, was added."""


class _NoListener:
    def member_bound(self, pod: PodRecord) -> None:
        pass

    def member_added(self, pod: PodRecord) -> None:
        pass

    def member_gone(self, pod: PodRecord) -> None:
        pass


@dataclasses.dataclass(frozen=True, slots=True)
class MirrorRecords:
    """What ``ClusterMirror.copy_records`` copies (``ClusterMirror.fork`` builds a mirror from it)."""

    nodes: list[NodeRecord]
    pods: list[PodRecord]
    groups: GroupIndex
    assumed: dict[str, str]


class ClusterMirror:
    """The single owner of cluster state inside the extender process."""

    def __init__(self, lock: AbstractContextManager[Any] | None = None) -> None:
        """``lock``: a re-entrant lock to guard it (a test counts its acquisitions); default a new RLock."""
        self.lock: Any = lock if lock is not None else threading.RLock()
        self.generation = 0
        self.nodes: dict[str, NodeRecord] = {}
        self._node_generation: dict[str, int] = {}
        self._node_set_generation = 0  # bumped when nodes are added, removed, resized or relabelled
        self._changes: deque[tuple[int, str]] = deque(maxlen=CHANGE_LOG_SIZE)
        self._pods: dict[str, PodRecord] = {}
        # unbound pods as the watch read them: uid -> (resourceVersion, the record, its signature) (``as_read``)
        self._read: dict[str, tuple[str, PodRecord, bytes | None]] = {}
        self._uid_by_key: dict[tuple[str, str], str] = {}
        self._assumed: dict[str, str] = {}  # uid -> node, for binds not yet seen in the watch
        self._member_waiters: list[threading.Event] = []  # one per ``wait_for_members`` call under way
        self._used: dict[str, Resources] = {}  # node -> requests of the pods placed there; replaced, never changed
        self._free_cpu: dict[str, int] = {}  # known node -> allocatable cpu less its _used cpu
        self._members_listener: MemberListener = _NoListener()  # ``listen``
        self._awaited: dict[str, threading.Event] = {}  # uid -> set when that pod is upserted (``wait_for_pod``)
        self._members: dict[GangKey, set[str]] = {}
        self._tried: dict[str, GangKey] = {}  # unbound gang members kube-scheduler found no node for
        # The live pods carrying the quorum gate, less those whose gate this extender has removed (``gate_removed``)
        # while the watch does not show it yet: uid -> gang, and each gang's
        self._gated: dict[str, GangKey | None] = {}
        self._gated_members: dict[GangKey, set[str]] = {}
        self._gates_removed: set[str] = set()
        self._unreadable: set[str] = set()  # uids of pods kept only as ``unreadable_gated_record``
        self._groups = GroupIndex()  # group objects, the gang policies they define, their changes
        self._reservations = ReservedCapacity(self._touch)  # what gangs hold for members to come
        self._order = CpuOrder(lambda node, gang: self.free_cpu(node, gang) if node in self._free_cpu else None,
                               lambda: self.free_cpu_by_node(None))
        self.rejected_objects = 0  # objects too malformed to mirror (counted, logged by the caller)

    # ----------------------------------------------------------------------------------- changes
    def _touch(self, node: str) -> None:
        self.generation += 1
        self._node_generation[node] = self.generation
        self._changes.append((self.generation, node))
        self._order.stale(node)

    def changed_since(self, generation: int) -> set[str] | None:
        """Nodes changed after ``generation``; None if the change log no longer reaches back that far."""
        with self.lock:
            if generation >= self.generation:
                return set()
            if not self._changes or self._changes[0][0] > generation + 1:
                return None
            changed = set()
            for stamp, node in reversed(self._changes):
                if stamp <= generation:
                    break
                changed.add(node)
            return changed

    @property
    def node_set_generation(self) -> int:
        return self._node_set_generation

    # ------------------------------------------------------------------------------------- nodes
    def upsert_node(self, obj: Mapping[str, Any]) -> str:
        """Add or update a node; returns its name."""
        return self.upsert_node_record(node_record(obj))

    def upsert_node_record(self, record: NodeRecord) -> str:
        """``upsert_node`` of a node already read (a fork's, a what-if's)."""
        with self.lock:
            old = self.nodes.get(record.name)
            if old == record:
                return record.name
            self.nodes[record.name] = record
            self._free_cpu[record.name] = record.allocatable.get(CPU, 0) - self._used.get(record.name, {}).get(CPU, 0)
            if old is None or old.allocatable != record.allocatable or old.labels != record.labels:
                self._node_set_generation += 1  # what an empty cluster can hold (labels: topology domains)
            self._touch(record.name)
            return record.name

    def delete_node(self, name: str) -> None:
        with self.lock:
            if self.nodes.pop(name, None) is not None:
                del self._free_cpu[name]
                self._node_set_generation += 1
                self._touch(name)

    def replace_nodes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """A relist: the given nodes are the whole truth (``_relist``)."""
        self._relist(objs, self.upsert_node, lambda: self.nodes, self.delete_node)

    def _relist(self, objs: Iterable[Mapping[str, Any]], upsert: Callable[[Mapping[str, Any]], Hashable],
                existing: Callable[[], Iterable[Hashable]], delete: Callable[[Any], None]) -> None:
        """Apply ``objs`` as the whole truth of one collection: ``upsert`` each (it returns the object's
        key; a malformed one is skipped and counted), then ``delete`` every key of ``existing()`` not
        seen. Objects are applied one at a time (each under the lock), so a relist streaming pages
        from the API server does not block readers for its whole duration."""
        seen = set()
        for obj in objs:
            try:
                seen.add(upsert(obj))
            except ValueError:
                self.rejected_objects += 1
        with self.lock:
            for key in [key for key in existing() if key not in seen]:
                delete(key)

    # -------------------------------------------------------------------------------------- pods
    def _placement(self, pod: PodRecord) -> str:
        if pod.terminal:
            return ""
        return pod.node_name or self._assumed.get(pod.uid, "")

    def _account(self, pod: PodRecord, sign: int) -> None:
        node = self._placement(pod)
        if node:
            self._used[node] = with_requests(self._used.get(node), pod.requests, sign)  # a new dict (``Capacity``)
            if node in self._free_cpu:
                self._free_cpu[node] -= sign * pod.requests.get(CPU, 0)
            self._touch(node)
        if pod.quorum_gated and not pod.terminal:
            if sign < 0:
                self._forget_gate(pod.uid)
            elif pod.uid not in self._gates_removed:  # an event older than the removal: not gated any more
                self._gated[pod.uid] = pod.gang
                if pod.gang is not None:
                    self._gated_members.setdefault(pod.gang, set()).add(pod.uid)
        elif sign > 0 and self._gates_removed:
            self._gates_removed.discard(pod.uid)  # the watch shows the gate gone
        if pod.gang is not None and not pod.terminal:
            members = self._members.setdefault(pod.gang, set())
            if pod.unschedulable and sign > 0:
                self._tried[pod.uid] = pod.gang
            elif pod.unschedulable:
                self._tried.pop(pod.uid, None)
            if sign > 0:
                members.add(pod.uid)
            else:
                members.discard(pod.uid)
                if not members:
                    del self._members[pod.gang]

    def upsert_pod(self, obj: Mapping[str, Any]) -> PodRecord:
        """Add or update a pod. Raises RecordError (a ValueError) if it is malformed: it is then kept only as
        ``records.unreadable_gated_record`` while it carries the quorum gate, and forgotten once it does not."""
        try:
            record = pod_record(obj)
        except ValueError:
            stand_in = unreadable_gated_record(obj)
            with self.lock:
                if stand_in is not None:
                    self._unreadable.add(stand_in.uid)
                    self.upsert_pod_record(stand_in)
                else:
                    metadata = obj.get("metadata")
                    uid = str(metadata.get("uid") or "") if isinstance(metadata, dict) else ""
                    if uid in self._unreadable:
                        self.delete_pod(uid)
            raise
        version = resource_version(obj) if not record.node_name and not record.terminal else ""
        try:
            signed = signature(obj) if version else None  # outside the lock, as the record was
        except (TypeError, ValueError, AttributeError):  # a spec the record reads but the signature cannot
            version = ""
        with self.lock:
            self._unreadable.discard(record.uid)
            stored = self.upsert_pod_record(record)
            if version:
                self._read[record.uid] = (version, self._pods[record.uid], signed)  # the record kept, if equal
            return stored

    def as_read(self, uid: str, version: str) -> tuple[PodRecord, bytes | None] | None:
        """The record and scheduling signature (``cluster.signature``) the pod watch read from version
        ``version`` (``metadata.resourceVersion``) of unbound pod ``uid``, while that is the version the mirror
        holds; None otherwise. The pod in a filter request is the same object at the same version (kube-scheduler
        sends its informer's copy), so it need not be read again; a request that only claims the version is
        answered for the pod the API server has."""
        read = self._read.get(uid) if version else None
        return (read[1], read[2]) if read is not None and read[0] == version else None

    def upsert_pod_record(self, record: PodRecord) -> PodRecord:
        """``upsert_pod`` of a pod already read (a fork's, a what-if's)."""
        with self.lock:
            self._read.pop(record.uid, None)  # (``upsert_pod`` sets it again when it read this record)
            old = self._pods.get(record.uid)
            if old == record:
                return record
            if old is not None:
                self._account(old, -1)
            else:
                stale = self._uid_by_key.get(record.key)
                if stale is not None and stale != record.uid:  # re-created under the same name
                    self.delete_pod(stale)
            if record.node_name and self._assumed.get(record.uid) == record.node_name:
                del self._assumed[record.uid]  # the bind we made is now visible
            elif (record.node_name and record.gang is not None and not record.terminal
                  and record.uid not in self._assumed and not (old is not None and old.node_name)):
                self._members_listener.member_bound(record)  # by another binder (filter-gated, foreign): told once
            self._pods[record.uid] = record
            self._uid_by_key[record.key] = record.uid
            self._account(record, +1)
            if old is not None and old.gang is not None and not old.terminal and record.terminal:
                self._members_listener.member_gone(old)  # finished, or being deleted
            elif old is None and record.gang is not None and not record.terminal:
                self._members_listener.member_added(record)
                for waiter in self._member_waiters:  # ``wait_for_members`` (usually none)
                    waiter.set()
            if self._awaited:
                awaited = self._awaited.pop(record.uid, None)
                if awaited is not None:
                    awaited.set()
            return record

    def delete_pod(self, uid: str) -> None:
        with self.lock:
            self._unreadable.discard(uid)
            self._gates_removed.discard(uid)
            self._read.pop(uid, None)
            old = self._pods.pop(uid, None)
            if old is None:
                return
            self._account(old, -1)
            self._assumed.pop(uid, None)
            if self._uid_by_key.get(old.key) == uid:
                del self._uid_by_key[old.key]
            if old.gang is not None and not old.terminal:
                self._members_listener.member_gone(old)

    def replace_pods(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """A relist of pods (``_relist``)."""
        self._relist(objs, self._relisted_pod, lambda: self._pods, self.delete_pod)

    def _relisted_pod(self, obj: Mapping[str, Any]) -> str:
        """``upsert_pod`` in a relist: a malformed pod kept as its stand-in counts as seen (and as rejected)."""
        try:
            return self.upsert_pod(obj).uid
        except ValueError:
            metadata = obj.get("metadata")
            uid = str(metadata.get("uid") or "") if isinstance(metadata, dict) else ""
            if uid and uid in self._unreadable:
                self.rejected_objects += 1
                return uid
            raise

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        with self.lock:
            uid = self._uid_by_key.get((namespace, name))
            return self._pods.get(uid) if uid else None

    def pod_by_uid(self, uid: str) -> PodRecord | None:
        return self._pods.get(uid)

    def wait_for_pod(self, uid: str, timeout: float) -> PodRecord | None:
        """The pod ``uid``, waiting up to ``timeout`` seconds for the pod watch to deliver it (do not hold the
        lock when calling this); None if it has not come. At most ``MAX_AWAITED`` uids are waited for at
        once (beyond that: no wait)."""
        with self.lock:
            pod = self._pods.get(uid)
            if pod is not None or timeout <= 0 or (uid not in self._awaited and len(self._awaited) >= MAX_AWAITED):
                return pod
            event = self._awaited.setdefault(uid, threading.Event())
        event.wait(timeout)
        with self.lock:
            if self._awaited.get(uid) is event:
                del self._awaited[uid]
            return self._pods.get(uid)

    def wait_for_members(self, gang: GangKey, count: int, timeout: float) -> bool:
        """Whether ``gang`` has ``count`` members, waiting up to ``timeout`` seconds for the pod watch to deliver
        them (do not hold the lock when calling this). Each waiter has its own event, set under the lock when
        any member is added and cleared under it after each count: no addition is missed."""
        deadline = time.monotonic() + timeout
        event = threading.Event()
        with self.lock:
            if self.member_count(gang) >= count:
                return True
            if timeout <= 0:
                return False
            self._member_waiters.append(event)
        try:
            while (left := deadline - time.monotonic()) > 0:
                event.wait(left)
                with self.lock:
                    if self.member_count(gang) >= count:
                        return True
                    event.clear()
            return False
        finally:
            with self.lock:
                self._member_waiters.remove(event)

    def placement(self, uid: str) -> str:
        """The node a pod is bound or assumed to, or ""."""
        with self.lock:
            pod = self._pods.get(uid)
            return self._placement(pod) if pod else ""

    def listen(self, listener: MemberListener) -> None:
        """Tell ``listener`` (under the lock, from ``upsert_pod`` and ``delete_pod``) of gang members bound by
        another binder and of gang members gone."""
        self._members_listener = listener

    def tried_gangs(self) -> set[GangKey]:
        """Gangs with an unbound member kube-scheduler tried and found no node for."""
        with self.lock:
            return set(self._tried.values())

    def _forget_gate(self, uid: str) -> None:
        gang = self._gated.pop(uid, None)
        if gang is not None:
            members = self._gated_members.get(gang)
            if members is not None:
                members.discard(uid)
                if not members:
                    del self._gated_members[gang]

    def quorum_gated(self) -> list[PodRecord]:
        """The live pods carrying the quorum gate (``model.cluster.QUORUM_GATE``), gang members or not, but for
        those whose gate was removed (``gate_removed``)."""
        with self.lock:
            return [self._pods[uid] for uid in self._gated]

    def has_quorum_gated(self, gang: GangKey) -> bool:
        """Whether a live member of ``gang`` carries the quorum gate (``quorum_gated``)."""
        return gang in self._gated_members

    def quorum_gated_members(self, gang: GangKey) -> list[PodRecord]:
        """The live members of ``gang`` carrying the quorum gate (``quorum_gated``)."""
        with self.lock:
            return [self._pods[uid] for uid in self._gated_members.get(gang, ())]

    def gate_removed(self, uid: str) -> None:
        """The quorum gate of pod ``uid`` was removed: not gated from now, whatever older watch events still say
        (until one shows it without the gate, or it is deleted)."""
        with self.lock:
            pod = self._pods.get(uid)
            if pod is not None and pod.quorum_gated:  # else the watch already shows it
                self._gates_removed.add(uid)
                self._forget_gate(uid)

    def running_pods(self) -> list[PodRecord]:
        """Pods bound or assumed to a node and not terminal (preemption's candidates)."""
        return [p for p in self._pods.values() if self._placement(p)]

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    # ------------------------------------------------------------------------- assumed placements
    def assume(self, uid: str, node: str) -> None:
        """Account a pod on ``node`` before the API shows it there (held or being bound)."""
        with self.lock:
            pod = self._pods.get(uid)
            if pod is None or pod.node_name:
                return
            self._account(pod, -1)
            self._assumed[uid] = node
            self._account(pod, +1)

    def forget(self, uid: str) -> None:
        """Undo ``assume`` (bind failed or hold released without binding)."""
        with self.lock:
            pod = self._pods.get(uid)
            if uid not in self._assumed:
                return
            if pod is not None:
                self._account(pod, -1)
            del self._assumed[uid]
            if pod is not None:
                self._account(pod, +1)

    def bind_locally(self, uid: str, node: str) -> None:
        """Snapshot mode: make a bind permanent as if the watch had reported it."""
        with self.lock:
            pod = self._pods.get(uid)
            if pod is None:
                return
            self._account(pod, -1)
            self._assumed.pop(uid, None)
            bound = dataclasses.replace(pod, node_name=node)
            self._read.pop(uid, None)
            self._pods[uid] = bound
            self._account(bound, +1)

    # ------------------------------------------------------------------------------------ groups
    def upsert_group(self, kind: GroupKind, obj: Mapping[str, Any]) -> ObjectKey:
        """Add or update a group object; returns its (namespace, name)."""
        parsed = GroupIndex.parse(kind, obj)  # outside the lock the verbs take
        with self.lock:
            return self._groups.apply(parsed)

    def delete_group(self, kind: GroupKind, namespace: str, name: str) -> None:
        with self.lock:
            self._groups.delete(kind, namespace, name)

    def group_meta(self, group: GroupRef) -> GroupMeta | None:
        """Where the group object is served and what its status says now (None: no object)."""
        with self.lock:
            return self._groups.meta(group)

    def take_policy_changes(self) -> set[GroupRef]:
        """Groups that appeared or whose gang policy changed since the last call (each reported once)."""
        with self.lock:
            return self._groups.take_changes()

    def replace_groups(self, kind: GroupKind, objs: Iterable[Mapping[str, Any]]) -> None:
        """A relist of one kind of group object (``_relist``)."""
        self._relist(objs, lambda obj: self.upsert_group(kind, obj), lambda: self._groups.keys(kind),
                     lambda key: self.delete_group(kind, *key))

    def gang_policy(self, gang: GangKey) -> tuple[bool, GangPolicy | None]:
        """(group definition exists, its gang policy or None for a non-gang group)."""
        with self.lock:
            if gang.group.kind is GroupKind.ANNOTATION:
                policies = [p.link_policy for p in self.members(gang) if p.link_policy]
                if not policies:
                    return False, None
                return True, max(policies, key=lambda p: p.min_count)
            if not self._groups.defines(gang.group):
                return False, None
            return True, self._groups.policy(gang.group)

    def members(self, gang: GangKey) -> list[PodRecord]:
        """Non-terminal member pods of a gang, in a stable order."""
        with self.lock:
            uids = self._members.get(gang, ())
            return sorted((self._pods[uid] for uid in uids), key=lambda p: (p.name, p.uid))

    def member_label(self, gang: GangKey, key: str) -> str | None:
        """The value of label ``key`` on the node of some bound or assumed member of ``gang`` (None: no
        such member's node has it). Unordered, and stops at the first: cheap for a placed gang."""
        with self.lock:
            for uid in self._members.get(gang, ()):
                node = self.nodes.get(self._placement(self._pods[uid]))
                if node is not None and key in node.labels:
                    return node.labels[key]
            return None

    def member_count(self, gang: GangKey) -> int:
        return len(self._members.get(gang, ()))

    def is_member(self, gang: GangKey, uid: str) -> bool:
        return uid in self._members.get(gang, ())

    def find_gangs(self, namespace: str, name: str, pod_group: str | None = None,
                   replica: str | None = None) -> list[GangKey]:
        """Gangs of group ``namespace/name`` (any kind) that have members or a group object, sorted."""
        with self.lock:
            found = {g for g in self._members if g.group.namespace == namespace and g.group.name == name}
            found |= {GangKey(ref) for ref in self._groups.groups() if ref.namespace == namespace and ref.name == name}
        return sorted(g for g in found if (pod_group is None or g.group.pod_group == pod_group)
                      and (replica is None or g.replica == replica))

    def gangs(self) -> Iterator[GangKey]:
        with self.lock:
            return iter(list(self._members))

    # ------------------------------------------------------------------------------------ forks
    def copy_records(self) -> MirrorRecords:
        """The nodes, pods, group objects and assumed placements as they are now, copied in one short hold
        of the lock (the records themselves are shared: immutable), for ``fork`` after it is released."""
        with self.lock:
            return MirrorRecords(list(self.nodes.values()), list(self._pods.values()), self._groups.copy(),
                                 dict(self._assumed))

    @classmethod
    def fork(cls, records: MirrorRecords) -> ClusterMirror:
        """A new mirror holding ``records`` (``copy_records``): what-if questions change it, never this one.
        It has no reservations: whoever asks sets those its question needs."""
        mirror = cls()
        for node in records.nodes:
            mirror.upsert_node_record(node)
        mirror._groups = records.groups
        mirror._assumed = dict(records.assumed)
        for pod in records.pods:
            mirror.upsert_pod_record(pod)
        return mirror

    def assumed(self) -> dict[str, str]:
        """Pods accounted on a node the API server does not show them on yet (uid -> node): held or being bound."""
        with self.lock:
            return dict(self._assumed)

    # ------------------------------------------------------------------------------ reservations
    def set_reservation(self, gang: GangKey, slots: Iterable[Slot], holds_off: int | None = None) -> None:
        """What ``gang`` holds in reserve is now ``slots`` (none: nothing); ``holds_off``: a draining one, kept
        as busy capacity frees, behind admitted reservations, from pods of that priority or lower
        (``ReservedCapacity``). The gang ledger's apply step is the only caller: its records own the slots."""
        with self.lock:
            self._reservations.set(gang, slots, holds_off)

    def reservation(self, gang: GangKey) -> dict[str, Resources]:
        """What ``gang`` holds in reserve on each node."""
        with self.lock:
            return self._reservations.of(gang)

    def reserved_nodes(self, gang: GangKey) -> frozenset[str]:
        """The nodes where ``gang`` holds a reservation."""
        with self.lock:
            return self._reservations.nodes(gang)

    # ---------------------------------------------------------------------------------- capacity
    def free(self, node: str, for_gang: GangKey | None, *, include_own_reservation: bool = True,
             priority: int | None = None) -> Resources:
        """Allocatable less used less what reservations keep from ``for_gang`` (``ReservedCapacity.take_from``:
        a draining one only beyond admitted ones, and not from a pod of higher ``priority``; None: any pod);
        ``include_own_reservation=False`` subtracts the gang's own reservation too (what is free outside it)."""
        return free_on(self.nodes[node], self._used.get(node), self._reservations, for_gang, include_own_reservation,
                       priority)

    def capacity(self, for_gang: GangKey | None) -> Capacity:
        """What ``free(name, for_gang)`` would answer now, as a copy to read after the lock is released."""
        with self.lock:
            return Capacity(for_gang, dict(self._used), self._reservations.copy())

    def free_cpu_by_node(self, for_gang: GangKey | None) -> dict[str, int]:
        """Every node's ``free(node, for_gang).get("cpu", 0)`` at once, without building each node's free
        resources: the admission planner orders all nodes by it and builds those only for nodes it visits."""
        with self.lock:
            cpu = dict(self._free_cpu)
            for name, _by_gang in self._reservations.by_node():
                if name in cpu:
                    cpu[name] = self._reservations.cpu_left(name, cpu[name], for_gang)
            return cpu

    def free_cpu(self, node: str, for_gang: GangKey | None) -> int:
        """``free(node, for_gang).get("cpu", 0)`` without building the node's free resources (KeyError for a
        node it does not know); read it under the lock."""
        return self._reservations.cpu_left(node, self._free_cpu[node], for_gang)

    def node_count(self) -> int:
        """How many nodes ``free_cpu`` knows (every node mirrored)."""
        return len(self._free_cpu)

    def nodes_by_free_cpu(self, for_gang: GangKey | None, least: int) -> Iterator[str]:
        """Node names in the order of ``free_cpu_by_node(for_gang)`` (cpu, then name), from ``least`` cpu up;
        call and consume it under the lock."""
        return self._order.walk(for_gang, self._reservations.nodes(for_gang) if for_gang is not None else (), least)

    def own_reservation(self, node: str, gang: GangKey) -> Resources | None:
        return self._reservations.on(node).get(gang)

    def used(self, node: str) -> Resources:
        return self._used.get(node, {})


"""Reporting: what the ledger tells users, routed to the objects it is about and rendered from the mirror.

Owns: the ledger's ``on_event`` and ``on_status`` callbacks (``GangReports``): which object an Event
about a gang goes on (``gang_event_targets``: its Workload or PodGroup, else its member with the first
name; reasons about one member on that member), which groups get a status, and rendering a group's
status body from the mirror and applying it (``status_writer``), where an HTTP 409 from the API server
means another field manager owns that status and 404 that the object is gone; each known gang's
published explanation and the object it goes on (``explanations``, for ``kube.publishing``); the
leader's ledger state and the object it goes on (``ledger_state``). Must not:
decide gang rules, queue or rate-limit writes (``kube.events``, ``kube.status`` and ``kube.publishing``
do), or block the ledger.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from extender.cluster.groups import event_reference, status_apply
from extender.cluster.mirror import ClusterMirror
from extender.errors import KubeError
from extender.gangs import explanation
from extender.gangs.ledger import GangLedger
from extender.kube.events import EventRecorder, pod_reference
from extender.kube.publishing import LEDGER_ANNOTATION, Published
from extender.kube.status import CONFLICT, SENT, SKIPPED, StatusWriter, Write
from extender.model.cluster import PodRecord
from extender.model.gang import GangKey, GangStatus, GroupKind, GroupRef

MEMBER_EVENTS = frozenset({"GangBindFailed"})
"""Reasons about one member, written on each pod named; every other gang Event is about the gang and is
written once, on its group object (``gang_event_targets``)."""

STATUS_KINDS = (GroupKind.PODGROUP, GroupKind.COSCHEDULING)
"""Group kinds whose status gang-extender writes (a Workload has none of its own to write)."""


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


class GangReports:
    """The ledger's ``on_event`` and ``on_status``: hand each to the writer of the object it is about."""

    def __init__(self, mirror: ClusterMirror, events: EventRecorder, status: StatusWriter | None) -> None:
        self.mirror, self.events, self.status = mirror, events, status

    def on_event(self, pods: list[PodRecord], event_type: str, reason: str, message: str) -> None:
        if reason in MEMBER_EVENTS:
            self.events.record(pods, event_type, reason, message)
        else:
            self.events.record_on(gang_event_targets(self.mirror, pods), event_type, reason, message)

    def on_status(self, gang: GangKey, value: GangStatus) -> None:
        if self.status is not None and not gang.replica and gang.group.kind in STATUS_KINDS:
            self.status.publish(gang.group, value)


def gang_target(mirror: ClusterMirror, gang: GangKey) -> dict[str, str] | None:
    """The object a gang's Events go on: its group object, else its member with the first name (None:
    neither exists)."""
    with mirror.lock:
        target = event_reference(gang.group, mirror.group_meta(gang.group))
        if target is not None:
            return target
        members = mirror.members(gang)
        return pod_reference(min(members, key=lambda p: p.name)) if members else None


def explained(ledger: GangLedger, mirror: ClusterMirror, gang: GangKey,
              now: Callable[[], float] = time.time) -> Published | None:
    """The published form of ``gang`` and the object it goes on (None: it has neither a group object
    nor a member), computed from facts copied under the lock (``LedgerView.explain``)."""
    target = gang_target(mirror, gang)
    if target is None:
        return None
    answer = ledger.view.explain(gang)
    value = explanation.compact(answer, now())
    return Published(str(gang), target, value, explanation.steady(value), explanation.summary(answer),
                     complete=answer.get("state") == "Complete")


MAX_STATE_BYTES = 200_000
"""The most JSON the published ledger state may take (an Event's annotations hold 256 KiB in all)."""


def ledger_state(ledger: GangLedger, namespace: str, scheduler_names: Sequence[str],
                 now: Callable[[], float] = time.time) -> Published:
    """The leader's ``LedgerState`` as one ``GangState`` Event on its namespace object, in its namespace
    (``kubectl gang fit`` reads it). Past ``MAX_STATE_BYTES`` the gangs last in the state are left out and
    the form says it is incomplete (``fit`` says so)."""
    state = ledger.view.state(now(), scheduler_names).to_json()
    gangs = state["gangs"]
    size = len(json.dumps(state, separators=(",", ":")))
    while gangs and size > MAX_STATE_BYTES:
        size -= len(json.dumps(gangs.pop(), separators=(",", ":"))) + 1
        state["complete"] = False
    steady = {k: v for k, v in state.items() if k != "publishedAt"}
    waiting = sum(1 for g in gangs if g.get("waitingSince") is not None
                  and (g.get("reserved") or {}).get("purpose") != "admitted")
    reserving = sum(1 for g in gangs if g.get("reserved"))
    target = {"apiVersion": "v1", "kind": "Namespace", "namespace": namespace, "name": namespace}
    return Published("ledger-state", target, state, steady,
                     f"gang-extender's ledger: {waiting} gang(s) waiting their turn, {reserving} holding a "
                     "reservation (kubectl gang fit reads this Event)", annotation=LEDGER_ANNOTATION)

"""What ``kubectl gang`` knows of each gang, assembled from objects read from the API server (pure).

Owns: turning group objects (parsed by ``cluster.groups``), pods (their gang link: ``groups.pod_link``)
and the Events gang-extender writes (its gang Events, and the ``GangState`` Events whose annotation
carries the leader's published explanation: ``kube.publishing``) into one ``GangRow`` per gang: its
source API, minCount, members existing and bound, state and last reason. Must not: read from the API
server (``main`` does) or print (``render`` does).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from extender.cluster.groups import GROUP_PARSERS, group_meta, pod_link
from extender.errors import GroupError
from extender.kube.publishing import ANNOTATION, REASON
from extender.model.gang import GangKey, GroupKind, GroupRef

COMPONENT = "gang-extender"
TERMINAL_PHASES = ("Succeeded", "Failed")
ANNOTATION_SOURCE = "annotations"


@dataclass(frozen=True, slots=True)
class GroupObject:
    """One group object as listed: its kind and raw JSON (its ``apiVersion`` set)."""

    kind: GroupKind
    obj: Mapping[str, Any]


@dataclass
class GangRow:
    """One gang as ``kubectl gang`` shows it."""

    key: GangKey
    source: str = ""                 # "Workload scheduling.k8s.io/v1alpha1", ..., "annotations"
    min_count: int | None = None
    existing: int = 0
    bound: int = 0
    has_object: bool = False
    condition: str = ""              # what the group object's own status says (condition reason / phase)
    problem: str = ""                # a malformed group object or member annotation
    reason: str = ""                 # the last gang-extender Event: "Reason: message"
    reason_at: float = 0.0
    published: dict[str, Any] | None = None   # the leader's latest GangState form
    published_version: int = -1               # its Event's resourceVersion (set by the API server)
    pods: list[str] = field(default_factory=list)

    @property
    def why(self) -> str:
        """The last word on the gang: a problem, else the leader's published reason when it is newer
        than gang-extender's last Event about the gang (Events repeat only when their reason changes),
        else that Event (``Reason: message``)."""
        if self.problem:
            return self.problem
        published = self.published or {}
        said = str(published.get("waiting") or (published.get("shortfall") or {}).get("reason") or "")
        if said and float(published.get("publishedAt") or 0) + 1 >= self.reason_at:
            return said
        return self.reason

    @property
    def state(self) -> str:
        """Bound once minCount members are bound (the pods say so); else what the leader published;
        else what the object or the pods say."""
        if self.min_count is not None and self.existing and self.bound >= self.min_count:
            return "Bound"
        if self.problem:
            return "Invalid"
        if self.published and self.published.get("state"):
            return str(self.published["state"])
        if not self.has_object and self.key.group.kind is not GroupKind.ANNOTATION:
            return "GroupMissing"
        if not self.existing:
            return "NoMembers"
        return "Waiting" if self.reason else "Pending"


def _order(event: Mapping[str, Any]) -> tuple[float, int]:
    """Events in the order they happened: their time (whole seconds), then their resourceVersion."""
    version = str((event.get("metadata") or {}).get("resourceVersion") or "0")
    return timestamp(event), int(version) if version.isdigit() else 0


def timestamp(event: Mapping[str, Any]) -> float:
    """When an Event last happened (eventTime, lastTimestamp, firstTimestamp, creation), seconds since
    the epoch; 0 when it says nothing readable."""
    metadata = event.get("metadata") or {}
    for raw in (event.get("eventTime"), event.get("lastTimestamp"), event.get("firstTimestamp"),
                metadata.get("creationTimestamp")):
        if isinstance(raw, str) and raw:
            try:
                return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0


def _source(kind: GroupKind, api_version: str) -> str:
    """The source API as shown: "<Kind> <apiVersion>", or "annotations"."""
    if kind is GroupKind.ANNOTATION:
        return ANNOTATION_SOURCE
    name = "Workload" if kind is GroupKind.WORKLOAD else "PodGroup"
    return f"{name} {api_version}" if api_version else name


def published_key(form: Mapping[str, Any]) -> GangKey | None:
    """The gang a published form is about (its kind, namespace, name, podGroup, replica)."""
    try:
        ref = GroupRef(GroupKind(str(form.get("kind"))), str(form["namespace"]), str(form["name"]),
                       str(form.get("podGroup") or ""))
    except (KeyError, ValueError):
        return None
    return GangKey(ref, str(form.get("replica") or ""))


def _read_groups(groups: Iterable[GroupObject], rows: dict[GangKey, GangRow]) -> dict[GroupRef, GangRow | None]:
    """A row per gang of each group object (None: a group that is no gang, e.g. a ``basic`` pod group)."""
    by_ref: dict[GroupRef, GangRow | None] = {}
    for item in groups:
        api_version = str(item.obj.get("apiVersion") or "")
        meta = group_meta(item.kind, item.obj)
        status = meta.condition.reason if meta.condition else meta.phase
        try:
            parsed = GROUP_PARSERS[item.kind](item.obj)
        except GroupError as exc:
            metadata = item.obj.get("metadata") or {}
            ref = GroupRef(item.kind, str(metadata.get("namespace") or "default"), str(metadata.get("name") or ""))
            row = rows[GangKey(ref)] = GangRow(GangKey(ref), _source(item.kind, api_version), has_object=True,
                                               problem=str(exc))
            by_ref[ref] = row
            continue
        for ref, policy in parsed.items():
            if policy is None:
                by_ref[ref] = None
                continue
            row = GangRow(GangKey(ref), _source(item.kind, api_version), policy.min_count, has_object=True,
                          condition=status)
            rows[row.key] = by_ref[ref] = row
    return by_ref


def _read_pods(pods: Iterable[Mapping[str, Any]], rows: dict[GangKey, GangRow],
               by_ref: dict[GroupRef, GangRow | None]) -> dict[tuple[str, str], GangKey]:
    """Count each gang's members (not yet terminated) and their binds; (namespace, pod) -> gang."""
    of_pod: dict[tuple[str, str], GangKey] = {}
    for pod in pods:
        metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
        try:
            link = pod_link(pod)
        except GroupError:
            continue
        if link is None or by_ref.get(link.gang.group, False) is None:  # no gang, or a group that is no gang
            continue
        gang = link.gang
        of_pod[(gang.group.namespace, str(metadata.get("name") or ""))] = gang
        row = rows.get(gang)
        if row is None:
            template = by_ref.get(gang.group)
            row = rows[gang] = GangRow(gang, template.source if template else _source(gang.group.kind, ""),
                                       template.min_count if template else None,
                                       has_object=template is not None,
                                       condition=template.condition if template else "")
            if gang.replica and template is not None and not template.existing:
                rows.pop(template.key, None)  # the Workload's gangs are its replicas
        if link.policy is not None:
            row.min_count = link.policy.min_count
        if status.get("phase") in TERMINAL_PHASES:
            continue
        row.existing += 1
        row.pods.append(str(metadata.get("name") or ""))
        if (pod.get("spec") or {}).get("nodeName"):
            row.bound += 1
    return of_pod


def _about(event: Mapping[str, Any], rows: dict[GangKey, GangRow],
           of_pod: Mapping[tuple[str, str], GangKey]) -> list[GangRow]:
    """The gangs a gang-extender Event is about: a member's gang, or the gangs of its group object."""
    involved = event.get("involvedObject") or {}
    namespace, name, kind = str(involved.get("namespace") or ""), str(involved.get("name") or ""), involved.get("kind")
    if kind == "Pod":
        gang = of_pod.get((namespace, name))
        return [rows[gang]] if gang in rows else []
    group = str(involved.get("apiVersion") or "").partition("/")[0]
    wanted = GroupKind.WORKLOAD if kind == "Workload" else (
        GroupKind.COSCHEDULING if group == "scheduling.x-k8s.io" else GroupKind.PODGROUP)
    found = [r for k, r in rows.items()
             if k.group.kind is wanted and k.group.namespace == namespace and k.group.name == name]
    message = str(event.get("message") or "")
    named = [r for r in found if f"gang {r.key}" in message or f"gang {r.key}:" in message]
    return named or found


def _read_events(events: Iterable[Mapping[str, Any]], rows: dict[GangKey, GangRow],
                 of_pod: Mapping[tuple[str, str], GangKey]) -> None:
    """The last gang Event of each gang, and the newest published form (``GangState``)."""
    for event in sorted(events, key=_order):
        source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
        if source != COMPONENT:
            continue
        at = timestamp(event)
        if event.get("reason") == REASON:
            raw = ((event.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
            try:
                form = json.loads(raw) if isinstance(raw, str) else None
            except ValueError:
                form = None
            key = published_key(form) if isinstance(form, dict) else None
            if (isinstance(form, dict) and key is not None and key in rows and _usable(form)
                    and _on_the_gang(event, key, of_pod)):
                version = _version(event)
                if version >= rows[key].published_version:  # the server's order, not the form's clock
                    rows[key].published, rows[key].published_version = form, version
            continue
        for row in _about(event, rows, of_pod):
            if at >= row.reason_at:
                row.reason, row.reason_at = f"{event.get('reason')}: {event.get('message') or ''}", at


def _version(event: Mapping[str, Any]) -> int:
    version = str((event.get("metadata") or {}).get("resourceVersion") or "0")
    return int(version) if version.isdigit() else 0


def _on_the_gang(event: Mapping[str, Any], key: GangKey, of_pod: Mapping[tuple[str, str], GangKey]) -> bool:
    """Whether a ``GangState`` Event sits where gang-extender puts it: in the gang's own namespace, on its
    group object or one of its members. Where the admission policy gang-extender-gang-state-events is
    not installed, anyone who may create Events in a namespace can write one that claims to be
    gang-extender's; this keeps it to that namespace's gangs (docs/deploy.md, "GangState Events")."""
    namespace = key.group.namespace
    involved = event.get("involvedObject") or {}
    if (event.get("metadata") or {}).get("namespace") != namespace or involved.get("namespace") != namespace:
        return False
    if involved.get("kind") == "Pod":
        return of_pod.get((namespace, str(involved.get("name") or ""))) == key
    return involved.get("name") == key.group.name


def _usable(form: Mapping[str, Any]) -> bool:
    """Whether a published form has the shape the plugin reads (a malformed one is skipped, not fatal)."""
    try:
        float(form.get("publishedAt") or 0)
    except (TypeError, ValueError):
        return False
    return (isinstance(form.get("state") or "", str) and isinstance(form.get("waiting") or "", str)
            and isinstance(form.get("shortfall") or {}, dict) and isinstance(form.get("members") or {}, dict))


def gang_rows(groups: Iterable[GroupObject], pods: Iterable[Mapping[str, Any]],
              events: Iterable[Mapping[str, Any]]) -> list[GangRow]:
    """Every gang the objects show, sorted by namespace, then name."""
    rows: dict[GangKey, GangRow] = {}
    by_ref = _read_groups(groups, rows)
    of_pod = _read_pods(pods, rows, by_ref)
    _read_events(events, rows, of_pod)
    return sorted(rows.values(), key=lambda r: (r.key.group.namespace, r.key.group.name, str(r.key)))


def select(rows: Iterable[GangRow], namespace: str, name: str, pod_group: str | None = None,
           replica: str | None = None) -> list[GangRow]:
    """The gangs of group ``namespace/name`` (any kind), as ``gang-extender explain`` finds them."""
    return [r for r in rows if r.key.group.namespace == namespace and r.key.group.name == name
            and (pod_group is None or r.key.group.pod_group == pod_group)
            and (replica is None or r.key.replica == replica)]

"""Group sources: where gang membership and policy come from (pure).

Owns: the field paths of every supported group API, turning raw Kubernetes JSON into ``GangKey`` (for
a pod) and ``(GroupRef, GangPolicy)`` pairs (for a group object):

- ``scheduling.k8s.io/v1alpha1`` Workload (Kubernetes 1.35): ``spec.podGroups[].policy.gang.minCount``,
  pods link with ``spec.workloadRef{name, podGroup, podGroupReplicaKey}``; every distinct replica key
  is an independent gang.
- ``scheduling.k8s.io`` PodGroup, ``v1alpha2`` (1.36) and ``v1alpha3``/``v1beta1`` (1.37):
  ``spec.schedulingPolicy.gang.minCount`` (mutable from 1.37), pods link with
  ``spec.schedulingGroup.podGroupName`` (same namespace, no replica key). The Workload *template* the
  PodGroup came from (``spec.podGroupTemplateRef.workload`` in v1alpha2, ``spec.workloadRef`` later) is
  kept as context only; 1.36+ Workloads themselves are not gang sources.
- ``scheduling.x-k8s.io/v1alpha1`` PodGroup (scheduler-plugins coscheduling CRD): ``spec.minMember``,
  ``spec.scheduleTimeoutSeconds``, pods link with the label ``scheduling.x-k8s.io/pod-group``.
- Plain pod annotations (no API at all): ``gang-extender.io/group`` + ``gang-extender.io/min-count``.

Also owns the other direction: which API versions to look for (newest first), what a group object's
status says now (``GroupMeta``), the status body users read (``status_apply``): the scheduling
condition of 1.36+ PodGroups, ``status.phase`` and counts of scheduler-plugins PodGroups, and the
object reference a gang's Events are written on (``event_reference``).

Must not: hold state or talk to the API server. Anything malformed yields a GroupError whose
message names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.cluster.topology_constraints import from_group_annotations, from_podgroup
from extender.errors import GroupError
from extender.model import messages
from extender.model.gang import GangKey, GangOrder, GangPhase, GangPolicy, GangStatus, GroupKind, GroupRef, Parsed

WORKLOAD_API = ("scheduling.k8s.io", "v1alpha1", "workloads")
COSCHEDULING_API = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
PODGROUP_VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
"""Versions of the 1.36+ ``scheduling.k8s.io`` PodGroup, newest first (one shape for our purposes)."""


@dataclass(frozen=True, slots=True)
class GroupApi:
    """One watched kind of group object: its API group, resource, and versions newest first."""

    kind: GroupKind
    group: str
    resource: str
    versions: tuple[str, ...]

    @property
    def name(self) -> str:
        """The watch's name in readiness and metrics, e.g. ``podgroups.scheduling.k8s.io``."""
        return f"{self.resource}.{self.group}"

    def path(self, version: str) -> str:
        return f"/apis/{self.group}/{version}/{self.resource}"


GROUP_APIS = (
    GroupApi(GroupKind.WORKLOAD, WORKLOAD_API[0], WORKLOAD_API[2], (WORKLOAD_API[1],)),
    GroupApi(GroupKind.PODGROUP, "scheduling.k8s.io", "podgroups", PODGROUP_VERSIONS),
    GroupApi(GroupKind.COSCHEDULING, COSCHEDULING_API[0], COSCHEDULING_API[2], (COSCHEDULING_API[1],)),
)
"""Every group API the extender can watch; discovery picks the newest served version of each."""

OBJECT_KINDS = {
    **{(f"{api.group}/{version}", "PodGroup" if api.resource == "podgroups" else "Workload"): api.kind
       for api in GROUP_APIS for version in api.versions},
}
"""(apiVersion, kind) of a group object -> its GroupKind (snapshot files, golden objects)."""

COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
ANNOTATION_GROUP = "gang-extender.io/group"
ANNOTATION_MIN_COUNT = "gang-extender.io/min-count"
ANNOTATION_TIMEOUT = "gang-extender.io/timeout-seconds"
"""Per-gang barrier timeout; on a pod (annotation form), a Workload or a coscheduling PodGroup."""


ANNOTATION_MAX_WAIT = "gang-extender.io/max-wait-seconds"
"""Per-gang: how long a complete gang may wait before capacity drains for it (a draining reservation)."""

MAX_WAIT_CAP_SECONDS = 7 * 24 * 3600.0

MAX_TIMEOUT_SECONDS = 3600.0
"""Per-gang timeouts are capped: a held bind cannot outlive kube-scheduler's httpTimeout anyway."""


@dataclass(frozen=True, slots=True)
class PodLink:
    """How one pod names its gang, and the policy it carries itself (annotation form only)."""

    gang: GangKey
    policy: GangPolicy | None = None


def _timeout(annotations: Mapping[str, Any], fallback: object = None) -> float | None:
    raw = annotations.get(ANNOTATION_TIMEOUT, fallback)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise GroupError(messages.seconds_not_a_number(ANNOTATION_TIMEOUT, raw)) from None
    if not 0 < value < float("inf"):
        raise GroupError(messages.seconds_not_positive(ANNOTATION_TIMEOUT, raw))
    return min(value, MAX_TIMEOUT_SECONDS)


def gang_order(annotations: Mapping[str, Any], spec: Mapping[str, Any] | None = None) -> GangOrder | None:
    """The ordering and preemption settings of a group: its annotations, and for a 1.36+ PodGroup its
    ``spec`` (priority, priorityClassName, disruptionMode, preemptionPolicy). Malformed values never
    fail the gang: the defaults apply and ``problem`` says why. None when nothing is set."""
    spec = spec or {}
    problems: list[str] = []
    max_wait = _max_wait(annotations.get(ANNOTATION_MAX_WAIT), problems)
    raw_priority = spec.get("priority")
    priority = raw_priority if isinstance(raw_priority, int) and not isinstance(raw_priority, bool) else None
    if raw_priority is not None and priority is None:
        problems.append(messages.priority_not_integer(raw_priority))
    priority_class = str(spec.get("priorityClassName") or "")[:253]
    if priority_class and priority is None:
        problems.append(messages.priority_class_unresolved(priority_class))
    mode = spec.get("disruptionMode")
    single = mode in ("Pod", "Single") or (isinstance(mode, dict) and "single" in mode and "all" not in mode)
    order = GangOrder(priority, priority_class, max_wait, not single, spec.get("preemptionPolicy") == "Never",
                      "; ".join(problems))
    return None if order == GangOrder() else order


def _max_wait(raw: object, problems: list[str]) -> float | None:
    if raw is None:
        return None
    try:
        value = float(str(raw))
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        problems.append(messages.max_wait_invalid(ANNOTATION_MAX_WAIT, raw))
        return None
    return min(value, MAX_WAIT_CAP_SECONDS)


def _positive_int(raw: object, field: str) -> int:
    if isinstance(raw, bool):
        raise GroupError(messages.not_positive_integer(field, raw))
    if isinstance(raw, str):
        try:
            raw = int(raw.strip())
        except ValueError:
            raise GroupError(messages.not_positive_integer(field, raw)) from None
    if not isinstance(raw, int) or raw <= 0:
        raise GroupError(messages.not_positive_integer(field, raw))
    return raw


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def pod_link(pod: Mapping[str, Any]) -> PodLink | None:
    """The gang a raw pod belongs to, or None.

    Checked in order: ``spec.workloadRef`` (1.35), ``spec.schedulingGroup`` (1.36+), the coscheduling
    label, the annotations. Read from the raw JSON: the kubernetes client's models drop fields of the
    versions they do not know.
    """
    metadata = _dict(pod.get("metadata"))
    namespace = str(metadata.get("namespace") or "default")
    spec = _dict(pod.get("spec"))
    ref = spec.get("workloadRef")
    if isinstance(ref, dict) and ref.get("name"):
        group = GroupRef(GroupKind.WORKLOAD, namespace, str(ref["name"]), str(ref.get("podGroup") or ""))
        return PodLink(GangKey(group, str(ref.get("podGroupReplicaKey") or "")))
    scheduling_group = spec.get("schedulingGroup")
    if isinstance(scheduling_group, dict) and scheduling_group.get("podGroupName"):
        return PodLink(GangKey(GroupRef(GroupKind.PODGROUP, namespace, str(scheduling_group["podGroupName"]))))
    labels = _dict(metadata.get("labels"))
    if labels.get(COSCHEDULING_LABEL):
        return PodLink(GangKey(GroupRef(GroupKind.COSCHEDULING, namespace, str(labels[COSCHEDULING_LABEL]))))
    annotations = _dict(metadata.get("annotations"))
    if annotations.get(ANNOTATION_GROUP):
        group = GroupRef(GroupKind.ANNOTATION, namespace, str(annotations[ANNOTATION_GROUP]))
        raw_min = annotations.get(ANNOTATION_MIN_COUNT)
        if raw_min is None:
            raise GroupError(messages.min_count_missing(ANNOTATION_GROUP, ANNOTATION_MIN_COUNT))
        policy = GangPolicy(_positive_int(raw_min, ANNOTATION_MIN_COUNT), _timeout(annotations),
                            order=gang_order(annotations))
        return PodLink(GangKey(group), policy)
    return None


def _identity(obj: Mapping[str, Any], kind: str) -> tuple[str, str, Mapping[str, Any]]:
    """(namespace, name, annotations) of a group object; GroupError without a name."""
    metadata = _dict(obj.get("metadata"))
    namespace, name = str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")
    if not name:
        raise GroupError(messages.no_name(kind))
    return namespace, name, _dict(metadata.get("annotations"))


def workload_groups(obj: Mapping[str, Any]) -> dict[GroupRef, GangPolicy | None]:
    """Pod groups of a v1alpha1 Workload; a ``basic`` group maps to None (no gang)."""
    namespace, name, annotations = _identity(obj, "Workload")
    timeout = _timeout(annotations)
    topology = from_group_annotations(obj, "Workload")
    order = gang_order(annotations)
    groups: dict[GroupRef, GangPolicy | None] = {}
    where = messages.object_named("Workload", namespace, name)
    pod_groups = _dict(obj.get("spec")).get("podGroups") or []
    if not isinstance(pod_groups, list):
        raise GroupError(messages.not_a_list(messages.field_of(where, "spec.podGroups")))
    for index, raw_group in enumerate(pod_groups):
        pod_group = _dict(raw_group)
        group_name = pod_group.get("name")
        if not isinstance(group_name, str) or not group_name:
            raise GroupError(messages.field_missing(messages.field_of(where, f"spec.podGroups[{index}].name")))
        gang = _dict(_dict(pod_group.get("policy")).get("gang"))
        ref = GroupRef(GroupKind.WORKLOAD, namespace, name, group_name)
        if "minCount" in gang:
            field = messages.field_of(where, f"spec.podGroups[{index}].policy.gang.minCount")
            groups[ref] = GangPolicy(_positive_int(gang["minCount"], field), timeout, topology, order)
        else:
            groups[ref] = None
    return groups


def coscheduling_group(obj: Mapping[str, Any]) -> dict[GroupRef, GangPolicy | None]:
    """The single gang of a scheduler-plugins PodGroup."""
    namespace, name, annotations = _identity(obj, "PodGroup")
    spec = _dict(obj.get("spec"))
    min_member = _positive_int(spec.get("minMember", 1),
                               messages.field_of(messages.object_named("PodGroup", namespace, name), "spec.minMember"))
    seconds = spec.get("scheduleTimeoutSeconds")
    timeout = _timeout(annotations)
    if timeout is None and seconds:  # 0 or absent: the extender's default applies
        timeout = _timeout({ANNOTATION_TIMEOUT: seconds})
    topology = from_group_annotations(obj, "PodGroup")
    return {GroupRef(GroupKind.COSCHEDULING, namespace, name): GangPolicy(min_member, timeout, topology,
                                                                           gang_order(annotations))}


def _gang_policy(policy: Mapping[str, Any], min_count_field: str, timeout: float | None,
                 topology: Parsed, order: GangOrder | None) -> GangPolicy | None:
    """A ``schedulingPolicy``/``policy`` union: ``gang{minCount}`` is a gang, ``basic{}`` (or nothing) is not."""
    gang = policy.get("gang")
    if not isinstance(gang, dict):
        return None
    return GangPolicy(_positive_int(gang.get("minCount"), min_count_field), timeout, topology, order)


def podgroup_group(obj: Mapping[str, Any]) -> dict[GroupRef, GangPolicy | None]:
    """The gang of a 1.36+ ``scheduling.k8s.io`` PodGroup (v1alpha2, v1alpha3, v1beta1: same field)."""
    namespace, name, annotations = _identity(obj, "PodGroup")
    policy = _dict(obj.get("spec")).get("schedulingPolicy")
    where = messages.object_named("PodGroup", namespace, name)
    if policy is not None and not isinstance(policy, dict):
        raise GroupError(messages.not_an_object(messages.field_of(where, "spec.schedulingPolicy")))
    timeout = _timeout(annotations)
    topology = from_podgroup(obj)
    order = gang_order(annotations, _dict(obj.get("spec")))
    min_count_field = messages.field_of(where, "spec.schedulingPolicy.gang.minCount")
    return {GroupRef(GroupKind.PODGROUP, namespace, name): _gang_policy(_dict(policy), min_count_field, timeout,
                                                                        topology, order)}


GROUP_PARSERS = {
    GroupKind.WORKLOAD: workload_groups,
    GroupKind.PODGROUP: podgroup_group,
    GroupKind.COSCHEDULING: coscheduling_group,
}
"""Group object kind -> parser. The annotation form has no object: its pods carry the policy."""


# ------------------------------------------------------------------------------------- status
CONDITION_SCHEDULED_V1ALPHA2 = "PodGroupScheduled"
CONDITION_INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULED = "Scheduled"  # what kube-scheduler itself writes when a pod group is placed
MAX_MESSAGE = 1024


def condition_type(api_version: str) -> str:
    """The scheduling condition of a 1.36+ PodGroup: renamed in 1.37 (v1alpha3, v1beta1)."""
    return CONDITION_SCHEDULED_V1ALPHA2 if api_version.endswith("/v1alpha2") else CONDITION_INITIALLY_SCHEDULED


@dataclass(frozen=True, slots=True)
class Condition:
    status: str
    reason: str
    message: str
    last_transition_time: str


@dataclass(frozen=True, slots=True)
class GroupMeta:
    """Facts about a group object beyond its gang policy: where it is served, its context, its status now."""

    api_version: str
    uid: str = ""
    template: str = ""                 # 1.36+ PodGroup: "<workload>/<template>" it was made from (context)
    condition: Condition | None = None  # 1.36+ PodGroup: the scheduling condition as the object has it
    phase: str = ""                    # scheduler-plugins PodGroup: status.phase as the object has it
    scheduled: int | None = None       # scheduler-plugins PodGroup: status.scheduled as the object has it


def group_meta(kind: GroupKind, obj: Mapping[str, Any]) -> GroupMeta:
    """What the object says besides its policy; never raises (absent or odd fields are left empty)."""
    metadata, spec, status = _dict(obj.get("metadata")), _dict(obj.get("spec")), _dict(obj.get("status"))
    api_version = str(obj.get("apiVersion") or "")
    uid = str(metadata.get("uid") or "")
    if kind is GroupKind.PODGROUP:
        ref = _dict(spec.get("workloadRef"))  # v1alpha3, v1beta1
        workload, template = ref.get("workloadName"), ref.get("templateName")
        if not workload:  # v1alpha2
            old = _dict(_dict(spec.get("podGroupTemplateRef")).get("workload"))
            workload, template = old.get("workloadName"), old.get("podGroupTemplateName")
        wanted = condition_type(api_version)
        condition = None
        for item in status.get("conditions") or []:
            raw = _dict(item)
            if raw.get("type") == wanted:
                condition = Condition(str(raw.get("status") or ""), str(raw.get("reason") or ""),
                                      str(raw.get("message") or ""), str(raw.get("lastTransitionTime") or ""))
        context = f"{workload}/{template}" if workload else ""
        return GroupMeta(api_version, uid, context, condition)
    if kind is GroupKind.COSCHEDULING:
        scheduled = status.get("scheduled")
        return GroupMeta(api_version, uid, phase=str(status.get("phase") or ""),
                         scheduled=scheduled if isinstance(scheduled, int) else None)
    return GroupMeta(api_version, uid)


COSCHEDULING_PHASES = {
    GangPhase.WAITING: "Pending",
    GangPhase.SCHEDULING: "Scheduling",
    GangPhase.SCHEDULED: "Scheduled",
}
"""GangPhase -> scheduler-plugins ``status.phase``. The pod-lifecycle phases (Running, Finished,
Failed) belong to the PodGroup controller, which sees pod phases; the extender never writes them."""


def status_apply(ref: GroupRef, meta: GroupMeta, status: GangStatus, now: str) -> dict[str, Any] | None:
    """The server-side-apply body of the status users read for ``status``, or None when nothing is to
    be written: the group kind has no status, the object already says it, or it would go backwards.

    1.36+ PodGroup: one condition (``PodGroupScheduled`` on v1alpha2, ``PodGroupInitiallyScheduled`` on
    v1alpha3/v1beta1): False/``Unschedulable`` with the waiting reason while the gang waits, True/
    ``Scheduled`` once it bound at quorum. Never True -> False (``PodGroupInitiallyScheduled`` is terminal
    once True); the transient Scheduling phase is not written. ``lastTransitionTime`` moves only when the
    status flips. scheduler-plugins PodGroup: ``status.phase`` and ``status.scheduled``. ``now`` is an
    RFC 3339 time.
    """
    head = {"apiVersion": meta.api_version, "kind": "PodGroup",
            "metadata": {"name": ref.name, "namespace": ref.namespace}}
    message = status.message[:MAX_MESSAGE]
    if ref.kind is GroupKind.PODGROUP:
        if status.phase is GangPhase.SCHEDULING:
            return None
        scheduled = status.phase is GangPhase.SCHEDULED
        old = meta.condition
        if old is not None and old.status == "True":
            return None
        value, reason = ("True", REASON_SCHEDULED) if scheduled else ("False", REASON_UNSCHEDULABLE)
        if old is not None and (old.status, old.reason, old.message) == (value, reason, message):
            return None
        since = old.last_transition_time if old is not None and old.status == value and \
            old.last_transition_time else now
        condition = {"type": condition_type(meta.api_version), "status": value, "reason": reason,
                     "message": message, "lastTransitionTime": since}
        return {**head, "status": {"conditions": [condition]}}
    if ref.kind is GroupKind.COSCHEDULING:
        phase = COSCHEDULING_PHASES[status.phase]
        if meta.phase == phase and meta.scheduled == status.bound:
            return None
        return {**head, "status": {"phase": phase, "scheduled": status.bound}}
    return None


_OBJECT_KINDS = {GroupKind.WORKLOAD: "Workload", GroupKind.PODGROUP: "PodGroup", GroupKind.COSCHEDULING: "PodGroup"}


def event_reference(ref: GroupRef, meta: GroupMeta | None) -> dict[str, str] | None:
    """The object reference (apiVersion, kind, namespace, name, uid) of the group object that gang
    Events go on, or None when there is no such object (annotation gangs, an object not seen yet)."""
    kind = _OBJECT_KINDS.get(ref.kind)
    if kind is None or meta is None or not meta.api_version:
        return None
    return {"apiVersion": meta.api_version, "kind": kind, "namespace": ref.namespace, "name": ref.name,
            "uid": meta.uid}

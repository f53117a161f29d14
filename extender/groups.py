"""Group sources: where gang membership and policy come from (pure).

Owns: the field paths of every supported group API, turning raw Kubernetes JSON into ``GangKey`` (for
a pod) and ``(GroupRef, GangPolicy)`` pairs (for a group object):

- ``scheduling.k8s.io/v1alpha1`` Workload (Kubernetes 1.35): ``spec.podGroups[].policy.gang.minCount``,
  pods link with ``spec.workloadRef{name, podGroup, podGroupReplicaKey}``; every distinct replica key
  is an independent gang.
- ``scheduling.x-k8s.io/v1alpha1`` PodGroup (scheduler-plugins coscheduling CRD): ``spec.minMember``,
  ``spec.scheduleTimeoutSeconds``, pods link with the label ``scheduling.x-k8s.io/pod-group``.
- Plain pod annotations (no API at all): ``gang-extender.io/group`` + ``gang-extender.io/min-count``.

Must not: hold state or talk to the API server. Anything malformed yields a GroupError whose
message names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.model import GangKey, GangPolicy, GroupKind, GroupRef

WORKLOAD_API = ("scheduling.k8s.io", "v1alpha1", "workloads")
COSCHEDULING_API = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")

COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
ANNOTATION_GROUP = "gang-extender.io/group"
ANNOTATION_MIN_COUNT = "gang-extender.io/min-count"
ANNOTATION_TIMEOUT = "gang-extender.io/timeout-seconds"
"""Per-gang barrier timeout; on a pod (annotation form), a Workload or a coscheduling PodGroup."""


MAX_TIMEOUT_SECONDS = 3600.0
"""Per-gang timeouts are capped: a held bind cannot outlive kube-scheduler's httpTimeout anyway."""


class GroupError(ValueError):
    """A group object or pod link that cannot be understood."""


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
        raise GroupError(f"{ANNOTATION_TIMEOUT} must be a number of seconds, got {raw!r}") from None
    if not 0 < value < float("inf"):
        raise GroupError(f"{ANNOTATION_TIMEOUT} must be a positive number of seconds, got {raw!r}")
    return min(value, MAX_TIMEOUT_SECONDS)


def _positive_int(raw: object, field: str) -> int:
    if isinstance(raw, bool):
        raise GroupError(f"{field} must be a positive integer, got {raw!r}")
    if isinstance(raw, str):
        try:
            raw = int(raw.strip())
        except ValueError:
            raise GroupError(f"{field} must be a positive integer, got {raw!r}") from None
    if not isinstance(raw, int) or raw <= 0:
        raise GroupError(f"{field} must be a positive integer, got {raw!r}")
    return raw


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def pod_link(pod: Mapping[str, Any]) -> PodLink | None:
    """The gang a raw pod belongs to, or None. Checked in order: workloadRef, label, annotation."""
    metadata = _dict(pod.get("metadata"))
    namespace = str(metadata.get("namespace") or "default")
    spec = _dict(pod.get("spec"))
    ref = spec.get("workloadRef")
    if isinstance(ref, dict) and ref.get("name"):
        group = GroupRef(GroupKind.WORKLOAD, namespace, str(ref["name"]), str(ref.get("podGroup") or ""))
        return PodLink(GangKey(group, str(ref.get("podGroupReplicaKey") or "")))
    labels = _dict(metadata.get("labels"))
    if labels.get(COSCHEDULING_LABEL):
        return PodLink(GangKey(GroupRef(GroupKind.COSCHEDULING, namespace, str(labels[COSCHEDULING_LABEL]))))
    annotations = _dict(metadata.get("annotations"))
    if annotations.get(ANNOTATION_GROUP):
        group = GroupRef(GroupKind.ANNOTATION, namespace, str(annotations[ANNOTATION_GROUP]))
        raw_min = annotations.get(ANNOTATION_MIN_COUNT)
        if raw_min is None:
            raise GroupError(f"pod has {ANNOTATION_GROUP} but no {ANNOTATION_MIN_COUNT} annotation")
        policy = GangPolicy(_positive_int(raw_min, ANNOTATION_MIN_COUNT), _timeout(annotations))
        return PodLink(GangKey(group), policy)
    return None


def workload_groups(obj: Mapping[str, Any]) -> dict[GroupRef, GangPolicy | None]:
    """Pod groups of a v1alpha1 Workload; a ``basic`` group maps to None (no gang)."""
    metadata = _dict(obj.get("metadata"))
    namespace, name = str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")
    if not name:
        raise GroupError("Workload has no metadata.name")
    timeout = _timeout(_dict(metadata.get("annotations")))
    groups: dict[GroupRef, GangPolicy | None] = {}
    pod_groups = _dict(obj.get("spec")).get("podGroups") or []
    if not isinstance(pod_groups, list):
        raise GroupError(f"Workload {namespace}/{name}: spec.podGroups must be a list")
    for index, raw_group in enumerate(pod_groups):
        pod_group = _dict(raw_group)
        group_name = pod_group.get("name")
        if not isinstance(group_name, str) or not group_name:
            raise GroupError(f"Workload {namespace}/{name}: spec.podGroups[{index}].name is missing")
        gang = _dict(_dict(pod_group.get("policy")).get("gang"))
        ref = GroupRef(GroupKind.WORKLOAD, namespace, name, group_name)
        if "minCount" in gang:
            field = f"Workload {namespace}/{name}: spec.podGroups[{index}].policy.gang.minCount"
            groups[ref] = GangPolicy(_positive_int(gang["minCount"], field), timeout)
        else:
            groups[ref] = None
    return groups


def coscheduling_group(obj: Mapping[str, Any]) -> dict[GroupRef, GangPolicy | None]:
    """The single gang of a scheduler-plugins PodGroup."""
    metadata = _dict(obj.get("metadata"))
    namespace, name = str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")
    if not name:
        raise GroupError("PodGroup has no metadata.name")
    spec = _dict(obj.get("spec"))
    min_member = _positive_int(spec.get("minMember", 1), f"PodGroup {namespace}/{name}: spec.minMember")
    seconds = spec.get("scheduleTimeoutSeconds")
    timeout = _timeout(_dict(metadata.get("annotations")))
    if timeout is None and seconds:  # 0 or absent: the extender's default applies
        timeout = _timeout({ANNOTATION_TIMEOUT: seconds})
    return {GroupRef(GroupKind.COSCHEDULING, namespace, name): GangPolicy(min_member, timeout)}


GROUP_PARSERS = {
    GroupKind.WORKLOAD: workload_groups,
    GroupKind.COSCHEDULING: coscheduling_group,
}
"""Group object kind -> parser. The annotation form has no object: its pods carry the policy."""

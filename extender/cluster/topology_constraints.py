"""Topology constraints of gangs: where they come from and what one gang's constraint is (pure).

Owns: reading a gang's topology constraint (a *required* node label key: every member in one domain,
nodes sharing one value of that label; and/or a *preferred* one: one domain if any can hold the gang)
from each place it can be written, and merging them into one effective constraint or a problem:

- ``scheduling.k8s.io`` PodGroup ``v1alpha2`` (1.36), ``v1alpha3``/``v1beta1`` (1.37):
  ``spec.schedulingConstraints.topology: [{key}]``, at most one entry, required only
  (docs/versions.md, "Topology constraints");
- Kueue's pod-template annotations on the members: ``kueue.x-k8s.io/podset-required-topology`` and
  ``kueue.x-k8s.io/podset-preferred-topology``;
- gang-extender's annotations ``gang-extender.io/topology-required`` and
  ``gang-extender.io/topology-preferred`` on the group object (any kind) or on the pods.

Every value must be a valid label key. Bad input (an invalid key, two different required or preferred
keys from two sources, members that disagree) yields a ``TopologyProblem`` whose message says exactly
what is wrong; nothing here raises on malformed objects.
Must not: hold state, do I/O, or know about nodes and placement (that is ``gangs.domains``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from extender.labelkeys import HOSTNAME, label_key_problem
from extender.model import messages
from extender.model.gang import NONE, Parsed, Source, TopologyConstraint, TopologyProblem

__all__ = ["HOSTNAME", "NONE", "Parsed", "Source", "TopologyConstraint", "TopologyProblem",
           "from_group_annotations", "from_pod", "from_podgroup", "merge"]

ANNOTATION_REQUIRED = "gang-extender.io/topology-required"
ANNOTATION_PREFERRED = "gang-extender.io/topology-preferred"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
FIELD = "spec.schedulingConstraints.topology"










def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _where(kind: str, obj: Mapping[str, Any]) -> str:
    """How messages name ``obj``: ``PodGroup ml/train`` (``?`` for a missing name)."""
    metadata = _dict(obj.get("metadata"))
    return messages.object_named(kind, str(metadata.get("namespace") or "default"), str(metadata.get("name") or "?"))


def _key(where: str, raw: object) -> str | TopologyProblem:
    problem = label_key_problem(raw)
    if problem is not None:
        return TopologyProblem(messages.field_problem(where, problem))
    assert isinstance(raw, str)
    return raw


def _combine(first: Parsed, second: Parsed, what: str) -> Parsed:
    """Two constraints on one gang: the same key twice is fine, two different keys are a problem."""
    if isinstance(first, TopologyProblem):
        return first
    if isinstance(second, TopologyProblem):
        return second
    result = first
    for mode in ("required", "preferred"):
        mine, theirs = getattr(first, mode), getattr(second, mode)
        if mine and theirs and mine != theirs:
            return TopologyProblem(messages.topology_keys_differ(
                what, mode, mine, getattr(first, mode + "_source"), theirs, getattr(second, mode + "_source")))
        if theirs and not mine:
            result = replace(result, **{mode: theirs, f"{mode}_source": getattr(second, mode + "_source")})
    return result


def _annotations(annotations: Mapping[str, Any], required: str, preferred: str, source: Source,
                 where: str) -> Parsed:
    found: dict[str, Any] = {}
    for mode, name in (("required", required), ("preferred", preferred)):
        if name in annotations:
            key = _key(messages.topology_annotation(where, name), annotations[name])
            if isinstance(key, TopologyProblem):
                return key
            found[mode], found[f"{mode}_source"] = key, source
    return TopologyConstraint(**found)


def from_group_annotations(obj: Mapping[str, Any], kind: str = "group object") -> Parsed:
    """The gang-extender annotations on any group object (Workload, PodGroup, PodGroup CR)."""
    where = _where(kind, obj)
    annotations = _dict(_dict(obj.get("metadata")).get("annotations"))
    return _annotations(annotations, ANNOTATION_REQUIRED, ANNOTATION_PREFERRED, Source.GROUP_ANNOTATION, where)


def from_podgroup(obj: Mapping[str, Any]) -> Parsed:
    """A 1.36/1.37 ``scheduling.k8s.io`` PodGroup: ``spec.schedulingConstraints.topology`` and the
    gang-extender annotations on it (the same key twice is fine; two different keys are a problem)."""
    where = _where("PodGroup", obj)
    raw = _dict(obj.get("spec")).get("schedulingConstraints")
    field: Parsed = NONE
    if raw is not None:
        if not isinstance(raw, dict):
            return TopologyProblem(messages.constraints_not_object(where, raw))
        entries = raw.get("topology")
        if entries is not None and not isinstance(entries, list):
            return TopologyProblem(messages.topology_not_list(where, FIELD, entries))
        if entries and len(entries) > 1:
            return TopologyProblem(messages.topology_too_many(where, FIELD, len(entries)))
        if entries:
            entry = entries[0]
            if not isinstance(entry, dict):
                return TopologyProblem(messages.topology_entry_not_object(where, FIELD, entry))
            key = _key(messages.field_of(where, f"{FIELD}[0].key"), entry.get("key"))
            if isinstance(key, TopologyProblem):
                return key
            field = TopologyConstraint(required=key, required_source=Source.PODGROUP_FIELD)
    return _combine(field, from_group_annotations(obj, "PodGroup"), where)


def from_pod(pod: Mapping[str, Any]) -> Parsed:
    """A member's own constraint: Kueue's pod-template annotations and gang-extender's annotations."""
    where = _where("pod", pod)
    annotations = _dict(_dict(pod.get("metadata")).get("annotations"))
    kueue = _annotations(annotations, KUEUE_REQUIRED, KUEUE_PREFERRED, Source.KUEUE_ANNOTATION, where)
    own = _annotations(annotations, ANNOTATION_REQUIRED, ANNOTATION_PREFERRED, Source.POD_ANNOTATION, where)
    return _combine(kueue, own, where)


def merge(group: Parsed, members: Iterable[tuple[str, Parsed]]) -> Parsed:
    """The gang's effective constraint: its group object's and its members' (``(pod name, parsed)``).

    A member without a constraint agrees with any; members that set one must set the same keys. The
    group's and the members' keys combine (a required key from one, a preferred key from the other),
    but the same kind of key with two different values is a problem.
    """
    if isinstance(group, TopologyProblem):
        return group
    members_constraint = NONE
    first: dict[str, str] = {}
    for name, parsed in members:
        if isinstance(parsed, TopologyProblem):
            return parsed
        updates: dict[str, Any] = {}
        for mode in ("required", "preferred"):
            mine, theirs = getattr(members_constraint, mode), getattr(parsed, mode)
            if mine and theirs and mine != theirs:
                return TopologyProblem(messages.members_disagree(mode, first[mode], mine, name, theirs))
            if theirs and not mine:
                first[mode] = name
                updates[mode], updates[f"{mode}_source"] = theirs, getattr(parsed, f"{mode}_source")
        if updates:
            members_constraint = replace(members_constraint, **updates)
    return _combine(group, members_constraint, messages.TOPOLOGY_GROUP_AND_PODS)

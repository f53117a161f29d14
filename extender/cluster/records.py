"""Raw Kubernetes JSON -> compact records (pure).

Owns: reading Nodes and Pods as the API server serves them (camelCase dicts, parsed with orjson, never
through the client's generated models, which cost ~25x more per pod) into ``NodeRecord`` and
``PodRecord``: effective resource requests the way kube-scheduler computes them, the gang link, and
the placement fields a gang member needs for admission planning, and a bound pod's labels (what a
PodDisruptionBudget selects a preemption victim by). Must not: keep state or do I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from extender.cluster.groups import PodLink, pod_link
from extender.cluster.topology_constraints import from_pod
from extender.errors import RecordError
from extender.model.cluster import (
    NO_PLACEMENT,
    QUORUM_GATE,
    NodeRecord,
    Placement,
    PodRecord,
    Requirement,
    Taint,
    Toleration,
)
from extender.model.gang import NONE
from extender.model.quantity import PODS, Resources, add_into, parse_resources


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _container_requests(container: object) -> Resources:
    resources = _dict(_dict(container).get("resources"))
    requests = parse_resources(resources.get("requests"))
    # The API server defaults requests to limits; objects that bypassed it (snapshots) may not have.
    for name, amount in parse_resources(resources.get("limits")).items():
        requests.setdefault(name, amount)
    return requests


def _max_into(total: Resources, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > total.get(name, 0):
            total[name] = amount


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """Effective requests: max(containers + sidecars, each init container + earlier sidecars) + overhead.

    Mirrors ``resourcehelper.PodRequests`` in k8s.io/component-helpers, plus ``pods: 1``.
    """
    total: Resources = {}
    for container in spec.get("containers") or []:
        add_into(total, _container_requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        requests = _container_requests(container)
        if _dict(container).get("restartPolicy") == "Always":
            add_into(sidecars, requests)
            add_into(total, requests)
        else:
            step = dict(sidecars)
            add_into(step, requests)
            _max_into(init_peak, step)
    _max_into(total, init_peak)
    add_into(total, parse_resources(spec.get("overhead")))
    total[PODS] = 1
    return total


_SHARED_REQUESTS: dict[tuple[tuple[str, int], ...], Resources] = {}
_SHARED_REQUESTS_MAX = 100_000


def shared(requests: Resources) -> Resources:
    """One dict per distinct request vector (most pods share a handful): records treat it as read-only."""
    key = tuple(sorted(requests.items()))
    found = _SHARED_REQUESTS.get(key)
    if found is not None:
        return found
    if len(_SHARED_REQUESTS) < _SHARED_REQUESTS_MAX:
        _SHARED_REQUESTS[key] = requests
    return requests


def _list(value: object) -> list[Any]:
    """``value`` if it is a list, else empty: a field of the wrong type constrains nothing here (the API
    server validates types; a snapshot file or a request may not)."""
    return value if isinstance(value, list) else []


def _requirements(raw: object, field: bool) -> list[Requirement]:
    out = []
    for item in _list(raw):
        if isinstance(item, dict):
            values = tuple(str(v) for v in _list(item.get("values")))
            out.append(Requirement(str(item.get("key", "")), str(item.get("operator", "")), values, field))
    return out


def placement_from_spec(spec: Mapping[str, Any]) -> Placement:
    """Read nodeSelector, required node affinity and tolerations from a raw pod spec."""
    selector = spec.get("nodeSelector") or {}
    node_selector = tuple(sorted((str(k), str(v)) for k, v in selector.items())) if isinstance(
        selector, dict) else ()
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(
        node_affinity, dict) else None
    terms: list[tuple[Requirement, ...]] = []
    if isinstance(required, dict):
        for term in _list(required.get("nodeSelectorTerms")):
            if isinstance(term, dict):
                reqs = _requirements(term.get("matchExpressions"), False)
                reqs += _requirements(term.get("matchFields"), True)
                terms.append(tuple(reqs))
    tolerations = []
    for tol in _list(spec.get("tolerations")):
        if isinstance(tol, dict):
            tolerations.append(Toleration(str(tol.get("key") or ""), str(tol.get("operator") or "Equal"),
                                          str(tol.get("value") or ""), str(tol.get("effect") or "")))
    if not node_selector and not terms and not tolerations:
        return NO_PLACEMENT  # shared: most pods have none
    return Placement(node_selector, tuple(terms), tuple(tolerations))


def pod_placement(pod: PodRecord) -> Placement:
    """The pod's placement constraints: read once when its record was made (a record made by hand
    carries only ``spec``; its constraints are read here)."""
    if pod.placement is not None:
        return pod.placement
    return placement_from_spec(pod.spec or {})


DEFAULT_MAX_PODS = 110
"""Pod capacity assumed for a node object that does not state it (the kubelet's default)."""

_PLACEMENT_FIELDS = ("nodeSelector", "affinity", "tolerations")


def pod_record(obj: Mapping[str, Any]) -> PodRecord:
    """A compact PodRecord of a raw pod. Raises RecordError (or QuantityError/GroupError) if malformed."""
    return linked_pod_record(obj, pod_link(obj))


def linked_pod_record(obj: Mapping[str, Any], link: PodLink | None) -> PodRecord:
    """``pod_record`` for a pod whose gang link (``groups.pod_link``) was already read."""
    metadata = _dict(obj.get("metadata"))
    spec = _dict(obj.get("spec"))
    name, namespace = metadata.get("name"), metadata.get("namespace") or "default"
    if not isinstance(name, str) or not name:
        raise RecordError("pod has no metadata.name")
    phase = _dict(obj.get("status")).get("phase")
    node_name = spec.get("nodeName")
    # Kept for gang members (admission plans them) and for pods not bound yet (bind re-checks them).
    placement = {k: spec[k] for k in _PLACEMENT_FIELDS if spec.get(k)} if link or not node_name else None
    if not link and not placement:
        placement = None  # nothing to check: keep the record small
    return PodRecord(
        uid=str(metadata.get("uid") or f"{namespace}/{name}"),
        namespace=sys.intern(str(namespace)),
        name=name,
        node_name=sys.intern(str(node_name or "")),
        requests=shared(pod_requests(spec)),
        gang=link.gang if link else None,
        link_policy=link.policy if link else None,
        terminal=phase in ("Succeeded", "Failed") or bool(metadata.get("deletionTimestamp")),
        scheduler_name=sys.intern(str(spec.get("schedulerName") or "default-scheduler")),
        spec=placement,
        needs_preparation=_needs_preparation(spec),
        placement=None if placement is None else placement_from_spec(placement),
        topology=from_pod(obj) if link else NONE,
        priority=_priority(spec.get("priority")),
        preempt_never=spec.get("preemptionPolicy") == "Never",
        labels=pod_labels(metadata.get("labels")) if node_name else (),
        unschedulable=not node_name and _unschedulable(_dict(obj.get("status")).get("conditions")),
        quorum_gate=-1 if node_name else _gate_index(spec.get("schedulingGates"), QUORUM_GATE),
    )


def resource_version(obj: Mapping[str, Any]) -> str:
    """An object's ``metadata.resourceVersion`` ("" without one)."""
    version = _dict(obj.get("metadata")).get("resourceVersion")
    return version if isinstance(version, str) else ""


def unreadable_gated_record(obj: Mapping[str, Any]) -> PodRecord | None:
    """For a pod ``pod_record`` cannot read (a malformed gang annotation, a bad quantity): a record of no gang
    and no requests when it is unbound and carries the quorum gate, so that the gate is removed and
    kube-scheduler tries the pod (its filter says what is wrong with it) instead of it waiting gated with no
    word; None otherwise."""
    metadata, spec = _dict(obj.get("metadata")), _dict(obj.get("spec"))
    name, namespace = metadata.get("name"), metadata.get("namespace") or "default"
    gate = _gate_index(spec.get("schedulingGates"), QUORUM_GATE)
    if gate < 0 or spec.get("nodeName") or not isinstance(name, str) or not name or not metadata.get("uid"):
        return None
    return PodRecord(uid=str(metadata["uid"]), namespace=str(namespace), name=name, node_name="", requests={},
                     gang=None, scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
                     quorum_gate=gate)


def _gate_index(gates: object, name: str) -> int:
    """The index of scheduling gate ``name`` in ``spec.schedulingGates``; -1 if it is not there."""
    if isinstance(gates, list):
        for index, gate in enumerate(gates):
            if isinstance(gate, dict) and gate.get("name") == name:
                return index
    return -1


def _unschedulable(conditions: object) -> bool:
    """kube-scheduler tried the pod and found no node (PodScheduled False, reason Unschedulable)."""
    return isinstance(conditions, list) and any(
        isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False"
        and c.get("reason") == "Unschedulable" for c in conditions)


Labels = tuple[tuple[str, str], ...]
_SHARED_LABELS: dict[Labels, Labels] = {}
_SHARED_LABELS_MAX = 20_000  # at most a few MiB kept after their pods are gone


def pod_labels(raw: object) -> Labels:
    """A pod's labels as sorted ``(key, value)`` pairs, strings interned and equal tuples shared (the
    pods of one workload carry the same labels): what a PodDisruptionBudget's selector reads."""
    if not isinstance(raw, dict) or not raw:
        return ()
    labels = tuple(sorted((sys.intern(str(k)), sys.intern(str(v))) for k, v in raw.items()))
    found = _SHARED_LABELS.get(labels)
    if found is not None:
        return found
    if len(_SHARED_LABELS) < _SHARED_LABELS_MAX:
        _SHARED_LABELS[labels] = labels
    return labels


def _priority(raw: object) -> int:
    """spec.priority as an int (0 when absent; the API server validates it as an int32)."""
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) < 2**31 else 0


def _needs_preparation(spec: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler prepares something for the pod before binding it (PreBind: volumes bound
    to claims, DRA resource claims): only kube-scheduler's own bind attempt may then lead to a Binding."""
    volumes = spec.get("volumes")
    if isinstance(volumes, list) and any(isinstance(v, dict) and ("persistentVolumeClaim" in v or "ephemeral" in v)
                                         for v in volumes):
        return True
    return bool(spec.get("resourceClaims"))


def node_record(obj: Mapping[str, Any]) -> NodeRecord:
    """A compact NodeRecord of a raw node."""
    metadata = _dict(obj.get("metadata"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise RecordError("node has no metadata.name")
    spec, status = _dict(obj.get("spec")), _dict(obj.get("status"))
    allocatable = status.get("allocatable")
    if allocatable is None:
        allocatable = status.get("capacity")
    raw_taints = spec.get("taints")
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in (raw_taints if isinstance(raw_taints, list) else ()) if isinstance(t, dict)
    )
    labels = {str(k): str(v) for k, v in _dict(metadata.get("labels")).items()}
    resources = parse_resources(allocatable)
    resources.setdefault(PODS, DEFAULT_MAX_PODS)
    return NodeRecord(name, resources, labels, taints, bool(spec.get("unschedulable")))

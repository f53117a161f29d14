"""The kube-scheduler extender wire format (pure).

Owns: the exact PascalCase keys of ``k8s.io/kube-scheduler/extender/v1`` (the Go structs have no JSON
tags), validation of request bodies into the engine's values (``engine/requests``), and rendering of
replies. Embedded Kubernetes objects (Pod, Node) stay raw camelCase dicts. Must not: decide anything
about scheduling, touch I/O, or accept a body it cannot fully account for; every problem is a
ProtocolError with a message a person can act on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from extender.cluster.verdicts import MAX_NODE_NAME
from extender.engine.requests import (
    BindArgs,
    FilterArgs,
    FilterResult,
    PreemptArgs,
    PreemptResult,
    Victims,
)
from extender.errors import ProtocolError

MAX_SCORE = 10  # extenderv1.MaxExtenderPriority
MAX_NODES_PER_REQUEST = 15_000
"""Three times Kubernetes' largest supported cluster (5,000 nodes). The reply names every requested node
with a reason, so the count, not only the body size, bounds a reply's memory."""








def _require_object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object, got {_type_name(value)}")
    return value


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null",
            int: "number", float: "number"}.get(type(value), type(value).__name__)


def _pod(body: Mapping[str, Any]) -> dict[str, Any]:
    pod = _require_object(body.get("Pod"), "Pod")
    metadata = _require_object(pod.get("metadata"), "Pod.metadata")
    for key in ("name", "namespace"):
        if not isinstance(metadata.get(key), str) or not metadata[key]:
            raise ProtocolError(f"Pod.metadata.{key} must be a non-empty string")
    if metadata.get("uid") is not None and not isinstance(metadata["uid"], str):
        raise ProtocolError("Pod.metadata.uid must be a string")
    spec = pod.get("spec")
    if spec is not None:
        _check_spec(_require_object(spec, "Pod.spec"))
    return pod


def _check_list_of_objects(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"{where} must be an array, got {_type_name(value)}")
    for index, item in enumerate(value):
        _require_object(item, f"{where}[{index}]")
    return value


def _check_optional_object(value: object, where: str) -> dict[str, Any]:
    return {} if value is None else _require_object(value, where)


def _check_spec(spec: dict[str, Any]) -> None:
    """The shapes of the Pod.spec fields the extender reads (values are checked where they are used)."""
    for field in ("containers", "initContainers"):
        for index, container in enumerate(_check_list_of_objects(spec.get(field), f"Pod.spec.{field}")):
            resources = _check_optional_object(container.get("resources"), f"Pod.spec.{field}[{index}].resources")
            _check_list_of_objects(container.get("ports"), f"Pod.spec.{field}[{index}].ports")
            for kind in ("requests", "limits"):
                _check_optional_object(resources.get(kind), f"Pod.spec.{field}[{index}].resources.{kind}")
    for field in ("volumes", "tolerations", "topologySpreadConstraints", "resourceClaims"):
        _check_list_of_objects(spec.get(field), f"Pod.spec.{field}")
    for field in ("nodeSelector", "overhead"):
        for key, value in _check_optional_object(spec.get(field), f"Pod.spec.{field}").items():
            if field == "nodeSelector" and not isinstance(value, str):
                raise ProtocolError(f"Pod.spec.nodeSelector[{key!r}] must be a string, got {_type_name(value)}")
    affinity = _check_optional_object(spec.get("affinity"), "Pod.spec.affinity")
    node_affinity = _check_optional_object(affinity.get("nodeAffinity"), "Pod.spec.affinity.nodeAffinity")
    where = "Pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _check_optional_object(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    for index, term in enumerate(_check_list_of_objects(required.get("nodeSelectorTerms"),
                                                        f"{where}.nodeSelectorTerms")):
        for part in ("matchExpressions", "matchFields"):
            for number, requirement in enumerate(_check_list_of_objects(
                    term.get(part), f"{where}.nodeSelectorTerms[{index}].{part}")):
                values = requirement.get("values")
                if values is not None and not (isinstance(values, list) and all(isinstance(v, str) for v in values)):
                    raise ProtocolError(f"{where}.nodeSelectorTerms[{index}].{part}[{number}].values must be an "
                                        f"array of strings, got {_type_name(values)}")


FULL_NODES_REFUSED = ("the full Nodes form (nodeCacheCapable: false) is not accepted by this extender: set "
                      "nodeCacheCapable: true in the scheduler's extender entry, or start the extender with "
                      "--max-full-nodes-body-bytes")


NAMES_KEY = b'"NodeNames":['


def node_names_text(data: bytes) -> bytes | None:
    """The bytes of ``data``'s ``NodeNames`` array, ``[`` to ``]``, when the body (already parsed as
    valid JSON) is written as kube-scheduler writes it, else None. Equal bytes then mean an equal list,
    which lets the engine recognise a list it has already checked with one ``memcmp`` instead of
    comparing 5,000 strings (engine/filtering.py ``_all_fit``).

    The text is the list's only source only when it is a flat array (no ``[``, ``]``, ``{`` or ``}``
    between its brackets) followed by nothing but the ``}`` that ends the body, so it is the value of
    the top-level object's last member (JSON objects keep the last of duplicate keys, as orjson does),
    and that member's key is spelled ``"NodeNames":`` right after a ``{`` or ``,`` (so its quote opens a
    key, not a string's end or an escaped quote). Anything else (whitespace, another order, escapes
    in the key, brackets or braces inside names) answers None and costs nothing but the usual
    comparison. Every search is a byte scan (memchr) or a slice compare: about 3 us at 5,000 names."""
    end = data.rfind(b"]")
    bracket = data.rfind(b"[", 0, end)
    start = bracket - len(NAMES_KEY) + 1
    if (start < 1 or data[start:bracket + 1] != NAMES_KEY or data[start - 1] not in b",{"
            or data[end + 1:].strip() != b"}"):
        return None
    text = data[bracket:end + 1]
    if text.find(b"]") != len(text) - 1 or b"{" in text or b"}" in text:
        return None
    return text


def parse_filter_args(body: object, full_nodes: bool = True, data: bytes | None = None) -> FilterArgs:
    """Validate an ExtenderArgs body (filter and prioritize share it); ``full_nodes`` False refuses the
    ``Nodes`` form (a request carrying only full Node objects). ``data``, the bytes ``body`` was parsed
    from, gives the engine the ``NodeNames`` array's text (``node_names_text``)."""
    body = _require_object(body, "request body")
    pod = _pod(body)
    raw_names, raw_nodes = body.get("NodeNames"), body.get("Nodes")
    if raw_names is None and raw_nodes is None:
        raise ProtocolError("one of NodeNames or Nodes is required (both are null or missing)")
    nodes: list[dict[str, Any]] | None = None
    if raw_names is not None:
        if not isinstance(raw_names, list):
            raise ProtocolError(f"NodeNames must be an array of strings, got {_type_name(raw_names)}")
        names: list[str] = raw_names
    elif not full_nodes:
        raise ProtocolError(FULL_NODES_REFUSED)
    else:
        node_list = _require_object(raw_nodes, "Nodes")
        items = node_list.get("items")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise ProtocolError(f"Nodes.items must be an array, got {_type_name(items)}")
        names = []
        for index, node in enumerate(items):
            meta = node.get("metadata") if isinstance(node, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            if not isinstance(name, str) or not name or len(name) > MAX_NODE_NAME:
                raise ProtocolError(f"Nodes.items[{index}].metadata.name must be a non-empty string of at most "
                                    f"{MAX_NODE_NAME} characters")
            names.append(name)
        nodes = items
    if len(names) > MAX_NODES_PER_REQUEST:
        raise ProtocolError(f"{len(names)} nodes in one request; at most {MAX_NODES_PER_REQUEST} are accepted")
    names_text = node_names_text(data) if data is not None and nodes is None else None
    return FilterArgs(pod=pod, node_names=names, nodes=nodes, names_text=names_text)




def parse_bind_args(body: object) -> BindArgs:
    """Validate an ExtenderBindingArgs body."""
    body = _require_object(body, "request body")
    values = {}
    for key in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = body.get(key)
        if not isinstance(value, str) or (key != "PodUID" and not value):
            raise ProtocolError(f"{key} must be a non-empty string")
        values[key] = value
    return BindArgs(values["PodName"], values["PodNamespace"], values["PodUID"], values["Node"])


FULL_PODS_REFUSED = ("the NodeNameToVictims form (full Pod objects, nodeCacheCapable: false) is not accepted by "
                     "this extender: set nodeCacheCapable: true in the scheduler's extender entry, or start the "
                     "extender with --max-full-nodes-body-bytes")
MAX_INT64 = 2**63 - 1


def parse_preempt_args(body: object, full_pods: bool = True) -> PreemptArgs:
    """Validate an ExtenderPreemptionArgs body: ``NodeNameToMetaVictims`` (victims by UID; what
    kube-scheduler sends with nodeCacheCapable: true) or ``NodeNameToVictims`` (full Pods; refused
    unless ``full_pods``)."""
    body = _require_object(body, "request body")
    pod = _pod(body)
    meta, full = body.get("NodeNameToMetaVictims"), body.get("NodeNameToVictims")
    if meta is not None:
        field, raw, uid_of = "NodeNameToMetaVictims", meta, _meta_uid
    elif full is None:
        raise ProtocolError("one of NodeNameToMetaVictims or NodeNameToVictims is required (both are null or "
                            "missing)")
    elif not full_pods:
        raise ProtocolError(FULL_PODS_REFUSED)
    else:
        field, raw, uid_of = "NodeNameToVictims", full, _pod_uid
    by_node = _require_object(raw, field)
    if len(by_node) > MAX_NODES_PER_REQUEST:
        raise ProtocolError(f"{len(by_node)} nodes in one request; at most {MAX_NODES_PER_REQUEST} are accepted")
    victims: dict[str, Victims] = {}
    for node, value in by_node.items():
        where = f"{field}[{node[:MAX_NODE_NAME]!r}]"
        if not node or len(node) > MAX_NODE_NAME:
            raise ProtocolError(f"{field} keys must be node names of 1 to {MAX_NODE_NAME} characters")
        entry = _require_object(value, where)
        pods = _check_list_of_objects(entry.get("Pods"), f"{where}.Pods")
        uids = tuple(uid_of(item, f"{where}.Pods[{index}]") for index, item in enumerate(pods))
        count = entry.get("NumPDBViolations", 0)
        if type(count) is float and count.is_integer():  # 3.0: a JSON number without a fraction
            count = int(count)
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_INT64:
            raise ProtocolError(f"{where}.NumPDBViolations must be a non-negative 64-bit integer, got "
                                f"{count if type(count) is int else _type_name(count)}")
        victims[node] = Victims(uids, count)
    return PreemptArgs(pod=pod, victims=victims)


def _meta_uid(item: dict[str, Any], where: str) -> str:
    uid = item.get("UID")
    if not isinstance(uid, str) or not uid:
        raise ProtocolError(f"{where}.UID must be a non-empty string")
    return uid


def _pod_uid(item: dict[str, Any], where: str) -> str:
    metadata = _require_object(item.get("metadata"), f"{where}.metadata")
    uid = metadata.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ProtocolError(f"{where}.metadata.uid must be a non-empty string")
    return uid


def render_preempt(result: PreemptResult) -> dict[str, Any]:
    """ExtenderPreemptionResult: only kept candidates (kube-scheduler rejects a node without victims;
    an empty map means no preemption)."""
    return {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in victims.uids], "NumPDBViolations": victims.pdb_violations}
        for node, victims in result.kept.items()}}


def render_filter(args: FilterArgs, result: FilterResult) -> dict[str, Any]:
    """ExtenderFilterResult. NodeNames is always a list (null would mean 'no feasible node')."""
    nodes: dict[str, Any] | None = None
    if args.nodes is not None:
        keep = set(result.feasible)
        nodes = {"items": [node for node in args.nodes if node["metadata"]["name"] in keep]}
    feasible: Any = result.feasible
    if result.feasible is args.node_names and args.names_text is not None:
        # Every requested name fits: the reply's list is the request's own array, byte for byte
        # (node_names_text proved the bytes are that list), not 5,000 strings written again.
        feasible = orjson.Fragment(args.names_text)
    return {
        "Nodes": nodes,
        "NodeNames": feasible,
        "FailedNodes": result.failed,
        "FailedAndUnresolvableNodes": result.failed_unresolvable,
        "Error": result.error,
    }


def render_filter_error(args: FilterArgs | None, message: str) -> dict[str, Any]:
    """A filter reply whose Error fails the scheduling cycle (kube-scheduler retries the pod)."""
    return {"Nodes": None if args is None or args.nodes is None else {"items": []}, "NodeNames": [],
            "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def render_priorities(scores: Iterable[tuple[str, float]]) -> list[dict[str, Any]]:
    """HostPriorityList; scores are truncated to integers and clamped to 0..MAX_SCORE."""
    return [{"Host": host, "Score": max(0, min(MAX_SCORE, int(score)))} for host, score in scores]


def render_bind(error: str = "") -> dict[str, str]:
    """ExtenderBindingResult."""
    return {"Error": error}

"""extender.http.protocol: the PascalCase wire format of k8s.io/kube-scheduler/extender/v1, with golden bodies."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from extender.cluster.verdicts import check_node_names
from extender.engine.requests import BindArgs, FilterArgs, FilterResult
from extender.errors import ProtocolError
from extender.http.protocol import (
    FULL_NODES_REFUSED,
    MAX_SCORE,
    parse_bind_args,
    parse_filter_args,
    render_bind,
    render_filter,
    render_filter_error,
    render_priorities,
)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
NODE_NAMES = ["node-1", "node-2", "node-3", "node-4"]
GANG_MESSAGE = "waiting for gang default/training/workers: 3/4 pods exist"


def golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text(encoding="utf-8"))


def wire(value: Any) -> Any:
    """What the reply looks like after JSON encoding (tuples become arrays, keys stay exact)."""
    return json.loads(json.dumps(value))


POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {}}


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"Pod": copy.deepcopy(POD), "Nodes": None, "NodeNames": ["a", "b"]}
    base.update(overrides)
    return base


def node(name: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **extra}, "status": {"allocatable": {"cpu": "1"}}}


# ------------------------------------------------------------------------------------- golden bodies
def test_golden_request_shapes_are_what_kube_scheduler_sends() -> None:
    by_names = golden("filter_request_nodenames.json")
    assert list(by_names) == ["Pod", "Nodes", "NodeNames"]
    assert by_names["Nodes"] is None
    by_nodes = golden("filter_request_nodes.json")
    assert list(by_nodes) == ["Pod", "Nodes", "NodeNames"]
    assert by_nodes["NodeNames"] is None
    assert by_nodes["Nodes"]["metadata"] == {}
    assert list(golden("bind_request.json")) == ["PodName", "PodNamespace", "PodUID", "Node"]


def test_golden_filter_request_with_node_names() -> None:
    request = golden("filter_request_nodenames.json")
    args = parse_filter_args(request)
    assert args == FilterArgs(pod=request["Pod"], node_names=NODE_NAMES, nodes=None)
    assert args.pod["metadata"]["uid"] == "uid-web-1"
    reply = render_filter(args, FilterResult(list(NODE_NAMES), {}, {}))
    assert wire(reply) == golden("filter_response_nodenames.json")


def test_golden_filter_request_with_full_nodes() -> None:
    request = golden("filter_request_nodes.json")
    args = parse_filter_args(request)
    assert args.node_names == ["node-1", "node-2", "node-3"]
    assert args.nodes == request["Nodes"]["items"]
    reply = render_filter(args, FilterResult(["node-1", "node-2", "node-3"], {}, {}))
    assert wire(reply) == golden("filter_response_nodes.json")
    # the echoed items are the request's own objects, untouched
    for sent, echoed in zip(request["Nodes"]["items"], reply["Nodes"]["items"], strict=True):
        assert echoed is sent


def test_golden_filter_gang_member() -> None:
    args = parse_filter_args(golden("filter_request_gang_member.json"))
    assert args.pod["spec"]["workloadRef"] == {"name": "training", "podGroup": "workers"}
    reply = render_filter(args, FilterResult([], {}, dict.fromkeys(NODE_NAMES, GANG_MESSAGE)))
    assert wire(reply) == golden("filter_response_gang_member.json")


def test_golden_bind_request_upstream_compatibility_example() -> None:
    args = parse_bind_args(golden("bind_request.json"))
    assert args == BindArgs(pod_name="mypodname", pod_namespace="mypodnamespace", pod_uid="mypoduid", node="mynode")
    assert wire(render_bind()) == golden("bind_response_ok.json")


def test_golden_bind_request_for_snapshot_pod() -> None:
    assert parse_bind_args(golden("bind_request_web.json")) == BindArgs("web-1", "default", "uid-web-1", "node-1")


def test_golden_prioritize_upstream_compatibility_example() -> None:
    assert wire(render_priorities([("myhost", 1)])) == golden("prioritize_response_compat.json")
    assert wire(render_priorities((n, 0) for n in NODE_NAMES)) == golden("prioritize_response.json")


# -------------------------------------------------------------------------------- parse_filter_args
def test_parse_filter_args_node_names_keeps_order() -> None:
    args = parse_filter_args(body(NodeNames=["z", "a", "m"]))
    assert args.node_names == ["z", "a", "m"]
    assert args.nodes is None
    assert args.pod == POD


def test_parse_filter_args_empty_node_names_is_valid() -> None:
    assert parse_filter_args(body(NodeNames=[])).node_names == []


def test_parse_filter_args_missing_nodes_key_is_like_null() -> None:
    request = body()
    del request["Nodes"]
    assert parse_filter_args(request).node_names == ["a", "b"]


def test_parse_filter_args_full_nodes() -> None:
    items = [node("n1"), node("n2")]
    args = parse_filter_args(body(NodeNames=None, Nodes={"metadata": {}, "items": items}))
    assert args.node_names == ["n1", "n2"]
    assert args.nodes is items


@pytest.mark.parametrize("node_list", [{"metadata": {}, "items": None}, {"metadata": {}}, {}])
def test_parse_filter_args_nodes_without_items_is_empty(node_list: dict[str, Any]) -> None:
    args = parse_filter_args(body(NodeNames=None, Nodes=node_list))
    assert args.node_names == []
    assert args.nodes == []


def test_parse_filter_args_node_names_win_when_both_are_set() -> None:
    args = parse_filter_args(body(NodeNames=["a"], Nodes={"items": [node("x")]}))
    assert args.node_names == ["a"]
    assert args.nodes is None


def test_parse_filter_args_accepts_pod_without_uid_or_spec() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}}
    assert parse_filter_args(body(Pod=pod)).pod is pod


def test_parse_filter_args_unicode_node_names() -> None:
    names = ["nöde-ü", "节点-1", "node-\u2603"]
    assert parse_filter_args(body(NodeNames=names)).node_names == names


def _without(key: str) -> dict[str, Any]:
    request = body()
    del request[key]
    return request


def _pod_with(metadata: object = None, **fields: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": metadata, **fields}
    return body(Pod=pod)


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        # the body itself
        (None, "request body must be a JSON object, got null"),
        ([], "request body must be a JSON object, got array"),
        ("x", "request body must be a JSON object, got string"),
        (1, "request body must be a JSON object, got number"),
        (1.5, "request body must be a JSON object, got number"),
        (True, "request body must be a JSON object, got boolean"),
        # Pod
        (_without("Pod"), "Pod must be a JSON object, got null"),
        (body(Pod=None), "Pod must be a JSON object, got null"),
        (body(Pod=[POD]), "Pod must be a JSON object, got array"),
        (body(Pod="p"), "Pod must be a JSON object, got string"),
        (body(pod=POD, Pod=None), "Pod must be a JSON object, got null"),  # keys are case-sensitive
        (body(Pod={"spec": {}}), "Pod.metadata must be a JSON object, got null"),
        (_pod_with([]), "Pod.metadata must be a JSON object, got array"),
        (_pod_with({"namespace": "ns"}), "Pod.metadata.name must be a non-empty string"),
        (_pod_with({"name": "", "namespace": "ns"}), "Pod.metadata.name must be a non-empty string"),
        (_pod_with({"name": 7, "namespace": "ns"}), "Pod.metadata.name must be a non-empty string"),
        (_pod_with({"name": "p"}), "Pod.metadata.namespace must be a non-empty string"),
        (_pod_with({"name": "p", "namespace": None}), "Pod.metadata.namespace must be a non-empty string"),
        (_pod_with({"name": "p", "namespace": "ns", "uid": 5}), "Pod.metadata.uid must be a string"),
        (_pod_with({"name": "p", "namespace": "ns"}, spec=[]), "Pod.spec must be a JSON object, got array"),
        (_pod_with({"name": "p", "namespace": "ns"}, spec="x"), "Pod.spec must be a JSON object, got string"),
        # NodeNames / Nodes
        (body(NodeNames=None), "one of NodeNames or Nodes is required (both are null or missing)"),
        ({"Pod": POD}, "one of NodeNames or Nodes is required (both are null or missing)"),
        (body(NodeNames="node-1"), "NodeNames must be an array of strings, got string"),
        (body(NodeNames={"node-1": True}), "NodeNames must be an array of strings, got object"),
        (body(NodeNames=3), "NodeNames must be an array of strings, got number"),
        (body(NodeNames=False), "NodeNames must be an array of strings, got boolean"),
        (body(NodeNames=None, Nodes=[node("a")]), "Nodes must be a JSON object, got array"),
        (body(NodeNames=None, Nodes="a"), "Nodes must be a JSON object, got string"),
        (body(NodeNames=None, Nodes={"items": {"a": node("a")}}), "Nodes.items must be an array, got object"),
        (body(NodeNames=None, Nodes={"items": "a"}), "Nodes.items must be an array, got string"),
        (body(NodeNames=None, Nodes={"items": [node("a"), "b"]}),
         "Nodes.items[1].metadata.name must be a non-empty string of at most 253 characters"),
        (body(NodeNames=None, Nodes={"items": [{"metadata": None}]}),
         "Nodes.items[0].metadata.name must be a non-empty string of at most 253 characters"),
        (body(NodeNames=None, Nodes={"items": [{"metadata": {"name": ""}}]}),
         "Nodes.items[0].metadata.name must be a non-empty string of at most 253 characters"),
        (body(NodeNames=None, Nodes={"items": [{"metadata": {"name": 1}}]}),
         "Nodes.items[0].metadata.name must be a non-empty string of at most 253 characters"),
        (body(NodeNames=None, Nodes={"items": [{"metadata": {"name": "n" * 254}}]}),
         "Nodes.items[0].metadata.name must be a non-empty string of at most 253 characters"),
    ],
)
def test_parse_filter_args_rejects(request_body: object, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_filter_args(request_body)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["a", 1], "NodeNames[1] must be a non-empty string"),
        ([None], "NodeNames[0] must be a non-empty string"),
        (["a", ""], "NodeNames[1] must be a non-empty string"),
        ([["a"]], "NodeNames[0] must be a non-empty string"),
        (["a", "n" * 254], "NodeNames[1] is 254 characters long; a node name has at most 253"),
        (["n" * 253, "n" * 100_000], "NodeNames[1] is 100000 characters long; a node name has at most 253"),
        (["a", "n" * 254, 7], "NodeNames[1] is 254 characters long; a node name has at most 253"),
    ],
)
def test_check_node_names_rejects(names: list[Any], message: str) -> None:
    # NodeNames elements are checked lazily (the filter's fast path proves them by set membership);
    # every path that does not calls check_node_names first.
    assert parse_filter_args(body(NodeNames=names)).node_names == names
    with pytest.raises(ProtocolError) as info:
        check_node_names(names)
    assert str(info.value) == message


def test_duplicate_names_are_allowed() -> None:
    assert check_node_names(["a", "b", "a"]) == ["a", "b", "a"]
    args = parse_filter_args(body(NodeNames=None, Nodes={"items": [node("a"), node("a")]}))
    assert args.node_names == ["a", "a"]


REQUIRED = "Pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _spec(**spec: Any) -> dict[str, Any]:
    return body(Pod={"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})


def _terms(*terms: object) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        (_spec(containers=5), "Pod.spec.containers must be an array, got number"),
        (_spec(containers={"name": "c"}), "Pod.spec.containers must be an array, got object"),
        (_spec(containers=[None]), "Pod.spec.containers[0] must be a JSON object, got null"),
        (_spec(initContainers={"a": 1}), "Pod.spec.initContainers must be an array, got object"),
        (_spec(initContainers=[{}, "x"]), "Pod.spec.initContainers[1] must be a JSON object, got string"),
        (_spec(containers=[{"resources": "x"}]), "Pod.spec.containers[0].resources must be a JSON object, got string"),
        (_spec(containers=[{"resources": {"requests": ["cpu"]}}]),
         "Pod.spec.containers[0].resources.requests must be a JSON object, got array"),
        (_spec(containers=[{}, {"resources": {"limits": []}}]),
         "Pod.spec.containers[1].resources.limits must be a JSON object, got array"),
        (_spec(volumes=5), "Pod.spec.volumes must be an array, got number"),
        (_spec(tolerations="x"), "Pod.spec.tolerations must be an array, got string"),
        (_spec(tolerations=["x"]), "Pod.spec.tolerations[0] must be a JSON object, got string"),
        (_spec(topologySpreadConstraints={}), "Pod.spec.topologySpreadConstraints must be an array, got object"),
        (_spec(resourceClaims="x"), "Pod.spec.resourceClaims must be an array, got string"),
        (_spec(nodeSelector="zone=a"), "Pod.spec.nodeSelector must be a JSON object, got string"),
        (_spec(nodeSelector={"zone": 1}), "Pod.spec.nodeSelector['zone'] must be a string, got number"),
        (_spec(nodeSelector={"zone": None}), "Pod.spec.nodeSelector['zone'] must be a string, got null"),
        (_spec(overhead="1"), "Pod.spec.overhead must be a JSON object, got string"),
        (_spec(affinity="x"), "Pod.spec.affinity must be a JSON object, got string"),
        (_spec(affinity={"nodeAffinity": []}), "Pod.spec.affinity.nodeAffinity must be a JSON object, got array"),
        (_spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": 5}}),
         f"{REQUIRED} must be a JSON object, got number"),
        (_spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": 5}}}), f"{REQUIRED}.nodeSelectorTerms must be an array, got number"),
        (_spec(affinity=_terms(5)), f"{REQUIRED}.nodeSelectorTerms[0] must be a JSON object, got number"),
        (_spec(affinity=_terms({}, {"matchExpressions": "x"})),
         f"{REQUIRED}.nodeSelectorTerms[1].matchExpressions must be an array, got string"),
        (_spec(affinity=_terms({"matchFields": [7]})),
         f"{REQUIRED}.nodeSelectorTerms[0].matchFields[0] must be a JSON object, got number"),
    ],
)
def test_parse_filter_args_rejects_pod_spec_shapes(request_body: object, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_filter_args(request_body)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"containers": None, "initContainers": None, "volumes": None, "tolerations": None, "nodeSelector": None,
         "overhead": None, "affinity": None, "topologySpreadConstraints": None, "resourceClaims": None},
        {"containers": [{"name": "c", "resources": {}}], "initContainers": [], "nodeSelector": {"zone": "a"},
         "affinity": {"nodeAffinity": None, "podAffinity": {}}},
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}}},
        {"affinity": _terms({}, {"matchExpressions": None, "matchFields": []})},
        # fields the extender does not read are not its business
        {"hostNetwork": "yes", "priority": "high", "schedulingGates": 5},
    ],
)
def test_parse_filter_args_accepts_pod_spec_shapes(spec: dict[str, Any]) -> None:
    assert parse_filter_args(_spec(**spec)).pod["spec"] == spec


def test_protocol_error_is_a_value_error() -> None:
    assert issubclass(ProtocolError, ValueError)


# ---------------------------------------------------------------------------------- parse_bind_args
BIND = {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n"}


def _bind(**overrides: Any) -> dict[str, Any]:
    return {**BIND, **overrides}


def _bind_without(key: str) -> dict[str, Any]:
    return {k: v for k, v in BIND.items() if k != key}


def test_parse_bind_args_allows_empty_uid() -> None:
    assert parse_bind_args(_bind(PodUID="")) == BindArgs("p", "ns", "", "n")


def test_parse_bind_args_ignores_unknown_keys() -> None:
    assert parse_bind_args(_bind(Extra=1)) == BindArgs("p", "ns", "u", "n")


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        (None, "request body must be a JSON object, got null"),
        ([BIND], "request body must be a JSON object, got array"),
        ("bind", "request body must be a JSON object, got string"),
        ({}, "PodName must be a non-empty string"),
        (_bind_without("PodName"), "PodName must be a non-empty string"),
        (_bind_without("PodNamespace"), "PodNamespace must be a non-empty string"),
        (_bind_without("PodUID"), "PodUID must be a non-empty string"),
        (_bind_without("Node"), "Node must be a non-empty string"),
        (_bind(PodName=""), "PodName must be a non-empty string"),
        (_bind(PodName=None), "PodName must be a non-empty string"),
        (_bind(PodName=["p"]), "PodName must be a non-empty string"),
        (_bind(PodNamespace=3), "PodNamespace must be a non-empty string"),
        (_bind(PodNamespace=""), "PodNamespace must be a non-empty string"),
        (_bind(PodUID=None), "PodUID must be a non-empty string"),
        (_bind(PodUID=12), "PodUID must be a non-empty string"),
        (_bind(Node=""), "Node must be a non-empty string"),
        (_bind(Node={"name": "n"}), "Node must be a non-empty string"),
        (_bind(Node=True), "Node must be a non-empty string"),
        ({"podName": "p", "podNamespace": "ns", "podUID": "u", "node": "n"}, "PodName must be a non-empty string"),
    ],
)
def test_parse_bind_args_rejects(request_body: object, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_bind_args(request_body)
    assert str(info.value) == message


# ------------------------------------------------------------------------------------ render_filter
def _args(names: list[str], nodes: list[dict[str, Any]] | None = None) -> FilterArgs:
    return FilterArgs(pod=POD, node_names=names, nodes=nodes)


def test_render_filter_node_names_is_a_list_when_nothing_fits() -> None:
    reply = render_filter(_args(["a", "b"]), FilterResult([], {"a": "Insufficient cpu"}, {"b": "waiting"}))
    assert reply == {"Nodes": None, "NodeNames": [], "FailedNodes": {"a": "Insufficient cpu"},
                     "FailedAndUnresolvableNodes": {"b": "waiting"}, "Error": ""}
    assert json.dumps(reply)  # serialisable as is


def test_render_filter_empty_request() -> None:
    assert render_filter(_args([]), FilterResult([], {}, {})) == {
        "Nodes": None, "NodeNames": [], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
    assert render_filter(_args([], []), FilterResult([], {}, {}))["Nodes"] == {"items": []}


def test_render_filter_names_stay_within_the_request() -> None:
    names = ["c", "a", "b"]
    reply = render_filter(_args(names), FilterResult(["c", "b"], {"a": "no"}, {}))
    assert reply["NodeNames"] == ["c", "b"]
    assert set(reply["NodeNames"]) | set(reply["FailedNodes"]) == set(names)


def test_render_filter_nodes_echoes_only_feasible_request_items_in_request_order() -> None:
    items = [node("a", uid="1"), node("b", uid="2"), node("c", uid="3")]
    reply = render_filter(_args(["a", "b", "c"], items), FilterResult(["c", "a"], {"b": "Insufficient cpu"}, {}))
    assert reply["Nodes"] == {"items": [items[0], items[2]]}
    assert reply["Nodes"]["items"][0] is items[0]
    assert reply["NodeNames"] == ["c", "a"]
    assert reply["FailedNodes"] == {"b": "Insufficient cpu"}


def test_render_filter_nodes_never_invents_items() -> None:
    items = [node("a")]
    reply = render_filter(_args(["a"], items), FilterResult(["a", "ghost"], {}, {}))
    assert reply["Nodes"] == {"items": [items[0]]}


def test_render_filter_error_field() -> None:
    reply = render_filter(_args(["a"]), FilterResult([], {}, {}, error="boom"))
    assert reply["Error"] == "boom"


@pytest.mark.parametrize(
    ("args", "expected_nodes"),
    [
        (None, None),
        (_args(["a"]), None),
        (_args(["a"], [node("a")]), {"items": []}),
    ],
)
def test_render_filter_error(args: FilterArgs | None, expected_nodes: object) -> None:
    assert render_filter_error(args, "gang-extender internal error") == {
        "Nodes": expected_nodes, "NodeNames": [], "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
        "Error": "gang-extender internal error"}


# -------------------------------------------------------------------------------- render_priorities
@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([], []),
        ([("myhost", 1)], [{"Host": "myhost", "Score": 1}]),
        ([("a", 0), ("b", 5), ("c", 10)], [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 5},
                                           {"Host": "c", "Score": 10}]),
        ([("a", -3), ("b", 11), ("c", 1000)], [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 10},
                                               {"Host": "c", "Score": 10}]),
        ([("a", 7.9)], [{"Host": "a", "Score": 7}]),
    ],
)
def test_render_priorities(scores: list[tuple[str, float]], expected: list[dict[str, Any]]) -> None:
    reply = render_priorities(scores)  # type: ignore[arg-type]
    assert reply == expected
    assert all(type(item["Score"]) is int for item in reply)


def test_max_score_is_upstream_max_extender_priority() -> None:
    assert MAX_SCORE == 10


@pytest.mark.parametrize(("error", "expected"), [("", {"Error": ""}), ("no", {"Error": "no"})])
def test_render_bind(error: str, expected: dict[str, str]) -> None:
    assert render_bind(error) == expected


def test_check_node_names_accepts_253_characters() -> None:
    names = ["n" * 253, "a", "b" * 200]
    assert check_node_names(names) is names


def test_full_nodes_form_refused_when_off() -> None:
    request = body(NodeNames=None, Nodes={"items": [node("a")]})
    with pytest.raises(ProtocolError) as info:
        parse_filter_args(request, full_nodes=False)
    assert str(info.value) == FULL_NODES_REFUSED
    assert parse_filter_args(body(NodeNames=["a"]), full_nodes=False).node_names == ["a"]
    assert parse_filter_args(request, full_nodes=True).node_names == ["a"]

"""The HTTP edge end to end: the Flask app over a snapshot cluster, driven as kube-scheduler drives it."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client import CONTENT_TYPE_LATEST
from werkzeug.test import TestResponse

from extender import native
from extender.config import Settings
from extender.http import protocol
from extender.http.app import create_app
from extender.http.framing import BIND_BODY_MAX_BYTES
from extender.http.protocol import FULL_NODES_REFUSED

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
EXAMPLE_SNAPSHOT = Path(__file__).resolve().parents[2] / "examples" / "snapshot.yaml"
NODE_NAMES = ["node-1", "node-2", "node-3", "node-4"]
GANG_MESSAGE = "waiting for gang default/training/workers: 3/4 pods exist"
UNKNOWN_NODE = "node is not known to gang-extender (its node watch has not seen it)"
Golden = Callable[[str], Any]


def raw(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def post(client: FlaskClient, verb: str, body: object) -> TestResponse:
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(f"/{verb}", data=data, content_type="application/json")


def pod(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                     **spec}}


def filter_body(pod_obj: dict[str, Any], names: list[str] | None = None) -> dict[str, Any]:
    return {"Pod": pod_obj, "Nodes": None, "NodeNames": NODE_NAMES if names is None else names}


def bind_body(name: str, node: str, uid: str | None = None, namespace: str = "default") -> dict[str, str]:
    return {"PodName": name, "PodNamespace": namespace, "PodUID": f"uid-{name}" if uid is None else uid,
            "Node": node}


def assert_json_error(response: TestResponse, status: int) -> dict[str, Any]:
    assert response.status_code == status
    assert response.content_type == "application/json"
    payload = response.get_json()
    assert isinstance(payload, dict)
    assert isinstance(payload["error"], str)
    assert payload["error"]
    return payload


# ------------------------------------------------------------------------------------------- filter
def test_filter_gang_member_of_incomplete_gang(client: FlaskClient, golden: Golden) -> None:
    response = post(client, "filter", raw("filter_request_gang_member.json"))
    assert response.status_code == 200
    assert response.content_type == "application/json"
    assert response.get_json() == golden("filter_response_gang_member.json")
    assert response.get_json()["FailedAndUnresolvableNodes"] == dict.fromkeys(NODE_NAMES, GANG_MESSAGE)


def test_filter_unseen_fourth_member_decides_nothing_until_the_watch_delivers_it(client: FlaskClient,
                                                                                app: Flask) -> None:
    # The scheduler may send a pod before the extender's watch delivers it: the pod is the mirror's, so one it
    # has not seen is told to come back (retryable), nothing reserved; once seen, it completes the quorum.
    member = pod("training-worker-3", workloadRef={"name": "training", "podGroup": "workers"})
    body = filter_body(member, ["node-3", "node-1"])
    reply = post(client, "filter", body).get_json()
    mirror = app.extensions["gang_extender"].runtime.mirror
    gang = next(iter(mirror.gangs()))
    assert mirror.reservation(gang) == {}
    assert reply["NodeNames"] == [] and set(reply["FailedNodes"]) == {"node-3", "node-1"}
    assert "is not known to gang-extender yet" in reply["FailedNodes"]["node-1"]
    mirror.upsert_pod(member)  # the watch delivers it
    reply = post(client, "filter", body).get_json()
    # admitted: capacity is reserved (first fit, node-1 first) and the member is steered onto it
    assert sorted(mirror.reservation(gang)) == ["node-1", "node-2"]
    assert reply == {"Nodes": None, "NodeNames": ["node-1"], "FailedNodes": {},
                     "FailedAndUnresolvableNodes": {}, "Error": ""}


def test_filter_non_gang_pod_fits_every_node(client: FlaskClient, golden: Golden) -> None:
    response = post(client, "filter", raw("filter_request_nodenames.json"))
    assert response.status_code == 200
    assert response.get_json() == golden("filter_response_nodenames.json")


def test_filter_answers_only_for_the_requested_nodes(client: FlaskClient) -> None:
    response = post(client, "filter", filter_body(pod("web-2"), ["node-4", "node-2"]))
    assert response.get_json() == {"Nodes": None, "NodeNames": ["node-4", "node-2"], "FailedNodes": {},
                                   "FailedAndUnresolvableNodes": {}, "Error": ""}


def test_filter_empty_node_names(client: FlaskClient) -> None:
    response = post(client, "filter", filter_body(pod("web-2"), []))
    assert response.status_code == 200
    assert response.get_json() == {"Nodes": None, "NodeNames": [], "FailedNodes": {},
                                   "FailedAndUnresolvableNodes": {}, "Error": ""}


def test_filter_insufficient_resources(client: FlaskClient) -> None:
    big = pod("big")
    big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"
    response = post(client, "filter", filter_body(big, ["node-1", "node-2"]))
    assert response.get_json() == {"Nodes": None, "NodeNames": [],
                                   "FailedNodes": {"node-1": "Insufficient cpu", "node-2": "Insufficient cpu"},
                                   "FailedAndUnresolvableNodes": {}, "Error": ""}


def test_filter_node_selector(client: FlaskClient) -> None:
    picky = pod("picky", nodeSelector={"kubernetes.io/hostname": "node-2"})
    response = post(client, "filter", filter_body(picky))
    message = "node does not match the pod's nodeSelector"
    assert response.get_json() == {"Nodes": None, "NodeNames": ["node-2"],
                                   "FailedNodes": {"node-1": message, "node-3": message, "node-4": message},
                                   "FailedAndUnresolvableNodes": {}, "Error": ""}


@pytest.fixture
def full_client(make_app: Callable[..., Flask]) -> FlaskClient:
    """An extender that accepts the full Nodes form (nodeCacheCapable: false); it is off by default."""
    return make_app(max_full_nodes_body_bytes=8 * 2**20).test_client()


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_full_nodes_form_refused_by_default(client: FlaskClient, verb: str) -> None:
    payload = assert_json_error(post(client, verb, raw("filter_request_nodes.json")), 400)
    assert payload == {"error": FULL_NODES_REFUSED, "verb": verb}
    assert "nodeCacheCapable: true" in payload["error"]


def test_names_form_keeps_its_own_cap_when_full_nodes_are_on(make_app: Callable[..., Flask]) -> None:
    client = make_app(max_body_bytes=2048, max_full_nodes_body_bytes=16384, request_buffer_bytes=16384).test_client()
    names = [f"node-{i}" for i in range(400)]
    payload = assert_json_error(post(client, "filter", filter_body(pod("web-2"), names)), 413)
    assert payload == {"error": "request body larger than 2048 bytes (the NodeNames form)", "status": 413}
    assert post(client, "filter", raw("filter_request_nodes.json")).status_code == 200


def test_filter_full_nodes_echoes_feasible_items(full_client: FlaskClient, golden: Golden) -> None:
    request = golden("filter_request_nodes.json")
    response = post(full_client, "filter", raw("filter_request_nodes.json"))
    assert response.status_code == 200
    reply = response.get_json()
    assert reply == golden("filter_response_nodes.json")
    assert reply["Nodes"]["items"] == request["Nodes"]["items"]
    assert reply["NodeNames"] == ["node-1", "node-2", "node-3"]


def test_filter_full_nodes_drops_infeasible_items(full_client: FlaskClient, golden: Golden) -> None:
    request = golden("filter_request_nodes.json")
    request["Pod"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "node-2"}
    reply = post(full_client, "filter", request).get_json()
    message = "node does not match the pod's nodeSelector"
    assert reply == {"Nodes": {"items": [request["Nodes"]["items"][1]]}, "NodeNames": ["node-2"],
                     "FailedNodes": {"node-1": message, "node-3": message},
                     "FailedAndUnresolvableNodes": {}, "Error": ""}


def test_filter_full_nodes_teach_the_mirror_nothing(full_client: FlaskClient) -> None:
    """A forged ``Nodes`` list (issue 11, reproduction 3): an invented node is infeasible, and stays
    unknown to later requests; a real node's forged allocatable is ignored for the mirror's."""
    ghost = {"metadata": {"name": "ghost", "labels": {}},
             "status": {"allocatable": {"cpu": "512", "memory": "4Ti", "pods": "110"}}}
    body = {"Pod": pod("web-2"), "Nodes": {"metadata": {}, "items": [ghost]}, "NodeNames": None}
    reply = post(full_client, "filter", body).get_json()
    assert reply == {"Nodes": {"items": []}, "NodeNames": [], "FailedNodes": {"ghost": UNKNOWN_NODE},
                     "FailedAndUnresolvableNodes": {}, "Error": ""}
    reply = post(full_client, "filter", filter_body(pod("web-3"), ["ghost"])).get_json()
    assert reply["NodeNames"] == [] and reply["FailedNodes"] == {"ghost": UNKNOWN_NODE}
    big = pod("web-2")
    big["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100"}}
    forged = {"metadata": {"name": "node-1"}, "status": {"allocatable": {"cpu": "512", "pods": "110"}}}
    reply = post(full_client, "filter", {"Pod": big, "Nodes": {"items": [forged]}, "NodeNames": None}).get_json()
    assert reply["NodeNames"] == [] and reply["FailedNodes"]["node-1"].startswith("Insufficient cpu")


def test_filter_full_nodes_are_never_parsed(full_client: FlaskClient) -> None:
    bad = {"metadata": {"name": "node-9"}, "status": {"allocatable": {"cpu": "lots"}}}
    body = {"Pod": pod("web-2"), "Nodes": {"items": [bad]}, "NodeNames": None}
    reply = post(full_client, "filter", body).get_json()
    assert reply["NodeNames"] == [] and reply["FailedNodes"] == {"node-9": UNKNOWN_NODE}


@pytest.mark.parametrize("names", [["nöde-1"], ["节点"], ["node-\u2603", "node-1"], ["\U0001f680"]])
def test_filter_unicode_node_names(client: FlaskClient, names: list[str]) -> None:
    response = post(client, "filter", filter_body(pod("web-2"), names))
    assert response.status_code == 200
    reply = response.get_json()
    unknown = [n for n in names if n not in NODE_NAMES]
    assert reply == {"Nodes": None, "NodeNames": [n for n in names if n in NODE_NAMES],
                     "FailedNodes": dict.fromkeys(unknown, UNKNOWN_NODE), "FailedAndUnresolvableNodes": {},
                     "Error": ""}
    # raw UTF-8 on the wire, not only \\u escapes
    encoded = json.dumps(filter_body(pod("web-2"), names), ensure_ascii=False).encode()
    assert post(client, "filter", encoded).get_json() == reply


def test_filter_never_answers_a_node_absent_from_the_request(client: FlaskClient) -> None:
    for names in (["node-2"], ["node-4", "node-1"], ["ghost", "node-3"], []):
        reply = post(client, "filter", filter_body(pod("web-2"), names)).get_json()
        assert set(reply["NodeNames"]) <= set(names)
        assert set(reply["FailedNodes"]) | set(reply["FailedAndUnresolvableNodes"]) <= set(names)
        assert isinstance(reply["NodeNames"], list)


def test_filter_invalid_gang_annotation_fails_every_node_unresolvably(client: FlaskClient) -> None:
    bad = pod("bad")
    bad["metadata"]["annotations"] = {"gang-extender.io/group": "g"}
    reply = post(client, "filter", filter_body(bad, ["node-1", "node-2"])).get_json()
    message = "invalid gang: pod has gang-extender.io/group but no gang-extender.io/min-count annotation"
    assert reply == {"Nodes": None, "NodeNames": [], "FailedNodes": {},
                     "FailedAndUnresolvableNodes": {"node-1": message, "node-2": message}, "Error": ""}


def test_filter_missing_workload_fails_unresolvably(client: FlaskClient, app: Flask) -> None:
    orphan = pod("orphan", workloadRef={"name": "missing", "podGroup": "workers"})
    app.extensions["gang_extender"].runtime.mirror.upsert_pod(orphan)
    reply = post(client, "filter", filter_body(orphan, ["node-1"])).get_json()
    assert reply["FailedAndUnresolvableNodes"] == {
        "node-1": "waiting for gang default/missing/workers: Workload default/missing pod group 'workers' does not "
                  "exist"}
    assert reply["NodeNames"] == []


def test_filter_bad_quantity_in_pod_is_a_bad_request(client: FlaskClient) -> None:
    bad = pod("bad")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "abc"
    payload = assert_json_error(post(client, "filter", filter_body(bad)), 400)
    assert payload == {"error": "Pod: invalid quantity 'abc'", "verb": "filter"}


# --------------------------------------------------------------------------------------- prioritize
def test_prioritize_shape(client: FlaskClient, golden: Golden) -> None:
    response = post(client, "prioritize", raw("filter_request_nodenames.json"))
    assert response.status_code == 200
    assert response.content_type == "application/json"
    reply = response.get_json()
    assert reply == golden("prioritize_response.json")
    for item in reply:
        assert list(item) == ["Host", "Score"]
        assert isinstance(item["Score"], int)
        assert 0 <= item["Score"] <= 10


def test_prioritize_gang_member(client: FlaskClient) -> None:
    reply = post(client, "prioritize", raw("filter_request_gang_member.json")).get_json()
    assert reply == [{"Host": name, "Score": 0} for name in NODE_NAMES]


def test_prioritize_full_nodes_request(full_client: FlaskClient) -> None:
    reply = post(full_client, "prioritize", raw("filter_request_nodes.json")).get_json()
    assert reply == [{"Host": name, "Score": 0} for name in NODE_NAMES[:3]]


def test_prioritize_bad_request(client: FlaskClient) -> None:
    payload = assert_json_error(post(client, "prioritize", {"Pod": None, "NodeNames": []}), 400)
    assert payload == {"error": "Pod must be a JSON object, got null", "verb": "prioritize"}


# --------------------------------------------------------------------------------------------- bind
def test_bind_non_gang_pod_then_rebind_elsewhere(client: FlaskClient, golden: Golden, app: Flask) -> None:
    response = post(client, "bind", raw("bind_request_web.json"))
    assert response.status_code == 200
    assert response.get_json() == golden("bind_response_ok.json")
    mirror = app.extensions["gang_extender"].runtime.mirror
    assert mirror.pod("default", "web-1").node_name == "node-1"
    # the same bind again is idempotent
    assert post(client, "bind", bind_body("web-1", "node-1")).get_json() == {"Error": ""}
    # another node: refused
    response = post(client, "bind", bind_body("web-1", "node-2"))
    assert response.status_code == 200
    assert response.get_json() == {"Error": "pod default/web-1 is already bound to node-1"}
    assert mirror.pod("default", "web-1").node_name == "node-1"


def test_bind_takes_capacity_seen_by_filter(client: FlaskClient) -> None:
    assert post(client, "bind", bind_body("web-1", "node-1")).get_json() == {"Error": ""}
    hungry = pod("hungry")
    hungry["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3500m"
    reply = post(client, "filter", filter_body(hungry, ["node-1", "node-2"])).get_json()
    assert reply["NodeNames"] == ["node-2"]
    assert reply["FailedNodes"] == {"node-1": "Insufficient cpu"}


def test_bind_unknown_pod(client: FlaskClient, golden: Golden) -> None:
    response = post(client, "bind", golden("bind_request.json"))
    assert response.status_code == 200
    assert response.get_json() == {"Error": "pod mypodnamespace/mypodname does not exist"}
    assert post(client, "bind", bind_body("nope", "node-1", uid="")).get_json() == {
        "Error": "pod default/nope does not exist"}


def test_bind_recreated_pod(client: FlaskClient) -> None:
    assert post(client, "bind", bind_body("web-1", "node-1", uid="uid-other")).get_json() == {
        "Error": "pod default/web-1 has uid uid-web-1, not uid-other: it was re-created"}


def test_bind_unknown_node(client: FlaskClient) -> None:
    assert post(client, "bind", bind_body("web-1", "node-9")).get_json() == {
        "Error": "node node-9 is not known to the extender"}


def test_bind_without_uid(client: FlaskClient) -> None:
    assert post(client, "bind", bind_body("web-1", "node-3", uid="")).get_json() == {"Error": ""}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"PodName": "web-1", "PodNamespace": "default", "PodUID": "u"}, "Node must be a non-empty string"),
        ({"PodName": 1, "PodNamespace": "default", "PodUID": "u", "Node": "n"}, "PodName must be a non-empty string"),
        ({"PodName": "web-1", "PodNamespace": None, "PodUID": "u", "Node": "n"},
         "PodNamespace must be a non-empty string"),
        ({"PodName": "web-1", "PodNamespace": "default", "PodUID": [], "Node": "n"},
         "PodUID must be a non-empty string"),
        ([], "request body must be a JSON object, got array"),
    ],
)
def test_bind_bad_requests(client: FlaskClient, body: object, message: str) -> None:
    payload = assert_json_error(post(client, "bind", body), 400)
    assert payload == {"error": message, "verb": "bind"}


def test_gang_bind_times_out_at_the_barrier(make_app: Callable[..., Flask]) -> None:
    client = make_app(gang_timeout_seconds=0.05).test_client()
    response = post(client, "bind", bind_body("training-worker-0", "node-1", uid="uid-worker-0"))
    assert response.status_code == 200
    assert response.get_json() == {
        "Error": "gang default/training/workers timed out after 0.05s with 1 member(s) held of 4 needed; released its "
                 "reservation and backing off"}


# ------------------------------------------------------------------------------------- bad requests
VERBS = ["filter", "prioritize", "bind"]


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "request body is empty; expected a JSON object"),
        (b"[]", "request body must be a JSON object, got array"),
        (b'"x"', "request body must be a JSON object, got string"),
        (b"null", "request body must be a JSON object, got null"),
        (b"42", "request body must be a JSON object, got number"),
        (b"true", "request body must be a JSON object, got boolean"),
        (b"{}", None),  # verb-specific first problem
    ],
)
def test_non_object_bodies(client: FlaskClient, verb: str, data: bytes, message: str | None) -> None:
    payload = assert_json_error(post(client, verb, data), 400)
    if message is None:
        message = "PodName must be a non-empty string" if verb == "bind" else "Pod must be a JSON object, got null"
    assert payload == {"error": message, "verb": verb}


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize(
    "data",
    [
        b"{",
        b"{'Pod': 1}",
        b'{"Pod": }',
        b"\xff\xfe\x00",
        b'{"a": NaN}',
        b"[" * 100_000,
        b'{"a":' * 100_000,
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
def test_malformed_json(client: FlaskClient, verb: str, data: bytes) -> None:
    if verb == "bind" and len(data) > BIND_BODY_MAX_BYTES:
        assert_json_error(post(client, verb, data), 413)
        return
    payload = assert_json_error(post(client, verb, data), 400)
    assert payload["verb"] == verb
    assert payload["error"].startswith("request body is not valid JSON: ")


def test_deep_nesting_names_the_depth_limit(client: FlaskClient) -> None:
    payload = assert_json_error(post(client, "filter", b"[" * 100_000), 400)
    assert "depth" in payload["error"] or "recursion" in payload["error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"Pod": pod("p"), "Nodes": None, "NodeNames": None},
         "one of NodeNames or Nodes is required (both are null or missing)"),
        ({"Pod": pod("p"), "NodeNames": "node-1"}, "NodeNames must be an array of strings, got string"),
        ({"Pod": pod("p"), "NodeNames": [1]}, "NodeNames[0] must be a non-empty string"),
        ({"Pod": pod("p"), "Nodes": {"items": {}}, "NodeNames": None}, "Nodes.items must be an array, got object"),
        ({"Pod": [], "NodeNames": []}, "Pod must be a JSON object, got array"),
        ({"Pod": {"metadata": "x"}, "NodeNames": []}, "Pod.metadata must be a JSON object, got string"),
        ({"Pod": {"metadata": {"name": "p"}}, "NodeNames": []}, "Pod.metadata.namespace must be a non-empty string"),
        ({"Pod": {"metadata": {"name": "p", "namespace": "d"}, "spec": 5}, "NodeNames": []},
         "Pod.spec must be a JSON object, got number"),
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_wrong_types(full_client: FlaskClient, verb: str, body: dict[str, Any], message: str) -> None:
    payload = assert_json_error(post(full_client, verb, body), 400)
    assert payload == {"error": message, "verb": verb}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"containers": [{"resources": {"requests": ["cpu"]}}]},
         "Pod.spec.containers[0].resources.requests must be a JSON object, got array"),
        ({"containers": [{"resources": {"limits": {"memory": None}}}]}, "Pod: invalid quantity None"),
        ({"overhead": "1"}, "Pod.spec.overhead must be a JSON object, got string"),
        ({"initContainers": [{"resources": {"requests": {"cpu": True}}}]}, "Pod: invalid quantity True"),
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_wrong_types_inside_the_pod_resources(client: FlaskClient, verb: str, spec: dict[str, Any],
                                              message: str) -> None:
    body = {"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}, "NodeNames": ["node-1"]}
    payload = assert_json_error(post(client, verb, body), 400)
    assert payload == {"error": message, "verb": verb}


REQUIRED = "Pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"containers": 5}, "Pod.spec.containers must be an array, got number"),
        ({"volumes": 5}, "Pod.spec.volumes must be an array, got number"),
        ({"tolerations": 5}, "Pod.spec.tolerations must be an array, got number"),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": 5}}}},
         f"{REQUIRED}.nodeSelectorTerms must be an array, got number"),
        ({"nodeSelector": "zone=a"}, "Pod.spec.nodeSelector must be a JSON object, got string"),
        ({"initContainers": {"a": 1}}, "Pod.spec.initContainers must be an array, got object"),
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_wrong_types_inside_the_pod_are_bad_requests(client: FlaskClient, verb: str, spec: dict[str, Any],
                                                     message: str) -> None:
    body = {"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}, "NodeNames": ["node-1"]}
    payload = assert_json_error(post(client, verb, body), 400)
    assert payload == {"error": message, "verb": verb}


def test_oversized_body(make_app: Callable[..., Flask]) -> None:
    client = make_app(max_body_bytes=1024).test_client()
    for verb in ("filter", "prioritize"):
        response = post(client, verb, b"{" + b" " * 2048 + b"}")
        payload = assert_json_error(response, 413)
        assert payload == {"error": "request body larger than 1024 bytes", "status": 413}
    # bind has its own cap, whatever --max-body-bytes says
    assert post(client, "bind", b"{" + b" " * 2048 + b"}").status_code == 400
    payload = assert_json_error(post(client, "bind", b"{" + b" " * BIND_BODY_MAX_BYTES + b"}"), 413)
    assert payload == {"error": f"request body larger than {BIND_BODY_MAX_BYTES} bytes", "status": 413}
    # below the limit still works
    small = json.dumps(bind_body("web-1", "node-1"))
    assert len(small) < 1024
    assert post(client, "bind", small).get_json() == {"Error": ""}


def test_oversized_golden_request(make_app: Callable[..., Flask]) -> None:
    client = make_app(max_body_bytes=2048).test_client()
    assert len(raw("filter_request_nodes.json")) > 2048
    assert_json_error(post(client, "filter", raw("filter_request_nodes.json")), 413)


@pytest.mark.parametrize(("method", "path"), [("get", "/filter"), ("get", "/prioritize"), ("get", "/bind"),
                                              ("put", "/bind"), ("delete", "/filter"), ("patch", "/prioritize"),
                                              ("post", "/healthz"), ("post", "/readyz"), ("post", "/metrics")])
def test_wrong_method(client: FlaskClient, method: str, path: str) -> None:
    payload = assert_json_error(getattr(client, method)(path), 405)
    assert payload == {"error": "The method is not allowed for the requested URL.", "status": 405}


@pytest.mark.parametrize("path", ["/", "/nope", "/filter/", "/Filter", "/api/filter", "/filter/extra"])
def test_unknown_path(client: FlaskClient, path: str) -> None:
    for method in ("get", "post", "put"):
        payload = assert_json_error(getattr(client, method)(path, data="{}"), 404)
        assert payload["status"] == 404


def test_unknown_path_message(client: FlaskClient) -> None:
    payload = assert_json_error(client.post("/nope", data="{}"), 404)
    assert payload == {"error": "The requested URL was not found on the server. If you entered the URL manually "
                                "please check your spelling and try again.", "status": 404}


def test_internal_error_is_answered_in_protocol_shape(app: Flask, client: FlaskClient,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    engine = app.extensions["gang_extender"].runtime.engine

    def boom(*_args: Any) -> Any:
        raise RuntimeError("kaput")

    monkeypatch.setattr(engine, "filter", boom)
    monkeypatch.setattr(engine, "prioritize", boom)
    monkeypatch.setattr(engine, "bind", boom)
    response = post(client, "filter", raw("filter_request_nodenames.json"))
    assert response.status_code == 200
    assert response.get_json() == {"Nodes": None, "NodeNames": [], "FailedNodes": {},
                                   "FailedAndUnresolvableNodes": {},
                                   "Error": "gang-extender internal error in filter: RuntimeError: kaput"}
    assert post(client, "prioritize", raw("filter_request_nodenames.json")).get_json() == []
    assert post(client, "bind", raw("bind_request_web.json")).get_json() == {
        "Error": "gang-extender internal error in bind: RuntimeError: kaput"}


# ------------------------------------------------------------------------------- health and metrics
def test_healthz(client: FlaskClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


def test_readyz_in_snapshot_mode(client: FlaskClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.get_json() == {"ready": True, "mode": "snapshot"}


def test_metrics(client: FlaskClient) -> None:
    post(client, "filter", raw("filter_request_nodenames.json"))
    post(client, "filter", b"[]")
    post(client, "bind", raw("bind_request_web.json"))
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST  # exactly one charset parameter
    text = response.get_data(as_text=True)
    assert "# TYPE gang_extender_requests_total counter" in text
    assert 'gang_extender_requests_total{outcome="ok",verb="filter"} 1.0' in text
    assert 'gang_extender_requests_total{outcome="bad_request",verb="filter"} 1.0' in text
    assert 'gang_extender_requests_total{outcome="ok",verb="bind"} 1.0' in text
    assert 'gang_extender_request_seconds_count{verb="filter"} 2.0' in text
    cpu = {verb: float(re.search(rf'gang_extender_request_cpu_seconds_total{{verb="{verb}"}} (\S+)', text)[1])
           for verb in ("filter", "bind")}
    assert all(0 < seconds < 5 for seconds in cpu.values()), cpu  # each verb's handler ran on its thread's CPU
    assert "gang_extender_mirror_nodes 4.0" in text
    assert "gang_extender_mirror_pods 4.0" in text
    assert "gang_extender_filter_cache_misses_total 1.0" in text
    assert "gang_extender_filter_steered_total 0.0" in text
    for outcome in ("met", "timed_out", "over_budget"):
        assert f'gang_extender_filter_quorum_waits_total{{outcome="{outcome}"}} 0.0' in text
    hot_path = native.hot_path()
    assert (f'gang_extender_build_info{{hot_path="{hot_path.build}",native_modules="{len(hot_path.native)}",'
            f'version="{native.package_version()}"}} 1.0') in text


def test_metrics_report_each_watch_initial_sync_time_and_events(make_app: Callable[..., Flask]) -> None:
    class Listed:  # what the metrics read of a Reflector
        def __init__(self, name: str, seconds: float | None) -> None:
            self.name, self.initial_sync_seconds, self.relists, self.errors = name, seconds, 1, 0
            self.events = 7 if seconds is not None else 0
            self.healthy = seconds is not None
            self.synced = threading.Event()
            if seconds is not None:
                self.synced.set()

    app = make_app()
    runtime = app.extensions["gang_extender"].runtime
    runtime.core_reflectors = [Listed("nodes", 1.25), Listed("pods", None)]
    text = app.test_client().get("/metrics").get_data(as_text=True)
    assert "# TYPE gang_extender_watch_initial_sync_seconds gauge" in text
    assert 'gang_extender_watch_initial_sync_seconds{resource="nodes"} 1.25' in text
    assert 'gang_extender_watch_initial_sync_seconds{resource="pods"}' not in text  # not listed yet
    assert 'gang_extender_watch_events_total{resource="nodes"} 7.0' in text
    assert 'gang_extender_watch_events_total{resource="pods"} 0.0' in text


def test_each_app_has_its_own_registry(make_app: Callable[..., Flask]) -> None:
    first, second = make_app().test_client(), make_app().test_client()
    post(first, "filter", raw("filter_request_nodenames.json"))
    assert 'verb="filter"} 1.0' in first.get("/metrics").get_data(as_text=True)
    assert 'gang_extender_requests_total{outcome="ok",verb="filter"}' not in \
        second.get("/metrics").get_data(as_text=True)


# ------------------------------------------------------------------------------ the shipped example
def test_example_snapshot_serves(golden: Golden) -> None:
    app = create_app(Settings(cluster_snapshot=str(EXAMPLE_SNAPSHOT)))
    try:
        client = app.test_client()
        assert post(client, "filter", raw("filter_request_gang_member.json")).get_json() == \
            golden("filter_response_gang_member.json")
        assert post(client, "filter", raw("filter_request_nodenames.json")).get_json() == \
            golden("filter_response_nodenames.json")
        assert client.get("/readyz").status_code == 200
    finally:
        app.extensions["gang_extender"].runtime.close()


def test_duplicate_node_names_each_get_a_verdict(client: FlaskClient) -> None:
    body = {"Pod": {"metadata": {"name": "dup", "namespace": "default", "uid": "u-dup"}, "spec": {}},
            "NodeNames": ["node-1", "node-2", "node-1"]}
    for _ in range(2):  # the same answer on a cache miss and on a hit
        response = post(client, "filter", body)
        assert response.status_code == 200
        assert response.get_json()["NodeNames"] == ["node-1", "node-2", "node-1"]


@pytest.mark.parametrize("names", [["node-1", 7], ["node-1", ["x"]], ["node-1", ""], [None]])
def test_invalid_node_names_are_rejected_whatever_the_cache_holds(client: FlaskClient, names: list[Any]) -> None:
    pod_body = {"metadata": {"name": "warm", "namespace": "default", "uid": "u-warm"}, "spec": {}}
    assert post(client, "filter", {"Pod": pod_body, "NodeNames": ["node-1", "node-2"]}).status_code == 200
    for verb in ("filter", "prioritize"):
        assert_json_error(post(client, verb, {"Pod": pod_body, "NodeNames": names}), 400)


def test_verbs_answer_error_until_the_first_list_is_complete(app: Flask, client: FlaskClient,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = app.extensions["gang_extender"].runtime
    monkeypatch.setattr(runtime, "synced", lambda: False)
    names = ["node-1"]
    pod_body = {"metadata": {"name": "p", "namespace": "default"}, "spec": {}}
    filtered = post(client, "filter", {"Pod": pod_body, "NodeNames": names})
    assert filtered.status_code == 200
    assert filtered.get_json()["Error"].startswith("gang-extender is starting")
    assert filtered.get_json()["NodeNames"] == []
    bound = post(client, "bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "node-1"})
    assert bound.get_json()["Error"].startswith("gang-extender is starting")
    assert post(client, "prioritize", {"Pod": pod_body, "NodeNames": names}).get_json() == []


# ------------------------------------------------------------------------------------- explain
def test_explain_endpoint_reads_the_ledger(client: FlaskClient) -> None:
    reply = client.get("/explain/default/training")
    assert reply.status_code == 200 and reply.mimetype == "application/json"
    body = reply.get_json()
    assert body["synced"] is True and [g["gang"] for g in body["gangs"]] == ["default/training/workers"]
    (gang,) = body["gangs"]
    assert gang["state"] == "WaitingForMembers" and gang["minCount"] == 4
    assert gang["members"]["existing"] == 3 and gang["kind"] == "Workload"
    assert client.get("/explain/default/training?podGroup=workers").get_json()["gangs"] == body["gangs"]
    assert client.get("/explain/default/training?podGroup=driver").status_code == 404
    missing = client.get("/explain/default/nothing")
    assert missing.status_code == 404 and missing.get_json()["gangs"] == []
    assert client.post("/explain/default/training").status_code == 405


def test_a_list_recognised_by_its_text_is_checked_again_once_a_node_stops_fitting(client: FlaskClient) -> None:
    """The cache remembers an all-fit list and, from the second request on, its text as kube-scheduler
    writes it (compact, NodeNames last): equal bytes are a hit without comparing names. A node that stops
    fitting must end that, or the same bytes would keep claiming it fits."""
    big = pod("big", containers=[{"name": "main", "resources": {"requests": {"cpu": "3500m"}}}])
    body = orjson.dumps(filter_body(big)) + b"\n"
    assert protocol.node_names_text(body) is not None  # the form this test is about
    for _ in range(3):  # a miss (the list remembered), a hit by the list (its text remembered), a hit by the text
        reply = post(client, "filter", body).get_json()
        assert (reply["NodeNames"], reply["FailedNodes"]) == (NODE_NAMES, {})
    assert post(client, "bind", bind_body("web-1", "node-1")).get_json() == {"Error": ""}  # 1 cpu of node-1's 4
    reply = post(client, "filter", body).get_json()
    assert reply["NodeNames"] == ["node-2", "node-3", "node-4"]
    assert list(reply["FailedNodes"]) == ["node-1"]

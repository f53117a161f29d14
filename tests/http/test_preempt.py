"""POST /preempt end to end through the Flask app over the snapshot cluster (tests/http/conftest.py):
the ExtenderPreemptionArgs wire shapes kube-scheduler sends, the reply it reads, and bad bodies."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from extender.http.protocol import FULL_PODS_REFUSED
from extender.model.gang import GangKey, GroupKind, GroupRef
from tests.http.conftest import snapshot_pod

WORKERS = {"name": "training", "podGroup": "workers"}  # the snapshot's gang: minCount 4, 3 members, none bound


def post(client: FlaskClient, body: object) -> TestResponse:
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post("/preempt", data=data, content_type="application/json")


def bound_pod(app: Flask, name: str, node: str, workload_ref: dict[str, str] | None = None) -> dict[str, Any]:
    obj = snapshot_pod(name, f"uid-{name}", "1", "1Gi", workload_ref)
    obj["spec"]["nodeName"] = node
    obj["status"]["phase"] = "Running"
    app.extensions["gang_extender"].runtime.mirror.upsert_pod(obj)
    return obj


def meta_body(preemptor: dict[str, Any], victims: dict[str, list[str]], pdb: int = 0) -> dict[str, Any]:
    return {"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb} for node, uids in victims.items()}}


def urgent() -> dict[str, Any]:
    return snapshot_pod("urgent", "uid-urgent", "4", "8Gi")


def test_plain_victims_pass_and_unknown_nodes_are_dropped(app: Flask, client: FlaskClient) -> None:
    bound_pod(app, "web-a", "node-1")
    response = post(client, meta_body(urgent(), {"node-1": ["uid-web-a"], "node-9": ["uid-web-a"],
                                                 "node-2": ["uid-web-a"]}, pdb=2))
    assert response.status_code == 200
    assert response.get_json() == {"NodeNameToMetaVictims": {
        "node-1": {"Pods": [{"UID": "uid-web-a"}], "NumPDBViolations": 2}}}


def test_member_of_the_waiting_gang_gets_no_candidate(app: Flask, client: FlaskClient) -> None:
    bound_pod(app, "web-a", "node-1")
    member = snapshot_pod("training-worker-0", "uid-worker-0", "2", "4Gi", WORKERS)
    response = post(client, meta_body(member, {"node-1": ["uid-web-a"]}))
    assert response.status_code == 200
    assert response.get_json() == {"NodeNameToMetaVictims": {}}


def test_victims_with_a_gang_member_drop_the_node(app: Flask, client: FlaskClient) -> None:
    bound_pod(app, "web-a", "node-1")
    bound_pod(app, "web-b", "node-2")
    bound_pod(app, "training-worker-0", "node-1", WORKERS)  # bound now (same UID as the snapshot's member)
    response = post(client, meta_body(urgent(), {"node-1": ["uid-web-a", "uid-training-worker-0"],
                                                 "node-2": ["uid-web-b"]}))
    assert response.get_json() == {"NodeNameToMetaVictims": {
        "node-2": {"Pods": [{"UID": "uid-web-b"}], "NumPDBViolations": 0}}}


def test_a_node_whose_freed_room_is_reserved_for_a_gang_is_dropped(app: Flask, client: FlaskClient) -> None:
    """Issue 26, finding 8: the victim on node-1 was evicted, and the preemptor still did not fit there:
    what it freed is reserved for an admitted gang. A node is kept only where the preemptor fits once its
    victims leave, other gangs' reservations counted."""
    mirror = app.extensions["gang_extender"].runtime.mirror
    bound_pod(app, "web-a", "node-1")
    bound_pod(app, "web-b", "node-2")
    admitted = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "admitted"))
    mirror.set_reservation(admitted, [("node-1", {"cpu": 3000, "pods": 1})])  # 3 of node-1's 4 cpu kept for it
    response = post(client, meta_body(urgent(), {"node-1": ["uid-web-a"], "node-2": ["uid-web-b"]}))
    assert response.get_json() == {"NodeNameToMetaVictims": {
        "node-2": {"Pods": [{"UID": "uid-web-b"}], "NumPDBViolations": 0}}}


def test_full_pods_form_refused_by_default_accepted_when_enabled(make_app: Callable[..., Flask]) -> None:
    body = {"Pod": urgent(), "NodeNameToVictims": {"node-1": {"Pods": [], "NumPDBViolations": 0}}}
    response = post(make_app().test_client(), body)
    assert response.status_code == 400
    assert response.get_json() == {"error": FULL_PODS_REFUSED, "verb": "preempt"}
    app = make_app(max_full_nodes_body_bytes=8 * 2**20)
    victim = bound_pod(app, "web-a", "node-1")
    body["NodeNameToVictims"] = {"node-1": {"Pods": [victim], "NumPDBViolations": 1}}
    assert post(app.test_client(), body).get_json() == {"NodeNameToMetaVictims": {
        "node-1": {"Pods": [{"UID": "uid-web-a"}], "NumPDBViolations": 1}}}


def meta(entry: object) -> dict[str, Any]:
    return {"Pod": urgent(), "NodeNameToMetaVictims": {"node-1": entry}}


@pytest.mark.parametrize(("body", "message"), [
    (b"{", "request body is not valid JSON"),
    ({"Pod": urgent()}, "one of NodeNameToMetaVictims or NodeNameToVictims is required"),
    ({"NodeNameToMetaVictims": {}}, "Pod must be a JSON object, got null"),
    ({"Pod": urgent(), "NodeNameToMetaVictims": []}, "NodeNameToMetaVictims must be a JSON object, got array"),
    ({"Pod": urgent(), "NodeNameToMetaVictims": {"": {"Pods": []}}}, "keys must be node names of 1 to 253"),
    (meta(None), "NodeNameToMetaVictims['node-1'] must be a JSON object, got null"),
    (meta({"Pods": {}}), "NodeNameToMetaVictims['node-1'].Pods must be an array, got object"),
    (meta({"Pods": [7]}), "NodeNameToMetaVictims['node-1'].Pods[0] must be a JSON object, got number"),
    (meta({"Pods": [{"UID": ""}]}), "NodeNameToMetaVictims['node-1'].Pods[0].UID must be a non-empty string"),
    (meta({"Pods": [], "NumPDBViolations": "1"}), "NumPDBViolations must be a non-negative 64-bit integer, got string"),
    (meta({"Pods": [], "NumPDBViolations": -1}), "NumPDBViolations must be a non-negative 64-bit integer, got -1"),
    (meta({"Pods": [], "NumPDBViolations": True}), "must be a non-negative 64-bit integer, got boolean"),
])
def test_malformed_bodies_are_400_with_a_clear_message(client: FlaskClient, body: object, message: str) -> None:
    response = post(client, body)
    assert response.status_code == 400
    payload = response.get_json()
    assert payload["verb"] == "preempt"
    assert message in payload["error"]


def test_a_preemptor_filter_would_refuse_is_a_bad_request(client: FlaskClient) -> None:
    bad = urgent()
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    response = post(client, meta_body(bad, {"node-1": ["uid-web-1"]}))
    assert response.status_code == 400
    assert response.get_json()["error"].startswith("Pod: ")


def test_pdb_violations_written_as_a_whole_float_are_read_as_an_integer(app: Flask, client: FlaskClient) -> None:
    bound_pod(app, "web-a", "node-1")
    body = meta_body(urgent(), {"node-1": ["uid-web-a"]})
    body["NodeNameToMetaVictims"]["node-1"]["NumPDBViolations"] = 3.0
    assert post(client, body).get_json() == {"NodeNameToMetaVictims": {
        "node-1": {"Pods": [{"UID": "uid-web-a"}], "NumPDBViolations": 3}}}
    body["NodeNameToMetaVictims"]["node-1"]["NumPDBViolations"] = 3.5
    assert post(client, body).status_code == 400


def test_meta_form_is_capped_by_the_names_cap(make_app: Callable[..., Flask]) -> None:
    # the full-Pods cap is larger here: the NodeNameToMetaVictims form still gets only the names cap
    client = make_app(max_body_bytes=1024, max_full_nodes_body_bytes=16384, request_buffer_bytes=16384).test_client()
    body = meta_body(urgent(), {f"node-{i}": ["uid-x" * 4] for i in range(60)})
    response = post(client, body)
    assert response.status_code == 413
    assert response.get_json()["error"] == "request body larger than 1024 bytes (the NodeNameToMetaVictims form)"


def test_a_preempt_body_may_be_as_large_as_a_filter_body(client: FlaskClient) -> None:
    # victims of hundreds of candidate nodes: far above the 16 KiB of bodiless paths, within the names cap
    body = meta_body(urgent(), {f"node-{i}": [f"uid-{i}-{j}" for j in range(20)] for i in range(500)})
    assert len(json.dumps(body)) > 200_000
    response = post(client, body)
    assert response.status_code == 200
    assert response.get_json() == {"NodeNameToMetaVictims": {}}


def test_internal_error_and_not_ready_answer_no_candidates(app: Flask, client: FlaskClient,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    bound_pod(app, "web-a", "node-1")
    body = meta_body(urgent(), {"node-1": ["uid-web-a"]})
    runtime = app.extensions["gang_extender"].runtime

    def boom(*_args: Any) -> Any:
        raise RuntimeError("kaput")

    monkeypatch.setattr(runtime.engine, "preempt", boom)
    response = post(client, body)
    assert (response.status_code, response.get_json()) == (200, {"NodeNameToMetaVictims": {}})
    monkeypatch.undo()
    monkeypatch.setattr(runtime, "serving_problem", lambda: "not the leader")
    response = post(client, body)
    assert (response.status_code, response.get_json()) == (200, {"NodeNameToMetaVictims": {}})
    monkeypatch.undo()
    assert post(client, body).get_json()["NodeNameToMetaVictims"] != {}  # the same body, served normally

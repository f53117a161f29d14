"""Hostile input: generated bodies for every verb never produce a 5xx, an internal error, a hang, a
reply outside the protocol, or an over-committed node (strategies and the contract: fuzzing.py).

By default this runs against the Flask app over a snapshot (test client, a few hundred bodies per
verb, part of ``make test-fast``). ``make fuzz`` (hack/fuzz.py) runs the same tests with
``GANG_FUZZ_EXAMPLES=10000`` against a live ``gang-extender serve --cluster-snapshot`` (gunicorn) named
by ``GANG_FUZZ_URL``, then schemathesis against docs/openapi.yaml.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.cluster.fit import shortfall
from extender.config import Settings
from extender.http.app import create_app
from extender.http.protocol import MAX_NODES_PER_REQUEST
from tests.http.fuzzing import (
    NODE_NAMES,
    VERBS,
    Post,
    bind_bodies,
    check_reply,
    deep,
    encode,
    filter_bodies,
    hostile_bodies,
)
from tests.http.fuzzing import snapshot_document as fuzz_snapshot

URL = os.environ.get("GANG_FUZZ_URL", "")
EXAMPLES = int(os.environ.get("GANG_FUZZ_EXAMPLES", "250"))
HANG_SECONDS = 10.0  # far above any answer, the 20 ms gang timeout of the local app included
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not URL,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])


class LiveServer:
    """POST over keep-alive connections (one per thread) to ``GANG_FUZZ_URL``."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._local = threading.local()
        self._opened: list[http.client.HTTPConnection] = []

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self.host, self.port, timeout=HANG_SECONDS)
            self._opened.append(conn)
        return conn  # type: ignore[no-any-return]

    def close(self) -> None:
        for conn in self._opened:
            conn.close()

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, str, bytes]:
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
                reply = conn.getresponse()
                return reply.status, reply.getheader("Content-Type") or "", reply.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()  # the server may close a connection after an error reply: retry once
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "snapshot.json"
    path.write_text(json.dumps(fuzz_snapshot()))
    return path


@pytest.fixture(scope="module")
def app(snapshot: Path) -> Iterator[Flask | None]:
    if URL:
        yield None
        return
    # the full Nodes form is off by default; it is turned on here so that its parsing is fuzzed too
    app = create_app(Settings(cluster_snapshot=str(snapshot), gang_timeout_seconds=0.02, gang_backoff_seconds=0.0,
                              max_full_nodes_body_bytes=64 * 2**20, request_buffer_bytes=64 * 2**20))
    yield app
    app.extensions["gang_extender"].runtime.close()


@pytest.fixture(scope="module")
def post(app: Flask | None) -> Iterator[Post]:
    if app is None:
        server = LiveServer(URL)

        def post_live(verb: str, body: bytes) -> tuple[int, str, bytes]:
            return server.request("POST", f"/{verb}", body)
        yield post_live
        status, _, text = server.request("GET", "/metrics")
        server.close()
        assert status == 200
        internal = [line for line in text.decode().splitlines()
                    if line.startswith("gang_extender_requests_total") and 'outcome="error"' in line]
        assert all(line.endswith(" 0.0") for line in internal), internal
        return
    client = app.test_client()
    registry = app.extensions["gang_extender"].metrics.registry

    def internal(verb: str) -> float:
        labels = {"verb": verb, "outcome": "error"}
        return registry.get_sample_value("gang_extender_requests_total", labels) or 0.0

    def post_local(verb: str, body: bytes) -> tuple[int, str, bytes]:
        before = internal(verb)
        reply = client.post(f"/{verb}", data=body, content_type="application/json")
        assert internal(verb) == before, f"internal error in {verb} for {body[:300]!r}: {reply.get_data()[:500]!r}"
        return reply.status_code, reply.content_type or "", reply.get_data()
    yield post_local


def send(post: Post, verb: str, body: bytes) -> tuple[int, bytes]:
    started = time.monotonic()
    status, content_type, data = post(verb, body)
    elapsed = time.monotonic() - started
    assert elapsed < HANG_SECONDS, f"{verb} took {elapsed:.1f}s for {body[:300]!r}"
    check_reply(verb, body, status, content_type, data)
    return status, data


def assert_no_node_overcommitted(app: Flask | None) -> None:
    if app is None:
        return
    mirror = app.extensions["gang_extender"].runtime.mirror
    with mirror.lock:
        for name, node in mirror.nodes.items():
            assert shortfall(mirror.used(name), node.allocatable) is None, (name, mirror.used(name))


# -------------------------------------------------------------------------------- generated
@pytest.mark.parametrize("verb", VERBS)
@FUZZ
@given(body=st.data())
def test_hostile_bodies(post: Post, app: Flask | None, verb: str, body: st.DataObject) -> None:
    send(post, verb, body.draw(hostile_bodies(verb)))
    assert_no_node_overcommitted(app)


@settings(FUZZ, max_examples=max(EXAMPLES // 5, 20))
@given(steps=st.lists(st.one_of(bind_bodies().map(lambda b: ("bind", b)),
                                filter_bodies().map(lambda b: ("filter", b))), min_size=1, max_size=12))
def test_bind_and_filter_sequences_never_overcommit(post: Post, app: Flask | None,
                                                    steps: list[tuple[str, dict[str, Any]]]) -> None:
    """Binds for known, unknown, bound and gang pods, interleaved with filters that teach nodes."""
    for verb, body in steps:
        status, data = send(post, verb, encode(body))
        if verb == "bind" and status == 200:
            error = orjson.loads(data)["Error"]
            assert error == "" or "internal" not in error
        assert_no_node_overcommitted(app)


# -------------------------------------------------------------------------------- targeted
def _pod(name: str = "huge") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"u-{name}"},
            "spec": {"containers": [{"resources": {"requests": {"cpu": "100m"}}}]}}


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_enormous_node_name_lists(post: Post, verb: str) -> None:
    """Up to MAX_NODES_PER_REQUEST names are answered one by one; more are a clear 400 (the reply names
    every node, so the count bounds its memory)."""
    names = NODE_NAMES + [f"unknown-node-{i}" for i in range(MAX_NODES_PER_REQUEST - len(NODE_NAMES))]
    status, data = send(post, verb, encode({"Pod": _pod(), "Nodes": None, "NodeNames": names}))
    assert status == 200
    reply = orjson.loads(data)
    if verb == "filter":
        assert len(reply["FailedNodes"]) >= len(names) - 4 and set(reply["NodeNames"]) <= set(NODE_NAMES)
    else:
        assert len(reply) == len(names)
    status, data = send(post, verb, encode({"Pod": _pod(), "Nodes": None, "NodeNames": [*names, "one-more"]}))
    assert status == 400 and f"at most {MAX_NODES_PER_REQUEST}" in orjson.loads(data)["error"]


def test_enormous_full_node_lists(post: Post) -> None:
    items = [{"metadata": {"name": f"big-{i}", "labels": {"zone": str(i % 3)}},
              "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}} for i in range(10_000)]
    status, data = send(post, "filter", encode({"Pod": _pod(), "Nodes": {"items": items}, "NodeNames": None}))
    reply = orjson.loads(data)
    assert status == 200 and reply["Nodes"]["items"] == [] and len(reply["FailedNodes"]) == 10_000  # none known


PATHS = [("metadata", "name"), ("metadata", "uid"), ("metadata", "labels", "scheduling.x-k8s.io/pod-group"),
         ("metadata", "annotations", "gang-extender.io/group"), ("spec", "nodeName"), ("spec", "schedulerName"),
         ("spec", "overhead", "cpu"), ("spec", "containers", 0, "resources", "requests", "cpu"),
         ("spec", "workloadRef", "name"), ("spec", "workloadRef", "podGroup"), ("spec", "tolerations", 0, "key"),
         ("spec", "affinity", "nodeAffinity"), ("spec", "nodeSelector", "zone")]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: ".".join(map(str, p)))
@pytest.mark.parametrize("depth", [250, 990, 1020])
def test_deep_nesting_anywhere_in_the_pod(post: Post, path: tuple[Any, ...], depth: int) -> None:
    pod: dict[str, Any] = {"metadata": {"name": "deep", "namespace": "default", "annotations": {
        "gang-extender.io/min-count": "2"}}, "spec": {"containers": [{"resources": {"requests": {}}}],
                                                     "tolerations": [{}], "workloadRef": {"name": "w"}}}
    target: Any = pod
    for key in path[:-1]:
        target = target.setdefault(key, {}) if isinstance(key, str) else target[key]
    target[path[-1]] = deep(depth)
    for verb in ("filter", "prioritize"):
        send(post, verb, encode({"Pod": pod, "NodeNames": NODE_NAMES}))
    bind = {"PodName": deep(depth), "PodNamespace": "default", "PodUID": "", "Node": "node-1"}
    send(post, "bind", encode(bind))


# -------------------------------------------------------------------------- regressions found
def test_failure_messages_are_bounded_per_node(post: Post) -> None:
    """A 100 KB annotation quoted once per node made a 115 KB request answer 200 MB."""
    pod = {"metadata": {"name": "amp", "namespace": "default", "annotations": {
        "gang-extender.io/group": "g", "gang-extender.io/min-count": "x" * 100_000}}, "spec": {}}
    names = [f"n{i}" for i in range(2_000)]
    status, data = send(post, "filter", encode({"Pod": pod, "NodeNames": names}))
    assert status == 200 and len(data) < 2_000 * 1_200
    pod = {"metadata": {"name": "amp2", "namespace": "default"},
           "spec": {"containers": [{"resources": {"requests": {"r" * 100_000: "1"}}}]}}
    status, data = send(post, "filter", encode({"Pod": pod, "NodeNames": NODE_NAMES * 300}))
    assert status == 200 and len(data) < 2_000 * 1_200


def test_affinity_values_do_not_multiply_with_nodes(post: Post) -> None:
    """200,000 In values against 5,000 nodes took 14 s of the only worker's GIL (tuple scans)."""
    items = [{"metadata": {"name": f"aff-{i}", "labels": {"k": f"v{i}"}}, "status": {"allocatable": {"cpu": "8"}}}
             for i in range(5_000)]
    terms = [{"matchExpressions": [{"key": "k", "operator": "In", "values": [f"x{i}" for i in range(200_000)]}]}]
    pod = {"metadata": {"name": "aff", "namespace": "default"},
           "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
               "nodeSelectorTerms": terms}}}}}
    started = time.monotonic()
    status, _ = send(post, "filter", encode({"Pod": pod, "Nodes": {"items": items}, "NodeNames": None}))
    assert status == 200 and time.monotonic() - started < 5.0


@pytest.mark.parametrize("path", ["/filter", "/bind", "/healthz", "/metrics"])
def test_405_names_the_allowed_methods(app: Flask | None, path: str) -> None:
    if app is None:
        pytest.skip("checked with the test client")
    reply = app.test_client().put(path)
    assert reply.status_code == 405 and reply.headers["Allow"] and reply.get_json()["status"] == 405


@pytest.mark.parametrize("taints", [True, 1, "x", {"key": "a"}])
def test_node_with_taints_not_a_list(post: Post, taints: object) -> None:
    """Found by ``make fuzz``: a full Node whose spec.taints was not a list was an internal error. (Node
    objects in a request are no longer read at all: only the mirror's nodes are feasible.)"""
    node = {"metadata": {"name": f"taints-{type(taints).__name__}"}, "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "1"}}}
    status, data = send(post, "filter", encode({"Pod": _pod(), "Nodes": {"items": [node]}, "NodeNames": None}))
    reply = orjson.loads(data)
    assert status == 200 and reply["NodeNames"] == [] and list(reply["FailedNodes"]) == [node["metadata"]["name"]]


REQUIREMENT = "Pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"


@pytest.mark.parametrize(("spec", "message"), [
    ({"containers": [{"ports": True}]}, "Pod.spec.containers[0].ports must be an array, got boolean"),
    ({"initContainers": [{"ports": [1]}]}, "Pod.spec.initContainers[0].ports[0] must be a JSON object, got number"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "k", "operator": "In", "values": True}]}]}}}},
     f"{REQUIREMENT}.matchExpressions[0].values must be an array of strings, got boolean"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", 7]}]}]}}}},
     f"{REQUIREMENT}.matchFields[0].values must be an array of strings, got array"),
])
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_wrong_types_the_fuzzer_found(post: Post, verb: str, spec: dict[str, Any], message: str) -> None:
    """Found by the fuzz tests: these reached iteration in fit.py/signature.py as internal errors."""
    body = {"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}, "NodeNames": ["node-1"]}
    status, data = send(post, verb, encode(body))
    assert status == 400 and orjson.loads(data) == {"error": message, "verb": verb}


@FUZZ
@given(namespace=st.text(min_size=1, max_size=40), name=st.text(min_size=1, max_size=40),
       query=st.dictionaries(st.sampled_from(["podGroup", "replica", "x"]), st.text(max_size=20), max_size=3))
def test_explain_with_hostile_path_and_query(app: Flask | None, namespace: str, name: str,
                                             query: dict[str, str]) -> None:
    """GET /explain/<namespace>/<name> (issue 5's read-only endpoint) answers 200/404 JSON whatever the names."""
    if app is None:
        pytest.skip("checked with the test client")
    path = f"/explain/{urllib.parse.quote(namespace, safe='')}/{urllib.parse.quote(name, safe='')}"
    reply = app.test_client().get(path, query_string=query)
    assert reply.status_code in (200, 404), (path, reply.status_code, reply.get_data()[:300])
    assert reply.content_type.startswith("application/json") and isinstance(reply.get_json(), dict)


def test_explain_of_a_name_with_a_slash_is_a_json_404(app: Flask | None) -> None:
    """Found by test_explain_with_hostile_path_and_query: ``/explain/0/%2F0`` was answered with an HTML 308
    (werkzeug merged the decoded "//"); no Kubernetes name holds a "/", so it is a 404 like any unknown gang."""
    if app is None:
        pytest.skip("checked with the test client")
    reply = app.test_client().get("/explain/0/%2F0")
    assert reply.status_code == 404 and reply.content_type.startswith("application/json"), reply.get_data()[:200]

"""``POST /fit``: the fit oracle over the extender's own view, for tools (issue 28 item 1).

The app over the snapshot cluster (four 4-cpu nodes; a Workload ``default/training`` of 4 with 3 pods),
then a live ``gang-extender serve`` (the serving worker's per-path body caps, a fork from a worker with
its threads running). ``Asking`` itself: one question at a time, the deadline kills the child, the answer
comes from another process.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from extender.errors import RefusedError, SubmissionError
from extender.wiring import asking
from tests.http.conftest import NODE_NAMES, snapshot_objects
from tests.http.live import LiveServer


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """The app's client, its questions not spaced (``test_questions_are_spaced`` keeps the spacing)."""
    app.extensions["gang_extender"].runtime.asking.min_interval = 0.0
    return app.test_client()


def gang(name: str, size: int, cpu: str, **spec: Any) -> list[dict[str, Any]]:
    """A Workload of minCount ``size`` and its pods, as a user would submit them."""
    workload = {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
                "metadata": {"name": name, "namespace": "team-a"},
                "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": size}}}]}}
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-{i}", "namespace": "team-a"},
             "spec": {"workloadRef": {"name": name, "podGroup": "workers"}, **spec,
                      "containers": [{"name": "main", "image": "pause",
                                      "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}
            for i in range(size)]
    return [workload, *pods]


def fit(client: FlaskClient, body: Any, query: str = "") -> tuple[int, dict[str, Any]]:
    reply = client.post("/fit" + query, data=body if isinstance(body, bytes) else json.dumps(body),
                        content_type="application/json")
    return reply.status_code, reply.get_json()


def test_a_gang_that_fits_is_told_where(client: FlaskClient) -> None:
    status, answer = fit(client, gang("train", 3, "3"))
    assert status == 200 and answer["verdict"] == "FitsNow", answer
    assert sum(answer["placement"]["nodes"].values()) == 3 and set(answer["placement"]["nodes"]) <= set(NODE_NAMES)
    assert answer["gang"] == "team-a/train/workers" and answer["minCount"] == 3


def test_a_gang_no_node_can_hold_is_told_never_with_the_reason(client: FlaskClient) -> None:
    status, answer = fit(client, gang("huge", 2, "6"))
    assert status == 200 and answer["verdict"] == "Never", answer
    assert "can never fit this cluster" in answer["reason"] and "cpu=6" in answer["reason"], answer


def test_the_answer_counts_what_the_cluster_runs(client: FlaskClient) -> None:
    """Four nodes of 4 cpu: 4 members of 3 cpu fit now; 8 never do, and 4 more nodes would change that."""
    assert fit(client, gang("four", 4, "3"))[1]["verdict"] == "FitsNow"
    status, answer = fit(client, gang("eight", 8, "3"))
    assert status == 200 and answer["verdict"] == "Never" and "only 4 of 8 members fit" in answer["reason"], answer
    assert answer["capacity"]["nodes"] == 4 and answer["capacity"]["shape"]["like"] in NODE_NAMES, answer


@pytest.mark.parametrize(("body", "query", "says"), [
    (b"not json", "", "not valid JSON"),
    ([1, 2], "", "every document must be an object"),
    ("a string", "", "a Kubernetes object, a List, or a JSON array"),
    ([], "", "no object"),
    (gang("p", 2, "1", priorityClassName="high"), "", "give spec.priority"),
    (gang("q", 2, "1"), "?count=abc", "count must be a whole number"),
    (gang("q", 2, "1"), "?count=%C2%B2", "count must be a whole number"),  # "²": a digit to str.isdigit
    (gang("r", 2, "1")[1:], "", "has no group with a gang policy"),
])
def test_what_cannot_be_answered_is_a_400_that_says_why(client: FlaskClient, body: Any, query: str, says: str) -> None:
    status, answer = fit(client, body, query)
    assert status == 400 and says in answer["error"], answer


def test_the_live_server_answers_a_body_larger_than_other_paths_take_and_refuses_past_its_cap(
        tmp_path: Path) -> None:
    snapshot = {"apiVersion": "v1", "kind": "List", "items": snapshot_objects()}
    objects = gang("padded", 2, "1")
    objects[0]["metadata"]["annotations"] = {"note": "x" * 40_000}  # over the 16 KiB of /explain's cap
    with LiveServer(tmp_path, snapshot, args=["--threads", "16"]) as live:
        request = urllib.request.Request(live.url + "/fit", data=json.dumps(objects).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            answer = json.loads(reply.read())
        assert answer["verdict"] == "FitsNow", answer
        huge = urllib.request.Request(live.url + "/fit", data=b"[" + b" " * (2 * 1024 * 1024) + b"]",
                                      headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(huge, timeout=30)
        refused.value.close()
        assert refused.value.code == 413
        assert live.ready()
    assert "Traceback" not in live.log_path.read_text(), live.log_tail()


# ---------------------------------------------------------------------------------------- Asking
def _asking(client: FlaskClient) -> asking.Asking:
    found = client.application.extensions["gang_extender"].runtime.asking
    assert isinstance(found, asking.Asking)
    return found


def test_the_answer_comes_from_another_process(client: FlaskClient) -> None:
    answer = _asking(client)._in_child(lambda: {"pid": os.getpid()})
    assert answer["pid"] != os.getpid()


def test_a_question_past_the_deadline_is_dropped_and_its_child_killed(client: FlaskClient) -> None:
    """The deadline is the guarantee here: 0.5 s, against a child that would take 60 s."""
    ask = _asking(client)
    ask.deadline = 0.5
    started = time.monotonic()
    with pytest.raises(RefusedError) as dropped:
        ask._in_child(lambda: time.sleep(60) or {})  # type: ignore[func-returns-value]
    assert dropped.value.status == 503 and time.monotonic() - started < 10
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # reaped: no child left behind


def test_one_question_at_a_time(client: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    ask = _asking(client)
    ask.fork = False
    entered, leave = threading.Event(), threading.Event()

    def slow(world: Any, question: Any) -> dict[str, Any]:  # the oracle, held until the second question
        entered.set()
        leave.wait(30)
        return {"verdict": "FitsNow"}
    monkeypatch.setattr(asking.oracle, "ask", slow)
    first = threading.Thread(target=lambda: fit(client, gang("a", 2, "1")))
    first.start()
    assert entered.wait(30)
    status, answer = fit(client, gang("b", 2, "1"))
    leave.set()
    first.join(30)
    assert status == 429 and "another fit" in answer["error"], answer
    assert fit(client, gang("c", 2, "1"))[0] == 200


def test_questions_are_spaced(app: Flask) -> None:
    """A question sooner than ``min_interval`` after the last is refused (the bound on what a tool asking
    in a loop costs the verbs); one after it is answered."""
    client = app.test_client()
    _asking(client).min_interval = 60.0  # so that the second question is surely too soon, however slow
    assert fit(client, gang("a", 2, "1"))[0] == 200
    status, answer = fit(client, gang("b", 2, "1"))
    assert status == 429 and "at most every 60.0s" in answer["error"], answer
    _asking(client)._next_at = 0.0  # as if the interval had passed
    assert fit(client, gang("c", 2, "1"))[0] == 200


def test_the_question_is_read_in_the_child(client: FlaskClient) -> None:
    """The body becomes pods in the child (under its deadline and memory limit), not in the server."""
    def read() -> Any:
        raise SubmissionError(f"read in {os.getpid()}")
    with pytest.raises(SubmissionError) as refused:
        _asking(client).ask(read)
    assert str(refused.value) != f"read in {os.getpid()}" and str(refused.value).startswith("read in ")


def test_the_child_keeps_no_connection_of_the_server(client: FlaskClient) -> None:
    """A connection the server closes must close for its client at once, not when a fit ends."""
    with socket.socket() as held:
        answer = _asking(client)._in_child(lambda: {"fds": sorted(int(f) for f in os.listdir("/proc/self/fd"))})
        assert held.fileno() not in answer["fds"] and len(answer["fds"]) <= 5, answer


def test_a_child_past_its_memory_is_a_503_and_the_server_lives(client: FlaskClient) -> None:
    with pytest.raises(RefusedError) as failed:
        _asking(client)._in_child(lambda: {"size": len(bytearray(3 * asking.CHILD_MEMORY_BYTES))})
    assert failed.value.status == 503 and "MiB" in failed.value.message, failed.value.message


def test_a_worker_with_more_than_1024_files_still_answers(client: FlaskClient) -> None:
    """select() cannot wait on a file past 1023; a worker holding a barrier of 1,000 binds has such files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard limit of open files is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    files = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        assert _asking(client)._in_child(lambda: {"ok": True}) == {"ok": True}
    finally:
        for fd in files:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_no_answer_before_the_cluster_is_listed(client: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mirror still being listed would answer for a cluster with nodes or pods missing."""
    monkeypatch.setattr(client.application.extensions["gang_extender"].runtime, "synced", lambda: False)
    status, answer = fit(client, gang("early", 2, "1"))
    assert status == 503 and "first list" in answer["error"], answer

"""``explain``: the pure explanation (explanation.explain, largest_shortfall), the ledger's facts, the CLI
rendering and its exit codes, and the runtime's readiness with group watches."""

from __future__ import annotations

import argparse
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from extender import cli, explain
from extender.cluster.records import pod_record
from extender.config import Settings
from extender.gangs import explanation, planner
from extender.model.cluster import NodeRecord
from extender.model.gang import PASS, GangKey, GangPolicy, GroupKind, GroupRef
from extender.wiring.composition import from_snapshot
from extender.wiring.discovery import GroupWatches
from extender.wiring.reporting import explained
from tests.builders import Harness, filter_args, make_engine, node, pod
from tests.unit.test_engine import Binds, wait_until
from tests.unit.test_order import NODES as ORDER_NODES
from tests.unit.test_order import World

NODES = ["n1", "n2", "n3"]


def podgroup(min_count: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"workloadRef": {"workloadName": "w", "templateName": "workers"},
                     "schedulingPolicy": {"gang": {"minCount": min_count}}}}


def member(i: int, cpu: str = "3") -> dict[str, Any]:
    raw = pod(f"train-{i}", cpu=cpu, namespace="ml")
    raw["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    return raw


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = make_engine(timeout_seconds=20.0)
    harness.add(*(node(n) for n in NODES))
    harness.mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
    yield harness
    harness.close()


def test_gang_waiting_for_members() -> None:
    h = make_engine()
    try:
        h.add(*(node(n) for n in NODES))
        h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
        members = [member(0), member(1)]
        h.add(*members)
        h.engine.filter(filter_args(members[0], NODES))
        (answer,) = h.engine.explain("ml", "train")
        assert answer | {"shortfall": None} == {
            "gang": "ml/train", "kind": "PodGroup", "apiVersion": "scheduling.k8s.io/v1beta1",
            "namespace": "ml", "name": "train", "podGroup": None, "replica": None, "template": "w/workers",
            "exists": True, "state": "WaitingForMembers", "minCount": 4,
            "members": {"existing": 2, "bound": 0, "binding": 0, "held": 0, "pending": 2},
            "admitted": False, "reservation": {}, "timeoutSeconds": 30.0, "timeoutRemainingSeconds": None,
            "backoffRemainingSeconds": 0.0, "timeouts": 0, "completed": 0,
            "waiting": "waiting for gang ml/train: 2/4 pods exist", "shortfall": None,
            "heldPods": [], "pendingPods": ["train-0", "train-1"]}
    finally:
        h.close()


def test_gang_that_never_fits_names_the_largest_shortfall(h: Harness) -> None:
    members = [member(i) for i in range(4)]
    h.add(*members)
    assert not h.engine.filter(filter_args(members[0], NODES)).feasible
    (answer,) = h.engine.explain("ml", "train")
    assert answer["state"] == "NeverFits"
    assert answer["waiting"].startswith("gang ml/train can never fit this cluster: only 3 of 4 members fit")
    # 4 members of cpu=3 on three 4-cpu nodes: 3 fit, 1 cpu is left on each node, the fourth needs 3.
    assert answer["shortfall"] == {"resource": "cpu", "amount": "cpu=2", "scope": "node",
                                   "reason": "enough in total, but no node has cpu=3 free for one member"}


@pytest.mark.parametrize("entry", ["GET /explain", "GangState publisher"])
def test_a_filter_is_answered_while_an_explanation_computes_its_shortfall(
        h: Harness, monkeypatch: pytest.MonkeyPatch, entry: str) -> None:
    """An explanation holds the mirror lock only to copy what it needs: a filter from another thread is
    answered while it plans the gang and looks for the shortfall (the slow part, over every node). Were
    the lock held for the whole explanation, the filter would wait for it to end."""
    members = [member(i) for i in range(4)]
    h.add(*members)
    assert not h.engine.filter(filter_args(members[0], NODES)).feasible
    real, answered = explanation.largest_shortfall, []

    def shortfall_beside_a_filter(*args: Any) -> explanation.Shortfall | None:
        done = threading.Event()
        plain = pod("plain", cpu="1")
        threading.Thread(target=lambda: (h.engine.filter(filter_args(plain, NODES)), done.set()), daemon=True).start()
        answered.append(done.wait(2.0))
        return real(*args)

    monkeypatch.setattr(explanation, "largest_shortfall", shortfall_beside_a_filter)
    if entry == "GET /explain":
        (answer,) = h.engine.explain("ml", "train")
    else:
        published = explained(h.ledger, h.mirror, h.mirror.find_gangs("ml", "train")[0])
        assert published is not None
        answer = published.value
    assert answered == [True]
    assert answer["shortfall"]["scope"] == "node"


def test_a_draining_gangs_progress_is_planned_outside_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """How many members fit in a draining reservation now (a plan over its nodes) is computed, like the
    shortfall, after the explanation releases the mirror lock: another thread takes it during each plan."""
    w = World(max_wait=60)
    for name in ORDER_NODES:
        w.running(f"hog-{name}", "2", name)
    big, big_policy, _ = w.gang("big", 4, "3")
    assert w.ledger.admit(big, big_policy) != PASS
    w.clock.advance(61)
    w.ledger.sweep()
    real, explaining, lock_free = planner.plan, threading.current_thread(), []

    def plan_while_another_thread_takes_the_lock(*args: Any, **kwargs: Any) -> planner.Plan:
        if threading.current_thread() is explaining:
            taken = []

            def take() -> None:
                if w.mirror.lock.acquire(timeout=2.0):
                    w.mirror.lock.release()
                    taken.append(True)
            thread = threading.Thread(target=take)
            thread.start()
            thread.join()
            lock_free.append(bool(taken))
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "plan", plan_while_another_thread_takes_the_lock)
    answer = w.ledger.view.explain(big)
    assert answer["state"] == "Draining" and answer["order"]["draining"]["free"] == 0  # 2 of 4 cpu free, 3 asked
    assert len(lock_free) >= 2 and all(lock_free), lock_free  # the shortfall, the drain's progress, the fix's plans


def test_gang_waiting_for_capacity_names_the_cluster_shortfall(h: Harness) -> None:
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(3))
    h.add(pod("hog", cpu="4", namespace="ml", node="n1"))
    members = [member(i) for i in range(3)]
    h.add(*members)
    result = h.engine.filter(filter_args(members[0], NODES))
    assert set(result.failed.values()) == {"waiting for capacity for gang ml/train: 2/3 remaining members fit; "
                                           "no node has cpu=3 free (largest free falls short by cpu=2)"}
    (answer,) = h.engine.explain("ml", "train")
    assert answer["state"] == "WaitingForCapacity" and answer["waiting"] == next(iter(result.failed.values()))
    assert answer["shortfall"] == {"resource": "cpu", "amount": "cpu=1", "scope": "cluster",
                                   "reason": "1 member(s) need cpu=3, cpu=2 is free"}


def test_fragmented_capacity_is_a_per_node_shortfall() -> None:
    records = [pod_record(member(i, cpu="3")) for i in range(2)]
    node_records = [NodeRecord(n, {"cpu": 4000, "memory": 16 * 2**30, "pods": 110}, {}) for n in ("a", "b")]
    free = {"a": {"cpu": 2000, "memory": 2**34, "pods": 100}, "b": {"cpu": 2000, "memory": 2**34, "pods": 100}}
    plan = planner.plan(records[:1], node_records, lambda n: free[n.name])
    shortfall = explanation.largest_shortfall(plan, node_records, lambda n: free[n.name])
    assert shortfall == explanation.Shortfall("cpu", 1000, "node",
                                        "enough in total, but no node has cpu=3 free for one member")
    assert shortfall.to_json()["amount"] == "cpu=1"
    complete = planner.plan([], node_records, lambda n: free[n.name])
    assert explanation.largest_shortfall(complete, node_records, lambda n: free[n.name]) is None


def test_admitted_and_holding_gang(h: Harness) -> None:
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(3))
    members = [member(i) for i in range(3)]
    h.add(*members)
    assert h.engine.filter(filter_args(members[0], NODES)).feasible
    runner = Binds(h)
    try:
        runner.start(members[0], "n1")
        wait_until(lambda: h.ledger.view.held_count() == 1)
        (answer,) = h.engine.explain("ml", "train")
        assert answer["state"] == "Holding" and answer["admitted"] is True
        assert answer["members"] == {"existing": 3, "bound": 0, "binding": 0, "held": 1, "pending": 2}
        assert answer["reservation"] == {"n2": "cpu=3, memory=1Gi, pods=1", "n3": "cpu=3, memory=1Gi, pods=1"}
        assert answer["timeoutRemainingSeconds"] == 20.0 and answer["heldPods"] == ["train-0"]
        assert answer["shortfall"] is None
    finally:
        h.binder.gate.set()
        runner.start(members[1], "n2")
        runner.start(members[2], "n3")
        assert runner.join() == {"train-0": "", "train-1": "", "train-2": ""}
    (answer,) = h.engine.explain("ml", "train")
    assert answer["state"] == "Complete" and answer["waiting"] is None and answer["completed"] == 1


def test_unknown_group_and_workload_pod_groups() -> None:
    h = make_engine()
    try:
        assert h.engine.explain("ml", "nothing") == []
        h.add({"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
               "metadata": {"name": "w", "namespace": "ml"},
               "spec": {"podGroups": [{"name": "a", "policy": {"gang": {"minCount": 2}}},
                                      {"name": "b", "policy": {"basic": {}}}]}})
        assert [g["podGroup"] for g in h.engine.explain("ml", "w")] == ["a", "b"]
        assert [g["state"] for g in h.engine.explain("ml", "w", pod_group="b")] == ["NotAGang"]
        missing = GangKey(GroupRef(GroupKind.COSCHEDULING, "ml", "gone"))
        h.add(pod("x", namespace="ml", pod_group="gone"))
        assert h.ledger.view.explain(missing)["state"] == "GroupMissing"
    finally:
        h.close()


def test_facts_policy_copy() -> None:
    facts = explanation.GangFacts(GangKey(GroupRef(GroupKind.ANNOTATION, "ml", "g")), True, GangPolicy(2), (), {},
                            frozenset(), {})
    assert explanation.explain(facts, [], lambda n: {})["state"] == "WaitingForMembers"


# -------------------------------------------------------------------------------------------- CLI
ANSWER = {"namespace": "ml", "name": "train", "synced": True, "gangs": [{
    "gang": "ml/train", "kind": "PodGroup", "apiVersion": "scheduling.k8s.io/v1beta1", "template": "w/workers",
    "state": "WaitingForCapacity", "minCount": 4,
    "members": {"existing": 4, "bound": 0, "binding": 0, "held": 0, "pending": 4},
    "reservation": {}, "timeoutSeconds": 20.0, "timeoutRemainingSeconds": None, "backoffRemainingSeconds": 4.5,
    "timeouts": 1, "waiting": "gang ml/train is backing off", "heldPods": [], "pendingPods": ["train-0"],
    "shortfall": {"resource": "cpu", "amount": "cpu=2", "scope": "cluster", "reason": "2 member(s) need cpu=6"}}]}


def test_render_is_readable() -> None:
    text = explain.render(ANSWER)
    assert "Gang:        ml/train   [PodGroup (scheduling.k8s.io/v1beta1)]" in text
    assert "Members:     4 exist, 0 held, 0 bound, 0 binding, 4 pending; minCount 4" in text
    assert "Back-off:    4.5s left after 1 timeout(s)" in text
    assert "Shortfall:   cpu=2 more in the cluster (2 member(s) need cpu=6)" in text
    assert "Waiting:     gang ml/train is backing off" in text


def test_render_shows_the_topology_constraint_its_domain_and_the_other_domains() -> None:
    gang = {**ANSWER["gangs"][0], "topology": {  # type: ignore[index]
        "constraint": "required example.com/rack (gang-extender annotation on the pods)",
        "domain": "example.com/rack=r1", "level": "example.com/rack",
        "otherDomains": [{"domain": "example.com/rack=r2", "nodes": 2, "freeCpu": "cpu=8", "lacks": None},
                         {"domain": "example.com/rack=r3", "nodes": 2, "freeCpu": "cpu=2", "lacks": "lacks cpu=4"}]}}
    text = explain.render({**ANSWER, "gangs": [gang]})
    assert ("Topology:    required example.com/rack (gang-extender annotation on the pods); "
            "domain: example.com/rack=r1") in text
    assert "             example.com/rack=r2 (2 nodes, cpu=8 free): could hold it too" in text
    assert "             example.com/rack=r3 (2 nodes, cpu=2 free): lacks cpu=4" in text
    unusable = explain.render({**ANSWER, "gangs": [{**gang, "topology": {"constraint": None, "problem": "bad key"}}]})
    assert "Topology:    unusable: bad key" in unusable
    assert "Topology:" not in explain.render(ANSWER)


class _Handler(BaseHTTPRequestHandler):
    answers: dict[str, tuple[int, Any]] = {}

    def do_GET(self) -> None:
        status, body = self.answers.get(self.path, (404, {"gangs": []}))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def run_cli(*argv: str) -> tuple[int, str, str]:
    parser = cli._parser()
    args = parser.parse_args(["explain", *argv])
    out, err = io.StringIO(), io.StringIO()
    return explain.run(args, out, err), out.getvalue(), err.getvalue()


def test_cli_prints_the_answer(server: str) -> None:
    _Handler.answers = {"/explain/ml/train": (200, ANSWER),
                        "/explain/ml/w?podGroup=a&replica=0": (200, {"gangs": []})}
    code, out, err = run_cli("ml/train", "--url", server)
    assert code == 0 and "State:       WaitingForCapacity" in out and err == ""
    code, out, _ = run_cli("ml/train", "--url", server + "/", "--json")
    assert code == 0 and json.loads(out) == ANSWER
    code, _, _ = run_cli("ml/w", "--url", server, "--pod-group", "a", "--replica", "0")
    assert code == 0
    code, _, err = run_cli("ml/none", "--url", server)
    assert code == 1 and "knows no gang of group ml/none" in err


@pytest.mark.parametrize("group", ["train", "ml/", "/train", "ml/a/b"])
def test_cli_rejects_a_bad_group(group: str) -> None:
    code, _, err = run_cli(group)
    assert code == 2 and "expected NAMESPACE/GROUP" in err


def test_cli_reports_an_unreachable_extender() -> None:
    code, _, err = run_cli("ml/train", "--url", "http://127.0.0.1:9", "--timeout", "2")
    assert code == 2 and "cannot reach the extender" in err


def test_cli_main_dispatches_explain_without_server_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(explain, "run", lambda args: seen.append(args) or 0)
    monkeypatch.setenv("GANG_EXTENDER_PORT", "not-a-port")  # would make `serve` exit 2
    assert cli.main(["explain", "ml/train"]) == 0
    assert seen[0].group == "ml/train" and seen[0].url == explain.DEFAULT_URL


# --------------------------------------------------------------------------- readiness, discovery
class _Reflector:
    def __init__(self, name: str, synced: bool) -> None:
        self.name, self.healthy, self.last_error = name, True, ""
        self.synced = threading.Event()
        if synced:
            self.synced.set()


def test_synced_latches_and_readiness_follows_current_watches(tmp_path: Path) -> None:
    snapshot = tmp_path / "s.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}))
    runtime = from_snapshot(Settings(cluster_snapshot=str(snapshot)))
    try:
        runtime.mode = "api"
        core = [_Reflector("nodes", True), _Reflector("pods", False)]
        runtime.core_reflectors = core  # type: ignore[assignment]
        later: dict[str, Any] = {}
        runtime.group_watches = GroupWatches(lambda g, v, r: (g, v, r) in later.get("served", set()),
                                             lambda api, v: _Reflector(api.name, False),  # type: ignore[arg-type,return-value]
                                             lambda api, r: None)
        runtime.discovered = True
        assert runtime.synced() is False and runtime.readiness()[0] is False
        core[1].synced.set()
        assert runtime.synced() is False and runtime.readiness()[0] is False  # releases not resumed yet
        runtime.finish_start()  # no journal: nothing to finish
        assert runtime.synced() is True and runtime.readiness()[0] is True
        later["served"] = {("scheduling.k8s.io", "v1beta1", "podgroups")}  # an API appears later
        runtime.group_watches.discover()
        ready, detail = runtime.readiness()
        assert ready is False and detail["groupApis"] == {"podgroups.scheduling.k8s.io": "v1beta1"}
        assert set(detail["watches"]) == {"nodes", "pods", "podgroups.scheduling.k8s.io"}
        assert runtime.synced() is True  # latched: the verbs keep answering while the new watch lists
    finally:
        runtime.close()

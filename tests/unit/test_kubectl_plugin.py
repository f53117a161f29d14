"""``kubectl gang``: the published explanation (explanation.compact/expand, kube.publishing,
wiring.reporting.explanations) and the plugin's reading and printing (extender/kubectl/) over in-memory
objects and a fake ``Reader``."""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from extender.errors import KubeError
from extender.gangs import explanation
from extender.kube.client import kubeconfig_namespace
from extender.kube.publishing import ANNOTATION, REASON, ExplainPublisher, Published
from extender.kubectl import collect, main, render
from extender.model.gang import GroupKind
from extender.wiring.reporting import explained
from tests.builders import FakeClock, coscheduling_podgroup, filter_args, make_engine, node, pod, workload

V1BETA1 = "scheduling.k8s.io/v1beta1"


def podgroup(name: str, min_count: int, ns: str = "ml", reason: str = "") -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": V1BETA1, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns},
                           "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}
    if reason:
        obj["status"] = {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": reason}]}
    return obj


def member(name: str, group: str, ns: str = "ml", bound: str | None = None, phase: str | None = None,
           cpu: str = "1") -> dict[str, Any]:
    raw = pod(name, cpu=cpu, namespace=ns, node=bound, phase=phase)
    raw["spec"]["schedulingGroup"] = {"podGroupName": group}
    return raw


def annotated(name: str, group: str, min_count: int, ns: str = "ml") -> dict[str, Any]:
    return pod(name, namespace=ns, annotations={"gang-extender.io/group": group,
                                                "gang-extender.io/min-count": str(min_count)})


def event(reason: str, message: str, kind: str, name: str, at: str, *, ns: str = "ml", version: int = 1,
          api_version: str = V1BETA1, form: dict[str, Any] | None = None,
          component: str = "gang-extender") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"{name}.{version}", "namespace": ns, "resourceVersion": str(version)}
    if form is not None:
        metadata["annotations"] = {ANNOTATION: json.dumps(form)}
    return {"metadata": metadata, "reason": reason, "message": message, "lastTimestamp": at,
            "source": {"component": component},
            "involvedObject": {"kind": kind, "name": name, "namespace": ns,
                               "apiVersion": "v1" if kind == "Pod" else api_version}}


def answer(**fields: Any) -> dict[str, Any]:
    base = {"gang": "ml/train", "kind": "PodGroup", "apiVersion": V1BETA1, "namespace": "ml", "name": "train",
            "podGroup": None, "replica": None, "template": None, "exists": True, "state": "Holding",
            "minCount": 4, "members": {"existing": 4, "bound": 0, "binding": 0, "held": 2, "pending": 2},
            "admitted": True, "reservation": {f"n{i}": "cpu=1" for i in range(12)}, "timeoutSeconds": 20.0,
            "timeoutRemainingSeconds": 15.0, "backoffRemainingSeconds": 0.0, "timeouts": 0, "completed": 0,
            "waiting": "x" * 1000, "shortfall": None, "heldPods": ["a", "b"],
            "pendingPods": [f"p{i}" for i in range(20)]}
    return base | fields


# ------------------------------------------------------------------------- the published form
def test_published_form_is_compact_and_reads_back_as_of_now() -> None:
    order = {"position": 2, "of": 3, "priority": 0, "waitingSeconds": 40.0, "maxWaitSeconds": 300.0,
             "ahead": [{"gang": "ml/a", "priority": 5, "waitingSeconds": 60}],
             "draining": {"nodes": ["n1"], "members": 2, "free": 1, "sinceSeconds": 5.0}}
    form = explanation.compact(answer(order=order), now=1000.0)
    assert form["deadlineAt"] == 1015.0 and form["publishedAt"] == 1000.0 and "backoffUntil" not in form
    assert len(form["reservation"]) == explanation.PUBLISHED_LIST_MAX and form["reservationNodes"] == 12
    assert len(form["pendingPods"]) == explanation.PUBLISHED_LIST_MAX and len(form["waiting"]) == 400
    assert "shortfall" not in form and "podGroup" not in form  # empty fields are left out
    assert len(json.dumps(form)) < 2048
    later = explanation.expand(form, now=1010.0)
    assert later["timeoutRemainingSeconds"] == 5.0 and later["backoffRemainingSeconds"] == 0.0
    assert later["order"]["waitingSeconds"] == 50.0 and later["order"]["ahead"][0]["waitingSeconds"] == 70.0
    assert later["order"]["draining"]["sinceSeconds"] == 15.0
    # the clock alone is no change: the same gang a second later has the same steady part
    assert explanation.steady(explanation.compact(answer(order=order, timeoutRemainingSeconds=14.0), 1001.0)) == \
        explanation.steady(form)
    assert explanation.steady(explanation.compact(answer(state="Admitted"), 1000.0)) != explanation.steady(form)
    # nor is a move in the queue (any gang joining or leaving moves it): that waits for a real change
    moved = order | {"position": 1, "of": 7, "ahead": []}
    assert explanation.steady(explanation.compact(answer(order=moved), 1000.0)) == explanation.steady(form)


def test_published_form_names_no_gang_or_pod_of_another_namespace() -> None:
    """The Event sits in the gang's namespace, readable by whoever may read Events there: gangs ahead and
    preemption victims of other namespaces are named only as such."""
    order = {"position": 3, "of": 3, "priority": 0, "waitingSeconds": 40.0, "maxWaitSeconds": 300.0,
             "ahead": [{"gang": "ml/a", "priority": 5, "waitingSeconds": 60},
                       {"gang": "other-team/secret-job", "priority": 9, "waitingSeconds": 90}],
             "preemption": {"victims": ["gang ml/old", "pod other-team/x-0", "pod ml/p-1 of gang ml/p"], "pods": 3,
                            "remaining": 3, "sinceSeconds": 1}}
    waits = {"kind": "waitFor", "gangs": ["ml/a", "other-team/secret-job"], "position": 3}
    form = explanation.compact(answer(order=order, fix=waits), now=1000.0)
    assert [a["gang"] for a in form["order"]["ahead"]] == ["ml/a", explanation.OTHER_NAMESPACE]
    assert form["order"]["preemption"]["victims"] == ["gang ml/old", explanation.OTHER_NAMESPACE,
                                                      "pod ml/p-1 of gang ml/p"]
    assert form["fix"]["gangs"] == ["ml/a", explanation.OTHER_NAMESPACE]
    preempts = {"kind": "preempt", "victims": ["gang other-team/x", "gang ml/old"], "pods": 4}
    assert explanation.compact(answer(fix=preempts), now=1000.0)["fix"]["victims"] == [
        explanation.OTHER_NAMESPACE, "gang ml/old"]
    assert "other-team" not in json.dumps(form)


def test_explanations_go_on_the_group_object_or_the_first_member() -> None:
    h = make_engine()
    try:
        h.add(node("n1"), node("n2"))
        h.mirror.upsert_group(GroupKind.PODGROUP, podgroup("train", 4))
        members = [member(f"train-{i}", "train") for i in range(2)]
        loose = [annotated(f"ann-{i}", "ann", 3) for i in (1, 0)]
        h.add(*members, *loose)
        h.engine.filter(filter_args(members[0], ["n1", "n2"]))
        h.engine.filter(filter_args(loose[0], ["n1", "n2"]))
        gangs = h.ledger.view.known_gangs()
        assert [str(g) for g in gangs] == ["ml/ann", "ml/train"]
        published = {p.key: p for g in gangs if (p := explained(h.ledger, h.mirror, g, now=lambda: 500.0))}
        train, ann = published["ml/train"], published["ml/ann"]
        assert {k: train.target[k] for k in ("apiVersion", "kind", "name")} == \
            {"apiVersion": V1BETA1, "kind": "PodGroup", "name": "train"}
        assert {k: ann.target[k] for k in ("kind", "name")} == {"kind": "Pod", "name": "ann-0"}
        assert train.value["state"] == "WaitingForMembers" and train.value["publishedAt"] == 500.0
        assert "2/4 pods exist" in train.message and not train.complete
    finally:
        h.close()


def item(key: str, state: str, complete: bool = False) -> Published:
    value = {"gang": key, "state": state}
    return Published(key, {"kind": "Pod", "name": key}, value, value, f"{key}: {state}", complete)


class Writes:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def __call__(self, target: dict[str, str], kind: str, reason: str, message: str,
                 annotations: dict[str, str]) -> None:
        assert (kind, reason) == ("Normal", REASON)
        self.calls.append((target["name"], message, json.loads(annotations[ANNOTATION])))

    def take(self) -> list[str]:
        names = [name for name, _, _ in self.calls]
        self.calls.clear()
        return names


class Gangs:
    """The publisher's ``keys`` and ``explain`` over a dict, each explanation taking ``cost`` seconds of
    a fake timer."""

    def __init__(self, *items: Published, cost: float = 0.0) -> None:
        self.items = {i.key: i for i in items}
        self.cost, self.time = cost, 0.0

    def keys(self) -> list[str]:
        return list(self.items)

    def explain(self, key: str) -> Published | None:
        self.time += self.cost
        return self.items.get(key)

    def timer(self) -> float:
        return self.time

    def set(self, key: str, state: str, complete: bool = False) -> None:
        self.items[key] = item(key, state, complete)


def publisher_of(gangs: Gangs, writes: Writes, clock: FakeClock, **kwargs: Any) -> ExplainPublisher[str]:
    return ExplainPublisher(gangs.keys, gangs.explain, writes, clock=clock, timer=gangs.timer,
                            sleep=lambda s: None, **kwargs)


def test_publisher_writes_each_change_once_within_its_budget() -> None:
    clock, writes = FakeClock(), Writes()
    gangs = Gangs(item("a", "WaitingForMembers"), item("b", "Holding"), item("c", "Complete", complete=True))
    publisher = publisher_of(gangs, writes, clock, per_round=2, refresh=1800.0)
    assert publisher.round() == 2 and writes.take() == ["a", "b"]  # c waits for the next round
    assert publisher.round() == 1 and writes.take() == ["c"]
    assert publisher.round() == 0 and writes.take() == []  # nothing changed: nothing written
    gangs.set("b", "Admitted")
    publisher.round()
    assert writes.take() == ["b"]
    clock.advance(1800.0)  # an unchanged gang not complete is written again before Events expire
    publisher.round()
    publisher.round()
    assert sorted(writes.take()) == ["a", "b"]
    del gangs.items["a"]  # a gang gone is forgotten: it is written again should it come back
    publisher.round()
    gangs.set("a", "WaitingForMembers")
    publisher.round()
    assert writes.take() == ["a"]
    publisher.forget()  # a new leader writes every gang again
    publisher.round()
    publisher.round()
    assert sorted(writes.take()) == ["a", "b", "c"]


def test_publisher_explains_within_its_time_budget_and_goes_on_where_it_stopped() -> None:
    clock, writes = FakeClock(), Writes()
    gangs = Gangs(*(item(k, "Holding") for k in "abcde"), cost=0.1)
    publisher = publisher_of(gangs, writes, clock, budget=0.25)  # three explanations a round
    publisher.round()
    assert writes.take() == ["a", "b", "c"]
    publisher.round()
    assert writes.take() == ["d", "e"] and publisher.counts["unchanged"] == 1  # a again: unchanged
    assert publisher.counts["explained"] == 6


def test_publisher_failures_are_retried_next_round() -> None:
    failing = {"on": True}

    def write(*args: Any) -> None:
        if failing["on"]:
            raise KubeError("POST events: 500")

    gangs = Gangs(*(item(name, "Holding") for name in ("a", "b", "c")))
    publisher = ExplainPublisher(gangs.keys, gangs.explain, write, clock=FakeClock(), sleep=lambda s: None)
    # the API server refuses: one attempt a round, not one per gang
    assert publisher.round() == 0 and publisher.counts["failed"] == 1
    failing["on"] = False
    assert publisher.round() == 3


def test_publisher_runs_only_while_leading() -> None:
    writes, leading, stop = Writes(), {"now": False}, threading.Event()
    gangs = Gangs(item("a", "Holding"))
    publisher = ExplainPublisher(gangs.keys, gangs.explain, writes, interval=0.01, sleep=lambda s: None)
    thread = threading.Thread(target=publisher.run, args=(stop, lambda: leading["now"]), daemon=True)
    thread.start()
    time.sleep(0.1)
    assert writes.calls == []
    leading["now"] = True
    deadline = time.monotonic() + 5
    while not writes.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(2)
    assert writes.take() == ["a"]  # once: nothing changed after


# ----------------------------------------------------------------------------- the plugin
def rows_of(*objects: dict[str, Any], events: Iterable[dict[str, Any]] = ()) -> dict[str, collect.GangRow]:
    kinds = {"Workload": GroupKind.WORKLOAD, V1BETA1: GroupKind.PODGROUP,
             "scheduling.x-k8s.io/v1alpha1": GroupKind.COSCHEDULING}
    groups = [collect.GroupObject(kinds.get(o["kind"], kinds.get(o["apiVersion"])), o)  # type: ignore[arg-type]
              for o in objects if o["kind"] != "Pod"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    return {str(r.key): r for r in collect.gang_rows(groups, pods, events)}


def test_rows_of_every_source_api() -> None:
    w = workload("w", {"workers": 2, "driver": None}, namespace="ml")
    replicas = [pod(f"w-{r}-{i}", namespace="ml", workload="w", pod_group="workers", replica=r,
                    node="n1" if r == "r0" else None) for r in ("r0", "r1") for i in range(2)]
    driver = pod("driver", namespace="ml", workload="w", pod_group="driver")
    rows = rows_of(
        podgroup("train", 4, reason="Unschedulable"), member("train-0", "train", bound="n1"),
        member("train-1", "train"), member("train-done", "train", bound="n1", phase="Succeeded"),
        coscheduling_podgroup("co", 3, namespace="ml"), w, *replicas, driver,
        annotated("ann-0", "ann", 2), member("orphan-0", "orphan"), pod("plain", namespace="ml"))
    assert sorted(rows) == ["ml/ann", "ml/co", "ml/orphan", "ml/train", "ml/w/workers[r0]", "ml/w/workers[r1]"]
    train = rows["ml/train"]
    assert (train.source, train.min_count, train.existing, train.bound, train.state, train.condition) == \
        (f"PodGroup {V1BETA1}", 4, 2, 1, "Pending", "Unschedulable")  # a Succeeded member no longer counts
    assert (rows["ml/w/workers[r0]"].state, rows["ml/w/workers[r1]"].state) == ("Bound", "Pending")
    assert rows["ml/w/workers[r0]"].source == "Workload scheduling.k8s.io/v1alpha1"
    assert (rows["ml/co"].source, rows["ml/co"].min_count, rows["ml/co"].state) == \
        ("PodGroup scheduling.x-k8s.io/v1alpha1", 3, "NoMembers")
    assert (rows["ml/ann"].source, rows["ml/ann"].min_count) == ("annotations", 2)
    assert (rows["ml/orphan"].state, rows["ml/orphan"].min_count) == ("GroupMissing", None)


def test_reason_and_state_come_from_the_newest_word() -> None:
    form = explanation.compact(answer(state="WaitingForMembers", waiting="waiting for gang ml/train: 3/4 pods exist",
                                      timeoutRemainingSeconds=None), now=1_800_000_010.0)
    old = explanation.compact(answer(state="WaitingForMembers", waiting="1/4"), now=1_800_000_001.0)
    at = "2027-01-15T08:00:05Z"  # 1_800_000_005
    events = [
        event("GangWaiting", "waiting for gang ml/train: 1/4 pods exist", "PodGroup", "train", at, version=3),
        event(REASON, "later", "PodGroup", "train", at, version=5, form=form),
        event(REASON, "earlier", "PodGroup", "train", at, version=4, form=old),
        event("GangWaiting", "waiting for gang ml/ann: 1/2 pods exist", "Pod", "ann-0", at),
        event("FailedScheduling", "from kube-scheduler", "Pod", "ann-0", "2027-01-15T09:00:00Z",
              component="default-scheduler"),
        event("GangAdmitted", "gang ml/small admitted", "PodGroup", "small", at, version=7),
        event("GangBound", "gang ml/small: 2 member(s) bound together at quorum", "PodGroup", "small", at, version=8),
    ]
    rows = rows_of(podgroup("train", 4), *(member(f"train-{i}", "train") for i in range(3)),
                   annotated("ann-0", "ann", 2), podgroup("small", 2),
                   *(member(f"small-{i}", "small", bound="n1") for i in range(2)), events=events)
    assert rows["ml/train"].state == "WaitingForMembers"
    assert rows["ml/train"].why == "waiting for gang ml/train: 3/4 pods exist"  # published after the Event
    assert rows["ml/ann"].why == "GangWaiting: waiting for gang ml/ann: 1/2 pods exist"
    assert rows["ml/small"].why.startswith("GangBound:") and rows["ml/small"].state == "Bound"
    table = render.table(list(rows.values()), all_namespaces=False)
    lines = table.splitlines()
    assert lines[0].split() == ["NAME", "SOURCE", "MIN", "MEMBERS", "BOUND", "STATE", "REASON"]
    assert lines[0].index("REASON") == lines[3].index("waiting for gang ml/train")  # columns line up
    assert lines[2].split()[:7] == ["small", "PodGroup", V1BETA1, "2", "2", "2", "Bound"]
    page = render.page(rows["ml/train"], now=1_800_000_020.0)
    assert "Published:   10s ago" in page and "  State:       WaitingForMembers" in page
    assert "  Timeout:     not running" in page and "Last event:  GangWaiting" in page
    assert len(page.splitlines()) <= 25  # one screen
    assert "Published:   nothing" in render.page(rows["ml/ann"], now=1_800_000_020.0)


class FakeReader:
    """The plugin's ``Reader`` over in-memory collections keyed by path."""

    def __init__(self, served: set[tuple[str, str, str]], items: dict[str, list[dict[str, Any]]]) -> None:
        self.served, self.items = served, items
        self.lists: list[tuple[str, dict[str, str] | None]] = []

    def serves(self, group: str, version: str, resource: str) -> bool:
        return (group, version, resource) in self.served

    def list(self, path: str, page_size: int = 500, query: dict[str, str] | None = None) -> list[dict[str, Any]]:
        self.lists.append((path, query))
        if path not in self.items and "events" in path and "forbidden" in self.items:
            raise KubeError("GET events: 403 forbidden", 403)
        return [dict(o) for o in self.items.get(path, [])]


def run(reader: FakeReader, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = main._parser().parse_args(argv)
    code = main.run(args, reader, out, err, now=1_800_000_000.0)
    return code, out.getvalue(), err.getvalue()


def test_plugin_reads_the_newest_served_version_of_one_namespace_or_all() -> None:
    group = podgroup("train", 2)
    del group["apiVersion"]  # list items may come without it
    reader = FakeReader({("scheduling.k8s.io", "v1beta1", "podgroups"), ("scheduling.k8s.io", "v1alpha3", "podgroups")},
                        {"/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups": [group],
                         "/api/v1/namespaces/ml/pods": [member("train-0", "train", bound="n1")]})
    code, out, _ = run(reader, "list", "-n", "ml")
    assert code == 0 and "train   PodGroup scheduling.k8s.io/v1beta1   2     1         1       Pending" in out
    assert ("/api/v1/namespaces/ml/events", {"fieldSelector": "source=gang-extender"}) in reader.lists
    reader.lists.clear()
    code, out, _ = run(reader, "list", "-A")
    assert code == 0 and out.startswith("NAMESPACE")
    assert [p for p, _ in reader.lists] == ["/apis/scheduling.k8s.io/v1beta1/podgroups", "/api/v1/pods",
                                             "/api/v1/events"]


def test_plugin_explain_exit_codes_and_unreadable_events() -> None:
    reader = FakeReader(set(), {"/api/v1/namespaces/ml/pods": [annotated("ann-0", "ann", 2)], "forbidden": []})
    code, out, err = run(reader, "explain", "ml/ann")
    assert code == 0 and "Gang:        ml/ann   [annotations]" in out and "cannot list events" in err
    assert run(reader, "explain", "ml/nothing")[0] == 1
    assert run(reader, "explain", "ml")[0] == 2


def test_namespace_defaults_to_the_kubeconfig_context(tmp_path: Path) -> None:
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "a",
              "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
              "users": [{"name": "u", "user": {"token": "t"}}],
              "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}},
                           {"name": "b", "context": {"cluster": "c", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    assert kubeconfig_namespace(str(path)) == "team-a"
    assert kubeconfig_namespace(str(path), "b") == "default"
    assert kubeconfig_namespace(str(tmp_path / "missing")) == "default"


def test_main_rejects_namespace_with_all_namespaces() -> None:
    with pytest.raises(SystemExit):
        main.main(["list", "-n", "ml", "-A"])
    assert isinstance(main._parser().parse_args(["explain", "ml/x"]), argparse.Namespace)


def test_a_forged_or_malformed_gang_state_event_does_not_speak_for_a_gang() -> None:
    """Anyone who may create Events in a namespace can write one that claims to be gang-extender's: one
    in another namespace, or on an object not of the gang, is ignored; the newest by the API server's
    resourceVersion wins whatever its form's clock says; a malformed form is skipped, and a page whose
    form cannot be read says so instead of failing."""
    genuine = explanation.compact(answer(state="WaitingForMembers", waiting="genuine"), now=1_800_000_001.0)
    forged = explanation.compact(answer(state="Bound", waiting="forged"), now=1_800_000_001.0) | {
        "publishedAt": 9e15}
    at = "2027-01-15T08:00:05Z"
    events = [
        event(REASON, "ok", "PodGroup", "train", at, version=5, form=genuine),
        event(REASON, "x", "PodGroup", "train", at, version=4, form=forged),  # older: its clock is a lie
        event(REASON, "x", "PodGroup", "train", at, version=9, ns="attacker", form=forged),
        event(REASON, "x", "Pod", "someone-else", at, version=10, form=forged),
        event(REASON, "x", "PodGroup", "train", at, version=11, form=genuine | {"shortfall": "x"}),
        event(REASON, "x", "PodGroup", "train", at, version=12, form=genuine | {"publishedAt": "abc"}),
    ]
    rows = rows_of(podgroup("train", 4), *(member(f"train-{i}", "train") for i in range(3)),
                   member("someone-else", "other"), events=events)
    assert (rows["ml/train"].state, rows["ml/train"].why) == ("WaitingForMembers", "genuine")
    rows["ml/train"].published = genuine | {"members": "many"}  # as if read by an older plugin
    assert "(unreadable: AttributeError" in render.page(rows["ml/train"], 1_800_000_010.0)


def test_fit_page_says_what_to_add_or_what_would_change_never() -> None:
    capacity = {"nodes": 2, "shape": {"like": "n0", "allocatable": "cpu=4", "labels": {"pool": "a"}},
                "domain": "rack=b", "shapesTried": 1, "shapes": 3}
    grow = render.fit_page({"gang": "ns/g/w", "members": 3, "minCount": 3, "schedulerName": "s",
                            "verdict": "FitsAfterCapacity", "summary": "...", "capacity": capacity})
    assert "Add:         2 node(s) like n0: cpu=4; pool=a; in rack=b" in grow, grow
    never = render.fit_page({"gang": "ns/g/w", "members": 3, "minCount": 3, "schedulerName": "s",
                             "verdict": "Never", "summary": "...", "capacity": capacity})
    assert "Unless:      2 node(s) like n0 are added: cpu=4; pool=a; in rack=b" in never, never
    assert "(1 of 3 node shape(s) tried; the cluster's own shapes only)" in never

"""The fit oracle (``fitting.oracle``) against the extender's own decisions.

Each scenario asks the oracle about a gang on a fork of a live ledger's mirror and state (what the
extender's ``/fit`` does), then submits the same gang to the live ledger as kube-scheduler would (its
members tried; a member's filter admits it; the sweep's pass preempts) and checks that the ledger did
what the oracle said: admitted it on the same nodes, found it never fits with the same reason, evicted
the same victims, kept it behind the same gangs, or admitted it once the named nodes were added. The
property test does the same for random clusters and gangs.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from extender.cluster.mirror import ClusterMirror
from extender.fitting import oracle, submission
from extender.gangs.ledger import GangLedger
from extender.gangs.settings import GangSettings
from extender.gangs.state import LedgerState
from extender.model.cluster import PodRecord
from extender.model.gang import PASS, GroupKind
from extender.wiring import reporting
from tests.builders import FakeClock, node, pod

RACK = "example.com/rack"


def podgroup(name: str, min_count: int, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec}}


def member_template(group: str, cpu: str, priority: int = 0) -> dict[str, Any]:
    raw = pod("x", cpu=cpu, memory="1Mi")
    raw["spec"]["schedulingGroup"] = {"podGroupName": group}
    raw["spec"]["priority"] = priority
    return {"metadata": {"labels": {"app": group}}, "spec": raw["spec"]}


@dataclass
class Cluster:
    """A live ledger over a mirror, as the extender runs it (preemption on, every budget allowing)."""

    clock: FakeClock = field(default_factory=FakeClock)
    mirror: ClusterMirror = field(default_factory=ClusterMirror)
    ledger: GangLedger = field(init=False)

    def __post_init__(self) -> None:
        self.ledger = GangLedger(self.mirror, GangSettings(timeout_seconds=30.0, backoff_seconds=10.0,
                                                           max_wait_seconds=3600),
                                 clock=self.clock, preemption=True)

    def nodes(self, count: int, cpu: str = "4", prefix: str = "n", **labels: str) -> None:
        for i in range(count):
            self.mirror.upsert_node(node(f"{prefix}{i}", cpu=cpu, labels={"kubernetes.io/hostname": f"{prefix}{i}",
                                                                           **labels}))

    def running(self, name: str, cpu: str, on: str, priority: int = 0) -> None:
        raw = pod(name, cpu=cpu, memory="1Mi", node=on)
        raw["spec"]["priority"] = priority
        self.mirror.upsert_pod(raw)

    def running_gang(self, name: str, on: list[str], cpu: str, priority: int = 0) -> None:
        self.mirror.upsert_group(GroupKind.PODGROUP, {**podgroup(name, len(on)),
                                                      "metadata": {"name": name, "namespace": "default",
                                                                   "uid": f"uid-{name}"}})
        for i, where in enumerate(on):
            raw = pod(f"{name}-{i}", cpu=cpu, memory="1Mi", node=where)
            raw["spec"]["schedulingGroup"] = {"podGroupName": name}
            raw["spec"]["priority"] = priority
            self.mirror.upsert_pod(raw)

    def ask(self, objects: list[dict[str, Any]]) -> tuple[dict[str, Any], submission.Submission]:
        """The oracle's answer on a fork of this cluster and the live ledger's published state."""
        now = time.time()
        question = submission.read(objects)
        world = oracle.World(ClusterMirror.fork(self.mirror.copy_records()),
                             self.ledger.view.state(now, ["default-scheduler"]), now)
        return oracle.ask(world, question), question

    def submit(self, question: submission.Submission) -> list[PodRecord]:
        """The gang created as the file says; its members tried by kube-scheduler; a member's filter."""
        for kind, obj in question.groups:
            self.mirror.upsert_group(kind, obj)
        members = [self.mirror.upsert_pod({**p, "metadata": {**p["metadata"], "uid": f"uid-{p['metadata']['name']}"}})
                   for p in question.pods]  # the API server gives each its own uid
        gang = members[0].gang
        assert gang is not None
        policy = self.mirror.gang_policy(gang)[1]
        assert policy is not None
        self.verdict = self.ledger.admit(gang, policy)
        self.clock.advance(1.0)
        self.ledger.sweep()
        return members

    def evict_ordered(self) -> None:
        """Run the evictions the ledger ordered, as the engine does: the victims are gone."""
        for order in self.ledger.take_work().evictions:
            for unit in order.units:
                for victim in unit.pods:
                    self.mirror.delete_pod(victim.uid)
            self.ledger.evictions_done(order.gang, [])

    def reserved_nodes(self, members: list[PodRecord]) -> dict[str, int]:
        record = self.ledger.record(members[0].gang)  # type: ignore[arg-type]
        assert record is not None and record.reservation is not None
        counts: dict[str, int] = {}
        for name, _ in record.reservation.slots:
            counts[name] = counts.get(name, 0) + 1
        return counts


def gang_file(name: str, size: int, cpu: str, priority: int = 0, **spec: Any) -> list[dict[str, Any]]:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
           "spec": {"parallelism": size, "template": member_template(name, cpu, priority)}}
    return [podgroup(name, size, **spec), job]


def test_fits_now_where_the_extender_then_admits_it() -> None:
    c = Cluster()
    c.nodes(4)
    c.running("busy", "3", "n0")
    answer, question = c.ask(gang_file("g", 3, "3"))
    assert answer["verdict"] == oracle.FITS_NOW and answer["members"] == 3 and answer["minCount"] == 3, answer
    assert sorted(answer["placement"]["nodes"]) == ["n1", "n2", "n3"]
    members = c.submit(question)
    assert c.verdict == PASS and c.reserved_nodes(members) == answer["placement"]["nodes"]


def test_never_with_the_reason_the_extender_then_gives() -> None:
    c = Cluster()
    c.nodes(4)
    answer, question = c.ask(gang_file("big", 2, "6"))
    assert answer["verdict"] == oracle.NEVER and "can never fit this cluster" in answer["reason"], answer
    members = c.submit(question)
    record = c.ledger.record(members[0].gang)  # type: ignore[arg-type]
    assert record is not None and record.plans.never_fits is not None
    assert record.plans.never_fits.message == answer["reason"]


def test_fits_after_preemption_names_the_victims_the_extender_then_evicts() -> None:
    c = Cluster()
    c.nodes(4)
    c.running_gang("low", ["n0", "n1", "n2", "n3"], "3", priority=1)
    c.running("plain", "1", "n0", priority=50)
    answer, question = c.ask(gang_file("high", 2, "3", priority=100))
    assert answer["verdict"] == oracle.FITS_AFTER_PREEMPTION, answer
    victims = [v["unit"] for v in answer["preemption"]["victims"]]
    assert victims == ["gang default/low"] and answer["preemption"]["cost"] == {"pods": 4, "gangs": 1, "units": 1}
    c.submit(question)
    evicted = [unit.key for order in c.ledger.take_work().evictions for unit in order.units]
    assert evicted == victims


def test_fits_after_the_gangs_ahead_that_the_extender_then_keeps_it_behind() -> None:
    c = Cluster()
    c.nodes(2)
    c.running("hog", "4", "n0", priority=1000)
    first = submission.read(gang_file("first", 2, "3", priority=5))
    c.submit(first)  # waits: one node is free, two are needed
    answer, question = c.ask(gang_file("second", 2, "3"))
    assert answer["verdict"] == oracle.FITS_AFTER_GANGS_AHEAD, answer
    assert answer["order"]["position"] == 2 and [a["gang"] for a in answer["order"]["ahead"]] == ["default/first"]
    members = c.submit(question)
    view = c.ledger.view.order_view(members[0].gang)  # type: ignore[arg-type]
    assert c.verdict != PASS and view is not None and view["position"] == 2


def test_fits_after_capacity_and_the_extender_admits_it_once_the_nodes_are_added() -> None:
    c = Cluster()
    c.nodes(3, prefix="a", **{RACK: "a"})
    c.nodes(3, prefix="b", **{RACK: "b"})
    for name in ("a0", "b0", "b1"):
        c.running(f"hog-{name}", "4", name, priority=1000)  # nothing may be preempted
    spec = {"schedulingPolicy": {"gang": {"minCount": 3}}, "schedulingConstraints": {"topology": [{"key": RACK}]}}
    answer, question = c.ask(gang_file("g", 3, "3", **spec))
    assert answer["verdict"] == oracle.FITS_AFTER_CAPACITY, answer
    capacity = answer["capacity"]
    assert capacity["nodes"] == 1 and capacity["domain"] == f"{RACK}=a", capacity
    assert capacity["shape"]["labels"] == {RACK: "a"}
    c.submit(question)
    assert c.verdict != PASS
    c.mirror.upsert_node(node("a-new", cpu="4", labels={RACK: "a", "kubernetes.io/hostname": "a-new"}))
    policy = c.mirror.gang_policy(question.gang)[1]  # type: ignore[arg-type]
    assert policy is not None and c.ledger.admit(question.gang, policy) == PASS  # type: ignore[arg-type]


def test_the_fork_is_left_alone_by_nothing_but_the_question() -> None:
    """Asking changes nothing the live ledger or mirror hold."""
    c = Cluster()
    c.nodes(2)
    before = (len(list(c.mirror.gangs())), c.mirror.pod_count, c.mirror.generation)
    c.ask(gang_file("g", 2, "3"))
    assert (len(list(c.mirror.gangs())), c.mirror.pod_count, c.mirror.generation) == before
    assert c.ledger.record(submission.read(gang_file("g", 2, "3")).gang) is None  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ agreement
@st.composite
def cases(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]], tuple[int, int, int], int]:
    """(seed, nodes as (cpu, rack), the gang (size, cpu, priority), running pods per node up to)."""
    nodes = draw(st.lists(st.tuples(st.sampled_from([2, 4, 4, 8]), st.integers(0, 2)), min_size=1, max_size=8))
    gang = (draw(st.integers(1, 6)), draw(st.sampled_from([1, 2, 3, 3, 5, 9])), draw(st.sampled_from([0, 10, 100])))
    return draw(st.integers(0, 2**16)), nodes, gang, draw(st.integers(0, 4))


@settings(max_examples=300, deadline=None)
@given(cases())
def test_fit_agrees_with_what_the_extender_then_does(case: tuple[int, list[tuple[int, int]], tuple[int, int, int],
                                                                  int]) -> None:
    seed, nodes, (size, cpu, priority), busy = case
    rng = random.Random(seed)
    c = Cluster()
    for i, (node_cpu, rack) in enumerate(nodes):
        c.mirror.upsert_node(node(f"n{i}", cpu=str(node_cpu), labels={RACK: f"r{rack}",
                                                                       "kubernetes.io/hostname": f"n{i}"}))
        for j in range(rng.randint(0, busy)):
            c.running(f"p{i}-{j}", str(rng.choice([1, 2, 3])), f"n{i}", priority=rng.choice([0, 5, 1000]))
    if rng.random() < 0.5:  # a waiting gang ahead, sometimes
        c.submit(submission.read(gang_file("ahead", rng.randint(2, 6), str(rng.choice([3, 4])),
                                           priority=rng.choice([0, 20]))))
        c.evict_ordered()
    spec = ({"schedulingPolicy": {"gang": {"minCount": size}}, "schedulingConstraints": {"topology": [{"key": RACK}]}}
            if rng.random() < 0.3 else {})
    answer, question = c.ask(gang_file("g", size, str(cpu), priority, **spec))
    members = c.submit(question)
    record = c.ledger.record(question.gang)  # type: ignore[arg-type]
    verdict = answer["verdict"]
    event(verdict)
    evicted = [unit.key for order in c.ledger.take_work().evictions for unit in order.units]
    if verdict == oracle.FITS_NOW:
        assert c.verdict == PASS and c.reserved_nodes(members) == answer["placement"]["nodes"], answer
    elif verdict == oracle.NEVER:
        assert record is not None and record.plans.never_fits is not None, answer
        assert record.plans.never_fits.message == answer["reason"]
    elif verdict == oracle.FITS_AFTER_PREEMPTION:
        assert evicted == [v["unit"] for v in answer["preemption"]["victims"]], (answer, evicted)
    elif verdict == oracle.FITS_AFTER_GANGS_AHEAD:
        view = c.ledger.view.order_view(question.gang)  # type: ignore[arg-type]
        assert c.verdict != PASS and view is not None and view["position"] == answer["order"]["position"], answer
    elif verdict == oracle.FITS_AFTER_CAPACITY:
        assert c.verdict != PASS and not evicted, answer
        shape = answer["capacity"]["shape"]
        cpu_of_shape = shape["allocatable"].split(",")[0].split("=")[1]
        for k in range(answer["capacity"]["nodes"]):
            labels = {**shape["labels"], "kubernetes.io/hostname": f"added-{k}"}
            c.mirror.upsert_node(node(f"added-{k}", cpu=cpu_of_shape, memory="16Gi", labels=labels))
        policy = c.mirror.gang_policy(question.gang)[1]  # type: ignore[arg-type]
        assert policy is not None
        assert c.ledger.admit(question.gang, policy) == PASS, answer  # type: ignore[arg-type]
    else:
        assert verdict == oracle.WAITS and c.verdict != PASS, answer


# ------------------------------------------------------------------------------ the published state
def test_the_published_state_reads_back_and_a_malformed_one_is_refused() -> None:
    c = Cluster()
    c.nodes(2)
    c.running("hog", "4", "n0", priority=1000)
    c.submit(submission.read(gang_file("waits", 2, "3")))
    c.submit(submission.read(gang_file("small", 1, "1")))
    published = reporting.ledger_state(c.ledger, "gang-scheduler", ["gang-scheduler"], now=lambda: 1000.0)
    assert published.target == {"apiVersion": "v1", "kind": "Namespace", "namespace": "gang-scheduler",
                                 "name": "gang-scheduler"}
    assert published.annotation == "gang-extender.io/ledger-state" and "1 gang(s) waiting" in published.message
    state = LedgerState.from_json(json.loads(json.dumps(published.value)))
    assert state == c.ledger.view.state(1000.0, ["gang-scheduler"])
    assert {str(e.gang): (e.waiting_since is not None, e.reserved is not None) for e in state.gangs} == {
        "default/waits": (True, False), "default/small": (True, True)}
    assert "publishedAt" not in published.steady
    for broken in ({}, {"version": 2}, {**published.value, "gangs": [{"gang": "x"}]},
                   {**published.value, "assumed": []}):
        with pytest.raises(ValueError):
            LedgerState.from_json(broken)
    reporting.MAX_STATE_BYTES, saved = 600, reporting.MAX_STATE_BYTES
    try:
        cut = reporting.ledger_state(c.ledger, "ns", ["gang-scheduler"], now=lambda: 1000.0).value
    finally:
        reporting.MAX_STATE_BYTES = saved
    assert cut["complete"] is False and len(cut["gangs"]) < 2
    assert LedgerState.from_json(cut).complete is False

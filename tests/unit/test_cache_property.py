"""Property: the filter cache never changes an answer.

Two engines are fed the identical random sequence of cluster events, binds, clock ticks and filter
requests: one with the signature cache on, one with it disabled (size 0). Every filter answer must be
identical, every answer must only mention the request's nodes, and a bind made through the engine
never overcommits the node it lands on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from extender.cluster.fit import placement_failure, shortfall
from extender.cluster.records import placement_from_spec
from extender.engine.requests import FilterResult
from extender.model.cluster import PodRecord
from extender.model.gang import GangPolicy, GroupKind
from tests.builders import (
    FakeClock,
    Harness,
    bind_args,
    coscheduling_podgroup,
    filter_args,
    make_engine,
    node,
    pod,
    workload,
)

NODE_NAMES = [f"n{i}" for i in range(6)]
POD_SLOTS = 12
CPUS = ["2", "3", "4", "8"]
MEMORIES = ["4Gi", "16Gi"]
ZONES = [None, "a", "b"]
SHAPES = [("1", "1Gi"), ("1", "1Gi"), ("2", "2Gi"), ("1", "4Gi"), ("3", "1Gi")]
GANGS: list[tuple[str, str] | None] = [None, None, None, ("pg", "g2"), ("pg", "g3"), ("wl", "0"), ("wl", "1")]
TAINT = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
ANTI_AFFINITY = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}

node_op = st.tuples(st.just("node"), st.integers(0, 5), st.sampled_from(CPUS), st.sampled_from(MEMORIES),
                    st.sampled_from(ZONES), st.booleans())
delete_node_op = st.tuples(st.just("delete_node"), st.integers(0, 5))
# (slot, shape, gang, selector zone, tolerates the taint, unsignable)
pod_op = st.tuples(st.just("pod"), st.integers(0, POD_SLOTS - 1), st.integers(0, len(SHAPES) - 1),
                   st.integers(0, len(GANGS) - 1), st.sampled_from(ZONES), st.booleans(),
                   st.integers(0, 4).map(lambda n: n == 0))
clone_op = st.tuples(st.just("clone"), st.integers(0, POD_SLOTS - 1), st.integers(0, POD_SLOTS - 1))
delete_pod_op = st.tuples(st.just("delete_pod"), st.integers(0, POD_SLOTS - 1))
finish_pod_op = st.tuples(st.just("finish_pod"), st.integers(0, POD_SLOTS - 1))
bind_op = st.tuples(st.just("bind"), st.integers(0, POD_SLOTS - 1), st.integers(0, 5))
filter_op = st.tuples(st.just("filter"), st.integers(0, POD_SLOTS - 1),
                      st.lists(st.sampled_from([*NODE_NAMES, "ghost"]), min_size=1, max_size=7, unique=True))
schedule_op = st.tuples(st.just("schedule"), st.integers(0, POD_SLOTS - 1), st.integers(0, 5))
tick_op = st.tuples(st.just("tick"), st.sampled_from([1.0, 5.0, 11.0, 31.0]))
relist_op = st.tuples(st.just("relist"))

OPS = st.one_of(node_op, delete_node_op, pod_op, pod_op, clone_op, clone_op, delete_pod_op, finish_pod_op, bind_op,
                schedule_op, schedule_op, schedule_op, filter_op, filter_op, filter_op, tick_op, relist_op)


@dataclass
class Totals:
    hits: int = 0
    misses: int = 0
    filters: int = 0
    binds: int = 0
    gang_binds: int = 0
    examples: int = 0
    seconds: float = 0.0
    answers: dict[str, int] = field(default_factory=dict)


TOTALS = Totals()


@dataclass
class Model:
    """What the 'API server' holds: the raw objects both mirrors are fed."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)     # live pods by name
    known: dict[str, dict[str, Any]] = field(default_factory=dict)    # every pod ever created, by name
    serial: int = 0


@contextmanager
def twin_engines() -> Iterator[tuple[Harness, Harness]]:
    clock = FakeClock()
    cached = make_engine(clock=clock, cache_size=4096, cache_ttl=300, bind_to_mirror=True,
                         timeout_seconds=30, backoff_seconds=10)
    uncached = make_engine(clock=clock, cache_size=0, cache_ttl=300, bind_to_mirror=True,
                           timeout_seconds=30, backoff_seconds=10)
    try:
        yield cached, uncached
    finally:
        cached.close()
        uncached.close()


def make_pod(model: Model, slot: int, shape: int, gang: int, zone: str | None, tolerates: bool,
             unsignable: bool) -> dict[str, Any]:
    model.serial += 1
    cpu, memory = SHAPES[shape]
    link = GANGS[gang]
    kwargs: dict[str, Any] = {}
    if link is not None and link[0] == "pg":
        kwargs["pod_group"] = link[1]
    elif link is not None:
        kwargs.update(workload="job", pod_group="w", replica=link[1])
    return pod(f"p{slot}", uid=f"p{slot}-{model.serial}", cpu=cpu, memory=memory,
               node_selector={"zone": zone} if zone else None, tolerations=[TAINT] if tolerates else None,
               affinity=ANTI_AFFINITY if unsignable else None, labels={"app": "x"}, **kwargs)


def check_no_overcommit(h: Harness, record: PodRecord, node_name: str) -> None:
    """After a successful bind, the node has room for everything the pod asked for."""
    allocatable = h.mirror.nodes[node_name].allocatable
    used = h.mirror.used(node_name)
    for resource, amount in record.requests.items():
        if amount > 0:
            assert used.get(resource, 0) <= allocatable.get(resource, 0), (
                f"{node_name} overcommitted on {resource}: {used} > {allocatable}")


class Run:
    """Applies one op sequence to the twin engines, checking the property after every step."""

    def __init__(self, pair: tuple[Harness, Harness]) -> None:
        self.pair = pair
        self.cached, self.uncached = pair
        self.model = Model()
        for name in NODE_NAMES[:4]:
            self.model.nodes[name] = node(name)
            self.feed("upsert_node", self.model.nodes[name])
        for group in (coscheduling_podgroup("g2", 2), coscheduling_podgroup("g3", 3)):
            self.feed("upsert_group", GroupKind.COSCHEDULING, group)
        self.feed("upsert_group", GroupKind.WORKLOAD, workload("job", {"w": 2}))

    def feed(self, action: str, *args: Any) -> None:
        """A watch event (or relist), delivered identically to both mirrors."""
        for h in self.pair:
            getattr(h.mirror, action)(*args)

    # --------------------------------------------------------------------------------------- ops
    def apply(self, op: tuple[Any, ...]) -> None:
        kind, model = op[0], self.model
        if kind == "node":
            _, index, cpu, memory, zone, tainted = op
            name = NODE_NAMES[index]
            model.nodes[name] = node(name, cpu=cpu, memory=memory, labels={"zone": zone} if zone else {},
                                     taints=[TAINT] if tainted else None)
            self.feed("upsert_node", model.nodes[name])
        elif kind == "delete_node":
            model.nodes.pop(NODE_NAMES[op[1]], None)
            self.feed("delete_node", NODE_NAMES[op[1]])
        elif kind == "pod":
            self.store(make_pod(model, *op[1:]))
        elif kind == "clone":  # a sibling with the identical spec (a Job's or ReplicaSet's next pod)
            source = pick(model.known, op[1])
            if source is not None:
                model.serial += 1
                spec = {k: v for k, v in source["spec"].items() if k != "nodeName"}
                name = f"p{op[2]}"
                self.store({**source, "metadata": {**source["metadata"], "name": name,
                                                   "uid": f"{name}-{model.serial}"}, "spec": spec, "status": {}})
        elif kind == "delete_pod":
            raw = pick(model.pods, op[1])
            if raw is not None:
                del model.pods[raw["metadata"]["name"]]
                self.feed("delete_pod", raw["metadata"]["uid"])
        elif kind == "finish_pod":
            raw = pick(model.pods, op[1])
            if raw is not None:
                self.store({**raw, "status": {"phase": "Succeeded"}})
        elif kind == "bind":
            raw = pick(model.pods, op[1])
            if raw is not None:
                self.bind(raw, NODE_NAMES[op[2]], op[2])
        elif kind == "schedule":  # what kube-scheduler does: filter, then bind to a feasible node
            raw = pick(model.pods, op[1])
            if raw is not None:
                result = self.filter(raw, [*sorted(model.nodes), "ghost"])
                if result.feasible:
                    self.bind(raw, result.feasible[op[2] % len(result.feasible)], op[2])
        elif kind == "filter":
            raw = pick(model.known, op[1])
            if raw is not None:
                self.filter(raw, op[2])
        elif kind == "tick":
            self.cached.clock.advance(op[1])
            for h in self.pair:
                h.ledger.sweep()
        elif kind == "relist":
            self.feed("replace_nodes", list(model.nodes.values()))
            self.feed("replace_pods", list(model.pods.values()))
        else:  # pragma: no cover
            raise AssertionError(kind)
        assert self.cached.mirror.generation == self.uncached.mirror.generation

    def store(self, raw: dict[str, Any]) -> None:
        name = raw["metadata"]["name"]
        self.model.pods[name] = self.model.known[name] = raw
        self.feed("upsert_pod", raw)

    # ---------------------------------------------------------------------------------- property
    def filter(self, raw: dict[str, Any], names: list[str]) -> FilterResult:
        results = [h.engine.filter(filter_args(raw, names)) for h in self.pair]
        assert results[0] == results[1], f"cached {results[0]} != uncached {results[1]}"
        result = results[0]
        assert set(result.feasible) <= set(names)
        assert set(result.failed) <= set(names)
        assert set(result.failed_unresolvable) <= set(names)
        accounted = [*result.feasible, *result.failed, *result.failed_unresolvable]
        if result.feasible:  # a gang member steered to its reservation: other nodes may go unmentioned
            assert set(accounted) <= set(names)
        else:  # nothing feasible: kube-scheduler reports every node's reason, so every node has one
            assert sorted(accounted) == sorted(names)
        assert result.error == ""
        TOTALS.filters += 1
        outcome = "feasible" if result.feasible else "failed" if result.failed else "unresolvable"
        TOTALS.answers[outcome] = TOTALS.answers.get(outcome, 0) + 1
        return result

    def bind(self, raw: dict[str, Any], target: str, start: int) -> None:
        mirror = self.cached.mirror
        record = mirror.pod("default", raw["metadata"]["name"])
        if record is None or record.node_name or record.terminal:
            return
        policy = mirror.gang_policy(record.gang)[1] if record.gang else None
        if record.gang is not None and policy is not None and sum(
                1 for m in mirror.members(record.gang) if mirror.placement(m.uid)) < policy.min_count:
            self.bind_gang(record, policy, start)
        else:
            answers = [h.engine.bind(bind_args(raw, target)) for h in self.pair]
            assert answers[0] == answers[1]
            TOTALS.binds += 1
            if not answers[0]:
                for h in self.pair:
                    check_no_overcommit(h, record, target)
        for member in list(self.model.pods.values()):  # the pod watch reports what was bound
            now = mirror.pod_by_uid(member["metadata"]["uid"])
            if now is not None and now.node_name and "nodeName" not in member["spec"]:
                self.store({**member, "spec": {**member["spec"], "nodeName": now.node_name}})

    def bind_gang(self, record: PodRecord, policy: GangPolicy, start: int) -> None:
        """Bind every pending member of the pod's gang at once (threads meet at the barrier)."""
        reference = self.cached.mirror
        assert record.gang is not None
        members = reference.members(record.gang)
        placed = [m for m in members if reference.placement(m.uid)]
        pending = [m for m in members if not reference.placement(m.uid)]
        present = sorted(reference.nodes)
        if not pending or not present or len(placed) + len(pending) < policy.min_count:
            return  # the barrier could only time out: not what this property is about
        targets = {m.uid: present[(start + k) % len(present)] for k, m in enumerate(pending)}
        # Only assignments that fit as a whole: then every arrival order succeeds on both engines.
        with reference.lock:
            demand: dict[str, dict[str, int]] = {}
            for member in pending:
                if placement_failure(placement_from_spec(member.spec or {}), reference.nodes[targets[member.uid]]):
                    return  # bind refuses a node the member's taints/selector/affinity exclude
                total = demand.setdefault(targets[member.uid], {})
                for resource, amount in member.requests.items():
                    total[resource] = total.get(resource, 0) + amount
            for node_name, total in demand.items():
                if shortfall(total, reference.free(node_name, record.gang)) is not None:
                    return
        answers = []
        for h in self.pair:
            results: dict[str, str] = {}

            def run(member: PodRecord, target: str, h: Harness = h, results: dict[str, str] = results) -> None:
                ref = {"metadata": {"name": member.name, "namespace": member.namespace, "uid": member.uid}}
                results[member.name] = h.engine.bind(bind_args(ref, target))

            threads = [threading.Thread(target=run, args=(m, targets[m.uid])) for m in pending]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
                assert not thread.is_alive(), "a gang bind hung"
            answers.append(results)
            for member in pending:
                check_no_overcommit(h, member, targets[member.uid])
        assert answers[0] == answers[1]
        assert set(answers[0].values()) == {""}, answers[0]
        TOTALS.gang_binds += 1


def pick(pods: dict[str, dict[str, Any]], index: int) -> dict[str, Any] | None:
    """The index-th pod (wrapping around) in name order, so that most generated ops hit a pod."""
    if not pods:
        return None
    return pods[sorted(pods)[index % len(pods)]]


def run_sequence(ops: list[tuple[Any, ...]]) -> None:
    with twin_engines() as pair:
        run = Run(pair)
        for op in ops:
            run.apply(op)
        TOTALS.hits += run.cached.cache.hits
        TOTALS.misses += run.cached.cache.misses
        assert run.uncached.cache.hits == 0
        TOTALS.examples += 1


ALL = ["n0", "n1", "n2", "n3"]
# Hand-written sequences that must keep passing whatever the random search finds (pods are picked by
# index in name order: p0 is 0, p1 is 1, ...). SHAPES[4] is 3 cpu; GANGS[0] none, GANGS[3] PodGroup g2.
RESERVATION_THEN_EXPIRY = [
    ("pod", 0, 4, 0, None, False, False), ("filter", 0, ALL),                 # cache a 3-cpu verdict
    ("pod", 1, 4, 3, None, False, False), ("clone", 1, 2), ("filter", 1, ALL),  # admit g2: 2 x 3 cpu
    ("filter", 0, ALL),                                                       # reserved for other gangs
    ("tick", 31.0), ("filter", 0, ALL),                                       # expired: free again
]
BIND_THEN_DELETE = [
    ("pod", 0, 4, 0, None, False, False), ("clone", 0, 1), ("filter", 1, ALL),
    ("schedule", 0, 0), ("filter", 1, ALL),                                   # n0 is full now
    ("delete_pod", 0), ("filter", 1, ALL),                                    # and free again
]
GANG_BARRIER = [
    ("pod", 0, 4, 3, None, False, False), ("clone", 0, 1), ("pod", 2, 4, 0, None, False, False),
    ("filter", 2, ALL), ("schedule", 0, 1), ("filter", 2, ALL), ("filter", 1, ALL), ("relist",),
    ("finish_pod", 0), ("filter", 2, ALL),
]
NODE_CHANGES = [
    ("pod", 0, 0, 0, "a", True, False), ("filter", 0, [*ALL, "n4", "ghost"]),
    ("node", 1, "4", "16Gi", "a", True), ("node", 4, "8", "16Gi", "a", False), ("filter", 0, [*ALL, "n4", "ghost"]),
    ("delete_node", 1), ("relist",), ("filter", 0, [*ALL, "n4", "ghost"]),
]


@example(ops=RESERVATION_THEN_EXPIRY)
@example(ops=BIND_THEN_DELETE)
@example(ops=GANG_BARRIER)
@example(ops=NODE_CHANGES)
@settings(max_examples=1000, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(OPS, min_size=30, max_size=90))
def cached_equals_uncached(ops: list[tuple[Any, ...]]) -> None:
    run_sequence(ops)


def test_cached_filter_answers_equal_uncached_answers() -> None:
    started = time.monotonic()
    cached_equals_uncached()
    TOTALS.seconds = time.monotonic() - started
    assert TOTALS.examples > 0
    assert TOTALS.filters > 0
    assert TOTALS.hits > 0, "the cached engine never hit: the property would prove nothing"
    assert TOTALS.answers.get("feasible", 0) > 0 and TOTALS.answers.get("failed", 0) > 0
    assert TOTALS.binds > 0

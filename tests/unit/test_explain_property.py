"""``GangLedger.explain`` computes outside the lock from copies, and answers as it did under the lock.

``under_the_lock`` below is ``explain`` as it was before it moved its plan and shortfall out of the
mirror's lock: facts, nodes and the live ``mirror.free`` all read while the lock is held. Hypothesis
draws clusters (nodes of several sizes and zones, running pods) and a sequence of changes (gang
members filtered, so gangs are admitted and reserve; members and plain pods bound by another binder;
pods deleted; draining reservations of several priorities; time passing the max wait, so the head gang
drains and its explanation plans how many members fit in the drain) and checks, for every gang, that both give
the same explanation. It also checks that a ``Capacity`` copy answers as ``mirror.free`` did when it was
taken, for every node and gang, however the mirror changes afterwards.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.gangs import explanation
from extender.model.gang import GangKey
from extender.model.quantity import Resources
from tests.builders import Harness, filter_args, make_engine, node, pod, workload

NAMESPACE = "ml"
Step = tuple[Any, ...]


def member(gang: int, index: int, cpu: str, zone: str | None) -> dict[str, Any]:
    return pod(f"g{gang}-{index}", uid=f"uid-g{gang}-{index}", cpu=cpu, memory="1Gi", namespace=NAMESPACE,
               workload=f"g{gang}", pod_group="workers", node_selector={"zone": zone} if zone else None)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]], list[int], list[Step]]:
    """(nodes and running pods, each gang's members, each gang's minCount, the changes)."""
    nodes = [node(f"n{i}", cpu=draw(st.sampled_from(["2", "4", "8"])), memory="16Gi",
                  labels={"zone": draw(st.sampled_from(["a", "b"]))}) for i in range(draw(st.integers(1, 8)))]
    running = [pod(f"run-{i}", uid=f"uid-run-{i}", cpu=draw(st.sampled_from(["500m", "1", "3"])),
                   node=f"n{draw(st.integers(0, len(nodes) - 1))}", phase="Running")
               for i in range(draw(st.integers(0, 6)))]
    gangs, min_counts = [], []
    for g in range(draw(st.integers(1, 4))):
        shapes = draw(st.lists(st.tuples(st.sampled_from(["500m", "1", "2", "3"]),
                                         st.sampled_from([None, None, "a", "b"])), min_size=1, max_size=3))
        count = draw(st.integers(1, 6))
        gangs.append([member(g, i, *shapes[i % len(shapes)]) for i in range(count)])
        min_counts.append(draw(st.integers(1, count + 1)))
    node_index = st.integers(0, len(nodes) - 1)
    gang_index = st.integers(0, len(gangs) - 1)
    steps = draw(st.lists(st.one_of(
        st.tuples(st.just("filter"), gang_index, st.integers(0, 5)),
        st.tuples(st.just("bind"), gang_index, st.integers(0, 5), node_index),
        st.tuples(st.just("run"), node_index, st.sampled_from(["500m", "1", "2"])),
        st.tuples(st.just("delete"), gang_index, st.integers(0, 5)),
        st.tuples(st.just("drain"), gang_index, node_index, st.integers(0, 3), st.sampled_from([0, 50, 100])),
        st.tuples(st.just("age"), st.sampled_from([10, 301, 301])),
        st.tuples(st.just("age"), st.just(301)),
    ), max_size=14))
    return nodes + running, gangs, min_counts, steps


def apply(h: Harness, gangs: list[list[dict[str, Any]]], step: Step, serial: int) -> None:
    kind, *args = step
    if kind == "age":  # past the 300 s max wait: the head gang waiting its turn starts a draining reservation
        h.clock.advance(args[0])
        h.ledger.sweep()
        return
    if kind == "run":
        h.add(pod(f"late-{serial}", uid=f"uid-late-{serial}", cpu=args[1], node=f"n{args[0]}", phase="Running"))
        return
    members = gangs[args[0]]
    if kind == "drain":
        key = h.mirror.find_gangs(NAMESPACE, f"g{args[0]}")[0]
        slots = [(f"n{args[1]}", {"cpu": 1000 * (i + 1)}) for i in range(args[2])]
        h.mirror.set_reservation(key, slots, holds_off=args[3])
        return
    raw = members[args[1] % len(members)]
    if kind == "filter":
        h.engine.filter(filter_args(raw, sorted(h.mirror.nodes)))
    elif kind == "bind":
        h.add({**raw, "spec": {**raw["spec"], "nodeName": f"n{args[2]}"}, "status": {"phase": "Running"}})
    elif kind == "delete":
        h.mirror.delete_pod(raw["metadata"]["uid"])


def under_the_lock(h: Harness, gang: GangKey) -> dict[str, Any]:
    """``GangLedger.explain`` before it moved out of the lock."""
    with h.ledger.lock:
        facts = h.ledger.view.facts(gang)
        return explanation.explain(facts, list(h.mirror.nodes.values()),
                                   lambda n: h.mirror.free(n.name, gang))


def free_everywhere(h: Harness, gang: GangKey | None) -> dict[str, Resources]:
    with h.mirror.lock:
        return {name: h.mirror.free(name, gang) for name in h.mirror.nodes}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.integers(0, 14))
def test_explain_outside_the_lock_matches_explain_under_it(
        world: tuple[list[dict[str, Any]], list[list[dict[str, Any]]], list[int], list[Step]], split: int) -> None:
    cluster, gangs, min_counts, steps = world
    h = make_engine()
    try:
        h.add(*cluster)
        for g, (members, min_count) in enumerate(zip(gangs, min_counts, strict=True)):
            h.add(workload(f"g{g}", {"workers": min_count}, namespace=NAMESPACE), *members)
        keys = [key for g in range(len(gangs)) for key in h.mirror.find_gangs(NAMESPACE, f"g{g}")]
        for serial, step in enumerate(steps[:split]):
            apply(h, gangs, step, serial)
        copies = {key: (h.mirror.capacity(key), free_everywhere(h, key)) for key in [*keys, None]}
        for serial, step in enumerate(steps[split:], start=split):
            apply(h, gangs, step, serial)
        with h.mirror.lock:
            records = list(h.mirror.nodes.values())
        for capacity, then in copies.values():  # later changes never reach a copy
            assert {n.name: capacity.free(n) for n in records} == then
        for key in keys:
            assert h.ledger.view.explain(key) == under_the_lock(h, key)
    finally:
        h.close()

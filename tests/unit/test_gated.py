"""The filter-gated mode (``--bind-mode filter-gated``): another binder binds; gang-extender gates at filter.

Over a real mirror, cache and ledger with a fake clock; "the binder" is the test writing the bound pod
into the mirror, as the pod watch would after kube-scheduler's (or another extender's) Binding.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from extender.engine.requests import FilterResult
from tests.builders import Harness, bind_args, coscheduling_podgroup, filter_args, make_engine, node, pod

NODES = ["n1", "n2", "n3", "n4"]


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = make_engine(timeout_seconds=30.0, backoff_seconds=10.0, filter_gated=True)
    harness.add(*(node(name, cpu="4") for name in NODES))
    yield harness
    harness.close()


def members(name: str, count: int, cpu: str = "3") -> list[dict[str, Any]]:
    return [pod(f"{name}-{i}", cpu=cpu, pod_group=name) for i in range(count)]


def bind_elsewhere(h: Harness, member: dict[str, Any], node_name: str) -> None:
    """The other binder bound ``member`` to ``node_name``; the pod watch delivers it."""
    bound = copy.deepcopy(member)
    bound["spec"]["nodeName"] = node_name
    h.mirror.upsert_pod(bound)


def test_each_member_is_steered_to_one_place_of_its_own(h: Harness) -> None:
    """Admitted, the four members (3 cpu each on 4-cpu nodes) are each sent to a different node: no two
    race for one place, though every node has a place for any of them."""
    gang = members("a", 4)
    h.add(coscheduling_podgroup("a", 4), *gang)
    chosen = []
    for member in gang:
        result = h.engine.filter(filter_args(member, NODES))
        assert len(result.feasible) == 1, result
        chosen.append(result.feasible[0])
    assert sorted(chosen) == NODES
    # asked again (kube-scheduler retrying it), a member gets the same place
    assert h.engine.filter(filter_args(gang[2], NODES)).feasible == [chosen[2]]
    # a fifth member beyond minCount finds every place claimed, and no free room outside them
    extra = pod("a-4", cpu="3", pod_group="a")
    h.add(extra)
    result = h.engine.filter(filter_args(extra, NODES))
    assert result.feasible == [] and all("claimed by another member" in m for m in result.failed.values())


def test_a_claimed_place_not_offered_is_given_up_for_a_free_one(h: Harness) -> None:
    """kube-scheduler's own filters dropped the claimed node: the member takes another unclaimed place."""
    gang = members("a", 2)
    h.add(coscheduling_podgroup("a", 2), *gang)
    first = h.engine.filter(filter_args(gang[0], NODES)).feasible
    key = h.mirror.pod("default", "a-0").gang  # type: ignore[union-attr]
    assert key is not None
    reserved = {at for at, _ in h.mirror.reserved_slots(key)}
    others = [n for n in NODES if n != first[0]]
    second = h.engine.filter(filter_args(gang[0], others)).feasible
    assert len(second) == 1 and second[0] in reserved and second[0] != first[0]


def test_binds_by_another_binder_take_their_places_and_complete_the_gang(h: Harness) -> None:
    gang = members("a", 3)
    h.add(coscheduling_podgroup("a", 3), *gang)
    places = [h.engine.filter(filter_args(m, NODES)).feasible[0] for m in gang]
    key = h.mirror.pod("default", "a-0").gang  # type: ignore[union-attr]
    assert key is not None and h.mirror.reserved_count(key) == 3
    bind_elsewhere(h, gang[0], places[0])
    assert h.mirror.reserved_count(key) == 2  # its place is used, not counted twice
    assert h.mirror.free(places[0], None)["cpu"] == 1000
    # the claim of a bound member no longer holds a place; the others keep theirs
    assert h.engine.filter(filter_args(gang[1], NODES)).feasible == [places[1]]
    bind_elsewhere(h, gang[1], places[1])
    bind_elsewhere(h, gang[2], places[2])
    h.clock.advance(1)
    h.ledger.sweep()
    state = h.ledger.state(key)
    assert state is not None and state.admitted_at is None and state.completed == 1
    assert h.mirror.reserved_count(key) == 0
    assert "GangBound" in h.events.reasons() and "GangPartiallyBound" not in h.events.reasons()
    assert h.ledger.counters["completed"] == 1


def test_a_gang_left_partly_bound_is_told_and_planned_again_around_the_bound(h: Harness) -> None:
    """The binder bound two of three and then failed the third until the gang's timeout: the gang is
    partly bound (no barrier in this mode). It is told, its reservation dropped, and after the back-off
    the missing member is planned again alone."""
    gang = members("a", 3)
    h.add(coscheduling_podgroup("a", 3), *gang)
    places = [h.engine.filter(filter_args(m, NODES)).feasible[0] for m in gang]
    key = h.mirror.pod("default", "a-0").gang  # type: ignore[union-attr]
    assert key is not None
    h.clock.advance(20)
    bind_elsewhere(h, gang[0], places[0])
    h.ledger.sweep()
    h.clock.advance(20)  # 40 s after admission, 20 s after the last progress: not yet timed out
    bind_elsewhere(h, gang[1], places[1])
    h.ledger.sweep()
    assert h.ledger.counters["timeouts"] == 0 and h.ledger.counters["partially_bound"] == 0
    h.clock.advance(31)
    h.ledger.sweep()
    assert h.ledger.counters["timeouts"] == 1 and h.ledger.counters["partially_bound"] == 1
    (partial,) = h.events.of("GangPartiallyBound")
    assert "2 of 3 members are bound" in partial[3]
    assert h.mirror.reserved_count(key) == 0
    h.clock.advance(11)  # back-off over: the third member alone is planned and steered
    result = h.engine.filter(filter_args(gang[2], NODES))
    assert len(result.feasible) == 1 and h.mirror.reserved_count(key) == 1
    bind_elsewhere(h, gang[2], result.feasible[0])
    h.clock.advance(1)
    h.ledger.sweep()
    assert h.ledger.state(key).completed == 1  # type: ignore[union-attr]


def test_members_wait_at_filter_until_their_gang_is_admitted(h: Harness) -> None:
    gang = members("a", 3)
    h.add(coscheduling_podgroup("a", 3), *gang[:2])
    result = h.engine.filter(filter_args(gang[0], NODES))
    assert result.feasible == [] and set(result.failed_unresolvable) == set(NODES)


def test_bind_is_refused_with_the_reason(h: Harness) -> None:
    web = pod("web", cpu="1")
    h.add(web)
    error = h.engine.bind(bind_args(web, "n1"))
    assert "filter-gated" in error and "remove bindVerb" in error
    assert h.binder.calls == []


def test_plain_pods_are_filtered_as_in_the_barrier_mode(h: Harness) -> None:
    gang = members("a", 4)
    h.add(coscheduling_podgroup("a", 4), *gang)
    h.engine.filter(filter_args(gang[0], NODES))  # admits: 3 cpu reserved on every node
    assert h.engine.filter(filter_args(pod("web", cpu="1"), NODES)) == FilterResult(NODES, {}, {})
    assert h.engine.filter(filter_args(pod("batch", cpu="2"), NODES)).feasible == []

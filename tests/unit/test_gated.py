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
from extender.gangs.bind_modes import FilterGated
from tests.builders import Harness, bind_args, coscheduling_podgroup, filter_args, make_engine, node, pod, slots_of

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


def sent_to_places(h: Harness, name: str, count: int) -> tuple[list[dict[str, Any]], list[str], Any]:
    """A gang of ``count`` members, all filtered once (the first admits it): the members, the place each
    was sent to, the gang's key."""
    gang = members(name, count)
    h.add(coscheduling_podgroup(name, count), *gang)
    places = [h.engine.filter(filter_args(m, NODES)).feasible[0] for m in gang]
    key = h.mirror.pod("default", f"{name}-0").gang  # type: ignore[union-attr]
    assert key is not None
    return gang, places, key


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
    assert result.feasible == [] and all("claimed by members being bound" in m for m in result.failed.values())


def test_a_claimed_place_not_offered_is_given_up_for_a_free_one(h: Harness) -> None:
    """kube-scheduler's own filters dropped the claimed node: the member takes another unclaimed place."""
    gang = members("a", 2)
    h.add(coscheduling_podgroup("a", 2), *gang)
    first = h.engine.filter(filter_args(gang[0], NODES)).feasible
    key = h.mirror.pod("default", "a-0").gang  # type: ignore[union-attr]
    assert key is not None
    reserved = {at for at, _ in slots_of(h.ledger, key)}
    others = [n for n in NODES if n != first[0]]
    second = h.engine.filter(filter_args(gang[0], others)).feasible
    assert len(second) == 1 and second[0] in reserved and second[0] != first[0]


def test_binds_by_another_binder_take_their_places_and_complete_the_gang(h: Harness) -> None:
    gang = members("a", 3)
    h.add(coscheduling_podgroup("a", 3), *gang)
    places = [h.engine.filter(filter_args(m, NODES)).feasible[0] for m in gang]
    key = h.mirror.pod("default", "a-0").gang  # type: ignore[union-attr]
    assert key is not None and len(slots_of(h.ledger, key)) == 3
    bind_elsewhere(h, gang[0], places[0])
    assert len(slots_of(h.ledger, key)) == 2  # its place is used, not counted twice
    assert h.mirror.free(places[0], None)["cpu"] == 1000
    # the claim of a bound member no longer holds a place; the others keep theirs
    assert h.engine.filter(filter_args(gang[1], NODES)).feasible == [places[1]]
    bind_elsewhere(h, gang[1], places[1])
    bind_elsewhere(h, gang[2], places[2])
    h.clock.advance(1)
    h.ledger.sweep()
    state = h.ledger.record(key)
    assert state is not None and not state.admitted and state.completed == 1
    assert len(slots_of(h.ledger, key)) == 0
    assert "GangBound" in h.events.reasons() and "GangPartiallyBound" not in h.events.reasons()
    assert h.ledger.view.counters()["completed"] == 1


def test_a_gang_left_partly_bound_is_told_and_planned_again_around_the_bound(h: Harness) -> None:
    """The binder bound two of three and then failed the third until the gang's timeout: the gang is
    partly bound (no barrier in this mode). It is told, its reservation dropped, and after the back-off
    the missing member is planned again alone."""
    gang, places, key = sent_to_places(h, "a", 3)
    h.clock.advance(20)
    bind_elsewhere(h, gang[0], places[0])
    h.ledger.sweep()
    h.clock.advance(20)  # 40 s after admission, 20 s after the last progress: not yet timed out
    bind_elsewhere(h, gang[1], places[1])
    h.ledger.sweep()
    assert h.ledger.view.counters()["timeouts"] == 0 and h.ledger.view.counters()["partially_bound"] == 0
    h.clock.advance(31)
    h.ledger.sweep()
    assert h.ledger.view.counters()["timeouts"] == 1 and h.ledger.view.counters()["partially_bound"] == 1
    (partial,) = h.events.of("GangPartiallyBound")
    assert "2 of 3 members are bound" in partial[3]
    assert len(slots_of(h.ledger, key)) == 0
    h.clock.advance(11)  # back-off over: the third member alone is planned and steered
    result = h.engine.filter(filter_args(gang[2], NODES))
    assert len(result.feasible) == 1 and len(slots_of(h.ledger, key)) == 1
    bind_elsewhere(h, gang[2], result.feasible[0])
    h.clock.advance(1)
    h.ledger.sweep()
    assert h.ledger.record(key).completed == 1  # type: ignore[union-attr]


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


def gang_key(h: Harness, name: str) -> Any:
    key = h.mirror.pod("default", name).gang  # type: ignore[union-attr]
    assert key is not None
    return key


def test_a_gang_bound_whole_just_before_its_deadline_completes_not_partly_bound(h: Harness) -> None:
    """Both members are bound 0.5 s before the 30 s deadline and the next sweep (the 1 s tick) comes
    after it: the binds are followed before the clock is read, so the gang completes, whole."""
    gang, places, key = sent_to_places(h, "a", 2)
    h.clock.advance(29.5)
    bind_elsewhere(h, gang[0], places[0])
    bind_elsewhere(h, gang[1], places[1])
    h.clock.advance(1.0)
    h.ledger.sweep()
    assert "GangPartiallyBound" not in h.events.reasons()
    assert h.ledger.view.counters()["timeouts"] == 0
    assert h.ledger.record(key).completed == 1  # type: ignore[union-attr]


def test_a_bind_seen_before_the_deadline_moves_it_even_if_the_sweep_comes_after(h: Harness) -> None:
    """A member bound at 29.5 s is progress made before the deadline: the sweep at 30.5 s sees it first."""
    gang = members("a", 3)
    h.add(coscheduling_podgroup("a", 3), *gang)
    places = [h.engine.filter(filter_args(m, NODES)).feasible[0] for m in gang]
    h.clock.advance(29.5)
    bind_elsewhere(h, gang[0], places[0])
    h.clock.advance(1.0)
    h.ledger.sweep()
    assert h.ledger.view.counters()["timeouts"] == 0


def test_a_claim_made_before_the_pod_watch_saw_the_member_keeps_its_place(h: Harness) -> None:
    """Three members, minCount 2; kube-scheduler filters a-0 before gang-extender's pod watch delivered
    it. a-0 claims nothing (its claim could not be counted by others); once the watch delivers it, it
    and a-1 are sent to different places (a 4-cpu node holds one 3-cpu member)."""
    gang = members("a", 3)
    h.add(coscheduling_podgroup("a", 2), gang[1], gang[2])  # a-0 not seen by the pod watch yet
    first = h.engine.filter(filter_args(gang[0], NODES)).feasible
    second = h.engine.filter(filter_args(gang[1], NODES)).feasible
    h.add(gang[0])
    again = (h.engine.filter(filter_args(gang[0], NODES)).feasible,
             h.engine.filter(filter_args(gang[1], NODES)).feasible)
    assert first != second and again[0] != again[1], (first, second, again)


def test_claims_are_not_kept_for_uids_the_mirror_never_saw(h: Harness) -> None:
    """Filter requests naming a gang with made-up uids leave no claims: only pods the mirror holds claim."""
    gang = members("a", 2)
    h.add(coscheduling_podgroup("a", 2), *gang)
    h.engine.filter(filter_args(gang[0], NODES))
    key = gang_key(h, "a-0")
    for i in range(500):
        ghost = pod(f"ghost-{i}", cpu="3", pod_group="a")
        h.engine.filter(filter_args(ghost, NODES))
    assert len(h.ledger.record(key).attempt.claims) <= 2  # type: ignore[union-attr]


def test_a_replan_after_a_timeout_does_not_steer_the_stuck_member_to_the_same_place(h: Harness) -> None:
    """An extender after gang-extender rejects a-0's claimed node every time (a device gang-extender
    does not model): at the timeout the place a-0 was sent to and never bound joins the nodes the next
    plans avoid, so after the back-off a-0 is sent elsewhere."""
    gang = members("a", 2)
    h.add(coscheduling_podgroup("a", 2), *gang)
    stuck = h.engine.filter(filter_args(gang[0], NODES)).feasible
    other = h.engine.filter(filter_args(gang[1], NODES)).feasible
    bind_elsewhere(h, gang[1], other[0])
    h.ledger.sweep()
    for _ in range(10):  # kube-scheduler retries a-0; the extender after gang-extender rejects it
        h.clock.advance(2.9)
        assert h.engine.filter(filter_args(gang[0], NODES)).feasible == stuck
    h.clock.advance(31)
    h.ledger.sweep()
    assert h.ledger.view.counters()["partially_bound"] == 1
    h.clock.advance(11)
    again = h.engine.filter(filter_args(gang[0], NODES)).feasible
    assert again != stuck, (stuck, again)


def test_a_member_whose_bind_lands_after_the_timeout_completes_the_gang(h: Harness) -> None:
    """a-1 passed filter before the timeout and its bind lands after it (a slow binder, or a PreBind
    such as volume binding): the gang is whole, and is told so (GangBound, completed)."""
    gang, places, key = sent_to_places(h, "a", 2)
    h.clock.advance(20)
    bind_elsewhere(h, gang[0], places[0])
    h.ledger.sweep()
    h.clock.advance(31)
    h.ledger.sweep()
    assert h.ledger.view.counters()["partially_bound"] == 1
    h.clock.advance(1)
    bind_elsewhere(h, gang[1], places[1])  # in flight at the timeout
    for _ in range(20):
        h.clock.advance(1)
        h.ledger.sweep()
    state = h.ledger.record(key)
    assert state is not None and state.completed == 1, state.last_message
    assert "GangBound" in h.events.reasons()


def test_a_place_claimed_by_a_member_in_flight_is_not_reserved_for_another_gang_at_the_timeout(h: Harness) -> None:
    """A member that passed filter to its claimed place may still be in kube-scheduler's binding cycle:
    the gang is not timed out (and the place not given to another gang) until ``hold_seconds`` after
    its member was last sent there."""
    a, places, key = sent_to_places(h, "a", 2)
    h.clock.advance(20)
    bind_elsewhere(h, a[0], places[0])
    h.ledger.sweep()  # progress: the deadline is 50 s
    h.clock.advance(25)
    assert h.engine.filter(filter_args(a[1], NODES)).feasible == [places[1]]  # retried at 45 s, sent again
    h.clock.advance(6)
    h.ledger.sweep()  # past the deadline, but a-1 may be being bound
    assert h.ledger.view.counters()["timeouts"] == 0 and len(slots_of(h.ledger, key)) == 1
    b = members("b", 3)
    h.add(coscheduling_podgroup("b", 3), *b)
    h.engine.filter(filter_args(b[0], NODES))
    b_key = gang_key(h, "b-0")
    assert len(slots_of(h.ledger, b_key)) == 0  # b needs the place a-1 was sent to: not while it may land
    h.clock.advance(23)  # 29 s (hold_seconds) after a-1 was last sent: given up
    h.ledger.sweep()
    assert h.ledger.view.counters()["timeouts"] == 1 and len(slots_of(h.ledger, key)) == 0
    h.engine.filter(filter_args(b[0], NODES))
    assert places[1] in {at for at, _ in slots_of(h.ledger, b_key)}


def test_a_small_members_claim_does_not_shut_a_big_member_out_of_its_own_place() -> None:
    """One 8-cpu node holds the gang's two places (5 cpu and 2 cpu): the small member's claim takes the
    small place, and the big member still has its own."""
    h = make_engine(timeout_seconds=30.0, backoff_seconds=10.0, filter_gated=True)
    try:
        h.add(node("n1", cpu="8"))
        big, small = pod("a-big", cpu="5", pod_group="a"), pod("a-small", cpu="2", pod_group="a")
        h.add(coscheduling_podgroup("a", 2), big, small)
        assert h.engine.filter(filter_args(small, ["n1"])).feasible == ["n1"]
        assert h.engine.filter(filter_args(big, ["n1"])).feasible == ["n1"]
    finally:
        h.close()


def test_barrier_a_finished_member_first_seen_bound_takes_no_reserved_place() -> None:
    """Barrier mode: a gang member first seen already bound and finished (a relist after a watch gap)
    takes no reserved place: a terminal pod is neither a member nor placed."""
    h = make_engine(timeout_seconds=30.0, backoff_seconds=10.0)
    try:
        h.add(*(node(name, cpu="4") for name in NODES))
        gang = members("a", 2)
        h.add(coscheduling_podgroup("a", 2), *gang)
        h.engine.filter(filter_args(gang[0], NODES))
        key = gang_key(h, "a-0")
        assert len(slots_of(h.ledger, key)) == 2
        h.add(pod("a-old", cpu="3", pod_group="a", node="n4", phase="Failed"))
        assert len(slots_of(h.ledger, key)) == 2
    finally:
        h.close()


def test_a_filters_sweep_follows_only_gangs_the_binder_bound_a_member_of(h: Harness) -> None:
    """Following binds is driven by the binds the pod watch shows: a filter's sweep counts the bound
    members of the gangs the binder bound one of since the last sweep, not of every admitted gang; the
    tick's sweep (min_interval 0) counts every admitted gang (the safety net, and a lowered minCount)."""
    a, a_places, a_key = sent_to_places(h, "a", 2)
    *_, b_key = sent_to_places(h, "b", 2)
    h.ledger.registry.take_bound_gangs()  # only binds from now on
    counted: list[Any] = []
    mode = h.ledger.mode
    assert isinstance(mode, FilterGated)
    real = mode.follow_binds
    mode.follow_binds = lambda record, now: counted.append(record.key) or real(record, now)  # type: ignore[method-assign]
    h.clock.advance(1)
    h.ledger.sweep(0.05)
    assert counted == []
    bind_elsewhere(h, a[0], a_places[0])
    h.clock.advance(1)
    h.ledger.sweep(0.05)
    assert counted == [a_key]
    bind_elsewhere(h, a[1], a_places[1])
    h.clock.advance(1)
    h.ledger.sweep(0.05)
    state = h.ledger.record(a_key)
    assert state is not None and state.completed == 1  # completed from the filter's sweep
    counted.clear()
    h.ledger.sweep()
    assert counted == [b_key]  # the tick follows every admitted gang

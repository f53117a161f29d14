"""Following gang policy changes (1.37 PodGroups: ``minCount`` is mutable) and telling users why a gang
waits: GangWaiting Events, group status values, the quorum released without a bind request."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from extender.errors import ProtocolError
from extender.model.gang import GangKey, GangPhase, GangStatus, GroupKind, GroupRef
from tests.builders import Harness, bind_args, filter_args, make_engine, node
from tests.builders import pod as base_pod
from tests.unit.test_engine import Binds, wait_until

NODES4 = ["n1", "n2", "n3", "n4"]
GANG = GangKey(GroupRef(GroupKind.PODGROUP, "default", "pg"))


def podgroup(min_count: int, version: str = "v1beta1") -> dict[str, Any]:
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "default", "uid": "pg-uid"},
            "spec": {"workloadRef": {"workloadName": "w", "templateName": "t"},
                     "schedulingPolicy": {"gang": {"minCount": min_count}}}}


def member(i: int, cpu: str = "1") -> dict[str, Any]:
    raw = base_pod(f"m{i}", cpu=cpu)
    raw["spec"]["schedulingGroup"] = {"podGroupName": "pg"}
    return raw


class Statuses:
    def __init__(self, values: list[tuple[GangKey, GangStatus]]) -> None:
        self.values = values

    def phases(self) -> list[GangPhase]:
        return [s.phase for _, s in self.values]


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = make_engine(timeout_seconds=30.0, backoff_seconds=10.0)
    harness.add(*(node(n) for n in NODES4))
    yield harness
    harness.close()


@pytest.fixture
def binds(h: Harness) -> Iterator[Binds]:
    runner = Binds(h)
    yield runner
    h.binder.gate.set()
    h.clock.advance(10_000)
    h.engine.sweep()
    runner.join()


def statuses(h: Harness) -> Statuses:
    return Statuses(h.statuses)


def set_min_count(h: Harness, count: int) -> None:
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(count))


def test_podgroup_members_wait_at_the_quorum_gate_with_a_status_and_an_event(h: Harness) -> None:
    members = [member(i) for i in range(3)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
    h.add(*members)
    result = h.engine.filter(filter_args(members[0], NODES4))
    message = "waiting for gang default/pg: 3/4 pods exist"
    assert result.failed_unresolvable == dict.fromkeys(NODES4, message)
    assert h.events.of("GangWaiting") == [(("m0",), "Normal", "GangWaiting", message)]
    assert statuses(h).values == [(GANG, GangStatus(GangPhase.WAITING, message))]
    assert h.ledger.view.facts(GANG).message == message


def test_missing_podgroup_names_the_object(h: Harness) -> None:
    first = member(0)
    h.add(first)
    result = h.engine.filter(filter_args(first, NODES4))
    assert set(result.failed_unresolvable.values()) == {
        "waiting for gang default/pg: PodGroup default/pg does not exist"}


def test_lowering_min_count_wakes_the_waiting_members_and_lets_them_pass(h: Harness) -> None:
    woken = h.woken
    members = [member(i) for i in range(3)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
    h.add(*members)
    for turned_away in members[:2]:
        assert not h.engine.filter(filter_args(turned_away, NODES4)).feasible
    woken.clear()
    set_min_count(h, 3)
    h.engine.sweep()
    # kube-scheduler does not watch PodGroups: the members it parked as unschedulable are nudged; m2, never
    # tried (still in its queue, or held by the quorum gate), costs no API write
    assert sorted(woken) == ["m0", "m1"]
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible


def unschedulable(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` as kube-scheduler leaves a pod it tried and found no node for."""
    raw["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    return raw


def test_a_restarted_extender_wakes_the_members_kube_scheduler_parked(h: Harness) -> None:
    """An extender that restarted never saw its predecessor turn m0 and m1 away; kube-scheduler still keeps
    them as unschedulable: a minCount lowered to what exists wakes them, and not m2, never tried."""
    woken = h.woken
    members = [unschedulable(member(0)), unschedulable(member(1)), member(2)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
    h.add(*members)
    h.engine.sweep()
    woken.clear()
    set_min_count(h, 3)
    h.engine.sweep()
    assert sorted(woken) == ["m0", "m1"]


def test_a_policy_change_that_leaves_the_quorum_short_wakes_nobody(h: Harness) -> None:
    """minCount 5 -> 4 with 3 members: a member woken now would only be turned away again (an API write and
    a scheduling attempt each); they are woken once the quorum exists."""
    woken = h.woken
    members = [member(i) for i in range(3)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(5))
    h.add(*members)
    for turned_away in members:
        assert not h.engine.filter(filter_args(turned_away, NODES4)).feasible
    woken.clear()
    set_min_count(h, 4)
    h.engine.sweep()
    assert woken == []
    set_min_count(h, 3)
    h.engine.sweep()
    assert sorted(woken) == ["m0", "m1", "m2"]


def test_podgroup_created_after_its_pods_wakes_them(h: Harness) -> None:
    woken = h.woken
    members = [member(i) for i in range(2)]
    h.add(*members)
    for turned_away in members:
        assert not h.engine.filter(filter_args(turned_away, NODES4)).feasible  # PodGroup does not exist
    assert woken == []
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(2))
    h.engine.sweep()
    assert sorted(woken) == ["m0", "m1"]
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible


def test_lowering_min_count_releases_the_binds_already_held(h: Harness, binds: Binds) -> None:
    """4 members held of minCount 5 (the fifth exists but cannot be placed); minCount drops to 4: the
    held quorum is complete and is bound at once, without another bind request."""
    members = [member(i, cpu="3") for i in range(5)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(5))
    h.add(node("n5"), *members)
    assert h.engine.filter(filter_args(members[0], [*NODES4, "n5"])).feasible
    for i in range(4):
        binds.start(members[i], NODES4[i])
        wait_until(lambda i=i: h.ledger.view.held_count() == i + 1)
    assert h.binder.calls == []
    set_min_count(h, 4)
    h.engine.sweep()
    assert binds.join() == {"m0": "", "m1": "", "m2": "", "m3": ""}
    assert sorted(c[1] for c in h.binder.calls) == ["m0", "m1", "m2", "m3"]
    state = h.ledger.record(GANG)
    assert state is not None and state.completed == 1 and state.policy.min_count == 4
    assert h.mirror.reservation(GANG) == {}  # the slot kept for the fifth member is released
    assert statuses(h).phases()[-1] is GangPhase.SCHEDULED
    assert [e[3] for e in h.events.of("GangBound")] == ["gang default/pg: 4 member(s) bound together at quorum"]


def two_held_then_min_count_two(h: Harness, binds: Binds) -> list[dict[str, Any]]:
    """A gang of minCount 4 admitted, two of its binds held, then minCount lowered to 2: the two held binds
    are a complete quorum now, which nothing has noticed yet. Returns the four members."""
    members = [member(i, cpu="3") for i in range(4)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
    h.add(*members)
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible
    binds.start(members[0], "n1")
    binds.start(members[1], "n2")
    wait_until(lambda: h.ledger.view.held_count() == 2)
    set_min_count(h, 2)
    return members


def test_a_quorum_a_filters_sweep_released_is_bound_even_when_that_filter_is_a_bad_request(
        h: Harness, binds: Binds) -> None:
    """Found in review: the filter's sweep marked the quorum a lowered minCount completed as releasing, then
    the same request failed (a node name of "": 400) and the release was lost with it: the holds were never
    bound nor answered. The work a sweep decides is queued in the ledger and started whatever the request
    does."""
    two_held_then_min_count_two(h, binds)
    h.clock.advance(1)  # past the filter's sweep interval
    with pytest.raises(ProtocolError):
        h.engine.filter(filter_args(base_pod("stray", cpu="1"), ["n1", ""]))
    assert binds.join() == {"m0": "", "m1": ""}
    assert sorted(c[1] for c in h.binder.calls) == ["m0", "m1"]


def test_next_bind_after_a_drop_completes_the_quorum_too(h: Harness, binds: Binds) -> None:
    """Without the sweep, the next bind request sees the new minCount itself."""
    members = [member(i, cpu="3") for i in range(4)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
    h.add(*members)
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible
    binds.start(members[0], "n1")
    wait_until(lambda: h.ledger.view.held_count() == 1)
    set_min_count(h, 2)
    binds.start(members[1], "n2")
    assert binds.join() == {"m0": "", "m1": ""}


def test_a_sweep_that_does_not_bind_leaves_a_completed_quorum_to_the_next_bind(h: Harness, binds: Binds) -> None:
    """Only a caller that binds (``Engine.sweep``) gets the releases; any other sweep marks nothing, so
    no hold is left releasing with nobody to bind it."""
    members = two_held_then_min_count_two(h, binds)
    h.ledger.sweep()
    assert h.ledger.take_work().releases == []
    binds.start(members[2], "n3")
    assert binds.join() == {"m0": "", "m1": "", "m2": ""}


def test_raising_min_count_of_an_admitted_gang_without_holds_replans(h: Harness) -> None:
    members = [member(i, cpu="3") for i in range(4)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(2))
    h.add(*members)
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible
    assert len(h.mirror.reservation(GANG)) == 2
    set_min_count(h, 4)
    h.engine.sweep()
    state = h.ledger.record(GANG)
    assert state is not None and not state.admitted and h.mirror.reservation(GANG) == {}
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible
    assert len(h.mirror.reservation(GANG)) == 4


def test_lowering_min_count_of_an_admitted_gang_shrinks_its_reservation(h: Harness, binds: Binds) -> None:
    members = [member(i, cpu="3") for i in range(4)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
    h.add(*members)
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible
    binds.start(members[0], "n1")
    wait_until(lambda: h.ledger.view.held_count() == 1)
    assert len(h.mirror.reservation(GANG)) == 3
    other = base_pod("other", cpu="3")
    h.add(other)
    assert not h.engine.filter(filter_args(other, NODES4)).feasible  # every node held or reserved
    h.woken.clear()
    set_min_count(h, 3)
    h.engine.sweep()
    assert len(h.mirror.reservation(GANG)) == 2  # 1 held + 2 reserved = 3
    assert "other" in h.woken  # the slot given back may fit it: it is tried again


def test_podgroup_turning_basic_releases_what_it_held(h: Harness, binds: Binds) -> None:
    members = [member(i, cpu="3") for i in range(4)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
    h.add(*members)
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible
    binds.start(members[0], "n1")
    wait_until(lambda: h.ledger.view.held_count() == 1)
    basic = podgroup(4)
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    h.mirror.upsert_group(GroupKind.PODGROUP, basic)
    h.engine.sweep()
    assert binds.join() == {"m0": ""}
    assert h.engine.bind(bind_args(members[1], "n2")) == ""  # and later members bind at once


def test_admission_and_timeout_statuses(h: Harness, binds: Binds) -> None:
    members = [member(i, cpu="3") for i in range(4)]
    h.mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
    h.add(*members)
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible
    binds.start(members[0], "n1")
    wait_until(lambda: h.ledger.view.held_count() == 1)
    h.clock.advance(31)
    h.engine.sweep()
    binds.join()
    phases = statuses(h).phases()
    assert phases == [GangPhase.SCHEDULING, GangPhase.WAITING]
    assert statuses(h).values[-1][1].message.startswith("gang default/pg timed out after 30s")


def test_copy_of_podgroup_fixture_is_not_shared() -> None:
    a, b = podgroup(3), podgroup(3)
    b["spec"]["schedulingPolicy"]["gang"]["minCount"] = 9
    assert a == copy.deepcopy(podgroup(3))

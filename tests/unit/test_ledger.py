"""GangLedger on its own: admission, bind decisions, release, expiry and sweep (no engine, no threads)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from extender.cluster.mirror import ClusterMirror
from extender.gangs import planner
from extender.gangs.effects import Effect
from extender.gangs.ledger import BindAction, GangLedger
from extender.gangs.record import GangRecord
from extender.gangs.settings import GangSettings
from extender.model.cluster import PodRecord
from extender.model.gang import PASS, Code, GangKey, GangPolicy, GroupKind, Verdict
from tests.builders import EventLog, FakeClock, assert_demand_counted, coscheduling_podgroup, node, pod, slots_of

NODES4 = ["n1", "n2", "n3", "n4"]
SLOT = {"cpu": 3000, "memory": 2**30, "pods": 1}
POLICY = GangPolicy(4)


class World:
    def __init__(self, *, timeout: float = 30.0, backoff: float = 10.0, max_backoff: float = 300.0,
                 hold: float = 29.0) -> None:
        """``hold``: how long a bind may be held (kube-scheduler's httpTimeout, 30 s, less a 1 s margin)."""
        self.clock = FakeClock()
        self.events = EventLog()
        self.mirror = ClusterMirror()
        settings = GangSettings(timeout_seconds=timeout, backoff_seconds=backoff, max_backoff_seconds=max_backoff,
                                hold_seconds=hold)
        self.ledger = GangLedger(self.mirror, settings, clock=self.clock, on_event=self.events)
        for name in NODES4:
            self.mirror.upsert_node(node(name))

    def gang(self, name: str, count: int, min_count: int = 4, cpu: str = "3") -> list[PodRecord]:
        self.mirror.upsert_group(GroupKind.COSCHEDULING, coscheduling_podgroup(name, min_count))
        return [self.mirror.upsert_pod(pod(f"{name}-{i}", cpu=cpu, pod_group=name)) for i in range(count)]

    def add(self, raw: dict[str, Any]) -> PodRecord:
        return self.mirror.upsert_pod(raw)


def key(record: PodRecord) -> GangKey:
    assert record.gang is not None
    return record.gang


def assert_scheduled(ledger: GangLedger) -> None:
    """The schedule's invariant: every gang with something due has an entry on the schedule at or before it,
    or by now if it is past (else a filter's sweep would leave it to the tick)."""
    now = ledger.clock()
    entries: dict[GangKey, float] = {}
    for when, _, record in ledger.registry._dues:
        if ledger.registry.get(record.key) is record:
            entries[record.key] = min(when, entries.get(record.key, when))
    for record in ledger.registry.all():
        due = ledger.expiry.next_due(record)
        if due != float("inf"):
            assert entries.get(record.key, float("inf")) <= max(due, now), (record.key, due, entries.get(record.key))


@pytest.fixture
def w() -> Iterator[World]:
    world = World()
    yield world
    assert_scheduled(world.ledger)  # after every test of this file
    assert_demand_counted(world.ledger)


def test_admission_reserves_the_whole_gang_and_starts_the_clock(w: World) -> None:
    a = w.gang("a", 4)
    assert w.ledger.admit(key(a[0]), POLICY) == PASS
    state = w.ledger.record(key(a[0]))
    assert state is not None
    assert state.reservation is not None and state.admitted and state.reservation.since == w.clock.now
    assert state.attempt.deadline == w.clock.now + 30
    assert sorted(node for node, _ in slots_of(w.ledger, key(a[0]))) == NODES4
    assert state.last_message == "admitted: 4 member(s) reserved on 4 node(s)"
    assert w.mirror.reservation(key(a[0])) == dict.fromkeys(NODES4, SLOT)
    assert w.ledger.view.counters()["admitted"] == 1
    # Admission is idempotent: the second member does not re-plan or re-reserve.
    assert w.ledger.admit(key(a[1]), POLICY) == PASS
    assert w.ledger.view.counters()["admitted"] == 1 and len(w.events.of("GangAdmitted")) == 1


def test_admission_plans_only_the_members_still_missing(w: World) -> None:
    a = w.gang("a", 4)
    w.add(pod("a-0", uid=a[0].uid, cpu="3", pod_group="a", node="n1"))  # already bound
    w.add(pod("a-1", uid=a[1].uid, cpu="3", pod_group="a", node="n2"))
    assert w.ledger.admit(key(a[0]), POLICY) == PASS
    assert w.mirror.reservation(key(a[0])) == {"n3": SLOT, "n4": SLOT}
    assert w.events.of("GangAdmitted")[0][3] == "gang default/a admitted: capacity reserved for 2 more member(s)"


def test_admission_waits_without_reserving_when_the_rest_does_not_fit(w: World) -> None:
    a = w.gang("a", 4)
    w.add(pod("hog", cpu="2", node="n1"))
    verdict = w.ledger.admit(key(a[0]), POLICY)
    assert verdict == Verdict(Code.WAIT_RESOLVABLE, "waiting for capacity for gang default/a: 3/4 remaining "
                                                    "members fit; no node has cpu=3 free (largest free falls "
                                                    "short by cpu=1)")
    assert w.mirror.reservation(key(a[0])) == {}
    state = w.ledger.record(key(a[0]))
    assert state is not None and not state.admitted and state.last_message == verdict.message


def test_bind_decisions_hold_until_quorum_then_release_all(w: World) -> None:
    a = w.gang("a", 4)
    gang = key(a[0])
    assert w.ledger.admit(gang, POLICY) == PASS
    decisions = []
    for member, target in zip(a[:3], NODES4, strict=False):
        decision = w.ledger.on_bind(member, target, POLICY)
        assert decision.action is BindAction.WAIT and decision.hold is not None
        decisions.append(decision)
        assert w.mirror.placement(member.uid) == target  # assumed while held
    # Each landed member consumed its slot: only n4 is still reserved.
    assert w.mirror.reservation(gang) == {"n4": SLOT}
    assert w.ledger.view.held_count() == 3

    last = w.ledger.on_bind(a[3], "n4", POLICY)
    assert last.action is BindAction.RELEASE
    assert [h.pod.name for h in last.holds] == ["a-0", "a-1", "a-2", "a-3"]
    assert all(h.releasing for h in last.holds)
    assert w.mirror.reservation(gang) == {}

    w.ledger.released(gang, [(h, "") for h in last.holds])
    assert all(h.answered and h.result == "" for h in last.holds)
    state = w.ledger.record(gang)
    assert state is not None
    assert state.holds == {} and not state.admitted and state.completed == 1
    assert state.last_message == "quorum reached: members bound"
    assert w.ledger.view.counters()["completed"] == 1
    assert w.events.reasons() == ["GangAdmitted", "GangBound"]


def test_bind_of_a_non_gang_pod_is_immediate_and_assumed(w: World) -> None:
    web = w.add(pod("web", cpu="1"))
    decision = w.ledger.on_bind(web, "n1", None)
    assert decision.action is BindAction.NOW
    assert w.mirror.placement(web.uid) == "n1"
    w.ledger.bound(web, "boom")
    assert w.mirror.placement(web.uid) == ""
    assert w.ledger.view.counters()["bind_errors"] == 1


def test_released_with_errors_forgets_failed_members(w: World) -> None:
    a = w.gang("a", 2, min_count=2, cpu="1")
    gang = key(a[0])
    w.ledger.on_bind(a[0], "n1", GangPolicy(2))
    release = w.ledger.on_bind(a[1], "n2", GangPolicy(2))
    assert release.action is BindAction.RELEASE
    w.ledger.released(gang, [(release.holds[0], ""), (release.holds[1], "no")])
    assert w.mirror.placement(a[0].uid) == "n1"
    assert w.mirror.placement(a[1].uid) == ""
    assert [h.result for h in release.holds] == ["", "no"]
    assert w.events.of("GangBound") == [(("a-0",), "Normal", "GangBound",
                                         "gang default/a: 1 member(s) bound together at quorum")]
    assert w.events.of("GangBindFailed") == [(("a-1",), "Warning", "GangBindFailed",
                                              "gang default/a: no; members already bound stay bound (a Binding "
                                              "cannot be undone) and kube-scheduler retries this one")]
    # Issue 26, finding 4: the barrier mode can be left partly bound too (the API server refused a Binding
    # after its siblings'): told on the gang and counted (the GangExtenderGangsPartiallyBound alert), then
    # finished: the refused member keeps its place until kube-scheduler retries it.
    assert w.events.of("GangPartiallyBound") == [(("a-0", "a-1"), "Warning", "GangPartiallyBound", (
        "gang default/a is partly bound: 1 of the 2 members released together were bound and the API server "
        "refused the rest (no); a Binding cannot be undone, so the refused members keep their reserved places "
        "and are bound when kube-scheduler retries them (or the pods that replace them come)"))]
    assert w.ledger.view.counters()["partially_bound"] == 1
    assert slots_of(w.ledger, gang) == (("n2", dict(a[1].requests)),)


def test_members_past_quorum_and_during_release_bind_now(w: World) -> None:
    a = w.gang("a", 4, min_count=2, cpu="1")
    policy = GangPolicy(2)
    w.ledger.on_bind(a[0], "n1", policy)
    release = w.ledger.on_bind(a[1], "n2", policy)
    assert release.action is BindAction.RELEASE
    # The quorum is being bound (not yet answered): a third member does not wait for anything.
    assert w.ledger.on_bind(a[2], "n3", policy).action is BindAction.NOW
    w.ledger.released(key(a[0]), [(h, "") for h in release.holds])
    assert w.ledger.on_bind(a[3], "n4", policy).action is BindAction.NOW


def test_rejections(w: World) -> None:
    a = w.gang("a", 2, min_count=2)
    policy = GangPolicy(2)
    assert w.ledger.on_bind(a[0], "nx", policy).error == "node nx is not known to the extender"
    held = w.ledger.on_bind(a[0], "n1", policy)
    assert held.action is BindAction.WAIT
    again = w.ledger.on_bind(a[0], "n2", policy)
    assert again.action is BindAction.REJECT
    assert again.error == "pod default/a-0 is already waiting at its gang barrier"
    full = w.ledger.on_bind(a[1], "n1", policy)  # a-0 (3 cpu) is assumed on n1
    assert full.action is BindAction.REJECT
    assert full.error == "node n1 no longer has room for pod default/a-1: insufficient cpu (needs cpu=3, free cpu=1)"


def test_each_new_member_at_the_barrier_moves_the_deadline(w: World) -> None:
    a = w.gang("a", 4)
    gang = key(a[0])
    w.ledger.admit(gang, POLICY)
    w.clock.advance(20)
    w.ledger.on_bind(a[0], "n1", POLICY)
    state = w.ledger.record(gang)
    assert state is not None and state.attempt.deadline == w.clock.now + 30  # the first hold starts the clock
    w.clock.advance(5)
    w.ledger.on_bind(a[1], "n2", POLICY)
    assert state.attempt.deadline == w.clock.now + 30  # progress: a member new to this attempt
    assert w.ledger.due(gang) == w.clock.now + 24  # but a[0]'s hold is answered 29 s after it arrived


def test_a_progressing_gang_recycles_its_oldest_hold_instead_of_timing_out(w: World) -> None:
    a = w.gang("a", 4)
    gang = key(a[0])
    w.ledger.admit(gang, POLICY)
    reserved = w.mirror.reservation(gang)
    first = w.ledger.on_bind(a[0], "n1", POLICY).hold
    w.clock.advance(20)
    second = w.ledger.on_bind(a[1], "n2", POLICY).hold
    assert first is not None and second is not None
    w.clock.advance(8.9)
    w.ledger.sweep()
    assert not first.answered
    w.clock.advance(0.1)  # a[0] held 29 s (httpTimeout less the margin); the gang's last progress 9 s ago
    w.ledger.sweep()
    assert first.answered and second.answered, "the gang's holds are answered together"
    assert first.result is not None and "still gathering members (2/4 placed" in first.result
    assert "keeps its reserved place" in first.result and second.result == first.result
    assert w.ledger.view.counters() == {**w.ledger.view.counters(), "timeouts": 0, "holds_recycled": 2}
    assert w.mirror.placement(a[0].uid) == "" and w.mirror.placement(a[1].uid) == ""
    assert w.mirror.reservation(gang) == reserved, "both slots are reserved again"
    # a[0] comes back (kube-scheduler retried it): held again, but that is not progress
    again = w.ledger.on_bind(a[0], "n1", POLICY).hold
    assert again is not None and w.ledger.record(gang).attempt.deadline == w.clock.now + 21  # type: ignore[union-attr]
    w.ledger.on_bind(a[1], "n2", POLICY)
    w.clock.advance(5)
    decisions = [w.ledger.on_bind(m, n, POLICY) for m, n in zip(a[2:], ["n3", "n4"], strict=True)]
    assert decisions[-1].action.value == "release" and len(decisions[-1].holds) == 4


def test_a_gang_without_new_members_times_out_even_while_holds_are_recycled(w: World) -> None:
    a = w.gang("a", 4)
    gang = key(a[0])
    w.ledger.admit(gang, POLICY)
    w.ledger.on_bind(a[0], "n1", POLICY)
    w.clock.advance(10)
    w.ledger.on_bind(a[1], "n2", POLICY)  # deadline: now + 30
    w.clock.advance(20)
    w.ledger.sweep()  # a[0] held 30 s: both holds recycled
    again = w.ledger.on_bind(a[0], "n1", POLICY).hold
    w.clock.advance(10)  # 30 s since a[1], the last new member
    w.ledger.sweep()
    assert again is not None and again.answered and again.result is not None
    assert again.result.startswith("gang default/a timed out after 30s")
    assert w.ledger.view.counters()["timeouts"] == 1 and w.ledger.view.counters()["holds_recycled"] == 2
    assert w.mirror.reservation(gang) == {}


def test_expiry_answers_holds_releases_and_backs_off() -> None:
    w = World(hold=60)  # kube-scheduler waits longer than the gang: the gang's timeout answers the holds
    a = w.gang("a", 4)
    gang = key(a[0])
    w.ledger.admit(gang, POLICY)
    holds = [w.ledger.on_bind(m, n, POLICY).hold for m, n in zip(a[:2], NODES4, strict=False)]
    w.clock.advance(29)
    w.ledger.expire(gang)
    assert all(h is not None and not h.answered for h in holds)
    w.clock.advance(1)
    w.ledger.expire(gang)
    message = ("gang default/a timed out after 30s with 2 member(s) held of 4 needed; released its reservation "
               "and backing off")
    assert all(h is not None and h.answered and h.result == message for h in holds)
    assert w.mirror.placement(a[0].uid) == "" and w.mirror.placement(a[1].uid) == ""
    assert w.mirror.reservation(gang) == {}
    state = w.ledger.record(gang)
    assert state is not None and state.timeouts == 1 and state.backoff_until == w.clock.now + 10
    assert w.ledger.admit(gang, POLICY) == Verdict(
        Code.WAIT_RESOLVABLE, "gang default/a is backing off for 10s after 1 timeout(s) so other gangs can proceed")
    assert w.events.of("GangTimeout")[0][0] == ("a-0", "a-1", "a-2", "a-3")
    assert_scheduled(w.ledger)  # the back-off's end, set by a waiter's step rather than a sweep


def test_backoff_is_capped() -> None:
    w = World(timeout=1, backoff=100, max_backoff=150)
    a = w.gang("a", 2, min_count=2, cpu="1")
    gang = key(a[0])
    for expected in (100, 150, 150):
        w.clock.advance(1000)
        assert w.ledger.admit(gang, GangPolicy(2)) == PASS
        w.ledger.on_bind(a[0], "n1", GangPolicy(2))
        w.clock.advance(1)
        w.ledger.sweep()
        state = w.ledger.record(gang)
        assert state is not None and state.backoff_until == w.clock.now + expected


def test_release_in_flight_is_not_timed_out(w: World) -> None:
    a = w.gang("a", 2, min_count=2, cpu="1")
    gang = key(a[0])
    w.ledger.on_bind(a[0], "n1", GangPolicy(2))
    release = w.ledger.on_bind(a[1], "n2", GangPolicy(2))
    w.clock.advance(60)
    w.ledger.expire(gang)
    assert w.ledger.view.counters()["timeouts"] == 0
    assert not any(h.answered for h in release.holds)
    w.ledger.released(gang, [(h, "") for h in release.holds])
    assert w.ledger.view.counters()["completed"] == 1


def test_sweep_forgets_gangs_without_members(w: World) -> None:
    a = w.gang("a", 4)
    gang = key(a[0])
    w.ledger.admit(gang, POLICY)
    assert w.mirror.reservation(gang) != {}
    for member in a:
        w.mirror.delete_pod(member.uid)
    w.ledger.sweep()
    assert w.ledger.record(gang) is None
    assert w.mirror.reservation(gang) == {}


def test_never_fits_is_rechecked_when_nodes_change(w: World) -> None:
    big = w.gang("big", 8, min_count=8)
    gang = key(big[0])
    verdict = w.ledger.admit(gang, GangPolicy(8))
    assert verdict.code is Code.WAIT_UNRESOLVABLE
    assert verdict.message.startswith("gang default/big can never fit this cluster: only 4 of 8 members fit")
    w.mirror.upsert_node(node("n1", labels={"new": "label"}))  # not a resize: no recheck needed
    assert w.ledger.admit(gang, GangPolicy(8)) == verdict
    assert w.ledger.view.counters()["never_fits"] == 1
    for name in ("n5", "n6", "n7", "n8"):
        w.mirror.upsert_node(node(name))
    assert w.ledger.admit(gang, GangPolicy(8)) == PASS


def test_never_fits_is_rechecked_when_the_members_change(w: World) -> None:
    """A gang whose too-large member is replaced by one that fits must not stay 'can never fit'."""
    w.gang("g", 0, min_count=2)
    too_big = w.add(pod("g-0", cpu="8", pod_group="g"))
    w.add(pod("g-1", cpu="1", pod_group="g"))
    gang = key(too_big)
    assert w.ledger.admit(gang, GangPolicy(2)).code is Code.WAIT_UNRESOLVABLE
    w.mirror.delete_pod(too_big.uid)
    w.add(pod("g-2", cpu="1", pod_group="g"))
    assert w.ledger.admit(gang, GangPolicy(2)) == PASS


# ------------------------------------------------------------------------- the failed-plan memo
@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the ledger's calls of ``planner.plan`` (admission against free capacity and fail-fast)."""
    calls: list[int] = []
    real = planner.plan

    def counting(*args: Any, **kwargs: Any) -> planner.Plan:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "plan", counting)
    return calls


def waiting_gang(w: World) -> tuple[GangKey, PodRecord, Verdict]:
    """Gang ``a`` (4 x 3 cpu on 4 nodes of 4 cpu) told to wait: a 2-cpu hog sits on n1."""
    a = w.gang("a", 4)
    hog = w.add(pod("hog", cpu="2", node="n1"))
    verdict = w.ledger.admit(key(a[0]), POLICY)
    assert verdict.code is Code.WAIT_RESOLVABLE and verdict.message.startswith(
        "waiting for capacity for gang default/a: 3/4 remaining members fit")
    return key(a[0]), hog, verdict


def test_a_failed_plan_is_reused_while_nothing_changes(w: World, plans: list[int]) -> None:
    gang, _, verdict = waiting_gang(w)
    planned = len(plans)
    for _ in range(3):
        assert w.ledger.admit(gang, POLICY) == verdict
    assert len(plans) == planned  # neither planned again nor checked for fail-fast again
    state = w.ledger.record(gang)
    assert state is not None and state.last_message == verdict.message and not state.admitted
    # A pod that is not bound anywhere changes no capacity: still reused.
    w.add(pod("pending-elsewhere", cpu="1"))
    assert w.ledger.admit(gang, POLICY) == verdict and len(plans) == planned


def test_a_failed_plan_is_dropped_when_a_pod_is_deleted(w: World, plans: list[int]) -> None:
    gang, hog, _ = waiting_gang(w)
    w.mirror.delete_pod(hog.uid)
    assert w.ledger.admit(gang, POLICY) == PASS
    assert w.mirror.reservation(gang) == dict.fromkeys(NODES4, SLOT)


def test_a_failed_plan_is_dropped_when_a_node_is_added(w: World, plans: list[int]) -> None:
    gang, _, _ = waiting_gang(w)
    w.mirror.upsert_node(node("n5"))
    assert w.ledger.admit(gang, POLICY) == PASS
    assert sorted(w.mirror.reservation(gang)) == ["n2", "n3", "n4", "n5"]


def test_a_failed_plan_is_dropped_when_a_reservation_is_released(w: World, plans: list[int]) -> None:
    b = w.gang("b", 2, min_count=2)
    assert w.ledger.admit(key(b[0]), GangPolicy(2)) == PASS  # b reserves 3 cpu on two nodes
    a = w.gang("a", 4)
    verdict = w.ledger.admit(key(a[0]), POLICY)
    assert verdict.message.startswith("waiting for capacity for gang default/a: 2/4 remaining members fit")
    planned = len(plans)
    assert w.ledger.admit(key(a[0]), POLICY) == verdict and len(plans) == planned
    w.clock.advance(31)
    w.ledger.expire(key(b[0]))  # b times out: its reservation is released
    assert w.mirror.reservation(key(b[0])) == {}
    assert w.ledger.admit(key(a[0]), POLICY) == PASS
    assert w.mirror.reservation(key(a[0])) == dict.fromkeys(NODES4, SLOT)


def test_a_failed_plan_is_dropped_when_the_members_change(w: World, plans: list[int]) -> None:
    w.gang("g", 0, min_count=2)
    w.add(pod("hog", cpu="3", node="n1"))
    w.add(pod("hog2", cpu="3", node="n2"))
    w.add(pod("hog3", cpu="3", node="n3"))
    big = w.add(pod("g-0", cpu="3", pod_group="g"))
    w.add(pod("g-1", cpu="2", pod_group="g"))
    gang = key(big)
    verdict = w.ledger.admit(gang, GangPolicy(2))
    assert verdict.message.startswith("waiting for capacity for gang default/g: 1/2 remaining members fit")
    w.mirror.delete_pod(big.uid)  # replaced by a smaller member: no node changed, the members did
    w.add(pod("g-2", cpu="1", pod_group="g"))
    assert w.ledger.admit(gang, GangPolicy(2)) == PASS
    assert w.mirror.reservation(gang) == {"n1": {"cpu": 1000, "memory": 2**30, "pods": 1},
                                          "n4": {"cpu": 2000, "memory": 2**30, "pods": 1}}


def test_a_failed_plan_is_planned_again_after_any_capacity_change(w: World, plans: list[int]) -> None:
    """The memo is keyed by the mirror's generation: a change that does not help still re-plans (and
    still waits), it is never trusted past a change."""
    gang, _, verdict = waiting_gang(w)
    planned = len(plans)
    w.add(pod("small", cpu="100m", node="n2"))
    again = w.ledger.admit(gang, POLICY)
    assert again == verdict and again is not verdict  # the same answer, planned again
    assert len(plans) == planned + 1
    assert w.ledger.admit(gang, POLICY) == again and len(plans) == planned + 1


def test_a_filter_sweep_walks_only_the_gangs_with_work_and_still_times_them_out(w: World) -> None:
    """A filter's frequent sweep walks the gangs that are not settled (admitted, holding, waiting their
    turn, backing off), not every gang ever completed; the tick's full sweep walks them all."""
    policy = GangPolicy(2)
    for name in ("done-1", "done-2", "done-3"):
        members = w.gang(name, 2, min_count=2, cpu="100m")
        assert w.ledger.admit(key(members[0]), policy) == PASS
        w.ledger.on_bind(members[0], "n1", policy)
        release = w.ledger.on_bind(members[1], "n1", policy)
        w.ledger.released(key(members[0]), [(h, "") for h in release.holds])
    assert w.ledger.view.counters()["completed"] == 3
    late = w.gang("late", 2, min_count=2, cpu="100m")
    assert w.ledger.admit(key(late[0]), policy) == PASS
    w.ledger.sweep(0.05)
    assert [r.key for r in w.ledger.registry.busy()] == [key(late[0])]  # the completed gangs left
    w.clock.advance(31)
    w.ledger.sweep(0.05)  # the filter's sweep times the admitted gang out ...
    assert w.ledger.view.counters()["timeouts"] == 1
    assert [r.key for r in w.ledger.registry.busy()] == [key(late[0])]  # ... and follows its back-off
    w.clock.advance(11)
    w.ledger.sweep(0.05)
    state = w.ledger.record(key(late[0]))
    assert state is not None and state.woken_after_backoff


@pytest.mark.parametrize("lost", ["busy", "schedule"])
def test_the_full_sweep_finds_a_gang_with_work_that_no_step_marked(w: World, lost: str) -> None:
    """The safety net: a gang given work behind the ledger's back is found by the tick's full sweep, which
    walks every gang, finds the busy ones and makes the schedule anew. Not marked busy, its deadline is
    still scheduled (a filter's sweep times it out); its deadline not scheduled, it waits for the tick."""
    a = w.gang("a", 2, min_count=2, cpu="100m")
    assert w.ledger.admit(key(a[0]), GangPolicy(2)) == PASS
    state = w.ledger.record(key(a[0]))
    assert state is not None
    if lost == "busy":  # as if admission had not marked it
        w.ledger.registry._busy.clear()
    else:  # as if its deadline had been set without scheduling it
        w.ledger.registry.reschedule([])
    w.clock.advance(31)
    w.ledger.sweep(0.05)
    assert w.ledger.view.counters()["timeouts"] == (1 if lost == "busy" else 0)
    w.ledger.sweep()
    assert w.ledger.view.counters()["timeouts"] == 1
    assert [r.key for r in w.ledger.registry.busy()] == [key(a[0])]
    assert w.ledger.registry.next_due == state.backoff_until  # the back-off's end is scheduled


def test_a_gang_walked_for_one_due_is_scheduled_for_its_next(w: World) -> None:
    """The full sweep schedules each gang's earliest due only; a filter's sweep that walks a gang for it
    schedules the gang's next one (here: the held bind answered in time, then the attempt's deadline)."""
    a = w.gang("a", 2, min_count=2, cpu="100m")
    assert w.ledger.admit(key(a[0]), GangPolicy(2)) == PASS
    w.clock.advance(1)
    w.ledger.on_bind(a[0], "n1", GangPolicy(2), arrival=w.clock.now - 20)  # answered by 10 s; deadline 31 s
    w.ledger.sweep()  # the schedule made anew: the hold's answer at 10 s, not the deadline
    w.clock.advance(9.1)
    w.ledger.sweep(0.05)
    assert w.ledger.view.held_count() == 0 and w.ledger.view.counters()["timeouts"] == 0  # answered: a retry
    w.clock.advance(21)
    w.ledger.sweep(0.05)
    assert w.ledger.view.counters()["timeouts"] == 1


def test_a_step_that_raises_leaves_the_gangs_it_took_on_the_schedule(w: World) -> None:
    """A filter's sweep takes the due gangs off the schedule: if one gang's step raises, those not yet
    walked (and that one) go back on, due now, and the next filter's sweep walks them."""
    gangs = [w.gang(f"g{i}", 2, min_count=2, cpu="10m") for i in range(3)]
    for members in gangs:
        assert w.ledger.admit(key(members[0]), GangPolicy(2)) == PASS  # deadlines in 30 s
    wake = w.ledger.expiry.wake_after_backoff
    calls = 0

    def failing_once(record: GangRecord, now: float) -> list[Effect]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("a step failed")
        return wake(record, now)

    w.ledger.expiry.wake_after_backoff = failing_once  # type: ignore[method-assign]
    w.clock.advance(30.1)
    with pytest.raises(RuntimeError):
        w.ledger.sweep(0.05)
    assert w.ledger.view.counters()["timeouts"] == 2  # the first walked, the second raised after timing out
    assert_scheduled(w.ledger)
    w.clock.advance(0.1)
    w.ledger.sweep(0.05)
    assert w.ledger.view.counters()["timeouts"] == 3


def test_the_schedule_stays_within_twice_the_gangs_without_a_full_sweep(w: World) -> None:
    """Every held bind and new member pushes an entry; without the tick's full sweep the schedule is
    compacted to each gang's earliest entry once it outgrows twice the gangs (plus a slack)."""
    from extender.gangs.registry import DUES_SLACK

    a = w.gang("a", 2, min_count=2, cpu="10m")
    assert w.ledger.admit(key(a[0]), GangPolicy(2)) == PASS
    record = w.ledger.record(key(a[0]))
    assert record is not None
    for i in range(3 * DUES_SLACK):
        w.ledger.registry.due_by(w.clock.now + 100 + i, record)
    assert len(w.ledger.registry._dues) <= 2 * len(w.ledger.registry.all()) + DUES_SLACK
    w.clock.advance(30.1)
    w.ledger.sweep(0.05)  # the admission's deadline survived the compaction
    assert w.ledger.view.counters()["timeouts"] == 1


def test_a_filter_sweep_walks_only_the_gangs_something_fell_due_for(w: World) -> None:
    """Many gangs admitted: a filter's sweep walks the one whose deadline passed, not the others, and a
    deadline moved later (its old entry stale) times nothing out early."""
    walked: list[GangKey] = []
    due = w.ledger.expiry.due

    def counting(record: GangRecord) -> float | None:
        walked.append(record.key)
        return due(record)

    w.ledger.expiry.due = counting  # type: ignore[method-assign]
    gangs = [w.gang(f"g{i}", 2, min_count=2, cpu="10m") for i in range(20)]
    assert w.ledger.admit(key(gangs[0][0]), GangPolicy(2)) == PASS  # deadline in 30 s
    w.clock.advance(10)
    for members in gangs[1:]:
        assert w.ledger.admit(key(members[0]), GangPolicy(2)) == PASS  # deadlines in 40 s
    w.clock.advance(5)
    w.ledger.on_bind(gangs[1][0], "n1", GangPolicy(2))  # g1's deadline moves to 45 s; its 40 s entry is stale
    walked.clear()
    w.clock.advance(15.1)  # 30.1 s: g0's deadline passed
    w.ledger.sweep(0.05)
    assert set(walked) == {key(gangs[0][0])} and w.ledger.view.counters()["timeouts"] == 1
    walked.clear()
    w.clock.advance(10)  # 40.1 s: every other admission's deadline passed, but not g1's
    w.ledger.sweep(0.05)
    # g1 too (its stale entry, walked to no effect), and g0 (its 10 s back-off ended)
    assert set(walked) == {key(m[0]) for m in gangs}
    assert w.ledger.view.counters()["timeouts"] == 1 + 18
    assert w.ledger.record(key(gangs[1][0])).admitted  # type: ignore[union-attr]
    w.clock.advance(5)  # 45.1 s
    w.ledger.sweep(0.05)
    assert w.ledger.view.counters()["timeouts"] == 1 + 18 + 1


def test_a_gang_that_can_never_fit_is_told_so_even_when_held_binds_shrink_what_it_plans(w: World) -> None:
    """Found in review: a plan that fits proves the gang fits only when it is a plan for all of minCount.
    Four binds are held for members whose filters passed before their gang timed out; the Job is then
    re-created within the hold time with 3-cpu members: its plan is for one member (minCount 5 less 4
    held), which fits, yet at most four such members can ever run at once on 4 nodes of 4 cpu."""
    first = w.gang("a", 5, min_count=5, cpu="500m")
    policy = GangPolicy(5)
    assert w.ledger.admit(key(first[0]), policy).passes
    slots = [n for n, _ in slots_of(w.ledger, key(first[0]))]
    w.clock.advance(31)
    w.ledger.sweep()
    assert w.ledger.view.counters()["timeouts"] == 1
    for member, at in zip(first[:4], slots[:4], strict=True):
        assert w.ledger.on_bind(member, at, policy).action is BindAction.WAIT
    for member in first:
        w.mirror.delete_pod(member.uid)
    again = [w.mirror.upsert_pod(pod(f"a2-{i}", cpu="3", pod_group="a")) for i in range(5)]
    w.clock.advance(11)  # past the back-off, within the holds' 29 s
    verdict = w.ledger.admit(key(again[0]), policy)
    assert verdict.code is Code.WAIT_UNRESOLVABLE and "can never fit" in verdict.message, verdict


def test_a_filter_sweep_walks_only_when_something_falls_due(w: World) -> None:
    """A filter's sweep skips its walk until the earliest deadline, held bind's answer or back-off end
    it has seen: gangs admitted, held or backing off after the last walk bring that time forward."""
    walked: list[float] = []

    def sweep(advance: float) -> None:
        w.clock.advance(advance)
        before = w.ledger.expiry._swept_at
        w.ledger.sweep(0.05)
        if w.ledger.expiry._swept_at != before:  # stamped only when it walks
            walked.append(w.clock.now)

    sweep(0)
    assert len(walked) == 0  # nothing scheduled: no walk
    a = w.gang("a", 2, min_count=2, cpu="100m")
    assert w.ledger.admit(key(a[0]), GangPolicy(2)) == PASS  # deadline in 30 s
    sweep(1)
    sweep(1)
    sweep(27.9)
    assert len(walked) == 0 and w.ledger.view.counters()["timeouts"] == 0  # the admission's deadline is not due yet
    sweep(0.2)
    assert len(walked) == 1 and w.ledger.view.counters()["timeouts"] == 1  # due: walked and timed out
    state = w.ledger.record(key(a[0]))
    assert state is not None and not state.woken_after_backoff
    sweep(9.9)
    assert len(walked) == 1
    sweep(0.2)
    assert len(walked) == 2 and state.woken_after_backoff  # the back-off's end was due
    assert w.ledger.admit(key(a[0]), GangPolicy(2)) == PASS  # admitted again: a new deadline ...
    w.ledger.on_bind(a[0], "n1", GangPolicy(2), arrival=w.clock.now - 28.5)  # ... and a bind held 0.5 s more
    sweep(0.4)
    assert len(walked) == 2
    sweep(0.2)
    assert len(walked) == 3  # the held bind's answer was due first


# ------------------------------------------------------------------ members gone while held
def test_a_held_member_that_is_deleted_is_answered_at_once_and_no_longer_counts(w: World) -> None:
    """Issue 26, finding 1: the quorum counted a deleted member's hold, and the release bound the others
    while its Binding failed. Gang of 3: m0 and m1 held, m0 deleted, m2 binds: m2 waits."""
    a = w.gang("a", 3, min_count=3, cpu="1")
    policy = GangPolicy(3)
    assert w.ledger.admit(key(a[0]), policy) == PASS
    first = w.ledger.on_bind(a[0], "n1", policy).hold
    assert first is not None and w.ledger.on_bind(a[1], "n2", policy).action is BindAction.WAIT
    w.mirror.delete_pod(a[0].uid)
    assert first.answered and first.result == (
        f"pod default/a-0 (uid {a[0].uid}) was deleted, re-created or finished while its bind was held at its "
        "gang's barrier: it no longer counts toward the quorum")
    assert w.ledger.view.held_count() == 1
    assert len(slots_of(w.ledger, key(a[0]))) == 2, "its place goes back to the reservation for a replacement"
    assert w.ledger.on_bind(a[2], "n3", policy).action is BindAction.WAIT  # 2 of 3: no release


def test_a_held_member_re_created_under_its_name_counts_once_with_its_new_uid(w: World) -> None:
    """A Job, JobSet or StatefulSet controller replaces a pod under the same name: the old pod's hold is
    answered, the new one holds on its own, and the quorum completes only when the third member arrives."""
    a = w.gang("a", 3, min_count=3, cpu="1")
    policy = GangPolicy(3)
    assert w.ledger.admit(key(a[0]), policy) == PASS
    old = w.ledger.on_bind(a[0], "n1", policy).hold
    assert old is not None and w.ledger.on_bind(a[1], "n2", policy).action is BindAction.WAIT
    again = w.add(pod("a-0", uid="a-0-again", cpu="1", pod_group="a"))  # deleted and re-created, a new uid
    assert old.answered and "no longer counts" in (old.result or "")
    assert w.ledger.on_bind(again, "n1", policy).action is BindAction.WAIT  # {m1, new m0}: 2 of 3
    last = w.ledger.on_bind(a[2], "n3", policy)
    assert last.action is BindAction.RELEASE
    assert sorted(h.pod.uid for h in last.holds) == sorted([a[1].uid, "a-0-again", a[2].uid])


def test_a_held_member_that_finishes_or_is_being_deleted_no_longer_counts(w: World) -> None:
    a = w.gang("a", 2, min_count=2, cpu="1")
    policy = GangPolicy(2)
    held = w.ledger.on_bind(a[0], "n1", policy).hold
    assert held is not None
    w.add(pod("a-0", uid=a[0].uid, cpu="1", pod_group="a", phase="Failed"))
    assert held.answered and w.ledger.on_bind(a[1], "n2", policy).action is BindAction.WAIT

"""Engine use cases end to end over a real mirror, cache and ledger, with a fake binder and clock.

Covers the gang semantics of docs/gang-semantics.md: quorum gate, admission and deadlock avoidance, steering,
the bind barrier, timeout and back-off, fail fast, bind errors and replica keys.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from extender import native
from extender.engine.binding import BindingSlots
from extender.engine.requests import FilterResult
from extender.errors import BindError
from extender.model.gang import GangKey, GroupKind, GroupRef
from tests.builders import (
    FakeBinder,
    Harness,
    assert_demand_counted,
    bind_args,
    coscheduling_podgroup,
    filter_args,
    make_engine,
    node,
    pod,
    workload,
)

NODES4 = ["n1", "n2", "n3", "n4"]


@pytest.fixture
def h(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """The harness; ``@pytest.mark.parametrize("h", [{...}], indirect=True)`` passes ``make_engine`` more settings."""
    settings = {"timeout_seconds": 30.0, "backoff_seconds": 10.0, **getattr(request, "param", {})}
    if isinstance(settings.get("binder"), type):  # a binder class: a fresh binder for each run of the test
        settings["binder"] = settings["binder"]()
    harness = make_engine(**settings)
    yield harness
    assert_demand_counted(harness.ledger)  # after every test of this file
    harness.close()


def nodes(harness: Harness, names: Sequence[str], cpu: str = "4") -> None:
    harness.add(*(node(name, cpu=cpu) for name in names))


def gang_pods(name: str, count: int, cpu: str = "3", start: int = 0) -> list[dict[str, Any]]:
    return [pod(f"{name}-{i}", cpu=cpu, pod_group=name) for i in range(start, start + count)]


def unresolvable(names: Sequence[str], message: str) -> FilterResult:
    return FilterResult([], {}, dict.fromkeys(names, message))


def resolvable(names: Sequence[str], message: str) -> FilterResult:
    return FilterResult([], dict.fromkeys(names, message), {})


def wait_until(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


class Binds:
    """Runs engine.bind calls in threads (they may be held at the barrier) and collects the answers."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.results: dict[str, str] = {}
        self.threads: list[threading.Thread] = []

    def start(self, raw_pod: dict[str, Any], node_name: str) -> threading.Thread:
        name = raw_pod["metadata"]["name"]

        def run() -> None:
            self.results[name] = self.harness.engine.bind(bind_args(raw_pod, node_name))

        thread = threading.Thread(target=run, name=f"bind-{name}")
        thread.start()
        self.threads.append(thread)
        return thread

    def join(self, timeout: float = 5.0) -> dict[str, str]:
        for thread in self.threads:
            thread.join(timeout)
            assert not thread.is_alive(), f"{thread.name} still blocked"
        return self.results


@pytest.fixture
def binds(h: Harness) -> Iterator[Binds]:
    runner = Binds(h)
    yield runner
    # Never leave a held bind behind: time the gang out, open the binder, join.
    h.binder.gate.set()
    h.clock.advance(10_000)
    h.ledger.sweep()
    runner.join()


# ----------------------------------------------------------------------------------- quorum gate
def test_quorum_waits_for_the_podgroup_object(h: Harness) -> None:
    nodes(h, NODES4)
    members = gang_pods("train", 4)
    h.add(*members)
    assert h.engine.filter(filter_args(members[0], NODES4)) == unresolvable(
        NODES4, "waiting for gang default/train: PodGroup default/train does not exist")


def test_quorum_waits_for_the_workload_pod_group(h: Harness) -> None:
    nodes(h, NODES4)
    member = pod("w-0", workload="job", pod_group="workers")
    h.add(member, workload("job", {"launcher": 1}))  # the Workload exists but not this pod group
    assert h.engine.filter(filter_args(member, NODES4)) == unresolvable(
        NODES4, "waiting for gang default/job/workers: Workload default/job pod group 'workers' does not exist")


def test_quorum_counts_member_pods_until_min_count_exist(h: Harness) -> None:
    nodes(h, NODES4)
    members = gang_pods("train", 4)
    h.add(coscheduling_podgroup("train", 4), *members[:3])
    for member in members[:3]:
        assert h.engine.filter(filter_args(member, NODES4)) == unresolvable(
            NODES4, "waiting for gang default/train: 3/4 pods exist")
    h.add(members[3])
    result = h.engine.filter(filter_args(members[0], NODES4))
    assert result.feasible == NODES4
    assert result.failed == {} and result.failed_unresolvable == {}


def test_the_first_member_of_a_gang_being_created_waits_for_the_rest_instead_of_an_attempt(h: Harness) -> None:
    """kube-scheduler pops a gang's first pod as soon as it exists; its siblings follow within milliseconds.
    The first filter waits for them (outside the lock, so the pod watch can deliver them) and passes:
    no unschedulable attempt, no back-off."""
    nodes(h, NODES4)
    members = gang_pods("train", 4)
    h.add(coscheduling_podgroup("train", 4), members[0])
    h.engine.filtering.quorum_wait_seconds = 60.0  # the siblings come when the filter waits, not on a clock

    def create_the_rest() -> None:
        wait_until(lambda: bool(h.mirror._member_waiters), timeout=60.0)
        h.add(*members[1:])

    adder = threading.Thread(target=create_the_rest)
    adder.start()
    started = time.monotonic()
    result = h.engine.filter(filter_args(members[0], NODES4))
    waited = time.monotonic() - started
    adder.join()
    assert result.feasible == NODES4 and result.failed == {} and result.failed_unresolvable == {}
    # woken by the members' arrival, not by the deadline: the guarantee is the wake-up (60 s against a
    # margin of 30 s for a loaded machine to run the adder thread)
    assert waited < 30.0
    assert h.engine.quorum_waits == {"met": 1, "timed_out": 0, "over_budget": 0}
    assert h.engine.filter(filter_args(members[1], NODES4)).feasible  # the others pass without a wait
    assert h.engine.quorum_waits == {"met": 1, "timed_out": 0, "over_budget": 0}


def test_a_gang_that_stays_short_waits_once_and_is_turned_away_as_before(h: Harness) -> None:
    nodes(h, NODES4)
    members = gang_pods("train", 4)
    h.add(coscheduling_podgroup("train", 4), *members[:3])
    h.engine.filtering.quorum_wait_seconds = 0.01
    for member in members[:3]:
        assert h.engine.filter(filter_args(member, NODES4)) == unresolvable(
            NODES4, "waiting for gang default/train: 3/4 pods exist")
    assert h.engine.quorum_waits == {"met": 0, "timed_out": 1, "over_budget": 0}  # only the first filter waited
    assert sorted(h.ledger.waitlist.take_rejected(next(iter(h.mirror.gangs())))) == sorted(
        p["metadata"]["uid"] for p in members[:3])  # each turned-away member is woken when the quorum comes


def test_a_member_deleted_while_it_waits_is_not_placed(h: Harness) -> None:
    """The gate is asked again with the pod as the mirror has it after the wait: one deleted meanwhile is
    answered as a pod not seen, and admits nothing."""
    nodes(h, NODES4)
    members = gang_pods("train", 3)
    h.add(coscheduling_podgroup("train", 2), members[0])
    h.engine.filtering.quorum_wait_seconds = 60.0

    def replace_the_waiter() -> None:
        wait_until(lambda: bool(h.mirror._member_waiters), timeout=60.0)
        h.mirror.delete_pod(members[0]["metadata"]["uid"])
        h.add(*members[1:])  # the quorum comes without the pod that waits

    changer = threading.Thread(target=replace_the_waiter)
    changer.start()
    result = h.engine.filter(filter_args(members[0], NODES4))
    changer.join()
    assert not result.feasible
    assert all("is not known to gang-extender yet" in reason for reason in result.failed.values()), result
    assert all(record.reservation is None for record in h.ledger.registry.all()), "nothing admitted"


def test_quorum_waits_stay_within_their_budget_however_many_gangs_never_complete(h: Harness) -> None:
    """Any pod can make a gang that never completes; their waits stall kube-scheduler's cycle, so they get
    a budget that drains at a quarter of the time (1 s of charge at most), and beyond it a member is turned
    away at once. The harness's clock stands still unless moved, so only the waits charge the budget."""
    nodes(h, NODES4)
    h.engine.filtering.quorum_wait_seconds = 0.25  # 1 s of budget: four waits, then none until it drains
    stuck = [pod(f"stuck-{i}", cpu="1", pod_group=f"stuck-{i}") for i in range(7)]
    h.add(*(coscheduling_podgroup(f"stuck-{i}", 4) for i in range(7)), *stuck)
    for member in stuck[:5]:
        assert not h.engine.filter(filter_args(member, NODES4)).feasible
    assert h.engine.quorum_waits == {"met": 0, "timed_out": 4, "over_budget": 1}
    h.clock.advance(1.0)  # a quarter of 1 s drained: room for one more 0.25 s wait, not two
    for member in stuck[5:]:
        assert not h.engine.filter(filter_args(member, NODES4)).feasible
    assert h.engine.quorum_waits == {"met": 0, "timed_out": 5, "over_budget": 2}


def test_a_gang_without_its_group_does_not_wait(h: Harness) -> None:
    nodes(h, NODES4)
    members = gang_pods("train", 4)
    h.add(*members[:1])
    h.engine.filtering.quorum_wait_seconds = 60.0  # a wait would hang the test
    assert not h.engine.filter(filter_args(members[0], NODES4)).feasible
    assert h.engine.quorum_waits == {"met": 0, "timed_out": 0, "over_budget": 0}


def test_quorum_ignores_terminal_members(h: Harness) -> None:
    nodes(h, NODES4)
    members = gang_pods("train", 3)
    done = pod("train-done", cpu="3", pod_group="train", phase="Succeeded")
    h.add(coscheduling_podgroup("train", 4), *members, done)
    assert h.engine.filter(filter_args(members[0], NODES4)) == unresolvable(
        NODES4, "waiting for gang default/train: 3/4 pods exist")


def test_a_member_the_pod_watch_has_not_delivered_decides_nothing_and_is_woken_when_it_comes(h: Harness) -> None:
    """Issue 26, finding 6: filter believed the pod in the request, so invented pods admitted gangs,
    reserved nodes, filled barrier slots and wrote Events. The pod is the mirror's, by uid: one it has not
    seen is told to come back (a retryable verdict), with nothing admitted, reserved or written; when the
    watch delivers it, it is woken (kube-scheduler's informer is often a few milliseconds ahead)."""
    nodes(h, NODES4)
    members = gang_pods("train", 4)
    h.add(coscheduling_podgroup("train", 4), *members[:3])
    h.engine.sweep()  # the PodGroup appearing wakes its pods (by design: test_policy_changes)
    h.woken.clear()
    result = h.engine.filter(filter_args(members[3], NODES4))  # members[3] is not in the mirror
    uid = members[3]["metadata"]["uid"]
    assert result == resolvable(NODES4, f"pod uid {uid!r} is not known to gang-extender yet (its pod watch has not "
                                        "delivered it): nothing is decided for it until it is; kube-scheduler "
                                        "retries it")
    gang = h.mirror.pod("default", "train-0").gang
    assert gang is not None
    assert h.mirror.reservation(gang) == {} and h.events.events == [] and h.statuses == [] and h.woken == []
    h.add(members[3])
    assert h.woken == ["train-3"]
    assert h.engine.filter(filter_args(members[3], NODES4)).feasible == NODES4
    assert sorted(h.mirror.reservation(gang)) == NODES4


def test_invented_pods_admit_nothing_and_cannot_take_real_pods_places(h: Harness) -> None:
    """A caller posts filters for pods that do not exist (min-count 1, 4 cpu, names shared with real pods):
    no gang is admitted, nothing reserved, no Event, status or wake-up written, and a real gang is
    admitted as if they had never come."""
    nodes(h, NODES4)
    annotations = {"gang-extender.io/group": "fake", "gang-extender.io/min-count": "1"}
    for i in range(20):
        invented = pod(f"train-{i % 4}", uid=f"invented-{i}", cpu="4", annotations=annotations)
        assert not h.engine.filter(filter_args(invented, NODES4)).feasible
    assert h.ledger.view.known_gangs() == [] and h.events.events == [] and h.statuses == [] and h.woken == []
    members = gang_pods("train", 4, cpu="4")
    h.add(coscheduling_podgroup("train", 4), *members)
    h.engine.sweep()  # the PodGroup appearing wakes its pods (by design: test_policy_changes)
    h.woken.clear()
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible
    assert h.woken == [], "no wake-up patch for a real pod that shares an invented pod's name"


def test_basic_workload_pod_group_is_not_a_gang(h: Harness) -> None:
    nodes(h, NODES4)
    member = pod("svc-0", workload="app", pod_group="web")
    h.add(workload("app", {"web": None}), member)
    assert h.engine.filter(filter_args(member, NODES4)) == FilterResult(NODES4, {}, {})


def test_annotation_gang_uses_the_policy_on_its_pods(h: Harness) -> None:
    nodes(h, NODES4)
    annotations = {"gang-extender.io/group": "g", "gang-extender.io/min-count": "2"}
    first = pod("g-0", annotations=annotations)
    h.add(first)
    # The request pod counts itself: one pod in the mirror is 1/2, a second one passes the gate.
    assert h.engine.filter(filter_args(first, NODES4)) == unresolvable(
        NODES4, "waiting for gang default/g: 1/2 pods exist")
    h.add(pod("g-1", annotations=annotations))
    # Admitted: both 1-cpu members are reserved on n1 (gangs are packed), so only n1 is returned; the
    # nodes left out for steering carry no reason (kube-scheduler reads reasons only if none is feasible).
    assert h.engine.filter(filter_args(first, NODES4)) == FilterResult(["n1"], {}, {})


def test_invalid_gang_link_is_unresolvable(h: Harness) -> None:
    nodes(h, NODES4)
    broken = pod("bad", annotations={"gang-extender.io/group": "g"})
    assert h.engine.filter(filter_args(broken, NODES4)) == unresolvable(
        NODES4, "invalid gang: pod has gang-extender.io/group but no gang-extender.io/min-count annotation")


# ------------------------------------------------------------------- admission and deadlock avoidance
def test_admission_reserves_capacity_and_blocks_a_competing_gang(h: Harness) -> None:
    nodes(h, NODES4)
    a, b = gang_pods("a", 4), gang_pods("b", 4)
    h.add(coscheduling_podgroup("a", 4), coscheduling_podgroup("b", 4), *a, *b)

    assert h.engine.filter(filter_args(a[0], NODES4)) == FilterResult(NODES4, {}, {})
    gang_a = h.mirror.pod("default", "a-0").gang
    assert gang_a is not None
    slot = {"cpu": 3000, "memory": 2**30, "pods": 1}
    assert h.mirror.reservation(gang_a) == dict.fromkeys(NODES4, slot)
    assert h.ledger.view.admitted_count() == 1
    assert h.events.of("GangAdmitted") == [
        (("a-3", "a-2", "a-1", "a-0"), "Normal", "GangAdmitted",
         "gang default/a admitted: capacity reserved for 4 more member(s)")]

    # B cannot be admitted while A holds its reservation: it waits (resolvable), it does not grab half.
    message = ("waiting for capacity for gang default/b: 0/4 remaining members fit; "
               "no node has cpu=3 free (largest free falls short by cpu=2)")
    for member in b:
        assert h.engine.filter(filter_args(member, NODES4)) == resolvable(NODES4, message)
    gang_b = h.mirror.pod("default", "b-0").gang
    assert gang_b is not None
    assert h.mirror.reservation(gang_b) == {}
    assert h.ledger.view.admitted_count() == 1
    # A's other members pass (the gang is admitted once, atomically).
    for member in a[1:]:
        assert h.engine.filter(filter_args(member, NODES4)).feasible == NODES4


def test_non_gang_pods_cannot_use_reserved_capacity(h: Harness) -> None:
    nodes(h, NODES4)
    a = gang_pods("a", 4)
    h.add(coscheduling_podgroup("a", 4), *a)
    assert h.engine.filter(filter_args(a[0], NODES4)).feasible == NODES4

    small = pod("web", cpu="1")
    assert h.engine.filter(filter_args(small, NODES4)) == FilterResult(NODES4, {}, {})
    big = pod("batch", cpu="2")
    assert h.engine.filter(filter_args(big, NODES4)) == resolvable(
        NODES4, "Insufficient cpu: capacity is reserved for other gangs")
    # A pod that would not fit even without the reservation gets the plain message.
    huge = pod("huge", cpu="5")
    assert h.engine.filter(filter_args(huge, NODES4)) == resolvable(NODES4, "Insufficient cpu")


def test_a_draining_reservation_holds_off_plain_pods_up_to_its_gangs_priority(h: Harness) -> None:
    """A drain (the head gang's turn) keeps freed capacity from pods of its priority or lower, in filter
    and at bind; a pod of higher priority goes first. Same spec, other priority: not one cached result."""
    nodes(h, NODES4)
    drainer = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "drainer"))
    h.mirror.set_reservation(drainer, [(n, {"cpu": 3000}) for n in NODES4], holds_off=100)
    same, higher = pod("same", cpu="2"), pod("higher", cpu="2")
    same["spec"]["priority"], higher["spec"]["priority"] = 100, 101
    h.add(same, higher)
    assert h.engine.filter(filter_args(same, NODES4)) == resolvable(
        NODES4, "Insufficient cpu: capacity is reserved for other gangs")
    assert h.engine.filter(filter_args(higher, NODES4)) == FilterResult(NODES4, {}, {})
    assert "no longer has room" in h.engine.bind(bind_args(same, "n1"))
    assert h.engine.bind(bind_args(higher, "n1")) == ""


def test_admitted_members_are_steered_to_reserved_nodes(h: Harness) -> None:
    names = [*NODES4, "n5"]
    nodes(h, names)
    a = gang_pods("a", 4)
    h.add(coscheduling_podgroup("a", 4), *a)
    expected = FilterResult(NODES4, {}, {})  # n5 has room but no reservation: left out, no reason
    assert h.engine.filter(filter_args(a[0], names)) == expected
    assert h.engine.filter(filter_args(a[1], names)) == expected
    # Steering evaluates the reserved nodes only: no signature entry is made for all the candidates.
    assert (h.cache.hits, h.cache.misses, h.engine.steered) == (0, 0, 2)
    # Without any reserved node among the candidates, any node with room passes.
    assert h.engine.filter(filter_args(a[2], ["n5"])) == FilterResult(["n5"], {}, {})
    assert h.engine.prioritize(filter_args(a[0], names)) == [
        ("n1", 10), ("n2", 10), ("n3", 10), ("n4", 10), ("n5", 0)]
    assert h.engine.prioritize(filter_args(pod("web"), names)) == [(n, 0) for n in names]
    # The unreserved node can take one more 3-cpu member of another gang, not four.
    b = gang_pods("b", 4)
    h.add(coscheduling_podgroup("b", 4), *b)
    assert h.engine.filter(filter_args(b[0], names)) == resolvable(names, (
        "waiting for capacity for gang default/b: 1/4 remaining members fit; "
        "no node has cpu=3 free (largest free falls short by cpu=2)"))


def test_waiting_gang_is_admitted_once_the_competing_gang_finishes(h: Harness, binds: Binds) -> None:
    nodes(h, NODES4)
    a, b = gang_pods("a", 4), gang_pods("b", 4)
    h.add(coscheduling_podgroup("a", 4), coscheduling_podgroup("b", 4), *a, *b)
    assert h.engine.filter(filter_args(a[0], NODES4)).feasible == NODES4
    assert h.engine.filter(filter_args(b[0], NODES4)).feasible == []
    for member, target in zip(a, NODES4, strict=True):
        binds.start(member, target)
    assert binds.join() == dict.fromkeys((p["metadata"]["name"] for p in a), "")
    gang_a = h.mirror.pod("default", "a-0").gang
    assert gang_a is not None and h.mirror.reservation(gang_a) == {}
    # A's members now use the capacity instead of its reservation: B still waits.
    assert h.engine.filter(filter_args(b[0], NODES4)).failed["n1"].startswith(
        "waiting for capacity for gang default/b: 0/4 remaining members fit")
    for member, target in zip(a, NODES4, strict=True):  # the watch reports the binds, then completion
        h.add({**member, "spec": {**member["spec"], "nodeName": target}})
    assert h.engine.filter(filter_args(b[0], NODES4)).feasible == []
    for member, target in zip(a, NODES4, strict=True):
        h.add({**member, "spec": {**member["spec"], "nodeName": target}, "status": {"phase": "Succeeded"}})
    assert all(h.mirror.used(n) == {} for n in NODES4)
    assert h.engine.filter(filter_args(b[0], NODES4)).feasible == NODES4
    assert h.ledger.view.admitted_count() == 1


# ------------------------------------------------------------------------------------------ barrier
def test_barrier_holds_binds_until_quorum(h: Harness, binds: Binds) -> None:
    nodes(h, NODES4)
    a = gang_pods("a", 4)
    h.add(coscheduling_podgroup("a", 4), *a)
    assert h.engine.filter(filter_args(a[0], NODES4)).feasible == NODES4

    for count, (member, target) in enumerate(zip(a[:3], NODES4, strict=False), start=1):
        binds.start(member, target)
        wait_until(lambda count=count: h.ledger.view.held_count() == count)
        assert h.binder.calls == [], "no member may be bound before quorum"
    state = h.ledger.record(h.mirror.pod("default", "a-0").gang)  # type: ignore[arg-type]
    assert state is not None and state.last_message == "holding 3 bind(s); 3/4 members placed"
    assert binds.results == {}
    assert sorted(h.mirror.placement(p["metadata"]["uid"]) for p in a[:3]) == ["n1", "n2", "n3"]

    binds.start(a[3], "n4")
    assert binds.join() == {"a-0": "", "a-1": "", "a-2": "", "a-3": ""}
    assert sorted(h.binder.calls) == [
        ("default", f"a-{i}", a[i]["metadata"]["uid"], f"n{i + 1}") for i in range(4)]
    assert h.ledger.view.held_count() == 0
    gang = h.mirror.pod("default", "a-0").gang
    assert gang is not None and h.mirror.reservation(gang) == {}
    assert h.ledger.view.counters()["completed"] == 1
    assert [e[2:] for e in h.events.of("GangBound")] == [
        ("GangBound", "gang default/a: 4 member(s) bound together at quorum")]


def test_members_beyond_min_count_bind_at_once(h: Harness, binds: Binds) -> None:
    nodes(h, [*NODES4, "n5", "n6"])
    a = gang_pods("a", 6)
    h.add(coscheduling_podgroup("a", 4), *a)
    for member, target in zip(a[:4], NODES4, strict=True):
        binds.start(member, target)
    assert set(binds.join().values()) == {""}
    assert len(h.binder.calls) == 4
    # The 5th and 6th members are not held: they bind in the calling thread.
    assert h.engine.bind(bind_args(a[4], "n5")) == ""
    assert h.binder.calls[-1] == ("default", "a-4", a[4]["metadata"]["uid"], "n5")
    assert h.engine.filter(filter_args(a[5], ["n6"])).feasible == ["n6"]
    assert h.engine.bind(bind_args(a[5], "n6")) == ""
    assert len(h.binder.calls) == 6
    assert h.ledger.view.held_count() == 0


def test_member_arriving_while_the_quorum_is_being_bound_is_not_held(h: Harness, binds: Binds) -> None:
    nodes(h, ["n1", "n2", "n3"])
    a = gang_pods("a", 3, cpu="1")
    h.add(coscheduling_podgroup("a", 2), *a)
    h.binder.gate.clear()  # the API server is slow: the released quorum is still being bound
    binds.start(a[0], "n1")
    binds.start(a[1], "n2")
    assert h.binder.entered.acquire(timeout=2)
    third = binds.start(a[2], "n3")
    assert h.binder.entered.acquire(timeout=2), "the member past minCount must go straight to the binder"
    h.binder.gate.set()
    third.join(2)
    assert binds.join() == {"a-0": "", "a-1": "", "a-2": ""}
    assert h.ledger.view.counters()["timeouts"] == 0


@dataclass
class BinderOnThreads(FakeBinder):
    """FakeBinder that notes the thread making each Binding, holds the Bindings of chosen pods until told,
    and counts the most Bindings in flight at once."""

    held: dict[str, threading.Event] = field(default_factory=dict)  # pod name -> set: its Binding may finish
    made_on: dict[str, str] = field(default_factory=dict)  # pod name -> the thread that made its Binding
    returned: list[str] = field(default_factory=list)  # pods whose Binding returned (made or refused), in order
    in_flight: int = 0
    most_in_flight: int = 0

    def calls_made(self) -> list[str]:
        """The pods whose Binding has returned (made or refused)."""
        with self.lock:
            return list(self.returned)

    def bind(self, namespace: str, name: str, uid: str, node: str, timeout: float = 10.0) -> None:
        with self.lock:
            self.made_on[name] = threading.current_thread().name
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if name in self.held and not self.held[name].wait(10):
                raise BindError("the test never let this Binding finish")
            super().bind(namespace, name, uid, node, timeout)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.returned.append(name)


@pytest.mark.parametrize("h", [{"binder": BinderOnThreads}], indirect=True)
def test_each_member_of_a_released_quorum_is_bound_by_the_thread_holding_its_bind(h: Harness, binds: Binds) -> None:
    """As a bind that is not held is: no hand-off to another thread and back."""
    nodes(h, NODES4)
    a = gang_pods("a", 4)
    h.add(coscheduling_podgroup("a", 4), *a)
    for member, target in zip(a, NODES4, strict=True):
        binds.start(member, target)
    assert binds.join() == {f"a-{i}": "" for i in range(4)}
    assert isinstance(h.binder, BinderOnThreads)
    assert h.binder.made_on == {f"a-{i}": f"bind-a-{i}" for i in range(4)}


@pytest.mark.parametrize("h", [{"binder": BinderOnThreads}], indirect=True)
def test_a_member_is_answered_at_its_own_binding_and_the_last_reports_the_release(h: Harness, binds: Binds) -> None:
    """A member is answered as soon as its Binding is made; the gang is complete (counted, told, its holds
    gone) once the last Binding of its release is made, by that one."""
    binder = h.binder
    assert isinstance(binder, BinderOnThreads)
    binder.held["a-2"] = threading.Event()
    nodes(h, NODES4)
    a = gang_pods("a", 3)
    h.add(coscheduling_podgroup("a", 3), *a)
    for member, target in zip(a, NODES4, strict=False):
        binds.start(member, target)
    wait_until(lambda: binds.results.get("a-0") == "" and binds.results.get("a-1") == "")
    assert "a-2" not in binds.results and binder.in_flight == 1, "a-2's Binding is still being made"
    assert h.ledger.view.counters()["completed"] == 0 and h.ledger.view.held_count() == 3
    assert h.events.of("GangBound") == []
    binder.held["a-2"].set()
    assert binds.join() == {"a-0": "", "a-1": "", "a-2": ""}
    assert h.ledger.view.counters()["completed"] == 1 and h.ledger.view.held_count() == 0
    assert [e[3] for e in h.events.of("GangBound")] == ["gang default/a: 3 member(s) bound together at quorum"]


def a_gang_whose_third_binding_fails(h: Harness) -> tuple[BinderOnThreads, list[dict[str, Any]]]:
    """Gang ``a`` of 3 on NODES4: a-0's Binding held until the test lets it finish, a-2's refused."""
    binder = h.binder
    assert isinstance(binder, BinderOnThreads)
    binder.held["a-0"] = threading.Event()
    binder.fail["a-2"] = "the API server said no"
    nodes(h, NODES4)
    a = gang_pods("a", 3)
    h.add(coscheduling_podgroup("a", 3), *a)
    return binder, a


@pytest.mark.parametrize("h", [{"binder": BinderOnThreads}], indirect=True)
def test_a_member_whose_binding_failed_is_answered_once_its_release_is_settled(h: Harness, binds: Binds) -> None:
    """Not while a sibling is still being bound: by then its place is kept reserved and its assumption
    dropped, so kube-scheduler's retry of it finds the gang as the release left it."""
    binder, a = a_gang_whose_third_binding_fails(h)
    seen: dict[str, Any] = {}

    def failing_member() -> None:
        seen["answer"] = h.engine.bind(bind_args(a[2], "n3"))
        seen["in flight then"], seen["held then"] = binder.in_flight, h.ledger.view.held_count()

    binds.start(a[0], "n1")
    binds.start(a[1], "n2")
    third = threading.Thread(target=failing_member)
    third.start()
    wait_until(lambda: binds.results.get("a-1") == "" and "a-2" in binder.calls_made())
    binder.held["a-0"].set()
    third.join(5)
    assert binds.join() == {"a-0": "", "a-1": ""}
    assert seen == {"answer": "binding pod default/a-2 to n3 failed: the API server said no",
                    "in flight then": 0, "held then": 0}
    assert h.mirror.placement(a[2]["metadata"]["uid"]) == ""


@pytest.mark.parametrize("h", [{"binder": BinderOnThreads, "bind_parallelism": 2}], indirect=True)
def test_a_release_makes_at_most_bind_parallelism_bindings_at_once(h: Harness, binds: Binds) -> None:
    binder = h.binder
    assert isinstance(binder, BinderOnThreads)
    let = {f"a-{i}": threading.Event() for i in range(4)}
    binder.held.update(let)
    nodes(h, NODES4)
    a = gang_pods("a", 4)
    h.add(coscheduling_podgroup("a", 4), *a)
    for member, target in zip(a, NODES4, strict=True):
        binds.start(member, target)
    wait_until(lambda: len(binder.made_on) == 2)
    first = sorted(binder.made_on)
    let[first[0]].set()  # one Binding finishes: one more may start
    wait_until(lambda: len(binder.made_on) == 3)
    for event in let.values():
        event.set()
    assert binds.join() == {f"a-{i}": "" for i in range(4)}
    assert binder.most_in_flight == 2


def test_binding_slots_go_to_the_longest_waiter_and_a_wait_is_bounded() -> None:
    slots = BindingSlots(1)
    assert slots.acquire(0)
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append("waiter" if slots.acquire(5) else "timed out"))
    waiter.start()
    wait_until(lambda: len(slots._waiting) == 1)
    slots.release()  # handed to the waiter: a later comer finds none free
    assert not slots.acquire(0)
    waiter.join(5)
    assert got == ["waiter"]
    started = time.monotonic()
    assert not slots.acquire(0.05), "the waiter still holds the only slot"
    assert time.monotonic() - started >= 0.05
    slots.release()
    assert slots.acquire(0)


class ReleaseLogClosedWhenLet:
    """ReleaseLog whose ``closed`` waits until the test lets it (a slow Lease write)."""

    closes_at_once = False

    def __init__(self) -> None:
        self.let_close = threading.Event()
        self.open: set[int] = set()

    def opened(self, gang: GangKey, pods: Sequence[tuple[str, str, str, str]]) -> int:
        self.open.add(len(self.open) + 1)
        return len(self.open)

    def closed(self, release_id: int) -> None:
        assert self.let_close.wait(10)
        self.open.discard(release_id)


@pytest.mark.parametrize("h", [{"release_log": ReleaseLogClosedWhenLet()}], indirect=True)
def test_no_answer_waits_for_the_release_log_to_close_the_release(h: Harness, binds: Binds) -> None:
    """Closing a release on the Lease is an API write: the members are answered without waiting for it."""
    release_log = h.engine.binding.release_log
    assert isinstance(release_log, ReleaseLogClosedWhenLet)
    nodes(h, NODES4)
    a = gang_pods("a", 3)
    h.add(coscheduling_podgroup("a", 3), *a)
    for member, target in zip(a, NODES4, strict=False):
        binds.start(member, target)
    assert binds.join() == {"a-0": "", "a-1": "", "a-2": ""}
    assert release_log.open == {1}, "answered while the release was still being closed"
    release_log.let_close.set()
    wait_until(lambda: not release_log.open)


def test_a_held_thread_stays_for_its_turn_whatever_the_ledger_raises(h: Harness, binds: Binds) -> None:
    """A released quorum counts on each held thread for its member's Binding."""
    nodes(h, NODES4)
    a = gang_pods("a", 3)
    h.add(coscheduling_podgroup("a", 3), *a)
    due = h.ledger.due
    failed: list[str] = []

    def failing_for_a0(gang: GangKey) -> float | None:
        if threading.current_thread().name == "bind-a-0":
            failed.append("a-0")
            raise RuntimeError("injected")
        return due(gang)

    h.ledger.due = failing_for_a0  # type: ignore[method-assign]
    binds.start(a[0], "n1")
    wait_until(lambda: failed == ["a-0"] and h.ledger.view.held_count() == 1)
    binds.start(a[1], "n2")
    binds.start(a[2], "n3")
    assert binds.join() == {"a-0": "", "a-1": "", "a-2": ""}
    assert h.binder.bound_names == ["a-0", "a-1", "a-2"]
    assert failed == ["a-0"], "asked once, then waited: never asked again in a loop"
    assert h.ledger.view.held_count() == 0 and h.ledger.view.counters()["completed"] == 1


@pytest.mark.parametrize("h", [{"binder": BinderOnThreads, "real_clock": True, "hold_seconds": 1.0}], indirect=True)
def test_a_failed_member_waits_for_its_release_no_longer_than_its_answer_allows(h: Harness, binds: Binds) -> None:
    """The guarantee is kube-scheduler's httpTimeout: a held bind is answered by its arrival + hold_seconds +
    half the answer margin (1 s + 0.5 s here), even while a sibling's Binding is still being made."""
    binder, a = a_gang_whose_third_binding_fails(h)
    binds.start(a[0], "n1")
    binds.start(a[1], "n2")
    started = time.monotonic()
    answer = h.engine.bind(bind_args(a[2], "n3"), started)
    answered_in = time.monotonic() - started
    assert answer == "binding pod default/a-2 to n3 failed: the API server said no"
    assert binder.in_flight == 1, "a-0's Binding is still being made"
    assert answered_in <= 1.0 + 0.5 + 0.1, f"answered {answered_in:.2f} s after its arrival"  # 0.1 s for the test
    binder.held["a-0"].set()
    assert binds.join() == {"a-0": "", "a-1": ""}


def test_non_gang_pod_binds_at_once(h: Harness) -> None:
    nodes(h, NODES4)
    web = pod("web", cpu="1")
    h.add(web)
    assert h.engine.bind(bind_args(web, "n2")) == ""
    assert h.binder.calls == [("default", "web", web["metadata"]["uid"], "n2")]
    assert h.mirror.placement(web["metadata"]["uid"]) == "n2"
    assert h.mirror.used("n2") == {"cpu": 1000, "memory": 2**30, "pods": 1}


# ------------------------------------------------------------------------------- timeout, back-off
@pytest.mark.parametrize("h", [{"hold_seconds": 60.0}], indirect=True)  # kube-scheduler waits longer than the
def test_timeout_answers_every_held_bind_and_backs_off(h: Harness, binds: Binds) -> None:  # gang: its timeout answers
    nodes(h, NODES4)
    a = gang_pods("a", 4)
    h.add(coscheduling_podgroup("a", 4), *a)
    gang = h.mirror.pod("default", "a-0").gang
    assert gang is not None
    assert h.engine.filter(filter_args(a[0], NODES4)).feasible == NODES4
    for member, target in zip(a[:3], NODES4, strict=False):
        binds.start(member, target)
    wait_until(lambda: h.ledger.view.held_count() == 3)
    h.clock.advance(29.9)
    h.ledger.sweep()
    assert h.ledger.view.held_count() == 3  # not yet

    h.clock.advance(0.2)
    h.ledger.sweep()
    message = ("gang default/a timed out after 30s with 3 member(s) held of 4 needed; "
               "released its reservation and backing off")
    assert binds.join() == dict.fromkeys(("a-0", "a-1", "a-2"), message)
    assert h.binder.calls == []
    assert all(h.mirror.placement(p["metadata"]["uid"]) == "" for p in a)
    assert all(h.mirror.used(n) == {} for n in NODES4)
    assert h.mirror.reservation(gang) == {}
    assert h.ledger.view.held_count() == 0 and h.ledger.view.admitted_count() == 0
    assert h.ledger.view.counters()["timeouts"] == 1
    timeouts = h.events.of("GangTimeout")
    assert timeouts == [(("a-0", "a-1", "a-2", "a-3"), "Warning", "GangTimeout", message)]

    # Backing off: resolvable, so other gangs can use the capacity.
    assert h.engine.filter(filter_args(a[3], NODES4)) == resolvable(
        NODES4, "gang default/a is backing off for 10s after 1 timeout(s) so other gangs can proceed")
    assert h.engine.filter(filter_args(pod("web", cpu="4"), NODES4)).feasible == NODES4
    h.clock.advance(10)
    assert h.engine.filter(filter_args(a[3], NODES4)).feasible == NODES4
    assert h.mirror.reservation(gang) == {n: {"cpu": 3000, "memory": 2**30, "pods": 1} for n in NODES4}
    assert len(h.events.of("GangAdmitted")) == 2


def test_back_off_doubles_per_consecutive_timeout(h: Harness, binds: Binds) -> None:
    nodes(h, NODES4)
    a = gang_pods("a", 2, cpu="1")
    h.add(coscheduling_podgroup("a", 2), *a)
    for attempt, backoff in ((1, 10), (2, 20)):
        binds.start(a[0], "n1")
        wait_until(lambda: h.ledger.view.held_count() == 1)
        h.clock.advance(30)
        h.ledger.sweep()
        binds.join()
        assert binds.results["a-0"].startswith("gang default/a timed out after 30s with 1 member(s) held of 2")
        assert h.engine.filter(filter_args(a[1], NODES4)) == resolvable(
            NODES4, f"gang default/a is backing off for {backoff}s after {attempt} timeout(s) so other gangs "
            "can proceed")
        h.clock.advance(backoff)
        binds.threads.clear()


def test_per_gang_timeout_from_the_podgroup(h: Harness, binds: Binds) -> None:
    nodes(h, NODES4)
    a = gang_pods("a", 2, cpu="1")
    h.add(coscheduling_podgroup("a", 2, timeout=5), *a)
    binds.start(a[0], "n1")
    wait_until(lambda: h.ledger.view.held_count() == 1)
    h.clock.advance(5)
    h.ledger.sweep()
    assert binds.join() == {"a-0": "gang default/a timed out after 5s with 1 member(s) held of 2 needed; "
                                    "released its reservation and backing off"}


def test_admitted_gang_without_binds_expires(h: Harness) -> None:
    nodes(h, NODES4)
    a = gang_pods("a", 4)
    h.add(coscheduling_podgroup("a", 4), *a)
    gang = h.mirror.pod("default", "a-0").gang
    assert gang is not None
    assert h.engine.filter(filter_args(a[0], NODES4)).feasible == NODES4
    assert h.mirror.reservation(gang) != {}
    h.clock.advance(30)
    h.ledger.sweep()
    assert h.mirror.reservation(gang) == {}
    assert h.events.reasons() == ["GangAdmitted", "GangTimeout"]
    assert h.engine.filter(filter_args(pod("web", cpu="4"), NODES4)).feasible == NODES4


def test_real_clock_timeout_is_bounded() -> None:
    """With the real clock, held binds answer on their own once the (short) gang timeout passes."""
    harness = make_engine(timeout_seconds=0.2, backoff_seconds=0.1, real_clock=True)
    try:
        nodes(harness, NODES4)
        a = gang_pods("a", 4)
        harness.add(coscheduling_podgroup("a", 4), *a)
        runner = Binds(harness)
        started = time.monotonic()
        for member, target in zip(a[:3], NODES4, strict=False):
            runner.start(member, target)
        results = runner.join(timeout=3)
        elapsed = time.monotonic() - started
        assert set(results) == {"a-0", "a-1", "a-2"}
        assert all("timed out" in r for r in results.values())
        assert 0.15 <= elapsed < 1.5
        assert harness.binder.calls == []
    finally:
        harness.close()


# ---------------------------------------------------------------------------------------- fail fast
def test_gang_that_can_never_fit_fails_fast(h: Harness) -> None:
    nodes(h, NODES4)
    big = gang_pods("big", 8)
    h.add(coscheduling_podgroup("big", 8), *big)
    message = ("gang default/big can never fit this cluster: only 4 of 8 members fit on 4 nodes even when they "
               "are empty; no node has cpu=3 free (largest free falls short by cpu=2)")
    assert h.engine.filter(filter_args(big[0], NODES4)) == unresolvable(NODES4, message)
    assert h.engine.filter(filter_args(big[1], NODES4)) == unresolvable(NODES4, message)
    never = h.events.of("GangNeverFits")
    assert len(never) == 1, "one event per verdict, not one per filter"
    assert never[0][1:] == ("Warning", "GangNeverFits", message)
    assert sorted(never[0][0]) == sorted(p["metadata"]["name"] for p in big)
    assert h.ledger.view.counters()["never_fits"] == 1

    more = ["n5", "n6", "n7", "n8"]
    nodes(h, more)
    assert h.engine.filter(filter_args(big[0], [*NODES4, *more])).feasible == [*NODES4, *more]
    assert h.ledger.view.admitted_count() == 1


def test_never_fits_considers_node_selectors(h: Harness) -> None:
    h.add(node("n1", labels={"zone": "a"}), node("n2", labels={"zone": "b"}))
    members = [pod(f"z-{i}", cpu="3", pod_group="z", node_selector={"zone": "a"}) for i in range(2)]
    h.add(coscheduling_podgroup("z", 2), *members)
    assert h.engine.filter(filter_args(members[0], ["n1", "n2"])) == unresolvable(["n1", "n2"], (
        "gang default/z can never fit this cluster: only 1 of 2 members fit on 2 nodes even when they are "
        "empty; no node has cpu=3 free (largest free falls short by cpu=2)"))


# -------------------------------------------------------------------------------------- bind errors
def test_bind_error_of_one_member_at_quorum(h: Harness, binds: Binds) -> None:
    nodes(h, NODES4)
    a = gang_pods("a", 4)
    h.add(coscheduling_podgroup("a", 4), *a)
    h.binder.fail["a-2"] = "the API server said no"
    for member, target in zip(a, NODES4, strict=True):
        binds.start(member, target)
    assert binds.join() == {"a-0": "", "a-1": "", "a-3": "",
                            "a-2": "binding pod default/a-2 to n3 failed: the API server said no"}
    assert len(h.binder.calls) == 4
    assert h.mirror.placement(a[2]["metadata"]["uid"]) == ""  # the failed assumption is forgotten
    assert h.mirror.used("n3") == {}
    assert h.ledger.view.counters()["bind_errors"] == 1
    assert h.events.of("GangBound")[0][3] == "gang default/a: 3 member(s) bound together at quorum"
    # The failed member is retried later and binds at once (3 of 4 are placed, it completes the gang).
    h.binder.fail.clear()
    assert h.engine.filter(filter_args(a[2], NODES4)).feasible == ["n3"]


def test_immediate_bind_error_forgets_the_assumption(h: Harness) -> None:
    nodes(h, NODES4)
    web = pod("web", cpu="1")
    h.add(web)
    h.binder.fail["web"] = "connection refused"
    assert h.engine.bind(bind_args(web, "n1")) == "binding pod default/web to n1 failed: connection refused"
    assert h.mirror.placement(web["metadata"]["uid"]) == ""
    assert h.mirror.used("n1") == {}


def test_bind_with_a_stale_uid_is_refused(h: Harness) -> None:
    nodes(h, NODES4)
    web = pod("web", uid="new-uid")
    h.add(web)
    assert h.engine.bind(bind_args(web, "n1", uid="old-uid")) == (
        "pod default/web has uid new-uid, not old-uid: it was re-created")
    assert h.binder.calls == []


def test_bind_of_a_pod_already_bound_elsewhere_is_refused(h: Harness) -> None:
    nodes(h, NODES4)
    web = pod("web", node="n2")
    h.add(web)
    assert h.engine.bind(bind_args(web, "n1")) == "pod default/web is already bound to n2"
    assert h.engine.bind(bind_args(web, "n2")) == ""  # idempotent for the same node
    assert h.binder.calls == []


def test_bind_to_a_node_without_room_is_refused_before_the_api(h: Harness) -> None:
    nodes(h, NODES4)
    h.add(pod("hog", cpu="3", node="n1"))
    web = pod("web", cpu="2")
    h.add(web)
    assert h.engine.bind(bind_args(web, "n1")) == (
        "node n1 no longer has room for pod default/web: insufficient cpu (needs cpu=2, free cpu=1)")
    assert h.engine.bind(bind_args(web, "n9")) == "node n9 is not known to the extender"
    assert h.binder.calls == []
    assert h.mirror.placement(web["metadata"]["uid"]) == ""


def test_bind_of_a_gang_member_into_another_gangs_reservation_is_refused(h: Harness) -> None:
    nodes(h, NODES4)
    a, b = gang_pods("a", 4), gang_pods("b", 2, cpu="2")
    h.add(coscheduling_podgroup("a", 4), coscheduling_podgroup("b", 2), *a, *b)
    assert h.engine.filter(filter_args(a[0], NODES4)).feasible == NODES4
    assert h.engine.bind(bind_args(b[0], "n1")) == (
        "node n1 no longer has room for pod default/b-0: insufficient cpu (needs cpu=2, free cpu=1)")
    assert h.ledger.view.held_count() == 0 and h.binder.calls == []


def test_bind_reads_a_pod_the_mirror_has_not_seen(h: Harness) -> None:
    nodes(h, NODES4)
    web = pod("web")
    assert h.engine.bind(bind_args(web, "n1")) == "pod default/web does not exist"
    h.binder.pods[("default", "web")] = web
    assert h.engine.bind(bind_args(web, "n1")) == ""
    assert h.binder.reads == [("default", "web"), ("default", "web")]
    assert h.binder.calls == [("default", "web", web["metadata"]["uid"], "n1")]


def test_second_bind_of_a_held_member_is_refused(h: Harness, binds: Binds) -> None:
    nodes(h, NODES4)
    a = gang_pods("a", 2, cpu="1")
    h.add(coscheduling_podgroup("a", 2), *a)
    binds.start(a[0], "n1")
    wait_until(lambda: h.ledger.view.held_count() == 1)
    assert h.engine.bind(bind_args(a[0], "n1")) == "pod default/a-0 is already waiting at its gang barrier"
    binds.start(a[1], "n2")
    assert binds.join() == {"a-0": "", "a-1": ""}


# ------------------------------------------------------------------------------------- replica keys
def test_replicas_of_a_workload_pod_group_are_independent_gangs(h: Harness, binds: Binds) -> None:
    nodes(h, NODES4)
    h.add(workload("job", {"workers": 2}))
    r0 = [pod(f"r0-{i}", cpu="1", workload="job", pod_group="workers", replica="0") for i in range(2)]
    r1 = [pod(f"r1-{i}", cpu="1", workload="job", pod_group="workers", replica="1") for i in range(2)]
    h.add(*r0, r1[0])
    assert h.engine.filter(filter_args(r0[0], NODES4)).feasible == ["n1"]  # both members reserved on n1
    assert h.engine.filter(filter_args(r1[0], NODES4)) == unresolvable(
        NODES4, "waiting for gang default/job/workers[1]: 1/2 pods exist")
    gang0 = h.mirror.pod("default", "r0-0").gang
    gang1 = h.mirror.pod("default", "r1-0").gang
    assert gang0 is not None and gang1 is not None and gang0 != gang1
    assert h.mirror.reservation(gang0) == {"n1": {"cpu": 2000, "memory": 2 * 2**30, "pods": 2}}
    assert h.mirror.reservation(gang1) == {}

    # Replica 0 completes its barrier on its own; replica 1's held member is not part of it.
    binds.start(r1[0], "n3")
    wait_until(lambda: h.ledger.view.held_count() == 1)
    binds.start(r0[0], "n1")
    binds.start(r0[1], "n2")
    wait_until(lambda: {"r0-0", "r0-1"} <= set(binds.results))  # replica 0 answered
    assert sorted(c[1] for c in h.binder.calls) == ["r0-0", "r0-1"]
    assert h.ledger.view.held_count() == 1
    h.add(r1[1])
    binds.start(r1[1], "n4")
    assert binds.join() == {"r0-0": "", "r0-1": "", "r1-0": "", "r1-1": ""}
    assert h.ledger.view.counters()["completed"] == 2


# -------------------------------------------------------------------------- held-bind thread budget
@pytest.mark.parametrize("h", [{"max_held_binds": 5}], indirect=True)
def test_gangs_in_flight_are_limited_by_the_held_bind_budget(h: Harness, binds: Binds) -> None:
    """Each held bind occupies a worker thread: a gang is admitted only while the binds all admitted
    gangs may hold fit the budget, and waits (resolvable, woken later) otherwise."""
    woken = h.woken
    nodes(h, [f"n{i}" for i in range(1, 9)])
    names = [f"n{i}" for i in range(1, 9)]
    a, b = gang_pods("a", 4, cpu="1"), gang_pods("b", 4, cpu="1")
    h.add(coscheduling_podgroup("a", 4), *a, coscheduling_podgroup("b", 4), *b)
    assert h.engine.filter(filter_args(a[0], names)).feasible  # a admitted: may hold 4
    assert h.ledger.view.held_demand() == 4
    assert h.engine.filter(filter_args(b[0], names)) == resolvable(
        names, "waiting for a barrier slot for gang default/b: gangs in flight may hold 4 binds; 4 more would "
               "exceed the limit of 5 (--threads)")
    for member in a:
        binds.start(member, "n1")
    assert binds.join() == {f"a-{i}": "" for i in range(4)}
    assert h.ledger.view.held_demand() == 0
    assert h.ledger.registry.holding() == []  # the budget walks the gangs holding binds or admitted ...
    b_key = GangKey(GroupRef(GroupKind.COSCHEDULING, "default", "b"))
    assert [r.key for r in h.ledger.registry.busy()] == [b_key]  # ... not every busy gang
    assert "b-0" in woken  # a's completion freed the slot: the waiting member is told to retry
    assert h.engine.filter(filter_args(b[0], names)).feasible  # and b is admitted


@pytest.mark.parametrize("h", [{"max_held_binds": 5}], indirect=True)
def test_the_full_sweep_finds_an_admitted_gang_that_no_step_marked_as_holding(h: Harness) -> None:
    """The safety net of the holding set, as of the busy set: an admitted gang missing from it is not
    counted in the budget until the tick's full sweep finds it."""
    nodes(h, [f"n{i}" for i in range(1, 9)])
    names = [f"n{i}" for i in range(1, 9)]
    a = gang_pods("a", 4, cpu="1")
    h.add(coscheduling_podgroup("a", 4), *a)
    assert h.engine.filter(filter_args(a[0], names)).feasible
    h.ledger.registry._holding.clear()  # as if admission had not marked it
    assert h.ledger.view.held_demand() == 0
    h.ledger.sweep()
    assert h.ledger.view.held_demand() == 4


@pytest.mark.skipif(native.hot_path().build == "compiled",
                    reason="the spy replaces a method, which a compiled Admission does not allow")
@pytest.mark.parametrize("h", [{"max_held_binds": 9}], indirect=True)
def test_the_budget_is_counted_gang_by_gang_only_near_its_limit(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry's running count of held binds and reserved places bounds the budget's count: while it
    leaves room, admission walks no gang; once it does not, the budget is counted exactly."""
    nodes(h, [f"n{i}" for i in range(1, 9)])
    names = [f"n{i}" for i in range(1, 9)]
    a, b, c = gang_pods("a", 4, cpu="1"), gang_pods("b", 4, cpu="1"), gang_pods("c", 4, cpu="1")
    h.add(*(coscheduling_podgroup(g, 4) for g in "abc"), *a, *b, *c)
    counted: list[int] = []
    exact = h.ledger.admission.held_demand
    monkeypatch.setattr(h.ledger.admission, "held_demand", lambda: counted.append(exact()) or counted[-1])
    assert h.engine.filter(filter_args(a[0], names)).feasible  # 0 + 4 <= 9: not counted
    assert counted == [] and h.ledger.registry.demand_bound() == 4
    assert h.engine.filter(filter_args(b[0], names)).feasible  # 4 + 4 <= 9: not counted
    assert counted == [] and h.ledger.registry.demand_bound() == 8
    assert not h.engine.filter(filter_args(c[0], names)).feasible  # 8 + 4 > 9: counted, and full
    assert counted == [8]


@pytest.mark.parametrize("h", [{"max_held_binds": 9}], indirect=True)
def test_a_bound_over_the_limit_is_checked_by_counting_not_refused(h: Harness) -> None:
    """The running count may stand above the budget's own count (it includes draining reservations and
    binds being released): when it leaves no room, the budget is counted, and a gang that fits is admitted."""
    names = [f"n{i}" for i in range(1, 9)]
    nodes(h, names)
    a, b = gang_pods("a", 4, cpu="1"), gang_pods("b", 4, cpu="1")
    h.add(coscheduling_podgroup("a", 4), *a, coscheduling_podgroup("b", 4), *b)
    assert h.engine.filter(filter_args(a[0], names)).feasible  # a admitted: 4 of 9
    h.ledger.registry._reserved += 3  # as if a draining reservation held 3 places: 7 + 4 > 9
    assert h.engine.filter(filter_args(b[0], names)).feasible  # counted: 4 + 4 <= 9
    h.ledger.registry._reserved -= 3


@pytest.mark.parametrize("h", [{"max_held_binds": 5}], indirect=True)
def test_the_full_sweep_recounts_held_binds_and_reserved_places(h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    nodes(h, [f"n{i}" for i in range(1, 9)])
    a = gang_pods("a", 4, cpu="1")
    h.add(coscheduling_podgroup("a", 4), *a)
    assert h.engine.filter(filter_args(a[0], [f"n{i}" for i in range(1, 9)])).feasible
    h.ledger.sweep()
    assert "recounted" not in caplog.text  # counted right: nothing to say
    h.ledger.registry._reserved = -100  # as if a change had gone uncounted
    h.ledger.sweep()
    assert h.ledger.registry.demand_bound() == 4
    assert "held binds and reserved places recounted: 0 and 4, counted 0 and -100" in caplog.text


@pytest.mark.parametrize("h", [{"max_held_binds": 3}], indirect=True)
def test_a_gang_larger_than_the_budget_is_told_to_raise_threads(h: Harness) -> None:
    nodes(h, NODES4)
    big = gang_pods("big", 4, cpu="1")
    h.add(coscheduling_podgroup("big", 4), *big)
    assert h.engine.filter(filter_args(big[0], NODES4)) == unresolvable(
        NODES4, "gang default/big would hold 4 binds at once but gang-extender can hold at most 3: raise --threads")


def test_admission_wakes_only_members_a_gang_rule_rejected(h: Harness) -> None:
    """Rejected members wait in kube-scheduler's unschedulable pool and need a nudge; members never
    rejected are still queued, and waking them would only cost API writes."""
    woken = h.woken
    nodes(h, NODES4)
    a = gang_pods("a", 4, cpu="1")
    h.add(coscheduling_podgroup("a", 4), *a[:3])
    assert not h.engine.filter(filter_args(a[0], NODES4)).feasible  # 3/4 exist: a-0 rejected
    woken.clear()  # (the PodGroup appearing woke its pods once, by design: see test_policy_changes)
    h.add(a[3])
    assert h.engine.filter(filter_args(a[3], NODES4)).feasible  # admitted at a-3's filter
    assert woken == ["a-0"]


def test_a_filter_of_the_version_the_pod_watch_read_reads_the_pod_no_more(h: Harness,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """kube-scheduler sends the pod its informer holds: at the version the pod watch read, the filter takes the
    mirror's record and signature of it; only a version the mirror does not hold is read from the request."""
    nodes(h, NODES4)
    members = gang_pods("a", 2)
    h.add(coscheduling_podgroup("a", 2), *members)
    reads: list[str] = []

    def counted(read: Callable[..., Any]) -> Callable[..., Any]:
        def reading(raw: Any, *args: Any) -> Any:
            reads.append(raw["metadata"]["name"])
            return read(raw, *args)
        return reading

    from extender.cluster import facts
    monkeypatch.setattr(facts, "linked_pod_record", counted(facts.linked_pod_record))
    monkeypatch.setattr(facts, "signature", counted(facts.signature))
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible
    assert h.engine.filter(filter_args(members[1], NODES4)).feasible
    assert reads == []
    newer = {**members[1], "metadata": {**members[1]["metadata"], "resourceVersion": "newer"}}
    assert h.engine.filter(filter_args(newer, NODES4)).feasible
    assert sorted(reads) == ["a-1", "a-1"]  # its record and its signature, from the request

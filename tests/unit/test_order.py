"""The admission order: priority, then waiting time; backfill; draining reservations (no engine, no threads)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cluster.groups import ANNOTATION_MAX_WAIT, gang_order
from extender.cluster.mirror import ClusterMirror
from extender.cluster.records import pod_record
from extender.gangs import order
from extender.gangs.ledger import BindAction, GangLedger
from extender.gangs.settings import GangSettings
from extender.model.cluster import PodRecord
from extender.model.gang import PASS, GangKey, GangOrder, GangPolicy, GroupKind
from tests.builders import EventLog, FakeClock, coscheduling_podgroup, filter_args, make_engine, node, pod, slots_of

NODES = ["n1", "n2", "n3", "n4"]


def with_priority(raw: dict[str, Any], priority: int | None) -> dict[str, Any]:
    if priority is not None:
        raw["spec"]["priority"] = priority
    return raw


class World:
    """Four 4-cpu nodes, a ledger with a 60 s max wait, a clock that moves when told."""

    def __init__(self, max_wait: float = 60.0) -> None:
        self.clock = FakeClock()
        self.events = EventLog()
        self.mirror = ClusterMirror()
        self.ledger = GangLedger(self.mirror, GangSettings(timeout_seconds=30.0, backoff_seconds=10.0,
                                                           max_wait_seconds=max_wait),
                                 clock=self.clock, on_event=self.events)
        for name in NODES:
            self.mirror.upsert_node(node(name))

    def gang(self, name: str, size: int, cpu: str, *, priority: int | None = None,
             annotations: dict[str, str] | None = None) -> tuple[GangKey, GangPolicy, list[PodRecord]]:
        group = coscheduling_podgroup(name, size)
        group["metadata"]["annotations"] = dict(annotations or {})
        self.mirror.upsert_group(GroupKind.COSCHEDULING, group)
        members = [self.mirror.upsert_pod(with_priority(pod(f"{name}-{i}", cpu=cpu, memory="1Mi", pod_group=name),
                                                        priority)) for i in range(size)]
        gang = members[0].gang
        assert gang is not None
        exists, policy = self.mirror.gang_policy(gang)
        assert exists and policy is not None
        return gang, policy, members

    def running(self, name: str, cpu: str, at: str, priority: int | None = None) -> PodRecord:
        return self.mirror.upsert_pod(with_priority(pod(name, cpu=cpu, memory="1Mi", node=at), priority))

    def admitted(self, gang: GangKey) -> bool:
        state = self.ledger.record(gang)
        return state is not None and state.admitted

    def bind_all(self, gang: GangKey, policy: GangPolicy, members: list[PodRecord]) -> None:
        """Bind an admitted gang's members to its reserved nodes, as kube-scheduler and the barrier do."""
        slots = [n for n, _ in slots_of(self.ledger, gang)]
        decision = None
        for member, target in zip(members, slots, strict=False):
            decision = self.ledger.on_bind(member, target, policy)
        assert decision is not None and decision.action is BindAction.RELEASE
        self.ledger.released(gang, [(h, "") for h in decision.holds])
        for hold in decision.holds:
            raw = pod(hold.pod.name, uid=hold.pod.uid, cpu=None, memory=None, pod_group=gang.group.name,
                      node=hold.node)
            raw["spec"]["containers"][0]["resources"]["requests"] = {"cpu": f"{hold.pod.requests['cpu']}m",
                                                                     "memory": "1Mi"}
            self.mirror.upsert_pod(raw)


# ----------------------------------------------------------------------------------- pure parts
def test_priority_is_the_groups_else_the_members_and_a_mismatch_is_a_problem() -> None:
    def members(*priorities: int) -> list[PodRecord]:
        return [pod_record(with_priority(pod(f"p{i}"), p)) for i, p in enumerate(priorities)]

    assert order.gang_priority(None, members(5, 5)) == (5, "")
    assert order.gang_priority(GangOrder(priority=7), members(7, 7)) == (7, "")
    assert order.gang_priority(None, []) == (0, "")
    low, problem = order.gang_priority(None, members(5, 1))
    assert low == 1 and problem.startswith("its members have different priorities (1, 5)")
    low, problem = order.gang_priority(GangOrder(priority=9), members(9, 3))
    assert low == 3 and "differs from the group's priority 9" in problem


def test_queue_key_orders_by_priority_then_age_then_name() -> None:
    keys = sorted([(order.queue_key(0, 5.0, "b"), "old-low"), (order.queue_key(10, 9.0, "a"), "young-high"),
                   (order.queue_key(0, 1.0, "c"), "older-low"), (order.queue_key(0, 1.0, "a"), "older-low-a")])
    assert [name for _, name in keys] == ["young-high", "older-low-a", "older-low", "old-low"]


def test_order_settings_parse_and_malformed_ones_become_a_problem() -> None:
    assert gang_order({}) is None
    assert gang_order({ANNOTATION_MAX_WAIT: "90"}) == GangOrder(max_wait_seconds=90.0)
    bad = gang_order({ANNOTATION_MAX_WAIT: "soon"})
    assert bad is not None and bad.max_wait_seconds is None and "must be a number of seconds" in bad.problem
    for raw in ("-1", "nan", "inf"):
        parsed = gang_order({ANNOTATION_MAX_WAIT: raw})
        assert parsed is not None and parsed.problem, raw
    unresolved = gang_order({}, {"priorityClassName": "missing"})
    assert unresolved is not None and "did not resolve to a priority" in unresolved.problem
    assert gang_order({}, {"disruptionMode": {"single": {}}}) == GangOrder(disruption_all=False)
    assert gang_order({}, {"preemptionPolicy": "Never", "priority": 3}) == GangOrder(priority=3, preempt_never=True)


def test_wait_histogram_is_cumulative_per_priority() -> None:
    waits = order.WaitHistogram()
    waits.observe(0, 0.5)
    waits.observe(0, 20.0)
    waits.observe(5, 5000.0)
    (p0, buckets0, sum0), (p5, buckets5, _) = waits.snapshot()
    assert (p0, p5) == (0, 5) and sum0 == 20.5
    assert dict(buckets0)["1.0"] == 1 and dict(buckets0)["30.0"] == 2 and dict(buckets0)["+Inf"] == 2
    assert dict(buckets5)["3600.0"] == 0 and dict(buckets5)["+Inf"] == 1


# ------------------------------------------------------------------------------------ the order
def test_a_higher_priority_gang_created_last_is_admitted_first() -> None:
    w = World()
    hogs = [w.running(f"hog-{n}", "3", n) for n in NODES]
    low, low_policy, _ = w.gang("low", 4, "3", priority=0)
    assert w.ledger.admit(low, low_policy) != PASS  # waiting for capacity
    w.clock.advance(30)
    high, high_policy, _ = w.gang("high", 4, "3", priority=100)
    assert w.ledger.admit(high, high_policy) != PASS
    for hog in hogs:
        w.mirror.delete_pod(hog.uid)
    # The older, lower-priority gang's member is filtered first: the higher-priority gang goes first.
    assert w.ledger.admit(low, low_policy) != PASS
    assert w.admitted(high) and not w.admitted(low)
    view = w.ledger.view.order_view(low)
    assert view is not None and view["position"] == 1 and view["of"] == 1  # high is admitted: out of the queue


def test_an_older_gang_of_equal_priority_goes_before_a_younger_one() -> None:
    w = World()
    hogs = [w.running(f"hog-{n}", "3", n) for n in NODES]
    old, old_policy, _ = w.gang("old", 4, "3")
    young, young_policy, _ = w.gang("young", 4, "3")
    assert w.ledger.admit(old, old_policy) != PASS
    w.clock.advance(1)
    assert w.ledger.admit(young, young_policy) != PASS
    view = w.ledger.view.order_view(young)
    assert view is not None and view["position"] == 2 and view["ahead"][0]["gang"] == str(old)
    for hog in hogs:
        w.mirror.delete_pod(hog.uid)
    assert w.ledger.admit(young, young_policy) != PASS
    assert w.admitted(old) and not w.admitted(young)


def test_a_younger_gang_backfills_capacity_the_older_one_cannot_use() -> None:
    w = World()
    for n in NODES[:3]:
        w.running(f"hog-{n}", "3", n)
    big, big_policy, _ = w.gang("big", 4, "3")
    assert w.ledger.admit(big, big_policy) != PASS  # needs all four nodes
    w.clock.advance(1)
    small, small_policy, _ = w.gang("small", 2, "1")
    assert w.ledger.admit(small, small_policy) == PASS  # fits on n4, which big cannot use alone
    assert not w.admitted(big)


def test_the_head_gang_past_its_max_wait_drains_capacity_and_is_admitted_when_it_frees() -> None:
    w = World(max_wait=60)
    hogs = {n: w.running(f"hog-{n}", "2", n) for n in NODES}
    big, big_policy, _ = w.gang("big", 4, "3")
    assert w.ledger.admit(big, big_policy) != PASS
    w.clock.advance(61)
    w.ledger.sweep()
    state = w.ledger.record(big)
    assert state is not None and state.draining
    assert sorted(w.mirror.reserved_nodes(big)) == NODES
    assert w.events.of("GangDraining")
    # Capacity that frees up on a drained node is kept for the gang: only what it does not need (1 of
    # the 4 cpu) is left to others, so a 2-cpu plain pod or gang member that would fit there now does not.
    w.mirror.delete_pod(hogs["n1"].uid)
    assert w.mirror.free("n1", None)["cpu"] == 1000
    small, small_policy, _ = w.gang("small", 1, "2")
    assert w.ledger.admit(small, small_policy) != PASS
    view = w.ledger.view.explain(big)["order"]  # the place in the order, and the drain's progress planned
    assert view is not None and view["draining"]["free"] == 1 and view["draining"]["members"] == 4
    for n in NODES[1:]:
        w.mirror.delete_pod(hogs[n].uid)
    w.clock.advance(1)
    w.ledger.sweep()
    assert not w.admitted(big)  # a sweep never admits: the member's next filter does
    assert w.ledger.admit(big, big_policy) == PASS
    assert w.admitted(big) and not w.ledger.record(big).draining  # type: ignore[union-attr]
    (priority, _buckets, total), = w.ledger.view.order_stats()[2]
    assert priority == 0 and 61 <= total <= 63


def test_a_drain_covers_only_what_the_head_gang_needs() -> None:
    w = World(max_wait=0)
    for n in NODES:
        w.running(f"hog-{n}", "3", n)
    big, big_policy, _ = w.gang("big", 2, "2")
    assert w.ledger.admit(big, big_policy) != PASS
    w.ledger.sweep()
    drained = w.mirror.reserved_nodes(big)
    assert len(drained) == 1  # both members fit one emptied node: the other three stay open to everyone
    others = [n for n in NODES if n not in drained]
    assert all(w.mirror.free(n, None)["cpu"] == 1000 for n in others)


@pytest.mark.parametrize("lost", [False, True])
def test_a_higher_priority_gang_takes_the_head_and_the_old_drain_ends(lost: bool) -> None:
    """``lost``: the safety net of the registry's draining set. A drain it lost track of is not ended when
    its gang leaves the head, until the tick's full sweep finds it."""
    w = World(max_wait=10)
    for n in NODES:
        w.running(f"hog-{n}", "2", n)
    low, low_policy, _ = w.gang("low", 4, "3")
    assert w.ledger.admit(low, low_policy) != PASS
    w.clock.advance(11)
    w.ledger.sweep()
    assert w.mirror.reserved_nodes(low)
    if lost:
        w.ledger.registry._draining.pop(low)  # as if reserving had not marked it
    high, high_policy, _ = w.gang("high", 4, "3", priority=10)
    assert w.ledger.admit(high, high_policy) != PASS
    if lost:
        assert w.mirror.reserved_nodes(low)  # not found: left draining
        w.clock.advance(1)
        w.ledger.sweep()
    assert not w.mirror.reserved_nodes(low)
    w.clock.advance(11)
    w.ledger.sweep()
    assert sorted(w.mirror.reserved_nodes(high)) == NODES


def test_bad_order_settings_are_told_once_and_shown_by_explain() -> None:
    w = World()
    for n in NODES:
        w.running(f"hog-{n}", "4", n)
    gang, policy, members = w.gang("odd", 2, "1", annotations={ANNOTATION_MAX_WAIT: "later"})
    w.mirror.upsert_pod(with_priority(pod("odd-0", uid=members[0].uid, cpu="1", memory="1Mi", pod_group="odd"), 50))
    w.ledger.admit(gang, policy)
    w.ledger.admit(gang, policy)
    told = w.events.of("GangOrderProblem")
    assert len(told) == 1
    assert "max-wait-seconds must be a number" in told[0][3] and "different priorities (0, 50)" in told[0][3]
    explained = w.ledger.view.explain(gang)
    assert "different priorities" in explained["order"]["problem"]
    assert explained["order"]["maxWaitSeconds"] == 60.0  # the default applies


def test_a_drain_that_never_gets_its_gang_admitted_ends_and_rests() -> None:
    from extender.gangs.queue import DRAIN_PATIENCE_SECONDS

    w = World(max_wait=60)
    for n in NODES:
        w.running(f"hog-{n}", "2", n)
    big, big_policy, _ = w.gang("big", 4, "3")
    assert w.ledger.admit(big, big_policy) != PASS
    w.clock.advance(61)
    w.ledger.sweep()
    assert w.ledger.record(big).draining  # type: ignore[union-attr]
    w.clock.advance(DRAIN_PATIENCE_SECONDS + 1)  # the hogs never end
    w.ledger.sweep()
    assert w.ledger.record(big).reservation is None and not slots_of(w.ledger, big)  # type: ignore[union-attr]
    w.clock.advance(DRAIN_PATIENCE_SECONDS / 2)
    w.ledger.sweep()
    assert w.ledger.record(big).reservation is None  # type: ignore[union-attr]  # resting
    w.clock.advance(DRAIN_PATIENCE_SECONDS / 2 + 1)
    w.ledger.sweep()
    assert w.ledger.record(big).draining  # type: ignore[union-attr]


def test_a_drain_started_after_a_gang_was_admitted_leaves_that_gang_its_reserved_room() -> None:
    """Found by test_order_property.py: the head gang's drain covers busy capacity on a node where a gang
    admitted just before holds the rest; that gang's members still bind there at once (subtracting the
    drain whole left big-0 1 cpu short on n1 until the busy pod ended, past its gang's timeout if long)."""
    w = World(max_wait=0)
    for n in NODES:
        w.running(f"busy-{n}", "1", n)
    big, big_policy, big_members = w.gang("big", 4, "3")
    assert w.ledger.admit(big, big_policy) == PASS  # 3 of each node's 4 cpu, the 4th busy
    small, small_policy, _ = w.gang("small", 1, "1")
    assert w.ledger.admit(small, small_policy) != PASS
    w.ledger.sweep()  # small is now first in the order, past its max wait: it drains a busy cpu
    drained = w.mirror.reserved_nodes(small)
    assert w.ledger.record(small).draining and len(drained) == 1  # type: ignore[union-attr]
    w.bind_all(big, big_policy, big_members)  # asserts the last bind releases the quorum
    node = next(iter(drained))
    assert w.mirror.free(node, small).get("cpu", 0) == 0 and w.ledger.admit(small, small_policy) != PASS
    w.mirror.delete_pod(w.mirror.pod("default", f"busy-{node}").uid)  # type: ignore[union-attr]
    assert w.mirror.free(node, None).get("cpu", 0) == 0  # what freed is kept for the drain
    assert w.ledger.admit(small, small_policy) == PASS


def test_a_hold_that_times_out_while_its_gang_drains_does_not_start_a_second_drain() -> None:
    """Found in review: ending the attempt of a draining gang (a hold timed out) dropped the drain, and the
    next pass started it again (a second GangDraining). The drain goes on without slots until it leaves
    the head or its patience runs out, and ends once, counted."""
    h = make_engine(timeout_seconds=30)
    try:
        h.add(node("n1", cpu="4"), node("n2", cpu="2"), pod("blocker", cpu="4", node="n1"),
              coscheduling_podgroup("pg", 2))
        members = [pod(f"p{i}", pod_group="pg", cpu="2") for i in range(2)]
        h.add(*members)
        assert not h.engine.filter(filter_args(members[0], ["n1", "n2"])).feasible
        gang = h.mirror.pod("default", "p0").gang  # type: ignore[union-attr]
        assert gang is not None
        h.clock.advance(301)
        h.engine.sweep()
        assert h.ledger.record(gang).draining  # type: ignore[union-attr]
        record = h.mirror.pod("default", "p0")
        assert record is not None
        assert h.ledger.on_bind(record, "n2", GangPolicy(2)).action is BindAction.WAIT
        h.clock.advance(31)
        h.engine.sweep()  # the hold's attempt times out
        h.clock.advance(1)
        h.engine.sweep()
        assert h.ledger.record(gang).draining  # type: ignore[union-attr]
        assert [e[2] for e in h.events.events].count("GangDraining") == 1
        h.clock.advance(901)
        h.engine.sweep()
        counters = h.ledger.view.counters()
        assert (counters["drains_started"], counters["drains_ended"]) == (1, 1)
    finally:
        h.close()


def test_a_gang_whose_admission_timed_out_waits_its_turn_again_without_a_filter_of_its_own() -> None:
    """The queue walks only the gangs waiting their turn (``registry.waiting_turn``), which leave that set
    while admitted: a gang whose admission ends (here, its attempt timed out) is back in the order, ahead
    of a younger gang, before any member of its own is filtered again."""
    w = World()
    old, old_policy, _ = w.gang("old", 4, "3")
    assert w.ledger.admit(old, old_policy) == PASS  # all four nodes reserved for it
    w.clock.advance(1)
    young, young_policy, _ = w.gang("young", 4, "3")
    assert w.ledger.admit(young, young_policy) != PASS
    view = w.ledger.view.order_view(young)
    assert view is not None and view["position"] == 1  # old is admitted: out of the queue
    w.clock.advance(31)
    w.ledger.sweep(0.05)  # a filter's sweep (not the tick's full one): old's attempt times out, it backs off
    assert not w.admitted(old) and w.ledger.view.counters()["timeouts"] == 1
    view = w.ledger.view.order_view(young)
    assert view is not None and view["position"] == 2 and view["ahead"][0]["gang"] == str(old)


def test_the_full_sweep_finds_a_waiting_gang_that_no_step_marked() -> None:
    """The safety net of the waiting set, as of the busy set: a gang waiting its turn behind the queue's
    back is not in the order until the tick's full sweep finds it."""
    w = World()
    for n in NODES:
        w.running(f"hog-{n}", "3", n)
    old, old_policy, _ = w.gang("old", 4, "3")
    assert w.ledger.admit(old, old_policy) != PASS
    w.clock.advance(1)
    young, young_policy, _ = w.gang("young", 4, "3")
    assert w.ledger.admit(young, young_policy) != PASS
    w.ledger.registry._waiting.pop(old)  # as if joining had not marked it
    view = w.ledger.view.order_view(young)
    assert view is not None and view["position"] == 1
    w.ledger.sweep()
    view = w.ledger.view.order_view(young)
    assert view is not None and view["position"] == 2 and view["ahead"][0]["gang"] == str(old)


def test_a_waiting_gang_taken_from_the_leaders_state_keeps_its_place_in_the_order() -> None:
    """A scratch ledger (the fit oracle's what-if) adopting the leader's state: a gang the leader has
    waiting, with nothing reserved, is in the order ahead of a younger gang asked about."""
    from extender.gangs.state import GangEntry, LedgerState

    w = World()
    for n in NODES:
        w.running(f"hog-{n}", "3", n)
    old, _, _ = w.gang("old", 4, "3")
    young, young_policy, _ = w.gang("young", 4, "3")
    scratch = GangLedger(w.mirror, GangSettings(timeout_seconds=30.0, max_wait_seconds=60.0), clock=w.clock)
    waited = w.clock() - 5
    scratch.adopt(LedgerState(w.clock(), (GangEntry(old, 0, waited, "", None),), {}, (), False, (), None, None, 60.0))
    assert scratch.admit(young, young_policy) != PASS
    view = scratch.view.order_view(young)
    assert view is not None and view["position"] == 2 and view["ahead"][0]["gang"] == str(old)

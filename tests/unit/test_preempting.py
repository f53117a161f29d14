"""Gang-aware preemption for the head gang: whole victim gangs, budgets, Never, the eviction bound, failures
(the ledger's decisions only: evictions are taken from it as orders, as the engine does)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from extender.cluster.mirror import ClusterMirror
from extender.engine.evicting import Evictions
from extender.gangs.effects import EvictionOrder
from extender.gangs.ledger import BindAction, GangLedger
from extender.gangs.preemption import FAILED_BACKOFF_SECONDS
from extender.gangs.settings import GangSettings
from extender.model.cluster import PodRecord
from extender.model.gang import PASS, GangKey, GangPolicy, GroupKind
from tests.builders import EventLog, FakeClock, node, pod, slots_of
from tests.evictor_fake import FakeEvictor

NODES = ["n1", "n2", "n3", "n4"]


def podgroup(name: str, min_count: int, **spec: Any) -> dict[str, Any]:
    """A 1.37 scheduling.k8s.io/v1beta1 PodGroup."""
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-pg-{name}"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec}}


class World:
    """Four 4-cpu nodes; a ledger with preemption on, budgets and the eviction bound settable."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.events = EventLog()
        self.mirror = ClusterMirror()
        self.forbidden: set[str] = set()  # pod names a disruption budget protects
        self.room = True
        self.serves: Callable[[PodRecord], bool] = lambda _pod: True  # whether a pod is scheduled through us
        self.problem = ""  # why no victim may be chosen now
        self.ledger = GangLedger(self.mirror, GangSettings(timeout_seconds=30.0, backoff_seconds=10.0,
                                                           max_wait_seconds=3600),
                                 clock=self.clock, on_event=self.events, preemption=True, budgets=self.budgets,
                                 eviction_room=lambda _n: self.room, serves=self._serves,
                                 preemption_problem=lambda: self.problem)
        for name in NODES:
            self.mirror.upsert_node(node(name))

    def _serves(self, pod: PodRecord) -> bool:
        return self.serves(pod)

    def budgets(self, pods: Sequence[PodRecord]) -> tuple[bool, str]:
        hit = [p.name for p in pods if p.name in self.forbidden]
        return (False, f"PodDisruptionBudget default/guard allows no disruption of {hit[0]}") if hit else (True, "")

    def gang(self, name: str, size: int, cpu: str, *, priority: int = 0, on: Sequence[str] = (),
             never: bool = False, tried: bool = False, **spec: Any) -> tuple[GangKey, GangPolicy, list[PodRecord]]:
        """``tried``: kube-scheduler tried the pending members and found no node (their PodScheduled condition)."""
        self.mirror.upsert_group(GroupKind.PODGROUP, podgroup(name, size, **spec))
        members = []
        for i in range(size):
            raw = pod(f"{name}-{i}", cpu=cpu, memory="1Mi", node=on[i] if on else None)
            raw["spec"]["schedulingGroup"] = {"podGroupName": name}
            raw["spec"]["priority"] = priority
            if never:
                raw["spec"]["preemptionPolicy"] = "Never"
            if tried:
                raw["status"] = {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
            members.append(self.mirror.upsert_pod(raw))
        gang = members[0].gang
        assert gang is not None
        exists, policy = self.mirror.gang_policy(gang)
        assert exists and policy is not None
        return gang, policy, members

    def contend(self) -> tuple[list[PodRecord], GangKey, GangPolicy]:
        """A priority-1 gang of 4 fills the nodes; a priority-100 gang of 2 is refused, then a sweep."""
        _, _, low_pods = self.gang("low", 4, "3", priority=1, on=NODES)
        high, high_policy, _ = self.gang("high", 2, "3", priority=100)
        assert self.ledger.admit(high, high_policy) != PASS
        self.tick()
        return low_pods, high, high_policy

    def plain(self, name: str, cpu: str, at: str, priority: int = 0) -> PodRecord:
        raw = pod(name, cpu=cpu, memory="1Mi", node=at)
        raw["spec"]["priority"] = priority
        return self.mirror.upsert_pod(raw)

    def tick(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)
        self.ledger.sweep()

    def take_orders(self) -> list[EvictionOrder]:
        """The eviction orders decided since the last call (by sweeps, or by admissions since the last sweep)."""
        return self.ledger.take_work().evictions

    def victims(self) -> list[list[str]]:
        """The units the ledger ordered evicted since the last call, as pod names."""
        return [[p.name for p in unit.pods] for order in self.take_orders() for unit in order.units]


def test_a_high_priority_gang_evicts_a_lower_priority_gang_whole_and_takes_its_place() -> None:
    w = World()
    _low, _, low_pods = w.gang("low", 4, "3", priority=1, on=NODES)
    high, high_policy, _ = w.gang("high", 2, "3", priority=100)
    assert w.ledger.admit(high, high_policy) != PASS
    w.tick()
    units = w.victims()
    assert units == [sorted(p.name for p in low_pods)]  # all four, though two nodes would do: never part of a gang
    state = w.ledger.record(high)
    assert state is not None and state.preempting and len(slots_of(w.ledger, high)) == 2
    assert w.events.of("GangPreempting")
    view = w.ledger.view.order_view(high)
    assert view is not None and view["preemption"]["victims"] == ["gang default/low"]
    assert view["preemption"]["remaining"] == 4
    w.tick(10)
    assert w.victims() == []  # no second preemption while the victims terminate
    for p in low_pods:
        w.mirror.delete_pod(p.uid)
    assert w.ledger.admit(high, high_policy) == PASS
    assert w.ledger.view.counters()["preemptions_completed"] == 1 and not w.ledger.record(high).preempting  # type: ignore[union-attr]


def test_fewest_and_lowest_priority_victims_first_and_never_equal_or_higher() -> None:
    w = World()
    w.plain("mid-a", "3", "n1", priority=50)
    w.plain("low-b", "3", "n2", priority=10)
    w.plain("same-c", "3", "n3", priority=100)
    w.plain("low-d", "3", "n4", priority=5)
    high, high_policy, _ = w.gang("high", 2, "3", priority=100)
    assert w.ledger.admit(high, high_policy) != PASS
    w.tick()
    assert sorted(name for unit in w.victims() for name in unit) == ["low-b", "low-d"]


def test_a_gang_whose_group_says_single_loses_only_the_pods_needed() -> None:
    w = World()
    w.gang("low", 4, "3", priority=1, on=NODES, disruptionMode={"single": {}})
    high, high_policy, _ = w.gang("high", 1, "3", priority=100)
    assert w.ledger.admit(high, high_policy) != PASS
    w.tick()
    units = w.victims()
    assert len(units) == 1 and len(units[0]) == 1


def test_a_budget_that_forbids_a_gang_makes_it_choose_other_victims_or_wait() -> None:
    w = World()
    _, _, low_pods = w.gang("low", 2, "3", priority=1, on=["n1", "n2"])
    w.plain("other", "3", "n3", priority=20)
    w.plain("other-2", "3", "n4", priority=20)
    w.forbidden = {low_pods[0].name}
    high, high_policy, _ = w.gang("high", 2, "3", priority=100)
    assert w.ledger.admit(high, high_policy) != PASS
    w.tick()
    # not the cheaper but protected gang
    assert sorted(name for unit in w.victims() for name in unit) == ["other", "other-2"]
    w2 = World()
    _, _, low2 = w2.gang("low", 4, "3", priority=1, on=NODES)
    w2.forbidden = {low2[0].name}
    high2, policy2, _ = w2.gang("high", 2, "3", priority=100)
    assert w2.ledger.admit(high2, policy2) != PASS
    w2.tick()
    assert w2.victims() == [] and not w2.ledger.record(high2).preempting  # type: ignore[union-attr]


def test_never_equal_priority_and_a_problem_preempt_nothing() -> None:
    for kwargs in ({"never": True}, {"preemptionPolicy": "Never"}, {"priority": 1},
                   {"priorityClassName": "missing"}):
        w = World()
        w.gang("low", 4, "3", priority=1, on=NODES)
        options: dict[str, Any] = {"priority": 100, **kwargs}
        high, high_policy, _ = w.gang("high", 2, "3", **options)
        assert w.ledger.admit(high, high_policy) != PASS
        w.tick()
        assert w.victims() == [], kwargs
        assert not slots_of(w.ledger, high), kwargs


def test_no_preemption_when_free_capacity_suffices_or_the_eviction_bound_is_spent() -> None:
    w = World()
    w.gang("low", 2, "3", priority=1, on=["n1", "n2"])
    high, high_policy, _ = w.gang("high", 2, "3", priority=100)
    assert w.ledger.admit(high, high_policy) == PASS  # n3 and n4 are free
    assert w.victims() == []
    w2 = World()
    w2.gang("low", 4, "3", priority=1, on=NODES)
    w2.room = False
    high2, policy2, _ = w2.gang("high", 2, "3", priority=100)
    assert w2.ledger.admit(high2, policy2) != PASS
    w2.tick()
    assert w2.victims() == []
    view = w2.ledger.view.order_view(high2)
    assert view is not None and "max-evictions-per-minute" in view["preemption"]["note"]


def test_failed_evictions_drop_the_place_and_back_off() -> None:
    w = World()
    low_pods, high, _high_policy = w.contend()
    assert w.victims()
    w.ledger.evictions_done(high, [(low_pods[0], "refused-budget: Cannot evict pod")])
    assert not slots_of(w.ledger, high) and w.events.of("GangPreemptionFailed")
    w.tick(FAILED_BACKOFF_SECONDS - 2)
    assert w.victims() == []
    w.tick(3)
    assert w.victims()  # tried again after the back-off


# --------------------------------------------------------------- the engine's side (Evictions)
def test_evictions_run_unit_by_unit_and_stop_at_the_first_failure() -> None:
    w = World()
    w.plain("low-a", "3", "n1", priority=1)
    w.plain("low-b", "3", "n2", priority=2)
    w.plain("keep-c", "3", "n3", priority=200)
    w.plain("keep-d", "3", "n4", priority=200)
    high, high_policy, _ = w.gang("high", 2, "3", priority=100)
    assert w.ledger.admit(high, high_policy) != PASS
    w.tick()
    (order,) = w.take_orders()
    evictor = FakeEvictor()
    evictor.set_outcome(("default", order.units[0].pods[0].name), "refused-budget", "Cannot evict pod")
    Evictions(w.ledger, evictor, may_act=lambda: True).run(order)
    assert len(evictor.calls) == 1  # the second unit is never disturbed for a preemption that will not happen
    assert not slots_of(w.ledger, high) and w.events.of("GangPreemptionFailed")


def test_evictions_on_a_replica_that_does_not_lead_evict_nothing() -> None:
    w = World()
    _low_pods, high, _high_policy = w.contend()
    (order,) = w.take_orders()
    evictor = FakeEvictor()
    Evictions(w.ledger, evictor, may_act=lambda: False).run(order)
    assert evictor.calls == [] and not slots_of(w.ledger, high)


def test_evictions_that_succeed_keep_the_place_until_the_gang_takes_it() -> None:
    w = World()
    low_pods, high, _high_policy = w.contend()
    (order,) = w.take_orders()
    evictor = FakeEvictor()
    Evictions(w.ledger, evictor, may_act=lambda: True).run(order)
    assert sorted(p.name for p in evictor.evicted) == sorted(p.name for p in low_pods)
    assert len(slots_of(w.ledger, high)) == 2 and "gang default/high" in evictor.calls[0].preemptor


def test_a_gang_no_filter_request_showed_joins_the_order_and_preempts() -> None:
    # kube-scheduler calls the extender only with nodes its own filters passed: a member that fits no
    # node as the cluster stands never reaches filter, so the sweep finds the complete gang in the mirror
    w = World()
    _, _, low_pods = w.gang("low", 4, "3", priority=1, on=NODES)
    high, _, _ = w.gang("high", 2, "3", priority=100)
    w.tick()
    assert w.victims() == [] and w.ledger.view.order_view(high) is None  # not tried by kube-scheduler yet
    high, _, _ = w.gang("high", 2, "3", priority=100, tried=True)
    w.tick()
    assert sorted(name for unit in w.victims() for name in unit) == sorted(p.name for p in low_pods)
    view = w.ledger.view.order_view(high)
    assert view is not None and view["position"] == 1


def test_a_gang_of_another_scheduler_never_joins_the_order() -> None:
    w = World()
    w.serves = lambda pod: not pod.name.startswith("high")
    w.gang("low", 4, "3", priority=1, on=NODES)
    high, _, _ = w.gang("high", 2, "3", priority=100, tried=True)
    w.tick()
    assert w.victims() == [] and w.ledger.view.order_view(high) is None


def test_a_preempting_gang_is_not_admitted_while_its_victims_terminate() -> None:
    w = World()
    low_pods, high, high_policy = w.contend()
    assert w.victims()
    for p in low_pods:  # evicted: terminating, still counted by kube-scheduler until gone
        raw = pod(p.name, uid=p.uid, cpu="3", memory="1Mi", node=p.node_name)
        raw["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
        w.mirror.upsert_pod(raw)
    verdict = w.ledger.admit(high, high_policy)
    assert verdict != PASS and "waits for 4 preempted pod(s) to end" in verdict.message
    for p in low_pods:
        w.mirror.delete_pod(p.uid)
    assert w.ledger.admit(high, high_policy) == PASS


def test_nothing_is_chosen_while_the_cluster_or_the_budgets_are_not_known() -> None:
    w = World()
    w.problem = "the PodDisruptionBudget watch is not listed or not healthy"
    _low_pods, high, _high_policy = w.contend()
    assert w.victims() == []
    view = w.ledger.view.order_view(high)
    assert view is not None and "PodDisruptionBudget watch" in view["preemption"]["note"]


def test_pods_of_a_group_without_a_gang_policy_are_victims_one_by_one() -> None:
    w = World()
    w.mirror.upsert_group(GroupKind.PODGROUP, {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "replicas", "namespace": "default", "uid": "uid-pg-replicas"},
        "spec": {"schedulingPolicy": {"basic": {}}}})
    for i, at in enumerate(NODES):
        raw = pod(f"replicas-{i}", cpu="3", memory="1Mi", node=at)
        raw["spec"]["schedulingGroup"] = {"podGroupName": "replicas"}
        raw["spec"]["priority"] = 1
        w.mirror.upsert_pod(raw)
    high, high_policy, _ = w.gang("high", 1, "3", priority=100)
    assert w.ledger.admit(high, high_policy) != PASS
    w.tick()
    assert [len(unit) for unit in w.victims()] == [1]


def test_a_preemption_leaves_a_gang_admitted_before_it_its_reserved_room() -> None:
    """The preemptor's place covers a victim's cpu on a node where a gang admitted just before holds the
    rest: that gang's members still bind there while the victim terminates (a place subtracted whole
    left big's member 1 cpu short until the victim was gone)."""
    w = World()
    for n in NODES:
        w.plain(f"low-{n}", "1", n)
    big, big_policy, big_members = w.gang("big", 4, "3")
    assert w.ledger.admit(big, big_policy) == PASS
    high, _, _ = w.gang("high", 1, "1", priority=10, tried=True)
    w.tick(2)
    (victim,), = w.victims()
    assert w.ledger.record(high).preempting  # type: ignore[union-attr]
    for member, (target, _) in zip(big_members, slots_of(w.ledger, big), strict=True):
        decision = w.ledger.on_bind(member, target, big_policy)
        assert decision.error == "", decision.error
    assert decision.action is BindAction.RELEASE and w.mirror.free(victim.removeprefix("low-"), None).get("cpu", 0) == 0


def test_a_gang_that_fits_free_capacity_is_admitted_without_a_victim_search(monkeypatch: Any) -> None:
    """The head gang's own plan comes first: a member's filter does not search victims for a gang it is
    about to admit on free capacity (that search per filter was a third of the filter's time with
    thousands of small gangs). One that does not fit is searched for by the sweep that follows."""
    from extender.gangs import victims

    searches: list[GangKey] = []
    real = victims.choose_victims
    monkeypatch.setattr(victims, "choose_victims", lambda *a, **k: searches.append(a[0][0].gang) or real(*a, **k))
    w = World()
    for n in NODES:
        w.plain(f"low-{n}", "1", n)
    fits, fits_policy, _ = w.gang("fits", 2, "1", priority=100)
    assert w.ledger.admit(fits, fits_policy) == PASS
    assert searches == []
    big, big_policy, _ = w.gang("big", 4, "3", priority=100)
    assert w.ledger.admit(big, big_policy) != PASS
    assert searches == []
    w.tick()
    assert searches == [big]


def test_a_hold_that_times_out_while_its_gang_preempts_does_not_start_a_second_preemption() -> None:
    """Found in review: ending the attempt of a preempting gang (its one hold timed out) dropped the
    preemption with its slots, and after the back-off the same victims, still terminating, were chosen and
    ordered evicted again. The preemption goes on without slots, waiting for its victims."""
    w = World()
    w.mirror.upsert_node(node("n5"))
    _low, _, low_pods = w.gang("low", 4, "3", priority=1, on=NODES)
    high, policy, members = w.gang("high", 2, "3", priority=100)
    assert w.ledger.admit(high, policy) != PASS
    w.tick()
    assert w.victims() == [sorted(p.name for p in low_pods)]
    assert w.ledger.on_bind(members[0], "n5", policy).action is BindAction.WAIT  # a member lands on n5
    w.tick(31)  # its attempt times out
    record = w.ledger.record(high)
    assert record is not None and record.preempting and record.timeouts == 1
    for seconds in (1, 11, 6, 6):  # past the back-off and the search interval: the victims still terminate
        w.tick(seconds)
        verdict = w.ledger.admit(high, policy)
        assert "waits for 4 preempted pod(s) to end" in verdict.message, verdict
        assert w.victims() == []
    assert w.ledger.view.counters()["preemptions_started"] == 1


# ----------------------------------------------------------------- a victim gang is evicted whole
def test_a_victim_gang_refused_midway_is_retried_to_the_end() -> None:
    """Issue 26, finding 9: a victim gang was evicted pod by pod and the preemption stopped at the first
    refusal, leaving the lower-priority gang part evicted. What a refusal midway leaves is retried."""
    w = World()
    low_pods, _, _ = w.contend()
    (order,) = w.take_orders()
    evictor = FakeEvictor()
    evictor.set_outcome(low_pods[2], "refused-budget", "Cannot evict pod")
    pauses: list[float] = []

    def pause(seconds: float) -> None:  # by the retry, the budget allows one more (a pod of its ended)
        pauses.append(seconds)
        evictor.set_outcome(low_pods[2], "evicted")

    Evictions(w.ledger, evictor, may_act=lambda: True, pause=pause).run(order)
    assert sorted(p.name for p in evictor.evicted) == sorted(p.name for p in low_pods)
    assert pauses == [2.0] and [len(c.victims) for c in evictor.calls] == [4, 1]
    assert not w.events.of("GangPartiallyEvicted") and not w.events.of("GangPreemptionFailed")


def test_a_victim_gang_still_part_evicted_after_its_retries_is_told() -> None:
    w = World()
    low_pods, _, _ = w.contend()
    (order,) = w.take_orders()
    evictor = FakeEvictor()
    evictor.set_outcome(low_pods[2], "refused-budget", "Cannot evict pod")
    pauses: list[float] = []
    Evictions(w.ledger, evictor, may_act=lambda: True, pause=pauses.append).run(order)
    assert pauses == [2.0, 4.0, 8.0] and len(evictor.evicted) == 3
    (told,) = w.events.of("GangPartiallyEvicted")
    assert told[0] == ("low-2",) and told[3] == (
        "gang default/low was evicted as a unit for a higher-priority gang, but only 3 of its 4 pod(s) went: the "
        "rest were refused (refused-budget: Cannot evict pod) after retries; a disruption budget or the API "
        "server keeps them")
    assert w.ledger.view.counters()["victims_partly_evicted"] == 1 and w.events.of("GangPreemptionFailed")


def test_a_victim_gang_a_budget_no_longer_allows_whole_is_not_touched() -> None:
    """The budgets are checked for the whole unit again just before its first eviction."""
    w = World()
    low_pods, _, _ = w.contend()
    (order,) = w.take_orders()
    w.forbidden.add(low_pods[1].name)  # a budget changed since the victims were chosen
    evictor = FakeEvictor()
    Evictions(w.ledger, evictor, may_act=lambda: True, pause=lambda _s: None).run(order)
    assert evictor.calls == [] and w.events.of("GangPreemptionFailed")


def test_a_gang_kube_scheduler_rejects_before_the_extender_is_told_it_never_fits() -> None:
    """Members larger than any node: kube-scheduler's own resource filter rejects them, so no filter
    request plans the gang. The order's pass finds it (its members were tried) and says never, with the
    reason, instead of waiting for capacity or preempting for it."""
    w = World()
    w.gang("low", 4, "3", priority=1, on=NODES)
    big, _, _ = w.gang("big", 2, "6", priority=100, tried=True)
    w.tick()
    told = w.events.of("GangNeverFits")
    assert [sorted(names) for names, *_ in told] == [["big-0", "big-1"]], w.events.events
    assert "can never fit this cluster: only 0 of 2 members fit on 4 nodes" in told[0][3]
    assert w.victims() == [], "a gang that never fits preempted"
    answer = w.ledger.view.explain(big)
    assert answer["state"] == "NeverFits" and "can never fit" in answer["waiting"], answer
    w.tick(5)
    assert len(w.events.of("GangNeverFits")) == 1, "told again without a change"
    w.mirror.upsert_node(node("n5", cpu="8"))  # a node that holds one member: still never (two are needed)
    w.tick()
    assert w.ledger.view.explain(big)["state"] == "NeverFits"
    w.mirror.upsert_node(node("n6", cpu="8"))  # now two members fit an empty cluster
    w.tick()
    assert w.ledger.view.explain(big)["state"] != "NeverFits"

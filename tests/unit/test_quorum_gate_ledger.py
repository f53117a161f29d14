"""The quorum gate: which pods carrying ``gang-extender.io/quorum`` may go to kube-scheduler, and when.

The record reads the gate's index; the mirror keeps the gated pods; the ledger lets a gang's gated members
through when its quorum exists (as a member arrives, and in the walk the tick makes), a pod of no gang at
once; ``PodUngater`` writes each removal once at a time (no engine, no API server).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from extender.cluster.mirror import ClusterMirror
from extender.cluster.records import pod_record
from extender.gangs.ledger import GangLedger
from extender.kube.events import PodUngater
from extender.model.cluster import QUORUM_GATE, PodRecord
from extender.model.gang import GroupKind
from tests.builders import EventLog, FakeClock, coscheduling_podgroup, node, pod


def gated(raw: dict[str, Any], *others: str) -> dict[str, Any]:
    """``raw`` with scheduling gates ``others`` and then the quorum gate, as the admission policy leaves it."""
    raw["spec"]["schedulingGates"] = [{"name": g} for g in others] + [{"name": QUORUM_GATE}]
    return raw


def annotated(name: str, group: str, min_count: int) -> dict[str, Any]:
    return pod(name, annotations={"gang-extender.io/group": group, "gang-extender.io/min-count": str(min_count)})


class World:
    def __init__(self) -> None:
        self.mirror = ClusterMirror()
        self.ungated: list[list[str]] = []
        self.events = EventLog()
        self.ledger = GangLedger(self.mirror, clock=FakeClock(), on_event=self.events,
                                 on_ungate=lambda pods: self.ungated.append(sorted(p.name for p in pods)))
        self.statuses: list[tuple[str, str]] = []
        self.ledger.registry.on_status = lambda gang, status: self.statuses.append((gang.group.name, status.message))
        self.mirror.upsert_node(node("n1"))

    def walk(self) -> list[str]:
        """The names the tick's walk lets through now."""
        before = len(self.ungated)
        self.ledger.release_quorum_gated()
        return sorted(name for batch in self.ungated[before:] for name in batch)


def test_the_record_knows_where_the_gate_is() -> None:
    assert pod_record(gated(pod("a"), "other/gate")).quorum_gate == 1
    assert pod_record(gated(pod("a"))).quorum_gated
    assert not pod_record(pod("a")).quorum_gated
    other = pod("a")
    other["spec"]["schedulingGates"] = [{"name": "other/gate"}, "not a gate", None]
    assert pod_record(other).quorum_gate == -1
    bound = gated(pod("a", node="n1"))  # a bound pod has no gate to lift (the API server forbids both)
    assert not pod_record(bound).quorum_gated


def test_members_wait_until_the_quorum_exists_then_go_together() -> None:
    w = World()
    for i in range(2):
        w.mirror.upsert_pod(gated(annotated(f"a-{i}", "a", 3)))
    assert w.ungated == [] and w.walk() == []
    w.mirror.upsert_pod(gated(annotated("a-2", "a", 3)))
    assert w.ungated == [["a-0", "a-1", "a-2"]]


def test_a_member_not_gated_completing_the_quorum_lets_the_gated_ones_through() -> None:
    w = World()
    w.mirror.upsert_pod(gated(annotated("a-0", "a", 2)))
    w.mirror.upsert_pod(annotated("a-1", "a", 2))  # created before the policy was installed
    assert w.ungated == [["a-0"]]


def test_a_group_object_that_comes_after_its_pods_is_caught_by_the_walk() -> None:
    w = World()
    pods = [w.mirror.upsert_pod(gated(pod(f"g-{i}", pod_group="g"))) for i in range(2)]
    assert w.ungated == [] and w.walk() == []  # no PodGroup yet: the group is missing
    w.mirror.upsert_group(GroupKind.COSCHEDULING, coscheduling_podgroup("g", 2))
    assert w.walk() == sorted(p.name for p in pods)


def test_below_the_group_minimum_nothing_goes() -> None:
    w = World()
    w.mirror.upsert_group(GroupKind.COSCHEDULING, coscheduling_podgroup("g", 3))
    for i in range(2):
        w.mirror.upsert_pod(gated(pod(f"g-{i}", pod_group="g")))
    assert w.ungated == [] and w.walk() == []


def test_a_pod_of_no_gang_goes_at_once_and_a_lifted_gate_is_forgotten() -> None:
    w = World()
    lone = w.mirror.upsert_pod(gated(pod("lone")))
    assert w.walk() == ["lone"]
    w.mirror.upsert_pod({**pod("lone", uid=lone.uid)})  # the watch shows it without the gate
    assert w.walk() == []


def test_a_member_gone_before_the_quorum_leaves_the_rest_gated() -> None:
    w = World()
    first = w.mirror.upsert_pod(gated(annotated("a-0", "a", 2)))
    w.mirror.delete_pod(first.uid)
    w.mirror.upsert_pod(gated(annotated("a-1", "a", 2)))
    assert w.ungated == [] and w.walk() == []


class Removals:
    def __init__(self, fail: set[str] | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.fail = fail or set()
        self.release = threading.Event()
        self.release.set()

    def __call__(self, pod: PodRecord) -> bool:
        self.release.wait(5)
        self.calls.append((pod.name, pod.quorum_gate))
        if pod.name in self.fail:
            raise RuntimeError("422: the test operation failed")
        return not pod.name.startswith("follower")


def wait_until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)


def test_the_ungater_writes_each_pod_once_at_a_time_and_again_after_a_failure() -> None:
    removals = Removals(fail={"b"})
    removals.release.clear()
    removed: list[str] = []
    ungater = PodUngater(removals, removed.append, workers=2)
    try:
        a, b = pod_record(gated(pod("a"))), pod_record(gated(pod("b"), "x"))
        ungater.ungate([a, b])
        ungater.ungate([a, b])  # still queued or being written: not again
        removals.release.set()
        wait_until(lambda: ungater.sent + ungater.failed == 2)
        assert sorted(removals.calls) == [("a", 0), ("b", 1)] and ungater.failed == 1
        assert removed == [a.uid]  # told only of what it removed
        ungater.ungate([b])  # the walk finds it still gated
        wait_until(lambda: ungater.failed == 2)
        ungater.ungate([pod_record(pod("c"))])  # not gated: nothing to write
        follower = pod_record(gated(pod("follower-d")))
        ungater.ungate([follower])  # a replica that does not lead writes nothing and says so
        wait_until(lambda: ungater.skipped == 1)
        assert ungater.sent == 1 and removed == [a.uid]
        assert sorted(removals.calls) == [("a", 0), ("b", 1), ("b", 1), ("follower-d", 0)]
    finally:
        ungater.close()
    assert not ungater.alive  # every one of its writers stopped


def test_a_removed_gate_is_not_removed_again_before_the_watch_shows_it() -> None:
    w = World()
    raw = [gated(annotated(f"a-{i}", "a", 2)) for i in range(3)]
    first, second = (w.mirror.upsert_pod(r) for r in raw[:2])
    assert w.ungated == [["a-0", "a-1"]]
    w.mirror.gate_removed(first.uid)
    w.mirror.gate_removed(second.uid)
    w.mirror.upsert_pod({**raw[0], "spec": {**raw[0]["spec"], "priority": 5}})  # an older event, still gated
    w.mirror.upsert_pod(raw[2])  # a member beyond minCount: only itself to let through
    assert w.ungated == [["a-0", "a-1"], ["a-2"]]
    assert w.walk() == ["a-2"]
    w.mirror.upsert_pod({**raw[0], "spec": {**raw[0]["spec"], "schedulingGates": []}})  # the watch catches up
    w.mirror.upsert_pod({**raw[0], "spec": {**raw[0]["spec"], "schedulingGates": [{"name": QUORUM_GATE}]}})
    assert w.walk() == ["a-0", "a-2"]  # (the API server would refuse this)


def test_a_gang_short_of_its_quorum_is_told_why_with_no_filter_to_tell_it() -> None:
    w = World()
    w.mirror.upsert_group(GroupKind.COSCHEDULING, coscheduling_podgroup("g", 3))
    w.mirror.upsert_pod(gated(pod("g-0", pod_group="g")))
    assert w.walk() == []
    (told,) = w.events.of("GangWaiting")
    assert told[0] == ("g-0",) and "1/3 pods exist" in told[3], told
    assert w.statuses == [("g", told[3])]  # its PodGroup's status says it too
    assert w.walk() == [] and len(w.events.of("GangWaiting")) == 1 and len(w.statuses) == 1  # said once
    w.mirror.upsert_pod(gated(pod("g-1", pod_group="g")))
    assert w.walk() == [] and "2/3 pods exist" in w.events.of("GangWaiting")[-1][3]  # and again when it changes


def test_a_gated_pod_the_mirror_cannot_read_is_let_through_to_be_told_why() -> None:
    w = World()
    broken = pod("broken", annotations={"gang-extender.io/group": "g"})  # no min-count: a malformed gang link
    gated(broken)
    with pytest.raises(ValueError, match="min-count"):
        w.mirror.upsert_pod(broken)
    assert w.walk() == ["broken"]
    w.mirror.replace_pods([broken])  # a relist keeps it too (counted as rejected)
    assert w.walk() == ["broken"] and w.mirror.rejected_objects == 1
    ungated = {**broken, "spec": {k: v for k, v in broken["spec"].items() if k != "schedulingGates"}}
    with pytest.raises(ValueError, match="min-count"):
        w.mirror.upsert_pod(ungated)
    assert w.walk() == [] and w.mirror.pod("default", "broken") is None

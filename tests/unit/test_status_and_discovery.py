"""StatusWriter (off the hot path, latest wins, rate-limited, leaves other managers' status alone),
the status rendering (wiring/reporting.py), and GroupWatches (the newest served version of each group API,
followed as CRDs come and go)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from extender.cluster.groups import GROUP_APIS, GroupApi
from extender.cluster.mirror import ClusterMirror
from extender.errors import KubeError
from extender.kube.status import CONFLICT, SENT, SKIPPED, StatusWriter
from extender.model.gang import GangPhase, GangStatus, GroupKind, GroupRef
from extender.wiring.discovery import GroupWatches
from extender.wiring.reporting import status_writer
from tests.builders import FakeClock, coscheduling_podgroup, node, pod

PG = GroupRef(GroupKind.PODGROUP, "ml", "pg")
WAIT = GangStatus(GangPhase.WAITING, "waiting for gang ml/pg: 3/4 pods exist")
DONE = GangStatus(GangPhase.SCHEDULED, "bound")


def wait_until(condition: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


class Recorder:
    def __init__(self, answer: str = SENT) -> None:
        self.calls: list[tuple[GroupRef, GangStatus]] = []
        self.answer = answer
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, group: GroupRef, status: GangStatus) -> str:
        self.gate.wait(5)
        self.calls.append((group, status))
        if self.answer == "raise":
            raise KubeError("boom", 500)
        return self.answer


def writer(recorder: Recorder, **kwargs: Any) -> StatusWriter:
    kwargs.setdefault("per_second", 1000.0)
    kwargs.setdefault("min_interval", 0.0)
    return StatusWriter(recorder, **kwargs)


def test_equal_values_are_written_once() -> None:
    rec = Recorder()
    w = writer(rec)
    try:
        w.publish(PG, WAIT)
        wait_until(lambda: w.counts[SENT] == 1)
        w.publish(PG, WAIT)
        w.publish(PG, WAIT)
        time.sleep(0.05)
        assert rec.calls == [(PG, WAIT)]
        w.publish(PG, DONE)
        wait_until(lambda: w.counts[SENT] == 2)
    finally:
        w.close()


def test_latest_value_wins_while_a_write_is_due_later() -> None:
    rec = Recorder()
    clock = FakeClock(0.0)
    w = writer(rec, min_interval=5.0, clock=clock)
    try:
        w.publish(PG, GangStatus(GangPhase.WAITING, "first"))
        wait_until(lambda: len(rec.calls) == 1)
        for i in range(20):  # within the 5 s window: only the last one is written, once the window ends
            w.publish(PG, GangStatus(GangPhase.WAITING, f"waiting {i}"))
        time.sleep(0.05)
        assert len(rec.calls) == 1
        clock.advance(5.0)
        wait_until(lambda: len(rec.calls) == 2)
        assert rec.calls[-1][1].message == "waiting 19"
    finally:
        w.close()


def test_a_conflict_means_another_manager_owns_it_for_good() -> None:
    rec = Recorder(CONFLICT)
    w = writer(rec)
    try:
        w.publish(PG, WAIT)
        wait_until(lambda: w.counts[CONFLICT] == 1)
        w.publish(PG, DONE)
        time.sleep(0.05)
        assert len(rec.calls) == 1 and w.disowned() == {PG}
    finally:
        w.close()


def test_failures_are_counted_and_retried_on_the_next_change() -> None:
    rec = Recorder("raise")
    w = writer(rec)
    try:
        w.publish(PG, WAIT)
        wait_until(lambda: w.counts["failed"] == 1)
        w.publish(PG, WAIT)  # not remembered as written: tried again
        wait_until(lambda: w.counts["failed"] == 2)
    finally:
        w.close()


def test_publish_never_blocks_and_drops_beyond_capacity() -> None:
    rec = Recorder()
    rec.gate.clear()
    w = writer(rec, capacity=2)
    try:
        started = time.perf_counter()
        for i in range(10):
            w.publish(GroupRef(GroupKind.PODGROUP, "ml", f"g{i}"), WAIT)
        assert time.perf_counter() - started < 0.05
        assert w.counts["dropped"] >= 7
    finally:
        rec.gate.set()
        w.close()


# ------------------------------------------------------------------------------ rendering + apply
def podgroup(min_count: int, conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                           "metadata": {"name": "pg", "namespace": "ml"},
                           "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}
    if conditions:
        obj["status"] = {"conditions": conditions}
    return obj


def test_status_writer_renders_from_the_mirror_and_maps_api_errors() -> None:
    mirror = ClusterMirror()
    applied: list[dict[str, Any]] = []
    errors: list[KubeError] = []

    def apply(body: dict[str, Any]) -> None:
        if errors:
            raise errors.pop()
        applied.append(body)

    write = status_writer(mirror, apply, now=lambda: "2026-11-30T12:00:00Z")
    assert write(PG, WAIT) == SKIPPED  # no object in the mirror
    mirror.upsert_group(GroupKind.PODGROUP, podgroup(4))
    assert write(PG, WAIT) == SENT
    assert applied[-1]["status"]["conditions"][0]["type"] == "PodGroupInitiallyScheduled"
    errors.append(KubeError("conflict", 409))
    assert write(PG, DONE) == CONFLICT
    errors.append(KubeError("gone", 404))
    assert write(PG, DONE) == SKIPPED
    errors.append(KubeError("down", 503))
    with pytest.raises(KubeError):
        write(PG, DONE)
    mirror.upsert_group(GroupKind.PODGROUP, podgroup(4, [
        {"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": "",
         "lastTransitionTime": "2026-11-30T10:00:00Z"}]))
    assert write(PG, WAIT) == SKIPPED  # terminal once True


def test_coscheduling_status_counts_bound_members_from_the_mirror() -> None:
    mirror = ClusterMirror()
    mirror.upsert_node(node("n1"))
    mirror.upsert_group(GroupKind.COSCHEDULING, coscheduling_podgroup("pg", 2, namespace="ml"))
    mirror.upsert_pod(pod("a", namespace="ml", pod_group="pg", node="n1"))
    mirror.upsert_pod(pod("b", namespace="ml", pod_group="pg"))
    applied: list[dict[str, Any]] = []
    write = status_writer(mirror, applied.append)
    assert write(GroupRef(GroupKind.COSCHEDULING, "ml", "pg"), GangStatus(GangPhase.SCHEDULING, "x")) == SENT
    assert applied[-1]["status"] == {"phase": "Scheduling", "scheduled": 1}


# ------------------------------------------------------------------------------------ discovery
class FakeServer:
    def __init__(self) -> None:
        self.served: set[tuple[str, str, str]] = set()
        self.fail = False

    def serves(self, group: str, version: str, resource: str) -> bool:
        if self.fail:
            raise KubeError("discovery down", 503)
        return (group, version, resource) in self.served


class FakeReflector:
    def __init__(self, api: GroupApi, version: str) -> None:
        self.name, self.version, self.stopped = api.name, version, False
        self.synced = threading.Event()
        self.healthy, self.last_error = True, ""


def watches(server: FakeServer) -> tuple[GroupWatches, list[str]]:
    log: list[str] = []

    def start(api: GroupApi, version: str) -> Any:
        log.append(f"start {api.name}/{version}")
        return FakeReflector(api, version)

    def stop(api: GroupApi, reflector: Any) -> None:
        reflector.stopped = True
        log.append(f"stop {api.name}/{reflector.version}")

    return GroupWatches(server.serves, start, stop), log


def test_discovery_follows_apis_as_they_appear_change_and_disappear() -> None:
    server = FakeServer()
    w, log = watches(server)
    assert w.discover() == [] and w.reflectors() == []
    server.served = {("scheduling.x-k8s.io", "v1alpha1", "podgroups")}  # CRD installed later
    assert w.discover() == ["+podgroups.scheduling.x-k8s.io/v1alpha1"]
    server.served |= {("scheduling.k8s.io", "v1alpha3", "podgroups")}
    assert w.discover() == ["+podgroups.scheduling.k8s.io/v1alpha3"]
    assert w.discover() == []  # nothing changed: no restart
    server.served |= {("scheduling.k8s.io", "v1beta1", "podgroups")}  # a newer version: switch to it
    assert w.discover() == ["-podgroups.scheduling.k8s.io/v1alpha3", "+podgroups.scheduling.k8s.io/v1beta1"]
    assert w.versions() == {"podgroups.scheduling.k8s.io": "v1beta1", "podgroups.scheduling.x-k8s.io": "v1alpha1"}
    server.served -= {("scheduling.x-k8s.io", "v1alpha1", "podgroups")}  # CRD removed
    assert w.discover() == ["-podgroups.scheduling.x-k8s.io/v1alpha1"]
    assert [r.name for r in w.reflectors()] == ["podgroups.scheduling.k8s.io"]
    assert log == ["start podgroups.scheduling.x-k8s.io/v1alpha1", "start podgroups.scheduling.k8s.io/v1alpha3",
                   "stop podgroups.scheduling.k8s.io/v1alpha3", "start podgroups.scheduling.k8s.io/v1beta1",
                   "stop podgroups.scheduling.x-k8s.io/v1alpha1"]


def test_failed_discovery_keeps_the_current_watches() -> None:
    server = FakeServer()
    server.served = {("scheduling.k8s.io", "v1alpha1", "workloads")}
    w, log = watches(server)
    assert w.discover() == ["+workloads.scheduling.k8s.io/v1alpha1"]
    server.fail = True
    with pytest.raises(KubeError):
        w.discover()
    assert w.versions() == {"workloads.scheduling.k8s.io": "v1alpha1"} and len(log) == 1


def test_every_api_is_asked_newest_version_first() -> None:
    asked: list[str] = []

    def serves(group: str, version: str, resource: str) -> bool:
        asked.append(f"{resource}.{group}/{version}")
        return False

    GroupWatches(serves, lambda api, v: None, lambda api, r: None).discover()  # type: ignore[arg-type,return-value]
    assert asked == ["workloads.scheduling.k8s.io/v1alpha1", "podgroups.scheduling.k8s.io/v1beta1",
                     "podgroups.scheduling.k8s.io/v1alpha3", "podgroups.scheduling.k8s.io/v1alpha2",
                     "podgroups.scheduling.x-k8s.io/v1alpha1"]
    assert len(GROUP_APIS) == 3


def test_gang_waiting_events_ignore_changing_counts() -> None:
    from extender.cluster.records import pod_record
    from extender.kube.events import EventRecorder

    sent: list[str] = []
    clock = FakeClock()
    recorder = EventRecorder(lambda pod, kind, reason, message: sent.append(message), per_second=1000.0,
                             clock=clock)
    try:
        member = pod_record(pod("m", pod_group="g"))
        recorder.record([member], "Normal", "GangWaiting", "waiting for gang default/g: 1/3 pods exist")
        recorder.record([member], "Normal", "GangWaiting", "waiting for gang default/g: 2/3 pods exist")  # repeat
        recorder.record([member], "Normal", "GangWaiting", "waiting for capacity for gang default/g: 1/3 fit")
        recorder.record([member], "Warning", "GangTimeout", "gang timed out after 1s")
        recorder.record([member], "Warning", "GangTimeout", "gang timed out after 2s")  # other reasons: exact
        wait_until(lambda: len(sent) == 4)
        clock.advance(60)
        recorder.record([member], "Normal", "GangWaiting", "waiting for gang default/g: 2/3 pods exist")
        wait_until(lambda: len(sent) == 5)
        assert sent[0].endswith("1/3 pods exist") and sent[-1].endswith("2/3 pods exist")
    finally:
        recorder.close()


def test_gang_events_go_once_per_gang_to_its_group_object() -> None:
    from extender.cluster.records import pod_record
    from extender.wiring.reporting import gang_event_targets
    from tests.builders import workload

    mirror = ClusterMirror()
    train = workload("train", {"workers": 2})
    train["metadata"]["uid"] = "w-uid"
    mirror.upsert_group(GroupKind.WORKLOAD, train)
    workers = [mirror.upsert_pod(pod(f"w-{i}", workload="train", pod_group="workers")) for i in range(2)]
    annotated = [mirror.upsert_pod(pod(name, annotations={"gang-extender.io/group": "job",
                                                          "gang-extender.io/min-count": "3"}))
                 for name in ("job-b", "job-a")]
    late = pod_record(pod("job-0", annotations={"gang-extender.io/group": "job",
                                                "gang-extender.io/min-count": "3"}))  # not mirrored yet
    plain = mirror.upsert_pod(pod("plain"))

    assert gang_event_targets(mirror, [*workers, annotated[0], plain]) == [
        {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "namespace": "default",
         "name": "train", "uid": "w-uid"},
        # no group object: the member with the first name (the mirror's, or one of the pods named)
        {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "job-a", "uid": annotated[1].uid},
        {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "plain", "uid": plain.uid},
    ]
    assert gang_event_targets(mirror, [late])[0]["name"] == "job-0"
    # a scheduler-plugins PodGroup the mirror has not seen yet: no object to write on, so a member
    member = mirror.upsert_pod(pod("c-0", pod_group="unseen"))
    assert gang_event_targets(mirror, [member])[0]["kind"] == "Pod"
    mirror.upsert_group(GroupKind.COSCHEDULING, coscheduling_podgroup("unseen", 2))
    assert gang_event_targets(mirror, [member])[0] == {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "namespace": "default", "name": "unseen",
        "uid": ""}

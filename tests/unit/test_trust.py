"""Issue 11's reproductions, at the engine: each failed on e660568.

1. a held bind outlived kube-scheduler's httpTimeout (gang timeouts above it, time queued not counted);
2. a release did not re-check room after another binder filled a node;
3. the request was trusted for facts (invented nodes learned, bind checked no predicates nor scheduler);
4. cache state was kept for invented node names;
5. a frozen mirror kept answering after a watch outage.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extender.cluster.signature import signature
from extender.config import Settings
from extender.engine.filtering import REPLY_MESSAGES
from extender.errors import ProtocolError
from extender.gangs.ledger import BindAction
from extender.http.protocol import MAX_NODES_PER_REQUEST, parse_filter_args
from extender.kube.watching import Reflector
from extender.wiring.composition import from_snapshot
from extender.wiring.runtime import Runtime
from tests.builders import (
    Harness,
    bind_args,
    coscheduling_podgroup,
    filter_args,
    make_engine,
    node,
    pod,
    slots_of,
)

NODES4 = ["n1", "n2", "n3", "n4"]


@pytest.fixture
def h(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """The harness (``indirect`` parameters: more ``make_engine`` settings)."""
    # the ledger holds a bind 29 s (httpTimeout 30 s less 1 s)
    harness = make_engine(**{"timeout_seconds": 20.0, **getattr(request, "param", {})})
    harness.add(*(node(name, cpu="4") for name in NODES4))
    yield harness
    harness.close()


def gang(h: Harness, name: str = "a", size: int = 4, timeout: int | None = None) -> list[dict[str, Any]]:
    members = [pod(f"{name}-{i}", cpu="3", pod_group=name) for i in range(size)]
    h.add(coscheduling_podgroup(name, size, timeout), *members)
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible  # admitted
    return members


class Binds:
    """engine.bind in threads (held binds block); answers by pod name."""

    def __init__(self, harness: Harness) -> None:
        self.harness, self.results, self.threads = harness, {}, []  # type: ignore[var-annotated]

    def start(self, raw: dict[str, Any], target: str, arrival: float | None = None) -> None:
        name = raw["metadata"]["name"]

        def run() -> None:
            self.results[name] = self.harness.engine.bind(bind_args(raw, target), arrival)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> dict[str, str]:
        for thread in self.threads:
            thread.join(5)
            assert not thread.is_alive(), "a bind is still held"
        self.threads = []
        return dict(self.results)


def held(h: Harness, count: int) -> None:
    deadline = time.monotonic() + 5
    while h.ledger.view.held_count() != count:
        assert time.monotonic() < deadline, f"{h.ledger.view.held_count()} held, expected {count}"
        time.sleep(0.002)


def hold_first_three(h: Harness, members: list[dict[str, Any]]) -> Binds:
    """Binds for the first three members on n1..n3, held at the barrier (the fourth completes it)."""
    binds = Binds(h)
    for member, target in zip(members[:3], NODES4, strict=False):
        binds.start(member, target)
    held(h, 3)
    return binds


# ------------------------------------------------------------------- 1. no hold past httpTimeout
def test_a_long_gang_timeout_never_holds_a_bind_past_the_http_timeout(h: Harness) -> None:
    a = gang(h, timeout=600)  # scheduleTimeoutSeconds 600: the gang may wait 10 minutes, one hold may not
    binds = hold_first_three(h, a)
    h.clock.advance(28.9)
    h.ledger.sweep()
    assert h.ledger.view.held_count() == 3
    h.clock.advance(0.2)  # 29.1 s: kube-scheduler gives up at 30
    h.ledger.sweep()
    answers = binds.join()
    assert set(answers) == {"a-0", "a-1", "a-2"} and all("still gathering members" in m for m in answers.values())
    assert h.binder.calls == [] and h.ledger.view.counters()["timeouts"] == 0
    # The retries are held again (not "already waiting") and the gang completes in its attempt.
    h.clock.advance(60)
    for member, target in zip(a, NODES4, strict=True):
        binds.start(member, target)
    assert binds.join() == dict.fromkeys(("a-0", "a-1", "a-2", "a-3"), "")
    assert h.binder.bound_names == ["a-0", "a-1", "a-2", "a-3"]


def test_time_queued_before_the_handler_counts(h: Harness) -> None:
    a = gang(h)
    binds = Binds(h)
    binds.start(a[0], "n1", arrival=h.clock.now - 20)  # waited 20 s for a thread before the handler ran
    held(h, 1)
    h.clock.advance(9)
    h.ledger.sweep()
    assert "still gathering members" in binds.join()["a-0"]
    late = h.engine.bind(bind_args(a[1], "n2"), h.clock.now - 29)
    assert "too late to be held" in late and h.ledger.view.held_count() == 0


def test_a_quorum_is_not_released_with_a_hold_out_of_time(h: Harness) -> None:
    a = gang(h)
    records = [h.mirror.pod("default", m["metadata"]["name"]) for m in a]
    policy = h.mirror.gang_policy(records[0].gang)[1]  # type: ignore[union-attr,arg-type]
    early = [h.ledger.on_bind(r, n, policy) for r, n in zip(records[:3], NODES4, strict=False)]  # type: ignore[arg-type]
    h.clock.advance(29.5)  # overdue, but no sweep has answered them yet
    last = h.ledger.on_bind(records[3], "n4", policy)  # type: ignore[arg-type]
    assert last.action is BindAction.REJECT, "no Binding may be sent for a request kube-scheduler gave up on"
    assert "all of its held binds are answered together" in last.error
    assert all(d.hold is not None and d.hold.answered and d.hold.result == last.error for d in early)
    assert h.binder.calls == []


def test_a_quorum_is_not_released_with_a_hold_that_has_too_little_time_left_for_the_release(h: Harness) -> None:
    """Issue 26, finding 2: a hold counted as overdue only at its answer-by time, so a release could start
    with 0.1 s left on one hold, spend 0.7 s writing its intent, skip that member and bind the others. A
    release starts only with the margin the recent releases needed left on every hold (twice the slowest),
    else the gang's holds are all answered and come back together."""
    a = gang(h)
    records = [h.mirror.pod("default", m["metadata"]["name"]) for m in a]
    policy = h.mirror.gang_policy(records[0].gang)[1]  # type: ignore[union-attr,arg-type]
    h.ledger.release_took(0.7)  # the last release took 0.7 s: the margin is 1.4 s
    early = [h.ledger.on_bind(r, n, policy) for r, n in zip(records[:3], NODES4, strict=False)]  # type: ignore[arg-type]
    h.clock.advance(27.7)  # 1.3 s left on the first three: not enough
    last = h.ledger.on_bind(records[3], "n4", policy)  # type: ignore[arg-type]
    assert last.action is BindAction.REJECT and "less than 1.4s left" in last.error
    assert all(d.hold is not None and d.hold.answered for d in early) and h.ledger.view.held_count() == 0
    assert len(slots_of(h.ledger, records[0].gang)) == 4  # type: ignore[arg-type]  # every place kept
    again = [h.ledger.on_bind(r, n, policy) for r, n in zip(records, NODES4, strict=True)]  # type: ignore[arg-type]
    assert again[-1].action is BindAction.RELEASE  # back together: full time left


def test_the_answer_margin_bounds_each_binding_of_a_release(h: Harness) -> None:
    a = gang(h)
    binds = hold_first_three(h, a)
    h.clock.advance(20)
    binds.start(a[3], "n4")
    assert binds.join() == dict.fromkeys(("a-0", "a-1", "a-2", "a-3"), "")
    timeouts = sorted(h.binder.timeouts.values())
    assert timeouts == pytest.approx([9.5, 9.5, 9.5, 29.5]), "each Binding ends before its own request's timeout"


@pytest.mark.parametrize("h", [{"time_left": lambda: 4.0}], indirect=True)
def test_no_binding_of_a_release_outlives_the_leadership(h: Harness) -> None:
    """Issue 26, finding 5: a Binding's timeout came from its hold (up to ~29.5 s), not from the
    leadership, so a leader that paused, or whose connection hung, past a takeover could still bind after
    the new leader placed other pods there. Each Binding's timeout is the earlier of the two."""
    a = gang(h)
    binds = hold_first_three(h, a)
    binds.start(a[3], "n4")
    assert binds.join() == dict.fromkeys(("a-0", "a-1", "a-2", "a-3"), "")
    assert sorted(h.binder.timeouts.values()) == pytest.approx([4.0] * 4), "cut to the leadership's time left"


@pytest.mark.parametrize("h", [{"time_left": lambda: -0.5}], indirect=True)
def test_a_replica_whose_leadership_ran_out_sends_no_binding(h: Harness) -> None:
    plain = pod("web")
    h.add(plain)
    assert "lost its leadership" in h.engine.bind(bind_args(plain, "n1"))
    assert h.binder.calls == []


# ------------------------------------------------------------------- 2. room re-checked at release
def test_a_release_rechecks_room_and_binds_nothing_on_an_overcommitted_node(h: Harness) -> None:
    a = gang(h)
    binds = hold_first_three(h, a)
    h.add(pod("intruder", cpu="2", node="n1"))  # bound by another scheduler onto n1 (a-0 holds 3 of its 4 cpu)
    binds.start(a[3], "n4")
    answers = binds.join()
    assert h.binder.calls == [], "no member of the gang is bound"
    assert set(answers) == {"a-0", "a-1", "a-2", "a-3"}
    assert all("was not released: member default/a-0: node n1 is over-committed in cpu" in m for m in answers.values())
    assert h.ledger.view.counters()["releases_aborted"] == 1 and h.ledger.view.admitted_count() == 0
    assert h.events.of("GangReleaseAborted")[0][0] == ("a-0", "a-1", "a-2", "a-3")
    assert all(h.mirror.placement(m["metadata"]["uid"]) == "" for m in a)
    assert h.mirror.reservation(h.mirror.pod("default", "a-0").gang) == {}  # type: ignore[union-attr,arg-type]
    # planned again against the cluster as it is: n1 has 2 cpu left, so a 3-cpu member avoids it
    replan = h.engine.filter(filter_args(a[0], NODES4))
    assert "n1" not in replan.feasible


def test_a_release_rechecks_taints_added_while_held(h: Harness) -> None:
    a = gang(h)
    binds = hold_first_three(h, a)
    h.add(node("n2", cpu="4", taints=[{"key": "maintenance", "value": "", "effect": "NoSchedule"}]))
    binds.start(a[3], "n4")
    answers = binds.join()
    assert h.binder.calls == []
    assert "member default/a-1 no longer fits node n2: node has untolerated taint maintenance" in answers["a-3"]


# ------------------------------------------------------------------- 3. nothing learned from a request
def test_bind_rechecks_the_predicates_and_the_node(h: Harness) -> None:
    h.add(node("tainted", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
          node("labelled", labels={"pool": "cpu"}))
    plain = pod("web")
    picky = pod("picky", node_selector={"pool": "gpu"})
    h.add(plain, picky)
    assert h.engine.bind(bind_args(plain, "ghost")) == "node ghost is not known to the extender"
    assert h.engine.bind(bind_args(plain, "tainted")) == (
        "pod default/web does not fit node tainted: node has untolerated taint gpu=true:NoSchedule")
    assert h.engine.bind(bind_args(picky, "labelled")) == (
        "pod default/picky does not fit node labelled: node does not match the pod's nodeSelector")
    assert h.binder.calls == []
    assert h.engine.bind(bind_args(plain, "n1")) == ""


@pytest.mark.parametrize("h", [{"scheduler_names": frozenset({"gang-scheduler"})}], indirect=True)
def test_bind_refuses_pods_of_other_schedulers(h: Harness) -> None:
    mine, theirs = pod("mine", scheduler_name="gang-scheduler"), pod("theirs", scheduler_name="other")
    h.add(mine, theirs)
    assert h.engine.bind(bind_args(theirs, "n1")) == (
        "pod default/theirs has schedulerName 'other', which gang-extender does not serve "
        "(--scheduler-names gang-scheduler)")
    assert h.engine.bind(bind_args(mine, "n1")) == ""
    assert h.binder.bound_names == ["mine"]


def test_filter_keeps_no_state_for_invented_node_names(h: Harness) -> None:
    web = pod("web")
    invented = [f"ghost-{i}" for i in range(20)]
    result = h.engine.filter(filter_args(web, ["n1", *invented]))
    assert result.feasible == ["n1"] and set(result.failed) == set(invented)
    entry = h.cache.get(signature(web))  # type: ignore[arg-type]
    assert entry is not None and set(entry.verdicts) == {"n1"}, "no cache state for names the mirror does not know"
    h.mirror.delete_node("n1")
    h.engine.filter(filter_args(web, ["n1"]))
    assert h.cache.get(signature(web)).verdicts == {}  # type: ignore[arg-type,union-attr]


# ------------------------------------------------------------------- 5. a stale mirror answers Error
def snapshot_runtime(tmp_path: Path, *objects: dict[str, Any]) -> Runtime:
    """A runtime over a snapshot of ``objects``, with the shipped 10 s stale-watch limit."""
    snapshot = tmp_path / "s.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))
    return from_snapshot(Settings(cluster_snapshot=str(snapshot), watch_stale_seconds=10))


def test_a_core_watch_failing_too_long_stops_the_verbs_and_answers_held_binds(tmp_path: Path) -> None:
    runtime = snapshot_runtime(tmp_path, node("n1"), coscheduling_podgroup("a", 2), pod("a-0", pod_group="a"),
                               pod("a-1", pod_group="a"))
    stop = threading.Event()

    class Listing(list[dict[str, Any]]):
        resource_version = "1"

    lists: list[int] = []

    def listing() -> Listing:  # the first list succeeds, then the API server is gone
        lists.append(1)
        if len(lists) > 1:
            raise ConnectionRefusedError("the API server vanished")
        return Listing()

    def watch(version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        raise ConnectionRefusedError("the API server vanished")

    pods = Reflector("pods", listing, watch, lambda items: None, lambda kind, obj: None, stop, initial_backoff=0.01)
    try:
        runtime.core_reflectors = [pods]
        assert runtime.serving_problem() == ""
        pods.start()
        deadline = time.monotonic() + 5
        while pods.failing_since is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = pods.failing_since
        assert runtime.stale_problem(started + 9) == "", "a short outage is ridden out"
        result: list[str] = []
        a0 = runtime.mirror.pod("default", "a-0")
        thread = threading.Thread(target=lambda: result.append(runtime.engine.bind(bind_args(
            {"metadata": {"name": "a-0", "namespace": "default", "uid": a0.uid}}, "n1"))))  # type: ignore[union-attr]
        thread.start()
        while runtime.ledger.view.held_count() != 1:
            time.sleep(0.002)
        assert runtime.answer_held_if_stale(started + 9) == 0
        assert runtime.answer_held_if_stale(started + 11) == 1
        thread.join(5)
        assert result and result[0].startswith("gang-extender's pods watch has been failing for 11s (the API server")
        assert runtime.serving_problem(started + 11).startswith("gang-extender's pods watch has been failing")
        assert runtime.serving_problem(started + 9) == ""
    finally:
        stop.set()
        runtime.close()


# ------------------------------------------------------------------- 4. bounded replies
def test_a_reply_stays_small_whatever_the_request_repeats(h: Harness) -> None:
    """One reason repeated for every requested name made a ~600 MB reply from a 4 MiB request."""
    forged = pod("forged", annotations={"gang-extender.io/group": "g", "gang-extender.io/min-count": "x" * 2000})
    names = [f"n{i}" for i in range(MAX_NODES_PER_REQUEST)]
    result = h.engine.filter(filter_args(forged, names))
    reasons = {**result.failed, **result.failed_unresolvable}
    assert len(reasons) == len(names) and sum(map(len, reasons.values())) <= REPLY_MESSAGES
    assert all(reason.startswith("invalid gang") for reason in reasons.values())
    body = {"Pod": forged, "NodeNames": [*names, "one-more"]}
    with pytest.raises(ProtocolError, match=f"at most {MAX_NODES_PER_REQUEST}"):
        parse_filter_args(body)


def test_a_member_whose_binding_failed_keeps_its_place(h: Harness) -> None:
    """A Binding cannot be undone: after a partial release the failed member's room stays reserved, so
    nothing else takes it and the gang completes when kube-scheduler retries the member."""
    a = gang(h)
    h.binder.fail["a-2"] = "etcd timeout"
    binds = Binds(h)
    for member, target in zip(a, NODES4, strict=True):
        binds.start(member, target)
    answers = binds.join()
    placed = [m["metadata"]["name"] for m in a if h.mirror.placement(m["metadata"]["uid"])]
    assert answers["a-2"].endswith("failed: etcd timeout") and placed == ["a-0", "a-1", "a-3"]
    key_ = h.mirror.pod("default", "a-0").gang  # type: ignore[union-attr]
    assert h.mirror.reservation(key_) == {"n3": {"cpu": 3000, "memory": 2**30, "pods": 1}}  # type: ignore[arg-type]
    intruder = pod("intruder", cpu="2")
    h.add(intruder)
    assert "n3" not in h.engine.filter(filter_args(intruder, NODES4)).feasible
    del h.binder.fail["a-2"]
    assert h.engine.filter(filter_args(a[2], NODES4)).feasible == ["n3"]  # steered back to its place
    assert h.engine.bind(bind_args(a[2], "n3")) == "" and h.mirror.placement(a[2]["metadata"]["uid"]) == "n3"


def test_a_silent_api_server_is_noticed_by_the_probe(tmp_path: Path) -> None:
    """A black-holed API server leaves a watch connection open and silent for minutes: no watch error,
    so a cheap probe is what turns the verbs to Error."""
    runtime = snapshot_runtime(tmp_path, node("n1"))
    answers = iter([None, TimeoutError("read timed out")] + [TimeoutError("read timed out")] * 1000)

    def probe() -> None:
        failure = next(answers)
        if failure is not None:
            raise failure

    thread = threading.Thread(target=runtime.probe_api, args=(probe, 0.01), daemon=True)
    try:
        thread.start()
        deadline = time.monotonic() + 5
        while runtime.api_failing_since is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        since = runtime.api_failing_since
        assert runtime.stale_problem(since + 9) == ""
        assert runtime.stale_problem(since + 11).startswith("the API server has not answered gang-extender for 11s")
    finally:
        runtime.close()
        thread.join(5)


@pytest.mark.parametrize("h", [{"max_release_members": 3}], indirect=True)  # --leader-election on: a release
def test_a_gang_too_large_for_a_release_intent_fails_fast(h: Harness) -> None:  # must fit on the Lease
    members = [pod(f"a-{i}", cpu="3", pod_group="a") for i in range(4)]
    h.add(coscheduling_podgroup("a", 4), *members)
    result = h.engine.filter(filter_args(members[0], NODES4))
    assert result.feasible == [] and set(result.failed_unresolvable) == set(NODES4)
    assert "holds at most 3: raise --release-intents-max-bytes" in result.failed_unresolvable["n1"]


# ------------------------------------------------- the pod of a filter, as the watch read it
def test_a_request_claiming_the_version_the_watch_read_is_answered_for_the_pod_the_api_server_has(h: Harness) -> None:
    """The filter takes the record and signature the pod watch read from the pod's version, not the request's
    copy: a request that claims that version with another spec is answered for the real pod, and leaves no
    cache entry under its own spec's signature."""
    real = pod("web", cpu="1")
    h.add(real)
    forged = copy.deepcopy(real)
    forged["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"  # fits no 4-cpu node
    assert h.engine.filter(filter_args(forged, NODES4)).feasible == NODES4
    assert h.cache.get(signature(forged)) is None  # type: ignore[arg-type]
    assert h.cache.get(signature(real)) is not None  # type: ignore[arg-type]
    forged["metadata"]["resourceVersion"] = "a version the mirror does not hold"  # read from the request, as ever
    result = h.engine.filter(filter_args(forged, NODES4))
    assert result.feasible == [] and set(result.failed) == set(NODES4)


def test_a_request_claiming_the_watched_version_cannot_poison_the_real_pods_verdicts(h: Harness) -> None:
    """Placement fields too come from the watch's read: a request that claims the version with a nodeSelector
    no node matches is answered for the real pod, and the real pod's cached verdicts stay right."""
    real, twin = pod("web", cpu="1"), pod("web-twin", cpu="1")  # same spec, so the same signature
    h.add(real, twin)
    forged = copy.deepcopy(real)
    forged["spec"]["nodeSelector"] = {"nope": "x"}
    assert h.engine.filter(filter_args(forged, NODES4)).feasible == NODES4
    assert h.engine.filter(filter_args(twin, NODES4)).feasible == NODES4
    assert h.engine.filter(filter_args(real, NODES4)).feasible == NODES4

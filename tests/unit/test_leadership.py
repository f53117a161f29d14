"""Leadership wired to the engine: the replica kube-scheduler calls is the one that leads; a release is
written on the Lease before its first Binding and not started when it cannot be; a replica deposed
midway stops binding; the next leader lets the rest of an open release through at the next bind."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extender.config import Settings
from extender.kube.intents import ReleaseIntents
from extender.kube.leader import LeaderElector
from extender.kube.lease import ElectionConfig
from extender.wiring.composition import from_snapshot
from extender.wiring.leadership import NOT_LEADER, PENDING_IDLE_SECONDS, Leadership
from tests.builders import (
    Harness,
    bind_args,
    coscheduling_podgroup,
    filter_args,
    gang_key,
    make_engine,
    node,
    pod,
    wait_until,
)
from tests.lease_fake import Clock, FakeLeases

CONFIG = ElectionConfig("ns", "lease", lease_duration=15, renew_deadline=10, retry_period=2)
NODES4 = ["n1", "n2", "n3", "n4"]


class Replica:
    """An engine harness whose release log is the intents on an elector's Lease, campaigning while called."""

    def __init__(self, server: FakeLeases, clock: Clock, name: str) -> None:
        self.h = make_engine(bind_parallelism=1)  # a release's Bindings one after another
        self.h.add(*(node(n) for n in NODES4))
        self.leadership = Leadership(CONFIG.lease_duration, self.h.ledger.view, self.h.mirror,
                                     self.h.engine.let_through, clock=clock)
        self.elector = LeaderElector(server.client(), CONFIG, name, clock=clock, eligible=self.leadership.eligible,
                                     on_started=self.leadership.gained)
        self.intents = ReleaseIntents(self.elector)
        self.leadership.attach(self.elector, self.intents)
        self.h.engine.binding.release_log = self.intents
        self.h.engine.binding.may_act = self.elector.is_leader


@pytest.fixture
def world() -> Iterator[tuple[FakeLeases, Clock]]:
    yield FakeLeases(), Clock()


def test_only_the_called_replica_competes_and_an_idle_leader_hands_the_lease_back(
        world: tuple[FakeLeases, Clock]) -> None:
    server, clock = world
    a, b = Replica(server, clock, "a"), Replica(server, clock, "b")
    try:
        for _ in range(3):
            a.elector.step(), b.elector.step()
        assert not a.elector.is_leader() and not b.elector.is_leader(), "nobody called: nobody leads"
        b.leadership.called()
        b.elector.step()
        assert b.elector.is_leader() and not a.elector.is_leader()
        for _ in range(10):  # called and renewing every retry period
            clock.now += 2
            b.leadership.called()
            b.elector.step()
            assert b.elector.is_leader()
        for _ in range(7):  # no call for 14 s: still leading (renewing)
            clock.now += 2
            b.elector.step()
            assert b.elector.is_leader()
        clock.now += 2  # not called for longer than the lease duration: its scheduler stopped leading
        b.elector.step()
        assert not b.elector.is_leader() and b.elector.holder == ""
        a.leadership.called()
        a.elector.step()
        assert a.elector.is_leader(), "a released Lease is taken at once"
    finally:
        a.h.close(), b.h.close()


def gang(h: Harness) -> list[dict[str, Any]]:
    members = [pod(f"a-{i}", cpu="3", pod_group="a") for i in range(4)]
    h.add(coscheduling_podgroup("a", 4), *members)
    assert h.engine.filter(filter_args(members[0], NODES4)).feasible
    return members


def bind_all(h: Harness, members: list[dict[str, Any]]) -> dict[str, str]:
    results: dict[str, str] = {}
    threads = [threading.Thread(target=lambda m=m, n=n: results.__setitem__(m["metadata"]["name"], h.engine.bind(
        bind_args(m, n))), daemon=True) for m, n in zip(members, NODES4, strict=True)]
    for thread in threads:
        thread.start()
        time.sleep(0.01)
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()
    return results


def test_a_release_is_on_the_lease_before_its_first_binding(world: tuple[FakeLeases, Clock]) -> None:
    server, clock = world
    r = Replica(server, clock, "a")
    try:
        r.leadership.called()
        r.elector.step()
        seen: list[str] = []
        original = r.h.binder.bind

        def bind(namespace: str, name: str, uid: str, node_name: str, timeout: float = 10.0) -> None:
            seen.append(server.lease()["metadata"]["annotations"]["gang-extender.io/releases"])
            original(namespace, name, uid, node_name, timeout)

        r.h.binder.bind = bind  # type: ignore[method-assign]
        assert bind_all(r.h, gang(r.h)) == dict.fromkeys(("a-0", "a-1", "a-2", "a-3"), "")
        written = '"gang":{"kind":"PodGroup.x-k8s.io","namespace":"default","name":"a"'
        assert len(seen) == 4 and all(written in value for value in seen)
        wait_until(lambda: '"open":[]' in server.lease()["metadata"]["annotations"]["gang-extender.io/releases"],
                   what="the release's intent cleared from the Lease (in the background, after the answers)")
    finally:
        r.h.close()


def test_a_replica_that_is_not_the_leader_starts_no_release(world: tuple[FakeLeases, Clock]) -> None:
    server, clock = world
    r = Replica(server, clock, "a")  # never elected
    try:
        answers = bind_all(r.h, gang(r.h))
        assert r.h.binder.calls == []
        assert all("was not released" in a and "not the leader" in a for a in answers.values())
    finally:
        r.h.close()


def test_a_leader_deposed_midway_stops_binding_and_the_next_lets_the_rest_through(
        world: tuple[FakeLeases, Clock]) -> None:
    server, clock = world
    a, b = Replica(server, clock, "a"), Replica(server, clock, "b")
    try:
        a.leadership.called()
        a.elector.step()
        members = gang(a.h)
        a.h.binder.gate.clear()  # the release's Bindings block
        results: dict[str, str] = {}
        threads = [threading.Thread(target=lambda m=m, n=n: results.__setitem__(m["metadata"]["name"], a.h.engine.bind(
            bind_args(m, n))), daemon=True) for m, n in zip(members, NODES4, strict=True)]
        for thread in threads:
            thread.start()
        assert a.h.binder.entered.acquire(timeout=5)  # the first Binding is in flight
        clock.now += CONFIG.renew_deadline + 0.1  # a's renewals stopped (partition): it no longer leads
        a.h.binder.gate.set()
        for thread in threads:
            thread.join(5)
        bound = a.h.binder.bound_names
        assert len(bound) == 1, "a partial release: the deposed leader stopped binding after the one in flight"
        assert sum("lost its leadership" in v for v in results.values()) == 4 - len(bound)
        # b takes over after the lease duration and lets the rest through at their next bind
        b.h.add(coscheduling_podgroup("a", 4))
        for member in members:  # b's mirror, as its pod watch reports it
            b.h.add({**member, "spec": {**member["spec"], **({"nodeName": "n1"} if member["metadata"]["name"] in bound
                                                            else {})}})
        b.leadership.called()
        b.elector.step()  # sees a's Lease, unchanged since a's last renewal
        clock.now += CONFIG.lease_duration
        b.elector.step()
        assert b.elector.is_leader() and [str(r.gang) for r in b.intents.unfinished] == ["default/a"]
        stop = threading.Event()
        threading.Thread(target=b.leadership.resume_when_listed, args=(lambda: True, stop), daemon=True).start()
        deadline = time.monotonic() + 5
        while not b.h.events.of("GangReleaseResumed"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        rest = [m for m in members if m["metadata"]["name"] not in bound]
        answers: list[str] = []
        worker = threading.Thread(target=lambda: answers.extend(  # without the approval they would be held
            b.h.engine.bind(bind_args(m, ["n2", "n3", "n4"][i])) for i, m in enumerate(rest)), daemon=True)
        worker.start()
        worker.join(5)
        assert answers == [""] * len(rest), "each passed the barrier at once"
        assert b.h.binder.bound_names == sorted(m["metadata"]["name"] for m in rest), "no barrier for them"
        assert [str(r.gang) for r in b.intents.unfinished] == ["default/a"], "open until its members are bound"
        for i, member in enumerate(rest):  # the pod watch reports them bound
            b.h.add({**member, "spec": {**member["spec"], "nodeName": ["n2", "n3", "n4"][i]}})
        deadline = time.monotonic() + 5
        while b.intents.unfinished:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stop.set()
    finally:
        a.h.close(), b.h.close()


def test_a_takeover_drops_a_release_whose_leader_bound_nothing_and_the_gang_forms_again(
        world: tuple[FakeLeases, Clock]) -> None:
    """Issue 26, finding 3: the new leader let every unbound member of an open release through the barrier,
    even when the old leader had bound none (its intent was written, then no Binding was made), so the gang
    was bound one member at a time with no barrier. The API server says which case it is: with none of the
    release's members bound, the release is dropped and its members meet at the barrier again."""
    server, clock = world
    a, b = Replica(server, clock, "a"), Replica(server, clock, "b")
    try:
        a.leadership.called()
        a.elector.step()
        members = gang(a.h)
        # a writes its release down, then stops (paused, partitioned) before its first Binding
        a.intents.opened(gang_key("default/a"), [(m["metadata"]["namespace"], m["metadata"]["name"],
                                                  m["metadata"]["uid"], n)
                                                 for m, n in zip(members, NODES4, strict=True)])
        b.h.add(coscheduling_podgroup("a", 4), *members)  # b's mirror and API server: nothing bound
        b.leadership.called()
        b.elector.step()
        clock.now += CONFIG.lease_duration + 0.1
        b.leadership.called()  # kube-scheduler keeps calling b
        b.elector.step()
        assert b.elector.is_leader() and b.intents.unfinished
        stop = threading.Event()
        threading.Thread(target=b.leadership.resume_when_listed, args=(lambda: True, stop), daemon=True).start()
        deadline = time.monotonic() + 5
        while b.intents.unfinished:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stop.set()
        assert [e[2] for e in b.h.events.events] == ["GangReleaseAbandoned"]
        assert b.h.ledger.view.counters()["releases_abandoned"] == 1
        first = threading.Thread(target=b.h.engine.bind, args=(bind_args(members[0], "n1"),), daemon=True)
        first.start()
        deadline = time.monotonic() + 5
        while b.h.ledger.view.held_count() != 1:  # held at the barrier, not let through
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert b.h.binder.calls == []
        others = [threading.Thread(target=b.h.engine.bind, args=(bind_args(m, n),), daemon=True)
                  for m, n in zip(members[1:], NODES4[1:], strict=True)]
        for thread in others:
            thread.start()
        for thread in [first, *others]:
            thread.join(5)
        assert b.h.binder.bound_names == sorted(m["metadata"]["name"] for m in members)
    finally:
        a.h.close(), b.h.close()


def test_the_verbs_answer_error_on_a_replica_that_does_not_lead(tmp_path: Path,
                                                                world: tuple[FakeLeases, Clock]) -> None:
    server, clock = world
    snapshot = tmp_path / "s.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [node("n1")]}))
    runtime = from_snapshot(Settings(cluster_snapshot=str(snapshot)))
    try:
        leadership = runtime.leadership = Leadership(CONFIG.lease_duration, runtime.ledger.view, runtime.mirror,
                                                     runtime.engine.let_through, clock=clock)
        elector = LeaderElector(server.client(), CONFIG, "a", clock=clock, eligible=leadership.eligible)
        leadership.attach(elector, ReleaseIntents(elector))
        elector.step()
        assert not elector.is_leader(), "not called yet: not competing"
        assert runtime.serving_problem() == NOT_LEADER  # ... and that call makes it compete
        elector.step()
        assert elector.is_leader() and runtime.serving_problem() == ""
        assert runtime.readiness()[1]["mode"] == "snapshot"
    finally:
        runtime.close()


def test_a_leader_with_pods_waiting_on_it_keeps_the_lease_while_idle(world: tuple[FakeLeases, Clock]) -> None:
    """A gang backing off waits for this replica's wake-up; a leader that handed the Lease back after the
    lease duration would drop it, and nothing would call again (found by the HA e2e)."""
    server, clock = world
    r = Replica(server, clock, "a")
    try:
        members = [pod(f"a-{i}", cpu="3", pod_group="a") for i in range(4)]
        r.h.add(coscheduling_podgroup("a", 4), *members)
        r.leadership.called()
        r.elector.step()
        r.h.engine.filter(filter_args(members[0], NODES4))  # admitted: waiting for its members
        assert r.h.ledger.view.pending()
        for _ in range(60):  # two minutes without a call
            clock.now += 2
            r.elector.step()
            assert r.elector.is_leader()
        clock.now += PENDING_IDLE_SECONDS
        r.elector.step()
        assert not r.elector.is_leader(), "not called for longer than kube-scheduler's retry bound: hand it back"
    finally:
        r.h.close()


def test_a_takeover_keeps_the_room_of_the_members_it_lets_through(world: tuple[FakeLeases, Clock]) -> None:
    """Issue 26, finding 3 (found by tests/e2e/test_takeover_release.py): the new leader let the unbound
    members of a release that had bound one through the barrier, but kept no room for them, so the next pod
    kube-scheduler tried (a higher priority one) took the node the release had counted on and the gang was
    left partly bound. Their places are now reserved until they bind (the last one ends the reservation)."""
    server, clock = world
    a, b = Replica(server, clock, "a"), Replica(server, clock, "b")
    try:
        a.leadership.called()
        a.elector.step()
        members = gang(a.h)
        chosen = dict(zip((m["metadata"]["name"] for m in members), NODES4, strict=True))
        a.intents.opened(gang_key("default/a"), [(m["metadata"]["namespace"], m["metadata"]["name"],
                                                  m["metadata"]["uid"], chosen[m["metadata"]["name"]])
                                                 for m in members])
        # a bound a-0 (on n1), then died; b's mirror and API server show that
        b.h.add(coscheduling_podgroup("a", 4), {**members[0], "spec": {**members[0]["spec"], "nodeName": "n1"}},
                *members[1:])
        b.leadership.called()
        b.elector.step()
        clock.now += CONFIG.lease_duration + 0.1
        b.leadership.called()
        b.elector.step()
        assert b.elector.is_leader()
        stop = threading.Event()
        threading.Thread(target=b.leadership.resume_when_listed, args=(lambda: True, stop), daemon=True).start()
        deadline = time.monotonic() + 5
        while not b.h.events.of("GangReleaseResumed"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stop.set()
        other = pod("other", cpu="2")
        b.h.add(other)
        verdict = b.h.engine.filter(filter_args(other, NODES4))
        assert not verdict.feasible, "n2-n4 are kept for a-1..a-3 (n1 has 1 cpu left)"
        assert b.h.ledger.view.admitted_count() == 1
        for member in members[1:]:  # each passes the barrier at once, to its place
            assert b.h.engine.bind(bind_args(member, chosen[member["metadata"]["name"]])) == ""
        assert b.h.binder.bound_names == ["a-1", "a-2", "a-3"]
        assert b.h.ledger.view.admitted_count() == 0, "the last member bound ends the reservation"
    finally:
        a.h.close(), b.h.close()


def test_a_new_leader_serves_no_verb_before_it_has_decided_the_releases_left_open(
        tmp_path: Path, world: tuple[FakeLeases, Clock]) -> None:
    """Found by the churn soak (tests/e2e/test_churn_soak.py): the new leader served a member's filter and
    bind in the milliseconds between taking the Lease and letting the open release through; the bind was
    held at the barrier, the release's approval came after it and was never used, and the member waited
    there, its gang partly bound, until it was re-created 8 s later. The verbs now answer as a replica that
    does not lead until the releases left open are decided (and again while the API server cannot say)."""
    server, clock = world
    snapshot = tmp_path / "s.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [node("n1")]}))
    runtime = from_snapshot(Settings(cluster_snapshot=str(snapshot)))
    stop = threading.Event()
    try:
        leadership = runtime.leadership = Leadership(CONFIG.lease_duration, runtime.ledger.view, runtime.mirror,
                                                     runtime.engine.let_through, clock=clock)
        elector = LeaderElector(server.client(), CONFIG, "a", clock=clock, eligible=leadership.eligible,
                                on_started=leadership.gained)
        leadership.attach(elector, ReleaseIntents(elector))
        leadership.called()
        elector.step()
        assert elector.is_leader() and not leadership.acting()
        assert runtime.serving_problem() == NOT_LEADER, "the open releases are not decided yet"
        listed = threading.Event()
        threading.Thread(target=leadership.resume_when_listed, args=(listed.is_set, stop), daemon=True).start()
        assert runtime.serving_problem() == NOT_LEADER, "not listed yet: nothing decided"
        listed.set()
        deadline = time.monotonic() + 5
        while runtime.serving_problem() != "":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert leadership.acting()
    finally:
        stop.set()
        runtime.close()

"""Leader election on a Lease (``extender.kube.leader``), against the in-memory Lease API and a clock the
test moves: one leader at a time, the leader stops acting before another may take over, takeover
after the lease duration, a clean stop hands the Lease back, a deposed leader's write is refused."""

from __future__ import annotations

import socket
from collections.abc import Sequence

import pytest

from extender.errors import FencedError, LeaseWriteFailedError, NotLeaderError
from extender.kube.leader import LeaderElector
from extender.kube.lease import ElectionConfig, default_namespace, new_identity
from tests.lease_fake import Clock, FakeLeaseApi, FakeLeases

CONFIG = ElectionConfig("ns", "lease", lease_duration=15, renew_deadline=10, retry_period=2)


def elector(server: FakeLeases, clock: Clock, name: str, events: list[str] | None = None) -> LeaderElector:
    record = events if events is not None else []
    return LeaderElector(server.client(), CONFIG, name, clock=clock,
                         on_started=lambda: record.append(f"{name} started"),
                         on_stopped=lambda: record.append(f"{name} stopped"))


def api(e: LeaderElector) -> FakeLeaseApi:
    assert isinstance(e.api, FakeLeaseApi)
    return e.api


def simulate(electors: Sequence[LeaderElector], clock: Clock, seconds: float, dt: float = 0.05,
             ticks: list[float] | None = None) -> list[str]:
    """Run each elector's rounds on its own schedule (renewals every retry period, candidates a little
    slower) for ``seconds``; fails if two ever lead at the same instant. Returns the leader at each
    tick ("" for none); ``ticks`` receives the tick's times."""
    due = {id(e): clock.now for e in electors}
    leaders: list[str] = []
    ticks = ticks if ticks is not None else []
    end = clock.now + seconds
    while clock.now < end:
        for e in electors:
            if clock.now >= due[id(e)]:
                leading = e.step()
                due[id(e)] = clock.now + CONFIG.retry_period * (1.0 if leading else 1.1)
        now_leading = [e.identity for e in electors if e.is_leader()]
        assert len(now_leading) <= 1, f"two leaders at t={clock.now:.2f}: {now_leading}"
        leaders.append(now_leading[0] if now_leading else "")
        ticks.append(clock.now)
        clock.now += dt
    return leaders


# -------------------------------------------------------------------------------- settings
@pytest.mark.parametrize(("duration", "deadline", "retry", "problem"), [
    (10, 10, 2, "must be greater than the renew deadline"),
    (15, 2, 2, "must be greater than 1.2 x the retry period"),
    (15.5, 10, 2, "whole seconds"),
    (15, 10, 0, "retry period must be a finite number > 0"),
    (float("inf"), 10, 2, "lease duration must be a finite number > 0"),
])
def test_unsafe_timings_are_refused(duration: float, deadline: float, retry: float, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        LeaderElector(FakeLeases().client(), ElectionConfig("ns", "lease", duration, deadline, retry))


def test_identities_differ_between_processes_on_one_host() -> None:
    first, second = new_identity(), new_identity()
    assert first != second
    assert first.startswith(socket.gethostname() + "_")


def test_the_namespace_defaults_to_the_service_accounts(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "namespace"  # type: ignore[operator]
    path.write_text("gang-scheduler\n")
    assert default_namespace(path) == "gang-scheduler"
    assert default_namespace(path.with_name("missing")) == "default"


# -------------------------------------------------------------------------------- election
def test_the_first_replica_creates_the_lease_and_leads_the_other_waits() -> None:
    server, clock, events = FakeLeases(), Clock(), []
    a, b = elector(server, clock, "a", events), elector(server, clock, "b", events)
    assert a.step() and a.is_leader()
    assert not b.step() and not b.is_leader()
    lease = server.lease()
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseDurationSeconds"] == 15
    assert a.resource_version == lease["metadata"]["resourceVersion"]
    leaders = simulate([a, b], clock, 120)
    assert set(leaders) == {"a"}, "a renewing leader is never replaced"
    assert events == ["a started"]


def test_a_leader_that_cannot_renew_stops_acting_before_the_standby_takes_over() -> None:
    server, clock, events = FakeLeases(), Clock(), []
    a, b = elector(server, clock, "a", events), elector(server, clock, "b", events)
    simulate([a, b], clock, 5)
    last_write = clock.now
    a.step()  # a renews: its last successful write
    api(a).down = True  # a is cut off from the API server (or its process hangs)
    ticks: list[float] = []
    leaders = simulate([a, b], clock, 30, ticks=ticks)
    a_until = max(t for t, who in zip(ticks, leaders, strict=True) if who == "a")
    b_from = min(t for t, who in zip(ticks, leaders, strict=True) if who == "b")
    assert a_until < last_write + CONFIG.renew_deadline <= a_until + 0.06, "a stops at its renew deadline"
    assert b_from >= last_write + CONFIG.lease_duration, "b waits the full lease duration"
    assert b_from <= last_write + CONFIG.lease_duration + 1.2 * CONFIG.retry_period + 0.1
    assert events == ["a started", "a stopped", "b started"]
    assert server.lease()["spec"]["holderIdentity"] == "b"
    assert server.lease()["spec"]["leaseTransitions"] == 1


def test_a_renewal_that_fails_briefly_keeps_the_leadership() -> None:
    server, clock = FakeLeases(), Clock()
    a, b = elector(server, clock, "a"), elector(server, clock, "b")
    simulate([a, b], clock, 5)
    api(a).down = True
    simulate([a, b], clock, CONFIG.renew_deadline - CONFIG.retry_period - 0.5)
    assert a.is_leader()
    api(a).down = False
    assert set(simulate([a, b], clock, 60)) == {"a"}


def test_a_leader_whose_lease_someone_else_edited_renews_over_it() -> None:
    server, clock = FakeLeases(), Clock()
    a = elector(server, clock, "a")
    a.step()
    server.edit("ns", "lease", lambda obj: obj["metadata"].setdefault("labels", {}).update(team="x"))
    clock.now += CONFIG.retry_period
    assert a.step()
    assert server.lease()["spec"]["holderIdentity"] == "a"
    assert server.lease()["metadata"]["labels"] == {"team": "x"}


def test_a_renewal_finding_another_holder_stops_at_once() -> None:
    server, clock, events = FakeLeases(), Clock(), []
    a = elector(server, clock, "a", events)
    a.step()
    server.edit("ns", "lease", lambda obj: obj["spec"].update(holderIdentity="intruder"))
    clock.now += CONFIG.retry_period
    assert not a.step()
    assert events == ["a started", "a stopped"]


def test_a_clean_stop_hands_the_lease_over_without_waiting() -> None:
    server, clock, events = FakeLeases(), Clock(), []
    a, b = elector(server, clock, "a", events), elector(server, clock, "b", events)
    simulate([a, b], clock, 5)
    a.stop(release=True)
    assert not a.is_leader()
    lease = server.lease()
    assert lease["spec"]["holderIdentity"] == ""
    assert lease["spec"]["leaseDurationSeconds"] == 1
    assert b.step(), "b takes a released Lease at its next try"
    assert events == ["a started", "a stopped", "b started"]


# -------------------------------------------------------------------------------- fenced writes
def test_a_write_by_a_replica_that_does_not_lead_sends_nothing() -> None:
    server, clock = FakeLeases(), Clock()
    a, b = elector(server, clock, "a"), elector(server, clock, "b")
    a.step()
    b.step()
    calls = len(api(b).calls)
    with pytest.raises(NotLeaderError):
        b.write({"k": "v"})
    assert len(api(b).calls) == calls


def test_a_deposed_leader_that_still_believes_it_leads_is_fenced_by_the_server() -> None:
    server = FakeLeases()
    a_clock, b_clock = Clock(), Clock()  # a's clock stands still: a process paused after its check
    a, b = elector(server, a_clock, "a"), elector(server, b_clock, "b")
    a.step()
    b.step()
    b_clock.now += CONFIG.lease_duration
    assert b.step(), "b takes over the Lease a stopped renewing"
    assert a.is_leader(), "a's own clock says it still leads"
    with pytest.raises(FencedError):
        a.write({"gang-extender.io/releases": "{}"})
    assert not a.is_leader()
    assert server.lease()["spec"]["holderIdentity"] == "b"
    assert "gang-extender.io/releases" not in (server.lease()["metadata"].get("annotations") or {})


def test_a_write_that_fails_leaves_the_leadership_to_the_deadline() -> None:
    server, clock = FakeLeases(), Clock()
    a = elector(server, clock, "a")
    a.step()
    api(a).down = True
    with pytest.raises(LeaseWriteFailedError):
        a.write({"k": "v"})
    assert a.is_leader()
    clock.now += CONFIG.renew_deadline
    assert not a.is_leader()

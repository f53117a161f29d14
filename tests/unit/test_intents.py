"""Release intents on the leader's Lease (``extender.kube.intents``), against the in-memory Lease API: an
intent is on the Lease before ``opened`` returns and gone after ``closed``; a replica that does not
lead, or no longer leads, records nothing and is told so; the next leader finds the open releases;
renewals never drop or resurrect an intent; the annotation stays within its bounds."""

from __future__ import annotations

import orjson
import pytest

from extender.errors import FencedError, IntentNotRecordedError, IntentsFullError
from extender.files.journal import JournalPod, Release
from extender.kube.intents import ANNOTATIONS_LIMIT, KEY, ReleaseIntents, encode
from extender.kube.leader import LeaderElector
from extender.model.gang import GangKey
from tests.builders import gang_key
from tests.lease_fake import Clock, FakeLeaseApi, FakeLeases
from tests.unit.test_leader import CONFIG

PODS = [("ns", f"w-{i}", f"uid-{i}", f"node-{i}") for i in range(3)]


def replica(server: FakeLeases, clock: Clock, name: str, max_bytes: int = 128 * 1024
            ) -> tuple[LeaderElector, ReleaseIntents]:
    elector = LeaderElector(server.client(), CONFIG, name, clock=clock)
    return elector, ReleaseIntents(elector, max_bytes=max_bytes)


def on_lease(server: FakeLeases) -> dict[int, tuple[str, list[list[str]]]]:
    """The open releases on the Lease: id -> (gang as ``str(GangKey)``, members)."""
    value = (server.lease()["metadata"].get("annotations") or {}).get(KEY)
    if value is None:
        return {}
    return {entry["id"]: (str(GangKey.from_json(entry["gang"])), entry["pods"])
            for entry in orjson.loads(value)["open"]}


def api(elector: LeaderElector) -> FakeLeaseApi:
    assert isinstance(elector.api, FakeLeaseApi)
    return elector.api


def test_an_intent_is_on_the_lease_before_opened_returns_and_gone_after_closed() -> None:
    server, clock = FakeLeases(), Clock()
    elector, intents = replica(server, clock, "a")
    elector.step()
    first = intents.opened(gang_key("ns/train"), PODS)
    assert on_lease(server) == {first: ("ns/train", [list(p) for p in PODS])}
    second = intents.opened(gang_key("ns/other"), PODS[:1])
    assert second > first
    intents.closed(first)
    assert list(on_lease(server)) == [second]
    intents.closed(second)
    assert on_lease(server) == {}
    intents.closed(second)  # twice, and the journal's "not recorded" id: nothing happens
    intents.closed(0)


def test_a_replica_that_does_not_lead_records_nothing() -> None:
    server, clock = FakeLeases(), Clock()
    a, _ = replica(server, clock, "a")
    b, b_intents = replica(server, clock, "b")
    a.step()
    b.step()
    writes = server.writes
    with pytest.raises(IntentNotRecordedError, match="not the leader"):
        b_intents.opened(gang_key("ns/train"), PODS)
    assert server.writes == writes


def test_a_deposed_leader_is_fenced_and_the_next_leader_finishes_its_releases() -> None:
    server = FakeLeases()
    a_clock, b_clock = Clock(), Clock()
    a, a_intents = replica(server, a_clock, "a")
    b, b_intents = replica(server, b_clock, "b")
    a.step()
    kept = a_intents.opened(gang_key("ns/train"), PODS)
    b.step()
    b_clock.now += CONFIG.lease_duration  # a stopped renewing (its clock stands still: it believes it leads)
    assert b.step()
    with pytest.raises(IntentNotRecordedError) as refused:
        a_intents.opened(gang_key("ns/late"), PODS[:1])
    assert isinstance(refused.value.__cause__, FencedError)
    assert list(on_lease(server)) == [kept], "the deposed leader's intent was not written"
    assert [(r.id, str(r.gang), r.pods) for r in b_intents.unfinished] == [
        (kept, "ns/train", tuple(JournalPod(*p) for p in PODS))]
    b_clock.now += CONFIG.retry_period
    b.step()  # b's renewals keep the inherited intent until b closes it
    assert list(on_lease(server)) == [kept]
    new = b_intents.opened(gang_key("ns/next"), PODS[:1])
    assert new > kept, "ids are never reused across leaders"
    b_intents.closed(kept)
    assert b_intents.unfinished == []
    assert list(on_lease(server)) == [new]


def test_renewals_never_drop_an_intent_and_a_failed_clear_is_written_by_the_next_renewal() -> None:
    server, clock = FakeLeases(), Clock()
    elector, intents = replica(server, clock, "a")
    elector.step()
    first = intents.opened(gang_key("ns/a"), PODS)
    for _ in range(3):
        clock.now += CONFIG.retry_period
        elector.step()
    assert list(on_lease(server)) == [first]
    api(elector).down = True
    intents.closed(first)  # its write fails: the release is done all the same
    assert list(on_lease(server)) == [first]
    api(elector).down = False
    clock.now += CONFIG.retry_period
    elector.step()
    assert on_lease(server) == {}


def test_an_intent_whose_write_timed_out_is_not_reported_recorded() -> None:
    server, clock = FakeLeases(), Clock()
    elector, intents = replica(server, clock, "a")
    elector.step()
    api(elector).lose_reply = True  # applied by the server, but the reply never came
    with pytest.raises(IntentNotRecordedError, match="timed out"):
        intents.opened(gang_key("ns/a"), PODS)
    assert intents.open_count() == 0
    clock.now += CONFIG.retry_period
    assert elector.step(), "the renewal re-reads the Lease (still ours) and writes over it"
    assert on_lease(server) == {}, "the leader's next write drops what it never reported recorded"


def test_the_open_releases_are_bounded() -> None:
    server, clock = FakeLeases(), Clock()
    first, second = Release(1, gang_key("ns/a"), tuple(JournalPod(*p) for p in PODS)), Release(2, gang_key("ns/b"), ())
    both = len(encode([first, second], 3))
    assert len(encode([second], 3)) < both - 1
    elector, intents = replica(server, clock, "a", max_bytes=both - 1)
    elector.step()
    assert intents.opened(gang_key("ns/a"), PODS) == 1
    with pytest.raises(IntentsFullError, match="release-intents-max-bytes"):
        intents.opened(gang_key("ns/b"), [])
    assert list(on_lease(server)) == [1]
    intents.closed(1)
    assert intents.opened(gang_key("ns/b"), []) > 1, "room again once a release is closed"


def test_the_api_servers_limit_on_all_annotations_is_respected() -> None:
    server, clock = FakeLeases(), Clock()
    elector, intents = replica(server, clock, "a", max_bytes=ANNOTATIONS_LIMIT)
    elector.step()
    server.edit("ns", "lease", lambda obj: obj["metadata"].update(annotations={"other": "x" * 200_000}))
    clock.now += CONFIG.retry_period
    elector.step()
    big = [("ns", f"worker-{i:05d}", f"{i:036d}", f"node-{i:05d}") for i in range(1000)]
    with pytest.raises(IntentsFullError, match="limit"):
        intents.opened(gang_key("ns/big"), big)
    assert elector.is_leader()
    assert intents.opened(gang_key("ns/small"), PODS) > 0


def test_an_unreadable_annotation_does_not_stop_a_takeover() -> None:
    server, clock = FakeLeases(), Clock()
    good = {"id": 4, "gang": gang_key("ns/a").to_json(), "pods": [list(PODS[0])]}
    older = {"id": 5, "gang": "ns/old", "pods": [list(PODS[0])]}  # an older version named gangs by a string
    value = orjson.dumps({"next": 9, "open": [good, {"id": "x"}, {"gang": "ns/b"}, older]}).decode()
    server.objects[("ns", "lease")] = {"metadata": {"name": "lease", "namespace": "ns", "resourceVersion": "1",
                                                    "annotations": {KEY: value}}, "spec": {}}
    elector, intents = replica(server, clock, "a")
    assert elector.step()
    assert [(r.id, r.gang) for r in intents.unfinished] == [(4, gang_key("ns/a")), (5, None)]
    assert intents.opened(gang_key("ns/c"), PODS) == 9

    elector.release()
    server.edit("ns", "lease", lambda obj: obj["metadata"]["annotations"].update({KEY: "{not json"}))
    other, other_intents = replica(server, clock, "b")
    assert other.step()
    assert other_intents.unfinished == []


def test_swapped_into_the_engine_the_intent_is_on_the_lease_while_the_quorum_is_bound() -> None:
    import threading

    from tests.builders import bind_args, coscheduling_podgroup, make_engine, node, pod, wait_until

    server, clock = FakeLeases(), Clock()
    elector, intents = replica(server, clock, "a")
    elector.step()
    h = make_engine(release_log=intents)
    h.add(*(node(f"n{i}") for i in range(3)))
    gang = [pod(f"a-{i}", cpu="3", pod_group="a") for i in range(3)]
    h.add(coscheduling_podgroup("a", 3), *gang)
    h.binder.gate.clear()  # the API server is slow: the release is under way
    answers: dict[str, str] = {}
    threads = [threading.Thread(target=lambda m=m, i=i: answers.update(
        {m["metadata"]["name"]: h.engine.bind(bind_args(m, f"n{i}"))}), daemon=True) for i, m in enumerate(gang)]
    for thread in threads:
        thread.start()
    try:
        assert h.binder.entered.acquire(timeout=5), "the quorum is being bound"
        (gang_name, members), = on_lease(server).values()
        assert (gang_name, sorted(members)) == ("default/a", sorted(
            [m["metadata"]["namespace"], m["metadata"]["name"], m["metadata"]["uid"], f"n{i}"]
            for i, m in enumerate(gang)))
        h.binder.gate.set()
        for thread in threads:
            thread.join(5)
        assert answers == {"a-0": "", "a-1": "", "a-2": ""}
        wait_until(lambda: on_lease(server) == {}, what="the intent cleared (in the background, after the answers)")
    finally:
        h.binder.gate.set()
        for thread in threads:
            thread.join(5)
        h.close()

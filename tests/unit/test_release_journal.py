"""The release journal: a gang release is written down before its first Binding, and a release that a
crash interrupted is finished by the next process (``Engine.resume_release``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extender.errors import BindError
from extender.files.journal import JournalPod, Release, ReleaseJournal
from tests.builders import Harness, bind_args, coscheduling_podgroup, gang_key, make_engine, node, pod


def members(count: int, cpu: str = "3") -> list[dict[str, Any]]:
    return [pod(f"a-{i}", cpu=cpu, pod_group="a") for i in range(count)]


def entry(raw: dict[str, Any], node_name: str) -> JournalPod:
    meta = raw["metadata"]
    return JournalPod(meta["namespace"], meta["name"], meta["uid"], node_name)


# ------------------------------------------------------------------------------------- the file
def test_an_open_release_is_read_back_by_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "releases.jsonl"
    journal = ReleaseJournal(path)
    pods = [JournalPod("ns", f"p{i}", f"u{i}", f"n{i}") for i in range(3)]
    first = journal.opened(gang_key("ns/a"), pods)
    second = journal.opened(gang_key("ns/b"), pods[:1])
    journal.closed(second)
    journal.close()  # the process dies with release `first` open

    after = ReleaseJournal(path)
    assert [(r.id, str(r.gang), r.pods) for r in after.unfinished] == [(first, "ns/a", tuple(pods))]
    assert after.opened(gang_key("ns/c"), pods) > second, "ids keep growing across restarts"
    after.closed(first)
    after.close()
    assert [str(r.gang) for r in ReleaseJournal(path).unfinished] == ["ns/c"]


def test_a_torn_or_garbled_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "releases.jsonl"
    journal = ReleaseJournal(path)
    journal.opened(gang_key("ns/a"), [JournalPod("ns", "p", "u", "n")])
    journal.close()
    with path.open("ab") as out:
        out.write(b'[1, 2]\n{"release": "x"}\n{"release": 9, "gang": "ns/b", "pods": [["ns", "p"]]}\n'
                  b'{"release": 10, "gang": "ns/c", "po')  # killed in the middle of a write
    assert [str(r.gang) for r in ReleaseJournal(path).unfinished] == ["ns/a"]


def test_the_file_is_emptied_once_large_and_no_release_is_open(tmp_path: Path) -> None:
    path = tmp_path / "releases.jsonl"
    journal = ReleaseJournal(path, compact_bytes=300)
    pods = [JournalPod("ns", f"p{i}", f"u{i}", "n") for i in range(4)]
    kept = journal.opened(gang_key("ns/keep"), pods)
    for _ in range(5):
        journal.closed(journal.opened(gang_key("ns/a"), pods))
    assert path.stat().st_size > 300, "a release is open: nothing may be dropped"
    journal.closed(kept)
    assert path.stat().st_size == 0
    journal.closed(journal.opened(gang_key("ns/a"), pods))
    journal.close()
    assert ReleaseJournal(path).unfinished == []


def test_a_failed_write_does_not_stop_the_release(tmp_path: Path) -> None:
    journal = ReleaseJournal(tmp_path / "releases.jsonl")
    os.close(journal._lines._fd)
    journal._lines._fd = os.open("/dev/full", os.O_WRONLY)  # every write fails with ENOSPC
    assert journal.opened(gang_key("ns/a"), [JournalPod("ns", "p", "u", "n")]) == 0
    journal.closed(0)
    journal.close()


# ------------------------------------------------------------------------------ with the engine
@pytest.fixture
def journal(tmp_path: Path) -> Iterator[ReleaseJournal]:
    opened = ReleaseJournal(tmp_path / "releases.jsonl")
    yield opened
    opened.close()


@pytest.fixture
def h(journal: ReleaseJournal) -> Iterator[Harness]:
    harness = make_engine(release_log=journal)
    yield harness
    harness.close()


def test_a_release_is_written_down_before_the_first_binding(h: Harness, journal: ReleaseJournal) -> None:
    h.add(*(node(f"n{i}") for i in range(3)))
    gang = members(3)
    h.add(coscheduling_podgroup("a", 3), *gang)
    h.binder.gate.clear()  # the API server is slow: the release is under way
    answers: dict[str, str] = {}
    threads = [threading.Thread(target=lambda m=m, i=i: answers.update(
        {m["metadata"]["name"]: h.engine.bind(bind_args(m, f"n{i}"))})) for i, m in enumerate(gang)]
    for thread in threads:
        thread.start()
    assert h.binder.entered.acquire(timeout=5), "the quorum is being bound"

    during = ReleaseJournal(journal.path)  # what a process started now (after a crash) would read
    assert [sorted(r.pods) for r in during.unfinished] == [sorted(entry(m, f"n{i}") for i, m in enumerate(gang))]
    during.close()

    h.binder.gate.set()
    for thread in threads:
        thread.join(5)
    assert answers == {"a-0": "", "a-1": "", "a-2": ""}

    # closed by the thread that answered the last member: a line appended to a file does not wait, so no
    # thread of the engine's own is woken for it (the Lease's closing is: tests/unit/test_engine.py)
    after = ReleaseJournal(journal.path)
    assert after.unfinished == []
    after.close()
    assert h.engine.binding._closer is None


def test_a_journal_that_fails_to_close_a_release_still_lets_every_member_be_answered(
        h: Harness, journal: ReleaseJournal, monkeypatch: pytest.MonkeyPatch) -> None:
    """The close runs on the thread answering the last member: whatever it raises, that member is answered
    (the release stays open in the file, for the next start to find its members bound)."""
    def failing(release_id: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(journal, "closed", failing)
    h.add(*(node(f"n{i}") for i in range(3)))
    gang = members(3)
    h.add(coscheduling_podgroup("a", 3), *gang)
    answers: dict[str, str] = {}
    threads = [threading.Thread(target=lambda m=m, i=i: answers.update(
        {m["metadata"]["name"]: h.engine.bind(bind_args(m, f"n{i}"))})) for i, m in enumerate(gang)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert answers == {"a-0": "", "a-1": "", "a-2": ""}
    after = ReleaseJournal(journal.path)
    assert len(after.unfinished) == 1
    after.close()


def test_resume_binds_only_what_is_still_pending_and_fits(h: Harness) -> None:
    h.add(node("n0"), node("n1"), node("n2"), node("n3", cpu="2"))
    gang = members(5)
    bound_before_crash = {**gang[0], "spec": {**gang[0]["spec"], "nodeName": "n0"}}
    recreated = pod("a-2", cpu="3", pod_group="a")  # same name, new uid: not the pod that was released
    h.add(coscheduling_podgroup("a", 5), bound_before_crash, gang[1], recreated, gang[3], gang[4])

    outcomes = h.engine.resume_release(Release(1, gang_key("default/a"), tuple([
        entry(gang[0], "n0"), entry(gang[1], "n1"), entry(gang[2], "n2"),
        entry(gang[3], "n3"),   # 3 cpu on a 2-cpu node: must not be bound there
        entry(gang[4], "n2"),
    ])))

    assert outcomes == {
        "default/a-0": "already bound",
        "default/a-1": "",
        "default/a-2": "gone (deleted or re-created)",
        "default/a-3": "node n3 no longer has room for pod default/a-3: insufficient cpu (needs cpu=3, free cpu=2)",
        "default/a-4": "",
    }
    assert sorted(h.binder.calls) == [("default", "a-1", gang[1]["metadata"]["uid"], "n1"),
                                      ("default", "a-4", gang[4]["metadata"]["uid"], "n2")]
    assert h.mirror.placement(gang[1]["metadata"]["uid"]) == "n1"
    assert h.ledger.view.counters()["releases_resumed"] == 1
    assert [e[0] for e in h.events.of("GangReleaseResumed")] == [("a-1", "a-4")]


def bound_on(raw: dict[str, Any], node_name: str) -> dict[str, Any]:
    """``raw`` as the API server shows it once bound to ``node_name``."""
    return {**raw, "spec": {**raw["spec"], "nodeName": node_name}}


def test_resume_reports_a_refused_binding_and_forgets_the_assumption(h: Harness) -> None:
    h.add(node("n0"), node("n1"), node("n2"))
    gang = members(3)
    h.add(coscheduling_podgroup("a", 3), *gang[:2], bound_on(gang[2], "n2"))  # the release had begun
    h.binder.fail["a-1"] = "pods \"a-1\" is forbidden"
    release = Release(1, gang_key("default/a"), (entry(gang[0], "n0"), entry(gang[1], "n1"), entry(gang[2], "n2")))
    outcomes = h.engine.resume_release(release)
    assert outcomes is not None and outcomes["default/a-0"] == ""
    assert outcomes["default/a-1"].startswith("binding pod default/a-1 to n1 failed")
    assert h.mirror.placement(gang[1]["metadata"]["uid"]) == ""
    assert h.ledger.view.counters()["bind_errors"] == 1


def test_resume_leaves_a_member_needing_preparation_to_kube_scheduler(h: Harness) -> None:
    """A member with a PVC (or DRA claim) is not bound from the journal: kube-scheduler's attempt that
    prepared its volume is gone; it passes the barrier at its next bind instead."""
    h.add(node("n0"), node("n1"), node("n2"))
    gang = members(3)
    with_claim = {**gang[1], "spec": {**gang[1]["spec"], "volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-a-1"}}]}}
    h.add(coscheduling_podgroup("a", 3), gang[0], with_claim, bound_on(gang[2], "n2"))  # the release had begun
    release = Release(1, gang_key("default/a"), (entry(gang[0], "n0"), entry(with_claim, "n1"), entry(gang[2], "n2")))
    outcomes = h.engine.resume_release(release)
    assert outcomes == {"default/a-0": "",
                        "default/a-1": "needs volume or claim preparation: passes the barrier at its next bind",
                        "default/a-2": "already bound"}
    assert [call[1] for call in h.binder.calls] == ["a-0"]
    assert h.engine.bind(bind_args(with_claim, "n1")) == ""  # not held: the rest of its gang is bound
    assert [call[1] for call in h.binder.calls] == ["a-0", "a-1"]


def test_a_release_that_had_bound_nothing_is_dropped_and_the_gang_forms_again(h: Harness) -> None:
    """Issue 26, finding 3: a resumed release bound its members one by one even when none had been bound (an
    intent can be written and the process stop before its first Binding): the barrier was gone, and a pod
    of another binder landing meanwhile left the gang partly bound. Which case it is, the API server says:
    with none of the release's members bound, it is dropped and the gang forms again at the barrier."""
    h.add(node("n0"), node("n1"))
    gang = members(2)
    h.add(coscheduling_podgroup("a", 2), *gang)
    outcomes = h.engine.resume_release(Release(1, gang_key("default/a"), (entry(gang[0], "n0"), entry(gang[1], "n1"))))
    assert outcomes == dict.fromkeys(("default/a-0", "default/a-1"), "none of the release's Bindings had been made: "
                                     "the release is dropped and the gang forms again at the barrier")
    assert h.binder.calls == [] and sorted(h.binder.reads) == [("default", "a-0"), ("default", "a-1")]
    assert [e[2] for e in h.events.events] == ["GangReleaseAbandoned"]
    assert h.ledger.view.counters()["releases_abandoned"] == 1
    binds = [threading.Thread(target=h.engine.bind, args=(bind_args(m, f"n{i}"),)) for i, m in enumerate(gang)]
    for thread in binds:
        thread.start()
    for thread in binds:
        thread.join(5)
    assert sorted(call[1] for call in h.binder.calls) == ["a-0", "a-1"]  # together, through the barrier


def test_a_release_left_open_is_kept_until_the_api_server_says_which_it_is(h: Harness) -> None:
    h.add(node("n0"))
    gang = members(1)
    h.add(coscheduling_podgroup("a", 1), *gang)

    def unreachable(namespace: str, name: str, timeout: float = 10.0) -> None:
        raise BindError("connection refused")

    h.binder.read_pod = unreachable  # type: ignore[method-assign]
    assert h.engine.resume_release(Release(1, gang_key("default/a"), (entry(gang[0], "n0"),))) is None
    assert h.binder.calls == [] and h.events.events == []

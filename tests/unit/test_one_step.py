"""A filter request is one consistent step: it takes the mirror's lock once and reads its pod once.

The gang decision (quorum gate, admission) and the per-node verdicts it returns are made under one
acquisition of ``mirror.lock``, so no watch event or bind can land between them; the request's pod is
read into its gang link, record and placement once, however many nodes and gang checks use them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from extender.cluster import facts, records
from tests.builders import Harness, coscheduling_podgroup, filter_args, make_engine, node, pod, slots_of

NODES = [f"n{i}" for i in range(1, 9)]


class CountingLock:
    """An RLock that counts outermost acquisitions by the test's own thread."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = threading.local()
        self.outermost = 0

    def __enter__(self) -> bool:
        self.acquire()
        return True

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            depth = getattr(self._depth, "n", 0)
            if depth == 0 and threading.current_thread() is threading.main_thread():
                self.outermost += 1
            self._depth.n = depth + 1
        return got

    def release(self) -> None:
        self._depth.n -= 1
        self._lock.release()


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = make_engine(timeout_seconds=30.0, backoff_seconds=10.0, lock=CountingLock())
    harness.add(*(node(name, cpu="4") for name in NODES))
    yield harness
    harness.close()


def outermost_per_filter(h: Harness, raw: dict[str, Any]) -> int:
    lock = h.mirror.lock
    assert isinstance(lock, CountingLock)
    before = lock.outermost
    h.engine.filter(filter_args(raw, NODES))
    return lock.outermost - before


def test_a_plain_pod_takes_the_lock_once_on_a_miss_and_on_a_hit(h: Harness) -> None:
    assert outermost_per_filter(h, pod("web-1", cpu="1")) == 1  # miss: every node evaluated
    assert outermost_per_filter(h, pod("web-2", cpu="1")) == 1  # hit


def test_a_gang_member_takes_the_lock_once_at_admission_and_when_steered(h: Harness) -> None:
    members = [pod(f"g-{i}", cpu="3", pod_group="g") for i in range(4)]
    h.add(coscheduling_podgroup("g", 4), *members)
    assert outermost_per_filter(h, members[0]) == 1  # admits the gang
    assert len(slots_of(h.ledger, next(iter(h.mirror.gangs())))) == 4
    assert outermost_per_filter(h, members[1]) == 1  # steered to its reservation


def test_the_request_pod_is_read_once(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = {"link": 0, "record": 0, "placement": 0}
    real_link, real_record, real_placement = facts.pod_link, facts.linked_pod_record, records.placement_from_spec

    def link(raw: Any) -> Any:
        reads["link"] += 1
        return real_link(raw)

    def record(raw: Any, found: Any) -> Any:
        reads["record"] += 1
        return real_record(raw, found)

    def placement(spec: Any) -> Any:
        reads["placement"] += 1
        return real_placement(spec)

    monkeypatch.setattr(facts, "pod_link", link)
    monkeypatch.setattr(facts, "linked_pod_record", record)
    monkeypatch.setattr(facts, "placement_from_spec", placement)
    monkeypatch.setattr(records, "placement_from_spec", placement)
    member = pod("g-0", cpu="3", pod_group="g", node_selector={"zone": "a"})
    h.add(coscheduling_podgroup("g", 1))
    result = h.engine.filter(filter_args(member, NODES))
    assert not result.feasible  # no node has the zone label: every node was checked against the selector
    # so the placement was read at least once; at most once counted: the record reads it (records calls
    # placement_from_spec itself, a call not counted when records is compiled, docs/decisions/0005)
    assert reads["link"] == 1 and reads["record"] == 1 and reads["placement"] <= 1

"""extender.kube.evictions: the rate bound (a token bucket of evictions a minute) and KubeEvictor over a fake
Eviction API seam (outcomes, all-or-nothing tokens, Preempted Events, counts, leadership); the setting,
the composition and the metrics that carry it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.config import Settings, load
from extender.engine.ports import EVICTION_OUTCOMES, EvictionOutcome
from extender.errors import BudgetError, EvictionError, GoneError, KubeError
from extender.http.metrics import Metrics
from extender.kube.events import EventRecorder
from extender.kube.evictions import PREEMPTED, KubeEvictor, RateBound
from extender.model.cluster import PodRecord
from extender.wiring.composition import compose, from_snapshot
from tests.builders import FakeBinder, FakeClock
from tests.evictor_fake import FakeEvictor


def victim(name: str, namespace: str = "ns") -> PodRecord:
    return PodRecord(f"uid-{name}", namespace, name, "n1", {"cpu": 1000, "pods": 1}, None)


# ------------------------------------------------------------------------------------ RateBound
def test_rate_bound_starts_full_and_refills_continuously() -> None:
    clock = FakeClock(100.0)
    bound = RateBound(60, clock)  # one a second
    assert bound.allows(60) and not bound.allows(61)
    assert bound.take(50)
    assert bound.allows(10) and not bound.allows(11)
    assert not bound.take(11)  # all or nothing: nothing taken
    assert bound.take(10) and not bound.allows(1)
    clock.advance(2.5)
    assert bound.allows(2) and not bound.allows(3)
    clock.advance(3600)
    assert bound.allows(60) and not bound.allows(61)  # never above a minute's worth


def test_rate_bound_rejects_a_non_positive_rate() -> None:
    with pytest.raises(ValueError, match="per_minute must be > 0"):
        RateBound(0)


def test_rate_bound_ignores_a_clock_going_back() -> None:
    clock = FakeClock(100.0)
    bound = RateBound(6, clock)
    assert bound.take(6)
    clock.now = 50.0  # 50 s back: no tokens, and no debt either
    assert not bound.allows(1)
    clock.advance(10.0)  # 6 a minute: one token in 10 s
    assert bound.allows(1) and not bound.allows(2)


# ------------------------------------------------------------------------------------ KubeEvictor
class FakeEvictionApi:
    """The client seam: raises what each pod is set to raise; records (namespace, name, uid, timeout)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, float]] = []
        self.errors: dict[str, Exception] = {}

    def evict(self, namespace: str, name: str, uid: str, timeout: float = 10.0) -> None:
        self.calls.append((namespace, name, uid, timeout))
        if name in self.errors:
            raise self.errors[name]


class EventSink:
    def __init__(self) -> None:
        self.events: list[tuple[dict[str, str], str, str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, target: dict[str, str], event_type: str, reason: str, message: str) -> None:
        with self.lock:
            self.events.append((target, event_type, reason, message))


@pytest.fixture
def sink() -> EventSink:
    return EventSink()


@pytest.fixture
def recorder(sink: EventSink) -> Iterator[EventRecorder]:
    events = EventRecorder(sink, per_second=10_000.0)
    yield events
    events.close()


def test_evicts_each_victim_and_tells_each_evicted_one(sink: EventSink, recorder: EventRecorder) -> None:
    api = FakeEvictionApi()
    api.errors = {"b": BudgetError("429 Cannot evict pod as it would violate the pod's disruption budget."),
                  "c": GoneError("404 not found"), "d": EvictionError("500 boom")}
    evictor = KubeEvictor(api, recorder, 60, clock=FakeClock(), timeout=3.0)
    pods = [victim(n) for n in "abcde"]
    outcomes = evictor.evict(pods, "train/workers", "a higher-priority gang needs the nodes")
    assert [(o.pod.name, o.outcome) for o in outcomes] == [
        ("a", "evicted"), ("b", "refused-budget"), ("c", "gone"), ("d", "failed"), ("e", "evicted")]
    assert outcomes[1].message.startswith("429 Cannot evict") and outcomes[3].message == "500 boom"
    assert api.calls == [("ns", n, f"uid-{n}", 3.0) for n in "abcde"]
    assert evictor.counts == {"evicted": 2, "gone": 1, "refused-budget": 1, "failed": 1, "rate-limited": 0}
    recorder.close()
    assert [(t["name"], t["uid"], kind, reason, message) for t, kind, reason, message in sink.events] == [
        (n, f"uid-{n}", "Warning", PREEMPTED, "preempted by train/workers: a higher-priority gang needs the nodes")
        for n in "ae"]


def test_a_unit_larger_than_the_room_left_is_not_tried_at_all(recorder: EventRecorder) -> None:
    clock, api = FakeClock(), FakeEvictionApi()
    evictor = KubeEvictor(api, recorder, 3, clock=clock)
    assert evictor.allows(3) and not evictor.allows(4)
    assert [o.outcome for o in evictor.evict([victim("a"), victim("b")], "g", "r")] == ["evicted"] * 2
    assert evictor.allows(1) and not evictor.allows(2)
    outcomes = evictor.evict([victim("c"), victim("d")], "g", "r")
    assert [o.outcome for o in outcomes] == ["rate-limited"] * 2
    assert "has no room for 2 eviction(s)" in outcomes[0].message
    assert [call[1] for call in api.calls] == ["a", "b"]  # nothing of the second unit was sent
    assert evictor.allows(1)  # and it took no token
    clock.advance(20.0)  # 3 a minute: one more token
    assert [o.outcome for o in evictor.evict([victim("c"), victim("d")], "g", "r")] == ["evicted"] * 2
    assert evictor.counts["rate-limited"] == 2 and evictor.counts["evicted"] == 4


def test_failed_evictions_still_spend_their_tokens(recorder: EventRecorder) -> None:
    api = FakeEvictionApi()
    api.errors = {"a": EvictionError("timeout")}
    evictor = KubeEvictor(api, recorder, 2, clock=FakeClock())
    evictor.evict([victim("a"), victim("b")], "g", "r")
    assert not evictor.allows(1)


def test_a_replica_that_does_not_lead_evicts_nothing(sink: EventSink, recorder: EventRecorder) -> None:
    api, leading = FakeEvictionApi(), [False]
    evictor = KubeEvictor(api, recorder, 60, clock=FakeClock(), may_act=lambda: leading[0])
    outcomes = evictor.evict([victim("a")], "g", "r")
    assert [o.outcome for o in outcomes] == ["failed"] and "does not lead" in outcomes[0].message
    assert api.calls == [] and evictor.allows(60)
    leading[0] = True
    assert [o.outcome for o in evictor.evict([victim("a")], "g", "r")] == ["evicted"]


def test_no_victims_no_calls(recorder: EventRecorder) -> None:
    api = FakeEvictionApi()
    assert KubeEvictor(api, recorder, 1, clock=FakeClock()).evict([], "g", "r") == []
    assert api.calls == []


def test_kube_client_evict_is_the_seam_and_maps_statuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """KubeClient.evict: the request it sends, and each API answer as the error KubeEvictor reads."""
    from extender.kube.client import KubeClient

    client = KubeClient.__new__(KubeClient)
    sent: list[tuple[str, str, object, float]] = []
    answer: list[KubeError | None] = [None]

    def request(method: str, path: str, query: object = None, body: object = None, timeout: float = 30.0,
                content_type: str = "application/json") -> None:
        sent.append((method, path, body, timeout))
        if answer[0] is not None:
            raise answer[0]

    monkeypatch.setattr(client, "request", request)
    client.evict("ns", "p 1", "u1", timeout=4.0)
    assert sent == [("POST", "/api/v1/namespaces/ns/pods/p%201/eviction",
                     {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p 1", "namespace": "ns"},
                      "deleteOptions": {"preconditions": {"uid": "u1"}}}, 4.0)]
    for status, message, error in [
        (429, "Cannot evict pod as it would violate the pod's disruption budget.", BudgetError),
        (404, 'pods "p" not found', GoneError),
        (409, 'Operation cannot be fulfilled on Pod "p": the UID in the precondition (u1) does not match the UID '
              "in record (u2). The object might have been deleted and then recreated", GoneError),
        (409, "Operation cannot be fulfilled", EvictionError),
        (500, "This pod has more than one PodDisruptionBudget", EvictionError),
        (0, "ReadTimeoutError", EvictionError),
    ]:
        answer[0] = KubeError(f"POST x: {status} {message}", status)
        with pytest.raises(error) as caught:
            client.evict("ns", "p", "u1")
        assert type(caught.value) is error and message in str(caught.value)


# ------------------------------------------------------------------------------------ FakeEvictor
def test_fake_evictor_records_calls_answers_set_outcomes_and_plays_the_rate_bound() -> None:
    fake = FakeEvictor(room=3)
    a, b = victim("a"), victim("b")
    fake.set_outcome(b, "refused-budget", "pdb")
    assert fake.evict([a, b], "g", "why") == [EvictionOutcome(a, "evicted"),
                                              EvictionOutcome(b, "refused-budget", "pdb")]
    assert fake.calls[0].victims == (a, b) and fake.calls[0].preemptor == "g" and fake.evicted == [a]
    assert fake.allows(1) and not fake.allows(2)
    assert [o.outcome for o in fake.evict([a, b], "g", "why")] == ["rate-limited"] * 2


# ------------------------------------------------------------------------------ setting, wiring, metrics
def test_the_setting_defaults_to_60_and_reaches_the_evictor(tmp_path: Path) -> None:
    assert Settings().max_evictions_per_minute == 60
    settings = load({"max_evictions_per_minute": "7"}, {})
    runtime = compose(settings, "api", FakeBinder, lambda *a: None, lambda *a: None, evictions=FakeEvictionApi())
    try:
        assert runtime.evictor is not None and runtime.evictor.bound.capacity == 7
        assert runtime.engine.evictor is runtime.evictor and runtime.engine.evictions is not None
        assert runtime.ledger.preemption
    finally:
        runtime.close()


def test_metrics_export_eviction_outcomes_and_the_budget_count(tmp_path: Path) -> None:
    snapshot = tmp_path / "s.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}))
    runtime = from_snapshot(Settings(cluster_snapshot=str(snapshot)))
    try:
        assert runtime.evictor is None and runtime.engine.evictor is None  # snapshot mode evicts nothing
        api = FakeEvictionApi()
        api.errors = {"b": BudgetError("429")}
        runtime.evictor = KubeEvictor(api, runtime.events, 60)
        runtime.evictor.evict([victim("a"), victim("b")], "g", "r")
        runtime.budgets.upsert({"metadata": {"name": "pdb", "namespace": "ns"}, "spec": {"selector": {}}})
        samples = {(s.name, s.labels.get("outcome", "")): s.value
                   for family in Metrics(runtime).registry.collect() for s in family.samples}
        assert {o: samples[("gang_extender_evictions_total", o)] for o in EVICTION_OUTCOMES} == {
            "evicted": 1, "gone": 0, "refused-budget": 1, "failed": 0, "rate-limited": 0}
        assert samples[("gang_extender_disruption_budgets", "")] == 1
    finally:
        runtime.close()


class _Reflector:
    def __init__(self, name: str, synced: bool, failing_for: float = 0.0) -> None:
        self.name, self.healthy, self.last_error, self._failing = name, not failing_for, "", failing_for
        self.synced = threading.Event()
        if synced:
            self.synced.set()

    def failing_for(self, now: float) -> float:
        return self._failing


def test_the_budget_watch_gates_the_first_sync_and_readiness_but_never_the_verbs(tmp_path: Path) -> None:
    snapshot = tmp_path / "s.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}))
    runtime = from_snapshot(Settings(cluster_snapshot=str(snapshot)))
    try:
        runtime.mode = "api"
        runtime.core_reflectors = [_Reflector("nodes", True), _Reflector("pods", True)]  # type: ignore[list-item]
        budgets = _Reflector("poddisruptionbudgets", False)
        runtime.budget_reflector = budgets  # type: ignore[assignment]
        runtime.discovered = True
        runtime.finish_start()
        assert runtime.synced() is False  # its first list is part of the start
        budgets.synced.set()
        assert runtime.synced() is True and runtime.readiness()[0] is True
        budgets.healthy, budgets._failing = False, 3600.0  # failing for an hour
        ready, detail = runtime.readiness()
        assert ready is False and detail["watches"]["poddisruptionbudgets"]["healthy"] is False
        assert runtime.stale_problem() == "" and runtime.serving_problem() == ""  # the verbs still serve
    finally:
        runtime.close()

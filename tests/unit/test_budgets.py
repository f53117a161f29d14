"""extender.cluster.budgets: PodDisruptionBudgets from watch objects, label selector semantics, and whether
evicting a set of pods at once stays within every budget; the PodDisruptionBudget feed; pod labels kept
for bound pods only."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from extender.cluster.budgets import Budget, DisruptionBudgets, Selector, budget_record, labels_match
from extender.cluster.mirror import ClusterMirror
from extender.cluster.records import pod_record
from extender.errors import ObjectError
from extender.model.cluster import PodRecord, Requirement
from extender.wiring.feeds import MirrorFeeds
from tests.builders import pod


def pdb(name: str, namespace: str = "ns", *, selector: dict[str, Any] | None = None, allowed: int | None = 1,
        generation: int = 1, observed: int | None = 1) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget as the API server serves it (``allowed`` None: no status)."""
    obj: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                           "metadata": {"name": name, "namespace": namespace, "generation": generation},
                           "spec": {"minAvailable": 1}}
    if selector is not None:
        obj["spec"]["selector"] = selector
    if allowed is not None:
        obj["status"] = {"disruptionsAllowed": allowed, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3}
        if observed is not None:
            obj["status"]["observedGeneration"] = observed
    return obj


def bound(name: str, namespace: str = "ns", *, labels: dict[str, str] | None = None,
          phase: str = "Running") -> PodRecord:
    return pod_record(pod(name, namespace=namespace, node="n1", labels=labels or {}, phase=phase))


def sel(match_labels: dict[str, str] | None = None, *exprs: tuple[str, str, tuple[str, ...]]) -> Selector:
    return Selector(tuple(sorted((match_labels or {}).items())), tuple(Requirement(k, op, v) for k, op, v in exprs))


# ------------------------------------------------------------------------------- labels_match
@pytest.mark.parametrize(("selector", "labels", "matches"), [
    (None, {"app": "a"}, False),  # a null selector selects no pod
    (sel(), {}, True),  # an empty selector selects every pod (policy/v1)
    (sel(), {"app": "a"}, True),
    (sel({"app": "a"}), {"app": "a", "x": "y"}, True),
    (sel({"app": "a"}), {"app": "b"}, False),
    (sel({"app": "a"}), {}, False),
    (sel({"app": "a", "tier": "db"}), {"app": "a"}, False),  # every pair must hold
    (sel(None, ("app", "In", ("a", "b"))), {"app": "b"}, True),
    (sel(None, ("app", "In", ("a", "b"))), {"app": "c"}, False),
    (sel(None, ("app", "In", ("a",))), {}, False),
    (sel(None, ("app", "NotIn", ("a",))), {"app": "b"}, True),
    (sel(None, ("app", "NotIn", ("a",))), {}, True),  # NotIn holds for a missing key
    (sel(None, ("app", "NotIn", ("a",))), {"app": "a"}, False),
    (sel(None, ("app", "Exists", ())), {"app": ""}, True),
    (sel(None, ("app", "Exists", ())), {"other": "a"}, False),
    (sel(None, ("app", "DoesNotExist", ())), {"other": "a"}, True),
    (sel(None, ("app", "DoesNotExist", ())), {"app": "a"}, False),
    (sel({"app": "a"}, ("tier", "In", ("db",))), {"app": "a", "tier": "web"}, False),  # labels AND expressions
    (sel({"app": "a"}, ("tier", "In", ("db",))), {"app": "a", "tier": "db"}, True),
    (sel(None, ("app", "Gt", ("1",))), {"app": "2"}, False),  # not a label selector operator: selects nothing
])
def test_labels_match(selector: Selector | None, labels: dict[str, str], matches: bool) -> None:
    assert labels_match(selector, labels) is matches


# ------------------------------------------------------------------------------- budget_record
def test_budget_record_reads_selector_and_status() -> None:
    obj = pdb("db", selector={"matchLabels": {"app": "db"},
                              "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]},
                                                   {"key": "canary", "operator": "DoesNotExist"}]}, allowed=2)
    assert budget_record(obj) == Budget("ns", "db", Selector((("app", "db"),), (
        Requirement("tier", "NotIn", ("x",)), Requirement("canary", "DoesNotExist", ()))), 2)


@pytest.mark.parametrize(("allowed", "generation", "observed", "expected"), [
    (3, 1, 1, 3),
    (0, 1, 1, 0),
    (3, 2, 1, None),  # the spec changed after the status was computed
    (0, 1, None, None),  # a new budget: the API server's zero status, never observed
    (None, 1, None, None),  # no status at all
])
def test_budget_record_knows_an_allowance_only_for_the_observed_generation(
        allowed: int | None, generation: int, observed: int | None, expected: int | None) -> None:
    record = budget_record(pdb("b", selector={}, allowed=allowed, generation=generation, observed=observed))
    assert record.disruptions_allowed == expected


def test_budget_record_without_a_selector_selects_nothing_and_without_a_name_is_refused() -> None:
    assert budget_record(pdb("b")).selector is None
    with pytest.raises(ObjectError):
        budget_record({"metadata": {"namespace": "ns"}})


# ------------------------------------------------------------------------------------ allowed
def test_allowed_counts_the_pods_each_budget_selects_against_its_allowance() -> None:
    budgets = DisruptionBudgets()
    budgets.upsert(pdb("web", selector={"matchLabels": {"app": "web"}}, allowed=2))
    web = [bound(f"web-{i}", labels={"app": "web"}) for i in range(3)]
    other = bound("other", labels={"app": "batch"})
    assert budgets.allowed(web[:2]) == (True, "")
    assert budgets.allowed([*web[:2], other]) == (True, "")
    ok, reason = budgets.allowed(web)
    assert not ok
    assert reason == ("evicting 3 pod(s) selected by PodDisruptionBudget ns/web exceeds the 2 disruption(s) it "
                      "allows now")
    assert budgets.allowed([]) == (True, "")


def test_allowed_with_several_budgets_names_the_one_exceeded() -> None:
    budgets = DisruptionBudgets()
    budgets.upsert(pdb("a", selector={"matchLabels": {"app": "a"}}, allowed=5))
    budgets.upsert(pdb("b", selector={"matchLabels": {"app": "b"}}, allowed=1))
    pods = [bound("a1", labels={"app": "a"}), bound("b1", labels={"app": "b"}), bound("b2", labels={"app": "b"})]
    ok, reason = budgets.allowed(pods)
    assert not ok and "PodDisruptionBudget ns/b " in reason and "ns/a" not in reason
    assert budgets.allowed(pods[:2]) == (True, "")


def test_a_budget_not_yet_observed_forbids_every_pod_it_selects() -> None:
    budgets = DisruptionBudgets()
    budgets.upsert(pdb("fresh", selector={"matchLabels": {"app": "a"}}, allowed=0, observed=None))
    ok, reason = budgets.allowed([bound("a1", labels={"app": "a"})])
    assert not ok and "PodDisruptionBudget ns/fresh has no status for its current generation yet" in reason
    assert budgets.allowed([bound("b1", labels={"app": "b"})]) == (True, "")


def test_zero_allowed_forbids() -> None:
    budgets = DisruptionBudgets()
    budgets.upsert(pdb("none", selector={}, allowed=0))
    ok, reason = budgets.allowed([bound("x")])
    assert not ok and "ns/none exceeds the 0 disruption(s)" in reason


def test_an_empty_selector_selects_its_whole_namespace_and_only_it() -> None:
    budgets = DisruptionBudgets()
    budgets.upsert(pdb("all", selector={}, allowed=1))
    assert budgets.allowed([bound("x", labels={"app": "a"})]) == (True, "")
    assert not budgets.allowed([bound("x"), bound("y", labels={"k": "v"})])[0]
    assert budgets.allowed([bound("x", "other-ns"), bound("y", "other-ns")]) == (True, "")


def test_a_null_selector_selects_nothing() -> None:
    budgets = DisruptionBudgets()
    budgets.upsert(pdb("null", allowed=0))
    assert budgets.allowed([bound("x"), bound("y")]) == (True, "")


def test_a_pod_selected_by_two_budgets_cannot_be_evicted() -> None:
    """The Eviction API answers 500 for such a pod, whatever the budgets allow."""
    budgets = DisruptionBudgets()
    budgets.upsert(pdb("one", selector={"matchLabels": {"app": "a"}}, allowed=5))
    budgets.upsert(pdb("two", selector={}, allowed=5))
    ok, reason = budgets.allowed([bound("a1", labels={"app": "a"})])
    assert not ok and "selected by more than one PodDisruptionBudget (ns/one, ns/two)" in reason


def test_terminal_pods_are_evicted_without_a_budget_check() -> None:
    budgets = DisruptionBudgets()
    budgets.upsert(pdb("all", selector={}, allowed=0))
    assert budgets.allowed([bound("done", phase="Succeeded"), bound("dead", phase="Failed")]) == (True, "")


def test_upsert_delete_replace() -> None:
    budgets = DisruptionBudgets()
    budgets.upsert(pdb("a", selector={}, allowed=0))
    budgets.upsert(pdb("b", "other", selector={}, allowed=0))
    assert len(budgets) == 2
    budgets.upsert(pdb("a", selector={}, allowed=1))  # status update
    assert len(budgets) == 2 and budgets.allowed([bound("x")]) == (True, "")
    budgets.delete("ns", "a")
    budgets.delete("ns", "missing")
    assert len(budgets) == 1 and budgets.get("ns", "a") is None
    budgets.replace([pdb("c", selector={}, allowed=0), {"metadata": {}}])  # a malformed one is skipped
    assert len(budgets) == 1 and budgets.get("other", "b") is None and budgets.get("ns", "c") is not None


# ------------------------------------------------------------------------------- labels in records
def test_pod_labels_are_kept_only_for_bound_pods_sorted_interned_and_shared() -> None:
    labels = {"z": "1", "app": "web"}
    pending = pod_record(pod("p", labels=labels))
    assert pending.labels == ()
    one = pod_record(pod("b1", node="n1", labels=labels))
    two = pod_record(pod("b2", node="n2", labels={"app": "web", "z": "1"}))
    assert one.labels == (("app", "web"), ("z", "1"))
    assert one.labels is two.labels  # pods of one workload share one tuple
    key = one.labels[0][0]
    assert key is sys.intern("app")
    assert pod_record(pod("b3", node="n1")).labels == ()


def test_a_pod_gains_its_labels_in_the_mirror_when_the_watch_shows_it_bound() -> None:
    mirror = ClusterMirror()
    mirror.upsert_pod(pod("p", uid="u1", labels={"app": "a"}))
    assert mirror.pod("default", "p").labels == ()  # type: ignore[union-attr]
    mirror.upsert_pod(pod("p", uid="u1", node="n1", labels={"app": "a"}))
    assert mirror.pod("default", "p").labels == (("app", "a"),)  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------- the feed
class _Listing:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items, self.resource_version = items, "5"

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.items)


class _Kube:
    """``list``/``watch`` of one collection: the initial list, then one watch with the given events."""

    def __init__(self, items: list[dict[str, Any]], events: list[tuple[str, dict[str, Any]]]) -> None:
        self.items, self.events, self.paths = items, events, []  # type: ignore[var-annotated]
        self.done = threading.Event()

    def list(self, path: str) -> _Listing:
        self.paths.append(path)
        return _Listing(self.items)

    def watch(self, path: str, version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from self.events
        self.events = []
        self.done.set()
        time.sleep(0.01)


def _wait(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_budget_feed_lists_then_applies_watch_events() -> None:
    mirror, budgets, stop = ClusterMirror(), DisruptionBudgets(), threading.Event()
    kube = _Kube([pdb("a", selector={}, allowed=0), pdb("b", selector={}, allowed=0)],
                 [("MODIFIED", pdb("a", selector={}, allowed=3)), ("DELETED", pdb("b")),
                  ("ADDED", {"metadata": {"namespace": "ns"}})])  # malformed: counted, the watch goes on
    reflector = MirrorFeeds(mirror, kube, stop).budgets(budgets)  # type: ignore[arg-type]
    assert reflector.name == "poddisruptionbudgets"
    reflector.start()
    try:
        _wait(kube.done.is_set)
        _wait(lambda: mirror.rejected_objects == 1)
        assert kube.paths == ["/apis/policy/v1/poddisruptionbudgets"]
        assert reflector.synced.is_set() and len(budgets) == 1
        assert budgets.get("ns", "a") == Budget("ns", "a", Selector(), 3)
    finally:
        stop.set()
        reflector.join(2)

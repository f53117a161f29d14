"""Who goes first, against a real kube-scheduler v1.35 and kwok (which runs the pods on its nodes and
completes evictions): a high-priority gang evicts a lower-priority gang whole, a PodDisruptionBudget
makes it choose other victims, ``preemptionPolicy: Never`` waits, and a high-priority gang created last
is admitted before lower-priority gangs that waited longer.

The extender runs with the shipped configuration (``preemptVerb`` included). Each test has its own
namespace and kwok node pool and deletes its pods at the end: only the first gang in the admission
order preempts, so a gang left waiting would stand in front of the next test's.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from controlplane import ControlPlane, wait_for
from kwok_harness import Kwok
from support import WAIT, Extender, bound, check_invariants, create, events, pod, pods, scheduling_with_extender

pytestmark = pytest.mark.e2e

GRACE = 1  # kwok completes graceful deletions; 0 would let nothing run them


@pytest.fixture(scope="module")
def bed(control_plane: ControlPlane, kwok: Kwok, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[ControlPlane, Extender, Kwok]]:
    with scheduling_with_extender(control_plane, tmp_path_factory.mktemp("extender")) as ext:
        yield control_plane, ext, kwok


def pool(cp: ControlPlane, kwok: Kwok, name: str, nodes: int = 4) -> tuple[str, dict[str, str], list[str]]:
    cp.create_namespace(name)
    labels = {"e2e-pool": name}
    return name, labels, kwok.add_nodes(nodes, prefix=f"{name}-n", cpu="4", labels=labels)


def priority_class(name: str, value: int, never: bool = False) -> dict[str, Any]:
    pc: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                          "value": value}
    if never:
        pc["preemptionPolicy"] = "Never"
    return pc


def member(ns: str, name: str, *, cpu: str, selector: Mapping[str, str], priority: str,
           workload: str | None = None, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "nodeSelector": dict(selector), "terminationGracePeriodSeconds": GRACE,
        "priorityClassName": priority,
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}
    if workload:
        spec["workloadRef"] = {"name": workload, "podGroup": "workers"}
    return pod(ns, name, spec, labels=labels)


def gang(ns: str, name: str, size: int, *, cpu: str, selector: Mapping[str, str], priority: str,
         labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    workload = {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": size}}}]}}
    return [workload, *(member(ns, f"{name}-{i}", cpu=cpu, selector=selector, priority=priority, workload=name,
                               labels=labels) for i in range(size))]


def existing(cp: ControlPlane, ns: str, prefix: str) -> set[str]:
    return {p["metadata"]["name"] for p in pods(cp, ns) if p["metadata"]["name"].startswith(prefix)}


def live(cp: ControlPlane, ns: str, prefix: str) -> set[str]:
    """The pods ``prefix*`` not being deleted."""
    return {p["metadata"]["name"] for p in pods(cp, ns)
            if p["metadata"]["name"].startswith(prefix) and not p["metadata"].get("deletionTimestamp")}


def place(ext: Extender, ns: str, name: str) -> int | None:
    """The gang's position in the extender's admission order (``explain``), None when it is not waiting."""
    with urllib.request.urlopen(f"{ext.url}/explain/{ns}/{name}", timeout=5) as reply:
        gangs = json.loads(reply.read())["gangs"]
    order = gangs[0].get("order") if gangs else None
    return order.get("position") if order else None


def wait_bound(cp: ControlPlane, ns: str, prefix: str, count: int) -> dict[str, str]:
    wait_for(lambda: len(bound(cp, ns, prefix)) == count, timeout=WAIT, what=f"{count} pods {prefix}* bound")
    return bound(cp, ns, prefix)


def clean(cp: ControlPlane, ns: str) -> None:
    cp.kubectl("delete", "pods", "--all", "-n", ns, "--wait=false")
    wait_for(lambda: not pods(cp, ns), timeout=WAIT, what=f"the pods of {ns} gone")


def test_a_high_priority_gang_evicts_a_lower_priority_gang_whole(bed: tuple[ControlPlane, Extender, Kwok]) -> None:
    cp, ext, kwok = bed
    ns, labels, _nodes = pool(cp, kwok, "pre-whole")
    create(cp, priority_class(f"{ns}-low", 100), priority_class(f"{ns}-high", 1000))
    create(cp, *gang(ns, "low", 4, cpu="3", selector=labels, priority=f"{ns}-low"))
    wait_bound(cp, ns, "low-", 4)
    low = existing(cp, ns, "low-")
    create(cp, *gang(ns, "high", 2, cpu="3", selector=labels, priority=f"{ns}-high"))
    # Two nodes would do, but the low gang goes whole: never some of its members.
    placed = wait_bound(cp, ns, "high-", 2)
    # evicted one by one, all of them: never some of its members
    wait_for(lambda: not existing(cp, ns, "low-"), timeout=WAIT, what="the whole low gang evicted and gone")
    wait_for(lambda: {e["involvedObject"]["name"] for e in events(cp, ns, "Preempted")} == low, timeout=WAIT,
             what="a Preempted Event on each member of the low gang")
    assert any("gang pre-whole/high" in e["message"] for e in events(cp, ns, "Preempted"))
    assert events(cp, ns, "GangPreempting")
    assert len(set(placed.values())) == 2
    check_invariants(cp, ext)
    clean(cp, ns)


def test_a_budget_that_forbids_a_gang_makes_the_preemptor_choose_other_victims(
        bed: tuple[ControlPlane, Extender, Kwok]) -> None:
    cp, ext, kwok = bed
    ns, labels, nodes = pool(cp, kwok, "pre-pdb")
    create(cp, priority_class(f"{ns}-low", 100), priority_class(f"{ns}-lower", 200),
           priority_class(f"{ns}-high", 1000))
    create(cp, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "guard", "namespace": ns},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}}})
    create(cp, *gang(ns, "guarded", 2, cpu="3", selector=labels, priority=f"{ns}-low", labels={"app": "guarded"}))
    guarded = wait_bound(cp, ns, "guarded-", 2)
    # the other two nodes hold plain pods of a higher priority than the guarded gang's: the cheaper victim
    # is the gang, but its budget allows no disruption
    free = sorted(set(nodes) - set(guarded.values()))
    create(cp, *(member(ns, f"plain-{i}", cpu="3", selector={"kubernetes.io/hostname": node}, priority=f"{ns}-lower")
                 for i, node in enumerate(free)))
    wait_bound(cp, ns, "plain-", 2)

    def budget_observed() -> bool:
        status = cp.request("GET", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/guard").get("status", {})
        return status.get("currentHealthy") == 2 and status.get("disruptionsAllowed") == 0
    wait_for(budget_observed, timeout=WAIT, what="the disruption controller to count the guarded gang")
    create(cp, *gang(ns, "high", 2, cpu="3", selector=labels, priority=f"{ns}-high"))
    wait_bound(cp, ns, "high-", 2)
    assert existing(cp, ns, "plain-") == set()
    assert bound(cp, ns, "guarded-") == guarded
    check_invariants(cp, ext)
    clean(cp, ns)


def test_a_gang_whose_priority_class_says_never_waits_and_evicts_nothing(
        bed: tuple[ControlPlane, Extender, Kwok]) -> None:
    cp, ext, kwok = bed
    ns, labels, _nodes = pool(cp, kwok, "pre-never", nodes=2)
    create(cp, priority_class(f"{ns}-low", 100), priority_class(f"{ns}-never", 1000, never=True))
    create(cp, *gang(ns, "low", 2, cpu="3", selector=labels, priority=f"{ns}-low"))
    low = wait_bound(cp, ns, "low-", 2)
    create(cp, *gang(ns, "patient", 2, cpu="3", selector=labels, priority=f"{ns}-never"))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert bound(cp, ns, "low-") == low, "a pod was evicted for a gang whose preemptionPolicy is Never"
        assert bound(cp, ns, "patient-") == {}
        time.sleep(0.5)
    assert events(cp, ns, "Preempted") == [] and events(cp, ns, "GangPreempting") == []
    check_invariants(cp, ext)
    clean(cp, ns)


def test_a_high_priority_gang_created_last_goes_before_lower_priority_gangs_that_waited(
        bed: tuple[ControlPlane, Extender, Kwok]) -> None:
    cp, ext, kwok = bed
    ns, labels, nodes = pool(cp, kwok, "order", nodes=2)
    create(cp, priority_class(f"{ns}-blocker", 5000), priority_class(f"{ns}-low", 100),
           priority_class(f"{ns}-high", 1000))
    create(cp, *(member(ns, f"blocker-{i}", cpu="3", selector={"kubernetes.io/hostname": node},
                        priority=f"{ns}-blocker") for i, node in enumerate(sorted(nodes))))
    wait_bound(cp, ns, "blocker-", 2)
    create(cp, *gang(ns, "early-a", 2, cpu="3", selector=labels, priority=f"{ns}-low"))
    create(cp, *gang(ns, "early-b", 2, cpu="3", selector=labels, priority=f"{ns}-low"))
    # kube-scheduler's own filters find no node for them, so no filter request shows them to the
    # extender: it finds them in its mirror and queues them in the order they became complete
    wait_for(lambda: place(ext, ns, "early-b") == 2, timeout=WAIT, what="both early gangs queued")
    time.sleep(2)
    create(cp, *gang(ns, "late", 2, cpu="3", selector=labels, priority=f"{ns}-high"))
    wait_for(lambda: place(ext, ns, "late") == 1, timeout=WAIT, what="the late gang first in the order")
    cp.kubectl("delete", "pods", "-n", ns, "blocker-0", "blocker-1", "--wait=false")
    wait_bound(cp, ns, "late-", 2)
    time.sleep(3)
    assert bound(cp, ns, "early-") == {}, "a lower-priority gang took the capacity first"
    assert events(cp, ns, "Preempted") == []
    check_invariants(cp, ext)
    clean(cp, ns)

"""Gang-aware preemption on Kubernetes v1.37 with ``scheduling.k8s.io/v1beta1`` PodGroups, against a real
kube-scheduler v1.37.2 (no gates: the in-tree gang plugin is off) and kwok (which runs the pods on its
nodes and completes evictions).

A PodGroup states its priority (``priorityClassName``, which the API server's Priority admission turns
into ``priority``), how it may be disrupted (``disruptionMode``, which the API server defaults to
``{single: {}}``) and, with the ``PodGroupPreemptionPolicy`` gate on (alpha in 1.37.2; the API server
drops the field without it), ``preemptionPolicy``. Here: a higher-priority group evicts a
``disruptionMode: {all: {}}`` group whole; a ``single`` group (stated or defaulted) loses only the
pods the preemptor needs; a group whose ``preemptionPolicy`` is Never waits and evicts nothing though
its pods' own policy would let them preempt.

The extender runs with the shipped configuration (``preemptVerb`` included). Each test has its own
namespace and kwok pool (4 nodes x 4 cpu) and deletes its pods at the end: only the first gang in the
admission order preempts, so a gang left waiting would stand in front of the next test's.
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

API = "scheduling.k8s.io/v1beta1"
GRACE = 1  # kwok completes graceful deletions; 0 would let nothing run them


@pytest.fixture(scope="module")
def bed(control_plane_137_preemption: ControlPlane, kwok_137: Kwok, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[ControlPlane, Extender, Kwok]]:
    cp = control_plane_137_preemption
    resources = cp.kubectl("api-resources", "--api-group=scheduling.k8s.io").stdout
    assert "podgroups" in resources and API in resources, resources
    with scheduling_with_extender(cp, tmp_path_factory.mktemp("extender-137")) as ext:
        yield cp, ext, kwok_137


def pool(cp: ControlPlane, kwok: Kwok, name: str) -> tuple[str, dict[str, str], list[str]]:
    cp.create_namespace(name)
    labels = {"e2e-pool": name}
    return name, labels, kwok.add_nodes(4, prefix=f"{name}-n", cpu="4", labels=labels)


def priority_class(name: str, value: int, never: bool = False) -> dict[str, Any]:
    pc: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                          "value": value}
    if never:
        pc["preemptionPolicy"] = "Never"
    return pc


def group(ns: str, name: str, size: int, *, cpu: str, selector: Mapping[str, str], priority: str,
          member_priority: str | None = None, disruption: str | None = None, never: bool = False
          ) -> list[dict[str, Any]]:
    """A PodGroup of ``size`` (its priority from the class ``priority``) and its ``size`` members (their
    pod priority from ``member_priority``, else the same class). ``disruption``: "all" or "single" (None:
    left to the API server's default); ``never``: ``preemptionPolicy: Never`` on the group."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": size}}, "priorityClassName": priority}
    if disruption:
        spec["disruptionMode"] = {disruption: {}}
    if never:  # the API server defaults it to PreemptLowerPriority before the class is looked at
        spec["preemptionPolicy"] = "Never"
    podgroup = {"apiVersion": API, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns}, "spec": spec}
    members = []
    for i in range(size):
        pod_spec: dict[str, Any] = {
            "restartPolicy": "Never", "nodeSelector": dict(selector), "terminationGracePeriodSeconds": GRACE,
            "priorityClassName": member_priority or priority, "schedulingGroup": {"podGroupName": name},
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}
        members.append(pod(ns, f"{name}-{i}", pod_spec))
    return [podgroup, *members]


def stored(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    """The PodGroup's spec as the API server keeps it."""
    spec: dict[str, Any] = cp.request("GET", f"/apis/{API}/namespaces/{ns}/podgroups/{name}")["spec"]
    return spec


def existing(cp: ControlPlane, ns: str, prefix: str) -> set[str]:
    return {p["metadata"]["name"] for p in pods(cp, ns) if p["metadata"]["name"].startswith(prefix)}


def order(ext: Extender, ns: str, name: str) -> dict[str, Any] | None:
    """The gang's place in the extender's admission order (``explain``), None when it is not waiting."""
    with urllib.request.urlopen(f"{ext.url}/explain/{ns}/{name}", timeout=5) as reply:
        gangs = json.loads(reply.read())["gangs"]
    found: dict[str, Any] | None = gangs[0].get("order") if gangs else None
    return found


def wait_bound(cp: ControlPlane, ns: str, prefix: str, count: int) -> dict[str, str]:
    wait_for(lambda: len(bound(cp, ns, prefix)) == count, timeout=WAIT, what=f"{count} pods {prefix}* bound")
    return bound(cp, ns, prefix)


def preempted(cp: ControlPlane, ns: str) -> set[str]:
    return {e["involvedObject"]["name"] for e in events(cp, ns, "Preempted")}


def clean(cp: ControlPlane, ns: str) -> None:
    cp.kubectl("delete", "pods", "--all", "-n", ns, "--wait=false")
    wait_for(lambda: not pods(cp, ns), timeout=WAIT, what=f"the pods of {ns} gone")


def test_a_higher_priority_podgroup_evicts_a_disruption_mode_all_podgroup_whole(
        bed: tuple[ControlPlane, Extender, Kwok]) -> None:
    cp, ext, kwok = bed
    ns, labels, _nodes = pool(cp, kwok, "v137-all")
    create(cp, priority_class(f"{ns}-low", 100), priority_class(f"{ns}-high", 1000))
    create(cp, *group(ns, "low", 4, cpu="3", selector=labels, priority=f"{ns}-low", disruption="all"))
    low = set(wait_bound(cp, ns, "low-", 4))
    assert stored(cp, ns, "low")["priority"] == 100 and stored(cp, ns, "low")["disruptionMode"] == {"all": {}}
    create(cp, *group(ns, "high", 2, cpu="3", selector=labels, priority=f"{ns}-high"))
    assert stored(cp, ns, "high")["priority"] == 1000
    # two nodes would do, but the low group goes whole: never some of its members
    placed = wait_bound(cp, ns, "high-", 2)
    wait_for(lambda: not existing(cp, ns, "low-"), timeout=WAIT, what="the whole low group evicted and gone")
    wait_for(lambda: preempted(cp, ns) == low, timeout=WAIT, what="a Preempted Event on each member of the low group")
    assert all(f"gang {ns}/high (priority 1000)" in e["message"] for e in events(cp, ns, "Preempted"))
    assert events(cp, ns, "GangPreempting")
    assert len(set(placed.values())) == 2
    check_invariants(cp, ext)
    clean(cp, ns)


@pytest.mark.parametrize("disruption", ["single", None], ids=["stated", "defaulted"])
def test_a_single_disruption_mode_podgroup_loses_only_the_pods_the_preemptor_needs(
        bed: tuple[ControlPlane, Extender, Kwok], disruption: str | None) -> None:
    cp, ext, kwok = bed
    ns, labels, _nodes = pool(cp, kwok, f"v137-single-{'stated' if disruption else 'defaulted'}")
    create(cp, priority_class(f"{ns}-low", 100), priority_class(f"{ns}-high", 1000))
    create(cp, *group(ns, "low", 4, cpu="3", selector=labels, priority=f"{ns}-low", disruption=disruption))
    low = wait_bound(cp, ns, "low-", 4)
    assert stored(cp, ns, "low")["disruptionMode"] == {"single": {}}  # the API server's default when unset
    create(cp, *group(ns, "high", 2, cpu="3", selector=labels, priority=f"{ns}-high"))
    placed = wait_bound(cp, ns, "high-", 2)
    wait_for(lambda: len(existing(cp, ns, "low-")) == 2, timeout=WAIT, what="two low pods evicted and gone")
    time.sleep(3)  # no more go later
    kept = bound(cp, ns, "low-")
    assert len(kept) == 2 and all(low[name] == node for name, node in kept.items()), kept
    assert preempted(cp, ns) == set(low) - set(kept)
    assert set(placed.values()) == set(low.values()) - set(kept.values())
    check_invariants(cp, ext)
    clean(cp, ns)


def test_a_podgroup_whose_preemption_policy_is_never_waits_and_evicts_nothing(
        bed: tuple[ControlPlane, Extender, Kwok]) -> None:
    cp, ext, kwok = bed
    ns, labels, _nodes = pool(cp, kwok, "v137-never")
    create(cp, priority_class(f"{ns}-low", 100), priority_class(f"{ns}-high", 1000),
           priority_class(f"{ns}-never", 1000, never=True))
    create(cp, *group(ns, "low", 4, cpu="3", selector=labels, priority=f"{ns}-low", disruption="all"))
    low = wait_bound(cp, ns, "low-", 4)
    # only the group says Never: its members' own class (same value) would let them preempt
    create(cp, *group(ns, "patient", 2, cpu="3", selector=labels, priority=f"{ns}-never",
                      member_priority=f"{ns}-high", never=True))
    # the API server defaults preemptionPolicy to PreemptLowerPriority before the Priority admission
    # compares it with the class: a group naming a Never class must say Never itself
    unsaid = group(ns, "unsaid", 2, cpu="3", selector=labels, priority=f"{ns}-never")[0]
    refused = cp.kubectl("create", "-f", "-", input=json.dumps(unsaid), check=False)
    assert refused.returncode != 0, refused.stdout
    assert "PreemptionPolicy (PreemptLowerPriority) must not be provided" in refused.stderr, refused.stderr
    kept = stored(cp, ns, "patient")
    assert kept.get("preemptionPolicy") == "Never" and kept["priority"] == 1000, kept
    assert {p["spec"].get("preemptionPolicy") for p in pods(cp, ns) if p["metadata"]["name"].startswith("patient-")
            } == {"PreemptLowerPriority"}
    wait_for(lambda: (order(ext, ns, "patient") or {}).get("position") == 1, timeout=WAIT,
             what="the patient group first in the admission order")
    assert (order(ext, ns, "patient") or {}).get("priority") == 1000
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert bound(cp, ns, "low-") == low, "a pod was evicted for a group whose preemptionPolicy is Never"
        assert bound(cp, ns, "patient-") == {}
        time.sleep(0.5)
    assert events(cp, ns, "Preempted") == [] and events(cp, ns, "GangPreempting") == []
    check_invariants(cp, ext)
    clean(cp, ns)

"""Core gang scenarios on Kubernetes v1.37 with the ``scheduling.k8s.io/v1beta1`` PodGroup API.

Pods join a gang with ``spec.schedulingGroup.podGroupName``; the PodGroup's ``minCount`` is mutable.
kube-scheduler runs without GenericWorkload (the in-tree gang plugin is off), so gang-extender decides
every gang and writes the ``PodGroupInitiallyScheduled`` condition users read with kubectl.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from controlplane import ControlPlane, wait_for
from support import (
    GANG_EXTENDER,
    Extender,
    Sampler,
    all_bound,
    check_invariants,
    create,
    events,
    pod,
    pod_spec,
    scenario,
    scheduling_with_extender,
    stays_unbound,
)

pytestmark = pytest.mark.e2e

API = "scheduling.k8s.io/v1beta1"


@pytest.fixture(scope="module")
def cluster(control_plane_137: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    cp = control_plane_137
    resources = cp.kubectl("api-resources", "--api-group=scheduling.k8s.io").stdout
    assert "podgroups" in resources and API in resources, resources
    with scheduling_with_extender(cp, tmp_path_factory.mktemp("extender-137")) as ext:
        yield {"cp": cp, "ext": ext}


@pytest.fixture(autouse=True)
def invariants(cluster: dict[str, Any]) -> Iterator[None]:
    yield
    check_invariants(cluster["cp"], cluster["ext"])


def podgroup(ns: str, name: str, min_count: int) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


def members(ns: str, group: str, count: int, selector: dict[str, str], start: int = 0) -> list[dict[str, Any]]:
    spec = pod_spec(cpu="1", selector=selector)
    spec["schedulingGroup"] = {"podGroupName": group}
    return [pod(ns, f"{group}-{i}", spec) for i in range(start, start + count)]


def condition(cp: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    obj = cp.request("GET", f"/apis/{API}/namespaces/{ns}/podgroups/{name}")
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "PodGroupInitiallyScheduled"]
    return found[0] if found else None


def test_podgroup_of_four_with_room_binds_whole(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "v137-whole")
    with Sampler(cp, ns) as sampler:
        create(cp, podgroup(ns, "pg", 4), *members(ns, "pg", 4, labels))
        all_bound(cp, ns, "pg-", 4, nodes)
    assert sampler.partial("pg-", 4) == []
    wait_for(lambda: (condition(cp, ns, "pg") or {}).get("status") == "True", timeout=30,
             what="PodGroupInitiallyScheduled=True written by gang-extender")
    written = condition(cp, ns, "pg")
    assert written is not None and written["reason"] == "Scheduled", written
    assert "4 member(s) bound together at quorum" in written["message"], written
    wait_for(lambda: bool(events(cp, ns, "GangBound")), timeout=30, what="a GangBound event")
    (bound_event,) = events(cp, ns, "GangBound")  # one per gang, on its PodGroup (kubectl describe podgroup)
    assert {k: bound_event["involvedObject"][k] for k in ("kind", "name")} == {"kind": "PodGroup", "name": "pg"}


def test_three_of_four_wait_then_bind_with_the_fourth(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ext: Extender = cluster["ext"]
    ns, labels, nodes = scenario(cp, "v137-quorum")
    pods = members(ns, "pg", 4, labels)
    with Sampler(cp, ns) as sampler:
        create(cp, podgroup(ns, "pg", 4), *pods[:3])
        stays_unbound(cp, ns, "pg-", 5)
        wait_for(lambda: (condition(cp, ns, "pg") or {}).get("reason") == "Unschedulable", timeout=30,
                 what="PodGroupInitiallyScheduled=False/Unschedulable")
        waiting = condition(cp, ns, "pg")
        assert waiting is not None and waiting["status"] == "False"
        assert waiting["message"] == f"waiting for gang {ns}/pg: 3/4 pods exist", waiting
        wait_for(lambda: bool(events(cp, ns, "GangWaiting")), timeout=30, what="a GangWaiting event")
        explained = subprocess.run([GANG_EXTENDER, "explain", f"{ns}/pg", "--url", ext.url, "--json"],
                                   capture_output=True, text=True, timeout=30, check=True)
        (gang,) = json.loads(explained.stdout)["gangs"]
        assert gang["state"] == "WaitingForMembers" and gang["minCount"] == 4, gang
        assert gang["apiVersion"] == API and gang["members"]["existing"] == 3, gang
        text = subprocess.run([GANG_EXTENDER, "explain", f"{ns}/pg", "--url", ext.url],
                              capture_output=True, text=True, timeout=30, check=True).stdout
        assert "3/4 pods exist" in text and "minCount 4" in text, text
        create(cp, pods[3])
        all_bound(cp, ns, "pg-", 4, nodes)
    assert sampler.partial("pg-", 4) == []
    wait_for(lambda: (condition(cp, ns, "pg") or {}).get("status") == "True", timeout=30,
             what="PodGroupInitiallyScheduled=True")


def test_min_count_lowered_from_four_to_three_binds_the_three(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "v137-scale")
    with Sampler(cp, ns) as sampler:
        create(cp, podgroup(ns, "pg", 4), *members(ns, "pg", 3, labels))
        stays_unbound(cp, ns, "pg-", 4)
        cp.kubectl("patch", "podgroups.scheduling.k8s.io", "pg", "-n", ns, "--type=merge",
                   "-p", json.dumps({"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}))
        all_bound(cp, ns, "pg-", 3, nodes)
    assert sampler.partial("pg-", 3) == []


def test_podgroup_created_after_its_pods_wakes_them(cluster: dict[str, Any]) -> None:
    """kube-scheduler (gate off) does not watch PodGroups, so the PodGroup's creation is no event for it:
    gang-extender wakes the pods it rejected for the missing PodGroup when the PodGroup appears (the unit
    test test_podgroup_created_after_its_pods_wakes_them pins the wake-up; here: they bind promptly)."""
    cp: ControlPlane = cluster["cp"]
    ns, labels, nodes = scenario(cp, "v137-late")
    create(cp, *members(ns, "pg", 2, labels))
    wait_for(lambda: any("PodGroup v137-late/pg does not exist" in e["message"]
                         for e in events(cp, ns, "FailedScheduling")), timeout=30,
             what="the members rejected for the missing PodGroup")
    started = time.monotonic()
    create(cp, podgroup(ns, "pg", 2))
    all_bound(cp, ns, "pg-", 2, nodes)
    assert time.monotonic() - started < 30


def test_preemption_policy_is_dropped_without_its_gate_and_the_other_kep_5710_fields_are_kept(
        cluster: dict[str, Any]) -> None:
    """Without ``PodGroupPreemptionPolicy`` (alpha in 1.37.2, off here) the API server drops a PodGroup's
    ``preemptionPolicy`` without a word; ``priorityClassName``, ``priority`` (resolved by the Priority
    admission plugin) and ``disruptionMode`` (defaulted to ``single``) need only GenericWorkload.
    ``test_gang_preemption_v137.py`` runs on a control plane with the gate on."""
    cp: ControlPlane = cluster["cp"]
    ns = "v137-fields"
    cp.create_namespace(ns)
    create(cp, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": f"{ns}-never"},
                "value": 1000, "preemptionPolicy": "Never"})
    never = podgroup(ns, "never", 2)
    never["spec"].update(priorityClassName=f"{ns}-never", preemptionPolicy="Never", disruptionMode={"all": {}})
    create(cp, never, podgroup(ns, "plain", 2))
    spec = cp.request("GET", f"/apis/{API}/namespaces/{ns}/podgroups/never")["spec"]
    assert "preemptionPolicy" not in spec, spec
    assert (spec["priorityClassName"], spec["priority"], spec["disruptionMode"]) == (f"{ns}-never", 1000, {"all": {}})
    plain = cp.request("GET", f"/apis/{API}/namespaces/{ns}/podgroups/plain")["spec"]
    assert (plain["priority"], plain["disruptionMode"]) == (0, {"single": {}}), plain

"""kube-scheduler's own preemption with ``preemptVerb: preempt``: a real kube-scheduler v1.35 asks
gang-extender which of its candidate nodes it may preempt on, and never evicts a member of a running gang.

The scenario makes kube-scheduler's own choice a gang member: three 4-cpu nodes, a mid-priority plain
pod (3 cpu) on one, a low-priority gang of two 3-cpu members on the other two, then a high-priority
plain pod of 2 cpu that fits nowhere. Without the extender kube-scheduler picks the node whose victim
has the lowest priority (a gang member); with it those nodes are dropped and the plain pod is the victim.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from controlplane import ControlPlane, wait_for
from support import WAIT, all_bound, create, pod, pod_spec, pods, scenario, scheduling_with_extender, workload

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cp(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with scheduling_with_extender(control_plane, tmp_path_factory.mktemp("extender"), preempt=True):
        yield control_plane


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value}


def with_priority(obj: dict[str, Any], priority_class_name: str) -> dict[str, Any]:
    obj["spec"]["priorityClassName"] = priority_class_name
    return obj


def live(cp: ControlPlane, ns: str) -> dict[str, dict[str, Any]]:
    """name -> pod, for the pods not being deleted."""
    return {p["metadata"]["name"]: p for p in pods(cp, ns) if not p["metadata"].get("deletionTimestamp")}


def test_plain_pod_never_evicts_a_member_of_a_running_gang(cp: ControlPlane) -> None:
    ns, labels, nodes = scenario(cp, "preempt", nodes=3, cpu="4")
    first = sorted(nodes)[0]
    create(cp, *(priority_class(f"{ns}-{name}", value) for name, value in (("low", 100), ("mid", 500),
                                                                           ("high", 1000))))
    create(cp, with_priority(pod(ns, "filler", pod_spec(cpu="3", selector={"kubernetes.io/hostname": first})),
                             f"{ns}-mid"))
    all_bound(cp, ns, "filler", 1, {first})
    ref = {"name": "w", "podGroup": "workers"}
    create(cp, workload(ns, "w", {"workers": 2}),
           *(with_priority(pod(ns, f"gang-{i}", pod_spec(cpu="3", selector=labels, workload_ref=ref)), f"{ns}-low")
             for i in range(2)))
    gang = all_bound(cp, ns, "gang-", 2, nodes - {first})
    uids = {name: p["metadata"]["uid"] for name, p in live(cp, ns).items() if name in gang}

    create(cp, with_priority(pod(ns, "urgent", pod_spec(cpu="2", selector=labels)), f"{ns}-high"))

    def filler_preempted() -> bool:
        return "filler" not in live(cp, ns)
    wait_for(filler_preempted, timeout=WAIT, what="the plain mid-priority pod to be preempted")
    urgent = live(cp, ns)["urgent"]
    assert first in (urgent["spec"].get("nodeName"), urgent.get("status", {}).get("nominatedNodeName")), urgent
    still = live(cp, ns)
    assert {name: still[name]["metadata"]["uid"] for name in gang if name in still} == uids  # the gang is whole
    assert {name: still[name]["spec"].get("nodeName") for name in gang} == gang


def test_members_of_a_gang_that_cannot_run_evict_nothing(cp: ControlPlane) -> None:
    # two 4-cpu nodes, each with a low-priority 3-cpu plain pod; a high-priority gang of three 3-cpu
    # members: evicting both plain pods would still leave the third member without a node
    ns, labels, nodes = scenario(cp, "veto", nodes=2, cpu="4")
    create(cp, *(priority_class(f"{ns}-{name}", value) for name, value in (("low", 100), ("high", 1000))))
    create(cp, *(with_priority(pod(ns, f"plain-{i}", pod_spec(cpu="3", selector={"kubernetes.io/hostname": node})),
                               f"{ns}-low") for i, node in enumerate(sorted(nodes))))
    plain = all_bound(cp, ns, "plain-", 2, nodes)
    ref = {"name": "w", "podGroup": "workers"}
    create(cp, workload(ns, "w", {"workers": 3}),
           *(with_priority(pod(ns, f"gang-{i}", pod_spec(cpu="3", selector=labels, workload_ref=ref)), f"{ns}-high")
             for i in range(3)))
    deadline = time.monotonic() + 20  # kube-scheduler retries each member (and tries to preempt) every 1-10 s
    while time.monotonic() < deadline:
        now = live(cp, ns)
        assert {name: now[name]["spec"].get("nodeName") for name in plain if name in now} == plain, \
            "a plain pod was preempted for a member of a gang that cannot run"
        assert not any(now[name].get("status", {}).get("nominatedNodeName") for name in now if name.startswith("gang-"))
        time.sleep(0.5)

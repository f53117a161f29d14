"""The barrier under churn on the real control plane (issue 26): members replaced while held.

A gang of 4 whose last member is held back by a scheduling gate: its first three members reach the
barrier and are held. Member 0 is then deleted and re-created under its name (a new uid), as Job, JobSet,
StatefulSet and LeaderWorkerSet controllers replace pods. Before issue 26 the deleted member's hold still
counted, and the quorum {old m0, m1, new m0} released three members while the fourth was still gated.
Now the old hold is answered at once, the new m0 holds on its own, and nothing is bound until the gate
is lifted; then the four are bound together.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from observe import PodWatch, observed_scheduling, remove_gates, wait_in_flight
from support import create, pod, pod_spec, scenario

pytestmark = pytest.mark.e2e

GATE = "e2e.gang-extender.io/held-back"
EXTENDER_ARGS = ("--scheduler-http-timeout-seconds", "10", "--gang-timeout-seconds", "60")
SCHEDULER_SETTINGS = {"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 2}


def _member(ns: str, name: str, selector: dict[str, str], *, gated: bool = False) -> dict[str, Any]:
    annotations = {"gang-extender.io/group": "churn", "gang-extender.io/min-count": "4"}
    raw = pod(ns, name, pod_spec(cpu="1", selector=selector), annotations=annotations)
    if gated:
        raw["spec"]["schedulingGates"] = [{"name": GATE}]
    return raw


def test_a_held_member_re_created_under_its_name_does_not_complete_the_quorum(
        control_plane: ControlPlane, tmp_path: Path) -> None:
    cp = control_plane
    ns, labels, _ = scenario(cp, "churn-held", nodes=2, cpu="8")
    names = [f"w-{i}" for i in range(4)]
    with (observed_scheduling(cp, tmp_path, EXTENDER_ARGS, http_timeout="11s",
                              scheduler_settings=SCHEDULER_SETTINGS) as (_, proxy),
          PodWatch(cp, ns) as watch):
        create(cp, *(_member(ns, n, labels, gated=n == names[-1]) for n in names))
        wait_in_flight(proxy, {f"{ns}/{n}" for n in names[:3]}, timeout=60)
        cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{names[0]}?gracePeriodSeconds=0")
        watch.wait(lambda w: names[0] in w.deleted, timeout=30, what="member 0 deleted")
        create(cp, _member(ns, names[0], labels))
        # the new member 0 reaches the barrier too: the system is running, and still nothing is bound
        binds_before = len(proxy.exchanges("bind"))
        wait_for_bind(proxy, f"{ns}/{names[0]}", after=binds_before, timeout=60)
        wait_in_flight(proxy, {f"{ns}/{n}" for n in names[:3]}, timeout=60)
        assert watch.bound(names) == [], f"bound while the fourth member is gated: {watch.bound(names)}"
        removed = time.monotonic()
        remove_gates(cp, ns, names[-1])
        watch.wait(lambda w: len(w.bound(names)) == 4, timeout=60, what="the four members bound")
        assert watch.error is None, watch.error
    bound = watch.bound(names)
    gate_order, _ = watch.ungated[names[-1]]
    early = [b.pod for b in bound if b.order < gate_order or b.seen < removed]
    assert early == [], f"members bound before the gate was removed: {early}"
    errors = [e.error for e in proxy.exchanges("bind") if e.pod == f"{ns}/{names[0]}" and e.error]
    assert any("no longer counts toward the quorum" in error for error in errors), errors
    print(f"\n[e2e] churn-held: whole {max(b.seen for b in bound) - removed:.2f}s after the gate's removal")


def wait_for_bind(proxy: Any, pod_name: str, *, after: int, timeout: float) -> None:
    """Until a bind request for ``pod_name`` arrives after the ``after``-th one recorded."""
    deadline = time.monotonic() + timeout
    while not any(e.pod == pod_name for e in proxy.exchanges("bind")[after:]):
        assert time.monotonic() < deadline, f"no bind request for {pod_name}"
        time.sleep(0.05)

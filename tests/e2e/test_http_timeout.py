"""No held bind outlives kube-scheduler's ``httpTimeout`` (issue 11, "Done when": the 16-member gang).

kube-scheduler's extender ``httpTimeout`` is 5 s and gang-extender is told so
(``--scheduler-http-timeout-seconds 5``); the gang timeout is 60 s. A 16-member annotation gang's last
member is created behind a scheduling gate that is removed after 40 s, while the other 15 go to the
bind barrier (the quorum gate counts the gated pod). The extender is judged from outside: a
``RecordingProxy`` between kube-scheduler and gang-extender times every bind request and reply, and a
``PodWatch`` times every binding in the API server's order. kube-scheduler's pod back-off is capped at
2 s (``SCHEDULER_SETTINGS``), or recycled members return too late for the 5 s bound.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from observe import Binding, Exchange, PodWatch, RecordingProxy, observed_scheduling, remove_gates
from support import create, pod, pod_spec, scenario

pytestmark = pytest.mark.e2e

HTTP_TIMEOUT = 5.0  # kube-scheduler's extender httpTimeout in this test
GATE_SECONDS = 40.0  # how long the last member is held back
SIZE = 16
WHOLE_WITHIN = 5.0  # the gang must be bound this soon after the gate's removal
# A Binding is committed before the extender answers, but the watch may deliver it a little after the
# proxy relayed that answer (two paths out of the API server): this much lateness is not a zombie bind.
DELIVERY_SLACK = 0.5
EXTENDER_ARGS = ("--scheduler-http-timeout-seconds", "5", "--gang-timeout-seconds", "60")
GATE = "e2e.gang-extender.io/held-back"
# kube-scheduler's pod back-off (default 1 s doubling to 10 s): a member whose hold was answered with a retry
# comes back only after it, so with the default the 15 recycled members were back together 12.3 s after the
# gate's removal; capped at 2 s, 1.9 s; at 1 s, 0.1 s (one run each, work-in-progress extender of issue 11).
SCHEDULER_SETTINGS = {"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 2}


def _members(ns: str, selector: dict[str, str]) -> list[dict[str, Any]]:
    annotations = {"gang-extender.io/group": "big", "gang-extender.io/min-count": str(SIZE)}
    members = [pod(ns, f"big-{i}", pod_spec(cpu="1", selector=selector), annotations=annotations) for i in range(SIZE)]
    members[-1]["spec"] = {**pod_spec(cpu="1", selector=selector), "schedulingGates": [{"name": GATE}]}
    return members


def _answered_in_time(binding: Binding, ns: str, binds: list[Exchange]) -> str:
    """"" if a bind request for this pod that kube-scheduler still waited for was answered OK around the
    binding; else why not (with every bind request the pod had)."""
    mine = [e for e in binds if e.pod == f"{ns}/{binding.pod}"]
    for e in mine:
        if (e.error == "" and e.replied is not None and e.caller_gone is None
                and e.replied - e.arrival < HTTP_TIMEOUT and e.arrival <= binding.seen <= e.replied + DELIVERY_SLACK):
            return ""
    history = [(round(e.arrival, 2), None if e.replied is None else round(e.replied - e.arrival, 2),
                None if e.caller_gone is None else round(e.caller_gone - e.arrival, 2), (e.error or "")[:60])
               for e in mine]
    return (f"{binding.pod} bound at {binding.seen:.2f} with no bind request answered OK in time around it; "
            f"its requests (arrival, replied after, caller gone after, error): {history}")


def _late_ok_replies(ns: str, binds: list[Exchange]) -> list[str]:
    """OK answers that kube-scheduler no longer waited for (it hung up, or its timeout had run out)."""
    return [f"{e.pod}: OK after {(e.answered or 0) - e.arrival:.1f}s (caller gone: {e.caller_gone is not None})"
            for e in binds if e.pod.startswith(ns + "/") and e.error == "" and
            (e.caller_gone is not None or e.replied is None or e.replied - e.arrival >= HTTP_TIMEOUT)]


def test_a_gated_member_keeps_its_gang_waiting_without_zombie_binds(
        control_plane: ControlPlane, tmp_path: Path) -> None:
    cp = control_plane
    ns, labels, _ = scenario(cp, "http-timeout", nodes=4, cpu="8")
    names = [f"big-{i}" for i in range(SIZE)]
    with (observed_scheduling(cp, tmp_path, EXTENDER_ARGS, http_timeout=f"{HTTP_TIMEOUT:g}s",
                              scheduler_settings=SCHEDULER_SETTINGS) as (_, proxy),
          PodWatch(cp, ns) as watch):
        created = time.monotonic()
        create(cp, *_members(ns, labels))
        time.sleep(max(0.0, created + GATE_SECONDS - time.monotonic()))
        reached = {e.pod for e in proxy.exchanges("bind")}
        removed = time.monotonic()
        remove_gates(cp, ns, names[-1])
        watch.wait(lambda w: len(w.bound(names)) == SIZE, timeout=30, what=f"all {SIZE} members bound")
        time.sleep(1.0)  # late replies and bindings, if any, are recorded too
        assert watch.error is None, watch.error
    binds = proxy.exchanges("bind")
    bound = watch.bound(names)
    whole = max(b.seen for b in bound) - removed
    _report(proxy, binds, whole, created)
    assert {f"{ns}/{n}" for n in names[:-1]} <= reached, "the 15 ungated members never reached the bind barrier"
    # (c) no member bound before the gate's removal (in the API server's order and in time)
    gate_order, _ = watch.ungated[names[-1]]
    early = [b.pod for b in bound if b.order < gate_order or b.seen < removed]
    assert early == [], f"members bound before the gate was removed: {early}"
    # (a) every Binding answers a bind request kube-scheduler was still waiting for
    problems = [p for p in (_answered_in_time(b, ns, binds) for b in bound) if p]
    assert problems == [], "\n".join(problems)
    assert _late_ok_replies(ns, binds) == []
    # (b) whole soon after the gate's removal
    assert whole <= WHOLE_WITHIN, f"the gang was whole {whole:.1f}s after the gate's removal"


def _report(proxy: RecordingProxy, binds: list[Exchange], whole: float, created: float) -> None:
    held = [e.answered - e.arrival for e in binds if e.answered is not None]
    gone = sum(1 for e in binds if e.caller_gone is not None)
    retries = sum(1 for e in binds if e.error)
    print(f"\n[e2e] http-timeout: whole {whole:.2f}s after the gate's removal; {len(binds)} bind requests "
          f"({retries} answered with an error, {gone} abandoned by kube-scheduler), longest hold "
          f"{max(held, default=0):.2f}s; {len(proxy.exchanges('filter'))} filters in "
          f"{time.monotonic() - created:.0f}s")

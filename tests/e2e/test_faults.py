"""Faults, short versions (the long runs with the figures: ``make faults``, hack/faults.py).

kill -9 of the extender while gangs schedule, a kube-apiserver restart while gangs wait, and the API
server refusing one member's binding at quorum. Scenario code and figures: faults.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from controlplane import ControlPlane
from faults import apiserver_restart, bind_refused_mid_gang, kill_during_gangs, release_cut_by_crash
from support import Extender, scheduler_config

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    ext = Extender(control_plane.kubeconfig, tmp_path_factory.mktemp("extender"), log=print,
                   args=["--gang-timeout-seconds", "12", "--gang-backoff-seconds", "2"])
    ext.start()
    # The shipped configurations leave the optional prioritize verb out; this suite turns it on, so the
    # real kube-scheduler calls it too (test_prioritize_answers_kube_scheduler).
    control_plane.start_scheduler(scheduler_config(ext.url, prioritize=True))
    try:
        yield {"cp": control_plane, "ext": ext}
    finally:
        control_plane.stop_scheduler()
        ext.stop()


def _assert_whole(figures: dict[str, Any]) -> None:
    assert figures["pods_not_bound"] == 0 and figures["gangs_bound_whole"] == figures["gangs"], figures
    assert figures["partial_gangs"] == [] and figures["double_bindings"] == [], figures
    assert figures["lost_bindings"] == [] and figures["overcommitted_nodes"] == [], figures


def test_kill_9_while_gangs_schedule(cluster: dict[str, Any]) -> None:
    figures = kill_during_gangs(cluster["cp"], cluster["ext"], "f-kill", kills=3, seed=6, log=print)
    # A kill inside a release (the gang's Bindings are separate API calls, some done, some not) leaves the
    # gang partial while the extender is down; the restarted extender finishes it from its release journal
    # before it is ready, so no gang stays partial once it is back.
    _assert_whole(figures)


def test_release_cut_by_a_crash_is_finished_before_ready(cluster: dict[str, Any]) -> None:
    figures = release_cut_by_crash(cluster["cp"], cluster["ext"], "f-cut", log=print)
    nodes = figures["journal_nodes"]
    expected = {name: nodes[name] for name in ("cut-0", "cut-1", "cut-2")}
    assert figures["bound_at_ready"] == expected, figures  # cut-3 was re-created: not the released pod
    assert figures["bound_after"] == expected, figures
    # one Event for the gang; an annotation gang has no object, so it goes on its first member
    assert figures["resumed_metric"] == 1 and len(figures["resumed_events"]) == 1, figures
    assert figures["resumed_events"][0][0] == "cut-0" and "remaining 2 member(s)" in figures["resumed_events"][0][1]
    assert figures["unfinished_after"] == [], figures


def test_prioritize_answers_kube_scheduler(cluster: dict[str, Any]) -> None:
    """With prioritizeVerb configured kube-scheduler calls it for pods with more than one feasible node;
    every call is answered 200 with one score per requested node, never a node it did not send."""
    calls = 0
    for line in cluster["ext"].record_path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill -9
        if entry.get("verb") != "prioritize":
            continue
        calls += 1
        assert entry["status"] == 200, entry
        assert [h["Host"] for h in entry["reply"]] == entry["request"]["NodeNames"], entry
        assert all(0 <= h["Score"] <= 10 for h in entry["reply"]), entry
    assert calls > 0, "kube-scheduler never called prioritize"


def test_apiserver_restart_while_gangs_wait(cluster: dict[str, Any]) -> None:
    figures = apiserver_restart(cluster["cp"], cluster["ext"], "f-restart", restarts=1, log=print)
    _assert_whole(figures)
    (outage,) = figures["outages"]
    # /readyz said so within a second of the API server's death, and until it came back
    assert outage["first_503_after_seconds"] is not None and outage["first_503_after_seconds"] < 1.5, outage
    assert outage["readyz_200_while_down_after_first_503"] == 0, outage
    assert outage["readyz_not_200_after_recovery"] == 0, outage
    assert figures["pod_relists"] >= 1, figures


def test_binding_refused_at_quorum_is_reported_and_retried(cluster: dict[str, Any]) -> None:
    figures = bind_refused_mid_gang(cluster["cp"], cluster["ext"], "f-refused", log=print)
    assert figures["bound_while_denied"] == ["r-0", "r-1", "r-2"], figures  # a Binding cannot be undone
    assert figures["event_pods"] == ["r-3-refused"] and "e2e-deny-binding" in figures["event_example"], figures
    assert figures["bind_errors_metric"] >= 1, figures
    # the barrier mode left it partly bound (the API server's refusal): told and counted, then finished
    assert figures["partially_bound_metric"] == 1, figures
    assert len(figures["partially_bound_events"]) == 1, figures
    assert "is partly bound: 3 of the 4 members" in figures["partially_bound_events"][0], figures
    assert figures["members_bound_at_the_end"] == 4 and figures["pods_on_two_nodes"] == [], figures
    assert figures["overcommitted_nodes"] == [], figures

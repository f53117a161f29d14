"""The end-to-end benchmark's arithmetic, without a control plane (well under a second).

bench/e2e_scheduling.py needs kube-apiserver and minutes; what it computes from its measurements
does not: issue 29's floors (gang-extender against the do-nothing extender and the in-tree plugin),
the per-phase differences of kube-scheduler's and gang-extender's metrics, the gang milestones read
from a request recording, and the paced creation schedule. These keep that arithmetic honest.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import orjson

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import e2e_meters  # noqa: E402
import gang_trace  # noqa: E402
import workloads as wl  # noqa: E402
from e2e_report import Phase, floors, read_json, tables, write_json  # noqa: E402


def _phase(pods_per_second: float, extender_cpu: dict[str, float] | None = None, **kw: Any) -> Phase:
    p = Phase(pods=2000, gangs=250, bound=2000, seconds=2000 / pods_per_second, completed_gangs=250, **kw)
    p.cpu = dict(extender_cpu or {})
    return p


def _results() -> list[dict[str, Any]]:
    noop = {"config": "noop-extender", "kind": "noop-extender",
            "backlog": _phase(200, {"noop-extender": 4.0}), "arrival": _phase(180, {"noop-extender": 4.0}),
            "paced": _phase(90)}
    ge = {"config": "gang-extender", "kind": "gang-extender",
          # backlog: 192/200 = 96 %, CPU 5.0 s / 2000 = 2.5 ms with 0.5 writes/pod x 0.75 = 2.125 <= 2.3
          "backlog": _phase(192, {"gang-extender": 5.0}, extender_writes={"Events": 1000.0}, timeouts=0.0),
          # arrival: 150/180 = 83 %, 3.0 ms/pod, no writes: 3.0 > 2.3
          "arrival": _phase(150, {"gang-extender": 6.0}, extender_writes={"Events": 0.0}, timeouts=0.0),
          # paced: 180 unschedulable attempts of 2,000 pods = 0.09/pod, the in-tree plugin's none
          "paced": _phase(90, gang_latency=[0.5] * 200 + [1.5] * 50, timeouts=0.0,
                          scheduler={"attempts": 2180.0, "attempts unschedulable": 180.0})}
    tree = {"config": "in-tree", "kind": "in-tree", "backlog": _phase(190), "arrival": _phase(200),
            "paced": _phase(90, gang_latency=[0.4] * 240 + [2.0] * 10, scheduler={"attempts": 2000.0})}
    return [noop, ge, tree]


def test_floors_judge_gang_extender_against_the_noop_extender_and_the_in_tree_plugin() -> None:
    lines = floors(_results(), write_ms=0.75)
    assert len(lines) == 8, lines  # no contention phase in these results
    backlog_rate, backlog_cpu, arrival_rate, arrival_cpu, whole, p50, p99, unschedulable = lines
    assert "PASS" in backlog_rate and "192 / 200 = 96%" in backlog_rate
    assert "PASS" in backlog_cpu and "2.50 ms/pod" in backlog_cpu and "0.50 writes/pod" in backlog_cpu
    assert "2.12 against 2.00 + 0.3 ms" in backlog_cpu
    assert "MISS" in arrival_rate and "83%" in arrival_rate
    assert "MISS" in arrival_cpu and "3.00 against 2.00" in arrival_cpu
    assert "PASS" in whole and "250/250 whole" in whole
    assert "MISS" in p50 and "500.0 ms against 400.0 ms" in p50
    assert "PASS" in p99 and "1500.0 ms against 2000.0 ms" in p99
    assert "MISS" in unschedulable and "0.09 against 0.00" in unschedulable
    assert "ceiling" not in " ".join(lines) and "80 %" not in " ".join(lines)  # the retired floor is gone


def test_tables_render_every_phase_and_the_extender_cpu_per_pod() -> None:
    text = tables(_results())
    assert "### Paced" in text and "### Backlog" in text and "### Arrival" in text
    assert "| gang-extender | 2,000 | 2,000 | 10.4 | 192 |" in text
    assert "| 2.50 | 0.50 |" in text  # gang-extender backlog: CPU ms/pod, writes/pod
    assert text.count("| in-tree | 2,000 |") == 3  # a row in each phase's table, the last one too
    assert "### Contention" not in text  # no contention phase in these results


FAILED_TRY = 'scheduler_queue_incoming_pods_total{event="ScheduleAttemptFailure",queue="unschedulable"}'


def test_a_saved_run_renders_the_same_tables_and_floors(tmp_path: Path) -> None:
    write_json(tmp_path / "run.json", {"pin": False}, _results())
    again = read_json(tmp_path / "run.json")
    assert tables(again) == tables(_results()) and floors(again) == floors(_results())


def test_scheduler_and_extender_metrics_are_differenced_between_scrapes() -> None:
    before = e2e_meters.prom('scheduler_schedule_attempts_total{profile="p",result="scheduled"} 10\n'
                             'scheduler_queue_incoming_pods_total{event="PodAdd",queue="active"} 10\n'
                             'gang_extender_events_total{outcome="sent"} 3\n'
                             'gang_extender_pod_wakes_total{outcome="dropped"} 5\n')
    after = e2e_meters.prom('scheduler_schedule_attempts_total{profile="p",result="scheduled"} 30\n'
                            'scheduler_schedule_attempts_total{profile="p",result="unschedulable"} 4\n'
                            'scheduler_queue_incoming_pods_total{event="PodAdd",queue="active"} 30\n'
                            f'{FAILED_TRY} 4\n'
                            'scheduler_queue_incoming_pods_total{event="PodAdd",queue="unschedulable"} 3\n'
                            'scheduler_queue_incoming_pods_total{event="UnschedulableTimeout",queue="backoff"} 2\n'
                            'scheduler_pod_scheduling_sli_duration_seconds_sum{attempts="1"} 0.5\n'
                            'scheduler_pod_scheduling_sli_duration_seconds_count{attempts="1"} 20\n'
                            'gang_extender_events_total{outcome="sent"} 7\n'
                            'gang_extender_pod_wakes_total{outcome="dropped"} 9\n'
                            'gang_extender_pod_wakes_total{outcome="sent"} 2\n'
                            'gang_extender_quorum_gates_removed_total{outcome="sent"} 6\n'
                            'gang_extender_quorum_gates_removed_total{outcome="skipped"} 5\n'
                            'gang_extender_group_status_writes_total{outcome="written"} 1\n'
                            'gang_extender_group_status_writes_total{outcome="dropped"} 8\n')
    counts = e2e_meters.scheduler_counts(before, after)
    assert counts["attempts"] == 24 and counts["attempts scheduled"] == 20 and counts["attempts unschedulable"] == 4
    assert counts["moves active"] == 20 and counts["moves unschedulable"] == 4 and counts["moves backoff"] == 2
    assert counts["moves gated"] == 3
    assert counts["sli ms"] == 25.0
    assert e2e_meters.extender_writes(before, after) == {"Events": 4, "pod wakes": 2, "quorum gates removed": 6,
                                                         "group status": 1}


def test_gang_milestones_come_from_the_recording_on_the_driver_clock(tmp_path: Path) -> None:
    offset = 1_000_000.0  # wall clock - monotonic clock
    names = ["ns/g-0", "ns/g-1"]
    created = {"ns/g-0": 10.0, "ns/g-1": 10.2}
    bound = {"ns/g-0": 12.0, "ns/g-1": 12.1}

    def filt(name: str, at: float, passed: bool) -> dict[str, Any]:
        return {"verb": "filter", "arrival": at + offset, "status": 200, "latency_seconds": 0.001,
                "request": {"Pod": {"metadata": {"namespace": "ns", "name": name}}, "NodeNames": ["n1"]},
                "reply": {"NodeNames": ["n1"] if passed else [], "FailedNodes": {}}}

    def bind(name: str, at: float, held: float) -> dict[str, Any]:
        return {"verb": "bind", "arrival": at + offset, "status": 200, "latency_seconds": held,
                "request": {"PodNamespace": "ns", "PodName": name, "Node": "n1"}, "reply": {"Error": ""}}

    records = [filt("g-0", 10.1, False), filt("g-1", 10.3, True), bind("g-1", 10.35, 1.5),
               filt("g-0", 11.4, True), bind("g-0", 11.5, 0.3), filt("other", 10.0, True)]
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + b"{broken\n")
    traces = gang_trace.read_recording(path, offset, names)
    assert set(traces) == set(names) and len(traces["ns/g-0"].filters) == 2
    m = gang_trace.gang_milestones(names, created, bound, traces)
    assert m is not None
    expected = {"first filter": 0.1, "first pass": 1.2, "bind at barrier": 1.3, "binds answered": 1.65, "bound": 1.9}
    assert {k: round(v, 3) for k, v in m.items()} == expected
    summary = gang_trace.summarize([names], created, bound, traces, wl.percentile)
    assert summary["gangs"] == 1 and summary["rejected_filters_per_pod"] == 0.5
    assert summary["pods_turned_away_first"] == 1
    assert summary["gangs_turned_away"] == 1 and round(summary["latency_turned_away"][0], 3) == 1.9


class _FakeCluster:
    """Only the two calls create_paced makes, answering at once."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, float]] = []

    def create_namespace(self, name: str) -> None:
        pass

    def request(self, method: str, path: str, body: Any = None) -> None:
        if path.endswith("/pods"):
            self.posted.append((body["metadata"]["name"], time.monotonic()))


def test_paced_creation_starts_each_gang_on_its_schedule() -> None:
    plan, _ = wl.e2e_plan(gangs=True, gang_count=5, size=4, contention_gangs=0, namespace="p")
    cluster = _FakeCluster()
    start = time.monotonic()
    created, lag = wl.create_paced(cluster, plan, gangs_per_second=20.0)  # type: ignore[arg-type]
    assert len(created) == 20
    for g, gang in enumerate(plan.gangs):  # no gang early, however loaded the machine
        first = min(created[m] for m in gang.members)
        assert first >= start + g / 20.0 - 0.001, (g, first - start)
    # the lag reported is the latest a gang's last member came behind its due time (its schedule started
    # at or after ``start``, so at most this)
    behind = max(max(created[m] for m in gang.members) - (start + g / 20.0) for g, gang in enumerate(plan.gangs))
    assert 0 <= lag <= behind + 0.001, (lag, behind)
    assert time.monotonic() - start >= 4 / 20.0


def test_thread_groups_match_threads_across_snapshots_and_count_ended_ones() -> None:
    assert [e2e_meters.thread_group(c) for c in ("gang-bind_3", "ThreadPoolExecu", "request-12", "watch-pods",
                                                 "gang-sweep")] == [
        "gang-bind", "request threads", "request threads", "watch-pods", "gang-sweep"]
    before = {"total": 10.0, "tids": {1: ("main loop", 2.0, 40), 7: ("gang-bind", 1.0, 10), 8: ("gang-bind", 0.5, 5),
                                      9: ("gang-release", 0.2, 3)}}
    # thread 9 ended; 10 is new; 8's id was reused by another group (its earlier time is not subtracted)
    after = {"total": 16.0, "tids": {1: ("main loop", 3.0, 45), 7: ("gang-bind", 2.5, 30), 8: ("watch-pods", 0.25, 2),
                                     10: ("gang-bind", 0.75, 7)}}
    used = e2e_meters.threads_cpu_used(before, after)
    assert used == {"gang-bind": 2.25, "ended threads": 2.5, "main loop": 1.0, "watch-pods": 0.25}
    assert list(used) == ["ended threads", "gang-bind", "main loop", "watch-pods"]  # the most first
    assert e2e_meters.threads_cpu_used({}, after) == {}
    assert e2e_meters.thread_runs(before, after) == {"gang-bind": 27, "main loop": 5, "watch-pods": 2}
    assert e2e_meters.thread_runs(before, {}) == {}
    live = e2e_meters.worker_threads_cpu(__import__("os").getpid())  # this process: its main thread at least
    assert live["total"] > 0 and any(name == "main loop" and ran > 0 and runs > 0
                                     for name, ran, runs in live["tids"].values())


def test_gang_stats_partial_gangs_latency_and_gates_lifted() -> None:
    """A gang bound over more than 2 s is partial, one bound together is not, one never bound whole counts
    from its first bind to the phase's end; the gate-lifted milestone only for gangs whose every member was
    seen ungated."""
    from types import SimpleNamespace

    from e2e_report import gang_stats

    plan, _ = wl.e2e_plan(gangs=True, gang_count=3, size=2, contention_gangs=0, namespace="p", api="podgroup")
    (a0, a1), (b0, b1), (c0, c1) = (g.members for g in plan.gangs)
    created = dict.fromkeys([a0, a1, b0, b1, c0, c1], 10.0)
    watch = SimpleNamespace(bound={a0: 11.0, a1: 11.1, b0: 11.0, b1: 14.0, c0: 12.0},
                            ungated={a0: 10.2, a1: 10.3, b0: 10.4})
    phase = Phase(pods=6, gangs=3)
    gang_stats(phase, plan, created, watch, end=20.0)
    assert phase.completed_gangs == 2
    assert [round(v, 2) for v in phase.gang_latency] == [1.1, 4.0]
    assert phase.partial_gangs == 2  # b (3 s apart) and c (one member bound since 12.0, the phase ended at 20.0)
    assert round(phase.max_partial_seconds, 2) == 8.0
    assert [round(v, 2) for v in phase.gate_lifted] == [0.3]
    assert plan.gangs[0].key == "p/job-0000" and plan.workloads[0]["kind"] == "PodGroup"
    assert (plan.pods[0]["spec"]["schedulingGroup"] == {"podGroupName": "job-0000"}
            and "workloadRef" not in plan.pods[0]["spec"])


def test_the_unschedulable_floor_passes_at_none_and_is_unknown_without_the_metrics() -> None:
    results = _results()
    results[1]["paced"].scheduler = {"attempts": 2000.0}  # no unschedulable series: none
    assert floors(results)[-1].endswith("PASS (0.00 against 0.00)")
    results[2]["paced"].scheduler = {}  # the in-tree plugin's metrics were not read
    assert "UNKNOWN (0.00 against -)" in floors(results)[-1]

"""What bench/e2e_scheduling.py measured, as numbers per phase, markdown tables and the floors it prints.

Owns: the :class:`Phase` record, the result tables (backlog, arrival, paced, contention, CPU, where the
gang latency goes) and issue 29's floors: gang-extender against the do-nothing extender in the same run
(pods/s >= 95 % in backlog and arrival; extender CPU per scheduled pod <= the do-nothing extender's +
0.3 ms, the API writes gang-extender makes beyond Bindings not counted and reported beside it), and
at a paced arrival rate gang latency (p50, p99) and unschedulable attempts per pod no worse than the
in-tree plugin's, with no timeout and no partial gang. Must not: run anything; it reduces and formats
what the driver measured.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import workloads as wl

FLOOR_VS_NOOP = 0.95       # gang-extender pods/s >= 95 % of the do-nothing extender's
FLOOR_CPU_MS = 0.3         # gang-extender CPU per pod <= the do-nothing extender's + 0.3 ms
WRITE_MS = 0.75            # CPU per API write through extender.kube (bench/request_overhead.py, a Binding)
EXTENDERS = ("gang-extender", "noop-extender")
PARTIAL_GRACE = 2.0        # a gang with some members bound longer than this while others are not is partial


@dataclass
class Phase:
    pods: int = 0
    gangs: int = 0
    seconds: float = float("nan")          # first pod created -> last pod bound (or the cap)
    create_seconds: float = float("nan")   # first -> last pod created
    paced_rate: float = float("nan")       # pods/s asked of the paced phase's creation
    create_lag: float = float("nan")       # paced: how far the client fell behind its schedule, s
    bound: int = 0
    completed_gangs: int = 0
    gang_latency: list[float] = field(default_factory=list)  # last member created -> whole gang bound
    gate_lifted: list[float] = field(default_factory=list)  # last member created -> every member's gate removed
    partial_gangs: int = 0
    max_partial_seconds: float = 0.0
    timeouts: float = float("nan")
    cpu: dict[str, float] = field(default_factory=dict)
    scheduler_attempt_ms: float = float("nan")  # mean scheduling algorithm duration per attempt
    scheduler: dict[str, float] = field(default_factory=dict)  # attempts by result, queue moves, SLI
    extender_ms: dict[str, float] = field(default_factory=dict)
    extender_writes: dict[str, float] = field(default_factory=dict)  # API writes beyond Bindings, by kind
    watch_events: dict[str, float] = field(default_factory=dict)  # watch events the extender applied, by resource
    extender_threads_cpu: dict[str, float] = field(default_factory=dict)  # the worker's CPU s by thread group
    extender_threads: dict[str, int] = field(default_factory=dict)  # the worker's threads: started in the phase, alive
    extender_thread_runs: dict[str, int] = field(default_factory=dict)  # times each thread group was put on a CPU
    extender_user_system: dict[str, float] = field(default_factory=dict)  # the worker's CPU s in user / kernel mode
    trace: dict[str, Any] = field(default_factory=dict)  # gang_trace.summarize (with --record)
    pinned: dict[str, list[str]] = field(default_factory=dict)  # program -> its threads' allowed CPUs
    timeline: list[float] = field(default_factory=list)  # bind times relative to the first creation

    @property
    def pods_per_second(self) -> float:
        return self.bound / self.seconds if self.seconds == self.seconds and self.seconds > 0 else float("nan")

    def extender_cpu_ms(self, kind: str) -> float:
        """The extender's CPU (master and worker) per pod bound in the phase, ms."""
        return self.cpu[kind] * 1000 / self.bound if kind in self.cpu and self.bound else float("nan")

    def writes_per_pod(self) -> float:
        return sum(self.extender_writes.values()) / self.bound if self.bound and self.extender_writes else 0.0

    def latency(self, q: float) -> float:
        return wl.percentile(self.gang_latency, q)


def gang_stats(phase: Phase, plan: wl.Plan, created: dict[str, float], watch: Any, *, end: float) -> None:
    for gang in plan.gangs:
        binds = [watch.bound[m] for m in gang.members if m in watch.bound]
        if len(binds) == len(gang.members):
            phase.completed_gangs += 1
            phase.gang_latency.append(max(binds) - max(created[m] for m in gang.members))
            span = max(binds) - min(binds)
        elif binds:
            span = end - min(binds)
        else:
            span = 0.0
        lifted = [watch.ungated[m] for m in gang.members if m in watch.ungated]
        if lifted and len(lifted) == len(gang.members):
            phase.gate_lifted.append(max(lifted) - max(created[m] for m in gang.members))
        if span > PARTIAL_GRACE:
            phase.partial_gangs += 1
        phase.max_partial_seconds = max(phase.max_partial_seconds, span)


def write_json(path: Path, args: dict[str, Any], results: Sequence[dict[str, Any]]) -> None:
    """Every number of the run (for bench/plot.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "args": args | {"json": str(path)}, "nproc": os.cpu_count(),
        "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
        "results": [{k: (vars(v) | {"pods_per_second": v.pods_per_second}) if isinstance(v, Phase) else v
                     for k, v in r.items()} for r in results]}, indent=1, default=str))


def fmt(value: float, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _pct(ratio: float) -> str:
    return "-" if math.isnan(ratio) else f"{ratio * 100:,.0f} %"


def _programs(results: Sequence[dict[str, Any]], phase: str) -> list[str]:
    names: list[str] = []
    for r in results:
        for name in (r[phase].cpu if phase in r else {}):
            if name not in names:
                names.append(name)
    return names


def _ext_ms(p: Phase) -> str:
    if not p.extender_ms:
        return "-"
    return " / ".join(fmt(p.extender_ms.get(v, float("nan")), 2) for v in ("filter", "prioritize", "bind"))


def _lat(p: Phase) -> str:
    values = sorted(p.gang_latency)
    return " | ".join(fmt(v, 2) for v in (wl.percentile(values, 50), wl.percentile(values, 99),
                                           values[-1] if values else float("nan")))


def _cpu_cells(r: dict[str, Any], p: Phase) -> str:
    kind = r["kind"]
    if kind not in EXTENDERS:
        return "- | -"
    return f"{fmt(p.extender_cpu_ms(kind), 2)} | {fmt(p.writes_per_pod(), 2)}"


def throughput_tables(results: Sequence[dict[str, Any]]) -> list[str]:
    ceiling = next((r["backlog"].pods_per_second for r in results if r["kind"] == "ceiling" and "backlog" in r),
                   float("nan"))
    out = ["### Backlog: scheduling throughput\n",
           "All pods exist before kube-scheduler starts; pods/s = pods / (scheduler started -> last pod "
           "bound).\n",
           "| configuration | pods | bound | seconds | pods/s | vs ceiling | gangs whole | partial gangs "
           "| gang timeouts | scheduling algorithm ms/pod | extender ms filter / prioritize / bind "
           "| extender CPU ms/pod | extender API writes/pod (beyond Bindings) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in (r for r in results if "backlog" in r):
        p: Phase = r["backlog"]
        note = " groups" if r["kind"] == "ceiling" else ""
        out.append(f"| {r['config']} | {p.pods:,} | {p.bound:,} | {fmt(p.seconds)} | {fmt(p.pods_per_second, 0)} | "
                   f"{_pct(p.pods_per_second / ceiling)} | {p.completed_gangs}/{p.gangs}{note} | "
                   f"{p.partial_gangs} | {fmt(p.timeouts, 0)} | {fmt(p.scheduler_attempt_ms, 2)} | {_ext_ms(p)} | "
                   f"{_cpu_cells(r, p)} |")
    for phase, title, note in (
            ("arrival", "Arrival: gangs created while kube-scheduler runs, as fast as the client can", ""),
            ("paced", "Paced: gangs created at a fixed rate, the same for every configuration",
             " The rate is below what every configuration sustains, so no queue builds: the latency is what "
             "a gang waits for being a gang. Creation late by = the most a gang's last member was created "
             "after the gang's due time (the client or kube-apiserver falling behind the pace).")):
        out += [f"\n### {title}\n", f"Gang latency = last member created -> whole gang bound.{note}\n",
                "| configuration | pods | created in s | creation late by s | bound after s | pods/s "
                "| gang latency p50 s | p99 s | max s "
                "| gangs whole | partial gangs | gang timeouts | extender ms filter / prioritize / bind "
                "| extender CPU ms/pod | extender API writes/pod (beyond Bindings) |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
        for r in (r for r in results if phase in r):
            p = r[phase]
            out.append(f"| {r['config']} | {p.pods:,} | {fmt(p.create_seconds)} | {fmt(p.create_lag, 2)} | "
                       f"{fmt(p.seconds)} | "
                       f"{fmt(p.pods_per_second, 0)} | {_lat(p)} | {p.completed_gangs}/{p.gangs} | {p.partial_gangs} | "
                       f"{fmt(p.timeouts, 0)} | {_ext_ms(p)} | {_cpu_cells(r, p)} |")
    return out


def tables(results: Sequence[dict[str, Any]]) -> str:
    out = throughput_tables(results)
    out += ["\n### Contention: gangs that cannot all fit\n",
            "| configuration | gangs | completed | seconds | gang latency p50 s | p99 s | max s | partial gangs "
            "| longest partial s | gang timeouts | pods bound |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in (r for r in results if "contention" in r):
        p = r["contention"]
        out.append(f"| {r['config']} | {p.gangs} | {p.completed_gangs} | {fmt(p.seconds)} | {_lat(p)} | "
                   f"{p.partial_gangs} | {fmt(p.max_partial_seconds)} | {fmt(p.timeouts, 0)} | {p.bound}/{p.pods} |")
    if not any("contention" in r for r in results):
        out = out[:-3]  # no contention phase: drop its heading and table header
    for phase in ("backlog", "arrival", "paced"):
        names = _programs(results, phase)
        if not names:
            continue
        out += [f"\n### CPU seconds used, {phase} phase\n",
                "| configuration | seconds | " + " | ".join(names) + " | total |",
                "|---|---:|" + "---:|" * (len(names) + 1)]
        for r in (r for r in results if phase in r):
            p = r[phase]
            out.append(f"| {r['config']} | {fmt(p.seconds)} | " + " | ".join(
                fmt(p.cpu.get(name, float("nan")), 1) for name in names) + f" | {fmt(sum(p.cpu.values()), 1)} |")
    out += where_time_goes(results)
    return "\n".join(out)


def where_time_goes(results: Sequence[dict[str, Any]]) -> list[str]:
    """kube-scheduler's attempts and queue moves per pod, and (recorded runs) the gang milestones."""
    out = ["\n### Where the gang latency goes: kube-scheduler's queue, per pod\n",
           "Attempts = scheduling cycles (kube-scheduler's `scheduler_schedule_attempts_total`); moves = pods "
           "entering a queue (`scheduler_queue_incoming_pods_total`); SLI = kube-scheduler's mean "
           "`scheduler_pod_scheduling_sli_duration_seconds` (first queued -> bound, gated time excluded); gate "
           "lifted = a gang's last member created -> the last of its scheduling gates removed (the quorum gate).\n",
           "| configuration | phase | attempts/pod | unschedulable attempts/pod | moves to backoff/pod "
           "| moves to unschedulable/pod | moves to gated/pod | gate lifted p50 / p99 ms | mean SLI ms "
           "| extender wakes/pod | held bind mean ms |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for phase in ("arrival", "paced"):
        for r in (r for r in results if phase in r):
            p: Phase = r[phase]
            s, n = p.scheduler, max(p.bound, 1)
            wakes = p.extender_writes.get("pod wakes", float("nan")) / n if p.extender_writes else float("nan")
            out.append(f"| {r['config']} | {phase} | {fmt(s.get('attempts', float('nan')) / n, 2)} | "
                       f"{fmt(_unschedulable_per_pod(p), 2)} | "
                       f"{fmt(s.get('moves backoff', float('nan')) / n, 2)} | "
                       f"{fmt(s.get('moves unschedulable', float('nan')) / n, 2)} | "
                       f"{fmt(s.get('moves gated', float('nan')) / n, 2)} | "
                       f"{fmt(wl.percentile(p.gate_lifted, 50) * 1000, 0)} / "
                       f"{fmt(wl.percentile(p.gate_lifted, 99) * 1000, 0)} | "
                       f"{fmt(s.get('sli ms', float('nan')), 0)} | {fmt(wakes, 2)} | "
                       f"{fmt(p.extender_ms.get('bind', float('nan')), 0)} |")
    traced = [(r, ph) for ph in ("arrival", "paced") for r in results if ph in r and r[ph].trace.get("gangs")]
    if traced:
        from gang_trace import MILESTONES

        out += ["\n### Where the gang latency goes: milestones from the extender's recording\n",
                "Seconds from the gang's last member created until every member reached the milestone, p50 / p99 "
                "over gangs.\n",
                "| configuration | phase | " + " | ".join(MILESTONES) + " | filters/pod | rejected filters/pod "
                "| members turned away first | held bind p50 / p99 s | gangs with a member turned away: latency "
                "| other gangs: latency |",
                "|---|---|" + "---:|" * (len(MILESTONES) + 6)]
        for r, ph in traced:
            t = r[ph].trace
            out.append(f"| {r['config']} | {ph} | " + " | ".join(
                f"{fmt(t[m][0], 2)} / {fmt(t[m][1], 2)}" for m in MILESTONES) +
                f" | {fmt(t['filters_per_pod'], 2)} | {fmt(t['rejected_filters_per_pod'], 2)} | "
                f"{t['pods_turned_away_first']}/{t['pods']} | "
                f"{fmt(t['bind_hold_p50'], 2)} / {fmt(t['bind_hold_p99'], 2)} | "
                f"{t['gangs_turned_away']}: {fmt(t['latency_turned_away'][0], 2)} / "
                f"{fmt(t['latency_turned_away'][1], 2)} | "
                f"{t['gangs'] - t['gangs_turned_away']}: {fmt(t['latency_straight'][0], 2)} / "
                f"{fmt(t['latency_straight'][1], 2)} |")
    return out


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _unschedulable_per_pod(phase: Phase) -> float:
    """kube-scheduler's unschedulable attempts per pod: none when its metrics were read and have no such series
    (the counter appears with its first), unknown when they were not read."""
    s = phase.scheduler
    return s.get("attempts unschedulable", 0.0 if "attempts" in s else math.nan) / max(phase.bound, 1)


def floors(results: Sequence[dict[str, Any]], *, write_ms: float = WRITE_MS) -> list[str]:
    """Issue 29's floors, each PASS or MISS with the numbers it was judged on (the first run of each kind)."""
    by: dict[str, dict[str, Any]] = {}
    for r in results:
        by.setdefault(r["kind"], r)
    ge, noop, tree = by.get("gang-extender", {}), by.get("noop-extender", {}), by.get("in-tree", {})
    lines = []
    for phase in ("backlog", "arrival"):
        if phase not in ge or phase not in noop:
            continue
        g, n = ge[phase], noop[phase]
        ratio = g.pods_per_second / n.pods_per_second
        lines.append(f"Floor: {phase}: gang-extender pods/s >= {FLOOR_VS_NOOP:.0%} of the do-nothing extender's: "
                     f"{_verdict(ratio >= FLOOR_VS_NOOP)} ({g.pods_per_second:.0f} / {n.pods_per_second:.0f} = "
                     f"{ratio:.0%})")
        g_ms, n_ms, writes = g.extender_cpu_ms("gang-extender"), n.extender_cpu_ms("noop-extender"), g.writes_per_pod()
        net = g_ms - writes * write_ms
        lines.append(f"Floor: {phase}: gang-extender CPU/pod <= do-nothing's + {FLOOR_CPU_MS} ms, its API writes "
                     f"beyond Bindings not counted: {_verdict(net <= n_ms + FLOOR_CPU_MS)} ({g_ms:.2f} ms/pod, of "
                     f"which {writes:.2f} writes/pod x {write_ms} ms = {writes * write_ms:.2f} ms; {net:.2f} against "
                     f"{n_ms:.2f} + {FLOOR_CPU_MS} ms)")
    if "paced" in ge:
        g = ge["paced"]
        whole = g.completed_gangs == g.gangs and not g.partial_gangs and not g.timeouts
        lines.append(f"Floor: paced: every gang whole, 0 timeouts, 0 partial gangs: {_verdict(whole)} "
                     f"({g.completed_gangs}/{g.gangs} whole, {fmt(g.timeouts, 0)} timeouts, {g.partial_gangs} partial)")
        if "paced" in tree:
            t = tree["paced"]
            for q in (50, 99):
                ok = g.latency(q) <= t.latency(q)
                lines.append(f"Floor: paced: gang-extender gang latency p{q} <= in-tree's: {_verdict(ok)} "
                             f"({g.latency(q) * 1000:.1f} ms against {t.latency(q) * 1000:.1f} ms)")
            mine, theirs = (_unschedulable_per_pod(p) for p in (g, t))
            verdict = "UNKNOWN" if math.isnan(mine) or math.isnan(theirs) else _verdict(mine <= theirs)
            lines.append(f"Floor: paced: gang-extender unschedulable attempts/pod <= in-tree's: {verdict} "
                         f"({fmt(mine, 2)} against {fmt(theirs, 2)})")
    if "contention" in ge:
        c: Phase = ge["contention"]
        ok = c.completed_gangs == c.gangs and not c.timeouts
        lines.append(f"Floor: contention: every gang completes with gang-extender, no timeouts: {_verdict(ok)} "
                     f"({c.completed_gangs}/{c.gangs} completed, {fmt(c.timeouts, 0)} timeouts)")
    return lines


def read_json(path: Path) -> list[dict[str, Any]]:
    """The results written by :func:`write_json`, phases as :class:`Phase` again."""
    names = set(Phase.__dataclass_fields__)
    results = []
    for r in json.loads(path.read_text())["results"]:
        results.append({k: Phase(**{f: x for f, x in v.items() if f in names}) if isinstance(v, dict) and "bound" in v
                        else v for k, v in r.items()})
    return results


if __name__ == "__main__":  # the tables and floors of a saved run: python bench/e2e_report.py out/bench-e2e.json
    import sys

    saved = read_json(Path(sys.argv[1]))
    print(tables(saved) + "\n")
    print("\n".join(floors(saved, write_ms=float(sys.argv[2]) if len(sys.argv) > 2 else WRITE_MS)))

"""Numbers and tables of ``bench/gang_perf.py``: histogram quantiles, process memory, the result table,
and the checks (no gang timeout, no partial gang, every pod bound).

Owns: turning what a run observed (a :class:`Result`) into figures and text. Must not: start or talk to
any process (the runner hands it scrapes and timings).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import workloads as wl

GANGED = ("gang-extender", "in-tree")  # the configurations whose gangs are checked


@dataclass
class Result:
    config: str
    workload: str
    nodes: int
    k8s: str
    pods: int = 0
    gangs: int = 0
    size: int = 0
    bound: int = 0
    create_seconds: float = float("nan")   # first -> last pod created
    seconds: float = float("nan")          # first pod created -> last pod bound (or the end)
    gang_seconds: list[float] = field(default_factory=list)  # first member created -> minCount-th bound
    whole_gangs: int = 0
    partial_gangs: int = 0                 # some but not all members bound when the run ended
    max_bind_spread: float = 0.0           # a whole gang's first -> last bind, the longest
    timeouts: float = float("nan")         # gang-extender: timeouts counter; in-tree: Permit timeouts logged
    extender: dict[str, float] = field(default_factory=dict)  # latency, CPU, RSS, sync
    cpu: dict[str, float] = field(default_factory=dict)       # CPU seconds by process over the run
    scheduler: dict[str, float] = field(default_factory=dict)  # kube-scheduler's own figures
    nodes_seconds: float = float("nan")    # creating the nodes
    loadavg: str = ""

    @property
    def pods_per_second(self) -> float:
        return self.bound / self.seconds if self.seconds > 0 else float("nan")

    def problems(self) -> list[str]:
        """What breaks the run's promises: every pod bound; with gangs, no timeout and no partial gang."""
        out = []
        if self.bound != self.pods:
            out.append(f"{self.pods - self.bound} of {self.pods} pods never bound")
        gate = self.scheduler.get("in_tree_gate")
        if gate is not None and gate != (1.0 if self.config == "in-tree" else 0.0):
            out.append(f"kube-scheduler's in-tree gang gate is {gate} under {self.config}")
        if self.config in GANGED:
            if self.partial_gangs:
                out.append(f"{self.partial_gangs} partial gangs")
            if self.timeouts != 0:  # nan (never read) fails too
                out.append(f"gang timeouts: {self.timeouts}")
        return out


# ---------------------------------------------------------------------------------------- scrapes
_BUCKET = re.compile(r'^(?P<name>[a-z_]+)_bucket\{(?P<labels>[^}]*)\}$')


def buckets(values: Mapping[str, float], name: str, **labels: str) -> list[tuple[float, float]]:
    """Cumulative (le, count) pairs of histogram ``name`` whose labels include ``labels``, ascending."""
    out = []
    for key, count in values.items():
        m = _BUCKET.match(key)
        if not m or m["name"] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        if all(found.get(k) == v for k, v in labels.items()) and "le" in found:
            out.append((float(found["le"]), count))
    return sorted(out)


def delta(after: Sequence[tuple[float, float]], before: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    earlier = dict(before)
    return [(le, count - earlier.get(le, 0.0)) for le, count in after]


def quantile(cumulative: Sequence[tuple[float, float]], q: float) -> float:
    """Prometheus' ``histogram_quantile``: linear within the bucket holding rank q * total; nan if empty.
    A rank in the +Inf bucket answers the highest finite bound."""
    if not cumulative or cumulative[-1][1] <= 0:
        return float("nan")
    rank = q * cumulative[-1][1]
    lower_le, lower_count = 0.0, 0.0
    for le, count in cumulative:
        if count >= rank:
            if math.isinf(le):
                return lower_le
            width = count - lower_count
            return lower_le + (le - lower_le) * ((rank - lower_count) / width if width else 1.0)
        lower_le, lower_count = le, count
    return lower_le


def verb_latency(before: Mapping[str, float], after: Mapping[str, float], verb: str) -> dict[str, float]:
    """Calls, mean, p50 and p99 (ms) of gang-extender's ``verb`` between two scrapes."""
    name = "gang_extender_request_seconds"
    hist = delta(buckets(after, name, verb=verb), buckets(before, name, verb=verb))
    count = after.get(f'{name}_count{{verb="{verb}"}}', 0.0) - before.get(f'{name}_count{{verb="{verb}"}}', 0.0)
    total = after.get(f'{name}_sum{{verb="{verb}"}}', 0.0) - before.get(f'{name}_sum{{verb="{verb}"}}', 0.0)
    top = max((le for le, _ in hist if not math.isinf(le)), default=float("nan"))
    return {f"{verb}_calls": count, f"{verb}_mean_ms": total / count * 1000 if count else float("nan"),
            f"{verb}_p50_ms": quantile(hist, 0.5) * 1000, f"{verb}_p99_ms": quantile(hist, 0.99) * 1000,
            f"{verb}_top_ms": top * 1000}  # a quantile at the top bound lies at or beyond it


def mean_ms(before: Mapping[str, float], after: Mapping[str, float], name: str) -> float:
    """Mean of every series of histogram ``name`` between two scrapes, in ms (nan when it has none)."""
    total = count = 0.0
    for key, value in after.items():
        if key.startswith(f"{name}_sum"):
            total += value - before.get(key, 0.0)
        elif key.startswith(f"{name}_count"):
            count += value - before.get(key, 0.0)
    return total / count * 1000 if count else float("nan")


def peak_rss_mib(pid: int | None) -> float:
    """A process's peak resident set (VmHWM) in MiB; nan when it cannot be read."""
    with contextlib.suppress(OSError, TypeError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------------------------------- gangs
def gang_figures(result: Result, gangs: Sequence[wl.Gang], created: Mapping[str, float],
                 bound: Mapping[str, float]) -> None:
    """Upstream's PodGroupSchedulingDuration per gang: its first member created -> its minCount-th member
    bound (as the pod watch saw them); whole and partial gangs; the longest bind spread of a whole gang."""
    for gang in gangs:
        binds = sorted(bound[m] for m in gang.members if m in bound)
        if len(binds) >= gang.min_count:
            result.gang_seconds.append(binds[gang.min_count - 1] - min(created[m] for m in gang.members))
        if len(binds) == len(gang.members):
            result.whole_gangs += 1
            result.max_bind_spread = max(result.max_bind_spread, binds[-1] - binds[0])
        elif binds:
            result.partial_gangs += 1


# ---------------------------------------------------------------------------------------- output
def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _ext(r: Result, key: str, digits: int = 1) -> str:
    if r.config != "gang-extender":
        return "-"
    value, top = r.extender.get(key), r.extender.get(f"{key.split('_', maxsplit=1)[0]}_top_ms")
    capped = key.endswith(("_p50_ms", "_p99_ms")) and value is not None and top is not None and value >= top
    return ("≥ " if capped else "") + fmt(value, digits)


def table(results: Sequence[Result]) -> str:
    """One row per configuration and workload (the table of docs/performance.md)."""
    out = ["| workload | configuration | pods/s | gang duration p50 / p90 / p99 s | whole / partial gangs "
           "| timeouts | extender filter ms p50 / p99 (mean) | bind ms p50 / p99 (mean) | extender CPU s "
           "| extender peak RSS MiB | mirror initial sync s (nodes / pods) | kube-scheduler CPU s "
           "| podgroup attempt ms (mean) | seconds (created in) |",
           "|---|---|---:|---|---|---:|---|---|---:|---:|---|---:|---:|---|"]
    for r in results:
        gs = r.gang_seconds
        dur = " / ".join(fmt(wl.percentile(gs, q), 2) for q in (50, 90, 99))
        whole = f"{r.whole_gangs} / {r.partial_gangs}" + (" (groups)" if r.config == "ceiling" else "")
        filt = f"{_ext(r, 'filter_p50_ms', 2)} / {_ext(r, 'filter_p99_ms', 2)} ({_ext(r, 'filter_mean_ms', 2)})"
        bind = f"{_ext(r, 'bind_p50_ms', 0)} / {_ext(r, 'bind_p99_ms', 0)} ({_ext(r, 'bind_mean_ms', 0)})"
        sync = f"{_ext(r, 'sync_nodes_s', 2)} / {_ext(r, 'sync_pods_s', 2)}"
        out.append(f"| {r.workload} | {r.config} | {fmt(r.pods_per_second, 0)} | {dur} | {whole} | "
                   f"{fmt(r.timeouts, 0)} | {filt} | {bind} | {_ext(r, 'cpu_s')} | {_ext(r, 'peak_rss_mib', 0)} | "
                   f"{sync} | {fmt(r.cpu.get('kube-scheduler'))} | {fmt(r.scheduler.get('podgroup_attempt_ms'), 1)} | "
                   f"{fmt(r.seconds)} ({fmt(r.create_seconds)}) |")
    return "\n".join(out)


def checks(results: Sequence[Result]) -> tuple[bool, str]:
    """(all passed, one line per run)."""
    lines, ok = [], True
    for r in results:
        problems = r.problems()
        ok = ok and not problems
        lines.append(f"{r.workload} {r.config}: {'OK' if not problems else 'FAILED: ' + '; '.join(problems)} "
                     f"({r.bound}/{r.pods} bound, {r.whole_gangs}/{r.gangs} gangs whole, {r.partial_gangs} partial, "
                     f"{fmt(r.timeouts, 0)} timeouts)")
    return ok, "\n".join(lines)


def load(path: Path) -> list[Result]:
    """The results a ``--json`` file holds (to print their table again)."""
    import json

    known = set(Result.__dataclass_fields__)
    return [Result(**{k: v for k, v in item.items() if k in known}) for item in json.loads(path.read_text())["results"]]


def as_json(r: Result) -> dict[str, Any]:
    return vars(r) | {"pods_per_second": r.pods_per_second,
                      "gang_p50": wl.percentile(r.gang_seconds, 50), "gang_p90": wl.percentile(r.gang_seconds, 90),
                      "gang_p99": wl.percentile(r.gang_seconds, 99)}

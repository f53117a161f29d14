"""Where a gang's latency goes: milestones of each gang from the extender's request recording.

Owns: reading gang-extender's ``--record-file`` (one JSON line per filter / prioritize / bind request,
with its wall-clock arrival and latency) together with the benchmark's own clocks (pod creation and
the pod watch's bind times, monotonic), and reducing them to per-gang milestones, each measured from
the gang's last member created:

- ``first filter``: every member has been tried by kube-scheduler once (the queue before a first try);
- ``first pass``: every member has passed a filter (rejections before that are quorum waits: the
  member went to kube-scheduler's unschedulable pool and came back through back-off);
- ``bind at barrier``: every member's bind request has reached the extender (the quorum is there);
- ``binds answered``: the last held bind was answered (the barrier released the gang);
- ``bound``: the watch saw every member bound (= the gang latency).

Must not: run anything or change the recording; it only reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

MILESTONES = ("first filter", "first pass", "bind at barrier", "binds answered", "bound")


@dataclass
class PodTrace:
    filters: list[float] = field(default_factory=list)   # arrival (monotonic) of every filter call
    passed: list[float] = field(default_factory=list)    # arrival of the filter calls that kept nodes
    binds: list[tuple[float, float, bool]] = field(default_factory=list)  # (arrival, answered, ok)


def read_recording(path: Path, wall_minus_monotonic: float, keys: Iterable[str] | None = None) -> dict[str, PodTrace]:
    """Pod key -> its requests, times converted to the driver's monotonic clock."""
    wanted = set(keys) if keys is not None else None
    traces: dict[str, PodTrace] = {}
    with contextlib.suppress(OSError), path.open("rb") as lines:
        for line in lines:
            with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
                rec = orjson.loads(line)
                verb, req, reply = rec["verb"], rec["request"] or {}, rec["reply"] or {}
                at = rec["arrival"] - wall_minus_monotonic
                if verb == "filter":
                    meta = req["Pod"]["metadata"]
                    key = f"{meta['namespace']}/{meta['name']}"
                    if wanted is not None and key not in wanted:
                        continue
                    trace = traces.setdefault(key, PodTrace())
                    trace.filters.append(at)
                    if reply.get("NodeNames") or reply.get("Nodes"):
                        trace.passed.append(at)
                elif verb == "bind":
                    key = f"{req['PodNamespace']}/{req['PodName']}"
                    if wanted is not None and key not in wanted:
                        continue
                    traces.setdefault(key, PodTrace()).binds.append(
                        (at, at + rec["latency_seconds"], not reply.get("Error")))
    return traces


def gang_milestones(members: list[str], created: Mapping[str, float], bound: Mapping[str, float],
                    traces: Mapping[str, PodTrace]) -> dict[str, float] | None:
    """Seconds from the gang's last member created to each milestone; None unless the gang was bound whole
    and every member was seen by the extender."""
    if not all(m in bound and m in traces and traces[m].filters and traces[m].passed and traces[m].binds
               for m in members):
        return None
    t0 = max(created[m] for m in members)
    ok_binds = [[b for b in traces[m].binds if b[2]] or traces[m].binds for m in members]
    return {
        "first filter": max(traces[m].filters[0] for m in members) - t0,
        "first pass": max(traces[m].passed[0] for m in members) - t0,
        "bind at barrier": max(b[-1][0] for b in ok_binds) - t0,
        "binds answered": max(b[-1][1] for b in ok_binds) - t0,
        "bound": max(bound[m] for m in members) - t0,
    }


def summarize(gangs: Iterable[list[str]], created: Mapping[str, float], bound: Mapping[str, float],
              traces: Mapping[str, PodTrace], percentile: Any) -> dict[str, Any]:
    """p50 / p99 of every milestone over the gangs, and how often members were turned away first."""
    gangs = list(gangs)
    rows = [m for g in gangs if (m := gang_milestones(g, created, bound, traces)) is not None]
    pods = [traces[k] for g in gangs for k in g if k in traces]
    turned: list[float] = []   # gang latency of gangs with a member turned away at its first filter
    straight: list[float] = []  # ... and of gangs whose members all passed their first filter
    for g in gangs:
        m = gang_milestones(g, created, bound, traces)
        if m is not None:
            away = any(traces[k].filters[0] < traces[k].passed[0] for k in g)
            (turned if away else straight).append(m["bound"])
    filters = sum(len(t.filters) for t in pods)
    rejected = sum(len(t.filters) - len(t.passed) for t in pods)
    turned_away = sum(1 for t in pods if t.filters and t.passed and t.filters[0] < t.passed[0])
    holds = sorted(b[1] - b[0] for t in pods for b in t.binds)
    out: dict[str, Any] = {"gangs": len(rows), "pods": len(pods), "filters_per_pod": filters / len(pods) if pods else 0,
                           "rejected_filters_per_pod": rejected / len(pods) if pods else 0,
                           "pods_turned_away_first": turned_away,
                           "bind_hold_p50": percentile(holds, 50), "bind_hold_p99": percentile(holds, 99),
                           "gangs_turned_away": len(turned),
                           "latency_turned_away": (percentile(sorted(turned), 50), percentile(sorted(turned), 99)),
                           "latency_straight": (percentile(sorted(straight), 50), percentile(sorted(straight), 99))}
    for name in MILESTONES:
        values = sorted(r[name] for r in rows)
        out[name] = (percentile(values, 50), percentile(values, 99))
    return out

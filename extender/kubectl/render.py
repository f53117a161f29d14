"""How ``kubectl gang`` prints: the ``list`` table and the ``explain`` page (pure).

Owns: one line per gang for ``list`` (columns sized to their content, the reason cut to fit a terminal
line); for ``explain``, the live counts the pods show, the last gang Event, and the leader's
published explanation printed as ``gang-extender explain`` prints it (``extender.explain.render``);
for ``fit``, the answer and what it rests on.
Must not: read from the API server or decide a gang's state (``collect`` does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extender import explain
from extender.gangs.explanation import expand
from extender.kubectl.collect import GangRow
from extender.model.gang import GangKey

REASON_WIDTH = 70


def gang_name(key: GangKey) -> str:
    """The gang without its namespace: ``name``, ``name/podGroup``, ``name/podGroup[replica]``."""
    text = str(key)
    return text.partition("/")[2]


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def table(rows: Sequence[GangRow], *, all_namespaces: bool, reason_width: int = REASON_WIDTH) -> str:
    """The ``kubectl gang list`` table (a header even when no gang is found)."""
    header = [*(["NAMESPACE"] if all_namespaces else []), "NAME", "SOURCE", "MIN", "MEMBERS", "BOUND", "STATE",
              "REASON"]
    lines = [header]
    for row in rows:
        why = row.why or "-"
        lines.append([*([row.key.group.namespace] if all_namespaces else []), gang_name(row.key), row.source,
                      "-" if row.min_count is None else str(row.min_count), str(row.existing), str(row.bound),
                      row.state, _cut(why, reason_width)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "".join(("   ".join([*(cell.ljust(w) for cell, w in zip(line, widths, strict=False)), line[-1]])).rstrip()
                   + "\n" for line in lines)


def _seconds_ago(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def page(row: GangRow, now: float) -> str:
    """The ``kubectl gang explain`` page of one gang."""
    lines = [f"Gang:        {row.key}   [{row.source}]",
             f"Live:        {row.state}; {row.existing} member(s) exist, {row.bound} bound; minCount "
             f"{'-' if row.min_count is None else row.min_count} (from the pods and the group object now)"]
    if row.condition:
        lines.append(f"Status:      {row.condition} (the group object's status)")
    if row.problem:
        lines.append(f"Problem:     {row.problem}")
    lines.append(f"Last event:  {_cut(row.reason, 300) if row.reason else '-'}")
    published = row.published
    if not published:
        lines.append("Published:   nothing: the leading gang-extender has published no explanation of this gang "
                     "(GangState Events; --explain-publish-seconds 0, not seen by it yet, or expired)")
        return "\n".join(lines) + "\n"
    at = float(published.get("publishedAt") or now)
    lines.append(f"Published:   {_seconds_ago(max(now - at, 0.0))} ago by the leading gang-extender (GangState "
                 "Event); as of then:")
    try:
        body = explain.render({"gangs": [expand(published, now)]})
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # not a form gang-extender wrote
        lines.append(f"  (unreadable: {type(exc).__name__}; not written by this gang-extender version?)")
        return "\n".join(lines) + "\n"
    lines.extend("  " + line if line else line for line in body.rstrip("\n").split("\n")[1:])
    return "\n".join(lines) + "\n"


def fit_page(answer: Mapping[str, Any]) -> str:
    """The ``kubectl gang fit`` answer: the verdict and its one line, then what it rests on."""
    lines = [f"Gang:        {answer.get('gang')} ({answer.get('members')} pod(s), minCount "
             f"{answer.get('minCount', '-')}, scheduler {answer.get('schedulerName')})",
             f"Answer:      {answer.get('verdict')}: {answer.get('summary')}"]
    placement = answer.get("placement") or {}
    if placement.get("nodes"):
        where = f" (domain {placement['domain']})" if placement.get("domain") else ""
        lines.append(f"Where:       {_counts(placement['nodes'])}{where}")
    preemption = answer.get("preemption") or {}
    for victim in preemption.get("victims") or []:
        budgets = "; ".join(f"{b['name']} allows {b['disruptionsAllowed']} (selects {b['selects']})"
                            for b in victim.get("budgets") or []) or "no PodDisruptionBudget"
        lines.append(f"Evicts:      {victim.get('unit')} (priority {victim.get('priority')}, "
                     f"{len(victim.get('pods') or [])} pod(s)); {budgets}")
    if preemption.get("cost"):
        cost = preemption["cost"]
        lines.append(f"Cost:        {cost.get('pods')} pod(s) of {cost.get('units')} unit(s), "
                     f"{cost.get('gangs')} whole gang(s)")
    order = answer.get("order") or {}
    for ahead in order.get("ahead") or []:
        lines.append(f"After:       {ahead.get('gang')} (priority {ahead.get('priority')}, waiting "
                     f"{ahead.get('waitingSeconds')}s)")
    capacity = answer.get("capacity") or {}
    if capacity:
        shape = capacity.get("shape") or {}
        labels = ", ".join(f"{k}={v}" for k, v in (shape.get("labels") or {}).items()) or "no labels"
        never = answer.get("verdict") == "Never"
        lines.append(f"{'Unless:' if never else 'Add:':<13}{capacity.get('nodes')} node(s) like {shape.get('like')}"
                     f"{' are added' if never else ''}: {shape.get('allocatable')}; {labels}"
                     + (f"; in {capacity['domain']}" if capacity.get("domain") else ""))
        lines.append(f"             ({capacity.get('shapesTried')} of {capacity.get('shapes')} node shape(s) "
                     "tried; the cluster's own shapes only)")
    if answer.get("noPreemption"):
        lines.append(f"Preemption:  none: {answer['noPreemption']}")
    if answer.get("waiting") and answer.get("verdict") not in ("FitsNow", "Never"):
        lines.append(f"Waiting:     {answer['waiting']}")
    age = answer.get("stateAgeSeconds")
    lines.append("As of:       the cluster now" + (f"; the leader's state {age:g}s ago" if age is not None else ""))
    for note in answer.get("notes") or []:
        lines.append(f"Note:        {note}")
    return "\n".join(lines) + "\n"


def _counts(nodes: Mapping[str, int]) -> str:
    shown = [f"{name} x{count}" if count > 1 else name for name, count in list(nodes.items())[:12]]
    more = f" and {len(nodes) - 12} more node(s)" if len(nodes) > 12 else ""
    return ", ".join(shown) + more

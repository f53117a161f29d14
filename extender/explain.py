"""``gang-extender explain NAMESPACE/GROUP``: ask a running extender why a gang waits.

Owns: the subcommand's flags, one read-only ``GET /explain/<namespace>/<name>`` to the extender
(``--url``, default http://127.0.0.1:8888), and printing the JSON answer readably (or as is with
``--json``). Exit codes: 0 found, 1 no such gang, 2 bad arguments or the extender cannot be reached.
Must not: compute anything about the gang (the extender does, from what its ledger and mirror copy
under their lock: ``gangs.explanation``) or import Flask or the kubernetes client.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, TextIO
from urllib.parse import quote, urlencode

DEFAULT_URL = "http://127.0.0.1:8888"


def add_parser(commands: Any) -> None:
    explain = commands.add_parser("explain", help="print what a running extender knows about a gang and why it waits")
    explain.add_argument("group", metavar="NAMESPACE/GROUP",
                         help="the group: a PodGroup, a scheduler-plugins PodGroup, a Workload or an annotation group")
    explain.add_argument("--pod-group", help="only this pod group of a 1.35 Workload")
    explain.add_argument("--replica", help="only this podGroupReplicaKey of a 1.35 Workload")
    explain.add_argument("--url", default=DEFAULT_URL, help=f"the extender's address [default {DEFAULT_URL}]")
    explain.add_argument("--insecure", action="store_true", help="do not verify the extender's HTTPS certificate")
    explain.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the answer [default 10]")
    explain.add_argument("--json", action="store_true", help="print the extender's JSON answer as is")


def url_for(base: str, namespace: str, name: str, pod_group: str | None, replica: str | None) -> str:
    query = {k: v for k, v in (("podGroup", pod_group), ("replica", replica)) if v is not None}
    path = f"/explain/{quote(namespace, safe='')}/{quote(name, safe='')}"
    return base.rstrip("/") + path + ("?" + urlencode(query) if query else "")


def fetch(url: str, *, timeout: float, insecure: bool = False) -> tuple[int, dict[str, Any]]:
    context = None
    if insecure and url.startswith("https:"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as reply:
            return int(reply.status), json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, {"error": body.decode("utf-8", "replace")[:500]}


def _seconds(value: object) -> str:
    return f"{value:g}s" if isinstance(value, int | float) else "-"


def _topology_lines(topology: Mapping[str, Any] | None) -> list[str]:
    """The gang's topology constraint, its domain and the best other domains (nothing without one)."""
    if not topology:
        return []
    if topology.get("problem"):
        return [f"Topology:    unusable: {topology['problem']}"]
    lines = [f"Topology:    {topology.get('constraint')}; domain: {topology.get('domain') or 'none chosen yet'}"]
    for other in topology.get("otherDomains") or []:
        lines.append(f"             {other.get('domain')} ({other.get('nodes')} nodes, {other.get('freeCpu')} "
                     f"free): {other.get('lacks') or 'could hold it too'}")
    return lines


def _order_lines(place: Mapping[str, Any] | None) -> list[str]:
    """The gang's place in the admission order, what is ahead of it and its draining reservation."""
    if not place:
        return []
    lines = [f"Order:       {place.get('position')} of {place.get('of')} waiting (priority {place.get('priority')}); "
             f"waiting {_seconds(place.get('waitingSeconds'))} (max wait {_seconds(place.get('maxWaitSeconds'))})"]
    for ahead in place.get("ahead") or []:
        lines.append(f"             after {ahead.get('gang')} (priority {ahead.get('priority')}, waiting "
                     f"{_seconds(ahead.get('waitingSeconds'))})")
    drain = place.get("draining")
    if drain:
        lines.append(f"Draining:    room for {drain.get('free')} of {drain.get('members')} member(s) has freed up on "
                     f"{', '.join(drain.get('nodes') or [])} (for {_seconds(drain.get('sinceSeconds'))})")
    preemption = place.get("preemption") or {}
    if preemption.get("victims"):
        lines.append(f"Preempting:  {preemption.get('remaining')} of {preemption.get('pods')} victim pod(s) still "
                     f"running (for {_seconds(preemption.get('sinceSeconds'))}): "
                     f"{', '.join(preemption['victims'])}")
    elif preemption.get("note"):
        lines.append(f"Preemption:  none: {preemption['note']}")
    if place.get("problem"):
        lines.append(f"Problem:     {place['problem']}")
    return lines


def fix_lines(fix: Mapping[str, Any] | None) -> list[str]:
    """What would unblock the gang (``explanation._fix``; the field ``fix`` for machines)."""
    if not fix:
        return []
    kind = fix.get("kind")
    if kind == "waitFor":
        return [f"Fix:         none needed: it starts after {', '.join(map(str, fix.get('gangs') or []))} "
                f"(place {fix.get('position')} in the order)"]
    if kind == "preempt":
        return [f"Fix:         preempting {', '.join(map(str, fix.get('victims') or []))}"]
    if kind == "addNodes":
        shape = fix.get("shape") or {}
        where = f" in {fix['domain']}" if fix.get("domain") else ""
        return [f"Fix:         add {fix.get('nodes')} node(s) like {shape.get('like')} "
                f"({shape.get('allocatable')}){where}"]
    if kind == "never":
        grow = fix.get("addNodes") or {}
        if grow:
            shape = grow.get("shape") or {}
            where = f" in {grow['domain']}" if grow.get("domain") else ""
            return [f"Fix:         never as the cluster is; {grow.get('nodes')} more node(s) like {shape.get('like')} "
                    f"({shape.get('allocatable')}){where} would hold it"]
        return ["Fix:         none: no node shape the cluster has could hold it (see Waiting)"]
    return []


def render(answer: Mapping[str, Any]) -> str:
    """The human form of one ``/explain`` answer."""
    lines: list[str] = []
    if not answer.get("synced", True):
        lines.append("note: the extender has not finished its first list of the cluster; this may be incomplete")
    for gang in answer.get("gangs") or []:
        members = gang.get("members") or {}
        kind = gang.get("kind", "")
        version = f" ({gang['apiVersion']})" if gang.get("apiVersion") else ""
        lines.append(f"Gang:        {gang.get('gang')}   [{kind}{version}]")
        if gang.get("template"):
            lines.append(f"Template:    {gang['template']} (Workload/template, context only)")
        lines.append(f"State:       {gang.get('state')}")
        need = gang.get("minCount")
        lines.append(f"Members:     {members.get('existing', 0)} exist, {members.get('held', 0)} held, "
                     f"{members.get('bound', 0)} bound, {members.get('binding', 0)} binding, "
                     f"{members.get('pending', 0)} pending; minCount {need if need is not None else '-'}")
        reservation = gang.get("reservation") or {}
        if reservation:
            lines.append("Reservation: " + "; ".join(f"{node}: {amount}" for node, amount in reservation.items()))
        else:
            lines.append("Reservation: none")
        remaining = gang.get("timeoutRemainingSeconds")
        lines.append(f"Timeout:     {_seconds(remaining)} left of {_seconds(gang.get('timeoutSeconds'))}"
                     if remaining is not None else f"Timeout:     not running ({_seconds(gang.get('timeoutSeconds'))} "
                     "once the first member is held)")
        backoff = gang.get("backoffRemainingSeconds") or 0
        lines.append(f"Back-off:    {_seconds(backoff)} left after {gang.get('timeouts', 0)} timeout(s)" if backoff
                     else f"Back-off:    none ({gang.get('timeouts', 0)} timeout(s) so far)")
        lines.extend(_topology_lines(gang.get("topology")))
        lines.extend(_order_lines(gang.get("order")))
        lines.append(f"Waiting:     {gang.get('waiting') or '-'}")
        shortfall = gang.get("shortfall")
        if shortfall:
            what = f"{shortfall['amount']} more" if shortfall.get("resource") else "no eligible node"
            where = "in the cluster" if shortfall.get("scope") == "cluster" else "on one node"
            lines.append(f"Shortfall:   {what} {where} ({shortfall.get('reason')})")
        else:
            lines.append("Shortfall:   none")
        lines.extend(fix_lines(gang.get("fix")))
        for label, key in (("Held pods", "heldPods"), ("Pending", "pendingPods")):
            if gang.get(key):
                lines.append(f"{label + ':':<13}{', '.join(gang[key])}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    namespace, slash, name = str(args.group).partition("/")
    if not slash or not namespace or not name or "/" in name:
        print(f"gang-extender explain: expected NAMESPACE/GROUP, got {args.group!r}", file=err)
        return 2
    url = url_for(args.url, namespace, name, args.pod_group, args.replica)
    try:
        status, answer = fetch(url, timeout=args.timeout, insecure=args.insecure)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"gang-extender explain: cannot reach the extender at {args.url}: {exc}", file=err)
        return 2
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True), file=out)
    elif status == 200:
        print(render(answer), end="", file=out)
    if status == 404:
        if not args.json:
            print(f"gang-extender explain: the extender knows no gang of group {namespace}/{name} (no member "
                  "pods and no group object)", file=err)
        return 1
    if status != 200:
        print(f"gang-extender explain: {url} answered {status}: {answer.get('error', answer)}", file=err)
        return 2
    return 0

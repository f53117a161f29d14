"""``kubectl gang fit -f FILE``: the cluster as the API server shows it, the leader's published state, and
the oracle's answer for the gang FILE would make.

Owns: the reads a fit needs, through the plugin's ``Reader`` seam, side by side and from the API server's
watch cache (nodes, the pods of every namespace, the group objects of every served group API,
PodDisruptionBudgets, PriorityClasses (the priority the API server would give the gang's pods), and the
``GangState`` Event holding the leader's ``LedgerState``);
building a mirror of them as the extender's watches would; choosing the ledger state (the newest that
serves the gang's scheduler, from ``--extender-namespace`` when given); the notes on what the answer
could not know. Must not: create or change anything, talk to the extender, or decide anything itself
(``fitting.oracle`` asks a scratch ledger).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from extender.cluster.budgets import DisruptionBudgets
from extender.cluster.groups import GROUP_APIS
from extender.cluster.mirror import ClusterMirror
from extender.errors import ObjectError
from extender.fitting import oracle, submission
from extender.fitting.submission import Submission
from extender.gangs.state import LedgerState
from extender.kube.publishing import LEDGER_ANNOTATION, REASON
from extender.model.gang import GroupKind

COMPONENT = "gang-extender"
STALE_SECONDS = 180.0
"""A published state older than this is said to be old (the leader writes it on change, and at least every
60 s: ``wiring.composition.LEDGER_REFRESH_SECONDS``)."""


class Reader(Protocol):
    def serves(self, group: str, version: str, resource: str) -> bool: ...

    def list(self, path: str, page_size: int = 500,
             query: dict[str, str] | None = None) -> Iterable[dict[str, Any]]: ...


CACHED = {"resourceVersion": "0"}
"""Lists are served from the API server's watch cache (``resourceVersion=0``): the view the extender's own
watches have, and about half the cost of a read from etcd at 5,000 nodes."""


Listed = Future[list[dict[str, Any]]]


@dataclass
class Cluster:
    """What a fit reads of the cluster, each list as the API server sends it (a future: the lists arrive
    side by side, and the first is read into the mirror while the others are still on the way)."""

    nodes: Listed
    pods: Listed
    groups: list[tuple[GroupKind, Listed]]
    budgets: Listed
    priority_classes: Listed
    events: Listed


def fetch(kube: Reader, pool: ThreadPoolExecutor) -> Cluster:
    """Every list a fit needs, started side by side on ``pool`` (the API server serves one while this
    process reads another)."""
    versions = list(pool.map(lambda api: next((v for v in api.versions if kube.serves(api.group, v, api.resource)),
                                              None), GROUP_APIS))

    def listed(path: str, query: Mapping[str, str] = CACHED) -> Listed:
        return pool.submit(lambda: list(kube.list(path, query=dict(query))))

    nodes, pods = listed("/api/v1/nodes"), listed("/api/v1/pods")
    groups = [(api.kind, listed(api.path(version))) for api, version in zip(GROUP_APIS, versions, strict=True)
              if version is not None]
    return Cluster(nodes, pods, groups, listed("/apis/policy/v1/poddisruptionbudgets"),
                   listed("/apis/scheduling.k8s.io/v1/priorityclasses"),
                   listed("/api/v1/events", {**CACHED, "fieldSelector": f"reason={REASON}"}))


def read_cluster(cluster: Cluster) -> tuple[ClusterMirror, DisruptionBudgets, int]:
    """The nodes, pods, group objects and budgets, in a mirror and budgets of their own (and how many
    objects were too malformed to read: the extender skips them too), each list read as it arrives."""
    mirror = ClusterMirror()
    skipped = 0
    for obj in cluster.nodes.result():
        try:
            mirror.upsert_node(obj)
        except ObjectError:
            skipped += 1
    for kind, found in cluster.groups:
        for obj in found.result():
            try:
                mirror.upsert_group(kind, obj)
            except ObjectError:
                skipped += 1
    for obj in cluster.pods.result():
        try:
            mirror.upsert_pod(obj)
        except ObjectError:
            skipped += 1
    budgets = DisruptionBudgets()
    budgets.replace(cluster.budgets.result())
    return mirror, budgets, skipped


def ledger_states(events: Iterable[Mapping[str, Any]], namespace: str | None = None) -> list[LedgerState]:
    """The ledger states gang-extender published (each on its namespace object, in its namespace), newest
    first; ``namespace``: only those of that namespace. Malformed ones are skipped."""
    found = []
    for event in events:
        involved = event.get("involvedObject") or {}
        metadata = event.get("metadata") or {}
        source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
        if event.get("reason") != REASON or source != COMPONENT or involved.get("kind") != "Namespace":
            continue
        if involved.get("name") != metadata.get("namespace") or (namespace and metadata.get("namespace") != namespace):
            continue
        raw = (metadata.get("annotations") or {}).get(LEDGER_ANNOTATION)
        if not isinstance(raw, str):
            continue
        try:
            found.append(LedgerState.from_json(json.loads(raw)))
        except (TypeError, ValueError):
            continue
    return sorted(found, key=lambda s: -s.published_at)


def choose_state(states: list[LedgerState], scheduler: str) -> LedgerState | None:
    """The newest state of an extender serving ``scheduler`` (None: none does)."""
    return next((s for s in states if scheduler in s.scheduler_names), None)


def answer(kube: Reader, question: Submission, *, extender_namespace: str | None = None,
           now: float | None = None) -> dict[str, Any]:
    """The oracle's answer for ``question`` on the cluster ``kube`` reads, with notes on what it assumed."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        cluster = fetch(kube, pool)
        submission.set_priorities(question, cluster.priority_classes.result())
        mirror, budgets, skipped = read_cluster(cluster)
        states = ledger_states(cluster.events.result(), extender_namespace)
    now = time.time() if now is None else now
    state = choose_state(states, question.scheduler_name)
    notes = []
    if state is None:
        where = f" in namespace {extender_namespace}" if extender_namespace else ""
        served = sorted({name for s in states for name in s.scheduler_names})
        notes.append(f"no gang-extender{where} has published its state for scheduler {question.scheduler_name!r}"
                     + (f" (published for: {', '.join(served)})" if served else "")
                     + ": other gangs' reservations and the order are not known, preemption is taken as off")
        state = LedgerState(now, (), {}, (), False, (), None, None, 300.0)
    else:
        age = now - state.published_at
        if age > STALE_SECONDS:
            notes.append(f"the leader's published state is {age:.0f}s old: is gang-extender running and leading?")
        if not state.complete:
            notes.append("the leader's published state was too large and left gangs out: their reservations "
                         "are not counted")
    if skipped:
        notes.append(f"{skipped} object(s) too malformed to read were left out, as the extender leaves them out")
    world = oracle.World(mirror, state, now, budgets=budgets.allowed, budgets_selecting=budgets.selecting)
    result = oracle.ask(world, question)
    result["notes"] = [*result.get("notes", []), *notes]
    result["stateAgeSeconds"] = None if not state.scheduler_names else round(max(now - state.published_at, 0.0), 1)
    return result

"""The fit oracle: would a gang submitted now start, where, and if not, what would it take (no I/O).

Owns: answering one ``Submission`` against a ``World`` (a mirror of the cluster made for the question:
read from the API server by ``kubectl gang fit``, forked from the live one by the extender; the leader's
``LedgerState``; the disruption budgets) by asking a scratch ``GangLedger`` what the extender would do
with the gang: admit it on the free capacity after the gangs ahead (fits now, and where), find it never
fits, keep it behind gangs ahead, preempt for it (the victims), or, failing all, what ``explain``'s fix
finds: the fewest nodes of a shape the cluster has. One answer kind, its details and the notes on what
the answer assumes. Must not: call the API server, keep state between questions, or decide anything
the ledger does not (it is the ledger's own decision, taken on a copy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from extender.cluster.budgets import Budget
from extender.cluster.mirror import ClusterMirror
from extender.cluster.records import pod_record
from extender.cluster.reservations import per_node
from extender.errors import SubmissionError
from extender.fitting.submission import Submission
from extender.gangs.admission import quorum
from extender.gangs.ledger import GangLedger
from extender.gangs.preemption import Budgets
from extender.gangs.settings import GangSettings
from extender.gangs.state import LedgerState
from extender.gangs.victims import VictimUnit
from extender.model.cluster import PodRecord
from extender.model.gang import Code, GangKey, TopologyConstraint
from extender.model.quantity import describe

FITS_NOW = "FitsNow"
FITS_AFTER_PREEMPTION = "FitsAfterPreemption"
FITS_AFTER_GANGS_AHEAD = "FitsAfterGangsAhead"
FITS_AFTER_CAPACITY = "FitsAfterCapacity"
NEVER = "Never"
WAITS_FOR_MEMBERS = "WaitsForMembers"
WAITS = "Waits"
"""The answers: ``Waits`` is a gang that fits none of the others' ways (e.g. the barrier is full) and
whose fix ``explain`` could not find; ``WaitsForMembers``, a file with fewer pods than minCount."""


@dataclass
class World:
    """What a question is answered against. ``mirror`` is the question's own (the oracle adds the
    submission to it); ``now`` wall-clock seconds, the clock of ``state``."""

    mirror: ClusterMirror
    state: LedgerState
    now: float
    budgets: Budgets | None = None
    budgets_selecting: Callable[[Sequence[PodRecord]], list[tuple[Budget, int]]] | None = None
    levels: Callable[[TopologyConstraint], tuple[str, ...]] | None = None


def ask(world: World, submission: Submission) -> dict[str, Any]:
    """The answer for ``submission`` (JSON-ready): ``verdict`` (one of the names above), ``summary`` (one
    line), the details of that verdict, and ``notes``."""
    gang = submission.gang
    if gang is None:
        raise SubmissionError("the submission names no gang")
    state, mirror = world.state, world.mirror
    if state.scheduler_names and submission.scheduler_name not in state.scheduler_names:
        raise SubmissionError(f"the pods name the scheduler {submission.scheduler_name!r}; gang-extender serves "
                              f"{', '.join(state.scheduler_names)}: set spec.schedulerName to one of those")
    for kind, obj in submission.groups:
        mirror.upsert_group(kind, obj)
    members = [mirror.upsert_pod_record(_renamed(mirror, pod)) for pod in _records(submission)]
    exists, policy = mirror.gang_policy(gang)
    answer: dict[str, Any] = {"gang": str(gang), "members": len(members), "schedulerName": submission.scheduler_name,
                              "notes": list(submission.notes)}
    if not exists or policy is None:
        raise SubmissionError(f"gang {gang} has no group with a gang policy: put its group object in the file "
                              "(or create it first)")
    answer["minCount"] = policy.min_count
    gate = quorum(gang, exists, policy, mirror.member_count(gang))
    if not gate.passes:
        return {**answer, "verdict": WAITS_FOR_MEMBERS, "summary": gate.message}
    settings = GangSettings(max_held_binds=state.max_held_binds, max_release_members=state.max_release_members,
                            max_wait_seconds=state.max_wait_seconds, topology_levels=state.topology_levels,
                            levels=world.levels)
    ledger = GangLedger(mirror, settings, clock=lambda: world.now, preemption=state.preemption,
                        budgets=world.budgets)
    ledger.adopt(state)
    verdict = ledger.admit(gang, policy)
    record = ledger.record(gang)
    if verdict.passes and record is not None and record.reservation is not None:
        return {**answer, **_fits_now(ledger, gang, record.reservation.slots)}
    if verdict.passes:
        return {**answer, "verdict": FITS_NOW, "summary": "enough members are placed already: the rest go wherever "
                "kube-scheduler finds room"}
    if record is not None and record.plans.never_fits is not None:
        fix = ledger.view.explain(gang).get("fix") or {}
        grow = fix.get("addNodes")
        return {**answer, "verdict": NEVER, "summary": record.plans.never_fits.message,
                "reason": record.plans.never_fits.message, **({"capacity": grow} if grow else {})}
    if verdict.code is Code.WAIT_UNRESOLVABLE:
        return {**answer, "verdict": NEVER, "summary": verdict.message, "reason": verdict.message}
    ledger.sweep()  # the order's pass: what the leader's next pass would start for it (a preemption)
    victims = [unit for order in ledger.take_work().evictions for unit in order.units]
    explained = ledger.view.explain(gang)
    fix = explained.get("fix") or {}
    if victims and record is not None and record.reservation is not None:
        return {**answer, **_preemption(world, victims, record.reservation.slots)}
    if fix.get("kind") == "waitFor":
        order = explained.get("order") or {}
        return {**answer, "verdict": FITS_AFTER_GANGS_AHEAD,
                "summary": f"it would wait its turn: place {order.get('position')} of {order.get('of')}, after "
                           f"{', '.join(map(str, fix.get('gangs') or []))}",
                "order": {k: order.get(k) for k in ("position", "of", "priority", "ahead")},
                "waiting": explained.get("waiting")}
    if fix.get("kind") == "addNodes":
        shape = fix.get("shape") or {}
        where = f" in {fix['domain']}" if fix.get("domain") else ""
        note = ((explained.get("order") or {}).get("preemption") or {}).get("note")
        return {**answer, "verdict": FITS_AFTER_CAPACITY,
                "summary": f"it does not fit now; it would with {fix.get('nodes')} more node(s) like "
                           f"{shape.get('like')} ({shape.get('allocatable')}){where}",
                "capacity": {k: v for k, v in fix.items() if k != "kind"}, "waiting": explained.get("waiting"),
                **({"noPreemption": note} if note else {})}
    return {**answer, "verdict": WAITS, "summary": explained.get("waiting") or verdict.message,
            "waiting": explained.get("waiting") or verdict.message}


def _records(submission: Submission) -> list[PodRecord]:
    return [pod_record(pod) for pod in submission.pods]


def _renamed(mirror: ClusterMirror, pod: PodRecord) -> PodRecord:
    """``pod``, renamed when a pod of that name exists (the mirror would take it for a re-creation), and
    given another made-up uid when a pod has its own."""
    name, uid, suffix = pod.name, pod.uid, 0
    while mirror.pod(pod.namespace, name) is not None or mirror.pod_by_uid(uid) is not None:
        suffix += 1
        name, uid = f"{pod.name}-fit{suffix}", f"{pod.uid}-{suffix}"
    return pod if name == pod.name else dataclasses.replace(pod, name=name, uid=uid)


def _nodes_json(slots: Sequence[tuple[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node, _ in slots:
        counts[node] = counts.get(node, 0) + 1
    return dict(sorted(counts.items()))


def _fits_now(ledger: GangLedger, gang: GangKey, slots: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    record = ledger.record(gang)
    domain = record.attempt.domain if record is not None else None
    nodes = _nodes_json(slots)
    where = f" in {domain}" if domain is not None and domain.keys else ""
    return {"verdict": FITS_NOW, "summary": f"it fits now: {len(slots)} member(s) on {len(nodes)} node(s){where}, "
            "displacing nothing", "placement": {"nodes": nodes, "domain": str(domain) if domain and domain.keys
                                                 else None, "reserved": describe_slots(slots)}}


def describe_slots(slots: Sequence[tuple[str, Any]]) -> dict[str, str]:
    return {node: describe(amount) for node, amount in sorted(per_node(slots).items())}


def _preemption(world: World, victims: Sequence[VictimUnit], slots: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    pods = [p for unit in victims for p in unit.pods]
    gangs = sum(1 for unit in victims if unit.key.startswith("gang "))
    listed = []
    for unit in victims:
        budgets = world.budgets_selecting(unit.pods) if world.budgets_selecting is not None else []
        listed.append({"unit": unit.key, "priority": unit.priority, "pods": sorted(f"{p.namespace}/{p.name}"
                                                                                  for p in unit.pods),
                       "budgets": [{"name": str(b), "selects": n, "disruptionsAllowed": b.disruptions_allowed}
                                   for b, n in budgets]})
    return {"verdict": FITS_AFTER_PREEMPTION,
            "summary": f"it fits once {len(pods)} pod(s) of {len(victims)} lower-priority unit(s) are evicted "
                       f"({gangs} whole gang(s))",
            "preemption": {"victims": listed, "cost": {"pods": len(pods), "gangs": gangs, "units": len(victims)}},
            "placement": {"nodes": _nodes_json(slots)}}

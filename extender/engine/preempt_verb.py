"""The preempt verb: veto or trim kube-scheduler's own per-pod preemption so it never splits a gang.

Owns: deciding, for one ExtenderPreemptionArgs, which of kube-scheduler's candidate nodes it may
preempt on. The preemptor's side: a member of a gang that is not complete (fewer than minCount
members bound or being bound, its group not seen, or its gang link malformed) gets no candidate at
all (evicting pods for one member of a gang that still cannot run frees nothing useful). The
victims' side: a node whose victims include a member of a gang is dropped, whole-gang victims on one
node included (the simple, safe rule: kube-scheduler's preemption is never the way a gang is
evicted); so is a node where the preemptor would still not fit once its victims left (what they free
may be reserved for other gangs). Plain victims on a node where it would fit pass through unchanged.
Must not: evict, reserve, or change the ledger (a
read-only step under the mirror's lock), or parse the wire format.

Trust: the request is believed for nothing. A node the mirror does not know, or a victim UID that
is not a live pod the mirror places on that node, drops the node; the answer only ever names nodes
and victims the request contained.
"""

from __future__ import annotations

from extender.cluster.facts import PodFacts
from extender.cluster.fit import shortfall
from extender.cluster.mirror import ClusterMirror
from extender.engine.requests import PreemptArgs, PreemptResult, Victims, request_record
from extender.errors import GroupError
from extender.gangs.ledger import GangLedger
from extender.model import messages
from extender.model.cluster import PodRecord
from extender.model.quantity import add_into

UNKNOWN_NODE = messages.PREEMPT_NODE_UNKNOWN
NO_VICTIMS = messages.PREEMPT_NO_VICTIMS


def preempt(mirror: ClusterMirror, ledger: GangLedger, args: PreemptArgs) -> PreemptResult:
    """The candidates kube-scheduler may preempt on for ``args.pod`` (one step under the mirror's lock)."""
    facts = PodFacts(args.pod)
    with mirror.lock:
        veto = _preemptor_veto(mirror, ledger, facts)
        if veto:
            return PreemptResult({}, dict.fromkeys(args.victims, veto))
        kept: dict[str, Victims] = {}
        dropped: dict[str, str] = {}
        preemptor = mirror.pod_by_uid(facts.uid) or request_record(facts)  # the mirror's, when it has it
        for node, victims in args.victims.items():
            reason = _node_problem(mirror, ledger, node, victims) or _still_no_room(mirror, preemptor, node, victims)
            if reason:
                dropped[node] = reason
            else:
                kept[node] = victims
        return PreemptResult(kept, dropped)


def _preemptor_veto(mirror: ClusterMirror, ledger: GangLedger, facts: PodFacts) -> str:
    """Why the preemptor may not preempt at all ("" : it may)."""
    try:
        linked = facts.link is not None
    except GroupError as exc:
        return messages.invalid_gang(exc)
    record = request_record(facts)  # read as filter reads it: a pod filter would refuse is a bad request here too
    if not linked:
        return ""
    gang, policy = ledger.gang_of(record)
    if gang is None:
        return ""  # a member of a non-gang group: an ordinary pod
    if policy is None:
        return messages.preemptor_group_unseen(gang)
    placed = ledger.placed_count(gang)
    if placed < policy.min_count:
        return messages.preemptor_incomplete(gang, placed, policy.min_count)
    return ""


def _node_problem(mirror: ClusterMirror, ledger: GangLedger, node: str, victims: Victims) -> str:
    """Why preempting ``victims`` on ``node`` is not allowed ("" : it is)."""
    if node not in mirror.nodes:
        return UNKNOWN_NODE
    if not victims.uids:
        return NO_VICTIMS
    for uid in victims.uids:
        pod = mirror.pod_by_uid(uid)
        if pod is None or pod.terminal or mirror.placement(uid) != node:
            return messages.victim_unknown(uid)
        gang, policy = ledger.gang_of(pod)
        if gang is not None:
            return messages.victim_in_gang(gang, policy is not None)
    return ""


def _still_no_room(mirror: ClusterMirror, preemptor: PodRecord, node: str, victims: Victims) -> str:
    """Why ``preemptor`` would still not fit ``node`` once ``victims`` left ("" : it would): what they free
    is added to what is free for it there, gangs' reservations subtracted as in filter (issue 26: the
    room a victim freed could be reserved for an admitted gang, and the victim was evicted for nothing)."""
    free = mirror.free(node, preemptor.gang, priority=preemptor.priority)
    for uid in victims.uids:
        victim = mirror.pod_by_uid(uid)
        if victim is not None:
            add_into(free, victim.requests)
    lacking = shortfall(preemptor.requests, free)
    if lacking is None:
        return ""
    return messages.no_room_after_victims(node, lacking, preemptor.requests, free)

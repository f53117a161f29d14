"""The preempt verb: veto or trim kube-scheduler's own per-pod preemption so it never splits a gang.

Owns: deciding, for one ExtenderPreemptionArgs, which of kube-scheduler's candidate nodes it may
preempt on. The preemptor's side: a member of a gang that is not complete (fewer than minCount
members bound or being bound, its group not seen, or its gang link malformed) gets no candidate at
all (evicting pods for one member of a gang that still cannot run frees nothing useful). The
victims' side: a node whose victims include a member of a gang is dropped, whole-gang victims on one
node included (the simple, safe rule: kube-scheduler's preemption is never the way a gang is
evicted). Plain victims pass through unchanged. Must not: evict, reserve, or change the ledger (a
read-only step under the mirror's lock), or parse the wire format.

Trust: the request is believed for nothing. A node the mirror does not know, or a victim UID that
is not a live pod the mirror places on that node, drops the node; the answer only ever names nodes
and victims the request contained.
"""

from __future__ import annotations

from extender.cluster.facts import PodFacts
from extender.cluster.mirror import ClusterMirror
from extender.cluster.model import GangKey, GangPolicy
from extender.engine.requests import PreemptArgs, PreemptResult, Victims, request_record
from extender.errors import GroupError
from extender.gangs.ledger import GangLedger

UNKNOWN_NODE = "node is not known to gang-extender"
NO_VICTIMS = "no victims on the node (kube-scheduler rejects an extender's node without victims)"


def preempt(mirror: ClusterMirror, ledger: GangLedger, args: PreemptArgs) -> PreemptResult:
    """The candidates kube-scheduler may preempt on for ``args.pod`` (one step under the mirror's lock)."""
    facts = PodFacts(args.pod)
    with mirror.lock:
        veto = _preemptor_veto(mirror, ledger, facts)
        if veto:
            return PreemptResult({}, dict.fromkeys(args.victims, veto))
        kept: dict[str, Victims] = {}
        dropped: dict[str, str] = {}
        for node, victims in args.victims.items():
            reason = _node_problem(mirror, ledger, node, victims)
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
        return f"invalid gang: {exc}"
    record = request_record(facts)  # read as filter reads it: a pod filter would refuse is a bad request here too
    if not linked:
        return ""
    gang, policy = ledger.gang_of(record)
    if gang is None:
        return ""  # a member of a non-gang group: an ordinary pod
    if policy is None:
        return f"gang {gang} is not defined yet (its group object has not been seen)"
    placed = len(ledger.placed(mirror.members(gang), ledger.state(gang)))
    if placed < policy.min_count:
        return (f"gang {gang} is not complete ({placed}/{policy.min_count} members placed): preempting for "
                "one member would evict pods for a gang that still cannot run")
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
            return f"victim {uid[:64]!r} is not a pod gang-extender knows on this node"
        gang, policy = ledger.gang_of(pod)
        if gang is not None:
            return _gang_victim(gang, policy)
    return ""


def _gang_victim(gang: GangKey, policy: GangPolicy | None) -> str:
    what = "a gang" if policy is not None else "a gang whose group is not seen yet"
    return (f"victims include a member of {what} ({gang}): kube-scheduler's per-pod preemption would "
            "split it")

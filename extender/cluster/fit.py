"""Does a pod fit a node? (pure)

Owns: the feasibility predicates the extender evaluates itself: taints/tolerations, nodeSelector,
required node affinity, and resources against a free-capacity view. The filter uses them per node and
the gang planner uses them to place a whole gang on paper. Must not: know about gangs, caches or
the mirror; it is handed values and returns the first reason a node is infeasible (or None).

The in-tree filters of kube-scheduler already ran on every node it sends us; we repeat the cheap
placement predicates because admission planning needs them for nodes the scheduler did not send, and
so that snapshot mode (no scheduler) gives the same answers.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.model import messages
from extender.model.cluster import NodeRecord, Placement, Requirement, Taint

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def _requirement_matches(req: Requirement, node: NodeRecord) -> bool:
    if req.field:
        present, value = req.key == "metadata.name", node.name
    else:
        present, value = req.key in node.labels, node.labels.get(req.key, "")
    op = req.operator
    if op == "In":
        return present and value in req.members
    if op == "NotIn":
        return not present or value not in req.members
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(req.values) == 1:
        try:
            left, right = int(value), int(req.values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def placement_failure(placement: Placement, node: NodeRecord) -> str | None:
    """Why ``node`` is excluded by taints, selector or affinity; None if it is not."""
    taints = node.taints + ((UNSCHEDULABLE_TAINT,) if node.unschedulable else ())
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in placement.tolerations):
            return messages.untolerated_taint(taint)
    if placement.unconstrained:
        return None
    labels = node.labels
    for key, value in placement.node_selector:
        if labels.get(key) != value:
            return messages.NODE_SELECTOR_MISMATCH
    if placement.affinity_terms and not any(  # an empty term matches no node (core/v1 NodeSelectorTerm)
        term and all(_requirement_matches(req, node) for req in term) for term in placement.affinity_terms
    ):
        return messages.NODE_AFFINITY_MISMATCH
    return None


def shortfall(requests: Mapping[str, int], free: Mapping[str, int]) -> str | None:
    """The first resource ``requests`` needs more of than ``free`` has; None when it fits."""
    for name, amount in requests.items():
        if amount > 0 and amount > free.get(name, 0):
            return name
    return None


"""Gang rules as pure functions over values (pure).

Owns: the quorum gate (does the group exist, do enough members exist) and the exact messages users
see for a gang that waits for capacity or can never fit. Must not: keep state, take locks or read the
clock; callers pass in what the rules need and act on the result.
"""

from __future__ import annotations

from extender.cluster.model import PASS, Code, GangKey, GangPolicy, GroupKind, Verdict
from extender.gangs.planner import Plan

_OBJECT_NAMES = {GroupKind.WORKLOAD: "Workload", GroupKind.PODGROUP: "PodGroup",
                 GroupKind.COSCHEDULING: "PodGroup"}


def quorum(gang: GangKey, exists: bool, policy: GangPolicy | None, members: int) -> Verdict:
    """The quorum gate: unresolvable until the group exists and ``min_count`` members exist."""
    if not exists:
        kind = _OBJECT_NAMES.get(gang.group.kind, "group")
        what = f"{kind} {gang.group.namespace}/{gang.group.name}"
        if gang.group.pod_group:
            what += f" pod group {gang.group.pod_group!r}"
        return Verdict(Code.WAIT_UNRESOLVABLE, f"waiting for gang {gang}: {what} does not exist")
    if policy is None or members >= policy.min_count:
        return PASS
    return Verdict(Code.WAIT_UNRESOLVABLE, f"waiting for gang {gang}: {members}/{policy.min_count} pods exist")


def admission_wait(gang: GangKey, result: Plan, needed: int) -> Verdict:
    """The message for a gang that does not fit the free capacity yet (resolvable: may change)."""
    placed = len(result.slots)
    return Verdict(Code.WAIT_RESOLVABLE,
                   f"waiting for capacity for gang {gang}: {placed}/{needed} remaining members fit; "
                   f"{result.blocking}")


def never_fits(gang: GangKey, result: Plan, min_count: int, nodes: int) -> Verdict:
    """The fail-fast message for a gang that could not fit even an empty cluster."""
    placed = len(result.slots)
    return Verdict(Code.WAIT_UNRESOLVABLE,
                   f"gang {gang} can never fit this cluster: only {placed} of {min_count} members fit "
                   f"on {nodes} nodes even when they are empty; {result.blocking}")

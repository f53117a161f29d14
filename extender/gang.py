"""Gang rules as pure functions over values (pure).

Owns: the quorum gate (does the group exist, do enough members exist), the placement planner used for
admission (does the rest of the gang fit the free capacity, and where) and for fail-fast (could the
gang fit an *empty* cluster at all), and the exact messages users see. Must not: keep state, take
locks or read the clock; callers pass in what the rules need and act on the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from extender.fit import Placement, placement_failure, placement_from_spec, shortfall
from extender.model import PASS, Code, GangKey, GangPolicy, GroupKind, NodeRecord, PodRecord, Verdict
from extender.quantity import PODS, Resources, add_into, describe

_OBJECT_NAMES = {GroupKind.WORKLOAD: "Workload", GroupKind.COSCHEDULING: "PodGroup"}


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


@dataclass(frozen=True, slots=True)
class Plan:
    """Where the given members would go, and what is left over."""

    slots: tuple[tuple[str, Resources], ...]  # (node, requests) per placed member
    unplaced: tuple[PodRecord, ...]
    blocking: str = ""  # why the first unplaced member did not fit anywhere

    @property
    def complete(self) -> bool:
        return not self.unplaced

    def per_node(self) -> dict[str, Resources]:
        totals: dict[str, Resources] = {}
        for node, requests in self.slots:
            add_into(totals.setdefault(node, {}), requests)
        return totals


@dataclass(slots=True)
class _Shape:
    requests: Resources
    placement: Placement
    pods: list[PodRecord] = field(default_factory=list)


def _shapes(members: Sequence[PodRecord]) -> list[_Shape]:
    shapes: dict[tuple[object, ...], _Shape] = {}
    for pod in members:
        spec = pod.spec or {}
        placement = placement_from_spec(spec)
        key = (tuple(sorted(pod.requests.items())), placement)
        shapes.setdefault(key, _Shape(pod.requests, placement)).pods.append(pod)
    # Largest first: the hardest members get the first pick of nodes.
    return sorted(shapes.values(), key=lambda s: size_key(s.requests), reverse=True)


def size_key(requests: Mapping[str, int]) -> tuple[int, int, tuple[tuple[str, int], ...]]:
    """Order resource requests by cpu, then memory, then everything else."""
    return (requests.get("cpu", 0), requests.get("memory", 0), tuple(sorted(requests.items())))


def _copies(requests: Mapping[str, int], free: Mapping[str, int]) -> int:
    count = 1 << 30
    for name, amount in requests.items():
        if amount > 0:
            count = min(count, free.get(name, 0) // amount)
    return max(count, 0)


def plan(members: Sequence[PodRecord], nodes: Iterable[NodeRecord],
         free_of: Callable[[NodeRecord], Resources]) -> Plan:
    """Place ``members`` on ``nodes`` first-fit, most-allocated node first (packs gangs tightly).

    ``free_of(node)`` gives the capacity available to the gang on that node. Deterministic: the same
    inputs always give the same plan.
    """
    node_list = list(nodes)
    free = {node.name: dict(free_of(node)) for node in node_list}
    order = sorted(node_list, key=lambda n: (free[n.name].get("cpu", 0), n.name))
    slots: list[tuple[str, Resources]] = []
    unplaced: list[PodRecord] = []
    blocking = ""
    for shape in _shapes(members):
        remaining = list(shape.pods)
        for node in order:
            if not remaining:
                break
            if placement_failure(shape.placement, node) is not None:
                continue
            count = min(_copies(shape.requests, free[node.name]), len(remaining))
            for _ in range(count):
                remaining.pop()
                slots.append((node.name, shape.requests))
                add_into(free[node.name], shape.requests, -1)
        if remaining:
            unplaced.extend(remaining)
            if not blocking:
                blocking = _blocking_reason(shape, node_list, free)
    return Plan(tuple(slots), tuple(unplaced), blocking)


def _blocking_reason(shape: _Shape, nodes: Sequence[NodeRecord], free: Mapping[str, Resources]) -> str:
    eligible = [n for n in nodes if placement_failure(shape.placement, n) is None]
    if not eligible:
        return "no node matches its nodeSelector, affinity and tolerations"
    short: Resources = {}
    for name, amount in shape.requests.items():
        if name == PODS:
            continue
        best = max(free[n.name].get(name, 0) for n in eligible)
        if amount > best:
            short[name] = amount - best
    if short:
        return f"no node has {describe({k: shape.requests[k] for k in short})} free " \
               f"(largest free falls short by {describe(short)})"
    return f"no node has {describe(shape.requests)} free at once"


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


def pick_for_reservation(pending: Sequence[PodRecord], count: int) -> list[PodRecord]:
    """The ``count`` members to reserve for: the largest pending ones (conservative)."""
    ranked = sorted(pending, key=lambda p: (size_key(p.requests), p.name), reverse=True)
    return ranked[:max(count, 0)]


def consume_slot(slots: list[tuple[str, Resources]], node: str, requests: Mapping[str, int]) -> None:
    """A member landed on ``node``: drop the reservation slot it used (same node first, else any
    slot with the same requests, else the first slot: the plan only ever shrinks)."""
    for index, (slot_node, slot_requests) in enumerate(slots):
        if slot_node == node and shortfall(requests, slot_requests) is None:
            del slots[index]
            return
    for index, (_, slot_requests) in enumerate(slots):
        if slot_requests == requests:
            del slots[index]
            return
    if slots:
        del slots[0]

"""Gang rules as pure functions over values (pure).

Owns: the quorum gate (does the group exist, do enough members exist), the placement planner used for
admission (does the rest of the gang fit the free capacity, and where) and for fail-fast (could the
gang fit an *empty* cluster at all), the largest shortfall of a gang that does not fit, the
explanation ``gang-extender explain`` prints (built from values the ledger hands over), and the exact
messages users see. Must not: keep state, take locks or read the clock; callers pass in what the
rules need and act on the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from extender.cluster.fit import Placement, placement_failure, placement_from_spec, shortfall
from extender.cluster.model import PASS, Code, GangKey, GangPolicy, GroupKind, NodeRecord, PodRecord, Verdict
from extender.cluster.quantity import CPU, PODS, Resources, add_into, describe

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
         free_of: Callable[[NodeRecord], Resources],
         free_cpu: Callable[[NodeRecord], int] | None = None) -> Plan:
    """Place ``members`` on ``nodes`` first-fit, most-allocated node first (packs gangs tightly).

    ``free_of(node)`` gives the capacity available to the gang on that node; ``free_cpu(node)``, when
    given, must equal ``free_of(node).get("cpu", 0)`` and be cheaper. Nodes are ordered by free cpu;
    with ``free_cpu``, ``free_of`` is called at most once per node, and only when a member could go
    there (enough cpu, placement matches) or to explain why a member fits nowhere: placing a gang that
    fits builds the free capacity only of the nodes it tries before every member is placed.
    Deterministic: the same inputs always give the same plan.
    """
    node_list = list(nodes)
    cpu_of = free_cpu or (lambda node: free_of(node).get(CPU, 0))
    start_cpu = {node.name: cpu_of(node) for node in node_list}
    order = sorted(node_list, key=attrgetter("name"))
    order.sort(key=lambda n: start_cpu[n.name])  # stable: by free cpu, then name (cheaper than tuple keys)
    free = _FreeView(free_of, start_cpu)
    slots: list[tuple[str, Resources]] = []
    unplaced: list[PodRecord] = []
    blocking = ""
    for shape in _shapes(members):
        remaining = list(shape.pods)
        cpu = shape.requests.get(CPU, 0)
        for node in order:
            if not remaining:
                break
            if cpu > 0 and free.cpu(node.name) < cpu:
                continue  # what _copies would find, without building the node's free capacity
            if placement_failure(shape.placement, node) is not None:
                continue
            node_free = free.of(node)
            count = min(_copies(shape.requests, node_free), len(remaining))
            for _ in range(count):
                remaining.pop()
                slots.append((node.name, shape.requests))
                add_into(node_free, shape.requests, -1)
        if remaining:
            unplaced.extend(remaining)
            if not blocking:
                blocking = _blocking_reason(shape, node_list, free)
    return Plan(tuple(slots), tuple(unplaced), blocking)


class _FreeView:
    """The planner's running free capacity per node, built from ``free_of`` on first use."""

    __slots__ = ("_free", "_free_of", "_start_cpu")

    def __init__(self, free_of: Callable[[NodeRecord], Resources], start_cpu: Mapping[str, int]) -> None:
        self._free_of = free_of
        self._start_cpu = start_cpu
        self._free: dict[str, Resources] = {}

    def cpu(self, name: str) -> int:
        free = self._free.get(name)
        return self._start_cpu[name] if free is None else free.get(CPU, 0)

    def of(self, node: NodeRecord) -> Resources:
        free = self._free.get(node.name)
        if free is None:
            free = self._free[node.name] = dict(self._free_of(node))
        return free

    def amount(self, node: NodeRecord, resource: str) -> int:
        return self.cpu(node.name) if resource == CPU else self.of(node).get(resource, 0)


def _blocking_reason(shape: _Shape, nodes: Sequence[NodeRecord], free: _FreeView) -> str:
    eligible = [n for n in nodes if placement_failure(shape.placement, n) is None]
    if not eligible:
        return "no node matches its nodeSelector, affinity and tolerations"
    short: Resources = {}
    for name, amount in shape.requests.items():
        if name == PODS:
            continue
        if any(free.amount(n, name) >= amount for n in eligible):
            continue  # stops at the first node with enough, usually without building every node's view
        short[name] = amount - max(free.amount(n, name) for n in eligible)
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


# ------------------------------------------------------------------------------------- explain
@dataclass(frozen=True, slots=True)
class Shortfall:
    """What most keeps the rest of a gang from fitting: ``amount`` more of ``resource`` is needed,
    summed over the cluster (``scope == "cluster"``) or on one node (``"node"``: enough in total but
    fragmented). ``resource`` is empty when no node is eligible at all (``reason`` says why)."""

    resource: str
    amount: int
    scope: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource or None, "amount": describe({self.resource: self.amount})
                if self.resource else None, "scope": self.scope, "reason": self.reason}


def largest_shortfall(result: Plan, nodes: Sequence[NodeRecord],
                      free_of: Callable[[NodeRecord], Resources]) -> Shortfall | None:
    """The largest shortfall of the members ``result`` could not place (None when it placed all).

    Resources are compared relative to what the unplaced members request, so a 2-cpu shortfall of a
    4-cpu need outranks a 1 GiB shortfall of a 64 GiB need.
    """
    if result.complete:
        return None
    left = {node.name: dict(free_of(node)) for node in nodes}
    for node_name, requests in result.slots:
        if node_name in left:
            add_into(left[node_name], requests, -1)
    shapes = _shapes(result.unplaced)
    eligible = [n for n in nodes if any(placement_failure(s.placement, n) is None for s in shapes)]
    if not eligible:
        return Shortfall("", 0, "node", "no node matches the members' nodeSelector, affinity and tolerations")
    need: Resources = {}
    for pod in result.unplaced:
        add_into(need, pod.requests)
    need.pop(PODS, None)
    free_total: Resources = {}
    for node in eligible:
        add_into(free_total, {k: max(v, 0) for k, v in left[node.name].items()})
    short = {r: amount - free_total.get(r, 0) for r, amount in need.items() if amount > free_total.get(r, 0)}
    if short:
        resource = max(sorted(short), key=lambda r: short[r] / need[r])
        return Shortfall(resource, short[resource], "cluster",
                         f"{len(result.unplaced)} member(s) need {describe({resource: need[resource]})}, "
                         f"{describe({resource: free_total.get(resource, 0)})} is free")
    shape = shapes[0]
    fits = [n for n in eligible if placement_failure(shape.placement, n) is None]
    per_node = {r: amount - max(left[n.name].get(r, 0) for n in fits)
                for r, amount in shape.requests.items() if r != PODS}
    per_node = {r: v for r, v in per_node.items() if v > 0}
    if not per_node:
        return Shortfall("", 0, "node", result.blocking or "no node has room for a member at once")
    resource = max(sorted(per_node), key=lambda r: per_node[r] / shape.requests[r])
    return Shortfall(resource, per_node[resource], "node",
                     f"enough in total, but no node has {describe({resource: shape.requests[resource]})} free "
                     f"for one member")


@dataclass(frozen=True, slots=True)
class GangFacts:
    """What the ledger and the mirror know about one gang, copied under their lock."""

    gang: GangKey
    exists: bool
    policy: GangPolicy | None
    members: tuple[PodRecord, ...]
    placements: Mapping[str, str]      # uid -> node (bound or being bound), for members that have one
    held: frozenset[str]               # uids whose bind is held at the barrier
    reservation: Mapping[str, Resources]
    admitted: bool = False
    timeout_seconds: float = 0.0
    deadline_in: float | None = None   # seconds until the current attempt times out
    backoff_in: float = 0.0            # seconds of back-off left
    timeouts: int = 0
    completed: int = 0
    message: str = ""                  # the last verdict or ledger message
    never_fits: str = ""
    api_version: str = ""
    template: str = ""


def explain(facts: GangFacts, nodes: Sequence[NodeRecord],
            free_of: Callable[[NodeRecord], Resources]) -> dict[str, Any]:
    """The JSON-ready explanation of one gang (``GET /explain``, ``gang-extender explain``)."""
    policy = facts.policy
    min_count = policy.min_count if policy else None
    bound = [p for p in facts.members if p.bound]
    held = [p for p in facts.members if p.uid in facts.held]
    binding = [p for p in facts.members if not p.bound and p.uid not in facts.held and p.uid in facts.placements]
    pending = [p for p in facts.members if not p.bound and p.uid not in facts.held and p.uid not in facts.placements]
    placed = len(bound) + len(binding)
    shortfall: Shortfall | None = None
    if not facts.exists:
        state = "GroupMissing"
    elif policy is None:
        state = "NotAGang"
    elif placed >= policy.min_count:
        state = "Complete"
    elif facts.never_fits:
        state = "NeverFits"
    elif facts.backoff_in > 0 and not facts.admitted:
        state = "BackingOff"
    elif held:
        state = "Holding"
    elif facts.admitted:
        state = "Admitted"
    elif len(facts.members) < policy.min_count:
        state = "WaitingForMembers"
    else:
        state = "WaitingForCapacity"
    if policy is not None and state not in ("Complete", "GroupMissing", "NotAGang"):
        needed = max(policy.min_count - placed - len(held), 0)
        chosen = pick_for_reservation(pending, needed)
        if chosen:
            shortfall = largest_shortfall(plan(chosen, nodes, free_of), nodes, free_of)
    waiting = "" if state == "Complete" else (facts.never_fits or facts.message)
    return {
        "gang": str(facts.gang),
        "kind": facts.gang.group.kind.value,
        "apiVersion": facts.api_version or None,
        "namespace": facts.gang.group.namespace,
        "name": facts.gang.group.name,
        "podGroup": facts.gang.group.pod_group or None,
        "replica": facts.gang.replica or None,
        "template": facts.template or None,
        "exists": facts.exists,
        "state": state,
        "minCount": min_count,
        "members": {"existing": len(facts.members), "bound": len(bound), "binding": len(binding),
                    "held": len(held), "pending": len(pending)},
        "admitted": facts.admitted,
        "reservation": {node: describe(amount) for node, amount in sorted(facts.reservation.items())},
        "timeoutSeconds": facts.timeout_seconds or None,
        "timeoutRemainingSeconds": None if facts.deadline_in is None else round(max(facts.deadline_in, 0.0), 1),
        "backoffRemainingSeconds": round(max(facts.backoff_in, 0.0), 1),
        "timeouts": facts.timeouts,
        "completed": facts.completed,
        "waiting": waiting or None,
        "shortfall": shortfall.to_json() if shortfall else None,
        "heldPods": sorted(p.name for p in held),
        "pendingPods": sorted(p.name for p in pending)[:50],
    }

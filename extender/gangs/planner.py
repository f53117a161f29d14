"""The placement planner (pure): where the rest of a gang would go.

Owns: placing members on nodes first-fit, most-allocated node first, for admission (does the rest of
the gang fit the free capacity, and where) and for fail-fast (could the gang fit an *empty* cluster at
all); which pending members a reservation is for; which reservation slot a landed member used.
Must not: keep state, take locks or read the clock; callers pass in what it needs and act on the
result.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from extender.cluster.fit import placement_failure
from extender.cluster.records import pod_placement
from extender.cluster.reservations import Slot, per_node
from extender.model import messages
from extender.model.cluster import NodeRecord, Placement, PodRecord
from extender.model.quantity import CPU, PODS, Resources, add_into


@dataclass(frozen=True, slots=True)
class Plan:
    """Where the given members would go, and what is left over."""

    slots: tuple[Slot, ...]  # (node, requests) per placed member
    unplaced: tuple[PodRecord, ...]
    blocking: str = ""  # why the first unplaced member did not fit anywhere

    @property
    def complete(self) -> bool:
        return not self.unplaced

    def per_node(self) -> dict[str, Resources]:
        return per_node(self.slots)


@dataclass(slots=True)
class _Shape:
    requests: Resources
    placement: Placement
    pods: list[PodRecord] = field(default_factory=list)


def _shapes(members: Sequence[PodRecord]) -> list[_Shape]:
    shapes: dict[tuple[object, ...], _Shape] = {}
    for pod in members:
        placement = pod_placement(pod)
        key = (tuple(sorted(pod.requests.items())), placement)
        shapes.setdefault(key, _Shape(pod.requests, placement)).pods.append(pod)
    # Largest first: the hardest members get the first pick of nodes.
    return sorted(shapes.values(), key=lambda s: size_key(s.requests), reverse=True)


def size_key(requests: Mapping[str, int]) -> tuple[int, int, tuple[tuple[str, int], ...]]:
    """Order resource requests by cpu, then memory, then everything else."""
    return (requests.get("cpu", 0), requests.get("memory", 0), tuple(sorted(requests.items())))


def copies(requests: Mapping[str, int], free: Mapping[str, int]) -> int:
    """How many members asking for ``requests`` fit in ``free`` at once."""
    count = 1 << 30
    for name, amount in requests.items():
        if amount > 0:
            count = min(count, free.get(name, 0) // amount)
    return max(count, 0)


def plan(members: Sequence[PodRecord], nodes: Iterable[NodeRecord],
         free_of: Callable[[NodeRecord], Resources],
         free_cpu: Callable[[NodeRecord], int] | FreeCpu | None = None) -> Plan:
    """Place ``members`` on ``nodes`` first-fit, most-allocated node first (packs gangs tightly).

    ``free_of(node)`` gives the capacity available to the gang on that node; ``free_cpu(node)``, when
    given, must equal ``free_of(node).get("cpu", 0)`` and be cheaper (a ``FreeCpu`` is cheapest).
    Nodes are ordered by free cpu; with ``free_cpu``, ``free_of`` is called at most once per node,
    and only when a member could go there (enough cpu, placement matches) or to explain why a member
    fits nowhere: placing a gang that fits builds the free capacity only of the nodes it tries before
    every member is placed.
    Deterministic: the same inputs always give the same plan.
    """
    node_list = list(nodes)
    start_cpu: Mapping[str, int]
    if isinstance(free_cpu, FreeCpu):
        start_cpu = free_cpu
    else:
        cpu_of = free_cpu or (lambda node: free_of(node).get(CPU, 0))
        start_cpu = {node.name: cpu_of(node) for node in node_list}
    shapes = _shapes(members)
    order = _Walked(_order(node_list, start_cpu, min((s.requests.get(CPU, 0) for s in shapes), default=0)))
    free = _FreeView(free_of, start_cpu)
    slots: list[tuple[str, Resources]] = []
    unplaced: list[PodRecord] = []
    blocking = ""
    for shape in shapes:
        remaining = list(shape.pods)
        cpu = shape.requests.get(CPU, 0)
        for node in order:
            if not remaining:
                break
            if cpu > 0 and free.cpu(node.name) < cpu:
                continue  # what copies would find, without building the node's free capacity
            if placement_failure(shape.placement, node) is not None:
                continue
            node_free = free.of(node)
            count = min(copies(shape.requests, node_free), len(remaining))
            for _ in range(count):
                remaining.pop()
                slots.append((node.name, shape.requests))
                add_into(node_free, shape.requests, -1)
        if remaining:
            unplaced.extend(remaining)
            if not blocking:
                blocking = _blocking_reason(shape, node_list, free)
    return Plan(tuple(slots), tuple(unplaced), blocking)


FILL_AFTER = 8
"""A ``FreeCpu`` read node by node makes every entry at once when it has made 1/8 of them: a plan that
walks most nodes (a gang that does not fit) then costs about what one copy of them all does."""


class FreeCpu(dict[str, int]):
    """Free cpu by node name, also callable as ``free_cpu(node)``: ``plan`` reads it as it is instead
    of calling it once per node. Given ``cpu_of``, a node's entry is made when it is first read
    (``cpu_of(name)``; KeyError for a node it does not know), so a plan that walks a few nodes of
    thousands computes only theirs; ``size``: how many nodes it covers (the entries given, by default).
    A reader about to read every node (a topology level's domains, a plan over a subset) calls ``fill``
    first: ``every()`` then makes all the entries in one pass instead of a call per node.
    ``ordered(least)``, when given, yields the names of every node with at least ``least`` free cpu
    (all of them when ``least`` <= 0) in (free cpu, name) order, and ``records`` finds their records: a
    plan over every node then walks that order instead of sorting all of them."""

    ordered: Callable[[int], Iterator[str]] | None = None
    records: Mapping[str, NodeRecord] = {}

    def __init__(self, cpu: Mapping[str, int] | None = None, ordered: Callable[[int], Iterator[str]] | None = None,
                 records: Mapping[str, NodeRecord] | None = None, *, cpu_of: Callable[[str], int] | None = None,
                 size: int | None = None, every: Callable[[], Mapping[str, int]] | None = None) -> None:
        super().__init__(cpu or {})
        self._cpu_of = cpu_of
        self._every = every
        self.size = len(self) if size is None else size
        if ordered is not None and records is not None:
            self.ordered, self.records = ordered, records

    def fill(self) -> None:
        """Make every node's entry now (``every()``; nothing without it or once done)."""
        if self._every is not None:
            every, self._every = self._every, None
            self.update(every())

    def __missing__(self, name: str) -> int:
        if self._every is not None and len(self) * FILL_AFTER >= self.size:  # a walk going far: the rest at once
            self.fill()
            return self[name]
        if self._cpu_of is None:
            raise KeyError(name)
        cpu = self[name] = self._cpu_of(name)
        return cpu

    def __call__(self, node: NodeRecord) -> int:
        return self[node.name]


def _order(nodes: Sequence[NodeRecord], start_cpu: Mapping[str, int], least: int) -> Iterator[NodeRecord]:
    """The nodes by free cpu, then name; nodes with less free cpu than ``least`` (the smallest member's)
    are left out: no member could go there, and full nodes would come first. From the caller's index
    when ``start_cpu`` has one and the plan is over every node it knows (``nodes`` must be distinct nodes
    it knows, so that the same count is the same set: the ledger's node lists and their subsets are);
    otherwise a heap, ordered only as far as it is walked (a gang that fits the first few nodes does not
    pay for ordering thousands)."""
    if isinstance(start_cpu, FreeCpu) and start_cpu.ordered is not None and len(nodes) == start_cpu.size:
        records = start_cpu.records
        yield from (records[name] for name in start_cpu.ordered(least))
        return
    if isinstance(start_cpu, FreeCpu):
        start_cpu.fill()
    heap = [(cpu, node.name, i) for i, node in enumerate(nodes) if (cpu := start_cpu[node.name]) >= least or least <= 0]
    heapq.heapify(heap)
    while heap:
        yield nodes[heapq.heappop(heap)[2]]


class _Walked:
    """An order walked only once, and from the start by every shape: the nodes reached are kept."""

    __slots__ = ("_source", "_walked")

    def __init__(self, source: Iterator[NodeRecord]) -> None:
        self._source = source
        self._walked: list[NodeRecord] = []

    def __iter__(self) -> Iterator[NodeRecord]:
        yield from self._walked  # the nodes ordered so far, then more from the source
        for node in self._source:
            self._walked.append(node)
            yield node


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
        return messages.NO_NODE_MATCHES
    short: Resources = {}
    for name, amount in shape.requests.items():
        if name == PODS:
            continue
        if any(free.amount(n, name) >= amount for n in eligible):
            continue  # stops at the first node with enough, usually without building every node's view
        short[name] = amount - max(free.amount(n, name) for n in eligible)
    if short:
        return messages.no_node_has_free({k: shape.requests[k] for k in short}, short)
    return messages.no_node_has_at_once(shape.requests)


def pick_for_reservation(pending: Sequence[PodRecord], count: int) -> list[PodRecord]:
    """The ``count`` members to reserve for: the largest pending ones (conservative)."""
    ranked = sorted(pending, key=lambda p: (size_key(p.requests), p.name), reverse=True)
    return ranked[:max(count, 0)]

"""Reservations: the capacity admitted gangs hold on nodes for their members still to come (pure).

Owns: per gang, its reservation *slots* (a node and the requests of one member that will go there),
and the per-node totals derived from them, which capacity checks subtract; which reservations are
*draining* ones (the head gang's, kept as busy capacity frees), the priority each holds against (a
pod of higher priority is not kept out by it) and how much of those a capacity check subtracts
(``draining_share``: only what is free beyond admitted reservations). The slots are the only
record: the totals are recomputed from them on every change, so the two cannot drift apart. Must
not: decide which gang reserves what (the ledger does), take locks (the mirror calls it under its
own) or know about pods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from extender.cluster.fit import shortfall
from extender.cluster.model import GangKey
from extender.cluster.quantity import CPU, Resources, add_into

Slot = tuple[str, Resources]
"""One reserved place: (node name, the requests of the member it is kept for)."""


def per_node(slots: Iterable[Slot]) -> dict[str, Resources]:
    """What ``slots`` reserve on each node, summed."""
    totals: dict[str, Resources] = {}
    for node, requests in slots:
        add_into(totals.setdefault(node, {}), requests)
    return totals


def consume_slot(slots: list[Slot], node: str, requests: Mapping[str, int]) -> None:
    """Drop from ``slots`` the one a member placed on ``node`` takes: one on that node that holds its
    requests, else one with the same requests, else the first (a reservation only ever shrinks)."""
    if not slots:
        return
    index = next((i for i, (at, kept) in enumerate(slots) if at == node and shortfall(requests, kept) is None), None)
    if index is None:
        index = next((i for i, (_, kept) in enumerate(slots) if kept == requests), 0)
    del slots[index]


class Reservations:
    """Every gang's reservation slots and the per-node totals derived from them."""

    def __init__(self, touched: Callable[[str], None]) -> None:
        """``touched(node)``: called for every node whose reserved total changed."""
        self._touched = touched
        self._slots: dict[GangKey, tuple[Slot, ...]] = {}
        self._on_node: dict[str, dict[GangKey, Resources]] = {}  # node -> gang -> total (derived)
        self._nodes: dict[GangKey, frozenset[str]] = {}  # gang -> nodes it reserves on (derived)
        self._draining: dict[GangKey, int] = {}  # gangs whose reservation waits for capacity to free -> priority

    # ---------------------------------------------------------------------------------- changes
    def replace(self, gang: GangKey, slots: Iterable[Slot], *, draining: bool = False, priority: int = 0) -> None:
        """Make ``slots`` the whole of the gang's reservation (none: it holds nothing). ``draining``: a
        gang not admitted keeps them as capacity frees (``draining_share``), not out of free capacity,
        and only from pods of ``priority`` or lower (a higher-priority pod goes first, as it would in the
        order)."""
        kept = tuple((node, dict(requests)) for node, requests in slots)
        totals = {node: amount for node, amount in per_node(kept).items() if amount}
        was_draining, before = self._draining.get(gang), self._nodes.get(gang, frozenset())
        for node in before.difference(totals):
            by_gang = self._on_node[node]
            del by_gang[gang]
            if not by_gang:
                del self._on_node[node]
            self._touched(node)
        for node, amount in totals.items():
            by_gang = self._on_node.setdefault(node, {})
            if by_gang.get(gang) != amount:
                by_gang[gang] = amount
                self._touched(node)
        if kept:
            self._slots[gang] = kept
            self._nodes[gang] = frozenset(totals)
        else:
            self._slots.pop(gang, None)
            self._nodes.pop(gang, None)
        if kept and draining:
            self._draining[gang] = priority
        else:
            self._draining.pop(gang, None)
        if self._draining.get(gang) != was_draining:  # what other gangs see changed on every node of it
            for node in before.union(totals):
                self._touched(node)

    def _resize(self, gang: GangKey, slots: Iterable[Slot]) -> None:
        """``replace`` keeping whether the reservation drains, and for which priority."""
        drain = self._draining.get(gang)
        self.replace(gang, slots, draining=drain is not None, priority=drain or 0)

    def add(self, gang: GangKey, slots: Iterable[Slot]) -> None:
        self._resize(gang, (*self.slots(gang), *slots))

    def keep(self, gang: GangKey, count: int) -> None:
        """Keep only the gang's first ``count`` slots."""
        self._resize(gang, self.slots(gang)[:max(count, 0)])

    def use(self, gang: GangKey, node: str, requests: Mapping[str, int]) -> None:
        """A member of ``gang`` landed on ``node``: drop the slot it used (``consume_slot``)."""
        slots = list(self.slots(gang))
        if slots:
            consume_slot(slots, node, requests)
            self._resize(gang, slots)

    def copy(self) -> Reservations:
        """A copy that no later change reaches (its own ``touched`` does nothing): the per-node tables are
        copied, the totals, slots and node sets they hold are never changed in place, only replaced."""
        copied = Reservations(lambda _node: None)
        copied._slots = dict(self._slots)
        copied._on_node = {node: dict(by_gang) for node, by_gang in self._on_node.items()}
        copied._nodes = dict(self._nodes)
        copied._draining = dict(self._draining)
        return copied

    # ---------------------------------------------------------------------------------- queries
    def slots(self, gang: GangKey) -> tuple[Slot, ...]:
        return self._slots.get(gang, ())

    def count(self, gang: GangKey) -> int:
        return len(self._slots.get(gang, ()))

    def nodes(self, gang: GangKey) -> frozenset[str]:
        """The nodes where ``gang`` holds a reservation."""
        return self._nodes.get(gang, frozenset())

    def of(self, gang: GangKey) -> dict[str, Resources]:
        """What ``gang`` holds on each node (copies)."""
        return {node: dict(self._on_node[node][gang]) for node in self._nodes.get(gang, ())}

    def on(self, node: str) -> Mapping[GangKey, Resources]:
        """What every gang holds on ``node`` (live: read it under the owner's lock)."""
        return self._on_node.get(node, {})

    def by_node(self) -> Iterator[tuple[str, Mapping[GangKey, Resources]]]:
        return iter(self._on_node.items())

    def draining(self, gang: GangKey) -> bool:
        """Whether the gang's reservation is a draining one (``replace(..., draining=True)``)."""
        return gang in self._draining

    def _holds_off(self, gang: GangKey, priority: int | None) -> bool:
        """Whether ``gang``'s draining reservation keeps capacity from a pod of ``priority`` (None: any)."""
        return priority is None or priority <= self._draining[gang]

    def take_from(self, free: Resources, node: str, for_gang: GangKey | None, include_own: bool,
                  priority: int | None = None) -> None:
        """Subtract from ``free`` (a node's allocatable less the pods placed there) what the reservations
        on ``node`` keep from ``for_gang`` (a pod of ``priority``): other gangs' admitted reservations
        whole, draining ones only for their ``draining_share`` and only from pods of their priority or
        lower, its own (``include_own``: counted as room) nothing."""
        reserved = self._on_node.get(node)
        if not reserved:
            return
        drains: Resources = {}
        own: Mapping[str, int] = {}
        for gang, amount in reserved.items():
            mine = gang == for_gang and include_own
            if gang in self._draining:
                if not mine and self._holds_off(gang, priority):
                    add_into(drains, amount)
            elif mine:
                own = amount
            else:
                add_into(free, amount, -1)
        for resource, drained in drains.items():
            left = free.get(resource, 0)
            free[resource] = left - draining_share(left - own.get(resource, 0), drained)

    def cpu_left(self, node: str, cpu: int, for_gang: GangKey | None, priority: int | None = None) -> int:
        """``take_from`` for cpu alone: ``cpu`` free on ``node`` less what its reservations keep."""
        drains = own = 0
        for gang, amount in self._on_node.get(node, {}).items():
            cores = amount.get(CPU, 0)
            if gang in self._draining:
                drains += cores if gang != for_gang and self._holds_off(gang, priority) else 0
            elif gang == for_gang:
                own = cores
            else:
                cpu -= cores
        return cpu - draining_share(cpu - own, drains) if drains else cpu


def draining_share(headroom: int, drains: int) -> int:
    """How much of ``drains`` (one resource, draining reservations on a node) comes out of a node's free
    capacity, when ``headroom`` is what is left of it after the pods placed there and the other
    reservations, admitted ones first, the asking gang's own included: a draining reservation covers
    busy capacity and is kept as that frees, so it takes only what is free beyond admitted
    reservations. Were it subtracted whole, it would take the room a gang admitted on that node
    before the drain started reserved, and keep that gang's members from binding there until the
    pods under the drain end."""
    return min(drains, max(headroom, 0))

"""ReservedCapacity: what gangs hold in reserve on each node, as capacity checks subtract it (pure).

Owns: the per-node totals of every gang's reservation and the priority up to which a draining one keeps
capacity, derived from the slots each gang's record holds (``gangs.record.Reservation``, the only record
of them: ``set`` replaces a gang's totals whole from its slots, so the two cannot drift apart); how much
of those a capacity check subtracts (``take_from``: admitted reservations whole, draining ones only for
``draining_share``). Helpers on slots themselves (``per_node``, ``consume_slot``). Must not: keep slots,
decide which gang reserves what (the gang ledger does), take locks (the mirror calls it under its own)
or know about pods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from extender.cluster.fit import shortfall
from extender.model.gang import GangKey
from extender.model.quantity import CPU, Resources, add_into

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


class ReservedCapacity:
    """Every gang's reserved totals per node, derived from its slots."""

    def __init__(self, touched: Callable[[str], None]) -> None:
        """``touched(node)``: called for every node whose reserved total changed."""
        self._touched = touched
        self._on_node: dict[str, dict[GangKey, Resources]] = {}  # node -> gang -> total
        self._nodes: dict[GangKey, frozenset[str]] = {}  # gang -> nodes it reserves on
        self._draining: dict[GangKey, int] = {}  # gangs whose reservation waits for capacity to free -> priority

    # ---------------------------------------------------------------------------------- changes
    def set(self, gang: GangKey, slots: Iterable[Slot], holds_off: int | None = None) -> None:
        """Make the totals of ``slots`` the whole of the gang's reservation (none: it holds nothing).
        ``holds_off``: a draining reservation (a gang not admitted) kept as capacity frees
        (``draining_share``), not out of free capacity, and only from pods of that priority or lower (a
        higher-priority pod goes first, as it would in the order); None: an admitted one, kept whole."""
        totals = {node: amount for node, amount in per_node(slots).items() if amount}
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
        if totals:
            self._nodes[gang] = frozenset(totals)
        else:
            self._nodes.pop(gang, None)
        if totals and holds_off is not None:
            self._draining[gang] = holds_off
        else:
            self._draining.pop(gang, None)
        if self._draining.get(gang) != was_draining:  # what other gangs see changed on every node of it
            for node in before.union(totals):
                self._touched(node)

    def copy(self) -> ReservedCapacity:
        """A copy that no later change reaches (its own ``touched`` does nothing): the per-node tables are
        copied, the totals and node sets they hold are never changed in place, only replaced."""
        copied = ReservedCapacity(lambda _node: None)
        copied._on_node = {node: dict(by_gang) for node, by_gang in self._on_node.items()}
        copied._nodes = dict(self._nodes)
        copied._draining = dict(self._draining)
        return copied

    # ---------------------------------------------------------------------------------- queries
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

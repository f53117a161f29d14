"""The nodes in admission's order, kept as nodes change (pure; the mirror calls it under its lock).

Owns: an index of every known node by (free cpu a gang with no reservation would see, name), brought up
to date lazily: the mirror marks a node ``stale`` whenever its capacity, its pods or the reservations on
it change, and the index re-reads only those nodes when it is next walked (or, when many are stale, sorts
every node afresh from one read of all their cpu: cheaper than moving each). A walk for one gang merges
that index with the few nodes where the gang's own reservation makes its view differ, so admitting a gang
on 5,000 nodes reads the nodes it tries, not all of them (building and heap-ordering every node per
admission was most of a filter's time for upstream's gangs of 3 at 5,000 nodes).
Must not: decide anything, hold a lock (the mirror's covers every call), or keep a node the mirror forgot.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping

from sortedcontainers import SortedList

from extender.model.gang import GangKey


class CpuOrder:
    """Node names by (free cpu, name), for ``walk``; ``cpu_left(node, for_gang)`` gives a known node's
    free cpu as ``for_gang`` sees it, or None for a node that is no longer known; ``every()`` every known
    node's ``cpu_left(node, None)`` at once (cheaper per node): when more than one node in ``REBUILD``
    is stale (a relist, a burst of pods), the index is sorted afresh from it instead of moving each."""

    REBUILD = 8

    def __init__(self, cpu_left: Callable[[str, GangKey | None], int | None],
                 every: Callable[[], Mapping[str, int]]) -> None:
        self._cpu_left = cpu_left
        self._every = every
        self._sorted: SortedList = SortedList()
        self._key: dict[str, tuple[int, str]] = {}
        self._stale: set[str] = set()

    def stale(self, node: str) -> None:
        """``node``'s free cpu may have changed (or it came or went)."""
        self._stale.add(node)

    def _refresh(self) -> None:
        if len(self._stale) * self.REBUILD > len(self._key):
            self._key = {node: (cpu, node) for node, cpu in self._every().items()}
            self._sorted = SortedList(self._key.values())
            self._stale.clear()
            return
        for node in self._stale:
            old = self._key.pop(node, None)
            if old is not None:
                self._sorted.remove(old)
            cpu = self._cpu_left(node, None)
            if cpu is not None:
                key = self._key[node] = (cpu, node)
                self._sorted.add(key)
        self._stale.clear()

    def walk(self, for_gang: GangKey | None, own: Iterable[str], least: int) -> Iterator[str]:
        """Node names by (free cpu as ``for_gang`` sees it, name), from ``least`` cpu up (every node when
        ``least`` <= 0): the order of sorting all of them. ``own``: the nodes where ``for_gang`` holds a
        reservation, the only nodes whose cpu it sees differently. Consume it before the state changes."""
        self._refresh()
        mine = set(own)
        floor = least > 0
        exact = sorted((cpu, node) for node in mine
                       if (cpu := self._cpu_left(node, for_gang)) is not None and (not floor or cpu >= least))
        shared = self._sorted.irange((least, "")) if floor else iter(self._sorted)
        return _names(heapq.merge(_without(shared, mine), exact))


# Generator functions, not generator expressions: compiled by mypyc (docs/decisions/0005) a generator
# expression is evaluated whole, into a list, and a walk would read every node instead of those it takes.
def _without(keys: Iterable[tuple[int, str]], mine: set[str]) -> Iterator[tuple[int, str]]:
    for key in keys:
        if key[1] not in mine:
            yield key


def _names(keys: Iterable[tuple[int, str]]) -> Iterator[str]:
    for _, node in keys:
        yield node

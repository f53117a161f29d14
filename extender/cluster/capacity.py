"""What is free on a node for a gang: the one formula, and a copy of its inputs to read without the lock.

Owns: a node's free capacity for a gang (``free_on``: allocatable less the requests of the pods placed
there less what reservations keep from the gang), used by ``ClusterMirror.free`` on its live state and
by ``Capacity`` on a copy of it. A ``Capacity`` is made by the mirror under its lock (``ClusterMirror.
capacity``) and answers as the mirror did at that moment from any thread afterwards: the slow readers
(``explain``'s plan and shortfall over every node) use it after the lock is released, so filters and
binds do not wait for them. Must not: take locks, change what it was given, or know about pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from extender.cluster.reservations import ReservedCapacity
from extender.model.cluster import NodeRecord
from extender.model.gang import GangKey
from extender.model.quantity import Resources, add_into


def free_on(node: NodeRecord, used: Mapping[str, int] | None, reservations: ReservedCapacity, for_gang: GangKey | None,
            include_own: bool = True, priority: int | None = None) -> Resources:
    """``node``'s allocatable less ``used`` (the requests of the pods placed there) less what
    ``reservations`` keep from ``for_gang`` (``ReservedCapacity.take_from``); a new dict."""
    free = dict(node.allocatable)
    if used:
        add_into(free, used, -1)
    reservations.take_from(free, node.name, for_gang, include_own, priority)
    return free


def with_requests(used: Mapping[str, int] | None, requests: Mapping[str, int], sign: int) -> Resources:
    """A node's used requests with a pod's added (``sign`` 1) or taken away (-1): a new dict, so the old one,
    which a ``Capacity`` may share, never changes."""
    total = dict(used or {})
    add_into(total, requests, sign)
    return total


@dataclass(frozen=True, slots=True)
class Capacity:
    """The mirror's free capacity for ``gang`` as of one moment (``ClusterMirror.capacity``).

    ``used`` maps a node to the requests placed there (the mirror replaces a node's entry on every
    change, never changes one in place, so a shallow copy of its table is a snapshot); ``reservations``
    is a ``ReservedCapacity.copy``."""

    gang: GangKey | None
    used: Mapping[str, Mapping[str, int]]
    reservations: ReservedCapacity

    def free(self, node: NodeRecord) -> Resources:
        """What ``ClusterMirror.free(node.name, gang)`` answered when this copy was made."""
        return free_on(node, self.used.get(node.name), self.reservations, self.gang)

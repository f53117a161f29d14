"""Per-node verdicts: whether one pod fits one node of the mirror, and the names a request may carry (pure).

Owns: the verdict of a pod on a node as the mirror sees it now (``node_verdict``: its taints, selector
and affinity, then the room left after the pods placed there and the reservations that keep it from
the pod; with a gang, that gang's own reservation counted as room, and ``FIT_RESERVED`` when the pod
fits inside it), each message cut to ``MAX_MESSAGE``; and the rule for a requested node name
(``check_node_names``), checked lazily by callers. Must not: cache verdicts, take the lock (callers
hold the mirror's), or change anything.
"""

from __future__ import annotations

from typing import Any

from extender.cluster.cache import FIT
from extender.cluster.fit import placement_failure, shortfall
from extender.cluster.mirror import ClusterMirror
from extender.errors import ProtocolError
from extender.model import messages
from extender.model.cluster import Placement, PodRecord
from extender.model.gang import GangKey

FIT_RESERVED = "\x00reserved"
"""Verdict (never cached): the member fits inside its own gang's reservation on the node (preferred)."""

UNKNOWN_NODE = messages.NODE_NOT_WATCHED
"""Verdict (never cached) for a requested name that is not a node of the mirror."""

MAX_MESSAGE = 1024
"""Longest per-node failure message. A message can quote request data (a gang name, an annotation, a
resource name) and is repeated once per requested node: unbounded, a 100 KB annotation times 2,000
node names made a 200 MB reply."""

MAX_NODE_NAME = 253  # a Node's name is a DNS subdomain (RFC 1123): at most 253 characters


def bounded(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 1] + "\u2026"


def check_node_names(names: list[Any]) -> list[str]:
    """Raise ProtocolError unless every element is a string of 1..253 characters (duplicates are
    allowed: each gets its own verdict)."""
    try:  # two C-level passes (~80 us for 5,000 names); the loop below only finds the culprit
        "".join(names)  # TypeError unless every element is a str
        lengths = set(map(len, names))
    except TypeError:
        lengths = {0}
    if 0 in lengths or max(lengths, default=0) > MAX_NODE_NAME:
        for index, name in enumerate(names):
            if not isinstance(name, str) or not name:
                raise ProtocolError(f"NodeNames[{index}] must be a non-empty string")
            if len(name) > MAX_NODE_NAME:
                raise ProtocolError(f"NodeNames[{index}] is {len(name)} characters long; a node name has at most "
                                    f"{MAX_NODE_NAME}")
    return names


def node_verdict(mirror: ClusterMirror, name: str, pod: PodRecord, placement: Placement,
                 gang: GangKey | None) -> str:
    """``pod``'s verdict on node ``name`` (``FIT``, ``FIT_RESERVED`` or why not, bounded); ``gang``: the
    gang whose reservation counts as room (None: as a pod of no gang, the verdict the cache keeps)."""
    node = mirror.nodes.get(name)
    if node is None:
        return UNKNOWN_NODE
    reason = placement_failure(placement, node)
    if reason is not None:
        return bounded(reason)
    requests, priority = pod.requests, pod.priority
    lacking = shortfall(requests, mirror.free(name, gang, priority=priority))
    if lacking is not None:
        if shortfall(requests, mirror.free(name, gang, include_own_reservation=False, priority=priority)) is None:
            return bounded(messages.insufficient(lacking))
        without_reservations = dict(node.allocatable)
        for resource, amount in mirror.used(name).items():
            without_reservations[resource] = without_reservations.get(resource, 0) - amount
        if shortfall(requests, without_reservations) is None:
            return bounded(messages.insufficient_reserved(lacking))
        return bounded(messages.insufficient(lacking))
    if gang is not None:
        own = mirror.own_reservation(name, gang)
        if own and shortfall(requests, own) is None:
            return FIT_RESERVED
    return FIT

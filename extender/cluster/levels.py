"""Level orders for preferred-topology fallback: ``--topology-levels`` and Kueue ``Topology`` objects.

Owns: the shape of Kueue's cluster-scoped ``Topology`` (group ``kueue.x-k8s.io``, resource
``topologies``; versions ``v1``, ``v1beta2``, ``v1beta1`` and ``v1alpha1`` all carry
``spec.levels: [{nodeLabel: <node label key>}]``, widest level first, ``kubernetes.io/hostname`` only
as the last level); parsing one object into a ``KueueTopology`` (name, label keys) without ever raising
(anything malformed is a ``Rejected`` with a message); and ``TopologyLevels``, the Topologies known now
with the rule that picks one gang's level order:

1. The constraint names no key: the static ``--topology-levels`` (nothing falls back anyway).
2. The static ``--topology-levels`` when set and it contains every key of the constraint (its
   required and preferred key; ``kubernetes.io/hostname`` counts as contained: the planner implies it
   as the narrowest level).
3. Otherwise the levels of a Kueue Topology that contains every key of the constraint; among several,
   the one with the most levels, then the smallest name (deterministic).
4. Otherwise ``()``: the planner tries the constraint's own key and then across domains, which is what
   any level order that does not contain the key gives too.

Thread safety: ``TopologyLevels`` has its own lock, a leaf lock (nothing is called while it is held).
The Topology watch thread writes through ``replace``/``apply``; admission reads ``levels_for`` under the
ledger's lock. Must not: do I/O, raise on malformed objects, or know about nodes and placement.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.labelkeys import HOSTNAME, label_key_problem
from extender.model.gang import TopologyConstraint

KUEUE_GROUP = "kueue.x-k8s.io"
TOPOLOGY_RESOURCE = "topologies"
TOPOLOGY_VERSIONS = ("v1", "v1beta2", "v1beta1", "v1alpha1")
"""Versions of Kueue's Topology, newest first (one shape for our purposes)."""


@dataclass(frozen=True, slots=True)
class KueueTopology:
    """One Kueue Topology: its name and its level label keys, widest first."""

    name: str
    levels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Rejected:
    """Why an object cannot be used as a Topology (``name`` is "" when even that is unreadable)."""

    name: str
    message: str


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def object_name(obj: object) -> str:
    """The object's ``metadata.name`` ("" when missing or not a string)."""
    name = _dict(_dict(obj).get("metadata")).get("name")
    return name if isinstance(name, str) else ""


def parse_topology(obj: object) -> KueueTopology | Rejected:
    """``obj`` (a Topology as the API server returns it) as a ``KueueTopology``, or why it is unusable."""
    if not isinstance(obj, dict):
        return Rejected("", f"a Topology must be an object, not {type(obj).__name__}")
    name = object_name(obj)
    if not name:
        return Rejected("", "a Topology without metadata.name")
    levels = _dict(obj.get("spec")).get("levels")
    if not isinstance(levels, list) or not levels:
        return Rejected(name, f"Topology {name}: spec.levels must be a non-empty list")
    keys: list[str] = []
    for index, level in enumerate(levels):
        key = _dict(level).get("nodeLabel")
        problem = label_key_problem(key)
        if problem is not None:
            return Rejected(name, f"Topology {name}: spec.levels[{index}].nodeLabel: {problem}")
        assert isinstance(key, str)
        if key in keys:
            return Rejected(name, f"Topology {name}: spec.levels[{index}].nodeLabel: {key!r} is listed twice")
        keys.append(key)
    if HOSTNAME in keys[:-1]:
        return Rejected(name, f"Topology {name}: {HOSTNAME} may only be the last (narrowest) level")
    return KueueTopology(name, tuple(keys))


def _keys(constraint: TopologyConstraint) -> tuple[str, ...]:
    return tuple(key for key in (constraint.required, constraint.preferred) if key)


def _contains(levels: Sequence[str], keys: Iterable[str]) -> bool:
    return all(key == HOSTNAME or key in levels for key in keys)


class TopologyLevels:
    """The static level order and the Kueue Topologies known now; ``levels_for`` picks one order.

    ``rejected`` counts objects that could not be used (each is skipped; a bad update of a known
    Topology forgets it), ``problems`` keeps the last reason per name for logs and tests.
    """

    def __init__(self, static: Sequence[str] = ()) -> None:
        self.static = tuple(static)
        self._lock = threading.Lock()
        self._topologies: dict[str, tuple[str, ...]] = {}
        self.problems: dict[str, str] = {}
        self.rejected = 0

    def topologies(self) -> dict[str, tuple[str, ...]]:
        with self._lock:
            return dict(self._topologies)

    def copy(self) -> TopologyLevels:
        """The level orders known now, with a lock of their own (what-if questions read the copy)."""
        copied = TopologyLevels(self.static)
        copied._topologies = self.topologies()
        return copied

    def replace(self, items: Iterable[object]) -> list[Rejected]:
        """A full list: exactly these Topologies are known from now on. Returns the rejected ones."""
        parsed = [parse_topology(item) for item in items]
        with self._lock:
            self._topologies = {p.name: p.levels for p in parsed if isinstance(p, KueueTopology)}
            self.problems = {}
            return self._reject([p for p in parsed if isinstance(p, Rejected)])

    def apply(self, kind: str, obj: object) -> list[Rejected]:
        """One watch event (``ADDED``/``MODIFIED``/``DELETED``). Returns what was rejected."""
        if kind == "DELETED":
            name = object_name(obj)
            with self._lock:
                self._topologies.pop(name, None)
                self.problems.pop(name, None)
            return []
        parsed = parse_topology(obj)
        with self._lock:
            if isinstance(parsed, Rejected):
                self._topologies.pop(parsed.name, None)
                return self._reject([parsed])
            self._topologies[parsed.name] = parsed.levels
            self.problems.pop(parsed.name, None)
            return []

    def _reject(self, rejected: list[Rejected]) -> list[Rejected]:
        self.rejected += len(rejected)
        for item in rejected:
            self.problems[item.name] = item.message
        return rejected

    def levels_for(self, constraint: TopologyConstraint) -> tuple[str, ...]:
        """The level order (widest first) a gang with ``constraint`` falls back along (module rule)."""
        keys = _keys(constraint)
        if not keys or (self.static and _contains(self.static, keys)):
            return self.static
        with self._lock:
            fitting = [(-len(levels), name, levels) for name, levels in self._topologies.items()
                       if _contains(levels, keys)]
        return min(fitting)[2] if fitting else ()

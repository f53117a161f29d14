"""GroupIndex: the group objects the mirror holds, and the gang groups each defines (no I/O, no lock).

Owns: per group object (its kind and namespace/name) the groups it defines, each group's gang policy
(None: a group that is not a gang) and ``GroupMeta`` (where the object is served, what its status says),
and the groups that appeared or whose policy changed since the ledger last asked. Must not: lock (the
mirror calls it under its own lock), read pods, or decide gang rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from extender.cluster.groups import GROUP_PARSERS, GroupMeta, group_meta
from extender.model.gang import GangPolicy, GroupKind, GroupRef

ObjectKey = tuple[str, str]  # (namespace, name) of a group object
Parsed = tuple[tuple[GroupKind, ObjectKey], dict[GroupRef, GangPolicy | None], GroupMeta]


class GroupIndex:
    """Group objects -> the groups they define, their policies and meta."""

    def __init__(self) -> None:
        self._policies: dict[GroupRef, GangPolicy | None] = {}
        self._objects: dict[tuple[GroupKind, ObjectKey], tuple[GroupRef, ...]] = {}
        self._meta: dict[GroupRef, GroupMeta] = {}
        self._changes: set[GroupRef] = set()

    def copy(self) -> GroupIndex:
        """An independent index of the same objects (no changes pending)."""
        other = GroupIndex()
        other._policies, other._objects, other._meta = dict(self._policies), dict(self._objects), dict(self._meta)
        return other

    @staticmethod
    def parse(kind: GroupKind, obj: Mapping[str, Any]) -> Parsed:
        """A group object read (no state touched: callers parse before taking their lock); a malformed
        one raises."""
        metadata = obj.get("metadata") or {}
        key = (kind, (str(metadata.get("namespace") or "default"), str(metadata.get("name"))))
        return key, GROUP_PARSERS[kind](obj), group_meta(kind, obj)

    def apply(self, parsed: Parsed) -> ObjectKey:
        """Add or update a parsed group object; returns its (namespace, name)."""
        key, groups, meta = parsed
        old = {ref: self._policies.get(ref) for ref in self._objects.get(key, ())}
        self._drop(old)
        for ref, policy in groups.items():
            if ref not in old or old[ref] != policy:
                # A group that appeared (its pods may be waiting for it) or whose policy changed (a 1.37
                # PodGroup whose minCount was scaled): the ledger re-evaluates and wakes them.
                self._changes.add(ref)
            self._meta[ref] = meta
        self._policies.update(groups)
        self._objects[key] = tuple(groups)
        return key[1]

    def delete(self, kind: GroupKind, namespace: str, name: str) -> None:
        self._drop(self._objects.pop((kind, (namespace, name)), ()))

    def _drop(self, refs: Iterable[GroupRef]) -> None:
        for ref in refs:
            self._policies.pop(ref, None)
            self._meta.pop(ref, None)

    def keys(self, kind: GroupKind) -> list[ObjectKey]:
        """The namespace/name of every object of ``kind``."""
        return [key for object_kind, key in self._objects if object_kind is kind]

    def meta(self, group: GroupRef) -> GroupMeta | None:
        return self._meta.get(group)

    def defines(self, group: GroupRef) -> bool:
        return group in self._policies

    def policy(self, group: GroupRef) -> GangPolicy | None:
        return self._policies.get(group)

    def groups(self) -> list[GroupRef]:
        return list(self._policies)

    def take_changes(self) -> set[GroupRef]:
        """Groups that appeared or whose gang policy changed since the last call (each reported once)."""
        changes, self._changes = self._changes, set()
        return changes

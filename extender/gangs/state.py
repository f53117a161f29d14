"""LedgerState: what only the leading extender knows of the gangs, as a value others can read (pure).

Owns: the published shape of the ledger's gang state, the part a what-if needs beside what the API
server shows: each busy gang's place in the order (priority, waiting since), whether it was found never
to fit, what it holds in reserve (purpose, since, slots), and the pods the extender accounts on a node
the API server does not show yet (held or being bound); with the settings that change decisions
(preemption on, scheduler names, topology levels, the barrier's budget, the maximum wait). Times are
wall-clock seconds since the epoch. Its JSON form (``to_json``/``from_json``, a malformed value refused
with ValueError) is what the leader publishes and ``kubectl gang fit`` reads. Must not: decide, read
the clock, take locks or call out (``LedgerView.state`` builds it; ``GangLedger.adopt`` applies it to a
scratch ledger).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.cluster.reservations import Slot
from extender.gangs.record import Purpose
from extender.model.gang import GangKey

VERSION = 1


@dataclass(frozen=True, slots=True)
class Reserved:
    """A gang's reservation: why it holds it, since when, against which priority, and its slots."""

    purpose: Purpose
    since: float
    priority: int
    slots: tuple[Slot, ...]


@dataclass(frozen=True, slots=True)
class GangEntry:
    """One busy gang."""

    gang: GangKey
    priority: int
    waiting_since: float | None
    never_fits: str
    reserved: Reserved | None


@dataclass(frozen=True, slots=True)
class LedgerState:
    """The leader's gang state and decision settings at ``published_at``."""

    published_at: float
    gangs: tuple[GangEntry, ...]
    assumed: Mapping[str, str]  # pod uid -> node
    scheduler_names: tuple[str, ...]
    preemption: bool
    topology_levels: tuple[str, ...]
    max_held_binds: int | None
    max_release_members: int | None
    max_wait_seconds: float
    complete: bool = True  # False: gangs were left out of the published form (it was too large)

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "publishedAt": round(self.published_at, 3),
                "schedulerNames": list(self.scheduler_names), "preemption": self.preemption,
                "topologyLevels": list(self.topology_levels), "maxHeldBinds": self.max_held_binds,
                "maxReleaseMembers": self.max_release_members, "maxWaitSeconds": self.max_wait_seconds,
                "assumed": dict(sorted(self.assumed.items())),
                "gangs": [_entry_json(e) for e in self.gangs]}

    @staticmethod
    def from_json(value: object) -> LedgerState:
        if not isinstance(value, dict):
            raise ValueError(f"the ledger state is a JSON object, not {type(value).__name__}")
        if value.get("version") != VERSION:
            raise ValueError(f"the ledger state has version {value.get('version')!r}; this reads {VERSION}")
        gangs = value.get("gangs")
        assumed = value.get("assumed")
        if not isinstance(gangs, list) or not isinstance(assumed, dict):
            raise ValueError("the ledger state lacks its gangs or assumed pods")
        return LedgerState(
            published_at=_number(value.get("publishedAt"), "publishedAt"),
            gangs=tuple(_entry(g) for g in gangs),
            assumed={str(k): str(v) for k, v in assumed.items()},
            scheduler_names=tuple(str(n) for n in _list(value.get("schedulerNames"), "schedulerNames")),
            preemption=bool(value.get("preemption")),
            topology_levels=tuple(str(n) for n in _list(value.get("topologyLevels"), "topologyLevels")),
            max_held_binds=_count(value.get("maxHeldBinds"), "maxHeldBinds"),
            max_release_members=_count(value.get("maxReleaseMembers"), "maxReleaseMembers"),
            max_wait_seconds=_number(value.get("maxWaitSeconds"), "maxWaitSeconds"),
            complete=value.get("complete", True) is not False)


def _entry_json(entry: GangEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"gang": entry.gang.to_json(), "priority": entry.priority,
                           "waitingSince": entry.waiting_since, "neverFits": entry.never_fits or None}
    if entry.reserved is not None:
        held = entry.reserved
        out["reserved"] = {"purpose": held.purpose.value, "since": round(held.since, 3), "priority": held.priority,
                           "slots": [[node, dict(requests)] for node, requests in held.slots]}
    return out


def _entry(value: object) -> GangEntry:
    if not isinstance(value, dict):
        raise ValueError("a gang of the ledger state is a JSON object")
    reserved = value.get("reserved")
    held = None
    if reserved is not None:
        if not isinstance(reserved, dict):
            raise ValueError("a reservation is a JSON object")
        try:
            purpose = Purpose(reserved.get("purpose"))
        except ValueError:
            raise ValueError(f"unknown reservation purpose {reserved.get('purpose')!r}") from None
        held = Reserved(purpose, _number(reserved.get("since"), "since"),
                        _integer(reserved.get("priority"), "priority"),
                        tuple(_slot(s) for s in _list(reserved.get("slots"), "slots")))
    since = value.get("waitingSince")
    never = value.get("neverFits")
    return GangEntry(GangKey.from_json(value.get("gang")), _integer(value.get("priority"), "priority"),
                     None if since is None else _number(since, "waitingSince"),
                     never if isinstance(never, str) else "", held)


def _slot(value: object) -> Slot:
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], dict)):
        raise ValueError("a slot is [node, {resource: amount}]")
    return value[0], {str(k): _integer(v, "amount") for k, v in value[1].items()}


def _list(value: object, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{name} is a list")
    return value


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} is a number")
    return float(value)


def _integer(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} is an integer")
    return value


def _count(value: object, name: str) -> int | None:
    return None if value is None else _integer(value, name)

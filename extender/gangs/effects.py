"""Decisions as values: what a part of the ledger decided, and the effects it asks for (pure values).

Owns: the effect types, each a change outside the deciding part's own bookkeeping: what a gang holds in
reserve (``Reserve``, the capacity everyone else sees), a bind put at or answered from the barrier
(``Hold``, ``Answer``: the mirror's assumed placements and the thread waiting for the answer), a pod
assumed on or forgotten from a node (``Assume``, ``Forget``), what users are told (``Tell`` an Event,
``Publish`` a group's status), pods woken for a new scheduling attempt (``Wake``, ``WakeBlocked``) or
let into kube-scheduler's queue (``Ungate``: the quorum gate removed),
work for the engine (``Evict``, ``Release``: queued as ``Work`` until the engine takes it) and the
counters (``Count``); and ``Decision``, a verdict with the effects that go with it. Must not: perform
them (``registry.GangRegistry.apply`` does, in order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from extender.gangs.record import GangRecord, Hold, Reservation
from extender.gangs.victims import VictimUnit
from extender.model.cluster import PodRecord
from extender.model.gang import PASS, GangKey, GangStatus, Verdict


@dataclass(frozen=True, slots=True)
class Reserve:
    """``record`` now holds ``reservation`` in reserve (None: nothing)."""

    record: GangRecord
    reservation: Reservation | None


@dataclass(frozen=True, slots=True)
class HoldAt:
    """``hold`` waits at ``record``'s barrier; its pod is assumed on the hold's node."""

    record: GangRecord
    hold: Hold


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer ``hold`` with ``result`` ("": bound); it leaves the barrier. Unless ``bound``, its pod is no
    longer assumed on its node."""

    record: GangRecord | None
    hold: Hold
    result: str
    bound: bool = False


@dataclass(frozen=True, slots=True)
class Assume:
    """Account ``pod`` on ``node`` before the API server shows it there (an immediate bind)."""

    uid: str
    node: str


@dataclass(frozen=True, slots=True)
class Forget:
    """Undo ``Assume`` (the bind failed)."""

    uid: str


@dataclass(frozen=True, slots=True)
class Tell:
    """An Event about the gangs of ``pods``."""

    pods: Sequence[PodRecord]
    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Publish:
    """The gang's phase and message, for its group object's status."""

    gang: GangKey
    status: GangStatus


@dataclass(frozen=True, slots=True)
class Wake:
    """Ask kube-scheduler to try ``pods`` again now."""

    pods: Sequence[PodRecord]


@dataclass(frozen=True, slots=True)
class Ungate:
    """Remove the quorum gate from ``pods`` (their gang has its quorum): kube-scheduler tries them from now."""

    pods: Sequence[PodRecord]


@dataclass(frozen=True, slots=True)
class WakeBlocked:
    """Capacity was freed: wake the pods rejected for want of it (``Waitlist``)."""


@dataclass(frozen=True, slots=True)
class EvictionOrder:
    """Evictions the engine runs outside the lock for one preemptor (one unit after another)."""

    gang: GangKey
    units: tuple[VictimUnit, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Evict:
    """Evict ``order``'s victims (the engine does, outside the lock)."""

    order: EvictionOrder


@dataclass(frozen=True, slots=True)
class Release:
    """Bind the complete quorum ``holds`` of ``gang`` now (the engine does, outside the lock, and reports
    with the ledger's ``released``): its holds are marked releasing."""

    gang: GangKey
    holds: list[Hold]


@dataclass(frozen=True, slots=True)
class Work:
    """What the engine takes from the ledger to do outside the lock: quorums to bind, evictions to run."""

    releases: list[Release] = field(default_factory=list)
    evictions: list[EvictionOrder] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Count:
    """Add ``amount`` to the counter ``name`` (``gang_extender_gangs_<name>``)."""

    name: str
    amount: int = 1


Effect = (Reserve | HoldAt | Answer | Assume | Forget | Tell | Publish | Wake | Ungate | WakeBlocked | Evict | Release
          | Count)


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict and the effects that go with it, performed in order by the apply step."""

    verdict: Verdict = PASS
    effects: tuple[Effect, ...] = field(default=())

    @staticmethod
    def of(effects: Sequence[Effect], verdict: Verdict = PASS) -> Decision:
        return Decision(verdict, tuple(effects))


NOTHING = Decision()

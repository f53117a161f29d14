"""GangRegistry: the gang records, and the one apply step that performs the ledger's decisions (no I/O).

Owns: the record of every gang the ledger acts for (``GangRecord``) and four subsets kept so that
per-request walks do not grow with every gang ever seen, nor with every gang not yet placed: those that
may have work for the clock or the queue (``busy``), those holding binds or admitted (``holding``), those
waiting their turn in the admission order (``waiting_turn``) and those holding a draining or preempting
reservation (``draining``); the schedule of what falls due when for which gang (``due_by``; a filter's
sweep walks only what ``take_due`` hands it); the gangs another binder bound a member of
(``note_bound``, for the filter-gated mode to follow); the members of a release a previous leader left
open (``approved``); the work queued for the engine (quorums to bind, evictions: ``take_work``); the
counters; and ``apply``, the only code that changes what a record holds (its reservation and holds) and,
in the same step, the mirror's view of it (the reserved capacity, the pods assumed on nodes), the
threads waiting on holds, and what users are told (through the callbacks it is given: Events, wake-ups,
quorum gates removed, status). Must not: decide anything, call the API server or block (the callbacks
only queue).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable

from extender.cluster.mirror import ClusterMirror
from extender.gangs.effects import (
    Answer,
    Assume,
    Count,
    Decision,
    Effect,
    Evict,
    EvictionOrder,
    Forget,
    HoldAt,
    Publish,
    Release,
    Reserve,
    Tell,
    Ungate,
    Wake,
    WakeBlocked,
    Work,
)
from extender.gangs.record import GangRecord, Reservation
from extender.gangs.waitlist import MAX_REMEMBERED, Waitlist
from extender.model.cluster import PodRecord
from extender.model.gang import GangKey, GangPolicy, GangStatus, Verdict

log = logging.getLogger(__name__)

COUNTERS = ("admitted", "completed", "timeouts", "never_fits", "bind_errors", "releases_resumed", "holds_recycled",
            "releases_aborted", "drains_started", "drains_ended", "preemptions_started", "preemptions_completed",
            "preemptions_failed", "partially_bound", "releases_abandoned", "victims_partly_evicted")
"""Every counter, exported as ``gang_extender_gangs_<name>`` (zero until counted)."""

DUES_SLACK = 1024
"""Entries the schedule may hold beyond twice the gangs before it is compacted."""

OnEvent = Callable[[list[PodRecord], str, str, str], None]
OnWake = Callable[[list[PodRecord]], None]
OnStatus = Callable[[GangKey, GangStatus], None]


class GangRegistry:
    """The records, and the apply step."""

    def __init__(self, mirror: ClusterMirror, waitlist: Waitlist, *, on_event: OnEvent | None = None,
                 on_wake: OnWake | None = None, on_status: OnStatus | None = None,
                 on_ungate: OnWake | None = None) -> None:
        self.mirror = mirror
        self.lock = mirror.lock
        self.waitlist = waitlist
        self.on_event: OnEvent = on_event or (lambda pods, kind, reason, message: None)
        self.on_wake: OnWake = on_wake or (lambda pods: None)
        self.on_status: OnStatus = on_status or (lambda gang, status: None)
        self.on_ungate: OnWake = on_ungate or (lambda pods: None)
        self.counters: Counter[str] = Counter(dict.fromkeys(COUNTERS, 0))
        self._records: dict[GangKey, GangRecord] = {}
        self._busy: dict[GangKey, GangRecord] = {}
        self._holding: dict[GangKey, GangRecord] = {}  # a superset of those holding binds or admitted
        self._waiting: dict[GangKey, GangRecord] = {}  # a superset of those waiting their turn
        self._draining: dict[GangKey, GangRecord] = {}  # a superset of those draining or preempting
        self._held = 0      # held binds over the records (``apply`` holds and answers them: the only code that does)
        self._reserved = 0  # reserved places over the records (``_reserve`` sets reservations: the only code)
        self._dues: list[tuple[float, int, GangRecord]] = []  # a heap of (when, seq, gang): the schedule
        self._due_seq = itertools.count()  # ties keep their order, and records are never compared
        self._bound: set[GangKey] = set()
        self._approved: set[str] = set()
        self._work_lock = threading.Lock()  # its own: the engine takes the work without the mirror's lock
        self._releases: list[Release] = []
        self._evictions: list[EvictionOrder] = []

    # ----------------------------------------------------------------------------- the records
    def get(self, gang: GangKey) -> GangRecord | None:
        return self._records.get(gang)

    def ensure(self, gang: GangKey, policy: GangPolicy) -> GangRecord:
        """The gang's record, made now (with ``policy``) if it has none."""
        record = self._records.get(gang)
        if record is None:
            record = self._records[gang] = GangRecord(gang, policy)
        return record

    def drop(self, record: GangRecord) -> None:
        """Forget a gang with nothing held or reserved (its members are gone)."""
        del self._records[record.key]
        self._held -= len(record.holds)  # none, as said; its later answers count for nothing (``_perform``)
        self._reserved -= record.reserved
        self._busy.pop(record.key, None)
        self._holding.pop(record.key, None)
        self._waiting.pop(record.key, None)
        self._draining.pop(record.key, None)

    def all(self) -> list[GangRecord]:
        return list(self._records.values())

    def gangs(self) -> Iterable[GangKey]:
        return self._records.keys()

    def mark_busy(self, record: GangRecord) -> None:
        """``record`` now has work for the clock or the queue: called where a gang is admitted, gets a held
        bind or starts waiting its turn (every other unsettled state follows from one of those)."""
        self._busy[record.key] = record

    def busy(self) -> list[GangRecord]:
        """The gangs that are not settled (settled and forgotten ones leave the set here)."""
        gone = [g for g, r in self._busy.items() if self._records.get(g) is not r or r.settled]
        for gang in gone:
            del self._busy[gang]
        return list(self._busy.values())

    def holding(self) -> list[GangRecord]:
        """The gangs holding binds at the barrier or admitted (``apply`` keeps the set as it holds and
        reserves: the only code that does either); those that stopped leave the set here."""
        return self._current(self._holding, _holds)

    def mark_waiting(self, record: GangRecord) -> None:
        """``record`` starts waiting its turn (its ``turn.waiting_since`` was just set): called wherever that
        is set, so the queue walks the waiting gangs only, not every gang holding binds. (A gang that loses
        its admission waits again: ``apply`` marks it as it takes the reservation away.)"""
        self._waiting[record.key] = self._busy[record.key] = record

    def waiting_turn(self) -> list[GangRecord]:
        """The gangs waiting their turn: ``turn.waiting_since`` set and not admitted (an admitted gang keeps
        its ``waiting_since`` until it completes); those that stopped leave the set here."""
        return self._current(self._waiting, _waits_turn)

    def draining(self) -> list[GangRecord]:
        """The gangs holding a draining or preempting reservation (``apply`` keeps the set as it reserves)."""
        return self._current(self._draining, lambda record: record.draining or record.preempting)

    def _current(self, subset: dict[GangKey, GangRecord], still: Callable[[GangRecord], bool]) -> list[GangRecord]:
        """The members of ``subset`` that are still this registry's records and ``still`` hold; the rest
        leave it."""
        gone = [g for g, r in subset.items() if self._records.get(g) is not r or not still(r)]
        for gang in gone:
            del subset[gang]
        return list(subset.values())

    def rebuild_busy(self) -> None:
        """Find the unsettled, holding, waiting and draining gangs among all (the full sweep's safety net for
        a mark missed)."""
        records = self._records.items()
        self._busy = {g: r for g, r in records if not r.settled}
        self._holding = {g: r for g, r in records if _holds(r)}
        self._waiting = {g: r for g, r in records if _waits_turn(r)}
        self._draining = {g: r for g, r in records if r.draining or r.preempting}
        held = sum(len(r.holds) for r in self._records.values())
        reserved = sum(r.reserved for r in self._records.values())
        if (held, reserved) != (self._held, self._reserved):  # a change went uncounted: a bug to report
            log.warning("held binds and reserved places recounted: %d and %d, counted %d and %d",
                        held, reserved, self._held, self._reserved)
            self._held, self._reserved = held, reserved

    def demand_bound(self) -> int:
        """Held binds plus reserved places over every gang: never below the barrier's budget's count
        (``Admission.held_demand``: binds still waiting, places of admitted gangs), and kept as they change,
        so the budget is counted only when this comes near its limit."""
        return self._held + self._reserved

    def due_by(self, when: float, record: GangRecord) -> float:
        """Something a sweep acts on for ``record`` falls due at ``when`` (a deadline, a held bind's answer,
        the end of a back-off): a filter's sweep walks that gang once that time comes. Returns ``when``."""
        heapq.heappush(self._dues, (when, next(self._due_seq), record))
        if len(self._dues) > 2 * len(self._records) + DUES_SLACK:
            self._compact_dues()
        return when

    def _compact_dues(self) -> None:
        """Keep each gang's earliest entry and drop the rest (later ones, forgotten gangs'): enough, since
        whoever walks a gang schedules its next due. Keeps the schedule within twice the gangs even when no
        full sweep runs."""
        earliest: dict[GangKey, tuple[float, int, GangRecord]] = {}
        for entry in self._dues:
            record = entry[2]
            if self._records.get(record.key) is record:
                kept = earliest.get(record.key)
                if kept is None or entry[:2] < kept[:2]:
                    earliest[record.key] = entry
        self._dues = list(earliest.values())
        heapq.heapify(self._dues)

    @property
    def next_due(self) -> float:
        """When the earliest thing scheduled falls due (infinity: nothing). An entry may be stale (its time
        was moved later, or the gang forgotten): walking it then finds nothing to do."""
        return self._dues[0][0] if self._dues else float("inf")

    def take_due(self, now: float) -> list[GangRecord]:
        """The gangs something fell due for by ``now``, once each, earliest first (forgotten ones left out),
        taken off the schedule: whoever walks them schedules what they have next (``due_by``)."""
        taken: dict[GangKey, GangRecord] = {}
        dues = self._dues
        while dues and dues[0][0] <= now:
            record = heapq.heappop(dues)[2]
            if self._records.get(record.key) is record:
                taken.setdefault(record.key, record)
        return list(taken.values())

    def reschedule(self, entries: Iterable[tuple[float, GangRecord]]) -> None:
        """The schedule made anew from ``entries`` (when, gang): the full sweep's, the safety net for a due
        never scheduled, which also drops the stale entries."""
        self._dues = [(when, next(self._due_seq), record) for when, record in entries]
        heapq.heapify(self._dues)

    # ------------------------------------------------------------------- what others tell it
    def note_bound(self, gang: GangKey) -> None:
        """Another binder bound a member of ``gang`` (``take_bound_gangs`` hands it to the bind mode)."""
        self._bound.add(gang)

    def take_bound_gangs(self) -> set[GangKey]:
        """Gangs another binder bound a member of since the last call."""
        taken, self._bound = self._bound, set()
        return taken

    def approve(self, pods: Iterable[PodRecord]) -> None:
        """These members pass the barrier at their next bind request (a release left open)."""
        for pod in pods:
            if len(self._approved) >= MAX_REMEMBERED:
                break
            self._approved.add(pod.uid)

    def take_approval(self, uid: str) -> bool:
        """Whether ``uid`` was approved (and no longer is)."""
        if uid in self._approved:
            self._approved.discard(uid)
            return True
        return False

    def take_work(self) -> Work:
        """The quorums to bind and the evictions to run that decisions queued since the last call. Work is
        queued, not handed back up the stack, so a request that fails after its sweep loses none of it."""
        with self._work_lock:
            work = Work(self._releases, self._evictions)
            self._releases, self._evictions = [], []
            return work

    # ------------------------------------------------------------------------------- apply
    def apply(self, decision: Decision | Iterable[Effect]) -> Verdict | None:
        """Perform the effects in order; returns the decision's verdict (None for bare effects)."""
        effects = decision.effects if isinstance(decision, Decision) else decision
        for effect in effects:
            self._perform(effect)
        return decision.verdict if isinstance(decision, Decision) else None

    def _perform(self, effect: Effect) -> None:
        match effect:
            case Reserve(record, reservation):
                self._reserve(record, reservation)
            case HoldAt(record, hold):
                before = len(record.holds)
                record.holds[hold.pod.uid] = hold
                if self._records.get(record.key) is record:
                    self._held += len(record.holds) - before
                self.mirror.assume(hold.pod.uid, hold.node)
                self._holding[record.key] = self._busy[record.key] = record
            case Answer(record, hold, result, bound):
                if not bound:
                    self.mirror.forget(hold.pod.uid)
                if record is not None and record.holds.get(hold.pod.uid) is hold:
                    del record.holds[hold.pod.uid]
                    if self._records.get(record.key) is record:
                        self._held -= 1
                hold.answer(result)
            case Assume(uid, node):
                self.mirror.assume(uid, node)
            case Forget(uid):
                self.mirror.forget(uid)
            case Tell(pods, kind, reason, message):
                self.on_event(list(pods), kind, reason, message)
            case Publish(gang, status):
                self.on_status(gang, status)
            case Wake(pods):
                self.on_wake(list(pods))
            case Ungate(pods):
                self.on_ungate(list(pods))
            case WakeBlocked():
                blocked = self.waitlist.take_blocked()
                if blocked:
                    self.on_wake(blocked)
            case Evict(order):
                with self._work_lock:
                    self._evictions.append(order)
            case Release():
                with self._work_lock:
                    self._releases.append(effect)
            case Count(name, amount):
                self.counters[name] += amount

    def _reserve(self, record: GangRecord, reservation: Reservation | None) -> None:
        before = record.reserved
        record.reservation = reservation
        if self._records.get(record.key) is record:
            self._reserved += record.reserved - before
        if _waits_turn(record):
            self._waiting[record.key] = record
        if reservation is None:
            self.mirror.set_reservation(record.key, ())
        else:
            self.mirror.set_reservation(record.key, reservation.slots, reservation.holds_off)
            self.mark_busy(record)
            if record.admitted:
                self._holding[record.key] = record
            if record.draining or record.preempting:
                self._draining[record.key] = record


def _holds(record: GangRecord) -> bool:
    """Whether the gang holds binds at the barrier or is admitted."""
    return bool(record.holds) or record.admitted


def _waits_turn(record: GangRecord) -> bool:
    """Whether the gang waits its turn in the admission order: complete, not admitted."""
    return record.turn.waiting_since is not None and not record.admitted

"""GangRecord: everything the ledger keeps about one gang, in one record (plain data, flags derived).

Owns: the fields of one gang (``GangRecord``), of one bind held at its barrier (``Hold``) and of what it
holds in reserve (``Reservation``: its slots, why it holds them, since when, against which priority,
for which victims). Whether a gang is admitted, draining or preempting, and whether it is settled, is
derived from those fields, never stored twice. Each group of fields is changed by one part of the
ledger, named beside it; the reservation and the holds only by the apply step (``registry``), which
keeps the mirror's view of them (the capacity others see, the pods assumed on nodes) in step.
Must not: decide, take locks, read the clock or call out.
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from extender.cluster.reservations import Slot, consume_slot
from extender.gangs.domains import Domain, DomainReport
from extender.gangs.victims import VictimUnit
from extender.model.cluster import PodRecord
from extender.model.gang import NONE, GangKey, GangPolicy, TopologyConstraint, Verdict


class Purpose(enum.Enum):
    """Why a gang holds capacity in reserve."""

    ADMITTED = "admitted"      # admitted: room for the members still to come
    DRAINING = "draining"      # first in the order past its maximum wait: kept as busy capacity frees
    PREEMPTING = "preempting"  # first in the order, preempting: the place its victims free, kept as they leave


@dataclass(frozen=True, slots=True)
class Reservation:
    """What a gang holds in reserve: one slot per member it is for (a node and that member's requests).
    Draining and preempting reservations are kept only from pods of ``priority`` or lower, and only as
    capacity frees (``cluster.reservations``). Immutable: a change is a new value."""

    purpose: Purpose
    slots: tuple[Slot, ...]
    since: float  # when it was admitted, or the drain or preemption started
    priority: int = 0
    victims: tuple[VictimUnit, ...] = ()  # preempting: the units evicted for it
    nodes: frozenset[str] = field(init=False, compare=False)
    victim_uids: frozenset[str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "slots", tuple((node, dict(requests)) for node, requests in self.slots))
        object.__setattr__(self, "nodes", frozenset(node for node, _ in self.slots))
        object.__setattr__(self, "victim_uids", frozenset(p.uid for unit in self.victims for p in unit.pods))

    @property
    def holds_off(self) -> int | None:
        """The priority up to which a draining or preempting reservation keeps capacity (None: admitted,
        kept from everyone)."""
        return None if self.purpose is Purpose.ADMITTED else self.priority

    def using(self, node: str, requests: Mapping[str, int]) -> Reservation:
        """Less the slot a member placed on ``node`` takes (``consume_slot``)."""
        slots = list(self.slots)
        consume_slot(slots, node, requests)
        return self._with(slots)

    def plus(self, slots: Iterable[Slot]) -> Reservation:
        return self._with([*self.slots, *slots])

    def first(self, count: int) -> Reservation:
        return self._with(self.slots[:max(count, 0)])

    def _with(self, slots: Iterable[Slot]) -> Reservation:
        return Reservation(self.purpose, tuple(slots), self.since, self.priority, self.victims)


def _shut() -> threading.Lock:
    gate = threading.Lock()
    gate.acquire()
    return gate


@dataclass(eq=False, slots=True)
class Hold:
    """One bind request waiting at its gang's barrier. The thread serving the request waits (``wait``)
    until the ledger answers it (``answer``) or the release that picked it hands it its own Binding to
    make (``turn``): the Binding is made on the thread kube-scheduler's request already has, as a bind
    that is not held is. Either opens the hold's gate once (a plain lock: the waiting thread is woken by
    one release, not through an Event's condition)."""

    pod: PodRecord
    node: str
    answer_by: float = float("inf")  # answered with a retry by then (ledger clock): the caller's timeout less a margin
    releasing: bool = False          # picked by the release that binds the quorum
    result: str | None = None        # None while waiting; "" bound; otherwise the error to answer
    turn: Callable[[], str] | None = None  # set by its release: the Binding its waiting thread makes, and its answer
    _gate: threading.Lock = field(default_factory=_shut, repr=False)

    def answer(self, result: str) -> None:
        self.result = result
        self._open()

    def take_turn(self, turn: Callable[[], str]) -> None:
        """The release hands the waiting thread its member's Binding (``turn`` returns the answer)."""
        self.turn = turn
        self._open()

    def wait(self, timeout: float) -> bool:
        """Whether it was answered or given its turn within ``timeout`` seconds."""
        if not self._gate.acquire(timeout=max(timeout, 0.0)):
            return False
        self._open()  # open for good, as an Event stays set
        return True

    @property
    def answered(self) -> bool:
        return self.result is not None

    def _open(self) -> None:
        with contextlib.suppress(RuntimeError):  # opened already (answered again after its turn)
            self._gate.release()


@dataclass(slots=True)
class Attempt:
    """One attempt to place the gang: started by its admission or its first hold, ended (reset whole)
    when it completes, times out or is planned again. Changed by admission, the barrier and the bind mode."""

    deadline: float | None = None    # it times out then (moved by each member new to the attempt)
    held_ever: set[str] = field(default_factory=set)  # uids held at the barrier in this attempt
    domain: Domain | None = None     # admitted: the topology domain its reservation is in
    offered: set[str] = field(default_factory=set)  # reserved nodes kube-scheduler offered its members
    filters_seen: int = 0            # member filter requests seen while admitted
    claims: dict[str, tuple[str, float]] = field(default_factory=dict)  # filter-gated: uid -> (node, when sent)
    bound_seen: int = 0              # filter-gated: members bound as last counted


@dataclass(slots=True)
class Plans:
    """What admission remembers of its plans, so an unchanged gang is not planned again. Changed by
    admission (and the topology constraint also when ``explain`` or the domain check reads it)."""

    failed: Verdict | None = None            # the wait verdict of the last plan that did not fit
    failed_inputs: tuple[object, ...] = ()   # (mirror.generation, needed, members, ...) it was made for
    never_fits: Verdict | None = None        # the gang can never fit the cluster
    never_fits_checked: int = -1             # mirror.node_set_generation of that check
    never_fits_inputs: tuple[object, ...] = ()  # the member uids and the constraint it checked
    constraint: TopologyConstraint = NONE    # the topology constraint when last planned or read
    constraint_known: bool = False
    other_domains: tuple[DomainReport, ...] = ()  # the last plan's best other domains and what they lack
    avoid: frozenset[str] = frozenset()      # reserved nodes never offered or never bound, until one succeeds


@dataclass(slots=True)
class Turn:
    """The gang's place in the admission order. Changed by the queue."""

    waiting_since: float | None = None  # when it was first complete and waiting (kept until it completes)
    priority: int = 0
    problem: str = ""                   # why its order settings were not taken as given ("": they were)
    problem_told: str = ""              # the problem last told in an Event
    drain_after: float = 0.0            # no new draining reservation before then (one that did not help rests)


@dataclass(slots=True)
class Preemptions:
    """What preemption remembers of the gang's victim searches. Changed by preemption."""

    note: str = ""                      # why its last victim search found no victims ("": none tried, or found)
    searched: tuple[int, float] | None = None  # (mirror.generation, when) of its last victim search
    after: float = 0.0                  # no new preemption before then (after failed or fruitless ones)
    fruitless: int = 0                  # preemptions in a row whose place it did not take


@dataclass(eq=False, slots=True)
class GangRecord:
    """One gang: its policy, reservation, holds, attempt, back-off, plans, place in the order, preemptions."""

    key: GangKey
    policy: GangPolicy                  # as last read from its group (admission, the policy changes)
    reservation: Reservation | None = None  # the apply step only
    holds: dict[str, Hold] = field(default_factory=dict)  # by pod uid; the apply step only
    attempt: Attempt = field(default_factory=Attempt)
    backoff_until: float = 0.0          # expiry: no admission before then
    timeouts: int = 0                   # expiry: attempts timed out in a row
    woken_after_backoff: bool = True    # expiry: its members were woken when the back-off ended
    plans: Plans = field(default_factory=Plans)
    turn: Turn = field(default_factory=Turn)
    preemptions: Preemptions = field(default_factory=Preemptions)
    completed: int = 0                  # the barrier or the bind mode: attempts that completed
    last_message: str = ""              # the last thing said about it (explain's "Waiting")
    name: str = field(init=False, default="")  # str(key): the queue's tie-break, formatted once

    def __post_init__(self) -> None:
        self.name = str(self.key)

    @property
    def admitted(self) -> bool:
        return self.reservation is not None and self.reservation.purpose is Purpose.ADMITTED

    @property
    def draining(self) -> bool:
        return self.reservation is not None and self.reservation.purpose is Purpose.DRAINING

    @property
    def preempting(self) -> bool:
        return self.reservation is not None and self.reservation.purpose is Purpose.PREEMPTING

    @property
    def reserved(self) -> int:
        """How many members it holds places for."""
        return len(self.reservation.slots) if self.reservation is not None else 0

    def waiting(self) -> list[Hold]:
        """The holds still waiting (not picked by a release)."""
        return [hold for hold in self.holds.values() if not hold.releasing]

    @property
    def settled(self) -> bool:
        """Nothing to do until a request comes: nothing reserved or held, no deadline, not waiting its
        turn, no back-off to wake from, no timed-out attempt still open."""
        return (not self.holds and self.reservation is None and self.attempt.deadline is None
                and self.turn.waiting_since is None and self.woken_after_backoff and not self.timeouts)

"""GangState and Hold: what the ledger keeps per gang and per held bind (plain data, no behaviour).

Owns: the fields only. Must not: decide anything, lock or call out: the ledger's layers (``book``,
``expiry``, ``queue``, ``preempting``, ``gated``, ``ledger``) read and change these under the mirror's lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from extender.cluster.model import NONE, GangKey, GangPolicy, PodRecord, TopologyConstraint, Verdict
from extender.gangs.topology import Domain, DomainReport


@dataclass(eq=False, slots=True)
class Hold:
    """One bind request waiting at a gang's barrier."""

    pod: PodRecord
    node: str
    answer_by: float = float("inf")  # answered with a retry by then (ledger clock): the caller's timeout less a margin
    done: threading.Event = field(default_factory=threading.Event)
    result: str | None = None  # None while waiting; "" bound; otherwise the error to answer
    releasing: bool = False    # picked by the thread that completes the quorum


@dataclass(slots=True)
class GangState:
    gang: GangKey
    policy: GangPolicy
    admitted_at: float | None = None  # while admitted, the mirror keeps the slots it reserves
    holds: dict[str, Hold] = field(default_factory=dict)
    deadline: float | None = None
    backoff_until: float = 0.0
    timeouts: int = 0
    completed: int = 0
    last_message: str = ""
    never_fits: Verdict | None = None
    never_fits_checked: int = -1  # mirror.node_set_generation of that check
    woken_after_backoff: bool = True
    never_fits_members: tuple[object, ...] = ()  # uids of the members that check planned, and the constraint
    failed_plan: Verdict | None = None  # the wait verdict of the last admission plan that did not fit
    failed_plan_inputs: tuple[object, ...] = ()  # (mirror.generation, needed, members) it was planned for
    held_ever: set[str] = field(default_factory=set)  # uids held at the barrier in this attempt
    constraint: TopologyConstraint = NONE  # the gang's topology constraint when it was last planned
    constraint_known: bool = False  # ``constraint`` was read (planned, or read for ``domain_of``)
    domain: Domain | None = None  # while admitted: the topology domain its reservation is in
    other_domains: tuple[DomainReport, ...] = ()  # the last plan's best other domains and what they lack
    offered: set[str] = field(default_factory=set)  # reserved nodes kube-scheduler offered in this attempt
    filters_seen: int = 0  # member filter requests in this attempt
    avoid: frozenset[str] = frozenset()  # reserved nodes never offered in timed-out attempts, until one succeeds
    # the admission order (``queue``)
    waiting_since: float | None = None  # when the gang was first complete and waiting (kept until it completes)
    priority: int = 0  # its place in the order: the group's priority, else its members'
    order_problem: str = ""  # why its order settings were not taken as given ("" : they were)
    order_problem_told: str = ""  # the problem last told in an Event
    drain: str = ""  # "draining" or "preempting": capacity on its plan's nodes is reserved for it as it frees
    drain_since: float | None = None
    victims: frozenset[str] = frozenset()  # while preempting: the uids of the pods being evicted for it
    preempt_note: str = ""  # why its last victim search found no victims ("": none tried, or it found some)
    # the filter-gated mode (``gated``)
    claims: dict[str, tuple[str, float]] = field(default_factory=dict)  # member uid -> (reserved node its filter
    # steers it to, when it was last sent there)
    bound_seen: int = 0  # members bound in this attempt as last counted (more: progress, the deadline moves)
    name: str = field(init=False, default="")  # str(gang), the queue's tie-break, formatted once

    def __post_init__(self) -> None:
        self.name = str(self.gang)

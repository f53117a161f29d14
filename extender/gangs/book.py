"""GangBook: the state of every gang the ledger enforces, and the steps every part of it shares (no I/O).

Owns: per gang a ``GangState`` (admitted or not, held binds, the attempt's deadline, back-off, cached
verdicts, topology domain, the last reason it waited); the pods to wake when capacity frees up or their
gang is admitted; the counters; the callbacks that tell users (Events, group status, wake-ups), handed
values only; and the steps admission, the barrier and the clock all take: answering a hold, recycling
holds, dropping an admission, and the checks a quorum must pass before it is bound. Must not: call
the API server or block. The ledger is three layers, one class each: this book, the clock over it
(``expiry``: deadlines, back-off, policy changes) and the ledger over that (``ledger``: admission and
the bind barrier). All share the mirror's lock: a gang decision and the capacity it was based on are
one consistent step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from extender.cluster.fit import placement_failure, shortfall
from extender.cluster.mirror import ClusterMirror
from extender.cluster.model import (
    NONE,
    GangKey,
    GangPhase,
    GangPolicy,
    GangStatus,
    NodeRecord,
    Parsed,
    PodRecord,
    TopologyConstraint,
    Verdict,
)
from extender.cluster.quantity import Resources, describe
from extender.cluster.records import pod_placement
from extender.cluster.topology import merge
from extender.gangs import planner
from extender.gangs.state import GangState, Hold
from extender.gangs.topology import Domain

log = logging.getLogger(__name__)

MAX_BLOCKED = 100_000  # the most pods remembered to wake (blocked, rejected by a gang rule, approved)


@dataclass(frozen=True, slots=True)
class Release:
    """A complete quorum to bind now: its holds are marked releasing; report the outcome with
    ``GangLedger.released``."""

    gang: GangKey
    holds: list[Hold]


class GangBook:
    """Gang states and the steps shared by admission, the barrier and the clock."""

    def __init__(self, mirror: ClusterMirror, *, timeout_seconds: float, backoff_seconds: float,
                 max_backoff_seconds: float = 300.0, clock: Callable[[], float] = time.monotonic,
                 on_event: Callable[[list[PodRecord], str, str, str], None] | None = None,
                 on_wake: Callable[[list[PodRecord]], None] | None = None,
                 on_status: Callable[[GangKey, GangStatus], None] | None = None,
                 max_held_binds: int | None = None, hold_seconds: float = 29.0,
                 max_release_members: int | None = None, topology_levels: Sequence[str] = (),
                 levels_for: Callable[[TopologyConstraint], tuple[str, ...]] | None = None) -> None:
        self.mirror = mirror
        # Preferred fallback order, widest first: levels_for(constraint) (cluster.levels), else --topology-levels.
        self.topology_levels = tuple(topology_levels)
        self.levels_for = levels_for or (lambda _constraint: self.topology_levels)
        # The longest a bind may be held, counted from its request's arrival: kube-scheduler's
        # httpTimeout less a margin, so the answer (a release's Bindings included) reaches the caller
        # while it still waits. A gang's own timeout bounds its attempt, never one hold.
        self.hold_seconds = hold_seconds
        # The most members one release may have (its intent must fit on the Lease with leader election);
        # a gang needing more fails fast at admission instead of being admitted, held and never released.
        self.max_release_members = max_release_members
        self.lock = mirror.lock
        self.timeout_seconds = timeout_seconds
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.clock = clock
        self.on_event = on_event or (lambda pods, kind, reason, message: None)
        self.on_wake = on_wake or (lambda pods: None)
        self.on_status = on_status or (lambda gang, status: None)
        # Each bind held at a barrier occupies a worker thread: admitting more held-bind demand than
        # there are threads starves filter requests and times every gang out (a backlog of thousands
        # of interleaved gang members does exactly that). None: no limit.
        self.max_held_binds = max_held_binds
        self._gangs: dict[GangKey, GangState] = {}
        # The gangs that may have work for the clock or the queue (``_busy_states``): a subset of
        # ``_gangs`` kept so that per-request walks do not grow with every gang ever seen.
        self._busy: dict[GangKey, GangState] = {}
        self._verdicts: dict[GangKey, str] = {}  # last waiting message of gangs the ledger has no state for
        self._blocked: dict[str, PodRecord] = {}  # pods rejected until capacity frees up
        self._rejected: dict[GangKey, set[str]] = {}  # members a gang rule rejected: woken at admission
        self._approved: set[str] = set()  # members of a release a previous leader left open: bind at once
        self._swept_at = float("-inf")  # when sweep last walked every gang
        self._next_due = float("-inf")  # nothing a sweep acts on falls due earlier (``_due_by``)
        self._domain_nodes: dict[Domain, tuple[int, frozenset[str]]] = {}  # per node_set_generation
        self.counters = {"admitted": 0, "completed": 0, "timeouts": 0, "never_fits": 0, "bind_errors": 0,
                         "releases_resumed": 0, "holds_recycled": 0, "releases_aborted": 0}

    # ------------------------------------------------------------------------------- queries
    def state(self, gang: GangKey) -> GangState | None:
        with self.lock:
            return self._gangs.get(gang)

    def pending(self) -> bool:
        """Whether some pod still waits on this extender's own work: a bind held, a gang admitted or
        backing off, a rejected member or a pod blocked for capacity to wake up."""
        with self.lock:
            if self._blocked or any(self._rejected.values()):
                return True
            now = self.clock()
            return any(s.holds or s.admitted_at is not None or s.backoff_until > now for s in self._busy_states())

    def known_gangs(self) -> list[GangKey]:
        """Every gang the ledger has state or a waiting verdict for (the gangs whose explanation is
        published), in a stable order."""
        with self.lock:
            return sorted({*self._gangs, *self._verdicts}, key=str)

    def held_count(self) -> int:
        with self.lock:
            return sum(len(s.holds) for s in self._busy_states())

    def admitted_count(self) -> int:
        with self.lock:
            return sum(1 for s in self._busy_states() if s.admitted_at is not None)

    def gang_of(self, pod: PodRecord) -> tuple[GangKey | None, GangPolicy | None]:
        """(gang, policy) of a gang member; (gang, None) while its group definition is not seen yet;
        (None, None) for a pod of no gang or of a non-gang ("basic") group."""
        if pod.gang is None:
            return None, None
        exists, policy = self.mirror.gang_policy(pod.gang)
        if not exists and pod.link_policy is not None:
            exists, policy = True, pod.link_policy
        if exists and policy is None:
            return None, None
        return pod.gang, policy

    def timeout_for(self, policy: GangPolicy) -> float:
        return policy.timeout_seconds or self.timeout_seconds

    def placed(self, members: list[PodRecord], state: GangState | None) -> list[PodRecord]:
        """Members bound or being bound (a released quorum counts), not those waiting at the barrier."""
        waiting = {uid for uid, hold in state.holds.items() if not hold.releasing} if state else set()
        return [p for p in members if p.uid not in waiting and self.mirror.placement(p.uid)]

    @staticmethod
    def _waiting(state: GangState) -> list[Hold]:
        return [h for h in state.holds.values() if not h.releasing]

    # ------------------------------------------------------------------------ the busy gangs
    def _mark_busy(self, state: GangState) -> None:
        """``state`` now has work for the clock or the queue: called where a gang is admitted, gets a
        held bind or starts waiting its turn (every other unsettled state follows from one of those)."""
        self._busy[state.gang] = state

    @staticmethod
    def _settled(state: GangState) -> bool:
        """Nothing to do for the gang until a request comes: not admitted, nothing held, no deadline, not
        waiting its turn or draining, no back-off to wake from, no timed-out attempt still open."""
        return (not state.holds and state.admitted_at is None and state.deadline is None
                and state.waiting_since is None and state.woken_after_backoff and not state.timeouts
                and not state.drain)

    def _busy_states(self) -> list[GangState]:
        """The gangs that are not settled (settled and forgotten ones leave the set here)."""
        gone = [g for g, s in self._busy.items() if self._gangs.get(g) is not s or self._settled(s)]
        for gang in gone:
            del self._busy[gang]
        return list(self._busy.values())

    def _due_by(self, when: float) -> float:
        """Something a sweep acts on falls due at ``when`` (a deadline, a held bind's answer, the end of a
        back-off): a filter's sweep walks the gangs again once that time comes. Returns ``when``."""
        self._next_due = min(self._next_due, when)
        return when

    def _rebuild_busy(self) -> None:
        """Find the unsettled gangs among all (the full sweep's safety net for a mark missed)."""
        self._busy = {g: s for g, s in self._gangs.items() if not self._settled(s)}

    # -------------------------------------------------------------------- telling and waking
    def note_waiting(self, pod: PodRecord, verdict: Verdict) -> None:
        """A member was rejected by a gang rule: remember why (explain), tell its pod (a ``GangWaiting``
        Event, deduplicated by the recorder) and its group object (status, deduplicated by the writer)."""
        gang = pod.gang
        if gang is None:
            return
        with self.lock:
            rejected = self._rejected.setdefault(gang, set())
            if len(rejected) < MAX_BLOCKED:
                rejected.add(pod.uid)
            state = self._gangs.get(gang)
            if state is not None:
                state.last_message = verdict.message
            elif len(self._verdicts) < MAX_BLOCKED:
                self._verdicts[gang] = verdict.message
            self.on_event([pod], "Normal", "GangWaiting", verdict.message)
            self.on_status(gang, GangStatus(GangPhase.WAITING, verdict.message))

    def note_blocked(self, pod: PodRecord) -> None:
        """Remember a pod rejected for want of capacity, to wake it when capacity frees up."""
        with self.lock:
            if len(self._blocked) < MAX_BLOCKED:
                self._blocked[pod.uid] = pod

    def _capacity_freed(self) -> None:
        if self._blocked:
            self.on_wake(list(self._blocked.values()))
            self._blocked.clear()

    def _free_for(self, gang: GangKey) -> Callable[[NodeRecord], Resources]:
        return lambda node: self.mirror.free(node.name, gang)

    def _free_cpu_for(self, gang: GangKey) -> planner.FreeCpu:
        return planner.FreeCpu(self.mirror.free_cpu_by_node(gang),
                               lambda least: self.mirror.nodes_by_free_cpu(gang, least), self.mirror.nodes)

    # -------------------------------------------------------------------------- shared steps
    def _reset(self, state: GangState) -> None:
        had_reservation = state.admitted_at is not None or bool(self.mirror.reserved_count(state.gang))
        state.admitted_at = None
        state.deadline = None
        state.held_ever = set()
        state.domain = None
        state.claims, state.bound_seen = {}, 0
        self.mirror.reserve(state.gang, ())
        if had_reservation:
            self._capacity_freed()

    def _answer(self, state: GangState, hold: Hold, error: str) -> None:
        """Answer a held bind with ``error``: it is no longer held and its node no longer assumed."""
        hold.result = error
        self.mirror.forget(hold.pod.uid)
        del state.holds[hold.pod.uid]
        hold.done.set()

    def _recycle(self, state: GangState, holds: list[Hold], now: float, message: str = "") -> None:
        """Answer ``holds`` with a retry; their slots go back to the gang's reservation."""
        if not message:
            placed = len(self.placed(self.mirror.members(state.gang), state))
            held = len(self._waiting(state))
            last_new = (state.deadline or now) - self.timeout_for(state.policy)
            message = (f"gang {state.gang} is still gathering members ({placed + held}/{state.policy.min_count} "
                       f"placed, the last new one {max(now - last_new, 0.0):.0f}s ago): its held binds are answered "
                       "before kube-scheduler's httpTimeout; each keeps its reserved place and kube-scheduler "
                       "retries it")
        if state.admitted_at is not None:  # only an admitted gang holds a reservation
            self.mirror.reserve_more(state.gang, ((hold.node, hold.pod.requests) for hold in holds))
        for hold in holds:
            self._answer(state, hold, message)
        self.counters["holds_recycled"] += len(holds)
        log.info("%s", message)

    # ------------------------------------------------------------------------------ topology
    def constraint_of(self, policy: GangPolicy, members: Sequence[PodRecord]) -> Parsed:
        """The gang's effective topology constraint: its group object's and its members' merged."""
        if policy.topology is NONE and all(p.topology is NONE for p in members):
            return NONE  # the common case, without a merge per member
        return merge(policy.topology, [(p.name, p.topology) for p in members])

    def placed_nodes(self, members: Sequence[PodRecord]) -> list[NodeRecord]:
        """The nodes of the members bound or being bound (they pin a topology domain)."""
        nodes = (self.mirror.nodes.get(self.mirror.placement(p.uid)) for p in members)
        return [node for node in nodes if node is not None]

    def domain_of(self, gang: GangKey) -> Domain | None:
        """The domain of its *required* topology key that a gang must keep its members in: while
        admitted, that of its reservation; otherwise that of its placed members. None: no required
        key, or nothing pins a domain yet. (A preferred level narrower than the required key steers
        the reserved members; it never excludes a node.)"""
        with self.lock:
            state = self._gangs.get(gang)
            key = self._constraint_known(gang, state).required
            if not key:
                return None
            if state is not None and state.admitted_at is not None and state.domain is not None:
                within = state.domain.within(key)
                if within is not None:
                    return within
            value = self.mirror.member_label(gang, key)
            return None if value is None else Domain((key,), (value,))

    def _constraint_known(self, gang: GangKey, state: GangState | None) -> TopologyConstraint:
        """The gang's constraint as last planned; read from the mirror when this process has not planned
        the gang (a restart or a takeover): kept on its state, read again each time without one."""
        if state is not None and state.constraint_known:
            return state.constraint
        _, policy = self.mirror.gang_policy(gang)
        parsed = self.constraint_of(policy, self.mirror.members(gang)) if policy else NONE
        constraint = parsed if isinstance(parsed, TopologyConstraint) else NONE
        if state is not None:
            state.constraint, state.constraint_known = constraint, True
        return constraint

    def nodes_in(self, domain: Domain) -> frozenset[str]:
        """The names of the nodes in ``domain``, computed once per set of nodes and labels."""
        with self.lock:
            generation = self.mirror.node_set_generation
            known = self._domain_nodes.get(domain)
            if known is not None and known[0] == generation:
                return known[1]
            if len(self._domain_nodes) >= MAX_BLOCKED:
                self._domain_nodes.clear()
            names = frozenset(name for name, node in self.mirror.nodes.items() if domain.holds(node))
            self._domain_nodes[domain] = (generation, names)
            return names

    def _domain_error(self, gang: GangKey | None, node: NodeRecord) -> str:
        """Why ``node`` is outside the topology domain of ``gang`` ("" when it is inside or there is none)."""
        domain = self.domain_of(gang) if gang is not None else None
        if domain is None or domain.holds(node):
            return ""
        return f"node {node.name} is outside gang {gang}'s topology domain {domain}"

    # ------------------------------------------------------------------------ release checks
    def _may_release(self, state: GangState, waiting: list[Hold], now: float, arriving: Hold | None = None) -> bool:
        """Whether the complete quorum ``waiting`` may be bound now: every hold has time left (the
        overdue ones, never the bind ``arriving`` now, are answered with a retry and the gang waits for
        them) and every member still fits where it is held (otherwise the release is aborted: nothing
        is bound, the gang is planned again). Marks the holds ``releasing`` when it may."""
        overdue = [h for h in waiting if h is not arriving and now >= h.answer_by]
        if overdue:
            self._recycle(state, overdue, now)
            state.last_message = (f"quorum reached but {len(overdue)} hold(s) had no time left before "
                                  "kube-scheduler's timeout; waiting for them to come back")
            return False
        problem = self._release_problem(waiting)
        if problem:
            self._abort_release(state, waiting, problem)
            return False
        for held in waiting:
            held.releasing = True
        return True

    def _release_problem(self, holds: list[Hold]) -> str:
        """Why the quorum ``holds`` may not be bound now: a member whose node is gone, excludes it
        (taints, selector, affinity) or is over-committed as the mirror sees it now (every held member
        is already counted in its node's use); "" when all of them still fit."""
        for hold in holds:
            node = self.mirror.nodes.get(hold.node)
            if node is None:
                return f"member {hold.pod.namespace}/{hold.pod.name}: node {hold.node} no longer exists"
            reason = placement_failure(pod_placement(hold.pod), node) or self._domain_error(hold.pod.gang, node)
            if reason:
                return f"member {hold.pod.namespace}/{hold.pod.name} no longer fits node {hold.node}: {reason}"
            reason = self._overcommit(node, hold.pod.requests)
            if reason:
                return f"member {hold.pod.namespace}/{hold.pod.name}: node {hold.node} {reason}"
        return ""

    def _overcommit(self, node: NodeRecord, requests: Resources) -> str:
        """How ``node`` is over-committed, in a resource that ``requests`` asks for, by the pods placed
        or held on it; "" when it is not (a kubelet admits a pod on the resources it requests)."""
        used = self.mirror.used(node.name)
        for resource, wanted in requests.items():
            amount = used.get(resource, 0)
            if wanted > 0 and amount > node.allocatable.get(resource, 0):
                return (f"is over-committed in {resource} (placed and held {describe({resource: amount})}, "
                        f"allocatable {describe({resource: node.allocatable.get(resource, 0)})}): another binder "
                        "placed a pod there after this gang was admitted")
        return ""

    def _abort_release(self, state: GangState, waiting: list[Hold], problem: str) -> None:
        """Answer every hold of a quorum that may not be bound with a retry, drop the gang's admission
        so it is planned again against the cluster as it is now, and say why."""
        message = (f"gang {state.gang} was not released: {problem}; nothing of the gang was bound, its "
                   "reservation is dropped and it is planned again when kube-scheduler retries its members")
        for held in waiting:
            self._answer(state, held, message)
        self._reset(state)
        state.last_message = message
        self.counters["releases_aborted"] += 1
        log.warning("%s", message)
        self.on_event([h.pod for h in waiting], "Warning", "GangReleaseAborted", message)
        self.on_status(state.gang, GangStatus(GangPhase.WAITING, message, 0, state.policy.min_count))

    def _fit_error(self, pod: PodRecord, node: str, gang: GangKey | None) -> str:
        """Why ``pod`` cannot go to ``node`` now (unknown node; its taints, selector or affinity exclude
        the pod; not enough free room); "" if it can. The request is trusted for none of it."""
        record = self.mirror.nodes.get(node)
        if record is None:
            return f"node {node} is not known to the extender"
        reason = placement_failure(pod_placement(pod), record) or self._domain_error(gang, record)
        if reason:
            return f"pod {pod.namespace}/{pod.name} does not fit node {node}: {reason}"
        return self._room_error(pod, node, gang)

    def _room_error(self, pod: PodRecord, node: str, gang: GangKey | None) -> str:
        """Why ``pod`` has no room on known node ``node`` now; "" if it has."""
        free = self.mirror.free(node, gang, priority=pod.priority)
        lacking = shortfall(pod.requests, free)
        if lacking is None:
            return ""
        return (f"node {node} no longer has room for pod {pod.namespace}/{pod.name}: insufficient "
                f"{lacking} (needs {describe({lacking: pod.requests[lacking]})}, "
                f"free {describe({lacking: free.get(lacking, 0)})})")

"""GangLedger: the lifecycle of every gang this extender is enforcing (no I/O).

Owns: per gang, whether it is admitted (the slots it reserves are kept by the mirror), the bind requests held at
the barrier, the deadline of the current attempt, back-off after a timeout, the cached fail-fast
verdict, the verdict of the last admission plan that did not fit (reused while the capacity and the
members stay the same) and the last reason it waited; following gang policy changes (a 1.37 PodGroup
whose minCount is scaled down may be complete with the binds already held); what users are told
(Events and group status, handed to callbacks as values) and the facts ``explain`` shows. It applies
the pure rules of ``gang`` and records their effects in the mirror (reservations, assumed
placements). Must not: call the API server or block: the engine does the binding and the waiting,
outside the lock, and the callbacks only queue.

Thread safety: the ledger shares the mirror's lock, so a gang decision and the capacity it was based
on are one consistent step.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from extender.cluster.fit import placement_failure, shortfall
from extender.cluster.mirror import ClusterMirror
from extender.cluster.model import (
    PASS,
    Code,
    GangKey,
    GangPhase,
    GangPolicy,
    GangStatus,
    NodeRecord,
    PodRecord,
    Verdict,
)
from extender.cluster.quantity import CPU, Resources, describe
from extender.cluster.records import pod_placement
from extender.gangs import explanation, planner, rules


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
    admitted_at: float | None = None
    holds: dict[str, Hold] = field(default_factory=dict)
    deadline: float | None = None
    backoff_until: float = 0.0
    timeouts: int = 0
    completed: int = 0
    last_message: str = ""
    never_fits: Verdict | None = None
    never_fits_checked: int = -1  # mirror.node_set_generation of that check
    woken_after_backoff: bool = True
    never_fits_members: tuple[str, ...] = ()  # uids of the members that check planned
    failed_plan: Verdict | None = None  # the wait verdict of the last admission plan that did not fit
    failed_plan_inputs: tuple[object, ...] = ()  # (mirror.generation, needed, members) it was planned for
    held_ever: set[str] = field(default_factory=set)  # uids held at the barrier in this attempt


log = logging.getLogger(__name__)

MAX_BLOCKED = 100_000


class BindAction(enum.Enum):
    NOW = "now"          # bind at once (not a gang member, or the gang is already complete)
    WAIT = "wait"        # held: wait on the hold
    RELEASE = "release"  # this request completed the quorum: bind every hold in ``holds``
    REJECT = "reject"    # answer ``error``


@dataclass(frozen=True, slots=True)
class Release:
    """A complete quorum to bind now: its holds are marked releasing; report the outcome with
    ``GangLedger.released``."""

    gang: GangKey
    holds: list[Hold]


@dataclass(slots=True)
class BindDecision:
    action: BindAction
    hold: Hold | None = None
    holds: list[Hold] = field(default_factory=list)
    error: str = ""


class GangLedger:
    def __init__(self, mirror: ClusterMirror, *, timeout_seconds: float, backoff_seconds: float,
                 max_backoff_seconds: float = 300.0, clock: Callable[[], float] = time.monotonic,
                 on_event: Callable[[list[PodRecord], str, str, str], None] | None = None,
                 on_wake: Callable[[list[PodRecord]], None] | None = None,
                 on_status: Callable[[GangKey, GangStatus], None] | None = None,
                 max_held_binds: int | None = None, hold_seconds: float = 29.0,
                 max_release_members: int | None = None) -> None:
        self.mirror = mirror
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
        self._verdicts: dict[GangKey, str] = {}  # last waiting message of gangs the ledger has no state for
        self._blocked: dict[str, PodRecord] = {}  # pods rejected until capacity frees up
        self._rejected: dict[GangKey, set[str]] = {}  # members a gang rule rejected: woken at admission
        self._approved: set[str] = set()  # members of a release a previous leader left open: bind at once
        self._swept_at = float("-inf")  # when sweep last walked every gang
        self.counters = {"admitted": 0, "completed": 0, "timeouts": 0, "never_fits": 0, "bind_errors": 0,
                         "releases_resumed": 0, "holds_recycled": 0, "releases_aborted": 0}

    # ------------------------------------------------------------------------------------ queries
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
            return any(s.holds or s.admitted_at is not None or s.backoff_until > now for s in self._gangs.values())

    def held_count(self) -> int:
        with self.lock:
            return sum(len(s.holds) for s in self._gangs.values())

    def admitted_count(self) -> int:
        with self.lock:
            return sum(1 for s in self._gangs.values() if s.admitted_at is not None)

    def timeout_for(self, policy: GangPolicy) -> float:
        return policy.timeout_seconds or self.timeout_seconds

    def _placed(self, members: list[PodRecord], state: GangState | None) -> list[PodRecord]:
        """Members bound or being bound (a released quorum counts), not those waiting at the barrier."""
        waiting = {uid for uid, hold in state.holds.items() if not hold.releasing} if state else set()
        return [p for p in members if p.uid not in waiting and self.mirror.placement(p.uid)]

    @staticmethod
    def _waiting(state: GangState) -> list[Hold]:
        return [h for h in state.holds.values() if not h.releasing]

    # ---------------------------------------------------------------------------------- admission
    def admission(self, gang: GangKey, policy: GangPolicy, pod: PodRecord | None = None) -> Verdict:
        """Admit the gang if the rest of it fits; PASS for an admitted or complete gang.

        ``pod`` is the member being filtered: it is planned for even if the mirror has not seen it yet
        (the quorum gate counts it too).
        """
        with self.lock:
            now = self.clock()
            state = self._gangs.get(gang)
            if state is None:
                state = self._gangs[gang] = GangState(gang, policy)
            state.policy = policy
            if state.admitted_at is not None:
                return PASS  # checked first: admitted gangs' members are filtered often
            members = self.mirror.members(gang)
            if pod is not None and pod.gang == gang and not self.mirror.is_member(gang, pod.uid):
                members.append(pod)
            placed = self._placed(members, state)
            if len(placed) + len(self._waiting(state)) >= policy.min_count:
                return PASS  # complete: later members and replacements need no reservation
            if now < state.backoff_until:
                return Verdict(Code.WAIT_RESOLVABLE,
                               f"gang {gang} is backing off for {state.backoff_until - now:.0f}s after "
                               f"{state.timeouts} timeout(s) so other gangs can proceed")
            verdict = self._never_fits(state, members)
            if verdict is not None:
                return verdict
            needed = policy.min_count - len(placed) - len(self._waiting(state))
            verdict = self._barrier_room(gang, needed)
            if verdict is not None:
                state.last_message = verdict.message
                return verdict
            inputs = (self.mirror.generation, needed, tuple(members))
            if state.failed_plan is not None and state.failed_plan_inputs == inputs:
                state.last_message = state.failed_plan.message
                return state.failed_plan  # no capacity, member or count changed since it did not fit
            pending = [p for p in members if p.uid not in state.holds and not self.mirror.placement(p.uid)]
            chosen = planner.pick_for_reservation(pending, needed)
            result = planner.plan(chosen, self.mirror.nodes.values(), self._free_for(gang), self._free_cpu_for(gang))
            if not result.complete:
                verdict = rules.admission_wait(gang, result, needed)
                state.last_message = verdict.message
                state.failed_plan, state.failed_plan_inputs = verdict, inputs
                return verdict
            state.failed_plan, state.failed_plan_inputs = None, ()
            state.admitted_at = now
            state.deadline = now + self.timeout_for(policy)
            self.mirror.reserve(gang, result.slots)
            state.last_message = f"admitted: {needed} member(s) reserved on {len(result.per_node())} node(s)"
            self.counters["admitted"] += 1
            # Like the in-tree plugin activating siblings: members a gang rule rejected wait in the
            # scheduler's unschedulable pool; wake those (the others are still queued: no API write).
            rejected = self._rejected.pop(gang, set())
            self.on_wake([p for p in pending if p.uid in rejected])
            log.info("gang %s admitted: %s", gang, state.last_message)
            self.on_event(chosen, "Normal", "GangAdmitted",
                          f"gang {gang} admitted: capacity reserved for {needed} more member(s)")
            self.on_status(gang, GangStatus(GangPhase.SCHEDULING, state.last_message, len(placed), policy.min_count))
            return PASS

    def held_demand(self) -> int:
        """Binds that gangs may hold at once: held now, plus reserved members still to come."""
        with self.lock:
            return sum(len(self._waiting(s)) + (self.mirror.reserved_count(s.gang) if s.admitted_at is not None else 0)
                       for s in self._gangs.values())

    def _barrier_room(self, gang: GangKey, needed: int) -> Verdict | None:
        """None when the gang's ``needed`` held binds fit the thread budget beside gangs in flight."""
        most = self.max_release_members
        if most is not None and needed > most:
            return Verdict(Code.WAIT_UNRESOLVABLE,
                           f"gang {gang} would release {needed} members at once but a release written on the "
                           f"leader's Lease holds at most {most}: raise --release-intents-max-bytes")
        limit = self.max_held_binds
        if limit is None:
            return None
        if needed > limit:
            return Verdict(Code.WAIT_UNRESOLVABLE,
                           f"gang {gang} would hold {needed} binds at once but gang-extender can hold at most "
                           f"{limit}: raise --threads")
        in_flight = self.held_demand()
        if in_flight + needed > limit:
            return Verdict(Code.WAIT_RESOLVABLE,
                           f"waiting for a barrier slot for gang {gang}: gangs in flight may hold {in_flight} "
                           f"binds; {needed} more would exceed the limit of {limit} (--threads)")
        return None

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

    def _free_cpu_for(self, gang: GangKey) -> Callable[[NodeRecord], int]:
        free_cpu = self.mirror.free_cpu_by_node(gang)
        return lambda node: free_cpu[node.name]

    def _never_fits(self, state: GangState, members: list[PodRecord]) -> Verdict | None:
        generation = self.mirror.node_set_generation
        uids = tuple(p.uid for p in members)
        if state.never_fits_checked != generation or state.never_fits_members != uids:
            chosen = planner.pick_for_reservation(members, state.policy.min_count)
            result = planner.plan(chosen, self.mirror.nodes.values(), lambda node: node.allocatable,
                                lambda node: node.allocatable.get(CPU, 0))
            fresh = None if result.complete else rules.never_fits(
                state.gang, result, state.policy.min_count, len(self.mirror.nodes))
            if fresh is not None and state.never_fits is None:
                self.counters["never_fits"] += 1
                self.on_event(members, "Warning", "GangNeverFits", fresh.message)
            state.never_fits, state.never_fits_checked, state.never_fits_members = fresh, generation, uids
        if state.never_fits is not None:
            state.last_message = state.never_fits.message
        return state.never_fits

    # -------------------------------------------------------------------------------------- binds
    def on_bind(self, pod: PodRecord, node: str, policy: GangPolicy | None,
                arrival: float | None = None) -> BindDecision:
        """Decide what a bind request does; records the hold/assumption before returning.

        ``arrival`` is when the request reached the process (ledger clock; default now): a hold is
        answered by ``arrival + hold_seconds``, and a quorum is released only with every hold inside
        that bound and every member still fitting where it is held."""
        assert pod.gang is not None or policy is None
        with self.lock:
            existing = self._gangs.get(pod.gang) if pod.gang is not None and policy else None
            if existing is not None and pod.uid in existing.holds:
                return BindDecision(BindAction.REJECT, error=f"pod {pod.namespace}/{pod.name} is already "
                                    "waiting at its gang barrier")
            error = self._fit_error(pod, node, pod.gang if policy else None)
            if error:
                return BindDecision(BindAction.REJECT, error=error)
            if policy is None or pod.gang is None or pod.uid in self._approved:
                self._approved.discard(pod.uid)
                self.mirror.assume(pod.uid, node)
                return BindDecision(BindAction.NOW)
            state = existing or self._gangs.setdefault(pod.gang, GangState(pod.gang, policy))
            members = self.mirror.members(pod.gang)
            placed = self._placed(members, state)
            if len(placed) >= policy.min_count:
                self.mirror.assume(pod.uid, node)
                return BindDecision(BindAction.NOW)
            now = self.clock()
            hold = Hold(pod, node, answer_by=(now if arrival is None else arrival) + self.hold_seconds)
            if hold.answer_by <= now:
                return BindDecision(BindAction.REJECT, error=(
                    f"bind of pod {pod.namespace}/{pod.name} reached gang-extender too late to be held "
                    f"(kube-scheduler's httpTimeout less the answer margin had passed); kube-scheduler retries it"))
            state.holds[pod.uid] = hold
            waiting = self._waiting(state)
            if pod.uid not in state.held_ever:
                # A member new to this attempt reached the barrier: the gang is progressing, so its
                # deadline moves (the first hold starts the clock). A member coming back after its
                # hold was recycled is not progress.
                state.held_ever.add(pod.uid)
                state.deadline = now + self.timeout_for(policy)
            self.mirror.use_reservation(pod.gang, node, pod.requests)
            self.mirror.assume(pod.uid, node)
            if len(placed) + len(waiting) >= policy.min_count:
                return self._release_or_wait(state, hold, waiting, now)
            state.last_message = (f"holding {len(waiting)} bind(s); {len(placed) + len(waiting)}/"
                                  f"{policy.min_count} members placed")
            return BindDecision(BindAction.WAIT, hold=hold)

    def _release_or_wait(self, state: GangState, hold: Hold, waiting: list[Hold], now: float) -> BindDecision:
        """The quorum is complete with ``hold``: release it, or wait for overdue holds to come back, or
        (the release aborted, ``hold`` answered) reject it."""
        if self._may_release(state, waiting, now, arriving=hold):
            return BindDecision(BindAction.RELEASE, hold=hold, holds=waiting)
        if hold.done.is_set():
            return BindDecision(BindAction.REJECT, error=hold.result or "")
        return BindDecision(BindAction.WAIT, hold=hold)

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
            reason = placement_failure(pod_placement(hold.pod), node)
            if reason is not None:
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
        reason = placement_failure(pod_placement(pod), record)
        if reason is not None:
            return f"pod {pod.namespace}/{pod.name} does not fit node {node}: {reason}"
        return self._room_error(pod, node, gang)

    def _room_error(self, pod: PodRecord, node: str, gang: GangKey | None) -> str:
        """Why ``pod`` has no room on known node ``node`` now; "" if it has."""
        free = self.mirror.free(node, gang)
        lacking = shortfall(pod.requests, free)
        if lacking is None:
            return ""
        return (f"node {node} no longer has room for pod {pod.namespace}/{pod.name}: insufficient "
                f"{lacking} (needs {describe({lacking: pod.requests[lacking]})}, "
                f"free {describe({lacking: free.get(lacking, 0)})})")

    def resume(self, pod: PodRecord, node: str) -> str:
        """A member of a release that a crash interrupted (the release journal names the node
        kube-scheduler chose): "" when it may be bound there now (recorded as assumed, like an immediate
        bind; report the outcome with ``bound``), else why not."""
        with self.lock:
            if pod.node_name:
                return f"pod {pod.namespace}/{pod.name} is already bound to {pod.node_name}"
            error = self._fit_error(pod, node, pod.gang)
            if not error:
                self.mirror.assume(pod.uid, node)
            return error

    def approve(self, gang: str, pods: list[PodRecord]) -> None:
        """Members of a release that a previous leader started and did not finish (its intent on the
        Lease): each passes the barrier at its next bind request, to whatever node fits it then."""
        if not pods:
            return
        with self.lock:
            for pod in pods[:max(MAX_BLOCKED - len(self._approved), 0)]:
                self._approved.add(pod.uid)
            self.counters["releases_resumed"] += 1
        log.info("gang %s: release left open by the previous leader: %d member(s) pass the barrier at their next "
                 "bind", gang, len(pods))
        self.on_event(pods, "Normal", "GangReleaseResumed",
                      f"gang {gang}: the previous gang-extender leader was binding this gang's quorum when it "
                      f"stopped; the remaining {len(pods)} member(s) bind as soon as kube-scheduler retries them")

    def unrelease(self, gang: GangKey, holds: list[Hold], message: str) -> None:
        """A release that may not start (its intent could not be written down): answer its holds with a
        retry; they keep their reserved place."""
        with self.lock:
            for hold in holds:
                hold.releasing = False
            state = self._gangs.get(gang)
            if state is None:
                return
            self._recycle(state, [h for h in holds if h.pod.uid in state.holds], self.clock(), message)

    def resumed(self, gang: str, bound: list[PodRecord]) -> None:
        """Members of an interrupted release were bound after a restart: count it and tell them."""
        if not bound:
            return
        with self.lock:
            self.counters["releases_resumed"] += 1
        log.info("gang %s: release interrupted by a restart finished: %d member(s) bound", gang, len(bound))
        self.on_event(bound, "Normal", "GangReleaseResumed",
                      f"gang {gang}: gang-extender restarted while binding this gang's quorum; it bound "
                      f"the remaining {len(bound)} member(s) to the nodes kube-scheduler had chosen")

    def bound(self, pod: PodRecord, error: str) -> None:
        """Outcome of an immediate bind."""
        if error:
            with self.lock:
                self.counters["bind_errors"] += 1
                self.mirror.forget(pod.uid)

    def released(self, gang: GangKey, outcomes: list[tuple[Hold, str]]) -> None:
        """Outcome of binding a released quorum: answer every hold, release the reservation."""
        with self.lock:
            state = self._gangs.get(gang)
            for hold, error in outcomes:
                hold.result = error
                if error:
                    self.counters["bind_errors"] += 1
                    self.mirror.forget(hold.pod.uid)
                if state is not None:
                    state.holds.pop(hold.pod.uid, None)
                hold.done.set()
            failed = [hold for hold, error in outcomes if error]
            if state is not None and not state.holds and failed:
                # A Binding cannot be undone: the members that failed keep their places reserved, so
                # they come back to the same room (nothing else may take it) and complete the gang.
                now = self.clock()
                state.admitted_at = state.admitted_at if state.admitted_at is not None else now
                state.deadline = now + self.timeout_for(state.policy)
                state.held_ever = set()
                self.mirror.reserve_more(gang, ((h.node, h.pod.requests) for h in failed))
                state.last_message = (f"quorum released but {len(failed)} Binding(s) failed: their places stay "
                                      "reserved until kube-scheduler retries them")
            elif state is not None and not state.holds:
                self._reset(state)
                state.timeouts = 0
                state.completed += 1
                state.last_message = "quorum reached: members bound"
                self.counters["completed"] += 1
            bound = [h.pod for h, error in outcomes if not error]
            log.info("gang %s released at quorum: %d bound, %d failed", gang, len(bound), len(outcomes) - len(bound))
            for hold, error in outcomes:  # a Binding cannot be undone: the bound stay, the failed are retried
                if error:
                    self.on_event([hold.pod], "Warning", "GangBindFailed",
                                  f"gang {gang}: {error}; members already bound stay bound (a Binding cannot be "
                                  "undone) and kube-scheduler retries this one")
            if bound:
                message = f"gang {gang}: {len(bound)} member(s) bound together at quorum"
                self.on_event(bound, "Normal", "GangBound", message)
                if state is not None and not state.holds:
                    placed = len(self._placed(self.mirror.members(gang), state))
                    self.on_status(gang, GangStatus(GangPhase.SCHEDULED, message, placed, state.policy.min_count))

    def _reset(self, state: GangState) -> None:
        had_reservation = state.admitted_at is not None or bool(self.mirror.reserved_count(state.gang))
        state.admitted_at = None
        state.deadline = None
        state.held_ever = set()
        self.mirror.reserve(state.gang, ())
        if had_reservation:
            self._capacity_freed()

    # ------------------------------------------------------------------------------------ expiry
    def due(self, gang: GangKey) -> float | None:
        """When ``expire_if_due`` next has something to do for the gang (None: nothing pending)."""
        with self.lock:
            state = self._gangs.get(gang)
            return self._due(state) if state is not None else None

    def expire(self, gang: GangKey) -> float | None:
        """``expire_if_due``, then ``due``: one step of a held bind's wait."""
        with self.lock:
            self.expire_if_due(gang)
            return self.due(gang)

    def _due(self, state: GangState) -> float | None:
        times = [hold.answer_by for hold in self._waiting(state)]
        if state.deadline is not None:
            times.append(state.deadline)
        return min(times, default=None)

    def expire_if_due(self, gang: GangKey) -> None:
        """Time out the gang's current attempt if its deadline passed, or recycle holds that waited as
        long as one may while the gang keeps progressing (called by waiters and sweep).

        The deadline is ``timeout`` after the last member new to the attempt reached the barrier (or
        after admission), so a gang whose members keep arriving is not timed out however long the
        scheduler takes to reach all of them. A single bind is never held past its ``answer_by``
        (kube-scheduler's ``httpTimeout`` less a margin, from its arrival): when one hold reaches it,
        every hold of the gang is answered with a retry at once, so they come back together (after
        kube-scheduler's back-off) rather than one by one; the gang keeps its reservation, so the
        members come back to the same capacity.
        """
        with self.lock:
            state = self._gangs.get(gang)
            if state is None:
                return
            now = self.clock()
            waiting = self._waiting(state)
            if not waiting and state.holds:
                return  # a released quorum is being bound; its outcome decides, not the clock
            if state.deadline is None or now < state.deadline:
                if any(now >= h.answer_by for h in waiting):
                    self._recycle(state, waiting, now)
                return
            message = (f"gang {gang} timed out after {self.timeout_for(state.policy):g}s with "
                       f"{len(waiting)} member(s) held of {state.policy.min_count} needed; "
                       "released its reservation and backing off")
            for hold in waiting:
                self._answer(state, hold, message)
            self._reset(state)
            state.timeouts += 1
            backoff = min(self.backoff_seconds * 2 ** (state.timeouts - 1), self.max_backoff_seconds)
            state.backoff_until = self.clock() + backoff
            state.woken_after_backoff = False
            state.last_message = message
            self.counters["timeouts"] += 1
            log.warning("%s", message)
            self.on_event(self.mirror.members(gang), "Warning", "GangTimeout", message)
            self.on_status(gang, GangStatus(GangPhase.WAITING, message, 0, state.policy.min_count))

    def _answer(self, state: GangState, hold: Hold, error: str) -> None:
        """Answer a held bind with ``error``: it is no longer held and its node no longer assumed."""
        hold.result = error
        self.mirror.forget(hold.pod.uid)
        del state.holds[hold.pod.uid]
        hold.done.set()

    def _recycle(self, state: GangState, holds: list[Hold], now: float, message: str = "") -> None:
        """Answer ``holds`` with a retry; their slots go back to the gang's reservation."""
        if not message:
            placed = len(self._placed(self.mirror.members(state.gang), state))
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

    def answer_all_held(self, message: str) -> int:
        """Answer every bind held at any barrier with ``message`` (a retry that keeps its place): the
        extender cannot stand behind a release while its view of the cluster is stale. Returns how many."""
        with self.lock:
            now, answered = self.clock(), 0
            for state in self._gangs.values():
                waiting = self._waiting(state)
                if waiting:
                    self._recycle(state, waiting, now, message)
                    answered += len(waiting)
            return answered

    def sweep(self, min_interval: float = 0.0) -> list[Release]:
        """Follow policy changes, expire overdue gangs and forget gangs with no members left. Returns
        the quorums a policy change completed: each is marked releasing, and the caller must bind it
        and report with ``released`` (``Engine.sweep`` does).

        The walk over every gang is skipped if one ran less than ``min_interval`` ago: a filter
        sweeps with a short interval, as walking hundreds of admitted gangs on every request was a
        third of the filter's time in a backlog (held binds expire themselves at their deadline, and
        the background tick sweeps every second in any case)."""
        with self.lock:
            releases = self._follow_policy_changes()
            now = self.clock()
            if now - self._swept_at < min_interval:
                return releases
            self._swept_at = now
            for gang, state in list(self._gangs.items()):
                due = self._due(state)
                if due is not None and now >= due:
                    self.expire_if_due(gang)
                if not state.woken_after_backoff and now >= state.backoff_until:
                    state.woken_after_backoff = True
                    self.on_wake([p for p in self.mirror.members(gang) if not self.mirror.placement(p.uid)])
                if not state.holds and not self.mirror.member_count(gang):
                    self._reset(state)
                    del self._gangs[gang]
            if self._verdicts:
                for gang in [g for g in self._verdicts if g in self._gangs or not self.mirror.member_count(g)]:
                    del self._verdicts[gang]
            for gang in [g for g in self._rejected if not self.mirror.member_count(g)]:
                del self._rejected[gang]
            return releases

    def _follow_policy_changes(self) -> list[Release]:
        """Re-evaluate gangs whose group changed its policy (1.37 PodGroups: ``minCount`` is mutable).

        Waiting members are woken (the quorum gate may pass now). A gang whose held + placed members
        reach the new ``minCount`` is released at once, with no bind request needed to notice it. An
        admitted gang keeps only the reservation slots it still needs; one that needs more than it
        reserved and holds nothing yet is re-planned at its next filter.
        """
        changed = self.mirror.take_policy_changes()
        releases: list[Release] = []
        if not changed:
            return releases
        gangs = {g for g in self.mirror.gangs() if g.group in changed} | {g for g in self._gangs if g.group in changed}
        for gang in sorted(gangs):
            members = self.mirror.members(gang)
            self.on_wake([p for p in members if not self.mirror.placement(p.uid)])
            state = self._gangs.get(gang)
            if state is None:
                continue
            _, policy = self.mirror.gang_policy(gang)
            waiting = self._waiting(state)
            placed = self._placed(members, state)
            log.info("gang %s: policy changed from minCount %d to %s", gang, state.policy.min_count,
                     policy.min_count if policy else "none (not a gang)")
            state.never_fits_checked = -1
            if policy is None:  # no longer a gang (or gone): nothing may stay held
                if waiting and self._release_now(state, waiting):
                    releases.append(Release(gang, waiting))
                continue
            state.policy = policy
            if waiting and len(placed) + len(waiting) >= policy.min_count:
                if self._release_now(state, waiting):
                    releases.append(Release(gang, waiting))
            elif state.admitted_at is not None:
                needed = policy.min_count - len(placed) - len(waiting)
                reserved = self.mirror.reserved_count(gang)
                if needed < reserved:
                    self.mirror.trim_reservation(gang, needed)
                elif needed > reserved and not waiting:
                    self._reset(state)
        return releases

    def _release_now(self, state: GangState, waiting: list[Hold]) -> bool:
        """Whether the quorum ``waiting`` that a policy change completed may be bound now (otherwise the
        next bind request completes it, or the gang is planned again)."""
        if not self._may_release(state, waiting, self.clock()):
            return False
        state.last_message = f"quorum reached after a policy change: binding {len(waiting)} held member(s)"
        return True

    # ------------------------------------------------------------------------------------ explain
    def facts(self, gang: GangKey) -> explanation.GangFacts:
        """Everything known about ``gang``, copied under the lock for ``explanation.explain``."""
        with self.lock:
            exists, policy = self.mirror.gang_policy(gang)
            members = tuple(self.mirror.members(gang))
            state = self._gangs.get(gang)
            meta = self.mirror.group_meta(gang.group)
            now = self.clock()
            placements = {p.uid: node for p in members if (node := self.mirror.placement(p.uid))}
            if state is None:
                message = self._verdicts.get(gang, "")
                return explanation.GangFacts(gang, exists, policy, members, placements, frozenset(), {},
                                       timeout_seconds=self.timeout_for(policy) if policy else 0.0,
                                       message=message, api_version=meta.api_version if meta else "",
                                       template=meta.template if meta else "")
            waiting = {h.pod.uid for h in self._waiting(state)}
            return explanation.GangFacts(
                gang, exists, policy, members, placements, frozenset(waiting), self.mirror.reservation(gang),
                admitted=state.admitted_at is not None, timeout_seconds=self.timeout_for(state.policy),
                deadline_in=None if state.deadline is None else state.deadline - now,
                backoff_in=max(state.backoff_until - now, 0.0), timeouts=state.timeouts, completed=state.completed,
                message=state.last_message, never_fits=state.never_fits.message if state.never_fits else "",
                api_version=meta.api_version if meta else "", template=meta.template if meta else "")

    def explain(self, gang: GangKey) -> dict[str, Any]:
        """The explanation of one gang (``GET /explain``), computed under the lock."""
        with self.lock:
            facts = self.facts(gang)
            return explanation.explain(facts, list(self.mirror.nodes.values()), self._free_for(gang))

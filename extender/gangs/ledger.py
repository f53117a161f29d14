"""GangLedger: the one entry to gang scheduling, a façade over composed parts (no I/O).

Owns: building the parts once and wiring them (``registry`` and its records, ``placement``, ``attempts``,
the bind ``mode`` chosen when the app is built, ``admission``, ``barrier``, ``expiry``, ``policies``,
``queue``, ``preemption``, the read-only ``view``); the order in which they are asked (the sweep is one
explicit sequence; a filter's gang half is one call, ``filter_gate``); and applying every decision they
return, at once, through the registry's one apply step. Must not: decide anything itself, call the API
server or block: the engine binds and waits, outside the lock, and the callbacks only queue.

Thread safety: the ledger shares the mirror's lock, so a gang decision and the capacity it was based on
are one consistent step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from extender.cluster.facts import PodFacts
from extender.cluster.mirror import ClusterMirror
from extender.cluster.records import pod_placement
from extender.cluster.verdicts import FIT_RESERVED, bounded, check_node_names, node_verdict
from extender.gangs import bind_modes
from extender.gangs.admission import Admission
from extender.gangs.attempts import Attempts
from extender.gangs.barrier import Barrier, BindAction, BindDecision
from extender.gangs.domains import Domain
from extender.gangs.effects import Decision, Effect, Publish, Release, Reserve, Tell, Ungate, Wake, Work
from extender.gangs.expiry import Expiry
from extender.gangs.latency import ReleaseLatency
from extender.gangs.placement import GangPlacement
from extender.gangs.policies import PolicyChanges
from extender.gangs.preemption import Budgets, GangPreemption
from extender.gangs.queue import GangQueue
from extender.gangs.record import GangRecord, Hold, Reservation
from extender.gangs.registry import GangRegistry, OnEvent, OnStatus, OnWake
from extender.gangs.settings import GangSettings
from extender.gangs.state import LedgerState
from extender.gangs.victims import VictimUnit
from extender.gangs.view import LedgerView
from extender.gangs.waitlist import Waitlist
from extender.model import messages
from extender.model.cluster import PodRecord
from extender.model.gang import PASS, Code, GangKey, GangPhase, GangPolicy, GangStatus, Verdict

__all__ = ["BindAction", "BindDecision", "FilterGate", "GangLedger", "Release", "Work"]

BindModeFactory = Callable[[GangRegistry, GangPlacement, Attempts, GangSettings, Callable[[], float]],
                           bind_modes.BindMode]


@dataclass(frozen=True, slots=True)
class FilterGate:
    """A filter's gang half: the pod's gang and whether it may be placed now; for a member of a gang with
    a reservation, the verdicts of the requested nodes that hold part of it (the reservation counted as
    room) and the nodes it is steered to (when any: the answer, within ``allowed``); the node names of
    the gang's topology domain (None: any node)."""

    gang: GangKey | None
    verdict: Verdict
    own: dict[str, str] = field(default_factory=dict)
    steered: list[str] = field(default_factory=list)
    domain: Domain | None = None
    allowed: frozenset[str] | None = None
    missing: tuple[GangKey, int] | None = None  # (gang, minCount): the engine may wait for the members (may_wait)


class GangLedger:
    """Admission, the bind barrier, expiry, the order and preemption, composed."""

    def __init__(self, mirror: ClusterMirror, settings: GangSettings | None = None, *,
                 clock: Callable[[], float] = time.monotonic, on_event: OnEvent | None = None,
                 on_wake: OnWake | None = None, on_status: OnStatus | None = None,
                 bind_mode: BindModeFactory = bind_modes.Barrier, waitlist: Waitlist | None = None,
                 serves: Callable[[PodRecord], bool] | None = None, preemption: bool = False,
                 budgets: Budgets | None = None, eviction_room: Callable[[int], bool] | None = None,
                 preemption_problem: Callable[[], str] | None = None, on_ungate: OnWake | None = None) -> None:
        """``bind_mode``: ``bind_modes.Barrier`` (gang-extender binds) or ``bind_modes.FilterGated``
        (another binder does). ``waitlist``: the pods to wake when capacity frees, shared with the
        engine (made here if not given). ``serves``: whether a pod is scheduled through this extender.
        ``preemption``, ``budgets``, ``eviction_room``, ``preemption_problem``: ``GangPreemption``'s.
        ``on_ungate``: removes the quorum gate from pods (``Ungate``)."""
        self.mirror = mirror
        self.lock = mirror.lock
        self.settings = settings = settings or GangSettings()
        self.clock = clock
        self.waitlist = waitlist = waitlist or Waitlist()
        self.registry = registry = GangRegistry(mirror, waitlist, on_event=on_event, on_wake=on_wake,
                                                on_status=on_status, on_ungate=on_ungate)
        self.placement = placement = GangPlacement(mirror, registry.get)
        self.latency = ReleaseLatency(settings.hold_seconds / 2)
        self.attempts = attempts = Attempts(placement, settings, clock, self.latency)
        self.mode = mode = bind_mode(registry, placement, attempts, settings, clock)
        self.admission = admission = Admission(registry, placement, waitlist, settings, clock)
        self.barrier = Barrier(registry, placement, attempts, settings, clock)
        self.expiry = Expiry(registry, attempts, mode, settings, clock)
        self.policies = PolicyChanges(registry, placement, attempts, waitlist, clock)
        self.queue = queue = GangQueue(registry, placement, attempts, settings, clock, serves)
        self.preemption = preemption_part = GangPreemption(
            registry, placement, admission, attempts, settings, clock, enabled=preemption, budgets=budgets,
            eviction_room=eviction_room, problem=preemption_problem)
        self.view = LedgerView(registry, placement, waitlist, admission, queue, preemption_part, settings, clock)
        self._ordering = False  # inside a pass over the gangs ahead: admitting one starts no other pass
        self._told_gated: dict[GangKey, str] = {}  # gangs short of their quorum, gated: what the walk last told
        mirror.listen(self)  # members bound by another binder, members gone

    def adopt(self, state: LedgerState) -> None:
        """Take another ledger's published state (``LedgerState``): a scratch ledger over a forked or rebuilt
        mirror answering a what-if as the leader would. Its clock must tell wall-clock time. Gangs whose
        group the mirror does not define are left out."""
        with self.lock:
            for uid, node in state.assumed.items():
                self.mirror.assume(uid, node)
            for entry in state.gangs:
                policy = self.mirror.gang_policy(entry.gang)[1]
                if policy is None:
                    continue
                record = self.registry.ensure(entry.gang, policy)
                record.turn.priority, record.turn.waiting_since = entry.priority, entry.waiting_since
                if entry.never_fits:
                    record.plans.never_fits = Verdict(Code.WAIT_UNRESOLVABLE, entry.never_fits)
                if record.turn.waiting_since is not None:
                    self.registry.mark_waiting(record)
                self.registry.mark_busy(record)
                held = entry.reserved
                if held is not None:
                    self._apply([Reserve(record, Reservation(held.purpose, held.slots, held.since, held.priority))])

    def _apply(self, decision: Decision | Iterable[Effect]) -> Verdict | None:
        return self.registry.apply(decision)

    # ---------------------------------------------------------------------------- queries
    def record(self, gang: GangKey) -> GangRecord | None:
        """The gang's record (read it under the lock; change it only through the ledger)."""
        with self.lock:
            return self.registry.get(gang)

    def gang_of(self, pod: PodRecord) -> tuple[GangKey | None, GangPolicy | None]:
        with self.lock:
            return self.placement.gang_of(pod)

    def placed_count(self, gang: GangKey) -> int:
        """The gang's members bound or being bound."""
        with self.lock:
            return len(self.placement.placed(self.mirror.members(gang), self.registry.get(gang)))

    def domain_of(self, gang: GangKey) -> Domain | None:
        with self.lock:
            return self.placement.domain_of(gang)

    # ------------------------------------------------------------------ the mirror's listener
    def member_bound(self, pod: PodRecord) -> None:
        """The mirror saw gang member ``pod`` bound by another binder (called under its lock)."""
        with self.lock:
            self._apply(self.barrier.member_bound(pod))

    def member_gone(self, pod: PodRecord) -> None:
        """The mirror saw gang member ``pod`` deleted, re-created or finished (called under its lock)."""
        with self.lock:
            self._apply(self.barrier.member_gone(pod))

    def member_added(self, pod: PodRecord) -> None:
        """The mirror saw a new gang member (called under its lock): one a filter came for before it was
        seen is woken, to be tried again at once; when it completes its gang's quorum, the members carrying the
        quorum gate are let into kube-scheduler's queue."""
        with self.lock:
            if self.waitlist.take_unseen(pod.uid):
                self._apply([Wake([pod])])
            gang = pod.gang
            if gang is None or not self.mirror.has_quorum_gated(gang):
                return
            if pod.link_policy is not None and self.mirror.member_count(gang) < pod.link_policy.min_count:
                return  # short of its own minCount: not worth reading an annotation gang's policy from every member
            ungated, _ = self.admission.ungated(gang)
            if ungated:
                self._apply([Ungate(ungated)])

    def release_quorum_gated(self) -> None:
        """Let through the pods carrying the quorum gate that may go to kube-scheduler now (``Ungate``, under
        the lock, so that a removal being written is not asked for again): a gang member once its gang has its
        quorum, a pod of no gang at once. ``member_added`` does it for a gang as its members come; this is the
        walk that catches the rest (a group object that came after its pods, a new leader, a pod of no gang, a
        removal that failed), every second or so (``wiring``). A gang still short of its quorum is told, as a
        filter would tell it (a ``GangWaiting`` Event and its group's status), once per change of its message:
        kube-scheduler never tries its gated members, so no filter comes to say it."""
        with self.lock:
            due: list[PodRecord] = []
            told: dict[GangKey, str] = {}
            seen: set[GangKey] = set()
            for pod in self.mirror.quorum_gated():
                if pod.gang is None:
                    due.append(pod)
                elif pod.gang not in seen:
                    seen.add(pod.gang)
                    ungated, verdict = self.admission.ungated(pod.gang)
                    due += ungated
                    if not verdict.passes:
                        told[pod.gang] = verdict.message
                        if self._told_gated.get(pod.gang) != verdict.message:
                            self._tell_waiting(pod, pod.gang, verdict)
            self._told_gated = told
            if due:
                self._apply([Ungate(due)])

    def _tell_waiting(self, pod: PodRecord, gang: GangKey, verdict: Verdict) -> None:
        record = self.registry.get(gang)
        if record is not None:
            record.last_message = verdict.message
        else:
            self.waitlist.remember(gang, verdict.message)
        self._apply([Tell([pod], "Normal", "GangWaiting", verdict.message),
                     Publish(gang, GangStatus(GangPhase.WAITING, verdict.message))])

    # ------------------------------------------------------------------------------ filter
    def filter_gate(self, facts: PodFacts, known: PodRecord | None, linked: bool, names: list[str],
                    sweep_interval: float, may_wait: bool = False) -> FilterGate:
        """A filter's gang half, one step: the sweep (at most every ``sweep_interval``; what it leaves the
        engine to do is queued: ``take_work``), then, for a gang member, the quorum gate and admission (a
        member that must wait is remembered to wake and told why), then its own reservation's verdicts on
        the requested nodes and where the bind mode steers it.

        The pod is the mirror's (``known``, found by the request's uid), never the request's: whether it is
        a gang member, of which gang, what it asks for. A pod the request says is a member (``linked``) but
        the mirror has not seen is told to come back (its uid remembered, to wake it when the pod watch
        delivers it), with nothing admitted, reserved, held or written for it.

        ``may_wait``: a member whose gang lacks only members gets ``missing`` set and nothing else done for
        it (not remembered, not told why), so the engine can wait for them and ask again."""
        with self.lock:
            self.sweep(sweep_interval, release=True)
            if known is None and linked:
                self.waitlist.unseen(facts.uid)
                return FilterGate(None, Verdict(Code.WAIT_RESOLVABLE, messages.pod_not_seen(facts.uid)))
            pod = known if known is not None and known.gang is not None else None
            gang, verdict = self.gate(pod) if pod is not None else (None, PASS)
            if pod is None or gang is None:
                return FilterGate(None, PASS)
            if not verdict.passes:
                missing = self.members_missing(pod) if may_wait else None
                if missing is not None:
                    return FilterGate(gang, verdict, missing=missing)
                if verdict.code is Code.WAIT_RESOLVABLE:
                    self.waitlist.block(pod)
                self.note_waiting(pod, verdict)
                return FilterGate(gang, verdict)
            record = self.registry.get(gang)
            own: dict[str, str] = {}
            steered: list[str] = []
            if record is not None and record.reservation is not None and record.reservation.nodes:
                offered = record.reservation.nodes.intersection(check_node_names(names))
                if record.admitted:
                    record.attempt.filters_seen += 1
                    record.attempt.offered.update(offered)
                placement = pod_placement(pod)
                own = {n: node_verdict(self.mirror, n, pod, placement, gang) for n in offered}
                steered = sorted((n for n, v in own.items() if v == FIT_RESERVED), key=names.index)
                if steered:
                    steered = self.mode.steer(record, pod, steered)
                    if not steered:  # no place left for it: only free capacity outside the reservation
                        claimed = bounded(messages.no_place_left(gang))
                        own = {n: claimed if v == FIT_RESERVED else v for n, v in own.items()}
            domain = self.placement.domain_of(gang)
            allowed = self.placement.nodes_in(domain) if domain is not None else None
            return FilterGate(gang, PASS, own, steered, domain, allowed)

    def members_missing(self, pod: PodRecord) -> tuple[GangKey, int] | None:
        """(gang, minCount) of member ``pod`` when its gang's policy is known and fewer than minCount members
        exist: all the quorum gate waits for; None otherwise (no gang, no policy yet, or enough members)."""
        with self.lock:
            gang, policy = self.placement.gang_of(pod)
            if gang is None or policy is None or self.mirror.member_count(gang) >= policy.min_count:
                return None
            return gang, policy.min_count

    def gate(self, pod: PodRecord) -> tuple[GangKey | None, Verdict]:
        """The pod's gang and whether it may be placed now: the quorum gate (its group is defined and
        enough members exist), then admission. (None, PASS) for a pod of no gang."""
        with self.lock:
            gang, policy = self.placement.gang_of(pod)
            if gang is None:
                return None, PASS
            verdict = self.admission.gate(pod, gang, policy)
            if verdict.passes and policy is not None:
                verdict = self.admit(gang, policy, pod)
            return gang, verdict

    def note_waiting(self, pod: PodRecord, verdict: Verdict) -> None:
        """A member was rejected by a gang rule: remember why (explain), tell its gang (a ``GangWaiting``
        Event, deduplicated by the recorder) and its group object (status, deduplicated by the writer)."""
        gang = pod.gang
        if gang is None:
            return
        with self.lock:
            self.waitlist.reject(pod, gang)
            self._tell_waiting(pod, gang, verdict)

    # ---------------------------------------------------------------------------- admission
    def admit(self, gang: GangKey, policy: GangPolicy, pod: PodRecord | None = None) -> Verdict:
        """Admit the gang if the rest of it fits, after the gangs ahead of it; PASS for an admitted or
        complete gang. ``pod``: the member being filtered (planned for even if the mirror has not seen it)."""
        with self.lock:
            now = self.clock()
            record = self.registry.ensure(gang, policy)
            record.policy = policy
            if record.admitted:
                return PASS  # checked first: admitted gangs' members are filtered often
            members = self.admission.members(gang, pod)
            if self.admission.complete(record, members):
                record.turn.waiting_since = None
                return PASS  # complete: later members and replacements need no reservation
            self._apply(self.queue.join(record, members, now))
            if not self._ordering:
                self._take_turns(now, record)
            verdict = self.preemption.victims_pending(record)
            if verdict is not None:
                record.last_message = verdict.message
                return verdict
            decision = self.admission.plan(record, members, now)
            if decision.verdict.passes:  # admitted: its wait, and a drain or preemption it had, are over
                self._apply(self.queue.admitted(record, now) + self.preemption.admitted(record))
            return self._apply(decision) or PASS

    def _take_turns(self, now: float, planning: GangRecord | None) -> None:
        """Admit, in order, the waiting gangs ahead of ``planning`` that fit now, then start or end drains
        and preemptions. Runs on every filter of a waiting gang's member."""
        self._ordering = True
        try:
            for ahead in self.queue.ahead(planning, now):
                self.admit(ahead.key, ahead.policy)
        finally:
            self._ordering = False
        if self._update_drains(now, planning):
            self.queue.passed(now)  # else the head's drain or preemption is left to the sweep's next pass

    def _update_drains(self, now: float, planning: GangRecord | None = None) -> bool:
        """Only the head of the queue drains or preempts, and only once it has waited longer than its
        maximum wait (a drain) or does not fit on free capacity (a preemption). A head that is ``planning``
        (a member's filter is admitting it) neither starts a preemption nor a drain here: its own plan
        comes first, and the sweep's pass takes it up if that plan fails. Returns False when it left the
        head so."""
        head = self.queue.head()
        self._apply(self.queue.end_stale_drains(head))
        if head is None or head.turn.waiting_since is None:
            return True
        if head.preempting:
            self._apply(self.preemption.follow(head, now))
        elif head.draining:
            self._apply(self.queue.follow_drain(head, now))
        elif head is planning:
            return False
        else:
            started = self.preemption.start(head, now)
            if started is not None:
                self._apply(started)
            elif self.queue.drain_due(head, now):
                self._apply(self.queue.start_drain(head, now))
        return True

    # -------------------------------------------------------------------------------- sweep
    def sweep(self, min_interval: float = 0.0, *, release: bool = False) -> None:
        """Follow other binders (the bind mode) and policy changes, expire overdue gangs, forget gangs
        with no members, then pass over the order (gangs tried but never filtered, drains, preemptions).

        With ``release`` (the caller binds), the quorums a policy change completed are marked releasing
        and queued (``take_work``): the caller must bind every one and report with ``released``. ``min_interval`` 0
        (the background tick, every second) walks every gang; otherwise (a filter) the walk is skipped if
        one ran less than ``min_interval`` ago, and walks only the gangs something fell due for, once the
        earliest thing it acts on falls due (gangs left with no member wait for the tick)."""
        with self.lock:
            self._apply(self.mode.follow(min_interval))
            for gang in self.policies.changed():
                self._apply(self.policies.follow(gang, release))
            self._walk(min_interval)
            now = self.clock()
            if self.queue.pass_due(min_interval, now):
                self._discover(now)
                self._update_drains(now)

    def _discover(self, now: float) -> None:
        """Gangs kube-scheduler tried without calling the extender join the order (``queue.discover``);
        those and the gangs found never to fit are checked for never fitting (a node added may change the
        answer: the check is cached per node set and members)."""
        found = self.queue.discover(now)
        if found is None:
            return
        joined, effects = found
        self._apply(effects)
        told = [r for r in self.registry.busy() if r.plans.never_fits is not None and r not in joined]
        for record in joined + told:
            self._apply(self.admission.check_never_fits(record, self.mirror.members(record.key)))

    def take_work(self) -> Work:
        """The quorums to bind and the evictions to run, queued by decisions since the last call (the
        engine takes them after each request and each tick, and does them outside the lock)."""
        return self.registry.take_work()

    def _walk(self, min_interval: float) -> None:
        """The expiry walk (``Expiry.walk_due`` says when): over every gang (the tick), or over the gangs
        something fell due for (a filter's sweep, from the registry's schedule); each walked gang's next due
        is scheduled again."""
        if not self.expiry.walk_due(min_interval):
            return
        now = self.clock()
        full = min_interval <= 0
        records = self.registry.all() if full else self.registry.take_due(now)
        scheduled: list[tuple[float, GangRecord]] = []
        done = 0
        try:
            for record in records:
                self._walk_one(record, now, scheduled)
                done += 1
        finally:
            if not full:  # what the walk took off the schedule goes back on, even if a step raised
                for when, record in scheduled:
                    self.registry.due_by(when, record)
                for record in records[done:]:
                    self.registry.due_by(now, record)
        if not full:
            return
        self.registry.reschedule(scheduled)
        self.registry.rebuild_busy()
        self.waitlist.prune(lambda gang: not self.mirror.member_count(gang),
                            lambda gang: self.registry.get(gang) is not None)

    def _walk_one(self, record: GangRecord, now: float, scheduled: list[tuple[float, GangRecord]]) -> None:
        """The expiry walk's step for one gang: expire it if due, wake it after its back-off, forget it if it
        has no members left, else add its next due to ``scheduled``."""
        due = self.expiry.due(record)
        if due is not None and now >= due:
            self._apply(self.expiry.expire_if_due(record))
        self._apply(self.expiry.wake_after_backoff(record, now))
        if self.expiry.forgettable(record):
            self._apply(self.attempts.reset(record))
            self.registry.drop(record)
            return
        next_due = self.expiry.next_due(record)
        if next_due != float("inf"):
            scheduled.append((next_due, record))

    def due(self, gang: GangKey) -> float | None:
        """When the gang's holds or attempt next fall due (None: nothing pending)."""
        with self.lock:
            record = self.registry.get(gang)
            return self.expiry.due(record) if record is not None else None

    def expire(self, gang: GangKey) -> float | None:
        """Expire the gang's holds or attempt if due; then ``due``: one step of a held bind's wait."""
        with self.lock:
            record = self.registry.get(gang)
            if record is None:
                return None
            self._apply(self.expiry.expire_if_due(record))
            return self.expiry.due(record)

    def answer_all_held(self, message: str) -> int:
        """Answer every bind held at any barrier with ``message`` (a retry that keeps its place): the
        extender cannot stand behind a release while its view of the cluster is stale. Returns how many."""
        with self.lock:
            answered, effects = self.expiry.answer_all_held(message)
            self._apply(effects)
            return answered

    # -------------------------------------------------------------------------------- binds
    def bind_refusal(self, namespace: str, name: str) -> str:
        """Why the bind verb refuses every bind in this mode ("" : it binds)."""
        return self.mode.bind_refusal(namespace, name)

    def on_bind(self, pod: PodRecord, node: str, policy: GangPolicy | None,
                arrival: float | None = None) -> BindDecision:
        """What a bind request does (``Barrier.arrive``, then ``complete`` when it completed the quorum),
        its effects applied. ``arrival``: when the request reached the process (ledger clock; default now)."""
        assert pod.gang is not None or policy is None
        with self.lock:
            arrived = self.barrier.arrive(pod, node, policy, arrival)
            self._apply(arrived.decision.effects)
            if arrived.quorum is None or arrived.decision.hold is None:
                return arrived.decision
            decision = self.barrier.complete(arrived.quorum, arrived.decision.hold)
            self._apply(decision.effects)
            return decision

    def bound(self, pod: PodRecord, error: str) -> None:
        """Outcome of an immediate bind."""
        with self.lock:
            self._apply(self.barrier.bound(pod, error))

    def released(self, gang: GangKey, outcomes: list[tuple[Hold, str]]) -> None:
        """Outcome of binding a released quorum: every hold answered, the reservation released."""
        with self.lock:
            self._apply(self.barrier.released(gang, outcomes))

    def release_took(self, seconds: float) -> None:
        """The engine bound a release (written down, then every Binding) in ``seconds``: the margin the next
        releases need left on their holds follows it (``ReleaseLatency``)."""
        self.latency.observe(seconds)

    def unrelease(self, gang: GangKey, holds: list[Hold], message: str) -> None:
        """A release that may not start (its intent could not be written down): its holds answered with a
        retry; they keep their reserved place."""
        with self.lock:
            self._apply(self.barrier.unrelease(gang, holds, message))

    def resume(self, pod: PodRecord, node: str) -> str:
        """A member of a release a crash interrupted may be bound to ``node`` now ("") or why not."""
        with self.lock:
            error, effects = self.barrier.resume(pod, node)
            self._apply(effects)
            return error

    def approve(self, gang: GangKey, places: Sequence[tuple[PodRecord, str]]) -> None:
        """Members of a release a previous leader left open pass the barrier at their next bind; the nodes
        the release chose for them (``places``) are kept for them until then."""
        with self.lock:
            policy = self.placement.gang_of(places[0][0])[1] if places else None
            self._apply(self.barrier.approve(gang, policy, places))

    def abandoned(self, gang: GangKey, pods: Sequence[PodRecord]) -> None:
        """A release left open had made no Binding: dropped, told (the gang forms again at the barrier)."""
        with self.lock:
            self._apply(self.barrier.abandoned(gang, pods))

    def resumed(self, gang: GangKey, bound: Sequence[PodRecord]) -> None:
        with self.lock:
            self._apply(self.barrier.resumed(gang, bound))

    # --------------------------------------------------------------------------- evictions
    def evictions_done(self, gang: GangKey, failed: Sequence[tuple[PodRecord, str]]) -> None:
        """The engine ran a gang's evictions; ``failed``: the pods not evicted and why."""
        with self.lock:
            self._apply(self.preemption.failed(gang, failed))

    def eviction_allowed(self, pods: Sequence[PodRecord]) -> tuple[bool, str]:
        """Whether the disruption budgets allow evicting all of ``pods`` at once now (and why not)."""
        with self.lock:
            return self.preemption.budgets(pods)

    def victim_partly_evicted(self, unit: VictimUnit, left: Sequence[PodRecord], why: str) -> None:
        """A victim unit was left part evicted after its retries: told and counted."""
        with self.lock:
            self._apply(self.preemption.partly_evicted(unit, left, why))

    def eviction_wanted(self, gang: GangKey) -> bool:
        """Whether a preemption's evictions are still wanted (its gang waits for them)."""
        with self.lock:
            return self.preemption.wanted(gang)

"""GangLedger: the lifecycle of every gang this extender is enforcing (no I/O).

Owns: admitting a gang (planning the rest of it on the free capacity and reserving it, failing fast
when it can never fit, keeping the held binds within the thread budget); the bind barrier (holding a
member's bind until its quorum is complete, releasing the quorum, recording the outcome, resuming a
release a previous process left open); the facts ``explain`` shows. The state it keeps and the steps
it shares are in ``book``, the time-driven part in ``expiry``: ``GangLedger`` is the class the rest
of the extender uses. Must not: call the API server or block: the engine does the binding and the
waiting, outside the lock, and the callbacks only queue.

Thread safety: the ledger shares the mirror's lock, so a gang decision and the capacity it was based
on are one consistent step.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any

from extender.cluster.model import (
    PASS,
    Code,
    GangKey,
    GangPhase,
    GangPolicy,
    GangStatus,
    PodRecord,
    TopologyProblem,
    Verdict,
)
from extender.cluster.quantity import CPU
from extender.gangs import explanation, planner, rules, topology
from extender.gangs.book import MAX_BLOCKED
from extender.gangs.gated import FilterGate
from extender.gangs.state import GangState, Hold

log = logging.getLogger(__name__)


class BindAction(enum.Enum):
    NOW = "now"          # bind at once (not a gang member, or the gang is already complete)
    WAIT = "wait"        # held: wait on the hold
    RELEASE = "release"  # this request completed the quorum: bind every hold in ``holds``
    REJECT = "reject"    # answer ``error``


@dataclass(slots=True)
class BindDecision:
    action: BindAction
    hold: Hold | None = None
    holds: list[Hold] = field(default_factory=list)
    error: str = ""


class GangLedger(FilterGate):
    """Admission and the bind barrier, over the clock and the book."""

    # ----------------------------------------------------------------------------- admission
    def gate(self, pod: PodRecord) -> tuple[GangKey | None, Verdict]:
        """The pod's gang and whether it may be placed now: the quorum gate (its group is defined and
        enough members exist), then admission. (None, PASS) for a pod of no gang."""
        with self.lock:
            gang, policy = self.gang_of(pod)
            if gang is None:
                return None, PASS
            count = self.mirror.member_count(gang) + (0 if self.mirror.is_member(gang, pod.uid) else 1)
            verdict = rules.quorum(gang, policy is not None, policy, count)
            if verdict.passes and policy is not None:
                verdict = self.admission(gang, policy, pod)
            return gang, verdict

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
            placed = self.placed(members, state)
            if len(placed) + len(self._waiting(state)) >= policy.min_count:
                state.waiting_since = None
                return PASS  # complete: later members and replacements need no reservation
            self._take_turn(state, members, now)
            verdict = self.victims_pending(state)
            if verdict is not None:
                state.last_message = verdict.message
                return verdict
            if now < state.backoff_until:
                return Verdict(Code.WAIT_RESOLVABLE,
                               f"gang {gang} is backing off for {state.backoff_until - now:.0f}s after "
                               f"{state.timeouts} timeout(s) so other gangs can proceed")
            constraint = self.constraint_of(policy, members)
            if isinstance(constraint, TopologyProblem):
                state.last_message = (f"gang {gang} cannot be placed: its topology constraint is unusable: "
                                      f"{constraint.message}")
                return Verdict(Code.WAIT_UNRESOLVABLE, state.last_message)
            state.constraint, state.constraint_known = constraint, True
            # Whether the gang could fit an empty cluster is asked only when it does not fit this one, or
            # when this plan is for fewer than minCount members: a plan of a whole gang that fits answers
            # it (the check plans over every node, as the plan does).
            needed = policy.min_count - len(placed) - len(self._waiting(state))
            verdict = self._barrier_room(gang, needed)
            if verdict is not None:
                never = self._never_fits(state, members)
                if never is None:
                    state.last_message = verdict.message
                return never or verdict
            levels = self.levels_for(constraint)
            inputs = (self.mirror.generation, needed, tuple(members), constraint, levels, state.avoid)
            if state.failed_plan is not None and state.failed_plan_inputs == inputs:
                never = self._never_fits(state, members)  # cached, unless the nodes or members changed
                if never is None:
                    state.last_message = state.failed_plan.message
                return never or state.failed_plan  # no capacity, member, count or constraint changed since
            pending = [p for p in members if p.uid not in state.holds and not self.mirror.placement(p.uid)]
            chosen = planner.pick_for_reservation(pending, needed)
            placement = topology.place_gang(chosen, pending, self.mirror.nodes.values(), self._free_for(gang),
                                            self._free_cpu_for(gang), constraint, levels,
                                            bound_nodes=self.placed_nodes(placed), avoid=state.avoid)
            state.other_domains = placement.others
            if not placement.plan.complete:
                never = self._never_fits(state, members)
                if never is not None:
                    return never
                verdict = rules.admission_wait(gang, placement.plan, needed)
                state.last_message = verdict.message
                state.failed_plan, state.failed_plan_inputs = verdict, inputs
                return verdict
            if needed < policy.min_count:  # held or placed members left out of the plan: it proves less
                never = self._never_fits(state, members)
                if never is not None:
                    return never
            else:
                state.never_fits = None  # the whole gang fits now
            self._admit(state, placement, chosen, pending, len(placed), now)
            return PASS

    def _admit(self, state: GangState, placement: topology.TopologyPlan, chosen: list[PodRecord],
               pending: list[PodRecord], placed: int, now: float) -> None:
        """Reserve ``placement`` for the gang's ``chosen`` members and tell users."""
        gang, policy, result = state.gang, state.policy, placement.plan
        state.failed_plan, state.failed_plan_inputs = None, ()
        state.admitted_at = now
        state.deadline = self._due_by(now + self.timeout_for(policy))
        self._mark_busy(state)
        state.domain, state.offered, state.filters_seen = placement.domain, set(), 0
        self._note_admitted(state, now)
        self.mirror.reserve(gang, result.slots)
        where = topology.where(state.constraint, placement)
        state.last_message = f"admitted: {len(chosen)} member(s) reserved on {len(result.per_node())} node(s){where}"
        self.counters["admitted"] += 1
        # Like the in-tree plugin activating siblings: members a gang rule rejected wait in the
        # scheduler's unschedulable pool; wake those (the others are still queued: no API write).
        rejected = self._rejected.pop(gang, set())
        self.on_wake([p for p in pending if p.uid in rejected])
        log.info("gang %s admitted: %s", gang, state.last_message)
        self.on_event(chosen, "Normal", "GangAdmitted",
                      f"gang {gang} admitted: capacity reserved for {len(chosen)} more member(s){where}")
        if not placement.first_choice:
            self.on_event(chosen, "Warning", "GangTopologyFallback",
                          f"gang {gang}: no {state.constraint.preferred} domain could hold it; placed{where}")
        self.on_status(gang, GangStatus(GangPhase.SCHEDULING, state.last_message, placed, policy.min_count))

    def _never_fits(self, state: GangState, members: list[PodRecord]) -> Verdict | None:
        generation = self.mirror.node_set_generation
        uids = (*(p.uid for p in members), state.constraint)
        if state.never_fits_checked != generation or state.never_fits_members != uids:
            chosen = planner.pick_for_reservation(members, state.policy.min_count)
            result = planner.plan(chosen, self.mirror.nodes.values(), lambda node: node.allocatable,
                                lambda node: node.allocatable.get(CPU, 0))
            fresh = None if result.complete else rules.never_fits(
                state.gang, result, state.policy.min_count, len(self.mirror.nodes))
            if fresh is None and state.constraint.required:
                why = topology.never_fits(chosen, self.mirror.nodes.values(), state.constraint,
                                          self.placed_nodes(members))
                if why is not None:
                    fresh = Verdict(Code.WAIT_UNRESOLVABLE, f"gang {state.gang} can never fit: {why}")
            if fresh is not None and state.never_fits is None:
                self.counters["never_fits"] += 1
                self.on_event(members, "Warning", "GangNeverFits", fresh.message)
            state.never_fits, state.never_fits_checked, state.never_fits_members = fresh, generation, uids
        if state.never_fits is not None:
            state.last_message = state.never_fits.message
        return state.never_fits

    # --------------------------------------------------------------------------------- binds
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
            placed = self.placed(members, state)
            if len(placed) >= policy.min_count:
                self.mirror.assume(pod.uid, node)
                return BindDecision(BindAction.NOW)
            now = self.clock()
            hold = Hold(pod, node, answer_by=self._due_by((now if arrival is None else arrival) + self.hold_seconds))
            if hold.answer_by <= now:
                return BindDecision(BindAction.REJECT, error=(
                    f"bind of pod {pod.namespace}/{pod.name} reached gang-extender too late to be held "
                    f"(kube-scheduler's httpTimeout less the answer margin had passed); kube-scheduler retries it"))
            state.holds[pod.uid] = hold
            self._mark_busy(state)
            waiting = self._waiting(state)
            if pod.uid not in state.held_ever:
                # A member new to this attempt reached the barrier: the gang is progressing, so its
                # deadline moves (the first hold starts the clock). A member coming back after its
                # hold was recycled is not progress.
                state.held_ever.add(pod.uid)
                state.deadline = self._due_by(now + self.timeout_for(policy))
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
                state.deadline = self._due_by(now + self.timeout_for(state.policy))
                state.held_ever = set()
                self.mirror.reserve_more(gang, ((h.node, h.pod.requests) for h in failed))
                state.last_message = (f"quorum released but {len(failed)} Binding(s) failed: their places stay "
                                      "reserved until kube-scheduler retries them")
            elif state is not None and not state.holds:
                self._reset(state)
                state.timeouts, state.avoid, state.waiting_since = 0, frozenset(), None
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
                    placed = len(self.placed(self.mirror.members(gang), state))
                    self.on_status(gang, GangStatus(GangPhase.SCHEDULED, message, placed, state.policy.min_count))

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

    # ------------------------------------------------------------------------------- explain
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
            topology_view = self._topology_view(gang, policy, members, state)
            return explanation.GangFacts(
                gang, exists, policy, members, placements, frozenset(waiting), self.mirror.reservation(gang),
                admitted=state.admitted_at is not None, timeout_seconds=self.timeout_for(state.policy),
                deadline_in=None if state.deadline is None else state.deadline - now,
                backoff_in=max(state.backoff_until - now, 0.0), timeouts=state.timeouts, completed=state.completed,
                message=state.last_message, never_fits=state.never_fits.message if state.never_fits else "",
                api_version=meta.api_version if meta else "", template=meta.template if meta else "",
                topology=topology_view, order=self.order_view(gang), draining=self.drain_to_place(gang))

    def _topology_view(self, gang: GangKey, policy: GangPolicy | None, members: tuple[PodRecord, ...],
                       state: GangState) -> dict[str, Any] | None:
        """What ``explain`` shows of the gang's topology constraint (None: it has none)."""
        constraint = self.constraint_of(policy, members) if policy is not None else state.constraint
        domain = state.domain if state.admitted_at is not None else self.domain_of(gang)
        return explanation.topology_view(constraint, domain, state.other_domains)

    def explain(self, gang: GangKey) -> dict[str, Any]:
        """The explanation of one gang (``GET /explain``): its facts, the nodes and a copy of the free
        capacity are taken in one short hold of the lock; the plan and the shortfall over every node, the
        long part, run after it is released, so filters and binds do not wait for them."""
        with self.lock:
            facts = self.facts(gang)
            nodes = list(self.mirror.nodes.values())
            capacity = self.mirror.capacity(gang)
        return explanation.explain(facts, nodes, capacity.free)


"""Admission: whether a gang may be placed now, and reserving the rest of it when it may (no I/O).

Owns: the quorum gate (the group is defined and enough members exist), and so which members carrying the
quorum scheduling gate may have it removed; planning the members still
missing on the free capacity (other gangs' reservations subtracted, its topology constraint kept) and
reserving that plan when it is complete; remembering a failed plan until something it depended on
changes; failing fast, with a ``GangNeverFits`` Event, when the gang could not fit even an empty
cluster; and the barrier's budget (the binds gangs may hold at once within the worker threads, the
members one release may have on the Lease). Each decision is a ``Decision``: the verdict, with the
reservation, Events, status and wake-ups it asks for. Must not: order the gangs (the queue does, and
the ledger admits the gangs ahead first), call the API server or block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from extender.cluster.mirror import ClusterMirror
from extender.gangs import domains, planner
from extender.gangs.effects import Count, Decision, Effect, Publish, Reserve, Tell, Wake
from extender.gangs.placement import GangPlacement
from extender.gangs.record import GangRecord, Purpose, Reservation
from extender.gangs.registry import GangRegistry
from extender.gangs.settings import GangSettings
from extender.gangs.waitlist import Waitlist
from extender.model import messages
from extender.model.cluster import PodRecord
from extender.model.gang import PASS, Code, GangKey, GangPhase, GangPolicy, GangStatus, TopologyProblem, Verdict
from extender.model.quantity import CPU

log = logging.getLogger(__name__)


def quorum(gang: GangKey, exists: bool, policy: GangPolicy | None, members: int) -> Verdict:
    """The quorum gate: unresolvable until the group exists and ``min_count`` members exist."""
    if not exists:
        return Verdict(Code.WAIT_UNRESOLVABLE, messages.group_missing(gang))
    if policy is None or members >= policy.min_count:
        return PASS
    return Verdict(Code.WAIT_UNRESOLVABLE, messages.members_missing(gang, members, policy.min_count))


class Admission:
    """Plans a gang against the free capacity and reserves the plan."""

    def __init__(self, registry: GangRegistry, placement: GangPlacement, waitlist: Waitlist, settings: GangSettings,
                 clock: Callable[[], float]) -> None:
        self.registry = registry
        self.placement = placement
        self.mirror: ClusterMirror = placement.mirror
        self.waitlist = waitlist
        self.settings = settings
        self.clock = clock

    def gate(self, pod: PodRecord, gang: GangKey, policy: GangPolicy | None) -> Verdict:
        """The quorum gate for member ``pod`` (counted even before the mirror has seen it)."""
        count = self.mirror.member_count(gang) + (0 if self.mirror.is_member(gang, pod.uid) else 1)
        return quorum(gang, policy is not None, policy, count)

    def ungated(self, gang: GangKey) -> tuple[list[PodRecord], Verdict]:
        """The members of ``gang`` carrying the quorum gate that may go to kube-scheduler now, with the quorum
        gate's verdict: all of them once the gang passes it (its group is defined and ``min_count`` members
        exist), none before. Costs nothing for a gang with no gated member."""
        if not self.mirror.has_quorum_gated(gang):
            return [], PASS
        exists, policy = self.mirror.gang_policy(gang)
        verdict = quorum(gang, exists, policy, self.mirror.member_count(gang))
        return (self.mirror.quorum_gated_members(gang) if verdict.passes else []), verdict

    def members(self, gang: GangKey, pod: PodRecord | None) -> list[PodRecord]:
        """The gang's members; ``pod``, the member being filtered, too, even if the mirror has not seen it."""
        members = self.mirror.members(gang)
        if pod is not None and pod.gang == gang and not self.mirror.is_member(gang, pod.uid):
            members.append(pod)
        return members

    def complete(self, record: GangRecord, members: Sequence[PodRecord]) -> bool:
        """Whether enough members are placed or held: later members and replacements need no admission."""
        placed = self.placement.placed(members, record)
        return len(placed) + len(record.waiting()) >= record.policy.min_count

    # ----------------------------------------------------------------------------- the plan
    def plan(self, record: GangRecord, members: list[PodRecord], now: float) -> Decision:
        """Admit the gang if the rest of it fits (its turn has come: the ledger admitted the gangs ahead)."""
        gang, policy = record.key, record.policy
        if now < record.backoff_until:
            return Decision(Verdict(Code.WAIT_RESOLVABLE,
                                    messages.backing_off(gang, record.backoff_until - now, record.timeouts)))
        constraint = self.placement.constraint_of(policy, members)
        if isinstance(constraint, TopologyProblem):
            record.last_message = messages.topology_unusable(gang, constraint.message)
            return Decision(Verdict(Code.WAIT_UNRESOLVABLE, record.last_message))
        plans = record.plans
        plans.constraint, plans.constraint_known = constraint, True
        placed = self.placement.placed(members, record)
        # Whether the gang could fit an empty cluster is asked only when it does not fit this one, or when
        # this plan is for fewer than minCount members: a plan of a whole gang that fits answers it (the
        # check plans over every node, as the plan does).
        needed = policy.min_count - len(placed) - len(record.waiting())
        effects: list[Effect] = []
        verdict = self.barrier_room(gang, needed)
        if verdict is not None:
            never = self._never_fits(record, members, effects)
            if never is None:
                record.last_message = verdict.message
            return Decision.of(effects, never or verdict)
        levels = self.settings.levels_for(constraint)
        inputs = (self.mirror.generation, needed, tuple(members), constraint, levels, plans.avoid)
        if plans.failed is not None and plans.failed_inputs == inputs:
            never = self._never_fits(record, members, effects)  # cached, unless the nodes or members changed
            if never is None:
                record.last_message = plans.failed.message
            return Decision.of(effects, never or plans.failed)  # no capacity, member, count or constraint changed
        pending = self.placement.pending(members, record)
        chosen = planner.pick_for_reservation(pending, needed)
        placement = domains.place_gang(chosen, pending, self.mirror.nodes.values(), self.placement.free_for(gang),
                                       self.placement.free_cpu_for(gang), constraint, levels,
                                       bound_nodes=self.placement.placed_nodes(placed), avoid=plans.avoid)
        plans.other_domains = placement.others
        if not placement.plan.complete:
            never = self._never_fits(record, members, effects)
            if never is not None:
                return Decision.of(effects, never)
            verdict = Verdict(Code.WAIT_RESOLVABLE, messages.capacity_wait(gang, len(placement.plan.slots), needed,
                                                                           placement.plan.blocking))
            record.last_message = verdict.message
            plans.failed, plans.failed_inputs = verdict, inputs
            return Decision(verdict)
        if needed < policy.min_count:  # held or placed members left out of the plan: it proves less
            never = self._never_fits(record, members, effects)
            if never is not None:
                return Decision.of(effects, never)
        else:
            plans.never_fits = None  # the whole gang fits now
        return Decision.of(self._admit(record, placement, chosen, pending, len(placed), now))

    def _admit(self, record: GangRecord, placement: domains.TopologyPlan, chosen: list[PodRecord],
               pending: list[PodRecord], placed: int, now: float) -> list[Effect]:
        """Reserve ``placement`` for the gang's ``chosen`` members and tell users."""
        gang, policy, result = record.key, record.policy, placement.plan
        record.plans.failed, record.plans.failed_inputs = None, ()
        record.attempt.deadline = self.registry.due_by(now + self.settings.timeout_for(policy), record)
        record.attempt.domain, record.attempt.offered, record.attempt.filters_seen = placement.domain, set(), 0
        effects: list[Effect] = [Reserve(record, Reservation(Purpose.ADMITTED, result.slots, now))]
        where = domains.where(record.plans.constraint, placement)
        record.last_message = messages.admitted(len(chosen), len(result.per_node()), where)
        log.info("gang %s admitted: %s", gang, record.last_message)
        # Like the in-tree plugin activating siblings: members a gang rule rejected wait in the scheduler's
        # unschedulable pool; wake those (the others are still queued: no API write).
        rejected = self.waitlist.take_rejected(gang)
        effects += [Count("admitted"), Wake([p for p in pending if p.uid in rejected]),
                    Tell(chosen, "Normal", "GangAdmitted", messages.admitted_event(gang, len(chosen), where))]
        if not placement.first_choice:
            effects.append(Tell(chosen, "Warning", "GangTopologyFallback",
                                messages.topology_fallback(gang, record.plans.constraint.preferred, where)))
        effects.append(Publish(gang, GangStatus(GangPhase.SCHEDULING, record.last_message, placed, policy.min_count)))
        return effects

    def check_never_fits(self, record: GangRecord, members: list[PodRecord]) -> list[Effect]:
        """The never-fits check for a gang no filter request planned: kube-scheduler's own filters may
        reject every member before the extender is called (a member larger than any node), so the order's
        pass asks it for the gangs it finds that way, and again for gangs already found never to fit (a
        node added may change the answer). A first verdict is told (Event, status, ``explain``)."""
        constraint = self.placement.constraint_of(record.policy, members)
        if isinstance(constraint, TopologyProblem):
            return []  # told by the filter's plan; nothing to check against
        record.plans.constraint, record.plans.constraint_known = constraint, True
        effects: list[Effect] = []
        never = self._never_fits(record, members, effects)
        if never is not None and effects:
            effects.append(Publish(record.key, GangStatus(GangPhase.WAITING, never.message)))
        return effects

    def _never_fits(self, record: GangRecord, members: list[PodRecord], effects: list[Effect]) -> Verdict | None:
        """The gang's never-fits verdict, checked again when the nodes or its members changed (a first
        verdict is told in an Event, added to ``effects``); None: it can fit an empty cluster."""
        plans = record.plans
        generation = self.mirror.node_set_generation
        inputs = (*(p.uid for p in members), plans.constraint)
        if plans.never_fits_checked != generation or plans.never_fits_inputs != inputs:
            chosen = planner.pick_for_reservation(members, record.policy.min_count)
            result = planner.plan(chosen, self.mirror.nodes.values(), lambda node: node.allocatable,
                                  lambda node: node.allocatable.get(CPU, 0))
            fresh = None if result.complete else Verdict(Code.WAIT_UNRESOLVABLE, messages.never_fits(
                record.key, len(result.slots), record.policy.min_count, len(self.mirror.nodes), result.blocking))
            if fresh is None and plans.constraint.required:
                why = domains.never_fits(chosen, self.mirror.nodes.values(), plans.constraint,
                                         self.placement.placed_nodes(members))
                if why is not None:
                    fresh = Verdict(Code.WAIT_UNRESOLVABLE, messages.never_fits_topology(record.key, why))
            if fresh is not None and plans.never_fits is None:
                effects += [Count("never_fits"), Tell(members, "Warning", "GangNeverFits", fresh.message)]
            plans.never_fits, plans.never_fits_checked, plans.never_fits_inputs = fresh, generation, inputs
        if plans.never_fits is not None:
            record.last_message = plans.never_fits.message
        return plans.never_fits

    # ------------------------------------------------------------------- the barrier's budget
    def held_demand(self) -> int:
        """Binds that gangs may hold at once: held now, plus reserved members still to come."""
        return sum(len(r.waiting()) + (r.reserved if r.admitted else 0) for r in self.registry.holding())

    def barrier_room(self, gang: GangKey, needed: int) -> Verdict | None:
        """None when the gang's ``needed`` held binds fit the thread budget beside gangs in flight."""
        most = self.settings.max_release_members
        if most is not None and needed > most:
            return Verdict(Code.WAIT_UNRESOLVABLE, messages.release_too_large(gang, needed, most))
        limit = self.settings.max_held_binds
        if limit is None:
            return None
        if needed > limit:
            return Verdict(Code.WAIT_UNRESOLVABLE, messages.holds_too_many(gang, needed, limit))
        if self.registry.demand_bound() + needed <= limit:  # room even if every held and reserved place counted
            return None
        in_flight = self.held_demand()
        if in_flight + needed > limit:
            return Verdict(Code.WAIT_RESOLVABLE, messages.barrier_full(gang, in_flight, needed, limit))
        return None

"""GangExpiry: the ledger's clock: deadlines, held binds answered in time, back-off, policy changes (no I/O).

Owns: when a gang's attempt times out (its reservation released, back-off doubled), recycling holds
before kube-scheduler's timeout, answering every hold while the view of the cluster is stale, the
periodic sweep (forgetting gangs with no members, waking gangs whose back-off ended) and following
group policy changes (a lowered minCount may complete a quorum: the sweep returns it to be bound).
Must not: call the API server, block or bind: the engine binds what ``sweep`` returns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from extender.cluster.model import (
    GangKey,
    GangPhase,
    GangStatus,
)
from extender.gangs.book import GangBook, Release
from extender.gangs.state import GangState, Hold

log = logging.getLogger(__name__)

MIN_OFFERS = 2
"""Member filter requests an attempt must have seen before a reserved node it never offered is avoided."""

MAX_AVOIDED = 10_000
"""Nodes one gang avoids at most (more starts the set afresh): bounded by the cluster anyway."""


class GangExpiry(GangBook):
    """The time-driven half of the ledger, over the book."""

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
            message = self._timeout_message(state, waiting)
            for hold in waiting:
                self._answer(state, hold, message)
            self._reset(state)
            state.timeouts += 1
            backoff = min(self.backoff_seconds * 2 ** (state.timeouts - 1), self.max_backoff_seconds)
            state.backoff_until = self._due_by(self.clock() + backoff)
            state.woken_after_backoff = False
            state.last_message = message
            self.counters["timeouts"] += 1
            log.warning("%s", message)
            self.on_event(self.mirror.members(gang), "Warning", "GangTimeout", message)
            self.on_status(gang, GangStatus(GangPhase.WAITING, message, 0, state.policy.min_count))

    def _timeout_message(self, state: GangState, waiting: list[Hold]) -> str:
        """What a timed-out attempt tells (and whatever else it must tell, for the gated mode)."""
        return (f"gang {state.gang} timed out after {self.timeout_for(state.policy):g}s with "
                f"{len(waiting)} member(s) held of {state.policy.min_count} needed; "
                "released its reservation and backing off") + self._judge_offers(state)

    def note_offered(self, gang: GangKey, offered: Iterable[str]) -> None:
        """A member's filter request offered these of the gang's reserved nodes (kube-scheduler sends only
        nodes its own filters passed): the evidence ``_judge_offers`` reads when the attempt times out."""
        with self.lock:
            state = self._gangs.get(gang)
            if state is not None and state.admitted_at is not None:
                state.filters_seen += 1
                state.offered.update(offered)

    def _judge_offers(self, state: GangState) -> str:
        """At a timeout: the reserved nodes kube-scheduler never offered in ``MIN_OFFERS`` or more member
        filter requests join the nodes the gang's plans avoid until an attempt succeeds, so a
        reservation its own filters reject (inter-pod affinity, ports, volumes: what the plan does not
        model) is planned away instead of waited on forever. Avoiding is a preference: a plan that
        does not fit without them is made with them (``topology.place_gang``). Returns what to add to
        the timeout message."""
        never = self.mirror.reserved_nodes(state.gang) - state.offered if state.filters_seen >= MIN_OFFERS else set()
        state.offered, state.filters_seen = set(), 0
        if not never:
            return ""
        state.avoid = (state.avoid | never) if len(state.avoid) < MAX_AVOIDED else frozenset(never)
        shown = ", ".join(sorted(never)[:5]) + (", ..." if len(never) > 5 else "")
        return f"; kube-scheduler never offered its reserved node(s) {shown}: the next plans avoid them"

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

    # -------------------------------------------------------------- sweep and policy changes
    def sweep(self, min_interval: float = 0.0, *, release: bool = False) -> list[Release]:
        """Follow policy changes, expire overdue gangs and forget gangs with no members left.

        With ``release`` (the caller binds: ``Engine.sweep``), returns the quorums a policy change
        completed, each marked releasing: the caller must bind every one and report with ``released``.
        Without it nothing is marked, and the next bind request of such a gang completes its quorum.

        ``min_interval`` 0 (the background tick, every second) walks every gang the ledger tracks.
        Otherwise (a filter, with a short interval) the walk is skipped if one ran less than
        ``min_interval`` ago, and walks only the gangs that are not settled (``_busy_states``): walking
        every gang on every request was a third of the filter's time in a backlog of hundreds of
        gangs, and grew with every gang completed (upstream's 3,000 gangs of 3); and it is skipped until
        the earliest time anything walked falls due (``_due_by``), so gangs left with no member are
        forgotten by the tick. Held binds expire themselves at their deadline in any case."""
        with self.lock:
            releases = self._follow_policy_changes(release)
            now = self.clock()
            if now - self._swept_at < min_interval:
                return releases
            full = min_interval <= 0
            if not full and now < self._next_due:
                return releases  # nothing falls due before then; gangs left with no member wait for the tick
            self._swept_at = now
            next_due = float("inf")
            for state in list(self._gangs.values()) if full else self._busy_states():
                gang = state.gang
                due = self._due(state)
                if due is not None and now >= due:
                    self.expire_if_due(gang)
                if not state.woken_after_backoff and now >= state.backoff_until:
                    state.woken_after_backoff = True
                    self.on_wake([p for p in self.mirror.members(gang) if not self.mirror.placement(p.uid)])
                if not state.holds and not self.mirror.member_count(gang):
                    self._reset(state)
                    del self._gangs[gang]
                    continue
                due = self._due(state)
                next_due = min(next_due, float("inf") if due is None else due,
                               float("inf") if state.woken_after_backoff else state.backoff_until)
            self._next_due = next_due
            if not full:
                return releases
            self._rebuild_busy()
            if self._verdicts:
                for gang in [g for g in self._verdicts if g in self._gangs or not self.mirror.member_count(g)]:
                    del self._verdicts[gang]
            for gang in [g for g in self._rejected if not self.mirror.member_count(g)]:
                del self._rejected[gang]
            return releases

    def _follow_policy_changes(self, release: bool) -> list[Release]:
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
            placed = self.placed(members, state)
            log.info("gang %s: policy changed from minCount %d to %s", gang, state.policy.min_count,
                     policy.min_count if policy else "none (not a gang)")
            state.never_fits_checked = -1
            state.constraint_known = False  # the group's topology constraint may have changed too
            if policy is None:  # no longer a gang (or gone): nothing may stay held
                if waiting and release and self._release_now(state, waiting):
                    releases.append(Release(gang, waiting))
                continue
            state.policy = policy
            if waiting and len(placed) + len(waiting) >= policy.min_count:
                if release and self._release_now(state, waiting):
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

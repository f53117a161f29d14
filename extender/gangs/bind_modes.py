"""Bind modes: who binds a gang's members, chosen once when the extender is built (a strategy; no I/O).

``Barrier`` (the default, ``--bind-mode barrier``): gang-extender is kube-scheduler's binder and holds
each member's bind at its gang's barrier until the quorum is complete. ``FilterGated``
(``--bind-mode filter-gated``): another binder binds (a GPU-sharing or storage extender, or
kube-scheduler's own); gang-extender gates at filter only: a member passes once its gang is admitted,
and then only to one reserved place.

Owns, for the filter-gated mode: each admitted member's *claim* on one reserved place (its filter is
answered with that node alone; a place is left for it only beside the places of the other members still
to be bound, matched slot by slot, so two members are never sent to one place); following the binds
others make (bound members are counted before the clock is read: each new one moves the attempt's
deadline, minCount bound completes the gang, also after a timeout); holding off a timeout while a member
sent to its place in the last ``hold_seconds`` may still be being bound (at most that long past the
deadline); and a gang left *partly bound* at its deadline (a Binding cannot be undone): a
``GangPartiallyBound`` Warning and the counter ``partially_bound`` (per attempt), the places members
were sent to and never bound avoided by the next plans, then as any timeout. Must not: bind or call
the API server; nothing outside this module asks which mode runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from extender.cluster.fit import shortfall
from extender.gangs.attempts import Attempts
from extender.gangs.effects import Count, Effect, Publish, Tell, Wake
from extender.gangs.placement import GangPlacement
from extender.gangs.record import GangRecord, Hold
from extender.gangs.registry import GangRegistry
from extender.gangs.settings import GangSettings
from extender.model import messages
from extender.model.cluster import PodRecord
from extender.model.gang import GangPhase, GangStatus
from extender.model.quantity import CPU, Resources

log = logging.getLogger(__name__)

FOLLOW_INTERVAL = 0.05
"""Seconds between two walks over admitted gangs to count their bound members (filter-gated)."""


class BindMode(Protocol):
    """What differs between the modes: who binds, where a member's filter may send it, what the sweep
    follows, and what a timeout says."""

    holds_binds: bool  # whether binds are held at a barrier (the thread budget and the Lease intents apply)

    def bind_refusal(self, namespace: str, name: str) -> str:
        """Why the bind verb refuses every bind ("" : it binds)."""

    def steer(self, record: GangRecord, pod: PodRecord, fitting: list[str]) -> list[str]:
        """Of ``fitting`` (requested nodes where the member fits in its gang's reservation, in the
        request's order), where its filter may send it."""

    def follow(self, min_interval: float) -> list[Effect]:
        """The sweep's first step: follow what other binders did."""

    def holds_off_timeout(self, record: GangRecord, now: float) -> bool:
        """Whether a gang past its deadline is not timed out yet."""

    def timeout_message(self, record: GangRecord, waiting: Sequence[Hold]) -> tuple[str, list[Effect]]:
        """What a timed-out attempt tells, and whatever else it must tell."""


class Barrier:
    """gang-extender binds: every member's bind is held at its gang's barrier."""

    holds_binds = True

    def __init__(self, registry: GangRegistry, placement: GangPlacement, attempts: Attempts, settings: GangSettings,
                 clock: Callable[[], float]) -> None:
        self.registry = registry
        self.attempts = attempts
        self.settings = settings

    def bind_refusal(self, namespace: str, name: str) -> str:
        return ""

    def steer(self, record: GangRecord, pod: PodRecord, fitting: list[str]) -> list[str]:
        return fitting

    def follow(self, min_interval: float) -> list[Effect]:
        self.registry.take_bound_gangs()  # nothing to follow: the barrier binds; keep the set from growing
        return []

    def holds_off_timeout(self, record: GangRecord, now: float) -> bool:
        return False

    def timeout_message(self, record: GangRecord, waiting: Sequence[Hold]) -> tuple[str, list[Effect]]:
        message = messages.timed_out_held(record.key, self.settings.timeout_for(record.policy), len(waiting),
                                          record.policy.min_count) + self.attempts.judge_offers(record)
        return message, []


def _size(resources: Resources) -> tuple[int, int]:
    return resources.get(CPU, 0), resources.get("memory", 0)


def place_left(slots: list[Resources], others: list[Resources], requests: Resources) -> bool:
    """Whether one of a node's reserved ``slots`` holds ``requests`` once the ``others`` (the requests of
    members that claimed places on it) each took the smallest slot that holds them, largest first."""
    left = list(slots)
    for other in sorted(others, key=_size, reverse=True):
        holding = [kept for kept in left if shortfall(other, kept) is None]
        if holding:
            left.remove(min(holding, key=_size))
    return any(shortfall(requests, kept) is None for kept in left)


class FilterGated:
    """Another binder binds: members are steered at filter, one to each reserved place, and followed."""

    holds_binds = False

    def __init__(self, registry: GangRegistry, placement: GangPlacement, attempts: Attempts, settings: GangSettings,
                 clock: Callable[[], float]) -> None:
        self.registry = registry
        self.placement = placement
        self.mirror = placement.mirror
        self.attempts = attempts
        self.settings = settings
        self.clock = clock
        self._followed_at = float("-inf")

    def bind_refusal(self, namespace: str, name: str) -> str:
        return messages.never_binds(namespace, name)

    # ---------------------------------------------------------------------------- claims
    def steer(self, record: GangRecord, pod: PodRecord, fitting: list[str]) -> list[str]:
        """One node where a reserved place for the member is left beside the places of the other members
        still to be bound (the one it claimed before, while that is offered and holds it, else the first
        such), now claimed; none (or a pod the pod watch has not delivered: its claim could not be
        counted): []."""
        if not record.admitted or record.reservation is None or self.mirror.pod_by_uid(pod.uid) is None:
            return []
        claims = record.attempt.claims
        slots = record.reservation.slots
        held = claims[pod.uid][0] if pod.uid in claims else None
        for node in ([held] if held in fitting else []) + [n for n in fitting if n != held]:
            others = [other.requests for uid, (at, _) in claims.items()
                      if at == node and uid != pod.uid and (other := self._claimant(uid)) is not None]
            if place_left([kept for at, kept in slots if at == node], others, pod.requests):
                claims[pod.uid] = (node, self.clock())  # when it was last sent there
                return [node]
        return []

    def _claimant(self, uid: str) -> PodRecord | None:
        """The member whose claim still holds a place: it exists, is not finished and is not bound yet."""
        record = self.mirror.pod_by_uid(uid)
        return record if record is not None and not record.terminal and not self.mirror.placement(uid) else None

    # ------------------------------------------------------------------------ following binds
    def follow(self, min_interval: float) -> list[Effect]:
        """Binds seen before the clock is read: a bind made in time counts in time. A filter's sweep
        follows the gangs the binder bound a member of since the last one; the tick's (min_interval 0)
        every gang, for what no bind shows (a lowered minCount)."""
        now = self.clock()
        full = min_interval <= 0
        if not full and now - self._followed_at < max(min_interval, FOLLOW_INTERVAL):
            return []
        self._followed_at = now
        bound = self.registry.take_bound_gangs()
        effects: list[Effect] = []
        # an admitted gang; or one that timed out, whose members passed filter and may still bind
        for record in [r for r in self.registry.busy() if (r.admitted or r.timeouts) and (full or r.key in bound)]:
            effects += self.follow_binds(record, now)
        return effects

    def follow_binds(self, record: GangRecord, now: float) -> list[Effect]:
        """Count the gang's bound members: minCount completes it; admitted, more than last time moves its
        deadline (the binder is making progress)."""
        members = self.mirror.members(record.key)
        placed = self.placement.placed(members, record)
        if len(placed) >= record.policy.min_count:
            return self._complete(record, placed, members)
        if record.admitted and len(placed) > record.attempt.bound_seen:
            record.attempt.bound_seen = len(placed)
            record.attempt.deadline = self.registry.due_by(now + self.settings.timeout_for(record.policy), record)
            record.last_message = messages.gated_progress(len(placed), record.policy.min_count)
        return []

    def _complete(self, record: GangRecord, placed: list[PodRecord], members: list[PodRecord]) -> list[Effect]:
        effects = self.attempts.reset(record)
        record.timeouts, record.plans.avoid, record.turn.waiting_since = 0, frozenset(), None
        record.completed += 1
        record.last_message = messages.gated_complete(len(placed))
        log.info("gang %s: %s", record.key, record.last_message)
        return [*effects, Count("completed"),
                Tell(placed, "Normal", "GangBound", messages.gang_said(record.key, record.last_message)),
                Publish(record.key, GangStatus(GangPhase.SCHEDULED, record.last_message, len(placed),
                                               record.policy.min_count)),
                Wake([p for p in members if not self.mirror.placement(p.uid)])]  # members beyond minCount

    # ----------------------------------------------------------------------------- timeouts
    def holds_off_timeout(self, record: GangRecord, now: float) -> bool:
        """A gang past its deadline is not timed out while a member its filter sent to a claimed place in
        the last ``hold_seconds`` may still be being bound (its place would go to others), but for no
        longer than ``hold_seconds`` past the deadline."""
        deadline = record.attempt.deadline
        if deadline is None or deadline > now:
            return False
        sent = max((at for uid, (_, at) in record.attempt.claims.items() if self._claimant(uid)), default=None)
        return sent is not None and now < min(sent, deadline) + self.settings.hold_seconds

    def timeout_message(self, record: GangRecord, waiting: Sequence[Hold]) -> tuple[str, list[Effect]]:
        members = self.mirror.members(record.key)
        placed = self.placement.placed(members, record)
        needed = record.policy.min_count
        timeout = self.settings.timeout_for(record.policy)
        stuck = {node for uid, (node, _) in record.attempt.claims.items() if self._claimant(uid)}
        if stuck:  # places members were sent to and never bound (the binder refuses them): avoided next
            self.attempts.avoid(record, stuck)
        message = (messages.timed_out_bound(record.key, timeout, len(placed), needed)
                   + self.attempts.judge_offers(record))
        if stuck:
            message += messages.never_bound_there(sorted(stuck))
        effects: list[Effect] = []
        if 0 < len(placed) < needed:
            partial = messages.partly_bound(record.key, len(placed), needed, timeout)
            log.warning("%s", partial)
            effects += [Count("partially_bound"), Tell(members, "Warning", "GangPartiallyBound", partial)]
        return message, effects

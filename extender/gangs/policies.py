"""PolicyChanges: following group policy changes (1.37 PodGroups: ``minCount`` is mutable; no I/O).

Owns: re-evaluating the gangs whose group appeared or changed its policy: once the quorum gate passes, the
members kube-scheduler parked are woken (those a gang rule turned away here, and those it marked
unschedulable, which a restarted extender never saw turned away; members never tried are still queued or
quorum-gated and need no API write); a gang whose held and placed members reach the new ``minCount``
released at once, with no bind request needed to notice it (a ``Release``, for the engine to bind); an
admitted gang keeping only the reservation slots it still needs, and one that needs more than it
reserved and holds nothing yet planned again at its next filter; a group that is no longer a gang
letting its held members through. Must not: bind, call the API server or block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from extender.cluster.mirror import ClusterMirror
from extender.gangs.admission import quorum
from extender.gangs.attempts import Attempts
from extender.gangs.effects import Effect, Release, Reserve, Wake, WakeBlocked
from extender.gangs.placement import GangPlacement
from extender.gangs.record import GangRecord, Hold
from extender.gangs.registry import GangRegistry
from extender.gangs.waitlist import Waitlist
from extender.model import messages
from extender.model.gang import GangKey

log = logging.getLogger(__name__)


class PolicyChanges:
    """The gangs whose group's policy changed, followed."""

    def __init__(self, registry: GangRegistry, placement: GangPlacement, attempts: Attempts, waitlist: Waitlist,
                 clock: Callable[[], float]) -> None:
        self.registry = registry
        self.waitlist = waitlist
        self.placement = placement
        self.mirror: ClusterMirror = placement.mirror
        self.attempts = attempts
        self.clock = clock

    def changed(self) -> list[GangKey]:
        """The gangs whose group appeared or changed its policy since the last call, in order."""
        changed = self.mirror.take_policy_changes()
        if not changed:
            return []
        gangs = ({g for g in self.mirror.gangs() if g.group in changed}
                 | {g for g in self.registry.gangs() if g.group in changed})
        return sorted(gangs)

    def follow(self, gang: GangKey, release: bool) -> list[Effect]:
        """One changed gang's effects: with ``release`` (the caller binds), the quorum the change completed,
        marked releasing (a ``Release``); without it nothing is marked, and the next bind request of such a
        gang completes its quorum."""
        members = self.mirror.members(gang)
        exists, policy = self.mirror.gang_policy(gang)
        effects: list[Effect] = []
        if quorum(gang, exists, policy, len(members)).passes:  # short of it, a woken member is turned away again
            rejected = self.waitlist.take_rejected(gang)
            effects.append(Wake([p for p in members if (p.uid in rejected or p.unschedulable)
                                 and not self.mirror.placement(p.uid)]))
        record = self.registry.get(gang)
        if record is None:
            return effects
        waiting = record.waiting()
        placed = self.placement.placed(members, record)
        log.info("gang %s: policy changed from minCount %d to %s", gang, record.policy.min_count,
                 policy.min_count if policy else "none (not a gang)")
        record.plans.never_fits_checked = -1
        record.plans.constraint_known = False  # the group's topology constraint may have changed too
        if policy is None:  # no longer a gang (or gone): nothing may stay held
            return self._release(record, waiting, release, effects)
        record.policy = policy
        if waiting and len(placed) + len(waiting) >= policy.min_count:
            return self._release(record, waiting, release, effects)
        if record.admitted and record.reservation is not None:
            needed = policy.min_count - len(placed) - len(waiting)
            if needed < record.reserved:  # the slots given back may fit pods turned away for want of room
                effects += [Reserve(record, record.reservation.first(needed)), WakeBlocked()]
            elif needed > record.reserved and not waiting:
                effects += self.attempts.reset(record)
        return effects

    def _release(self, record: GangRecord, waiting: list[Hold], release: bool,
                 effects: list[Effect]) -> list[Effect]:
        """Release the quorum ``waiting`` that a policy change completed, if there is one, the caller binds
        and it may be bound now (otherwise the next bind request completes it, or the gang is planned
        again)."""
        if not waiting or not release:
            return effects
        may, more, _ = self.attempts.may_release(record, waiting, self.clock())
        if not may:
            return effects + more
        record.last_message = messages.released_after_policy_change(len(waiting))
        return [*effects, Release(record.key, waiting)]

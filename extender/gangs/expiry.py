"""Expiry: the ledger's clock: deadlines, held binds answered in time, back-off (no I/O).

Owns: when a gang's attempt times out (its holds answered, its reservation released, back-off doubled),
recycling holds before kube-scheduler's timeout, answering every hold while the view of the cluster is
stale, and what the sweep asks of one gang (expire it when due, wake its members when its back-off ends,
whether it can be forgotten, when it next falls due). Must not: call the API server, block or bind, or
walk the gangs itself (the ledger's sweep does, in one explicit sequence).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from extender.cluster.mirror import ClusterMirror
from extender.gangs.attempts import Attempts
from extender.gangs.bind_modes import BindMode
from extender.gangs.effects import Answer, Count, Effect, Publish, Tell, Wake
from extender.gangs.record import GangRecord
from extender.gangs.registry import GangRegistry
from extender.gangs.settings import GangSettings
from extender.model.gang import GangPhase, GangStatus

log = logging.getLogger(__name__)


class Expiry:
    """Deadlines, recycled holds and back-off."""

    def __init__(self, registry: GangRegistry, attempts: Attempts, mode: BindMode, settings: GangSettings,
                 clock: Callable[[], float]) -> None:
        self.registry = registry
        self.mirror: ClusterMirror = registry.mirror
        self.attempts = attempts
        self.mode = mode
        self.settings = settings
        self.clock = clock
        self._swept_at = float("-inf")  # when the sweep last walked the gangs

    @staticmethod
    def due(record: GangRecord) -> float | None:
        """When ``expire_if_due`` next has something to do for the gang (None: nothing pending)."""
        times = [hold.answer_by for hold in record.waiting()]
        if record.attempt.deadline is not None:
            times.append(record.attempt.deadline)
        return min(times, default=None)

    def expire_if_due(self, record: GangRecord) -> list[Effect]:
        """Time out the gang's current attempt if its deadline passed, or recycle holds that waited as long
        as one may while the gang keeps progressing (called by waiters and the sweep).

        The deadline is ``timeout`` after the last member new to the attempt reached the barrier (or after
        admission), so a gang whose members keep arriving is not timed out however long the scheduler
        takes to reach all of them. A single bind is never held past its ``answer_by`` (kube-scheduler's
        ``httpTimeout`` less a margin, from its arrival): when one hold reaches it, every hold of the gang
        is answered with a retry at once, so they come back together (after kube-scheduler's back-off)
        rather than one by one; the gang keeps its reservation, so the members come back to the same
        capacity."""
        now = self.clock()
        if self.mode.holds_off_timeout(record, now):
            return []
        waiting = record.waiting()
        if not waiting and record.holds:
            return []  # a released quorum is being bound; its outcome decides, not the clock
        deadline = record.attempt.deadline
        if deadline is None or now < deadline:
            if any(now >= h.answer_by for h in waiting):
                return self.attempts.recycle(record, waiting, now)
            return []
        message, effects = self.mode.timeout_message(record, waiting)
        effects += [Answer(record, hold, message) for hold in waiting]
        effects += self.attempts.reset(record)
        record.timeouts += 1
        backoff = min(self.settings.backoff_seconds * 2 ** (record.timeouts - 1), self.settings.max_backoff_seconds)
        record.backoff_until = self.registry.due_by(self.clock() + backoff, record)
        record.woken_after_backoff = False
        record.last_message = message
        log.warning("%s", message)
        effects += [Count("timeouts"), Tell(self.mirror.members(record.key), "Warning", "GangTimeout", message),
                    Publish(record.key, GangStatus(GangPhase.WAITING, message, 0, record.policy.min_count))]
        return effects

    def answer_all_held(self, message: str) -> tuple[int, list[Effect]]:
        """Answer every bind held at any barrier with ``message`` (a retry that keeps its place): the
        extender cannot stand behind a release while its view of the cluster is stale. Returns how many,
        and the effects."""
        now, answered, effects = self.clock(), 0, []
        for record in self.registry.all():
            waiting = record.waiting()
            if waiting:
                effects += self.attempts.recycle(record, waiting, now, message)
                answered += len(waiting)
        return answered, effects

    # ------------------------------------------------------------------------ the sweep's part
    def walk_due(self, min_interval: float) -> bool:
        """Whether the sweep walks the gangs now: the tick (``min_interval`` 0) always; a filter's sweep at
        most every ``min_interval`` and only once the earliest thing a walk acts on falls due (gangs left
        with no member wait for the tick). Stamps the walk when it is due."""
        now = self.clock()
        if now - self._swept_at < min_interval:
            return False
        if min_interval > 0 and now < self.registry.next_due:
            return False
        self._swept_at = now
        return True

    def wake_after_backoff(self, record: GangRecord, now: float) -> list[Effect]:
        """Once the gang's back-off has ended, wake its members not placed (once)."""
        if record.woken_after_backoff or now < record.backoff_until:
            return []
        record.woken_after_backoff = True
        return [Wake([p for p in self.mirror.members(record.key) if not self.mirror.placement(p.uid)])]

    def forgettable(self, record: GangRecord) -> bool:
        """Nothing held and no member left: the record can go."""
        return not record.holds and not self.mirror.member_count(record.key)

    def next_due(self, record: GangRecord) -> float:
        """When the sweep next has something to do for the gang (infinity: nothing)."""
        due = self.due(record)
        return min(float("inf") if due is None else due,
                   float("inf") if record.woken_after_backoff else record.backoff_until)

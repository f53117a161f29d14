"""Running the evictions the ledger decides for a preempting gang (no HTTP, no kubernetes client).

Owns: running the eviction orders a sweep of the ledger returns, each on a thread of its own outside
the mirror's lock, one victim unit after another, each unit as a unit: its disruption budgets checked
for all of its pods again just before its first eviction (nothing of it is evicted if they do not allow
all of it now); a unit left part evicted (a budget or the API server refused some of its pods after
others went) retried, only those pods, a few times with a pause, to the end; and if it still is, told
(``GangPartiallyEvicted`` on the victim, a counter). A unit that fails stops the order, so no further
unit is disturbed for a preemption that will not happen; the ledger is told what failed. Must not:
choose victims (``gangs.victims``) or evict on a replica that does not lead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from extender.engine.ports import Evictor
from extender.gangs.effects import EvictionOrder
from extender.gangs.ledger import GangLedger
from extender.gangs.victims import VictimUnit
from extender.model import messages
from extender.model.cluster import PodRecord

log = logging.getLogger(__name__)

DONE = frozenset({"evicted", "gone"})
"""Outcomes that leave the pod on its way out (or already gone)."""

RETRIES = 3
"""Attempts, after the first, to evict what is left of a unit part evicted."""

RETRY_PAUSE_SECONDS = 2.0
"""The pause before the first retry (doubling after each): a budget may allow one more as pods end."""


class Evictions:
    """Start the ledger's eviction orders in the background."""

    def __init__(self, ledger: GangLedger, evictor: Evictor, may_act: Callable[[], bool],
                 pause: Callable[[float], None] = time.sleep) -> None:
        self.ledger = ledger
        self.evictor = evictor
        self.may_act = may_act
        self.pause = pause

    def start(self, orders: Sequence[EvictionOrder]) -> None:
        for order in orders:
            threading.Thread(target=self.run, args=(order,), name="gang-evict", daemon=True).start()

    def run(self, order: EvictionOrder) -> None:
        """Evict ``order``'s units in turn; report the pods that were not evicted."""
        failed: list[tuple[PodRecord, str]] = []
        for unit in order.units:
            if not self.may_act():
                failed += [(pod, messages.EVICTOR_NOT_LEADING) for pod in unit.pods]
                break
            if not self.ledger.eviction_wanted(order.gang):
                log.info("preemption for gang %s: no longer wanted, %s and later units spared", order.gang, unit.key)
                break
            failed += self._evict_unit(order, unit)
            if failed:
                break
        if failed:
            log.warning("preemption for gang %s: %d eviction(s) failed", order.gang, len(failed))
        self.ledger.evictions_done(order.gang, failed)

    def _evict_unit(self, order: EvictionOrder, unit: VictimUnit) -> list[tuple[PodRecord, str]]:
        """Evict ``unit`` whole: its budgets checked for all of it first; what a refusal midway leaves is
        retried to the end, then told. Returns the pods not evicted and why."""
        allowed, why = self.ledger.eviction_allowed(unit.pods)
        if not allowed:
            return [(pod, messages.eviction_outcome("refused-budget", why)) for pod in unit.pods]
        preemptor = messages.unit_gang(order.gang)
        outcomes = self.evictor.evict(unit.pods, preemptor, order.reason)
        left = [o for o in outcomes if o.outcome not in DONE]
        went = len(unit.pods) - len(left)
        pause = RETRY_PAUSE_SECONDS
        for _ in range(RETRIES):
            if not left or not went or not self.may_act():  # nothing of it went: it is whole, nothing to finish
                break
            self.pause(pause)
            pause *= 2
            outcomes = self.evictor.evict([o.pod for o in left], preemptor, order.reason)
            left = [o for o in outcomes if o.outcome not in DONE]
        failed = [(o.pod, messages.eviction_outcome(o.outcome, o.message)) for o in left]
        if failed and went:
            self.ledger.victim_partly_evicted(unit, [pod for pod, _ in failed], failed[0][1])
        return failed

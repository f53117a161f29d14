"""Running the evictions the ledger decides for a preempting gang (no HTTP, no kubernetes client).

Owns: running the eviction orders a sweep of the ledger returns, each on a thread of its own outside
the mirror's lock, one victim unit after another (a unit whose eviction fails stops the order, so no
further unit is disturbed for a preemption that will not happen), and telling the ledger what failed.
Must not: choose victims (``gangs.victims``), check disruption budgets or the eviction bound (the
ledger and the ``Evictor`` do), or evict on a replica that does not lead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from extender.engine.ports import Evictor
from extender.gangs.effects import EvictionOrder
from extender.gangs.ledger import GangLedger
from extender.model import messages
from extender.model.cluster import PodRecord

log = logging.getLogger(__name__)

DONE = frozenset({"evicted", "gone"})
"""Outcomes that leave the pod on its way out (or already gone)."""


class Evictions:
    """Start the ledger's eviction orders in the background."""

    def __init__(self, ledger: GangLedger, evictor: Evictor, may_act: Callable[[], bool]) -> None:
        self.ledger = ledger
        self.evictor = evictor
        self.may_act = may_act

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
            outcomes = self.evictor.evict(unit.pods, messages.unit_gang(order.gang), order.reason)
            failed += [(o.pod, messages.eviction_outcome(o.outcome, o.message))
                       for o in outcomes if o.outcome not in DONE]
            if failed:
                break
        if failed:
            log.warning("preemption for gang %s: %d eviction(s) failed", order.gang, len(failed))
        self.ledger.evictions_done(order.gang, failed)

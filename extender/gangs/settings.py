"""GangSettings: the numbers the parts of the ledger work with (a frozen value).

Owns: the barrier timeout and back-off, how long a bind may be held, the barrier's budget (held binds,
members one release may have), the longest wait before capacity drains for the head gang, and the
topology levels a preferred constraint falls back along. Must not: read flags or the environment
(``wiring`` builds it from ``config.Settings``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from extender.model.gang import GangPolicy, TopologyConstraint


@dataclass(frozen=True, slots=True)
class GangSettings:
    timeout_seconds: float = 30.0      # a gang's attempt, unless its group says otherwise
    backoff_seconds: float = 10.0      # after the first timeout, doubling after each
    max_backoff_seconds: float = 300.0
    # The longest a bind may be held, counted from its request's arrival: kube-scheduler's httpTimeout
    # less a margin, so the answer (a release's Bindings included) reaches the caller while it still
    # waits. A gang's own timeout bounds its attempt, never one hold.
    hold_seconds: float = 29.0
    # Each bind held at a barrier occupies a worker thread: admitting more held-bind demand than there
    # are threads starves filter requests and times every gang out. None: no limit.
    max_held_binds: int | None = None
    # The most members one release may have (its intent must fit on the Lease with leader election); a
    # gang needing more fails fast at admission instead of being admitted, held and never released.
    max_release_members: int | None = None
    max_wait_seconds: float = 300.0    # at the head of the order, before capacity drains for it
    topology_levels: tuple[str, ...] = ()  # --topology-levels, widest first
    # A constraint's preferred fallback order (``cluster.levels``); default: ``topology_levels``.
    levels: Callable[[TopologyConstraint], tuple[str, ...]] | None = field(default=None, compare=False)

    def timeout_for(self, policy: GangPolicy) -> float:
        return policy.timeout_seconds or self.timeout_seconds

    def levels_for(self, constraint: TopologyConstraint) -> tuple[str, ...]:
        return self.levels(constraint) if self.levels is not None else self.topology_levels

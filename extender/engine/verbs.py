"""Engine: the extender's use cases: filter, prioritize and bind (no HTTP, no kubernetes client).

Owns: turning one validated extender request into an answer, by combining the request pod with the
mirror (cluster state), the ledger (gang lifecycle) and the filter cache (signature -> per-node
verdicts); the bind verb and releases come from ``BindingVerbs`` below it. Must not: parse HTTP or
JSON, import Flask or kubernetes, or call the API server.

Hot path (filter): one signature, one cache lookup, a refresh of only the nodes changed since the
cached entry, then one C-level membership pass over the request's node names. An admitted gang member
is steered to its reservation before any of that, evaluating only the nodes that hold it. The gang
gate and the verdicts are one step under the mirror's lock.

Trust: a request is believed for nothing about the cluster. Verdicts come from the mirror only (a
node it does not know is infeasible, and no state is kept for such a name).
"""

from __future__ import annotations

import logging
from typing import Any

from extender.cluster.cache import FIT, FilterCache, NodeVerdicts
from extender.cluster.facts import PodFacts
from extender.cluster.fit import placement_failure, shortfall
from extender.cluster.mirror import ClusterMirror
from extender.cluster.model import Code, GangKey, Verdict
from extender.engine import preemption
from extender.engine.binding import BindingVerbs
from extender.engine.evicting import Evictions
from extender.engine.ports import Binder, Evictor
from extender.engine.requests import (
    FilterArgs,
    FilterResult,
    PreemptArgs,
    PreemptResult,
    check_node_names,
    request_record,
)
from extender.errors import GroupError
from extender.gangs.ledger import GangLedger
from extender.gangs.topology import Domain

log = logging.getLogger(__name__)

FIT_RESERVED = "\x00reserved"
"""Verdict (never cached): the member fits inside its own gang's reservation on the node (preferred)."""

FILTER_SWEEP_INTERVAL = 0.05
"""Seconds between two walks over every gang (expiry, back-off ends) triggered by filter requests."""

ALL_FIT_RETRIES = 8
"""Mismatches with a signature's remembered all-fit node list before a newer list replaces it."""

MAX_MESSAGE = 1024
"""Longest per-node failure message. A message can quote request data (a gang name, an annotation, a
resource name) and is repeated once per requested node: unbounded, a 100 KB annotation times 2,000
node names made a 200 MB reply."""


UNKNOWN_NODE = "node is not known to gang-extender (its node watch has not seen it)"
"""Verdict (never cached) for a requested name that is not a node of the mirror."""


REPLY_MESSAGES = 2 * 2**20
"""Characters of failure reasons in one reply, summed over its nodes: past it every reason is cut to an
equal share (at least ``MIN_MESSAGE``). One reason repeated for every requested name would otherwise
make a reply of hundreds of MB from a 4 MiB request."""

MIN_MESSAGE = 80


def _bounded(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 1] + "\u2026"

class Engine(BindingVerbs):
    """The three verbs: filter and prioritize here, bind from ``BindingVerbs``."""

    def __init__(self, mirror: ClusterMirror, cache: FilterCache, ledger: GangLedger, binder: Binder,
                 *, evictor: Evictor | None = None, **binding: Any) -> None:
        """``binding``: the settings of ``BindingVerbs``. ``evictor``: evicts the preemption victims the
        ledger chooses, after each sweep (None: nothing is evicted)."""
        super().__init__(mirror, ledger, binder, **binding)
        self.cache = cache
        self.evictor = evictor
        self.evictions = None if evictor is None else Evictions(ledger, evictor, self.may_act)
        self.steered = 0  # filter requests answered with the nodes of the member's own reservation

    def sweep(self, min_interval: float = 0.0) -> None:
        """The ledger's sweep and releases (``BindingVerbs``), then the evictions it decided."""
        super().sweep(min_interval)
        if self.evictions is not None:
            self.evictions.start()

    def filter(self, args: FilterArgs) -> FilterResult:
        """One consistent step under the mirror's lock: the gang's gate, then the per-node verdicts."""
        facts = PodFacts(args.pod)
        try:
            linked = facts.link is not None
        except GroupError as exc:
            return _all_failed(args.node_names, Verdict(Code.WAIT_UNRESOLVABLE, f"invalid gang: {exc}"))
        key = facts.signature
        with self.mirror.lock:
            self.sweep(min_interval=FILTER_SWEEP_INTERVAL)
            gang: GangKey | None = None
            if linked:  # only gang members need the full record before the cache lookup
                gang, verdict = self.ledger.gate(request_record(facts))
                if not verdict.passes:
                    if verdict.code is Code.WAIT_RESOLVABLE:
                        self.ledger.note_blocked(facts.record)
                    self.ledger.note_waiting(facts.record, verdict)
                    return _all_failed(args.node_names, verdict)
            result, entry = self._node_verdicts(args, facts, gang, key)
            domain = self.ledger.domain_of(gang) if gang is not None else None
            if domain is not None:
                result = self._within_domain(result, domain, gang)
            if not result.feasible:
                self.ledger.note_blocked(request_record(facts))
        if entry is not None and key is not None:
            self.cache.put(key, entry)
        return result

    def _node_verdicts(self, args: FilterArgs, facts: PodFacts, gang: GangKey | None,
                       key: bytes | None) -> tuple[FilterResult, NodeVerdicts | None]:
        """Per-node verdicts for the request's nodes, from the cache where the pod's signature ``key``
        allows, and the cache entry to store back (None: nothing to store). Called under mirror.lock.

        The cached verdicts are those of the pod as if it belonged to no gang, so members of different
        gangs with the same spec share them: the only thing a gang changes is that its own reservation
        counts as room, and the nodes holding it (a handful) are evaluated here, outside the cache. A
        member that fits inside its reservation on any requested node is steered there: the reply
        lists only those nodes, and nodes left out only for steering appear in neither map
        (kube-scheduler reads failure reasons only when no node is feasible).
        """
        names = args.node_names
        own = self._own_reservation_verdicts(names, facts, gang)
        steered = [node for node, verdict in own.items() if verdict == FIT_RESERVED]
        if steered and gang is not None and self.ledger.filter_gated:
            steered.sort(key=names.index)
            steered = self.ledger.claim(gang, request_record(facts), steered)
            if not steered:  # no place left for it: only free capacity outside the reservation
                claimed = (f"no place in gang {gang}'s reservation is left for it (the others are claimed by members "
                           "being bound, or gang-extender has not seen this pod yet)")
                own = {n: claimed if verdict == FIT_RESERVED else verdict for n, verdict in own.items()}
        if steered:
            steered.sort(key=names.index)  # in the request's order (a few C-level scans)
            self.steered += 1
            return FilterResult(steered, {}, {}), None
        entry = self._fresh_entry(key, facts)
        if not own and self._all_fit(entry, names):
            feasible, failed = names, {}  # the request's own list: every name fits
        else:
            if not own:  # with ``own`` the names were checked on the way to it
                check_node_names(names)
            verdicts, known = entry.verdicts, self.mirror.nodes
            unknown: dict[str, str] = {}
            for name in names:
                if name not in verdicts and name not in own:
                    if name in known:
                        entry.record(name, self._verdict(name, facts, None))
                    else:
                        unknown[name] = UNKNOWN_NODE
            verdict_of = {**verdicts, **own, **unknown} if own or unknown else verdicts
            feasible = [n for n in names if verdict_of[n] == FIT]
            failed = {n: verdict_of[n] for n in names if verdict_of[n] != FIT}
        result = FilterResult(feasible, _within_budget(failed) if failed else failed, {})
        return result, entry if key is not None else None

    def _within_domain(self, result: FilterResult, domain: Domain, gang: GangKey | None) -> FilterResult:
        """``result`` without the feasible nodes outside the gang's topology domain (a gang with a
        required topology key keeps every member in one domain). Like steering, nodes left out while
        some node of the domain is feasible appear in neither map; with none, each says why."""
        allowed = self.ledger.nodes_in(domain)
        if allowed.issuperset(result.feasible):
            return result
        inside = [name for name in result.feasible if name in allowed]
        if inside:
            return FilterResult(inside, result.failed, result.failed_unresolvable)
        reason = f"outside the topology domain {domain} of gang {gang}"
        failed = _within_budget({**result.failed, **dict.fromkeys(result.feasible, reason)})
        return FilterResult([], failed, result.failed_unresolvable)

    @staticmethod
    def _all_fit(entry: NodeVerdicts, names: list[Any]) -> bool:
        """Whether every requested name is a node the entry knows to fit (which also proves each one a
        valid node name).

        kube-scheduler with percentageOfNodesToScore 100 sends the same list in the same order call
        after call: comparing with a remembered all-fit list (memcmp, no hashing) is 2.5x cheaper than
        the set pass that otherwise proves every name known and fitting. The remembered list is
        replaced only after repeated mismatches (a rotating order), as freeing 5,000 strings per
        request would cost more than the comparison saves."""
        if names == entry.all_fit_names:
            entry.all_fit_misses = 0
            return True
        try:
            all_fit = entry.fit.issuperset(names)
        except TypeError:  # an unhashable element: not a node name
            return False
        entry.all_fit_misses += 1
        if all_fit and (entry.all_fit_names is None or entry.all_fit_misses >= ALL_FIT_RETRIES):
            entry.all_fit_names, entry.all_fit_misses = names, 0
        return all_fit

    def _own_reservation_verdicts(self, names: list[Any], facts: PodFacts, gang: GangKey | None) -> dict[str, str]:
        """Verdicts, with the gang's own reservation counted as room, for the requested nodes that hold
        some of it (under mirror.lock); empty for a pod of no gang or a gang without a reservation."""
        if gang is None:
            return {}
        reserved = self.mirror.reserved_nodes(gang)
        if not reserved:
            return {}
        offered = reserved.intersection(check_node_names(names))
        self.ledger.note_offered(gang, offered)
        return {n: self._verdict(n, facts, gang) for n in offered}

    def _fresh_entry(self, key: bytes | None, facts: PodFacts) -> NodeVerdicts:
        """The cached verdicts for ``key``, refreshed to the mirror's generation (under mirror.lock)."""
        generation = self.mirror.generation
        if key is None:
            self.cache.unsignable += 1
            return NodeVerdicts(generation)
        entry = self.cache.get(key)
        if entry is None:
            self.cache.count(hit=False)
            return NodeVerdicts(generation)
        refreshed = 0
        if entry.generation != generation:
            changed = self.mirror.changed_since(entry.generation)
            if changed is None:
                self.cache.discard(key, "change_log_overflow")
                self.cache.count(hit=False)
                return NodeVerdicts(generation)
            for name in changed:
                if name not in entry.verdicts:
                    continue
                if name in self.mirror.nodes:
                    entry.record(name, self._verdict(name, facts, None))
                else:
                    entry.forget(name)
                refreshed += 1
            entry.generation = generation
        self.cache.count(hit=True, refreshed=refreshed)
        return entry

    def _verdict(self, name: str, facts: PodFacts, gang: GangKey | None) -> str:
        return _bounded(self._node_verdict(name, facts, gang))

    def _node_verdict(self, name: str, facts: PodFacts, gang: GangKey | None) -> str:
        node = self.mirror.nodes.get(name)
        if node is None:
            return UNKNOWN_NODE
        requests = request_record(facts).requests
        reason = placement_failure(facts.placement, node)
        if reason is not None:
            return reason
        priority = request_record(facts).priority
        lacking = shortfall(requests, self.mirror.free(name, gang, priority=priority))
        if lacking is not None:
            if shortfall(requests, self.mirror.free(name, gang, include_own_reservation=False,
                                                    priority=priority)) is None:
                return f"Insufficient {lacking}"
            without_reservations = dict(node.allocatable)
            for resource, amount in self.mirror.used(name).items():
                without_reservations[resource] = without_reservations.get(resource, 0) - amount
            if shortfall(requests, without_reservations) is None:
                return f"Insufficient {lacking}: capacity is reserved for other gangs"
            return f"Insufficient {lacking}"
        if gang is not None:
            own = self.mirror.own_reservation(name, gang)
            if own and shortfall(requests, own) is None:
                return FIT_RESERVED
        return FIT

    def prioritize(self, args: FilterArgs) -> list[tuple[str, int]]:
        """Gang members prefer their reservation (10), then nodes with siblings (5); others 0."""
        names = check_node_names(args.node_names)
        try:
            pod = request_record(PodFacts(args.pod))  # validated as filter validates it
        except GroupError:
            return [(name, 0) for name in names]
        with self.mirror.lock:
            gang, policy = self.ledger.gang_of(pod)
            if gang is None or policy is None:
                return [(name, 0) for name in names]
            reserved = self.mirror.reserved_nodes(gang)
            siblings = {self.mirror.placement(m.uid) for m in self.mirror.members(gang)}
        return [(n, 10 if n in reserved else 5 if n in siblings else 0) for n in names]

    def preempt(self, args: PreemptArgs) -> PreemptResult:
        """kube-scheduler's preemption candidates this extender allows (``preemption.preempt``)."""
        return preemption.preempt(self.mirror, self.ledger, args)

    def explain(self, namespace: str, name: str, pod_group: str | None = None,
                replica: str | None = None) -> list[dict[str, Any]]:
        """What the extender knows about every gang of group ``namespace/name`` (read-only)."""
        return [self.ledger.explain(gang) for gang in self.mirror.find_gangs(namespace, name, pod_group, replica)]


def _within_budget(failed: dict[str, str]) -> dict[str, str]:
    """``failed`` with its reasons cut to a share of ``REPLY_MESSAGES`` when they add up to more."""
    if len(failed) * MAX_MESSAGE <= REPLY_MESSAGES or sum(map(len, failed.values())) <= REPLY_MESSAGES:
        return failed
    share = max(REPLY_MESSAGES // len(failed), MIN_MESSAGE)
    return {name: reason if len(reason) <= share else reason[:share - 1] + "\u2026" for name, reason in failed.items()}


def _all_failed(names: list[Any], verdict: Verdict) -> FilterResult:
    failed = _within_budget(dict.fromkeys(check_node_names(names), _bounded(verdict.message)))
    if verdict.code is Code.WAIT_UNRESOLVABLE:
        return FilterResult([], {}, failed)
    return FilterResult([], failed, {})

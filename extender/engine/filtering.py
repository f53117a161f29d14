"""Filtering: the filter and prioritize verbs (no HTTP, no kubernetes client).

Owns: turning one validated filter request into its answer: for the first member of a gang whose pods are
still being created, a short wait for the rest of its quorum (``QUORUM_WAIT_SECONDS``); the gang's half
from the ledger in one call
(``GangLedger.filter_gate``: the sweep, the quorum gate and admission, the member's own reservation and
where it is steered), then per-node verdicts from the filter cache (signature -> per-node verdicts),
refreshed for only the nodes changed since the cached entry, then the gang's topology domain; a pod
left with no feasible node is put on the waitlist to be woken when capacity frees. Prioritize prefers a
member's reservation, then its siblings' nodes. Must not: parse HTTP or JSON, import Flask or
kubernetes, or call the API server.

Hot path: one signature, one cache lookup, a refresh of only the nodes changed since the cached entry,
then one C-level membership pass over the request's node names. The gang half and the verdicts are one
step under the mirror's lock.

Trust: a request is believed for nothing about the cluster. Verdicts come from the mirror only (a node
it does not know is infeasible, and no state is kept for such a name).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from itertools import filterfalse
from typing import Any

from cachetools import TTLCache

from extender.cluster.cache import FIT, FilterCache, NodeVerdicts
from extender.cluster.facts import PodFacts
from extender.cluster.mirror import ClusterMirror
from extender.cluster.verdicts import MAX_MESSAGE, UNKNOWN_NODE, bounded, check_node_names, node_verdict
from extender.engine.requests import FilterArgs, FilterResult, request_record
from extender.errors import GroupError
from extender.gangs.domains import Domain
from extender.gangs.ledger import FilterGate, GangLedger
from extender.gangs.waitlist import Waitlist
from extender.model import messages
from extender.model.cluster import PodRecord
from extender.model.gang import Code, GangKey, Verdict

log = logging.getLogger(__name__)

FILTER_SWEEP_INTERVAL = 0.05
"""Seconds between two walks over every gang (expiry, back-off ends) triggered by filter requests."""

ALL_FIT_RETRIES = 8
"""Mismatches with a signature's remembered all-fit node list before a newer list replaces it."""

REPLY_MESSAGES = 2 * 2**20
"""Characters of failure reasons in one reply, summed over its nodes: past it every reason is cut to an
equal share (at least ``MIN_MESSAGE``). One reason repeated for every requested name would otherwise
make a reply of hundreds of MB from a 4 MiB request."""

MIN_MESSAGE = 80

UNSEEN_WAIT_SECONDS = 0.1
"""How long a filter of a gang member the pod watch has not delivered yet waits for it (kube-scheduler's own
informer is often a few milliseconds ahead); kube-scheduler's scheduling cycle waits that long too."""

QUORUM_WAIT_SECONDS = 0.1
"""How long the first filter of a gang whose members are still being created waits for the rest of its
quorum before turning the member away. A job controller creates a gang's pods within milliseconds of each
other, and kube-scheduler pops the first one as soon as it exists: waiting here for the siblings costs
the scheduling cycle that long, but spares the member an unschedulable attempt and its back-off (the
in-tree plugin parks such pods before any attempt; an extender cannot). Once per gang per
``QUORUM_WAITED_SECONDS``, so a gang that will not complete costs the scheduler at most this once."""

QUORUM_WAIT_SHARE = 0.25
QUORUM_WAIT_BURST = 1.0
"""The quorum waits' budget: a charge of at most ``QUORUM_WAIT_BURST`` seconds of waiting that drains at
``QUORUM_WAIT_SHARE`` per second, so in the long run at most a quarter of the wall clock (about 1.3 s
back to back, as it drains while they run). Any pod can make a gang that never completes (the annotation
form needs no group object), so without it a flood of such gangs would stall kube-scheduler 0.1 s each;
with it they cost at most a quarter of its time, and a wait beyond the budget is skipped (the member is
turned away as without waits). A paced stream of 12 gangs a second used about 0.1 s per second."""

QUORUM_WAITED_SECONDS = 60.0
QUORUM_WAITED_GANGS = 10_000
"""Gangs remembered as having waited (each waits once in ``QUORUM_WAITED_SECONDS``); the oldest go first."""



class Filtering:
    """The filter and prioritize verbs over the mirror, the filter cache and the ledger."""

    def __init__(self, mirror: ClusterMirror, cache: FilterCache, ledger: GangLedger, waitlist: Waitlist,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.mirror = mirror
        self.cache = cache
        self.ledger = ledger
        self.waitlist = waitlist
        self.steered = 0  # filter requests answered with the nodes of the member's own reservation
        self.unseen = 0  # filter requests of gang members the pod watch had not delivered yet
        # first filters of gangs still being created, by outcome (over_budget: not waited, QUORUM_WAIT_SHARE)
        self.quorum_waits = {"met": 0, "timed_out": 0, "over_budget": 0}
        self.quorum_wait_seconds = QUORUM_WAIT_SECONDS
        self._clock = clock
        self._wait_level = 0.0  # seconds of waiting charged, draining at QUORUM_WAIT_SHARE per second
        self._wait_level_at = clock()
        self._quorum_waited: TTLCache[GangKey, bool] = TTLCache(QUORUM_WAITED_GANGS, QUORUM_WAITED_SECONDS)
        self._quorum_waited_lock = threading.Lock()

    def filter(self, args: FilterArgs) -> FilterResult:
        """The answer (what the ledger's sweep left to do outside the lock is queued in the ledger)."""
        facts = PodFacts(args.pod)
        read = self.mirror.as_read(facts.uid, facts.version)  # the pod as the watch read it, if the same version
        if read is not None:
            facts.adopt(*read)
        try:
            linked = facts.link is not None
        except GroupError as exc:
            return _all_failed(args.node_names, Verdict(Code.WAIT_UNRESOLVABLE, messages.invalid_gang(exc)))
        key = facts.signature
        if linked:
            request_record(facts)  # a malformed member is a bad request (400), as ever
        known = read[0] if read is not None else self.mirror.pod_by_uid(facts.uid)
        if known is None and linked:  # kube-scheduler's informer saw the pod before the extender's watch did
            self.unseen += 1
            known = self.mirror.wait_for_pod(facts.uid, UNSEEN_WAIT_SECONDS)
        may_wait = (known is not None and known.gang is not None and self.quorum_wait_seconds > 0
                    and self._may_wait(known.gang))
        with self.mirror.lock:
            gate = self.ledger.filter_gate(facts, known, linked, args.node_names, FILTER_SWEEP_INTERVAL, may_wait)
            if gate.missing is None:
                result, entry = self._answer(args, facts, gate, key, known)
        if gate.missing is not None:  # the first member of a gang still being created: wait for the rest
            self._await_members(*gate.missing)
            known = self.mirror.pod_by_uid(facts.uid)  # as it is now (deleted meanwhile: None, and told so)
            with self.mirror.lock:
                gate = self.ledger.filter_gate(facts, known, linked, args.node_names, FILTER_SWEEP_INTERVAL)
                result, entry = self._answer(args, facts, gate, key, known)
        if entry is not None and key is not None:
            self.cache.put(key, entry)
        return result

    def _answer(self, args: FilterArgs, facts: PodFacts, gate: FilterGate, key: bytes | None,
                known: PodRecord | None) -> tuple[FilterResult, NodeVerdicts | None]:
        """The reply for ``gate`` and the cache entry to store back (under mirror.lock)."""
        if not gate.verdict.passes:
            return _all_failed(args.node_names, gate.verdict), None
        if gate.steered:
            self.steered += 1
            result, entry = FilterResult(gate.steered, {}, {}), None
        else:
            result, entry = self._node_verdicts(args, facts, gate, key)
        if gate.domain is not None and gate.allowed is not None:
            result = _within_domain(result, gate.domain, gate.allowed, gate.gang)
        if not result.feasible and known is not None:  # woken when capacity frees (only pods that exist)
            self.waitlist.block(known)
        return result, entry

    def quorum_wait_counts(self) -> dict[str, int]:
        """``quorum_waits``, copied under its lock."""
        with self._quorum_waited_lock:
            return dict(self.quorum_waits)

    def _may_wait(self, gang: GangKey) -> bool:
        with self._quorum_waited_lock:
            return gang not in self._quorum_waited

    def _await_members(self, gang: GangKey, min_count: int) -> None:
        """Wait up to ``quorum_wait_seconds`` for ``gang`` to have ``min_count`` members, once per gang
        (outside every lock: the pod watch must deliver them meanwhile)."""
        wait = self.quorum_wait_seconds
        with self._quorum_waited_lock:
            if gang in self._quorum_waited:  # another thread's filter of the same gang waited just now
                return
            self._quorum_waited[gang] = True
            now = self._clock()
            self._wait_level = max(0.0, self._wait_level - (now - self._wait_level_at) * QUORUM_WAIT_SHARE)
            self._wait_level_at = now
            if self._wait_level + wait > max(QUORUM_WAIT_BURST, wait):  # (one longer wait when none is charged)
                self.quorum_waits["over_budget"] += 1
                return
            self._wait_level += wait  # charged in full now, what was not used refunded after
        started = time.monotonic()
        met = self.mirror.wait_for_members(gang, min_count, wait)
        with self._quorum_waited_lock:
            self._wait_level -= max(0.0, wait - (time.monotonic() - started))
            self.quorum_waits["met" if met else "timed_out"] += 1

    def _node_verdicts(self, args: FilterArgs, facts: PodFacts, gate: FilterGate,
                       key: bytes | None) -> tuple[FilterResult, NodeVerdicts | None]:
        """Per-node verdicts for the request's nodes, from the cache where the pod's signature ``key``
        allows, and the cache entry to store back (None: nothing to store). Called under mirror.lock.

        The cached verdicts are those of the pod as if it belonged to no gang, so members of different
        gangs with the same spec share them: the only thing a gang changes is that its own reservation
        counts as room, and the nodes holding it (a handful, ``gate.own``) are evaluated by the ledger,
        outside the cache."""
        names = args.node_names
        own = gate.own
        entry = self._fresh_entry(key, facts)
        if not own and self._all_fit(entry, names, args.names_text):
            feasible, failed = names, {}  # the request's own list: every name fits
        else:
            if not own:  # with ``own`` the names were checked on the way to it
                check_node_names(names)
            verdicts, known = entry.verdicts, self.mirror.nodes
            unknown: dict[str, str] = {}
            for name in filterfalse(verdicts.__contains__, names):  # (C-level passes: most names have one)
                if name not in own:
                    if name in known:
                        entry.record(name, self._verdict(name, facts))
                    else:
                        unknown[name] = UNKNOWN_NODE
            if own or unknown:
                other = {**own, **unknown}  # a handful of names, ahead of the entry's verdicts
                verdict_of = [other[n] if n in other else verdicts[n] for n in names]
                feasible = [n for n, v in zip(names, verdict_of, strict=True) if v == FIT]
                failed = {n: v for n, v in zip(names, verdict_of, strict=True) if v != FIT}
            else:
                fits = entry.fit.__contains__
                feasible = list(filter(fits, names))
                failed = {n: verdicts[n] for n in filterfalse(fits, names)}
        result = FilterResult(feasible, _within_budget(failed) if failed else failed, {})
        return result, entry if key is not None else None

    @staticmethod
    def _all_fit(entry: NodeVerdicts, names: list[Any], text: bytes | None) -> bool:
        """Whether every requested name is a node the entry knows to fit (which also proves each one a
        valid node name).

        kube-scheduler with percentageOfNodesToScore 100 sends the same list in the same order call
        after call. The cheapest proof is the list's text as sent (``text``, http.protocol
        ``node_names_text``) equal to the remembered all-fit list's: one memcmp, 1/20 of comparing
        5,000 strings; next comes comparing with the remembered list itself (string by string, no
        hashing), 2.5x cheaper than the set pass that otherwise proves every name known and fitting.
        The remembered list is replaced only after repeated mismatches (a rotating order), as freeing
        5,000 strings per request would cost more than the comparison saves. Both are forgotten when a
        node of the entry stops fitting or is gone (NodeVerdicts)."""
        if text is not None and text == entry.all_fit_text:
            entry.all_fit_misses = 0
            return True
        if names == entry.all_fit_names:
            entry.all_fit_misses = 0
            if text is not None:
                entry.all_fit_text = text
            return True
        try:
            all_fit = entry.fit.issuperset(names)
        except TypeError:  # an unhashable element: not a node name
            return False
        entry.all_fit_misses += 1
        if all_fit and (entry.all_fit_names is None or entry.all_fit_misses >= ALL_FIT_RETRIES):
            entry.all_fit_names, entry.all_fit_text, entry.all_fit_misses = names, text, 0
        return all_fit

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
                    entry.record(name, self._verdict(name, facts))
                else:
                    entry.forget(name)
                refreshed += 1
            entry.generation = generation
        self.cache.count(hit=True, refreshed=refreshed)
        return entry

    def _verdict(self, name: str, facts: PodFacts) -> str:
        """The pod's verdict on node ``name`` as a pod of no gang (what the cache keeps)."""
        return node_verdict(self.mirror, name, request_record(facts), facts.placement, None)

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


def _within_domain(result: FilterResult, domain: Domain, allowed: frozenset[str],
                   gang: GangKey | None) -> FilterResult:
    """``result`` without the feasible nodes outside the gang's topology domain (a gang with a required
    topology key keeps every member in one domain). Like steering, nodes left out while some node of the
    domain is feasible appear in neither map; with none, each says why."""
    if allowed.issuperset(result.feasible):
        return result
    inside = [name for name in result.feasible if name in allowed]
    if inside:
        return FilterResult(inside, result.failed, result.failed_unresolvable)
    reason = messages.outside_gang_domain(domain, gang)
    failed = _within_budget({**result.failed, **dict.fromkeys(result.feasible, reason)})
    return FilterResult([], failed, result.failed_unresolvable)


def _within_budget(failed: dict[str, str]) -> dict[str, str]:
    """``failed`` with its reasons cut to a share of ``REPLY_MESSAGES`` when they add up to more."""
    if len(failed) * MAX_MESSAGE <= REPLY_MESSAGES or sum(map(len, failed.values())) <= REPLY_MESSAGES:
        return failed
    share = max(REPLY_MESSAGES // len(failed), MIN_MESSAGE)
    return {name: reason if len(reason) <= share else reason[:share - 1] + "\u2026" for name, reason in failed.items()}


def _all_failed(names: list[Any], verdict: Verdict) -> FilterResult:
    failed = _within_budget(dict.fromkeys(check_node_names(names), bounded(verdict.message)))
    if verdict.code is Code.WAIT_UNRESOLVABLE:
        return FilterResult([], {}, failed)
    return FilterResult([], failed, {})

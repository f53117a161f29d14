"""Engine: the filter, prioritize and bind use cases (no HTTP, no kubernetes client).

Owns: turning one validated extender request into an answer, by combining the request pod with the
mirror (cluster state), the ledger (gang lifecycle), the filter cache (signature -> per-node
verdicts) and a Binder (the seam to the API server or to the snapshot). Must not: parse HTTP or
JSON, import Flask or kubernetes, or call the API server except through ``Binder`` in ``bind``.

Hot path (filter): one signature, one cache lookup, a refresh of only the nodes changed since the
cached entry, then one C-level membership pass over the request's node names. An admitted gang member
is steered to its reservation before any of that, evaluating only the nodes that hold it.

Trust: a request is believed for nothing about the cluster. Verdicts come from the mirror only (a
node it does not know is infeasible, and no state is kept for such a name); a bind is checked
against the mirror and the extender's own predicates, and only for pods of the schedulers this
extender serves; every bind, held or not, is answered (its Bindings sent) within the caller's
timeout, counted from the request's arrival.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from extender.cluster.cache import FIT, FilterCache, NodeVerdicts
from extender.cluster.facts import PodFacts
from extender.cluster.fit import placement_failure, shortfall
from extender.cluster.groups import GroupError
from extender.cluster.mirror import ClusterMirror
from extender.cluster.model import PASS, Code, GangKey, GangPolicy, PodRecord, Verdict
from extender.cluster.quantity import QuantityError
from extender.cluster.records import RecordError
from extender.engine.ports import Binder, BindError, ReleaseLog, ReleaseNotRecordedError
from extender.gangs import rules
from extender.gangs.book import Hold
from extender.gangs.ledger import BindAction, GangLedger
from extender.protocol import BindArgs, FilterArgs, FilterResult, ProtocolError, check_node_names

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


class Engine:
    def __init__(self, mirror: ClusterMirror, cache: FilterCache, ledger: GangLedger, binder: Binder,
                 *, bind_parallelism: int = 8, clock: Callable[[], float] = time.monotonic,
                 release_log: ReleaseLog | None = None, scheduler_names: frozenset[str] | None = None,
                 answer_margin: float = 1.0, may_act: Callable[[], bool] = lambda: True) -> None:
        """``scheduler_names``: the spec.schedulerName values whose pods may be bound (None: any).
        ``answer_margin``: how long before the caller's timeout a bind is answered (the ledger's
        ``hold_seconds`` is that timeout less this margin); a Binding gets half of it as slack.
        ``may_act``: whether this replica leads (checked before each Binding of a release)."""
        self.mirror = mirror
        self.cache = cache
        self.ledger = ledger
        self.binder = binder
        self.clock = clock
        self.release_log = release_log
        self.scheduler_names = scheduler_names
        self.answer_margin = answer_margin
        self.may_act = may_act
        self.steered = 0  # filter requests answered with the nodes of the member's own reservation
        self._bind_pool = ThreadPoolExecutor(max_workers=max(1, bind_parallelism),
                                             thread_name_prefix="gang-bind")

    def close(self) -> None:
        self._bind_pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------------------------ common
    def _gang(self, pod: PodRecord) -> tuple[GangKey | None, GangPolicy | None]:
        """(gang, policy) of a gang member; (gang, None) while its group definition is not seen yet;
        (None, None) for a pod of no gang or of a non-gang ("basic") group."""
        if pod.gang is None:
            return None, None
        exists, policy = self.mirror.gang_policy(pod.gang)
        if not exists and pod.link_policy is not None:
            exists, policy = True, pod.link_policy
        if exists and policy is None:
            return None, None
        return pod.gang, policy

    def _gate(self, pod: PodRecord) -> tuple[GangKey | None, Verdict]:
        """The member's gang and whether it may be placed now: the quorum gate (its group is defined
        and enough members exist), then admission (the rest of the gang fits and is reserved)."""
        gang, policy = self._gang(pod)
        if gang is None:
            return None, PASS
        count = self.mirror.member_count(gang) + (0 if self.mirror.is_member(gang, pod.uid) else 1)
        verdict = rules.quorum(gang, policy is not None, policy, count)
        if verdict.passes and policy is not None:
            verdict = self.ledger.admission(gang, policy, pod)
        return gang, verdict

    def sweep(self, min_interval: float = 0.0) -> None:
        """The ledger's sweep; binds, in the background, the quorums a policy change completed."""
        for release in self.ledger.sweep(min_interval):
            threading.Thread(target=self._release, args=(release.gang, release.holds), name="gang-release",
                             daemon=True).start()

    # ------------------------------------------------------------------------------------ filter
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
                gang, verdict = self._gate(_record(facts))
                if not verdict.passes:
                    if verdict.code is Code.WAIT_RESOLVABLE:
                        self.ledger.note_blocked(facts.record)
                    self.ledger.note_waiting(facts.record, verdict)
                    return _all_failed(args.node_names, verdict)
            result, entry = self._node_verdicts(args, facts, gang, key)
            if not result.feasible:
                self.ledger.note_blocked(_record(facts))
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
        return {n: self._verdict(n, facts, gang) for n in reserved.intersection(check_node_names(names))}

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
        requests = _record(facts).requests
        reason = placement_failure(facts.placement, node)
        if reason is not None:
            return reason
        lacking = shortfall(requests, self.mirror.free(name, gang))
        if lacking is not None:
            if shortfall(requests, self.mirror.free(name, gang, include_own_reservation=False)) is None:
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

    # -------------------------------------------------------------------------------- prioritize
    def prioritize(self, args: FilterArgs) -> list[tuple[str, int]]:
        """Gang members prefer their reservation (10), then nodes with siblings (5); others 0."""
        names = check_node_names(args.node_names)
        try:
            pod = _record(PodFacts(args.pod))  # validated as filter validates it
        except GroupError:
            return [(name, 0) for name in names]
        with self.mirror.lock:
            gang, policy = self._gang(pod)
            if gang is None or policy is None:
                return [(name, 0) for name in names]
            reserved = self.mirror.reserved_nodes(gang)
            siblings = {self.mirror.placement(m.uid) for m in self.mirror.members(gang)}
        return [(n, 10 if n in reserved else 5 if n in siblings else 0) for n in names]

    # -------------------------------------------------------------------------------------- bind
    def bind(self, args: BindArgs, arrival: float | None = None) -> str:
        """Bind (or hold at the gang barrier); returns "" on success or the error to answer.

        ``arrival``: when the request reached the process (engine clock; default now). The answer, and
        every Binding made for it, comes before ``arrival`` + the caller's timeout."""
        arrival = self.clock() if arrival is None else arrival
        pod = self.mirror.pod(args.pod_namespace, args.pod_name)
        if pod is None:
            time_left = arrival + self.ledger.hold_seconds - self.clock()
            if time_left <= 0:
                return f"pod {args.pod_namespace}/{args.pod_name} is not known yet and the request has no time left"
            try:
                raw = self.binder.read_pod(args.pod_namespace, args.pod_name, time_left)
            except BindError as exc:
                return f"cannot read pod {args.pod_namespace}/{args.pod_name}: {exc}"
            if raw is None:
                return f"pod {args.pod_namespace}/{args.pod_name} does not exist"
            try:
                pod = self.mirror.upsert_pod(raw)
            except (RecordError, QuantityError, GroupError) as exc:
                return f"pod {args.pod_namespace}/{args.pod_name} cannot be read: {exc}"
        if self.scheduler_names is not None and pod.scheduler_name not in self.scheduler_names:
            return (f"pod {args.pod_namespace}/{args.pod_name} has schedulerName {pod.scheduler_name!r}, which "
                    f"gang-extender does not serve (--scheduler-names {','.join(sorted(self.scheduler_names))})")
        if args.pod_uid and pod.uid != args.pod_uid:
            return (f"pod {args.pod_namespace}/{args.pod_name} has uid {pod.uid}, not {args.pod_uid}: "
                    "it was re-created")
        if pod.node_name:
            if pod.node_name == args.node:
                return ""
            return f"pod {args.pod_namespace}/{args.pod_name} is already bound to {pod.node_name}"
        gang, policy = self._gang(pod)
        decision = self.ledger.on_bind(pod, args.node, policy if gang is not None else None, arrival)
        if decision.action is BindAction.REJECT:
            return decision.error
        if decision.action is BindAction.NOW:
            error = (self._bind_one(pod, args.node, arrival + self.ledger.hold_seconds) if self.may_act() else
                     "this gang-extender replica lost its leadership while answering; kube-scheduler retries")
            self.ledger.bound(pod, error)
            return error
        assert decision.hold is not None and gang is not None
        if decision.action is BindAction.RELEASE:
            self._release(gang, decision.holds)
        return self._await(gang, decision.hold)

    def _bind_one(self, pod: PodRecord, node: str, answer_by: float | None = None) -> str:
        """One Binding; with ``answer_by`` it is given up (an error) if it cannot finish within half the
        answer margin after that moment, so the reply still reaches the caller in time."""
        timeout = 10.0
        if answer_by is not None:
            timeout = answer_by + self.answer_margin / 2 - self.clock()
            if timeout <= 0:
                return (f"binding pod {pod.namespace}/{pod.name} to {node} was not attempted: kube-scheduler's "
                        "httpTimeout for this request had (almost) passed; it retries the pod")
        try:
            self.binder.bind(pod.namespace, pod.name, pod.uid, node, timeout)
        except BindError as exc:
            log.warning("bind %s/%s -> %s failed: %s", pod.namespace, pod.name, node, exc)
            return f"binding pod {pod.namespace}/{pod.name} to {node} failed: {exc}"
        except Exception as exc:  # a bug must not leave a release's holds unanswered
            log.exception("bind %s/%s -> %s failed", pod.namespace, pod.name, node)
            return f"binding pod {pod.namespace}/{pod.name} to {node} failed: {type(exc).__name__}: {exc}"
        return ""

    def _release(self, gang: GangKey, holds: Sequence[Hold]) -> None:
        """Bind a released quorum: written down first, so a crash halfway is finished on restart."""
        release_id = 0
        if self.release_log is not None:
            try:
                release_id = self.release_log.opened(
                    str(gang), [(h.pod.namespace, h.pod.name, h.pod.uid, h.node) for h in holds])
            except Exception as exc:  # not recorded (not the leader, fenced, full) or a failing journal
                if not isinstance(exc, ReleaseNotRecordedError):
                    log.exception("gang %s: writing its release down failed", gang)
                self.ledger.unrelease(gang, list(holds), f"gang {gang} was not released: {exc}; nothing was bound "
                                      "and kube-scheduler retries its members")
                return
        try:
            errors = list(self._bind_pool.map(self._bind_held, holds))
            self.ledger.released(gang, list(zip(holds, errors, strict=True)))
        finally:
            if self.release_log is not None:
                self.release_log.closed(release_id)

    def _bind_held(self, hold: Hold) -> str:
        """One Binding of a release, by the leader only: a replica deposed midway stops binding (the
        release stays open on the Lease, and the next leader lets the rest through)."""
        if not self.may_act():
            return (f"binding pod {hold.pod.namespace}/{hold.pod.name} was not attempted: this gang-extender "
                    "replica lost its leadership during the release; kube-scheduler retries it")
        return self._bind_one(hold.pod, hold.node, hold.answer_by)

    def resume_release(self, gang: str, pods: Sequence[tuple[str, str, str, str]]) -> dict[str, str]:
        """Finish a release a crash interrupted: bind each listed member (namespace, name, uid, node)
        that is still pending, is the same pod (uid) and still has room on its node; a member that needs
        volume or claim preparation is not bound here (kube-scheduler's attempt that prepared it is gone)
        but passes the barrier at its next bind. Returns ``namespace/name`` -> "" (bound now) or why not."""
        outcomes: dict[str, str] = {}
        todo: list[tuple[PodRecord, str]] = []
        later: list[PodRecord] = []
        for namespace, name, uid, node in pods:
            key = f"{namespace}/{name}"
            pod = self.mirror.pod_by_uid(uid)
            if pod is None:
                outcomes[key] = "gone (deleted or re-created)"
            elif pod.node_name == node:
                outcomes[key] = "already bound"
            elif pod.needs_preparation and not pod.node_name:
                later.append(pod)
                outcomes[key] = "needs volume or claim preparation: passes the barrier at its next bind"
            else:
                error = self.ledger.resume(pod, node)
                if error:
                    outcomes[key] = error
                else:
                    todo.append((pod, node))
        errors = list(self._bind_pool.map(lambda item: self._bind_one(*item), todo))
        for (pod, _), error in zip(todo, errors, strict=True):
            self.ledger.bound(pod, error)
            outcomes[f"{pod.namespace}/{pod.name}"] = error
        bound = [pod for (pod, _), error in zip(todo, errors, strict=True) if not error]
        self.ledger.resumed(gang, bound)
        self.ledger.approve(gang, later)
        return outcomes

    # ----------------------------------------------------------------------------------- explain
    def explain(self, namespace: str, name: str, pod_group: str | None = None,
                replica: str | None = None) -> list[dict[str, Any]]:
        """What the extender knows about every gang of group ``namespace/name`` (read-only)."""
        return [self.ledger.explain(gang) for gang in self.mirror.find_gangs(namespace, name, pod_group, replica)]

    def _await(self, gang: GangKey, hold: Hold) -> str:
        """Wait for the held bind's answer, letting the ledger expire the gang's holds when they are due."""
        due = self.ledger.due(gang)
        while not hold.done.wait(timeout=max((due if due is not None else self.clock() + 0.1) - self.clock(), 0)
                                 + 0.01):
            due = self.ledger.expire(gang)
        return hold.result or ""


def _record(facts: PodFacts) -> PodRecord:
    """The request pod's record; a pod too malformed to read is a bad request."""
    try:
        return facts.record
    except (RecordError, QuantityError) as exc:  # a GroupError is the caller's to handle
        raise ProtocolError(f"Pod: {exc}") from None


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

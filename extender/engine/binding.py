"""Binding: the bind verb and the releases of gang quorums (no HTTP, no kubernetes client).

Owns: answering a bind request (the pod read from the mirror, or once from the API server; the request
believed for nothing: schedulerName, uid and the node are checked), holding it at its gang's barrier
until the ledger releases the quorum, binding a released quorum in parallel (written down first when a
release log is wired, so a crash halfway is finished by whoever comes next; each member's Binding made by
the thread that holds its bind, at most ``bind_parallelism`` at once (``BindingSlots``, first come first
served), the outcomes reported to the ledger by the last of them (a ``_Run``), the release closed in the
log by ``gang-release-close``), and finishing a release a previous process or leader left open
(``resume_release``: bound to the recorded nodes after a restart; ``let_through``: its members pass the
barrier at their next bind after a takeover). Must not: parse HTTP or JSON, import Flask or kubernetes,
or call the API server except through ``Binder``.

Trust: every bind, held or not, is answered (its Bindings sent) within the caller's timeout, counted
from the request's arrival; a replica that lost its leadership binds nothing more.
"""

from __future__ import annotations

import collections
import functools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from extender.cluster.mirror import ClusterMirror
from extender.engine.ports import Binder, OpenRelease, ReleaseLog
from extender.engine.requests import BindArgs
from extender.errors import BindError, ObjectError, ReleaseNotRecordedError
from extender.gangs.ledger import BindAction, GangLedger, Release
from extender.gangs.record import Hold
from extender.model import messages
from extender.model.cluster import PodRecord
from extender.model.gang import GangKey

log = logging.getLogger(__name__)

BINDING_TIMEOUT = 10.0
"""Seconds a Binding made for no held request (a restart's resume) may take."""


@dataclass(eq=False)
class _Run:
    """One released quorum being bound, each member by the thread that holds its bind: the outcomes as they
    come, who is last (that thread reports them all to the ledger and has the release closed), and when
    that is done (``settled``)."""

    gang: GangKey
    holds: Sequence[Hold]
    started: float
    release_id: int
    errors: dict[str, str] = field(default_factory=dict)  # member uid -> its Binding's outcome ("" bound)
    lock: threading.Lock = field(default_factory=threading.Lock)
    settled: threading.Event = field(default_factory=threading.Event)

    def finished(self, hold: Hold, error: str) -> bool:
        """Record one member's outcome; whether it was the last."""
        with self.lock:
            self.errors[hold.pod.uid] = error
            return len(self.errors) == len(self.holds)

    def outcomes(self) -> list[tuple[Hold, str]]:
        return [(hold, self.errors[hold.pod.uid]) for hold in self.holds]


class BindingSlots:
    """At most ``count`` Bindings of releases in flight, handed out in the order they were asked for (a
    freed slot goes to the longest waiter, never to a later comer), each wait bounded."""

    def __init__(self, count: int) -> None:
        self._free = count
        self._lock = threading.Lock()
        self._waiting: collections.deque[threading.Lock] = collections.deque()

    def acquire(self, timeout: float) -> bool:
        """Whether a slot was had within ``timeout`` seconds (then ``release`` it)."""
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return True
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        if turn.acquire(timeout=max(timeout, 0.0)):
            return True
        with self._lock:
            if turn in self._waiting:
                self._waiting.remove(turn)
                return False
        return True  # handed a slot just as the wait ended

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()  # the slot passes straight to the longest waiter
            else:
                self._free += 1


class Binding:
    """The bind verb and the releases."""

    def __init__(self, mirror: ClusterMirror, ledger: GangLedger, binder: Binder,
                 *, bind_parallelism: int = 32, clock: Callable[[], float] = time.monotonic,
                 release_log: ReleaseLog | None = None, scheduler_names: frozenset[str] | None = None,
                 answer_margin: float = 1.0, may_act: Callable[[], bool] = lambda: True,
                 time_left: Callable[[], float] = lambda: math.inf) -> None:
        """``scheduler_names``: the spec.schedulerName values whose pods may be bound (None: any).
        ``answer_margin``: how long before the caller's timeout a bind is answered (the ledger's
        ``hold_seconds`` is that timeout less this margin); a Binding gets half of it as slack.
        ``may_act``: whether this replica leads (checked before each Binding of a release);
        ``time_left``: for how many more seconds it leads (each Binding's timeout is cut to it, so none
        is sent or still in flight after its leadership ends)."""
        self.mirror = mirror
        self.ledger = ledger
        self.binder = binder
        self.clock = clock
        self.release_log = release_log
        self.scheduler_names = scheduler_names
        self.answer_margin = answer_margin
        self.may_act = may_act
        self.time_left = time_left
        self.hold_seconds = ledger.settings.hold_seconds
        self.bind_parallelism = max(1, bind_parallelism)
        self._bindings = BindingSlots(self.bind_parallelism)  # the releases' Bindings in flight
        self._to_close: queue.SimpleQueue[int] = queue.SimpleQueue()  # settled releases, for the closer
        self._closer: threading.Thread | None = None  # closes them off the answering threads (started once)
        self._closer_lock = threading.Lock()

    def start_releases(self, releases: Sequence[Release]) -> None:
        """Start binding the quorums a sweep released (a policy change completed them): written down in the
        background, then each member bound by the thread holding its bind."""
        for release in releases:
            threading.Thread(target=self._release, args=(release.gang, release.holds), name="gang-release",
                             daemon=True).start()

    def bind(self, args: BindArgs, arrival: float | None = None) -> str:
        """Bind (or hold at the gang barrier); returns "" on success or the error to answer.

        ``arrival``: when the request reached the process (engine clock; default now). The answer, and
        every Binding made for it, comes before ``arrival`` + the caller's timeout."""
        arrival = self.clock() if arrival is None else arrival
        refusal = self.ledger.bind_refusal(args.pod_namespace, args.pod_name)
        if refusal:
            return refusal
        pod = self.mirror.pod(args.pod_namespace, args.pod_name)
        if pod is None:
            time_left = arrival + self.hold_seconds - self.clock()
            if time_left <= 0:
                return messages.pod_unknown_no_time(args.pod_namespace, args.pod_name)
            try:
                raw = self.binder.read_pod(args.pod_namespace, args.pod_name, time_left)
            except BindError as exc:
                return messages.pod_unreadable(args.pod_namespace, args.pod_name, exc)
            if raw is None:
                return messages.pod_missing(args.pod_namespace, args.pod_name)
            try:
                pod = self.mirror.upsert_pod(raw)
            except ObjectError as exc:
                return messages.pod_malformed(args.pod_namespace, args.pod_name, exc)
        if self.scheduler_names is not None and pod.scheduler_name not in self.scheduler_names:
            return messages.scheduler_not_served(pod, self.scheduler_names)
        if args.pod_uid and pod.uid != args.pod_uid:
            return messages.uid_mismatch(pod, args.pod_uid)
        if pod.node_name:
            return "" if pod.node_name == args.node else messages.already_bound(pod, pod.node_name)
        gang, policy = self.ledger.gang_of(pod)
        decision = self.ledger.on_bind(pod, args.node, policy if gang is not None else None, arrival)
        if decision.action is BindAction.REJECT:
            return decision.error
        if decision.action is BindAction.NOW:
            error = self._bind_one(pod, args.node, arrival + self.hold_seconds) if self.may_act() else \
                messages.LOST_LEADERSHIP_ANSWERING
            self.ledger.bound(pod, error)
            return error
        assert decision.hold is not None and gang is not None
        if decision.action is BindAction.RELEASE:
            self._release(gang, decision.holds)
        return self._await(gang, decision.hold)

    def _bind_one(self, pod: PodRecord, node: str, answer_by: float | None = None) -> str:
        """One Binding; with ``answer_by`` it is given up (an error) if it cannot finish within half the
        answer margin after that moment, so the reply still reaches the caller in time; and in any case
        if it cannot finish while this replica still leads."""
        timeout = BINDING_TIMEOUT
        if answer_by is not None:
            timeout = answer_by + self.answer_margin / 2 - self.clock()
            if timeout <= 0:
                return messages.binding_not_attempted_late(pod, node)
        leading = self.time_left()
        if leading <= 0:
            return messages.binding_not_attempted_deposed(pod)
        timeout = min(timeout, leading)
        try:
            self.binder.bind(pod.namespace, pod.name, pod.uid, node, timeout)
        except BindError as exc:
            log.warning("bind %s/%s -> %s failed: %s", pod.namespace, pod.name, node, exc)
            return messages.binding_failed(pod, node, exc)
        except Exception as exc:  # a bug must not leave a release's holds unanswered
            log.exception("bind %s/%s -> %s failed", pod.namespace, pod.name, node)
            return messages.binding_failed(pod, node, f"{type(exc).__name__}: {exc}")
        return ""

    def _release(self, gang: GangKey, holds: Sequence[Hold]) -> None:
        """Start binding a released quorum: written down first, so a crash halfway is finished on restart;
        then each hold is handed its Binding (``_bind_turn``, on the thread waiting for it)."""
        started = self.clock()
        release_id = 0
        if self.release_log is not None:
            try:
                release_id = self.release_log.opened(
                    gang, [(h.pod.namespace, h.pod.name, h.pod.uid, h.node) for h in holds])
            except Exception as exc:  # not recorded (not the leader, fenced, full) or a failing journal
                if not isinstance(exc, ReleaseNotRecordedError):
                    log.exception("gang %s: writing its release down failed", gang)
                self.ledger.unrelease(gang, list(holds), messages.release_not_recorded(gang, exc))
                return
        run = _Run(gang, list(holds), started, release_id)
        for hold in run.holds:
            hold.take_turn(functools.partial(self._bind_turn, run, hold))

    def _bind_turn(self, run: _Run, hold: Hold) -> str:
        """One member's Binding, on the thread holding its bind (it waits for one of the ``bind_parallelism``
        slots no longer than its answer allows); the last of the release reports every outcome to the
        ledger (with how long the release took: the time the next ones need left on their holds), and the
        release is closed in the background. Returns the member's answer: at once when bound; when its
        Binding failed, once the release is settled (its place kept reserved and its assumption dropped
        before kube-scheduler may try it again), or at its answer deadline."""
        try:
            if self._bindings.acquire(self._answer_in(hold)):
                try:
                    error = self._bind_held(hold)
                finally:
                    self._bindings.release()
            else:
                error = messages.binding_not_attempted_late(hold.pod, hold.node)
        except Exception as exc:  # whatever happens, the release hears of this member
            log.exception("gang %s: binding %s failed", run.gang, hold.pod.name)
            error = messages.binding_failed(hold.pod, hold.node, f"{type(exc).__name__}: {exc}")
        if run.finished(hold, error):
            try:
                self.ledger.release_took(self.clock() - run.started)
                self.ledger.released(run.gang, run.outcomes())
            except Exception:  # the member's own answer stands: its Binding was made (or refused) either way
                log.exception("gang %s: recording its release's outcome failed", run.gang)
            finally:
                run.settled.set()
                if self.release_log is not None and getattr(self.release_log, "closes_at_once", False):
                    self._close(run.release_id)
                elif self.release_log is not None:
                    self._close_later(run.release_id)
        elif error:
            run.settled.wait(min(self._answer_in(hold), BINDING_TIMEOUT))
        return error

    def _answer_in(self, hold: Hold) -> float:
        """Seconds left before the held bind must be answered (half the answer margin kept for the reply)."""
        return max(hold.answer_by + self.answer_margin / 2 - self.clock(), 0.0)

    def _close_later(self, release_id: int) -> None:
        """Close a settled release in the release log on ``gang-release-close``, not on the thread about to
        answer kube-scheduler: on the Lease that is an API write, which may take seconds."""
        with self._closer_lock:
            if self._closer is None:
                self._closer = threading.Thread(target=self._close_settled, name="gang-release-close", daemon=True)
                self._closer.start()
        self._to_close.put(release_id)

    def _close_settled(self) -> None:
        """Close the settled releases, in order."""
        while True:
            self._close(self._to_close.get())

    def _close(self, release_id: int) -> None:
        try:
            if self.release_log is not None:
                self.release_log.closed(release_id)
        except Exception:  # a failing log must not stop the next closings, nor an answer
            log.exception("release %d: closing it failed", release_id)

    def _bind_held(self, hold: Hold) -> str:
        """One Binding of a release, by the leader only: a replica deposed midway stops binding (the
        release stays open on the Lease, and the next leader lets the rest through)."""
        if not self.may_act():
            return messages.binding_not_attempted_deposed(hold.pod)
        return self._bind_one(hold.pod, hold.node, hold.answer_by)

    def _await(self, gang: GangKey, hold: Hold) -> str:
        """Wait for the held bind's answer, letting the ledger expire the gang's holds when they are due; or,
        when its release hands it its turn, make its Binding here and answer with that. Nothing the ledger
        raises ends the wait: a released quorum counts on this thread for its member's Binding."""
        try:
            due = self.ledger.due(gang)
        except Exception:
            log.exception("gang %s: reading when its holds fall due failed; waiting on", gang)
            due = None
        while not hold.wait(max((due if due is not None else self.clock() + 0.1) - self.clock(), 0) + 0.01):
            try:
                due = self.ledger.expire(gang)
            except Exception:  # asked again after 0.1 s at most: never a busy loop
                log.exception("gang %s: expiring its holds failed; waiting on", gang)
                due = None
        if hold.turn is not None:
            return hold.turn()
        return hold.result or ""

    # ------------------------------------------------------------------ releases left open
    def resume_release(self, release: OpenRelease) -> dict[str, str] | None:
        """Finish or abandon a release a crash interrupted, keeping the barrier: which it is, the API server
        says (each member read afresh). If any member is bound, the release had begun: bind each member that
        is still pending, is the same pod (uid) and still has room on its recorded node (one that needs
        volume or claim preparation is left to pass the barrier at its next bind: kube-scheduler's attempt
        that prepared it is gone). If none is, nothing of the gang was bound: the release is dropped and the
        gang forms again at the barrier. Returns ``namespace/name`` -> "" (bound now) or why not; None when
        the API server could not be read (nothing done: try again)."""
        bound = self._bound_now(release)
        if bound is None:
            return None
        pods = [pod for _, _, uid, _ in release.pods if (pod := self.mirror.pod_by_uid(uid)) is not None]
        gang = _gang_of(release, pods)
        if not bound:
            if gang is not None:
                self.ledger.abandoned(gang, pods)
            return {f"{namespace}/{name}": messages.RESUME_ABANDONED for namespace, name, _, _ in release.pods}
        outcomes: dict[str, str] = {}
        todo: list[tuple[PodRecord, str]] = []
        later: list[tuple[PodRecord, str]] = []
        for namespace, name, uid, node in release.pods:
            key = f"{namespace}/{name}"
            pod = self.mirror.pod_by_uid(uid)
            if pod is None:
                outcomes[key] = messages.RESUME_GONE
            elif pod.node_name == node:
                outcomes[key] = messages.RESUME_ALREADY_BOUND
            elif pod.needs_preparation and not pod.node_name:
                later.append((pod, node))
                outcomes[key] = messages.RESUME_NEEDS_PREPARATION
            else:
                error = self.ledger.resume(pod, node)
                if error:
                    outcomes[key] = error
                else:
                    todo.append((pod, node))
        with ThreadPoolExecutor(max_workers=self.bind_parallelism, thread_name_prefix="gang-resume") as pool:
            errors = list(pool.map(lambda item: self._bind_one(*item), todo))
        for (pod, _), error in zip(todo, errors, strict=True):
            self.ledger.bound(pod, error)
            outcomes[f"{pod.namespace}/{pod.name}"] = error
        done = [pod for (pod, _), error in zip(todo, errors, strict=True) if not error]
        if gang is not None:
            self.ledger.resumed(gang, done)
            self.ledger.approve(gang, later)
        return outcomes

    def let_through(self, release: OpenRelease) -> frozenset[str] | None:
        """A release a previous leader started and did not finish (its intent on the Lease), kept behind the
        barrier: if the API server shows any member bound, the release had begun and its unbound members
        pass the barrier at their next bind request; if none, it is dropped and the gang forms again. Returns
        the uids let through (none: close it now); None when the API server could not be read (try again)."""
        bound = self._bound_now(release)
        if bound is None:
            return None
        with self.mirror.lock:
            pods = [pod for member in release.pods if (pod := self.mirror.pod_by_uid(member[2])) is not None]
        gang = _gang_of(release, pods)
        if not bound:
            if gang is not None:
                self.ledger.abandoned(gang, pods)
            return frozenset()
        chosen = {uid: node for _, _, uid, node in release.pods}
        pending = [(pod, chosen[pod.uid]) for pod in pods if not pod.node_name]
        if gang is not None:
            self.ledger.approve(gang, pending)
        return frozenset(pod.uid for pod, _ in pending)

    def _bound_now(self, release: OpenRelease) -> set[str] | None:
        """The uids of the release's members the API server shows bound now, read afresh (and put in the
        mirror); None if it could not be read."""
        bound: set[str] = set()
        for namespace, name, uid, _ in release.pods:
            try:
                raw = self.binder.read_pod(namespace, name, BINDING_TIMEOUT)
            except BindError as exc:
                log.warning("release of %s/%s left open: the API server could not be read (%s)", namespace, name, exc)
                return None
            if raw is None:
                continue
            try:
                pod = self.mirror.upsert_pod(raw)
            except ObjectError:
                continue
            if pod.uid == uid and pod.node_name:
                bound.add(uid)
        return bound


def _gang_of(release: OpenRelease, pods: Sequence[PodRecord]) -> GangKey | None:
    """The release's gang as written down, else (a release written by an older version) its members'."""
    if release.gang is not None:
        return release.gang
    return next((pod.gang for pod in pods if pod.gang is not None), None)

"""BindingVerbs: the bind use case and the releases of gang quorums (no HTTP, no kubernetes client).

Owns: answering a bind request (the pod read from the mirror, or once from the API server; the
request believed for nothing: schedulerName, uid and the node are checked), holding it at its gang's
barrier until the ledger releases the quorum, binding a released quorum in parallel (written down
first when a release log is wired, so a crash halfway is finished by whoever comes next), finishing
a release a crash interrupted, and binding the quorums a policy change completed. Must not: parse
HTTP or JSON, import Flask or kubernetes, or call the API server except through ``Binder``.

Trust: every bind, held or not, is answered (its Bindings sent) within the caller's timeout, counted
from the request's arrival; a replica that lost its leadership binds nothing more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from extender.cluster.mirror import ClusterMirror
from extender.cluster.model import GangKey, PodRecord
from extender.engine.ports import Binder, ReleaseLog
from extender.engine.requests import BindArgs
from extender.errors import BindError, ObjectError, ReleaseNotRecordedError
from extender.gangs.ledger import BindAction, GangLedger
from extender.gangs.state import Hold

log = logging.getLogger(__name__)


class BindingVerbs:
    """The bind verb and releases; ``Engine`` adds the filter and prioritize verbs over it."""

    def __init__(self, mirror: ClusterMirror, ledger: GangLedger, binder: Binder,
                 *, bind_parallelism: int = 32, clock: Callable[[], float] = time.monotonic,
                 release_log: ReleaseLog | None = None, scheduler_names: frozenset[str] | None = None,
                 answer_margin: float = 1.0, may_act: Callable[[], bool] = lambda: True) -> None:
        """``scheduler_names``: the spec.schedulerName values whose pods may be bound (None: any).
        ``answer_margin``: how long before the caller's timeout a bind is answered (the ledger's
        ``hold_seconds`` is that timeout less this margin); a Binding gets half of it as slack.
        ``may_act``: whether this replica leads (checked before each Binding of a release)."""
        self.mirror = mirror
        self.ledger = ledger
        self.binder = binder
        self.clock = clock
        self.release_log = release_log
        self.scheduler_names = scheduler_names
        self.answer_margin = answer_margin
        self.may_act = may_act
        self._bind_pool = ThreadPoolExecutor(max_workers=max(1, bind_parallelism),
                                             thread_name_prefix="gang-bind")

    def close(self) -> None:
        self._bind_pool.shutdown(wait=False, cancel_futures=True)

    def sweep(self, min_interval: float = 0.0) -> None:
        """The ledger's sweep; binds, in the background, the quorums a policy change completed."""
        for release in self.ledger.sweep(min_interval, release=True):
            threading.Thread(target=self._release, args=(release.gang, release.holds), name="gang-release",
                             daemon=True).start()

    def bind(self, args: BindArgs, arrival: float | None = None) -> str:
        """Bind (or hold at the gang barrier); returns "" on success or the error to answer.

        ``arrival``: when the request reached the process (engine clock; default now). The answer, and
        every Binding made for it, comes before ``arrival`` + the caller's timeout."""
        arrival = self.clock() if arrival is None else arrival
        if self.ledger.filter_gated:
            return (f"pod {args.pod_namespace}/{args.pod_name} was not bound: gang-extender runs filter-gated "
                    "(--bind-mode filter-gated) and never binds; remove bindVerb from its extenders entry")
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
            except ObjectError as exc:
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
        gang, policy = self.ledger.gang_of(pod)
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

    def _await(self, gang: GangKey, hold: Hold) -> str:
        """Wait for the held bind's answer, letting the ledger expire the gang's holds when they are due."""
        due = self.ledger.due(gang)
        while not hold.done.wait(timeout=max((due if due is not None else self.clock() + 0.1) - self.clock(), 0)
                                 + 0.01):
            due = self.ledger.expire(gang)
        return hold.result or ""

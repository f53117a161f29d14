"""LeaderElector: which replica acts, elected on a ``coordination.k8s.io/v1`` Lease.

Owns: one Lease (namespace/name): creating it, taking it over once its holder has not changed it for
the holder's ``leaseDurationSeconds``, renewing it every retry period, handing it back on a clean stop;
``is_leader()``; and *every* write to that Lease. Renewals and the writes of parts attached to the
Lease (``attach``: the release intents of ``extender.kube.intents``) go through one lock and carry the
resourceVersion last seen, so the API server refuses (409) a write by a replica that lost the Lease in
the meantime. Must not: decide scheduling, bind pods, or touch any object but its Lease; it reaches the
Lease only through ``lease.LeaseApi`` (``lease`` also holds the settings and the Lease's fields).

Timing (the semantics of client-go's ``tools/leaderelection``, written anew; the clock is our own
monotonic one, never the timestamps in the Lease, which another machine's clock wrote):

- A candidate remembers when it last saw the Lease change (its resourceVersion). It may take the Lease
  when no one holds it, or when the holder left it unchanged for ``leaseDurationSeconds`` (the holder's
  own setting, in the Lease) since then. A candidate that starts fresh therefore waits a full duration.
- The leader leads until ``renew_deadline`` after it *sent* its last successful write (acquisition,
  renewal or attached write). ``is_leader()`` compares that instant with the clock and nothing else,
  so it turns False on time even when the renewing thread is stuck.
- The server applied that write after it was sent, and a candidate saw it after that, so with
  ``lease_duration > renew_deadline`` the leader stops acting before any candidate may take over (as
  long as the two clocks' rates differ by less than lease_duration / renew_deadline).
- A write that the server refuses with 409 proves only that the Lease changed; a renewal then reads
  it again and goes on if it still names us; an attached write never does: it stops leading at once
  and fails (``FencedError``), and the next round of the elector re-reads the Lease like any candidate.
"""

from __future__ import annotations

import copy
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from extender.errors import FencedError, KubeError, LeaseWriteFailedError, NotLeaderError
from extender.kube.lease import JITTER, ElectionConfig, LeaseApi, lease_duration, micro_time, new_identity

log = logging.getLogger(__name__)


Adopt = Callable[[str | None], None]  # given the annotation's value in the Lease just acquired
Provide = Callable[[], str | None]     # the annotation's value to write now (None: remove it)


class LeaderElector:
    """Elect one leader among the replicas sharing ``config``'s Lease.

    Run it with ``start()``/``stop()`` (one daemon thread) or drive ``step()`` yourself. ``on_started``
    and ``on_stopped`` are called from the thread that runs ``step`` (outside the lock) when leadership
    is gained and when it is found lost (``is_leader()`` itself turns False on time without them).
    """

    def __init__(self, api: LeaseApi, config: ElectionConfig, identity: str | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(UTC),
                 on_started: Callable[[], None] | None = None,
                 on_stopped: Callable[[], None] | None = None,
                 eligible: Callable[[], bool] | None = None) -> None:
        """``eligible``: whether this replica should lead now (default: always). An ineligible
        candidate only watches the Lease (so that it knows how long it has been unchanged); an
        ineligible leader hands it back."""
        problems = config.problems()
        if problems:
            raise ValueError("invalid leader election settings: " + "; ".join(problems))
        self.api, self.config = api, config
        self.identity = identity or new_identity()
        self.clock, self.wall = clock, wall
        self.on_started, self.on_stopped = on_started, on_stopped
        self.eligible = eligible or (lambda: True)
        self.lock = threading.RLock()  # held for every write to the Lease
        self.term = 0                  # leaderships gained by this elector
        self._lease: dict[str, Any] | None = None  # the Lease as last read or written
        self._leading_until = 0.0      # monotonic; 0: not leading
        self.renewed_at = 0.0          # monotonic: when our last successful write of the Lease was sent
        self._acting = False           # leadership as last reported through the callbacks
        self._observed = ("", 0.0)     # (resourceVersion, when we first saw it)
        self._parts: dict[str, tuple[Adopt, Provide]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------ read side
    def is_leader(self) -> bool:
        """Whether this replica may act now (no lock, no I/O: one clock read)."""
        return self.clock() < self._leading_until

    def time_left(self) -> float:
        """Seconds this replica may still act (≤ 0: it does not lead): a write it sends must be over by then
        (a Binding's own timeout is cut to it, so none is still in flight when another replica may lead)."""
        return self._leading_until - self.clock()

    @property
    def resource_version(self) -> str:
        """The Lease's resourceVersion as last read or written by this replica ("" before any)."""
        lease = self._lease
        return str(((lease or {}).get("metadata") or {}).get("resourceVersion") or "")

    @property
    def holder(self) -> str:
        """The holder named by the Lease as last seen ("" : none)."""
        return str(((self._lease or {}).get("spec") or {}).get("holderIdentity") or "")

    def annotations(self) -> dict[str, str]:
        """The Lease's annotations as last seen."""
        return dict(((self._lease or {}).get("metadata") or {}).get("annotations") or {})

    def attach(self, key: str, adopt: Adopt, provide: Provide) -> None:
        """Keep annotation ``key`` of the Lease: ``adopt`` receives its value whenever leadership is
        gained; every write of the leader sets it to ``provide()``."""
        with self.lock:
            self._parts[key] = (adopt, provide)

    # ------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop electing; with ``release``, hand the Lease back if we lead (the caller must have
        finished everything it did as the leader: another replica may lead a moment later)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.renew_deadline)
        if release:
            self.release()
        self._report()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            period = self.config.retry_period
            self._stop.wait(period if self.is_leader() else period * random.uniform(1.0, JITTER))

    def step(self) -> bool:
        """One round: renew if leading, else try to acquire. Returns ``is_leader()``."""
        with self.lock:
            try:
                if self._leading_until and self.eligible():
                    self._renew()
                elif self._leading_until:
                    self.release()
                    self._leading_until = 0.0
                elif self.eligible():
                    self._try_acquire()
                else:
                    self._observe()
            except KubeError as exc:
                log.warning("leader election on Lease %s/%s: %s", self.config.namespace, self.config.name, exc)
            except Exception:  # the elector must survive anything; its deadline keeps it safe
                log.exception("leader election round failed")
        self._report()
        return self.is_leader()

    def _report(self) -> None:
        leading = self.is_leader()
        if leading == self._acting:
            return
        self._acting = leading
        log.warning("%s leadership of Lease %s/%s (identity %s)", "gained" if leading else "lost",
                    self.config.namespace, self.config.name, self.identity)
        callback = self.on_started if leading else self.on_stopped
        if callback is not None:
            try:
                callback()
            except Exception:
                log.exception("leader election callback failed")

    # ------------------------------------------------------------------------------ writes
    def write(self, overrides: Mapping[str, str | None] | None = None, timeout: float = 5.0) -> None:
        """Write the attached annotations now (``overrides`` first) as the leader, fenced by the Lease's
        resourceVersion; a success also renews the Lease. Call with ``self.lock`` held when the
        annotations' values must not change between the write and its bookkeeping."""
        with self.lock:
            now = self.clock()
            if now >= self._leading_until or self._lease is None:
                raise NotLeaderError(f"{self.identity} does not lead Lease {self.config.namespace}/{self.config.name}")
            try:
                self._put(self._lease, self.identity, min(timeout, self._leading_until - now), overrides or {})
            except KubeError as exc:
                if exc.status == 409:
                    self._leading_until = 0.0
                    raise FencedError(f"Lease {self.config.namespace}/{self.config.name} changed since "
                                 f"resourceVersion {self.resource_version}; no longer leading: {exc}") from None
                raise LeaseWriteFailedError(str(exc)) from None

    def release(self) -> bool:
        """Hand the Lease back (holder cleared, duration 1 s) if we lead; stops acting first."""
        with self.lock:
            if not self.is_leader() or self._lease is None:
                return False
            self._leading_until = 0.0
            try:
                self._put(self._lease, "", self.config.retry_period, {}, duration=1)
            except KubeError as exc:
                log.warning("could not release Lease %s/%s (another replica takes it after its duration): %s",
                            self.config.namespace, self.config.name, exc)
                return False
            log.info("released Lease %s/%s", self.config.namespace, self.config.name)
            return True

    def _put(self, base: Mapping[str, Any], holder: str, timeout: float,
             overrides: Mapping[str, str | None], *, duration: int | None = None,
             acquired: bool = False) -> None:
        """PUT ``base`` (with its resourceVersion) naming ``holder`` and renewed now; the attached
        annotations are set from their providers unless ``acquired`` (a takeover keeps what it found)."""
        body = copy.deepcopy(dict(base))
        metadata = body.setdefault("metadata", {})
        annotations: dict[str, str | None] = dict(metadata.get("annotations") or {})
        if not acquired:
            for key, (_, provide) in self._parts.items():
                annotations[key] = provide()
        annotations.update(overrides)
        metadata["annotations"] = {key: value for key, value in annotations.items() if value is not None}
        spec = body.setdefault("spec", {})
        now = micro_time(self.wall())
        spec.update(holderIdentity=holder, renewTime=now,
                    leaseDurationSeconds=duration or int(self.config.lease_duration))
        if acquired:
            previous = str((base.get("spec") or {}).get("holderIdentity") or "")
            transitions = int((base.get("spec") or {}).get("leaseTransitions") or 0)
            spec.update(acquireTime=now, leaseTransitions=transitions + (previous != holder))
        sent = self.clock()
        written = self.api.replace(self.config.namespace, self.config.name, body, max(timeout, 0.05))
        self._seen(written, sent)
        if holder == self.identity:
            self._leading_until, self.renewed_at = sent + self.config.renew_deadline, sent

    def _seen(self, lease: dict[str, Any], now: float) -> None:
        self._lease = lease
        version = self.resource_version
        if version != self._observed[0]:
            self._observed = (version, now)

    # ------------------------------------------------------------------------------ rounds
    def _renew(self) -> None:
        now = self.clock()
        if now >= self._leading_until:
            self._leading_until = 0.0
            log.warning("could not renew Lease %s/%s within %.1fs: stopped leading", self.config.namespace,
                        self.config.name, self.config.renew_deadline)
            return
        assert self._lease is not None
        # one try may not take the whole deadline: the lock is held, and an intent write may be waiting
        timeout = min(self._leading_until - now, max(self.config.retry_period, 1.0))
        try:
            self._put(self._lease, self.identity, timeout, {})
            return
        except KubeError as exc:
            if exc.status != 409:
                raise
        fresh = self.api.get(self.config.namespace, self.config.name, timeout)
        if fresh is None or str((fresh.get("spec") or {}).get("holderIdentity") or "") != self.identity:
            self._leading_until = 0.0
            if fresh is not None:
                self._seen(fresh, self.clock())
            log.warning("Lease %s/%s is held by %r now: stopped leading", self.config.namespace,
                        self.config.name, self.holder if fresh else "nobody (deleted)")
            return
        self._seen(fresh, self.clock())  # changed by someone else, still ours: write over it
        self._put(fresh, self.identity, max(self._leading_until - self.clock(), 0.05), {})

    def _observe(self) -> None:
        """Read the Lease without competing for it (when it last changed counts toward a takeover)."""
        lease = self.api.get(self.config.namespace, self.config.name, self.config.retry_period)
        if lease is not None:
            self._seen(lease, self.clock())

    def _try_acquire(self) -> None:
        timeout = self.config.retry_period
        lease = self.api.get(self.config.namespace, self.config.name, timeout)
        if lease is None:
            self._create(timeout)
            return
        now = self.clock()  # after the read: the change it shows happened before now, never after
        self._seen(lease, now)
        holder = self.holder
        expires = self._observed[1] + lease_duration(lease, self.config.lease_duration)
        if holder and holder != self.identity and now < expires:
            return  # held, and changed within its duration
        self._put(lease, self.identity, timeout, {}, acquired=True)
        self._won(lease)

    def _create(self, timeout: float) -> None:
        now = micro_time(self.wall())
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.config.lease_duration),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
        sent = self.clock()
        try:
            created = self.api.create(self.config.namespace, body, timeout)
        except KubeError as exc:
            if exc.status == 409:
                return  # another replica created it first: read it next round
            raise
        self._seen(created, sent)
        self._leading_until, self.renewed_at = sent + self.config.renew_deadline, sent
        self._won(created)

    def _won(self, found: Mapping[str, Any]) -> None:
        """Leadership gained from Lease ``found`` (as read before the takeover): attached parts adopt
        what it carried."""
        self.term += 1
        annotations = (found.get("metadata") or {}).get("annotations") or {}
        for key, (adopt, _) in self._parts.items():
            value = annotations.get(key)
            adopt(value if isinstance(value, str) else None)
        log.info("acquired Lease %s/%s as %s (term %d)", self.config.namespace, self.config.name,
                 self.identity, self.term)

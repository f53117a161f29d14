"""Highly available scheduling on the local control plane: pairs of kube-scheduler + gang-extender, the
Leases they elect on, and a stream of gangs and plain pods (used by tests/e2e/ha.py).

- ``Pair``: one kube-scheduler (``ControlPlane.start_scheduler(name=...)``, leader election on the Lease
  ``kube-system/kube-scheduler``) pointed at its own ``gang-extender serve`` on loopback, as one pod of
  manifests/ha runs them. Started, killed together with SIGKILL, restarted. Whether its kube-scheduler
  leads is read from its own log ("Successfully acquired lease" since its last start): kube-scheduler's
  Lease identity (hostname + a random id) does not name the process.
- ``lease``: a Lease's holder and acquireTime, as the API server has them.
- ``Feeder``: a thread creating a gang (2..6 members) or a plain pod every ``interval`` seconds and
  deleting the oldest whole gangs and bound plain pods to keep the requested cpu near a target, so the
  nodes stay busy and room keeps changing under the extender.

Must not: decide what is correct (tests/e2e/ha.py and its callers do).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from controlplane import ApiError, ControlPlane
from support import Extender, pod, pod_spec, scheduler_config

Log = Callable[[str], None]
SCHEDULER_LEASE = ("kube-system", "kube-scheduler")  # the name system:kube-scheduler may get and update
ACQUIRED = b"Successfully acquired lease"
ANNOTATION_GROUP = "gang-extender.io/group"
ANNOTATION_MIN = "gang-extender.io/min-count"


def scheduler_election(duration: float, renew: float, retry: float) -> dict[str, Any]:
    namespace, name = SCHEDULER_LEASE
    return {"leaderElect": True, "leaseDuration": f"{duration}s", "renewDeadline": f"{renew}s",
            "retryPeriod": f"{retry}s", "resourceLock": "leases", "resourceName": name,
            "resourceNamespace": namespace}


@dataclass(frozen=True)
class LeaseState:
    holder: str
    acquired: float  # acquireTime, seconds since the epoch (0: none)
    transitions: int


def lease(cp: ControlPlane, namespace: str, name: str) -> LeaseState | None:
    try:
        found = cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    spec = found.get("spec") or {}
    acquired = spec.get("acquireTime")
    at = datetime.strptime(acquired, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp() if acquired else 0.0
    return LeaseState(str(spec.get("holderIdentity") or ""), at, int(spec.get("leaseTransitions") or 0))


class Pair:
    """kube-scheduler ``sched-<label>`` calling its own gang-extender (see the module docstring)."""

    def __init__(self, cp: ControlPlane, label: str, workdir: Path, extender_args: Sequence[str],
                 election: dict[str, Any], log: Log) -> None:
        self.cp, self.label, self.log = cp, label, log
        self.scheduler = f"sched-{label}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.ext = Extender(cp.kubeconfig, workdir, log=log, args=["--log-level", "INFO", *extender_args])
        at = self.ext.args.index("--release-journal")  # a local file cannot follow leadership
        del self.ext.args[at:at + 2]
        self.config = {**scheduler_config(self.ext.url), "leaderElection": election}
        self._log_from = 0
        self._leading = False
        self.starts = 0

    @property
    def record_path(self) -> Path:
        return self.ext.record_path

    def start(self) -> None:
        """The extender (until /readyz), then its kube-scheduler (until /readyz; a standby is ready too)."""
        self.ext.start()
        path = self.cp.log_path(self.scheduler)
        self._log_from, self._leading = (path.stat().st_size if path.exists() else 0), False
        self.cp.start_scheduler(self.config, name=self.scheduler)
        self.starts += 1

    def leads(self) -> bool:
        """Whether this pair's kube-scheduler acquired its Lease since it was last started (it exits
        when it loses it)."""
        if not self._leading and self.cp.is_running(self.scheduler):
            with self.cp.log_path(self.scheduler).open("rb") as log:
                log.seek(self._log_from)
                text = log.read()
            self._leading = ACQUIRED in text
            if not self._leading:  # the next scan starts near the end (a match may straddle it)
                self._log_from += max(0, len(text) - len(ACQUIRED))
        return self._leading and self.alive()

    def extender_leads(self) -> bool:
        """What the extender's /readyz says of its leadership (``leader``; False when it does not answer)."""
        try:
            with urllib.request.urlopen(self.ext.url + "/readyz", timeout=2) as reply:
                return bool(json.load(reply).get("leader"))
        except urllib.error.HTTPError as exc:
            with exc:
                return bool(json.load(exc).get("leader"))
        except (OSError, ValueError):
            return False

    def alive(self) -> bool:
        return self.cp.is_running(self.scheduler) and self.ext.proc is not None and self.ext.proc.poll() is None

    def kill(self) -> None:
        """kill -9 of both processes at once (the extender's signal first: it is the one that binds)."""
        proc = self.ext.proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        self.cp.kill_scheduler(self.scheduler)
        if proc is not None:
            proc.wait(10)
        self.ext.proc = None
        self._leading = False

    def stop(self) -> None:
        self.cp.stop_scheduler(self.scheduler)
        self.ext.stop()


class Feeder:
    """Creates work in namespace ``ns`` from a thread (see the module docstring). Gangs are ``g<n>``
    (members ``g<n>-<i>``), plain pods ``p<n>``; every pod requests ``cpu``."""

    def __init__(self, cp: ControlPlane, ns: str, selector: dict[str, str], *, seed: int, capacity_cpu: float,
                 interval: float = 0.8, cpu: str = "500m", utilization: float = 0.7) -> None:
        self.cp, self.ns, self.interval = cp, ns, interval
        self.rng = random.Random(seed)
        self.spec = pod_spec(cpu=cpu, selector=selector)
        self.pod_cpu = float(cpu.removesuffix("m")) / 1000 if cpu.endswith("m") else float(cpu)
        self.target_cpu = capacity_cpu * utilization
        self.gangs: dict[str, int] = {}   # every gang created: name -> members
        self.plain: list[str] = []        # every plain pod created
        self.deleted: set[str] = set()    # gangs and plain pods deleted (whole and bound)
        self.errors: list[str] = []
        self._live: list[tuple[str, int]] = []  # created, not deleted, oldest first: (name, members)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"feeder-{ns}", daemon=True)

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                self.make_room()
                self._create(n)
            except Exception as exc:  # reported through .errors, the run goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            n += 1
            self._stop.wait(self.interval * self.rng.uniform(0.5, 1.5))

    def _create(self, n: int) -> None:
        if self.rng.random() < 0.7:
            name, size = f"g{n}", self.rng.randint(2, 6)
            annotations = {ANNOTATION_GROUP: name, ANNOTATION_MIN: str(size)}
            members = [pod(self.ns, f"{name}-{i}", self.spec, annotations=annotations) for i in range(size)]
            with self._lock:
                self.gangs[name] = size
        else:
            name, size = f"p{n}", 1
            members = [pod(self.ns, name, self.spec)]
            self.plain.append(name)
        self._live.append((name, size))
        for member in members:
            self.cp.request("POST", f"/api/v1/namespaces/{self.ns}/pods", member)

    def make_room(self) -> None:
        """Delete the oldest whole gangs / bound plain pods while the live pods request more than the target.
        Nothing whole to delete (a takeover under way): the thread creates work anyway, so the live pods may
        request more than the nodes hold; ``make_room`` after ``stop`` lets the last of them be placed."""
        requested = sum(size for _, size in self._live) * self.pod_cpu
        if requested + 6 * self.pod_cpu <= self.target_cpu:
            return
        items = self.cp.request("GET", f"/api/v1/namespaces/{self.ns}/pods")["items"]
        placed = {p["metadata"]["name"] for p in items if p["spec"].get("nodeName")}
        for name, size in list(self._live):
            if requested + 6 * self.pod_cpu <= self.target_cpu:
                return
            members = [name] if name in self.plain else [f"{name}-{i}" for i in range(size)]
            if not all(m in placed for m in members):
                continue
            for member in members:
                self.cp.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{member}?gracePeriodSeconds=0")
            self._live.remove((name, size))
            self.deleted.add(name)
            requested -= size * self.pod_cpu

    def live(self) -> dict[str, int]:
        """Gangs and plain pods not deleted: name -> members."""
        return dict(self._live)

    def sizes(self) -> dict[str, int]:
        """Every gang created so far: name -> members (safe while the thread runs)."""
        with self._lock:
            return dict(self.gangs)

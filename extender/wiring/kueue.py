"""Kueue Topology watch: discovery of ``topologies.kueue.x-k8s.io`` and the reflector feeding the levels.

Owns: ``TopologyWatch``, which asks the server for the newest served version of Kueue's Topology API
(``cluster.levels.TOPOLOGY_VERSIONS``) each discovery round and starts, switches or stops one reflector
for it (the CRD installed, upgraded or removed; removal forgets every Topology); and building that
reflector over the API client so that lists and watch events go to a ``TopologyLevels`` holder, with
objects it rejects logged and counted (never stopping the watch).

The Topology watch is optional: it does not count toward ``/readyz`` (a Kueue outage or a broken
Topology CRD must not stop gangs from scheduling; gangs then fall back along ``--topology-levels``) and
its discovery failures are logged by the caller, apart from the gang APIs'. Must not: touch the mirror,
parse Topology objects (``cluster.levels`` does), or decide anything about gangs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from extender.cluster.levels import (
    KUEUE_GROUP,
    TOPOLOGY_RESOURCE,
    TOPOLOGY_VERSIONS,
    Rejected,
    TopologyLevels,
    object_name,
)
from extender.kube.client import KubeClient
from extender.kube.watching import Reflector, watch_or_gone

log = logging.getLogger(__name__)

NAME = f"{TOPOLOGY_RESOURCE}.{KUEUE_GROUP}"


class TopologyWatch:
    """The newest served version of Kueue's Topology API, watched through ``start(version)``.

    ``discover()`` asks ``serves`` newest version first; a failed question propagates and changes
    nothing. ``stop(reflector)`` stops a watch that is switched or dropped.
    """

    def __init__(self, serves: Callable[[str, str, str], bool], start: Callable[[str], Reflector],
                 stop: Callable[[Reflector], None]) -> None:
        self._serves, self._start, self._stop = serves, start, stop
        self.active: tuple[str, Reflector] | None = None
        self.lock = threading.Lock()

    def newest_served(self) -> str | None:
        return next((v for v in TOPOLOGY_VERSIONS if self._serves(KUEUE_GROUP, v, TOPOLOGY_RESOURCE)), None)

    def discover(self) -> list[str]:
        """One round; returns what changed, e.g. ``["+topologies.kueue.x-k8s.io/v1beta1"]``."""
        wanted = self.newest_served()
        changes: list[str] = []
        with self.lock:
            current = self.active
            if current is not None and current[0] == wanted:
                return changes
            if current is not None:
                self.active = None
                self._stop(current[1])
                changes.append(f"-{NAME}/{current[0]}")
            if wanted is not None:
                self.active = (wanted, self._start(wanted))
                changes.append(f"+{NAME}/{wanted}")
        return changes

    def version(self) -> str | None:
        with self.lock:
            return self.active[0] if self.active is not None else None


class TopologyFeed:
    """Starts and stops the Topology reflector over ``kube``, feeding ``levels``."""

    def __init__(self, levels: TopologyLevels, kube: KubeClient) -> None:
        self.levels, self.kube = levels, kube
        self._watch_stop = threading.Event()

    def start(self, version: str) -> Reflector:
        """``TopologyWatch``'s ``start``: watch the Topologies at ``version`` (started)."""
        self._watch_stop = stop = threading.Event()
        path = f"/apis/{KUEUE_GROUP}/{version}/{TOPOLOGY_RESOURCE}"
        reflector = Reflector(NAME, lambda: self.kube.list(path), watch_or_gone(lambda rv: self.kube.watch(path, rv)),
                              self._replace, self._apply, stop)
        reflector.start()
        return reflector

    def stop_watch(self, old: Reflector) -> None:
        """``TopologyWatch``'s ``stop``: stop watching and forget every Topology."""
        self._watch_stop.set()
        self.levels.replace([])

    def stop_all(self) -> None:
        """The runtime stops: end the watch (the Topologies are kept; nothing reads them any more)."""
        self._watch_stop.set()

    def _replace(self, items: Iterable[dict[str, Any]]) -> None:
        self._log(self.levels.replace(items))
        log.info("Kueue Topologies: %s", ", ".join(f"{name} {list(levels)}" for name, levels
                                                   in sorted(self.levels.topologies().items())) or "none")

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        rejected = self.levels.apply(kind, obj)
        self._log(rejected)
        if not rejected:
            name = object_name(obj)
            log.info("Kueue Topology %s %s: %s", name, kind.lower(), list(self.levels.topologies().get(name, ())))

    @staticmethod
    def _log(rejected: list[Rejected]) -> None:
        for item in rejected:
            log.warning("ignoring Kueue Topology: %s", item.message)


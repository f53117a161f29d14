"""Feeds: the reflectors that keep the mirror in step with the API server, one per watched collection.

Owns: building the ``Reflector`` for nodes, pods, PodDisruptionBudgets (into ``DisruptionBudgets``, not
the mirror) and each watched group API over the API client; the handlers that turn each watch event
into an update (``ADDED``/``MODIFIED`` upsert, ``DELETED`` removes); counting and logging an object
too malformed to mirror instead of stopping its watch; the stop event of each group watch. Must not:
choose which group APIs to watch (``discovery`` does), parse objects (the mirror and the budgets do),
or decide anything about gangs.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from extender.cluster.budgets import DisruptionBudgets
from extender.cluster.groups import GroupApi
from extender.cluster.mirror import ClusterMirror
from extender.kube.client import KubeClient
from extender.kube.watching import Reflector, watch_or_gone
from extender.model.gang import GroupKind

log = logging.getLogger(__name__)

Replace = Callable[[Iterable[dict[str, Any]]], None]  # a full list
Apply = Callable[[str, dict[str, Any]], None]         # one watch event: (type, object)


class MirrorFeeds:
    """Reflectors from the API server into ``mirror``; each stops with ``stop`` (group watches also on
    their own, when discovery drops or switches their API)."""

    def __init__(self, mirror: ClusterMirror, kube: KubeClient, stop: threading.Event) -> None:
        self.mirror, self.kube, self.stop = mirror, kube, stop
        self._group_stops: dict[GroupKind, threading.Event] = {}

    def core(self) -> list[Reflector]:
        """The node and pod reflectors, not started."""
        return [self._reflector("nodes", "/api/v1/nodes", self.mirror.replace_nodes, self._apply_node),
                self._reflector("pods", "/api/v1/pods", self.mirror.replace_pods, self._apply_pod)]

    def budgets(self, budgets: DisruptionBudgets) -> Reflector:
        """The policy/v1 PodDisruptionBudget reflector of every namespace, into ``budgets``, not started."""
        return self._reflector("poddisruptionbudgets", "/apis/policy/v1/poddisruptionbudgets", budgets.replace,
                               functools.partial(self._apply_budget, budgets))

    def start_group(self, api: GroupApi, version: str) -> Reflector:
        """``GroupWatches``' ``start``: watch ``api`` at ``version`` (started)."""
        stop = self._group_stops[api.kind] = threading.Event()
        started = self._reflector(api.name, api.path(version), functools.partial(self._replace_groups, api.kind),
                                  functools.partial(self._apply_group, api.kind), stop)
        started.start()
        return started

    def stop_group(self, api: GroupApi, old: Reflector) -> None:
        """``GroupWatches``' ``stop``: stop watching ``api`` and forget its objects."""
        self._group_stops.pop(api.kind, threading.Event()).set()
        self.mirror.replace_groups(api.kind, [])  # served no more (or by another version, which relists)

    def stop_groups(self) -> None:
        for stop in self._group_stops.values():
            stop.set()

    # ------------------------------------------------------------------------------ reflectors
    def _reflector(self, name: str, path: str, replace: Replace, apply: Apply,
                   stop: threading.Event | None = None) -> Reflector:
        return Reflector(name, lambda: self.kube.list(path),
                         watch_or_gone(lambda rv: self.kube.watch(path, rv)),
                         replace, functools.partial(self._apply_safely, name, apply), stop or self.stop)

    def _apply_safely(self, name: str, apply: Apply, kind: str, obj: dict[str, Any]) -> None:
        try:
            apply(kind, obj)
        except ValueError as exc:
            self.mirror.rejected_objects += 1
            meta = obj.get("metadata") or {}
            log.warning("ignoring malformed %s %s/%s: %s", name, meta.get("namespace"), meta.get("name"), exc)

    # ------------------------------------------------------------------------------ handlers
    def _apply_node(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.mirror.delete_node(str(obj["metadata"]["name"]))
        else:
            self.mirror.upsert_node(obj)

    def _apply_pod(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            meta = obj.get("metadata") or {}
            self.mirror.delete_pod(str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"))
        else:
            self.mirror.upsert_pod(obj)

    @staticmethod
    def _apply_budget(budgets: DisruptionBudgets, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            meta = obj.get("metadata") or {}
            budgets.delete(str(meta.get("namespace") or "default"), str(meta.get("name")))
        else:
            budgets.upsert(obj)

    def _replace_groups(self, group_kind: GroupKind, items: Iterable[dict[str, Any]]) -> None:
        self.mirror.replace_groups(group_kind, items)

    def _apply_group(self, group_kind: GroupKind, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if kind == "DELETED":
            self.mirror.delete_group(group_kind, str(meta.get("namespace") or "default"), str(meta.get("name")))
        else:
            self.mirror.upsert_group(group_kind, obj)

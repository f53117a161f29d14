"""Discovery: which group APIs the API server serves, and one watch for each of them.

Owns: ``GroupWatches``, the newest served version of each group API (``GROUP_APIS``: Workload,
PodGroup, the PodGroup CRD), found by asking the server about every known version, and the watch kept
for each (started, switched to another version, or stopped when none is served any more: a CRD
removed). Must not: talk to the API server other than through the ``serves`` question it is handed,
build reflectors itself (``start``/``stop`` do), or touch the mirror.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from extender.cluster.groups import GROUP_APIS, GroupApi
from extender.kube.watching import Reflector
from extender.model.gang import GroupKind


class GroupWatches:
    """Which group APIs are watched: the newest served version of each, kept up to date.

    ``discover()`` asks ``serves(group, version, resource)`` for every known version and then starts,
    restarts (another version became the newest) or stops (no version served any more: the CRD was
    removed) one reflector per group API through ``start(api, version)`` and ``stop(api)``. A failed
    question changes nothing: the error propagates and the current watches stay.
    """

    def __init__(self, serves: Callable[[str, str, str], bool], start: Callable[[GroupApi, str], Reflector],
                 stop: Callable[[GroupApi, Reflector], None], apis: Iterable[GroupApi] = GROUP_APIS) -> None:
        self._serves, self._start, self._stop = serves, start, stop
        self.apis = tuple(apis)
        self.active: dict[GroupKind, tuple[str, Reflector]] = {}
        self.lock = threading.Lock()

    def newest_served(self) -> dict[GroupKind, str]:
        found: dict[GroupKind, str] = {}
        for api in self.apis:
            for version in api.versions:
                if self._serves(api.group, version, api.resource):
                    found[api.kind] = version
                    break
        return found

    def discover(self) -> list[str]:
        """One round; returns what changed, e.g. ``["+podgroups.scheduling.k8s.io/v1beta1"]``."""
        served = self.newest_served()
        changes: list[str] = []
        with self.lock:
            for api in self.apis:
                current = self.active.get(api.kind)
                wanted = served.get(api.kind)
                if current is not None and current[0] == wanted:
                    continue
                if current is not None:
                    del self.active[api.kind]
                    self._stop(api, current[1])
                    changes.append(f"-{api.name}/{current[0]}")
                if wanted is not None:
                    self.active[api.kind] = (wanted, self._start(api, wanted))
                    changes.append(f"+{api.name}/{wanted}")
        return changes

    def reflectors(self) -> list[Reflector]:
        with self.lock:
            return [reflector for _, reflector in self.active.values()]

    def versions(self) -> dict[str, str]:
        with self.lock:
            return {api.name: self.active[api.kind][0] for api in self.apis if api.kind in self.active}


"""An in-memory Lease API at our own seam (``extender.kube.lease.LeaseApi``), for the elector's unit tests.

It keeps what the API server guarantees and the elector relies on: every write bumps the
resourceVersion; a PUT whose metadata.resourceVersion is not the stored one is refused with 409; a
create of an existing Lease is refused with 409; annotations over 256 KiB in total are refused with
422. Each client (one per replica) can be cut off (``down``: every call fails as unreachable) or made to
lose the reply of its next write after the write was applied (``lose_reply``: a timeout).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from extender.errors import KubeError


class FakeLeases:
    """The server side: Lease objects by (namespace, name)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.writes = 0

    def client(self) -> FakeLeaseApi:
        return FakeLeaseApi(self)

    def lease(self, namespace: str = "ns", name: str = "lease") -> dict[str, Any]:
        return copy.deepcopy(self.objects[(namespace, name)])

    def store(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
        if size > 256 * 1024:
            raise KubeError(f"PUT lease {name}: 422 metadata.annotations: Too long: must have at most 262144 bytes",
                            422)
        self.version += 1
        self.writes += 1
        stored = copy.deepcopy(dict(body))
        stored.setdefault("metadata", {}).update(name=name, namespace=namespace, resourceVersion=str(self.version))
        self.objects[(namespace, name)] = stored
        return copy.deepcopy(stored)

    def edit(self, namespace: str, name: str, change: Any) -> None:
        """Another client (kubectl) changes the Lease: ``change(obj)`` then a new resourceVersion."""
        obj = self.lease(namespace, name)
        change(obj)
        self.store(namespace, name, obj)


class FakeLeaseApi:
    """One replica's connection."""

    def __init__(self, server: FakeLeases) -> None:
        self.server = server
        self.down = False
        self.lose_reply = False
        self.calls: list[str] = []

    def _reach(self, call: str) -> None:
        self.calls.append(call)
        if self.down:
            raise KubeError(f"{call}: connection refused")

    def get(self, namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
        self._reach("get")
        found = self.server.objects.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def create(self, namespace: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        self._reach("create")
        name = body["metadata"]["name"]
        if (namespace, name) in self.server.objects:
            raise KubeError(f"POST lease {name}: 409 already exists", 409)
        return self._reply(self.server.store(namespace, name, body))

    def replace(self, namespace: str, name: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        self._reach("replace")
        current = self.server.objects.get((namespace, name))
        if current is None:
            raise KubeError(f"PUT lease {name}: 404 not found", 404)
        if (body.get("metadata") or {}).get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise KubeError(f"PUT lease {name}: 409 the object has been modified", 409)
        return self._reply(self.server.store(namespace, name, body))

    def _reply(self, stored: dict[str, Any]) -> dict[str, Any]:
        if self.lose_reply:
            self.lose_reply = False
            raise KubeError("PUT lease: read timed out")
        return stored


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

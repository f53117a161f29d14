"""Snapshot mode: serve a cluster described by a file instead of an API server.

Owns: reading a Kubernetes ``List`` (YAML or JSON, as ``kubectl get nodes,pods,podgroups -A -o yaml``
prints; a multi-document YAML stream works too) into the mirror, and a Binder that applies binds to
the in-memory state only. Used by demos, load tests and tests. Must not: import the client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender.cluster.groups import OBJECT_KINDS
from extender.cluster.mirror import ClusterMirror
from extender.errors import BindError, SnapshotError
from extender.model import messages


def read_objects(path: str | Path) -> list[dict[str, Any]]:
    """Every object in the file, with List wrappers flattened."""
    text = Path(path).read_bytes()
    try:
        docs: list[Any] = [orjson.loads(text)]
    except orjson.JSONDecodeError:
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise SnapshotError(f"{path}: neither JSON nor YAML: {exc}") from None
    objects: list[dict[str, Any]] = []
    pending = [d for d in docs if d]
    while pending:
        doc = pending.pop(0)
        if not isinstance(doc, dict):
            raise SnapshotError(f"{path}: expected Kubernetes objects, found {type(doc).__name__}")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            pending[0:0] = doc["items"]
        else:
            objects.append(doc)
    return objects


_GROUP_KINDS = OBJECT_KINDS


def load_into(mirror: ClusterMirror, objects: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Feed objects to the mirror; returns counts per kind. Unknown kinds are counted and skipped."""
    counts: dict[str, int] = {}
    with mirror.lock:
        for obj in objects:
            kind = str(obj.get("kind") or "")
            group_kind = _GROUP_KINDS.get((str(obj.get("apiVersion") or ""), kind))
            try:
                if kind == "Node":
                    mirror.upsert_node(obj)
                elif kind == "Pod":
                    mirror.upsert_pod(obj)
                elif group_kind is not None:
                    mirror.upsert_group(group_kind, obj)
                else:
                    kind = "skipped"
            except ValueError as exc:
                name = (obj.get("metadata") or {}).get("name")
                raise SnapshotError(f"{kind} {name!r}: {exc}") from None
            counts[kind] = counts.get(kind, 0) + 1
    return counts


class SnapshotBinder:
    """Binds by updating the mirror, as if the API server had accepted the binding."""

    def __init__(self, mirror: ClusterMirror) -> None:
        self.mirror = mirror

    def bind(self, namespace: str, name: str, uid: str, node: str, timeout: float = 10.0) -> None:
        pod = self.mirror.pod(namespace, name)
        if pod is None or (uid and pod.uid != uid):
            raise BindError(messages.pod_not_in_snapshot(namespace, name))
        if node not in self.mirror.nodes:
            raise BindError(messages.node_not_in_snapshot(node))
        self.mirror.bind_locally(pod.uid, node)

    def read_pod(self, namespace: str, name: str, timeout: float = 10.0) -> Mapping[str, Any] | None:
        return None

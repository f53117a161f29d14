"""KubeBinder: the engine's ``Binder`` port over the API server.

Owns: creating a ``pods/binding`` and reading a pod back through ``KubeClient``, with the client's
``KubeError`` turned into the port's ``BindError``. Must not: decide which pod binds where, retry, or
hold any state besides the client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.errors import BindError, KubeError
from extender.kube.client import KubeClient


class KubeBinder:
    """Binder over the API server: ``pods/binding`` and pod reads."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    def bind(self, namespace: str, name: str, uid: str, node: str, timeout: float = 10.0) -> None:
        try:
            self.kube.bind(namespace, name, uid, node, timeout)
        except KubeError as exc:
            raise BindError(str(exc)) from None

    def read_pod(self, namespace: str, name: str, timeout: float = 10.0) -> Mapping[str, Any] | None:
        try:
            return self.kube.read_pod(namespace, name, timeout)
        except KubeError as exc:
            raise BindError(str(exc)) from None

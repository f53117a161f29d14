"""The leader Lease as an object: how it is read and written, how it is configured.

Owns: the seam to the API server for ``coordination.k8s.io/v1`` Leases (``LeaseApi``, and
``KubeLeaseApi`` over our client: GET, POST, PUT with the resourceVersion), the election's timing
settings and their checks (``ElectionConfig``), a replica's identity, the namespace it defaults to, and
reading and stamping the Lease's fields (times, duration). Must not: decide who leads or when (the
elector in ``leader`` does), or touch any object but Leases.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from extender.errors import KubeError
from extender.kube.client import KubeClient

JITTER = 1.2  # a candidate retries after retry_period x uniform(1, JITTER)
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class LeaseApi(Protocol):
    """The seam to the API server: raw Lease objects, errors as ``KubeError`` (409: conflict)."""

    def get(self, namespace: str, name: str, timeout: float) -> dict[str, Any] | None: ...

    def create(self, namespace: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]: ...

    def replace(self, namespace: str, name: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]: ...


class KubeLeaseApi:
    """``LeaseApi`` over our API client: GET, POST and PUT (the PUT carries metadata.resourceVersion,
    which the server checks). RBAC: leases get, create, update in the Lease's namespace."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    @staticmethod
    def _path(namespace: str, name: str = "") -> str:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
        return f"{path}/{quote(name, safe='')}" if name else path

    def get(self, namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = self.kube.request("GET", self._path(namespace, name), timeout=timeout)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return lease

    def create(self, namespace: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        created: dict[str, Any] = self.kube.request("POST", self._path(namespace), body=dict(body),
                                                    timeout=timeout)
        return created

    def replace(self, namespace: str, name: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        replaced: dict[str, Any] = self.kube.request("PUT", self._path(namespace, name), body=dict(body),
                                                     timeout=timeout)
        return replaced


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    namespace: str
    name: str
    lease_duration: float = 15.0  # seconds a candidate waits on an unchanged Lease before taking it
    renew_deadline: float = 10.0  # seconds the leader leads after sending its last successful write
    retry_period: float = 2.0     # seconds between renewals, and between a candidate's tries

    def problems(self) -> list[str]:
        found = [f"{label} must be a finite number > 0, got {value}"
                 for label, value in (("lease duration", self.lease_duration),
                                      ("renew deadline", self.renew_deadline),
                                      ("retry period", self.retry_period))
                 if not (value > 0 and math.isfinite(value))]
        if found:
            return found
        if not self.lease_duration > self.renew_deadline:
            found.append(f"lease duration ({self.lease_duration}) must be greater than the renew deadline "
                         f"({self.renew_deadline}): the leader must stop acting before another may take over")
        if not self.renew_deadline > JITTER * self.retry_period:
            found.append(f"renew deadline ({self.renew_deadline}) must be greater than {JITTER} x the retry "
                         f"period ({self.retry_period}): a leader needs more than one try to renew")
        if self.lease_duration != int(self.lease_duration):
            found.append(f"lease duration must be whole seconds (Lease leaseDurationSeconds), got "
                         f"{self.lease_duration}")
        return found


def new_identity() -> str:
    """Unique per process: two replicas on one host share a hostname, and a restarted process must
    not pass for its predecessor (it would renew a Lease it never acquired)."""
    return f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(4)}"


def default_namespace(path: Path = SA_NAMESPACE_FILE) -> str:
    """The namespace of the pod's service account when running in a cluster, else ``default``."""
    try:
        return path.read_text().strip() or "default"
    except OSError:
        return "default"


def micro_time(at: datetime) -> str:
    """A Lease's MicroTime (acquireTime, renewTime)."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_duration(lease: Mapping[str, Any], fallback: float) -> float:
    """The holder's own ``leaseDurationSeconds`` in ``lease``; ``fallback`` when it is missing or invalid."""
    value = (lease.get("spec") or {}).get("leaseDurationSeconds")
    return float(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else fallback

#!/usr/bin/env python3
"""kwok as a stand-in for kubelets on a local control plane (``hack/controlplane.py``).

Owns: finding or building the pinned kwok binary (``hack/build-kwok.sh``), one kwok process per
control plane (started and stopped through :meth:`ControlPlane.start_component`, so the control
plane's watchdog and ``stop()`` cover it too) and the Node objects it manages (:meth:`Kwok.add_nodes`).

kwok plays the Stages of ``hack/kwok-stages.yaml``: managed nodes become and stay Ready, pods bound
to them become Running, and a pod whose deletion has started (``deletionTimestamp`` set: a graceful
delete or an eviction) is deleted for good, as a kubelet does once its containers stopped.

Must not: touch any node without the label :data:`NODE_LABEL` ``=true`` (the control plane's plain
fake nodes keep their behaviour: bound pods stay Pending, deletions with a grace period never
finish), nor decide anything about scheduling.

Library use::

    with ControlPlane(find_bin_dir()) as cp, Kwok(cp, find_kwok_bin_dir()) as kwok:
        kwok.add_nodes(3, prefix="gpu-", cpu="8", labels={"pool": "gpu"})   # Ready when it returns
"""

from __future__ import annotations

import http.client
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from controlplane import (
    REPO_ROOT,
    ApiClient,
    ControlPlane,
    ControlPlaneError,
    free_ports,
    run_build_script,
    tail,
    wait_for,
)

KWOK_VERSION: Final = "0.8.0"  # keep in step with KWOK_VERSION in hack/build-kwok.sh
BUILD_SCRIPT: Final = REPO_ROOT / "hack" / "build-kwok.sh"
STAGES: Final = REPO_ROOT / "hack" / "kwok-stages.yaml"

#: kwok manages exactly the nodes with this label set to "true" (``--manage-nodes-with-label-selector``).
NODE_LABEL: Final = "gang-extender.io/kwok"
NODE_SELECTOR: Final = f"{NODE_LABEL}=true"
#: The annotation kwok's own tooling (kwokctl) puts on its nodes and selects them by; ours carry it
#: too, so the nodes look like kwok nodes to anyone who knows kwok, though we select by the label.
NODE_ANNOTATIONS: Final[Mapping[str, str]] = {"kwok.x-k8s.io/node": "fake"}
#: Where kwok takes the fake pod IPs it writes into pod status from (no traffic ever goes there).
POD_CIDR: Final = "10.244.0.0/16"


def find_kwok_bin_dir(env: Mapping[str, str] | None = None) -> Path:
    """Run ``hack/build-kwok.sh`` (which builds only if needed) and return the directory holding ``kwok``.

    Raises :class:`controlplane.BinariesUnavailableError` when kwok is not built and ``go`` is not
    installed, :class:`ControlPlaneError` on any other failure.
    """
    bin_dir = run_build_script(BUILD_SCRIPT, env, missing="kwok is not built and `go` is not installed")
    if not os.access(bin_dir / "kwok", os.X_OK):
        raise ControlPlaneError(f"{BUILD_SCRIPT} printed {bin_dir}, which has no executable kwok")
    return bin_dir


def is_ready(node: Mapping[str, Any]) -> bool:
    """Whether a Node object's Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions") or [])


class Kwok:
    """One kwok process managing the nodes labelled :data:`NODE_SELECTOR` of control plane ``cp``.

    ``name`` is its component name on the control plane (its log is ``<workdir>/<name>.log``).
    """

    def __init__(self, cp: ControlPlane, bin_dir: str | os.PathLike[str], *, stages: Path = STAGES,
                 name: str = "kwok") -> None:
        self.cp = cp
        self.binary = Path(bin_dir) / "kwok"
        self.stages = stages
        self.name = name
        self.port = free_ports(1)[0]
        self._node_index: dict[str, int] = {}

    def __enter__(self) -> Kwok:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def log_path(self) -> Path:
        return self.cp.log_path(self.name)

    @property
    def running(self) -> bool:
        return self.cp.is_running(self.name)

    def start(self, timeout: float = 30.0) -> None:
        """Start kwok and wait until its ``/readyz`` answers (it serves only that and a few
        kubelet-like endpoints, on loopback)."""
        argv = [
            str(self.binary),
            f"--kubeconfig={self.cp.kubeconfig}",
            f"--config={self.stages}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-label-selector={NODE_SELECTOR}",
            "--node-lease-duration-seconds=0",  # no node Leases: the node-heartbeat stage posts status
            f"--cidr={POD_CIDR}",
            f"--server-address=127.0.0.1:{self.port}",
        ]
        # KWOK_WORKDIR keeps a user's ~/.kwok/kwok.yaml (which kwok would load first) out of the test bed.
        env = {"KWOK_WORKDIR": str(self.cp.workdir / "kwok-home")}
        t0 = time.monotonic()
        self.cp.start_component(self.name, argv, self._ready, env=env, timeout=timeout)
        self.cp.log(f"[kwok] managing nodes {NODE_SELECTOR} ({time.monotonic() - t0:.1f}s), log {self.log_path}")

    def _ready(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        finally:
            conn.close()

    def stop(self) -> None:
        """Stop kwok (SIGTERM, SIGKILL after 10 s) if it runs. Its nodes stay; nothing plays their stages."""
        self.cp.stop_component(self.name)

    def add_nodes(
        self,
        n: int,
        prefix: str = "kwok-",
        cpu: str = "4",
        memory: str = "16Gi",
        labels: Mapping[str, str] | None = None,
        *,
        pods: str = "110",
        resources: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] | None = None,
        timeout: float = 30.0,
    ) -> list[str]:
        """Create ``n`` kwok-managed nodes ``<prefix><i>`` and return their names once kwok made them Ready.

        Numbering continues where the previous call with the same prefix stopped. Each node carries
        :data:`NODE_LABEL` ``=true``, :data:`NODE_ANNOTATIONS`, the usual ``kubernetes.io/*`` labels and
        ``labels``; its capacity (= allocatable) is ``cpu``, ``memory``, ``pods`` and ``resources``. It is
        created with that status but no conditions: the Ready condition is kwok's doing.
        """
        first = self._node_index.get(prefix, 0)
        names = [f"{prefix}{i}" for i in range(first, first + n)]
        self._node_index[prefix] = first + n
        capacity = {"cpu": cpu, "memory": memory, "pods": pods, **(resources or {})}
        api = self.cp.api
        for name in names:
            api.request("POST", "/api/v1/nodes", _node(name, capacity, labels or {}, taints or ()))
        self.wait_ready(names, timeout=timeout)
        return names

    def wait_ready(self, names: Sequence[str], *, timeout: float = 30.0) -> None:
        """Wait until every node in ``names`` is Ready; the timeout's error carries kwok's log tail."""
        wanted = set(names)

        def all_ready() -> bool:
            if not self.running:
                raise ControlPlaneError(f"kwok is not running; last lines of {self.log_path}:\n{tail(self.log_path)}")
            nodes = _list(self.cp.api, "/api/v1/nodes", NODE_SELECTOR)
            return wanted <= {node["metadata"]["name"] for node in nodes if is_ready(node)}

        try:
            wait_for(all_ready, timeout=timeout, interval=0.1, what=f"kwok to make {len(wanted)} node(s) Ready")
        except TimeoutError as exc:
            raise ControlPlaneError(f"{exc}; last lines of {self.log_path}:\n{tail(self.log_path)}") from None


def _node(name: str, capacity: Mapping[str, str], labels: Mapping[str, str],
          taints: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "type": "kwok", **labels, NODE_LABEL: "true"},
            "annotations": dict(NODE_ANNOTATIONS),
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        # A Node keeps the status it is created with; kwok's node-ready stage adds the conditions.
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        },
    }


def _list(api: ApiClient, path: str, label_selector: str) -> list[dict[str, Any]]:
    from urllib.parse import quote

    items: list[dict[str, Any]] = api.request("GET", f"{path}?labelSelector={quote(label_selector)}")["items"]
    return items

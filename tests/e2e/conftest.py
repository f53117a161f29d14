"""Fixtures for the end-to-end tier: a real etcd + kube-apiserver + kube-controller-manager on loopback.

The binaries come from ``hack/build-k8s.sh`` (which builds them if needed, or honours
``KUBEBUILDER_ASSETS``). When they are missing and ``go`` is not installed either, every e2e test is
skipped with a loud reason; any other failure to find, build or start them is an error.

``GANG_E2E_KEEP=1`` keeps each control plane's work directory (logs, certificates, kubeconfigs).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HACK_DIR = Path(__file__).resolve().parents[2] / "hack"
if str(HACK_DIR) not in sys.path:
    sys.path.insert(0, str(HACK_DIR))

import controlplane  # noqa: E402


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def k8s_bin_dir() -> Path:
    """The directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl."""
    try:
        return controlplane.find_bin_dir()
    except controlplane.BinariesUnavailableError as exc:
        reason = f"E2E TIER NOT RUN: Kubernetes binaries unavailable: {exc}"
        print(f"\n{'!' * 100}\n{reason}\n{'!' * 100}", file=sys.__stderr__, flush=True)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def control_plane(k8s_bin_dir: Path) -> Iterator[controlplane.ControlPlane]:
    """A started control plane (no scheduler, no nodes), shared by the tests of one module."""
    keep = os.environ.get("GANG_E2E_KEEP", "") not in ("", "0")
    with controlplane.ControlPlane(k8s_bin_dir, log=_log, keep=keep) as plane:
        yield plane

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

from tests.skipping import skip_loudly

HACK_DIR = Path(__file__).resolve().parents[2] / "hack"
if str(HACK_DIR) not in sys.path:
    sys.path.insert(0, str(HACK_DIR))

import controlplane  # noqa: E402
import kwok_harness  # noqa: E402


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def k8s_bin_dir() -> Path:
    """The directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl."""
    try:
        return controlplane.find_bin_dir()
    except controlplane.BinariesUnavailableError as exc:
        reason = f"E2E TIER NOT RUN: Kubernetes binaries unavailable: {exc}"
        skip_loudly(reason)


@pytest.fixture(scope="module")
def control_plane(k8s_bin_dir: Path) -> Iterator[controlplane.ControlPlane]:
    """A started control plane (no scheduler, no nodes), shared by the tests of one module."""
    keep = os.environ.get("GANG_E2E_KEEP", "") not in ("", "0")
    with controlplane.ControlPlane(k8s_bin_dir, log=_log, keep=keep) as plane:
        yield plane


# ------------------------------------------------------------------- kwok: a stand-in for kubelets
@pytest.fixture(scope="session")
def kwok_bin_dir() -> Path:
    """The directory with the pinned ``kwok`` binary (``hack/build-kwok.sh`` builds it if needed)."""
    try:
        return kwok_harness.find_kwok_bin_dir()
    except controlplane.BinariesUnavailableError as exc:
        reason = f"KWOK TESTS NOT RUN: kwok v{kwok_harness.KWOK_VERSION} unavailable: {exc}"
        skip_loudly(reason)


@pytest.fixture(scope="module")
def kwok(control_plane: controlplane.ControlPlane, kwok_bin_dir: Path) -> Iterator[kwok_harness.Kwok]:
    """kwok running against the module's control plane, managing only the nodes labelled
    ``gang-extender.io/kwok=true``: make them with ``kwok.add_nodes(n, prefix=..., cpu=..., labels=...)``.
    Pods bound to them turn Running, and their graceful deletions and evictions complete."""
    with kwok_harness.Kwok(control_plane, kwok_bin_dir) as running:
        yield running


# ------------------------------------------------------------------- other releases and gate sets
K8S_137 = "1.37.2"
GATES_137 = {"GenericWorkload": True}  # beta in 1.37 but off by default; no GangScheduling gate any more
RUNTIME_CONFIG_137 = ("scheduling.k8s.io/v1beta1=true",)


@pytest.fixture(scope="session")
def k8s_137_bin_dir() -> Path:
    """Kubernetes v1.37.x binaries (built by ``K8S_VERSION=1.37.2 hack/build-k8s.sh`` into their own cache)."""
    try:
        return controlplane.find_bin_dir({**os.environ, "K8S_VERSION": K8S_137})
    except controlplane.BinariesUnavailableError as exc:
        reason = f"E2E TIER (1.37) NOT RUN: Kubernetes {K8S_137} binaries unavailable: {exc}"
        skip_loudly(reason)


@pytest.fixture(scope="module")
def control_plane_137(k8s_137_bin_dir: Path) -> Iterator[controlplane.ControlPlane]:
    """A 1.37 control plane serving ``scheduling.k8s.io/v1beta1`` PodGroups (GenericWorkload on the API
    server and controller manager). kube-scheduler runs *without* GenericWorkload: the in-tree gang
    plugin is off and gang-extender decides every gang."""
    keep = os.environ.get("GANG_E2E_KEEP", "") not in ("", "0")
    with controlplane.ControlPlane(k8s_137_bin_dir, log=_log, keep=keep, feature_gates=GATES_137,
                                   default_feature_gates=False, runtime_config=RUNTIME_CONFIG_137,
                                   scheduler_feature_gates={}) as plane:
        yield plane


GATES_137_PREEMPTION = {**GATES_137, "PodGroupPreemptionPolicy": True}
"""KEP-5710's ``PodGroupPreemptionPolicy`` (alpha in 1.37.2, off by default): without it the API server
silently drops a PodGroup's ``spec.preemptionPolicy`` (``priority``, ``priorityClassName`` and
``disruptionMode`` need no gate beyond GenericWorkload)."""


@pytest.fixture(scope="module")
def control_plane_137_preemption(k8s_137_bin_dir: Path) -> Iterator[controlplane.ControlPlane]:
    """A 1.37 control plane as ``control_plane_137``, plus ``PodGroupPreemptionPolicy`` on the API server
    and controller manager, so PodGroups keep ``spec.preemptionPolicy`` (kube-scheduler: no gates)."""
    keep = os.environ.get("GANG_E2E_KEEP", "") not in ("", "0")
    with controlplane.ControlPlane(k8s_137_bin_dir, log=_log, keep=keep, feature_gates=GATES_137_PREEMPTION,
                                   default_feature_gates=False, runtime_config=RUNTIME_CONFIG_137,
                                   scheduler_feature_gates={}) as plane:
        yield plane


@pytest.fixture(scope="module")
def kwok_137(control_plane_137_preemption: controlplane.ControlPlane,
             kwok_bin_dir: Path) -> Iterator[kwok_harness.Kwok]:
    """kwok (as the ``kwok`` fixture) on ``control_plane_137_preemption``."""
    with kwok_harness.Kwok(control_plane_137_preemption, kwok_bin_dir) as running:
        yield running


@pytest.fixture(scope="module")
def control_plane_no_gates(k8s_bin_dir: Path) -> Iterator[controlplane.ControlPlane]:
    """A 1.35 control plane with no alpha/beta feature gate and no ``--runtime-config`` at all (what a
    managed cluster gives you): no Workload API, only the scheduler-plugins CRD and the annotations."""
    keep = os.environ.get("GANG_E2E_KEEP", "") not in ("", "0")
    with controlplane.ControlPlane(k8s_bin_dir, log=_log, keep=keep, feature_gates={}, default_feature_gates=False,
                                   runtime_config=()) as plane:
        yield plane


# ------------------------------------------------------------------- helm: the chart's own tool
@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The pinned ``helm`` binary (``hack/build-helm.sh`` builds it if needed)."""
    import helmchart

    try:
        return helmchart.find_helm()
    except controlplane.BinariesUnavailableError as exc:
        reason = f"HELM TESTS NOT RUN: helm v{helmchart.HELM_VERSION} unavailable: {exc}"
        skip_loudly(reason)

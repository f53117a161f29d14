"""Fixtures for the real-node tier: real kubelets, containerd and kube-proxy on this machine
(``hack/real-nodes/realnodes.py``), the images ``make image`` builds, the pinned helm.

Everything is built or installed by the project's scripts when missing (``hack/real-nodes/build.sh``,
``hack/image/build.sh``, ``hack/build-helm.sh``); the tier is skipped with a banner only where it cannot
run at all (not root, no apt and no Docker, no Go), and in CI it must run. Each module gets its own
control plane and nodes; only one real-node cluster can run on a machine at a time (a lock), while the
e2e tier's control planes may run beside it (other ports). ``GANG_E2E_KEEP=1`` keeps the control plane's
work directory (the kubelets', containerd's and kube-proxy's logs are there).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT / "hack", ROOT / "hack" / "real-nodes", ROOT / "tests" / "e2e"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import controlplane  # noqa: E402
import realcluster  # noqa: E402
import realnodes  # noqa: E402

from tests.skipping import skip_loudly  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "jobs_full: the job-controller tests beyond CI's short version (one controller, one job); "
        "make test leaves them out, make test-jobs and make test-realnodes run them")


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def realnode_bin_dir() -> Path:
    """Kubernetes binaries with kubelet and kube-proxy; Debian's containerd, runc, CNI plugins; the pause image."""
    if os.geteuid() != 0:
        skip_loudly("REAL-NODE TIER NOT RUN: it runs kubelets and containerd, which needs root")
    try:
        return realnodes.find_bin_dir()
    except controlplane.BinariesUnavailableError as exc:
        skip_loudly(f"REAL-NODE TIER NOT RUN: {exc}")


@pytest.fixture(scope="session")
def images(realnode_bin_dir: Path) -> realcluster.Images:
    """gang-extender:dev and the kube-scheduler image, built by ``hack/image/build.sh`` (checked by test_image.py)."""
    proc = subprocess.run(["bash", str(ROOT / "hack" / "image" / "build.sh")], env={**os.environ, "NO_CHECK": "1"},
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    sys.stderr.write("\n".join(line for line in proc.stdout.splitlines() if line.startswith("[")) + "\n")
    if proc.returncode != 0:
        raise AssertionError(f"hack/image/build.sh exited {proc.returncode}:\n{proc.stdout[-5000:]}")
    return realcluster.Images()


@pytest.fixture(scope="module")
def real_cluster(realnode_bin_dir: Path, images: realcluster.Images) -> Iterator[realcluster.RealCluster]:
    """A control plane advertising this machine's address, the default kube-scheduler, and two real nodes
    with both images imported."""
    keep = os.environ.get("GANG_E2E_KEEP", "") not in ("", "0")
    with (controlplane.ControlPlane(realnode_bin_dir, log=_log, keep=keep,
                                    advertise_address=realnodes.node_ip()) as plane,
          realnodes.RealNodes(plane, realnode_bin_dir, images=images.all, log=_log) as nodes):
        plane.start_scheduler()
        yield realcluster.RealCluster(plane, nodes, images)


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The pinned ``helm`` binary (``hack/build-helm.sh`` builds it if needed)."""
    import helmchart

    try:
        return helmchart.find_helm()
    except controlplane.BinariesUnavailableError as exc:
        skip_loudly(f"REAL-NODE CHART TESTS NOT RUN: helm v{helmchart.HELM_VERSION} unavailable: {exc}")


@pytest.fixture(scope="module")
def chart(real_cluster: realcluster.RealCluster, helm_bin: Path) -> realcluster.RealCluster:
    """charts/gang-extender installed with ``helm install`` and 2 replicas, both ready (the PodGroup CRD
    first, as docs/deploy.md says)."""
    real_cluster.kubectl("apply", "-k", str(ROOT / "manifests" / "crds"))
    real_cluster.helm_install(helm_bin, ["replicas=2"])
    real_cluster.wait_rollout(2)
    return real_cluster

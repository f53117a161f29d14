"""`make image`'s checks (hack/image/check.sh) of the images the real-node tier runs, as a user runs them:
gang-extender as 65532 with a read-only root filesystem and /tmp mounted, `serve --help`, its hot path
compiled (the image every real-node test runs is the compiled build; the e2e tier runs the source), a real
`serve --cluster-snapshot` answering /readyz; kube-scheduler from the pinned binary."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from realcluster import Images

from extender import native

pytestmark = [pytest.mark.e2e, pytest.mark.realnodes]

ROOT = Path(__file__).resolve().parents[2]


def test_images_run_as_users_run_them(images: Images) -> None:
    proc = subprocess.run(["bash", str(ROOT / "hack" / "image" / "check.sh")], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "serve --cluster-snapshot: /readyz 200" in proc.stderr
    every = len(native.COMPILED)
    assert f"hot path: compiled ({every} of {every} modules native)" in proc.stderr
    assert f"{images.scheduler}: Kubernetes v" in proc.stderr

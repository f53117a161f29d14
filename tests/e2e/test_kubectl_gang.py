"""``kubectl gang`` on Kubernetes 1.35 (``scheduling.k8s.io/v1alpha1`` Workloads): list and explain
from the API server alone, while gang-extender schedules (the scenario: tests/e2e/gangctl.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from gangctl import SOURCE_COLUMN, row, run_scenario
from support import pod, pod_spec, workload

pytestmark = pytest.mark.e2e


def group(ns: str, name: str, min_count: int) -> dict[str, Any]:
    return workload(ns, name, {"workers": min_count})


def member(ns: str, name: str, index: int, selector: Mapping[str, str]) -> dict[str, Any]:
    return pod(ns, f"{name}-{index}", pod_spec(cpu="1", selector=selector,
                                                workload_ref={"name": name, "podGroup": "workers"}))


def test_kubectl_gang_lists_and_explains_workload_gangs(control_plane: ControlPlane,
                                                        tmp_path: Path) -> None:
    out = run_scenario(control_plane, tmp_path, "kgang-135", group, member, lambda g: f"{g}/workers")
    assert row(out["list"], "train/workers")[SOURCE_COLUMN] == "Workload scheduling.k8s.io/v1alpha1", out["list"]

"""``kubectl gang`` on Kubernetes 1.37 (``scheduling.k8s.io/v1beta1`` PodGroups): list and explain from
the API server alone, while gang-extender schedules (the scenario: tests/e2e/gangctl.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from gangctl import SOURCE_COLUMN, row, run_scenario
from support import pod, pod_spec

pytestmark = pytest.mark.e2e

API = "scheduling.k8s.io/v1beta1"


def group(ns: str, name: str, min_count: int) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


def member(ns: str, name: str, index: int, selector: Mapping[str, str]) -> dict[str, Any]:
    spec = pod_spec(cpu="1", selector=selector)
    spec["schedulingGroup"] = {"podGroupName": name}
    return pod(ns, f"{name}-{index}", spec)


def test_kubectl_gang_lists_and_explains_podgroup_gangs(control_plane_137: ControlPlane, tmp_path: Path) -> None:
    out = run_scenario(control_plane_137, tmp_path, "kgang-137", group, member)
    assert row(out["list"], "train")[SOURCE_COLUMN] == f"PodGroup {API}", out["list"]

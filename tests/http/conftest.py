"""Fixtures for the HTTP tier: the real Flask app over a snapshot cluster (no API server needed).

The snapshot mirrors examples/snapshot.yaml: four 4-cpu/16Gi nodes, a Workload ``default/training`` whose
gang ``workers`` needs 4 pods while only 3 exist, and one ordinary pod ``default/web-1``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from extender.config import Settings
from extender.http.app import create_app

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
NODE_NAMES = ["node-1", "node-2", "node-3", "node-4"]


def snapshot_node(name: str) -> dict[str, Any]:
    resources = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": dict(resources), "capacity": dict(resources)}}


def snapshot_pod(name: str, uid: str, cpu: str, memory: str, workload_ref: dict[str, str] | None = None,
                 namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if workload_ref is not None:
        spec["workloadRef"] = workload_ref
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": {}},
            "spec": spec, "status": {"phase": "Pending"}}


def snapshot_objects() -> list[dict[str, Any]]:
    workers = {"name": "training", "podGroup": "workers"}
    return [
        *(snapshot_node(name) for name in NODE_NAMES),
        {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
         "metadata": {"name": "training", "namespace": "default"},
         "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "training"},
                  "podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 4}}}]}},
        *(snapshot_pod(f"training-worker-{i}", f"uid-worker-{i}", "2", "4Gi", workers) for i in range(3)),
        snapshot_pod("web-1", "uid-web-1", "1", "2Gi"),
    ]


@pytest.fixture
def snapshot_file(tmp_path: Path) -> Path:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": snapshot_objects()}))
    return path


AppFactory = Callable[..., Flask]


@pytest.fixture
def make_app(snapshot_file: Path) -> Iterator[AppFactory]:
    """Build apps over the snapshot (settings overridable); every runtime is closed at teardown."""
    apps: list[Flask] = []

    def make(**overrides: Any) -> Flask:
        overrides.setdefault("cluster_snapshot", str(snapshot_file))
        app = create_app(Settings(**overrides))
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.extensions["gang_extender"].runtime.close()


@pytest.fixture
def app(make_app: AppFactory) -> Flask:
    return make_app()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def golden() -> Callable[[str], Any]:
    """Loader of tests/data/golden files (parsed JSON)."""
    def load(name: str) -> Any:
        return json.loads((GOLDEN / name).read_text(encoding="utf-8"))
    return load

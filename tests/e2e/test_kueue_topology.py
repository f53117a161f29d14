"""Kueue ``Topology`` objects as the level order, against a real kube-apiserver and kube-scheduler (1.35).

gang-extender starts with no ``--topology-levels`` and no Kueue API. A minimal ``topologies.kueue.x-k8s.io``
CRD (``v1beta1``, cluster-scoped, schema left open) is installed afterwards; re-discovery must start
watching it without a restart, and a ``Topology`` listing zone, block and rack then decides where a
preferred-rack gang that no rack can hold falls back to: one block.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane, wait_for
from support import Extender, all_bound, check_invariants, create, events, scheduling_with_extender
from test_topology import BLOCK, PREFERRED, RACK, ZONE, gang_members, racks, values

pytestmark = pytest.mark.e2e

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "topologies.kueue.x-k8s.io"},
    "spec": {"group": "kueue.x-k8s.io", "scope": "Cluster",
             "names": {"plural": "topologies", "singular": "topology", "kind": "Topology", "listKind": "TopologyList"},
             "versions": [{"name": "v1beta1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}
TOPOLOGY = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "e2e-dc"},
            "spec": {"levels": [{"nodeLabel": ZONE}, {"nodeLabel": BLOCK}, {"nodeLabel": RACK}]}}


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    workdir = Path(tmp_path_factory.mktemp("extender-kueue-topology"))
    with scheduling_with_extender(control_plane, workdir, "--discovery-interval-seconds", "1") as ext:
        yield {"cp": control_plane, "ext": ext}


def logged(ext: Extender, text: str) -> bool:
    return text in ext.log_path.read_text(errors="replace")


def test_a_topology_installed_after_start_decides_the_preferred_fallback(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ext: Extender = cluster["ext"]
    cp.kubectl("apply", "-f", "-", input=json.dumps(CRD))
    cp.kubectl("wait", "--for=condition=Established", "crd/topologies.kueue.x-k8s.io", "--timeout=60s")
    wait_for(lambda: logged(ext, "Kueue Topology API: +topologies.kueue.x-k8s.io/v1beta1"), timeout=30,
             what="gang-extender to discover the Topology CRD without a restart")
    create(cp, TOPOLOGY)
    wait_for(lambda: logged(ext, f"e2e-dc added: {[ZONE, BLOCK, RACK]}") or logged(ext, "e2e-dc ["), timeout=30,
             what="gang-extender to read the Topology")
    ns = "kueue-levels"
    cp.create_namespace(ns)
    nodes = racks(cp, ns, {"z1-b1-a": 2, "z1-b1-b": 2, "z1-b2-c": 2, "z1-b2-d": 2})
    create(cp, *gang_members(ns, "pref", 3, 3, "3", {PREFERRED: RACK}))  # 3 x 3 cpu: a rack (2 x 4 cpu) holds 2
    placed = all_bound(cp, ns, "pref-", 3, set(nodes))
    assert len(values(nodes, placed, BLOCK)) == 1, placed
    wait_for(lambda: bool(events(cp, ns, "GangTopologyFallback")), timeout=30,
             what="a GangTopologyFallback event (Events are written by a background thread)")
    fallback = [e["message"] for e in events(cp, ns, "GangTopologyFallback")]
    assert fallback and f"no {RACK} domain could hold it" in fallback[0] and f"{BLOCK}=" in fallback[0], fallback
    assert ext.ready()  # the Topology watch is not part of readiness; the gang APIs' watches are unchanged
    check_invariants(cp, ext)

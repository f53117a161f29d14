"""Topology-aware gang placement against a real kube-apiserver and kube-scheduler (issue: topology).

Nodes are labelled into zones, blocks and racks; gang-extender runs with ``--topology-levels
zone,block,rack``. On 1.35 the constraint comes from gang-extender's annotations (the annotation gang
form: no alpha API needed); on 1.36 (``v1alpha2``) and 1.37 (``v1beta1``) from the PodGroup's
``spec.schedulingConstraints.topology``, with the ``TopologyAwareWorkloadScheduling`` gate on in the
API server only (kube-scheduler runs without GenericWorkload: gang-extender decides every gang).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import controlplane
import pytest
from controlplane import ControlPlane, wait_for
from support import (
    WAIT,
    Sampler,
    all_bound,
    bound,
    check_invariants,
    create,
    events,
    pod,
    pod_spec,
    scheduling_with_extender,
    stays_unbound,
)

from tests.skipping import skip_loudly

pytestmark = pytest.mark.e2e

ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "example.com/block", "example.com/rack"
LEVELS = ["--topology-levels", f"{ZONE},{BLOCK},{RACK}"]
REQUIRED, PREFERRED = "gang-extender.io/topology-required", "gang-extender.io/topology-preferred"


def racks(cp: ControlPlane, ns: str, shape: dict[str, int], *, cpu: str = "4",
          taints: dict[str, list[dict[str, str]]] | None = None) -> dict[str, dict[str, str]]:
    """Nodes for ``ns`` in racks named ``<zone>-<block>-<rack>`` (``shape``: rack -> node count); every
    node carries the scenario label its pods select. Returns node name -> its topology labels."""
    placed: dict[str, dict[str, str]] = {}
    for rack, count in shape.items():
        zone, block, _ = rack.split("-")
        labels = {"e2e-scenario": ns, ZONE: zone, BLOCK: f"{zone}-{block}", RACK: rack}
        for name in cp.add_nodes(count, cpu=cpu, labels=labels, prefix=f"{ns}-{rack}-",
                                 taints=(taints or {}).get(rack)):
            placed[name] = labels
    return placed


def occupy(cp: ControlPlane, ns: str, node: str, cpu: str) -> None:
    """A plain pod already bound to ``node`` (capacity in use)."""
    spec = pod_spec(cpu=cpu, selector={"e2e-scenario": ns})
    spec["nodeName"] = node
    create(cp, pod(ns, f"busy-{node}", spec))


def gang_members(ns: str, group: str, count: int, min_count: int, cpu: str,
                 annotations: dict[str, str]) -> list[dict[str, Any]]:
    spec = pod_spec(cpu=cpu, selector={"e2e-scenario": ns})
    marks = {"gang-extender.io/group": group, "gang-extender.io/min-count": str(min_count), **annotations}
    return [pod(ns, f"{group}-{i}", spec, annotations=marks) for i in range(count)]


def values(nodes: dict[str, dict[str, str]], placed: dict[str, str], key: str) -> set[str]:
    return {nodes[node][key] for node in placed.values()}


# ------------------------------------------------------------------------------------------ 1.35
@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with scheduling_with_extender(control_plane, tmp_path_factory.mktemp("extender-topology"), *LEVELS) as ext:
        yield {"cp": control_plane, "ext": ext}


@pytest.fixture(autouse=True)
def invariants(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "cluster" in request.fixturenames:
        cluster = request.getfixturevalue("cluster")
        check_invariants(cluster["cp"], cluster["ext"])


def test_required_rack_gang_lands_in_the_one_rack_that_holds_it_not_a_tainted_one(cluster: dict[str, Any]) -> None:
    """Racks a and b are half used, rack c is empty but tainted NoSchedule, rack d is empty: without
    the constraint the planner packs the half-used nodes first (across racks); with it, only d."""
    cp: ControlPlane = cluster["cp"]
    ns = "topo-required"
    cp.create_namespace(ns)
    taint = [{"key": "maintenance", "value": "rack", "effect": "NoSchedule"}]
    nodes = racks(cp, ns, {"z1-b1-a": 2, "z1-b1-b": 2, "z1-b2-c": 2, "z1-b2-d": 2}, taints={"z1-b2-c": taint})
    for node in (n for n, labels in nodes.items() if labels[RACK] in ("z1-b1-a", "z1-b1-b")):
        occupy(cp, ns, node, "2")
    with Sampler(cp, ns) as sampler:
        create(cp, *gang_members(ns, "train", 4, 4, "2", {REQUIRED: RACK}))
        placed = all_bound(cp, ns, "train-", 4, set(nodes))
    assert values(nodes, placed, RACK) == {"z1-b2-d"}, placed
    assert sampler.partial("train-", 4) == []


def test_preferred_rack_that_no_rack_holds_lands_in_one_block(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns = "topo-preferred"
    cp.create_namespace(ns)
    nodes = racks(cp, ns, {"z1-b1-a": 2, "z1-b1-b": 2, "z1-b2-c": 2, "z1-b2-d": 2})
    create(cp, *gang_members(ns, "pref", 3, 3, "3", {PREFERRED: RACK}))  # 3 x 3 cpu: a rack holds 2
    placed = all_bound(cp, ns, "pref-", 3, set(nodes))
    assert len(values(nodes, placed, BLOCK)) == 1, placed
    assert len(values(nodes, placed, RACK)) == 2, placed
    wait_for(lambda: bool(events(cp, ns, "GangTopologyFallback")), timeout=30,
             what="a GangTopologyFallback event (Events are written by a background thread)")
    fallback = [e["message"] for e in events(cp, ns, "GangTopologyFallback")]
    assert fallback and f"no {RACK} domain could hold it" in fallback[0] and f"{BLOCK}=" in fallback[0], fallback


def test_required_rack_no_rack_can_hold_fails_fast_with_the_reason(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns = "topo-never"
    cp.create_namespace(ns)
    racks(cp, ns, {"z1-b1-a": 2, "z1-b1-b": 2})
    create(cp, *gang_members(ns, "big", 3, 3, "3", {REQUIRED: RACK}))
    wait_for(lambda: events(cp, ns, "GangNeverFits"), timeout=WAIT, what="a GangNeverFits Event")
    message = events(cp, ns, "GangNeverFits")[0]["message"]
    assert f"no {RACK} domain can hold all 3 members even when empty" in message, message
    stays_unbound(cp, ns, "big-", 3)


def test_members_beyond_min_count_join_their_gang_domain(cluster: dict[str, Any]) -> None:
    cp: ControlPlane = cluster["cp"]
    ns = "topo-beyond"
    cp.create_namespace(ns)
    nodes = racks(cp, ns, {"z1-b1-a": 2, "z1-b1-b": 2, "z1-b2-c": 2})
    create(cp, *gang_members(ns, "elastic", 2, 2, "1", {REQUIRED: RACK}))
    first = all_bound(cp, ns, "elastic-", 2, set(nodes))
    create(cp, *gang_members(ns, "elastic", 5, 2, "1", {REQUIRED: RACK})[2:])
    placed = all_bound(cp, ns, "elastic-", 5, set(nodes))
    assert values(nodes, placed, RACK) == values(nodes, first, RACK) and len(values(nodes, first, RACK)) == 1, placed


def test_a_rack_kube_scheduler_never_offers_is_planned_away_after_a_timeout(cluster: dict[str, Any]) -> None:
    """Rack a is the tightest fit, but kube-scheduler's own filters reject its nodes for these members
    (required pod anti-affinity to the pods already there, which gang-extender's plan does not model):
    the first attempt times out with the nodes never offered, and the next plan takes rack b."""
    cp: ControlPlane = cluster["cp"]
    ns = "topo-shunned"
    cp.create_namespace(ns)
    nodes = racks(cp, ns, {"z1-b1-a": 2, "z1-b1-b": 2})
    for node in (n for n, labels in nodes.items() if labels[RACK] == "z1-b1-a"):
        spec = pod_spec(cpu="1", selector={"e2e-scenario": ns})
        spec["nodeName"] = node
        create(cp, pod(ns, f"blocker-{node}", spec, labels={"anti": "shunned"}))
    spec = pod_spec(cpu="2", selector={"e2e-scenario": ns}, anti_affinity_label="shunned")
    marks = {"gang-extender.io/group": "shy", "gang-extender.io/min-count": "2", REQUIRED: RACK}
    create(cp, *[pod(ns, f"shy-{i}", spec, annotations=marks) for i in range(2)])
    wait_for(lambda: any("never offered" in e["message"] for e in events(cp, ns, "GangTimeout")),
             timeout=WAIT, what="a GangTimeout naming the nodes kube-scheduler never offered")
    placed = all_bound(cp, ns, "shy-", 2, set(nodes))
    assert values(nodes, placed, RACK) == {"z1-b1-b"}, placed


# ------------------------------------------------------------------------ 1.36 and 1.37 PodGroups
def _control_plane(version: str, gates: dict[str, bool], runtime_config: tuple[str, ...]) -> Iterator[ControlPlane]:
    try:
        bin_dir = controlplane.find_bin_dir({**os.environ, "K8S_VERSION": version})
    except controlplane.BinariesUnavailableError as exc:
        reason = f"E2E TIER ({version}) NOT RUN: Kubernetes {version} binaries unavailable: {exc}"
        skip_loudly(reason)
    keep = os.environ.get("GANG_E2E_KEEP", "") not in ("", "0")
    with controlplane.ControlPlane(bin_dir, log=print, keep=keep, feature_gates=gates, default_feature_gates=False,
                                   runtime_config=runtime_config, scheduler_feature_gates={}) as plane:
        yield plane


PODGROUP_APIS = {
    # release: (API version, the gates the API server needs for PodGroups with schedulingConstraints)
    "1.36.3": ("scheduling.k8s.io/v1alpha2", {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}),
    "1.37.2": ("scheduling.k8s.io/v1beta1", {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}),
}


@pytest.fixture(scope="module", params=sorted(PODGROUP_APIS))
def podgroup_cluster(request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    api, gates = PODGROUP_APIS[request.param]
    for cp in _control_plane(request.param, gates, (f"{api}=true",)):
        workdir = tmp_path_factory.mktemp(f"extender-topology-{request.param}")
        with scheduling_with_extender(cp, Path(workdir), *LEVELS) as ext:
            yield {"cp": cp, "ext": ext, "api": api, "release": request.param}


def test_podgroup_topology_field_keeps_the_gang_in_one_rack(podgroup_cluster: dict[str, Any]) -> None:
    cp: ControlPlane = podgroup_cluster["cp"]
    api = podgroup_cluster["api"]
    ns = "topo-podgroup"
    cp.create_namespace(ns)
    nodes = racks(cp, ns, {"z1-b1-a": 2, "z1-b1-b": 2, "z1-b2-c": 2})
    for node in (n for n, labels in nodes.items() if labels[RACK] != "z1-b2-c"):
        occupy(cp, ns, node, "2")
    group = {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": "pg", "namespace": ns},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 4}},
                      "schedulingConstraints": {"topology": [{"key": RACK}]}}}
    create(cp, group)
    stored = cp.request("GET", f"/apis/{api}/namespaces/{ns}/podgroups/pg")
    assert stored["spec"].get("schedulingConstraints") == {"topology": [{"key": RACK}]}, stored["spec"]
    spec = pod_spec(cpu="2", selector={"e2e-scenario": ns})
    spec["schedulingGroup"] = {"podGroupName": "pg"}
    with Sampler(cp, ns) as sampler:
        create(cp, *[pod(ns, f"pg-{i}", spec) for i in range(4)])
        placed = all_bound(cp, ns, "pg-", 4, set(nodes))
    assert values(nodes, placed, RACK) == {"z1-b2-c"}, placed
    assert sampler.partial("pg-", 4) == []
    check_invariants(cp, podgroup_cluster["ext"])
    assert bound(cp, ns, "busy-")  # the occupying pods stay where they were put


def test_a_podgroup_no_rack_can_hold_says_so_in_its_condition(podgroup_cluster: dict[str, Any]) -> None:
    """The status each API version defines carries the topology reason (1.36 ``PodGroupScheduled``,
    1.37 ``PodGroupInitiallyScheduled``: False, with the reason in the message)."""
    cp: ControlPlane = podgroup_cluster["cp"]
    api = podgroup_cluster["api"]
    ns = "topo-podgroup-never"
    cp.create_namespace(ns)
    racks(cp, ns, {"z1-b1-a": 2, "z1-b1-b": 2})
    create(cp, {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": "big", "namespace": ns},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 3}},
                         "schedulingConstraints": {"topology": [{"key": RACK}]}}})
    spec = pod_spec(cpu="3", selector={"e2e-scenario": ns})
    spec["schedulingGroup"] = {"podGroupName": "big"}
    create(cp, *[pod(ns, f"big-{i}", spec) for i in range(3)])
    expected = f"no {RACK} domain can hold all 3 members even when empty"

    def conditions() -> list[dict[str, Any]]:
        found = cp.request("GET", f"/apis/{api}/namespaces/{ns}/podgroups/big").get("status") or {}
        return list(found.get("conditions") or [])

    wait_for(lambda: any(c.get("status") == "False" and expected in c.get("message", "") for c in conditions()),
             timeout=WAIT, what="a False scheduling condition naming the rack")
    stays_unbound(cp, ns, "big-", 2)

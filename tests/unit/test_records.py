"""extender.cluster.records: raw Pods and Nodes -> compact records, with kube-scheduler's request arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cluster.groups import ANNOTATION_GROUP, ANNOTATION_MIN_COUNT, COSCHEDULING_LABEL
from extender.cluster.records import DEFAULT_MAX_PODS, node_record, pod_record, pod_requests
from extender.errors import GroupError, QuantityError, RecordError
from extender.model.cluster import NodeRecord, PodRecord, Taint
from extender.model.gang import GangKey, GangPolicy, GroupKind, GroupRef

GI = 2**30
MI = 2**20


def c(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
      restart_policy: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        container["resources"] = resources
    if restart_policy is not None:
        container["restartPolicy"] = restart_policy
    return container


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, {"pods": 1}),
        ({"containers": None}, {"pods": 1}),
        ({"containers": [c()]}, {"pods": 1}),
        ({"containers": [c({"cpu": "100m", "memory": "128Mi"})]}, {"cpu": 100, "memory": 128 * MI, "pods": 1}),
        # containers add up
        ({"containers": [c({"cpu": "100m"}), c({"cpu": "1", "memory": "1Gi"})]},
         {"cpu": 1100, "memory": GI, "pods": 1}),
        # extended resources
        ({"containers": [c({"nvidia.com/gpu": "2"}), c({"nvidia.com/gpu": 1})]}, {"nvidia.com/gpu": 3, "pods": 1}),
        # limits only: requests default to limits
        ({"containers": [c(limits={"cpu": "2", "memory": "1Gi"})]}, {"cpu": 2000, "memory": GI, "pods": 1}),
        # requests win over limits per resource; limits fill the missing ones
        ({"containers": [c({"cpu": "100m"}, {"cpu": "200m", "memory": "1Gi"})]},
         {"cpu": 100, "memory": GI, "pods": 1}),
        # init containers: the largest one, if larger than the sum of the regular containers
        ({"containers": [c({"cpu": "1"})], "initContainers": [c({"cpu": "3"}), c({"cpu": "2"})]},
         {"cpu": 3000, "pods": 1}),
        ({"containers": [c({"cpu": "1", "memory": "4Gi"})], "initContainers": [c({"cpu": "2", "memory": "1Gi"})]},
         {"cpu": 2000, "memory": 4 * GI, "pods": 1}),
        # init containers do not add up with each other
        ({"containers": [], "initContainers": [c({"cpu": "1"}), c({"cpu": "1"})]}, {"cpu": 1000, "pods": 1}),
        # a sidecar (restartPolicy Always) runs alongside the containers: it adds
        ({"containers": [c({"cpu": "1"})], "initContainers": [c({"cpu": "500m"}, restart_policy="Always")]},
         {"cpu": 1500, "pods": 1}),
        # ... and alongside every init container that starts after it
        ({"containers": [c({"cpu": "1", "memory": "1Gi"})],
          "initContainers": [c({"cpu": "2", "memory": "4Gi"}),
                             c({"cpu": "500m", "memory": "512Mi"}, restart_policy="Always"),
                             c({"cpu": "3"})]},
         {"cpu": 3500, "memory": 4 * GI, "pods": 1}),
        # an init container before the sidecar does not see it
        ({"containers": [c({"cpu": "100m"})],
          "initContainers": [c({"cpu": "2"}), c({"cpu": "1"}, restart_policy="Always")]},
         {"cpu": 2000, "pods": 1}),
        # restartPolicy other than Always is an ordinary init container
        ({"containers": [c({"cpu": "1"})], "initContainers": [c({"cpu": "500m"}, restart_policy="Never")]},
         {"cpu": 1000, "pods": 1}),
        # overhead (RuntimeClass) is added on top
        ({"containers": [c({"cpu": "1"})], "overhead": {"cpu": "250m", "memory": "120Mi"}},
         {"cpu": 1250, "memory": 120 * MI, "pods": 1}),
        ({"containers": [c({"cpu": "1"})],
          "initContainers": [c({"cpu": "2"}), c({"cpu": "500m"}, restart_policy="Always"), c({"cpu": "3"})],
          "overhead": {"cpu": "250m"}},
         {"cpu": 3750, "pods": 1}),
        # zero requests are not stored
        ({"containers": [c({"cpu": "0", "memory": "0"})]}, {"pods": 1}),
        # a pod always takes one pod slot, whatever it says
        ({"containers": [c({"pods": "5"})]}, {"pods": 1}),
        # non-object containers are skipped
        ({"containers": [None, "x", c({"cpu": "1"})]}, {"cpu": 1000, "pods": 1}),
    ],
)
def test_pod_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"containers": [c({"cpu": "lots"})]}, "invalid quantity 'lots'"),
        ({"containers": [c(limits={"memory": "1Zi"})]}, "invalid quantity '1Zi'"),
        ({"initContainers": [c({"cpu": None})]}, "invalid quantity None"),
        ({"overhead": ["cpu"]}, "resource list must be a mapping, got list"),
        ({"containers": [{"resources": {"requests": "1"}}]}, "resource list must be a mapping, got str"),
    ],
)
def test_pod_requests_rejects(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(QuantityError) as info:
        pod_requests(spec)
    assert str(info.value) == message


# -------------------------------------------------------------------------------------- pod_record
def raw_pod(name: Any = "p", *, namespace: str | None = "ns", uid: str | None = "u1", node: str | None = None,
            phase: str | None = "Pending", labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, **spec_fields: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if uid is not None:
        metadata["uid"] = uid
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {"containers": [c({"cpu": "1", "memory": "1Gi"})], **spec_fields}
    if node is not None:
        spec["nodeName"] = node
    obj: dict[str, Any] = {"metadata": metadata, "spec": spec}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def test_pod_record_plain_pod() -> None:
    assert pod_record(raw_pod()) == PodRecord(
        uid="u1", namespace="ns", name="p", node_name="", requests={"cpu": 1000, "memory": GI, "pods": 1},
        gang=None, link_policy=None, terminal=False, scheduler_name="default-scheduler", spec=None)


def test_pod_record_bound_pod_with_defaults() -> None:
    record = pod_record(raw_pod(namespace=None, uid=None, node="n1", phase=None, schedulerName="custom"))
    assert record.uid == "default/p"
    assert record.namespace == "default"
    assert record.node_name == "n1"
    assert record.bound
    assert record.key == ("default", "p")
    assert record.scheduler_name == "custom"
    assert not record.terminal


@pytest.mark.parametrize(
    ("phase", "deletion", "terminal"),
    [
        ("Pending", None, False),
        ("Running", None, False),
        ("Unknown", None, False),
        (None, None, False),
        ("Succeeded", None, True),
        ("Failed", None, True),
        ("Running", "2025-11-30T09:00:00Z", True),
        ("Pending", "2025-11-30T09:00:00Z", True),
        ("Running", "", False),
    ],
)
def test_pod_record_terminal(phase: str | None, deletion: str | None, terminal: bool) -> None:
    obj = raw_pod(phase=phase)
    if deletion is not None:
        obj["metadata"]["deletionTimestamp"] = deletion
    assert pod_record(obj).terminal is terminal


def test_pod_record_gang_member_keeps_placement_fields() -> None:
    tolerations = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    obj = raw_pod(workloadRef={"name": "train", "podGroup": "workers", "podGroupReplicaKey": "0"},
                  nodeSelector={"pool": "gpu"}, tolerations=tolerations, affinity=affinity,
                  hostNetwork=True)
    record = pod_record(obj)
    assert record.gang == GangKey(GroupRef(GroupKind.WORKLOAD, "ns", "train", "workers"), "0")
    assert record.link_policy is None
    assert record.spec == {"nodeSelector": {"pool": "gpu"}, "affinity": affinity, "tolerations": tolerations}


def test_pod_record_gang_member_without_placement_fields() -> None:
    record = pod_record(raw_pod(labels={COSCHEDULING_LABEL: "pg"}, nodeSelector={}))
    assert record.gang == GangKey(GroupRef(GroupKind.COSCHEDULING, "ns", "pg"))
    assert record.spec == {}


def test_pod_record_non_member_keeps_placement_fields_until_bound() -> None:
    """bind re-checks an unbound pod's selector, affinity and tolerations; a bound one needs none."""
    assert pod_record(raw_pod(nodeSelector={"pool": "gpu"})).spec == {"nodeSelector": {"pool": "gpu"}}
    assert pod_record(raw_pod(nodeSelector={"pool": "gpu"}, node="n1")).spec is None


@pytest.mark.parametrize("spec", [
    {"tolerations": "x"},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": 7}}}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": 7}]}]}}}},
])
def test_pod_record_reads_placement_fields_of_the_wrong_type_as_constraining_nothing(spec: dict[str, Any]) -> None:
    """A snapshot file may hold what the API server would refuse: the pod is still mirrored."""
    record = pod_record(raw_pod(**spec))
    assert record.placement is not None and record.placement.tolerations == ()
    assert all(requirement.values == () for term in record.placement.affinity_terms for requirement in term)


def test_pod_record_annotation_policy() -> None:
    record = pod_record(raw_pod(annotations={ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "3"}))
    assert record.gang == GangKey(GroupRef(GroupKind.ANNOTATION, "ns", "g"))
    assert record.link_policy == GangPolicy(3)


@pytest.mark.parametrize("name", [None, "", 5])
def test_pod_record_requires_a_name(name: object) -> None:
    with pytest.raises(RecordError) as info:
        pod_record(raw_pod(name))
    assert str(info.value) == "pod has no metadata.name"


def test_pod_record_propagates_group_and_quantity_errors() -> None:
    with pytest.raises(GroupError):
        pod_record(raw_pod(annotations={ANNOTATION_GROUP: "g"}))
    with pytest.raises(QuantityError):
        pod_record(raw_pod(containers=[c({"cpu": "x"})]))


def test_record_error_is_a_value_error() -> None:
    assert issubclass(RecordError, ValueError)


# ------------------------------------------------------------------------------------- node_record
def raw_node(name: Any = "n1", *, allocatable: object = "unset", capacity: object = "unset",
             labels: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if allocatable != "unset":
        status["allocatable"] = allocatable
    if capacity != "unset":
        status["capacity"] = capacity
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    return {"metadata": metadata, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("obj", "allocatable"),
    [
        (raw_node(allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"}),
         {"cpu": 4000, "memory": 16 * GI, "pods": 110}),
        (raw_node(allocatable={"cpu": "3800m", "memory": "15Gi", "pods": "58"},
                  capacity={"cpu": "4", "memory": "16Gi", "pods": "110"}),
         {"cpu": 3800, "memory": 15 * GI, "pods": 58}),
        # no allocatable: capacity
        (raw_node(capacity={"cpu": "4", "memory": "16Gi", "pods": "30"}), {"cpu": 4000, "memory": 16 * GI, "pods": 30}),
        (raw_node(allocatable=None, capacity={"cpu": "2"}), {"cpu": 2000, "pods": DEFAULT_MAX_PODS}),
        # an empty allocatable is still the allocatable
        (raw_node(allocatable={}, capacity={"cpu": "2"}), {"pods": DEFAULT_MAX_PODS}),
        # no pod count: the kubelet default
        (raw_node(allocatable={"cpu": "1"}), {"cpu": 1000, "pods": 110}),
        (raw_node(), {"pods": 110}),
        (raw_node(allocatable={"cpu": "1", "nvidia.com/gpu": "8", "pods": "0"}),
         {"cpu": 1000, "nvidia.com/gpu": 8, "pods": 0}),
    ],
)
def test_node_record_allocatable(obj: dict[str, Any], allocatable: dict[str, int]) -> None:
    assert node_record(obj).allocatable == allocatable


def test_default_max_pods_is_kubelet_default() -> None:
    assert DEFAULT_MAX_PODS == 110


def test_node_record_full() -> None:
    obj = raw_node(
        allocatable={"cpu": "4"}, labels={"zone": "a", "rank": 3},
        taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2025-11-30T09:00:00Z"},
                "garbage",
                {"effect": "PreferNoSchedule"}],
        unschedulable=True,
    )
    assert node_record(obj) == NodeRecord(
        name="n1", allocatable={"cpu": 4000, "pods": 110}, labels={"zone": "a", "rank": "3"},
        taints=(Taint("gpu", "true", "NoSchedule"), Taint("node.kubernetes.io/not-ready", "", "NoExecute"),
                Taint("", "", "PreferNoSchedule")),
        unschedulable=True)


@pytest.mark.parametrize(("spec", "unschedulable"), [({}, False), ({"unschedulable": False}, False),
                                                       ({"unschedulable": True}, True)])
def test_node_record_unschedulable(spec: dict[str, Any], unschedulable: bool) -> None:
    assert node_record(raw_node(**spec)).unschedulable is unschedulable


def test_node_record_no_taints() -> None:
    assert node_record(raw_node(taints=None)).taints == ()


@pytest.mark.parametrize("name", [None, "", 3])
def test_node_record_requires_a_name(name: object) -> None:
    with pytest.raises(RecordError) as info:
        node_record(raw_node(name))
    assert str(info.value) == "node has no metadata.name"


def test_node_record_bad_quantity() -> None:
    with pytest.raises(QuantityError) as info:
        node_record(raw_node(allocatable={"cpu": "four"}))
    assert str(info.value) == "invalid quantity 'four'"

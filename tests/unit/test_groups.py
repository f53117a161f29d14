"""extender.cluster.groups: pod -> gang links and group objects -> gang policies."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cluster.groups import (
    ANNOTATION_GROUP,
    ANNOTATION_MIN_COUNT,
    ANNOTATION_TIMEOUT,
    COSCHEDULING_API,
    COSCHEDULING_LABEL,
    GROUP_PARSERS,
    WORKLOAD_API,
    PodLink,
    coscheduling_group,
    pod_link,
    podgroup_group,
    workload_groups,
)
from extender.errors import GroupError
from extender.model.gang import GangKey, GangPolicy, GroupKind, GroupRef

WL = GroupKind.WORKLOAD
CO = GroupKind.COSCHEDULING
AN = GroupKind.ANNOTATION


def pod(*, namespace: str | None = "ns", labels: dict[str, str] | None = None,
        annotations: dict[str, Any] | None = None, workload_ref: object = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p"}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {"containers": []}
    if workload_ref is not None:
        spec["workloadRef"] = workload_ref
    return {"metadata": metadata, "spec": spec}


def test_api_coordinates() -> None:
    assert WORKLOAD_API == ("scheduling.k8s.io", "v1alpha1", "workloads")
    assert COSCHEDULING_API == ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
    parsers = {WL: workload_groups, GroupKind.PODGROUP: podgroup_group, CO: coscheduling_group}
    assert parsers == GROUP_PARSERS


# ---------------------------------------------------------------------------------------- pod_link
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (pod(), None),
        ({}, None),
        ({"metadata": None, "spec": None}, None),
        (pod(workload_ref={"name": "train", "podGroup": "workers"}),
         PodLink(GangKey(GroupRef(WL, "ns", "train", "workers")))),
        (pod(workload_ref={"name": "train", "podGroup": "workers", "podGroupReplicaKey": "1"}),
         PodLink(GangKey(GroupRef(WL, "ns", "train", "workers"), "1"))),
        (pod(workload_ref={"name": "train", "podGroup": "workers", "podGroupReplicaKey": ""}),
         PodLink(GangKey(GroupRef(WL, "ns", "train", "workers")))),
        (pod(workload_ref={"name": "train"}), PodLink(GangKey(GroupRef(WL, "ns", "train", "")))),
        (pod(namespace=None, workload_ref={"name": "train", "podGroup": "w"}),
         PodLink(GangKey(GroupRef(WL, "default", "train", "w")))),
        # a workloadRef without a name is no link at all
        (pod(workload_ref={"podGroup": "workers"}), None),
        (pod(workload_ref={"name": ""}), None),
        (pod(workload_ref="train"), None),
        (pod(labels={COSCHEDULING_LABEL: "pg-1"}), PodLink(GangKey(GroupRef(CO, "ns", "pg-1")))),
        (pod(labels={COSCHEDULING_LABEL: ""}), None),
        (pod(labels={"app": "x"}), None),
        (pod(annotations={ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "3"}),
         PodLink(GangKey(GroupRef(AN, "ns", "g")), GangPolicy(3))),
        (pod(annotations={ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: " 2 "}),
         PodLink(GangKey(GroupRef(AN, "ns", "g")), GangPolicy(2))),
        (pod(annotations={ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: 4}),
         PodLink(GangKey(GroupRef(AN, "ns", "g")), GangPolicy(4))),
        (pod(annotations={ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "3", ANNOTATION_TIMEOUT: "30"}),
         PodLink(GangKey(GroupRef(AN, "ns", "g")), GangPolicy(3, 30.0))),
        (pod(annotations={ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "3", ANNOTATION_TIMEOUT: "2.5"}),
         PodLink(GangKey(GroupRef(AN, "ns", "g")), GangPolicy(3, 2.5))),
        (pod(annotations={ANNOTATION_GROUP: "", ANNOTATION_MIN_COUNT: "3"}), None),
        (pod(annotations={ANNOTATION_MIN_COUNT: "3"}), None),
    ],
)
def test_pod_link(raw: dict[str, Any], expected: PodLink | None) -> None:
    assert pod_link(raw) == expected


def test_pod_link_priority_workload_ref_then_label_then_annotation() -> None:
    everything = pod(workload_ref={"name": "train", "podGroup": "workers"},
                     labels={COSCHEDULING_LABEL: "pg"},
                     annotations={ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "2"})
    assert pod_link(everything) == PodLink(GangKey(GroupRef(WL, "ns", "train", "workers")))
    label_and_annotation = pod(labels={COSCHEDULING_LABEL: "pg"},
                               annotations={ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "2"})
    assert pod_link(label_and_annotation) == PodLink(GangKey(GroupRef(CO, "ns", "pg")))
    # an invalid annotation is not even read when a higher-priority link exists
    shadowed = pod(labels={COSCHEDULING_LABEL: "pg"}, annotations={ANNOTATION_GROUP: "g"})
    assert pod_link(shadowed) == PodLink(GangKey(GroupRef(CO, "ns", "pg")))


def test_replica_keys_are_independent_gangs() -> None:
    ref = {"name": "train", "podGroup": "workers"}
    zero = pod_link(pod(workload_ref={**ref, "podGroupReplicaKey": "0"}))
    zero_again = pod_link(pod(workload_ref={**ref, "podGroupReplicaKey": "0"}))
    one = pod_link(pod(workload_ref={**ref, "podGroupReplicaKey": "1"}))
    plain = pod_link(pod(workload_ref=ref))
    assert zero is not None and one is not None and plain is not None and zero_again is not None
    assert zero.gang == zero_again.gang
    assert zero.gang != one.gang
    assert zero.gang != plain.gang
    assert zero.gang.group == one.gang.group == plain.gang.group
    assert len({zero.gang, one.gang, plain.gang}) == 3
    assert str(one.gang) == "ns/train/workers[1]"
    assert str(plain.gang) == "ns/train/workers"


def test_same_name_in_another_namespace_or_kind_is_another_gang() -> None:
    a = pod_link(pod(namespace="a", labels={COSCHEDULING_LABEL: "g"}))
    b = pod_link(pod(namespace="b", labels={COSCHEDULING_LABEL: "g"}))
    c = pod_link(pod(namespace="a", annotations={ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "1"}))
    assert a is not None and b is not None and c is not None
    assert a.gang != b.gang
    assert str(a.gang) == str(c.gang) == "a/g"
    assert a.gang.group.kind is CO and c.gang.group.kind is AN


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({ANNOTATION_GROUP: "g"},
         "pod has gang-extender.io/group but no gang-extender.io/min-count annotation"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: None},
         "pod has gang-extender.io/group but no gang-extender.io/min-count annotation"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "abc"},
         "gang-extender.io/min-count must be a positive integer, got 'abc'"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: ""},
         "gang-extender.io/min-count must be a positive integer, got ''"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "2.5"},
         "gang-extender.io/min-count must be a positive integer, got '2.5'"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "0"},
         "gang-extender.io/min-count must be a positive integer, got 0"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "-2"},
         "gang-extender.io/min-count must be a positive integer, got -2"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: 0},
         "gang-extender.io/min-count must be a positive integer, got 0"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: True},
         "gang-extender.io/min-count must be a positive integer, got True"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: 2.0},
         "gang-extender.io/min-count must be a positive integer, got 2.0"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "2", ANNOTATION_TIMEOUT: "soon"},
         "gang-extender.io/timeout-seconds must be a number of seconds, got 'soon'"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "2", ANNOTATION_TIMEOUT: "0"},
         "gang-extender.io/timeout-seconds must be a positive number of seconds, got '0'"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "2", ANNOTATION_TIMEOUT: "-5"},
         "gang-extender.io/timeout-seconds must be a positive number of seconds, got '-5'"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "2", ANNOTATION_TIMEOUT: "nan"},
         "gang-extender.io/timeout-seconds must be a positive number of seconds, got 'nan'"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "2", ANNOTATION_TIMEOUT: "inf"},
         "gang-extender.io/timeout-seconds must be a positive number of seconds, got 'inf'"),
        ({ANNOTATION_GROUP: "g", ANNOTATION_MIN_COUNT: "2", ANNOTATION_TIMEOUT: ["1"]},
         "gang-extender.io/timeout-seconds must be a number of seconds, got ['1']"),
    ],
)
def test_pod_link_annotation_errors(annotations: dict[str, Any], message: str) -> None:
    with pytest.raises(GroupError) as info:
        pod_link(pod(annotations=annotations))
    assert str(info.value) == message


def test_group_error_is_a_value_error() -> None:
    assert issubclass(GroupError, ValueError)


# --------------------------------------------------------------------------------- workload_groups
def workload(pod_groups: object, *, name: str | None = "train", namespace: str | None = "ns",
             annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if name is not None:
        metadata["name"] = name
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "metadata": metadata,
            "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "train"},
                     "podGroups": pod_groups}}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (workload([{"name": "workers", "policy": {"gang": {"minCount": 4}}},
                   {"name": "driver", "policy": {"basic": {}}}]),
         {GroupRef(WL, "ns", "train", "workers"): GangPolicy(4),
          GroupRef(WL, "ns", "train", "driver"): None}),
        (workload([{"name": "w", "policy": {"gang": {"minCount": "2"}}}]),
         {GroupRef(WL, "ns", "train", "w"): GangPolicy(2)}),
        (workload([{"name": "w"}]), {GroupRef(WL, "ns", "train", "w"): None}),
        (workload([{"name": "w", "policy": {"gang": {}}}]), {GroupRef(WL, "ns", "train", "w"): None}),
        (workload([]), {}),
        (workload(None), {}),
        (workload([{"name": "w", "policy": {"gang": {"minCount": 3}}}], namespace=None),
         {GroupRef(WL, "default", "train", "w"): GangPolicy(3)}),
        (workload([{"name": "w", "policy": {"gang": {"minCount": 3}}}], annotations={ANNOTATION_TIMEOUT: "45"}),
         {GroupRef(WL, "ns", "train", "w"): GangPolicy(3, 45.0)}),
        (workload([{"name": "w", "policy": {"gang": {"minCount": 3}}}, {"name": "b", "policy": {"basic": {}}}],
                  annotations={ANNOTATION_TIMEOUT: "45"}),
         {GroupRef(WL, "ns", "train", "w"): GangPolicy(3, 45.0), GroupRef(WL, "ns", "train", "b"): None}),
    ],
)
def test_workload_groups(obj: dict[str, Any], expected: dict[GroupRef, GangPolicy | None]) -> None:
    assert workload_groups(obj) == expected


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (workload([], name=None), "Workload has no metadata.name"),
        (workload([], name=""), "Workload has no metadata.name"),
        ({}, "Workload has no metadata.name"),
        (workload({"name": "w"}), "Workload ns/train: spec.podGroups must be a list"),
        (workload("workers"), "Workload ns/train: spec.podGroups must be a list"),
        (workload([{"policy": {"gang": {"minCount": 1}}}]), "Workload ns/train: spec.podGroups[0].name is missing"),
        (workload([{"name": "a"}, "b"]), "Workload ns/train: spec.podGroups[1].name is missing"),
        (workload([{"name": 5}]), "Workload ns/train: spec.podGroups[0].name is missing"),
        (workload([{"name": "w", "policy": {"gang": {"minCount": 0}}}]),
         "Workload ns/train: spec.podGroups[0].policy.gang.minCount must be a positive integer, got 0"),
        (workload([{"name": "b"}, {"name": "w", "policy": {"gang": {"minCount": -1}}}]),
         "Workload ns/train: spec.podGroups[1].policy.gang.minCount must be a positive integer, got -1"),
        (workload([{"name": "w", "policy": {"gang": {"minCount": None}}}]),
         "Workload ns/train: spec.podGroups[0].policy.gang.minCount must be a positive integer, got None"),
        (workload([{"name": "w", "policy": {"gang": {"minCount": "four"}}}]),
         "Workload ns/train: spec.podGroups[0].policy.gang.minCount must be a positive integer, got 'four'"),
        (workload([{"name": "w", "policy": {"gang": {"minCount": False}}}]),
         "Workload ns/train: spec.podGroups[0].policy.gang.minCount must be a positive integer, got False"),
        (workload([{"name": "w", "policy": {"gang": {"minCount": 1.5}}}]),
         "Workload ns/train: spec.podGroups[0].policy.gang.minCount must be a positive integer, got 1.5"),
        (workload([{"name": "w", "policy": {"gang": {"minCount": 2}}}], annotations={ANNOTATION_TIMEOUT: "x"}),
         "gang-extender.io/timeout-seconds must be a number of seconds, got 'x'"),
        (workload([{"name": "w", "policy": {"gang": {"minCount": 2}}}], annotations={ANNOTATION_TIMEOUT: "0"}),
         "gang-extender.io/timeout-seconds must be a positive number of seconds, got '0'"),
    ],
)
def test_workload_groups_errors(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(GroupError) as info:
        workload_groups(obj)
    assert str(info.value) == message


# ------------------------------------------------------------------------------ coscheduling_group
def podgroup(spec: object, *, name: str | None = "pg", namespace: str | None = "ns",
             annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if name is not None:
        metadata["name"] = name
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": metadata, "spec": spec}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (podgroup({"minMember": 3}), GangPolicy(3)),
        (podgroup({"minMember": 3, "scheduleTimeoutSeconds": 60}), GangPolicy(3, 60.0)),
        (podgroup({"minMember": 3, "scheduleTimeoutSeconds": 60}, annotations={ANNOTATION_TIMEOUT: "15"}),
         GangPolicy(3, 15.0)),
        (podgroup({"minMember": 3}, annotations={ANNOTATION_TIMEOUT: "15"}), GangPolicy(3, 15.0)),
        (podgroup({}), GangPolicy(1)),
        (podgroup(None), GangPolicy(1)),
        (podgroup({"minMember": "5"}), GangPolicy(5)),
    ],
)
def test_coscheduling_group(obj: dict[str, Any], expected: GangPolicy) -> None:
    assert coscheduling_group(obj) == {GroupRef(CO, "ns", "pg"): expected}


def test_coscheduling_group_default_namespace() -> None:
    assert coscheduling_group(podgroup({"minMember": 2}, namespace=None)) == {
        GroupRef(CO, "default", "pg"): GangPolicy(2)}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (podgroup({"minMember": 2}, name=None), "PodGroup has no metadata.name"),
        ({"spec": {"minMember": 2}}, "PodGroup has no metadata.name"),
        (podgroup({"minMember": 0}), "PodGroup ns/pg: spec.minMember must be a positive integer, got 0"),
        (podgroup({"minMember": None}), "PodGroup ns/pg: spec.minMember must be a positive integer, got None"),
        (podgroup({"minMember": "x"}), "PodGroup ns/pg: spec.minMember must be a positive integer, got 'x'"),
        (podgroup({"minMember": 2, "scheduleTimeoutSeconds": "x"}),
         "gang-extender.io/timeout-seconds must be a number of seconds, got 'x'"),
        (podgroup({"minMember": 2}, annotations={ANNOTATION_TIMEOUT: "-1"}),
         "gang-extender.io/timeout-seconds must be a positive number of seconds, got '-1'"),
    ],
)
def test_coscheduling_group_errors(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(GroupError) as info:
        coscheduling_group(obj)
    assert str(info.value) == message

"""extender.cluster.fit: taints/tolerations, nodeSelector, required node affinity and resource shortfall."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cluster.fit import UNSCHEDULABLE_TAINT, placement_failure, shortfall
from extender.cluster.records import placement_from_spec
from extender.model.cluster import NO_PLACEMENT, NodeRecord, Placement, Requirement, Taint, Toleration

NODE_SELECTOR_MISMATCH = "node does not match the pod's nodeSelector"
AFFINITY_MISMATCH = "node does not match the pod's required node affinity"


def node(name: str = "n1", labels: dict[str, str] | None = None, taints: tuple[Taint, ...] = (),
         unschedulable: bool = False) -> NodeRecord:
    return NodeRecord(name, {"cpu": 4000, "pods": 110}, labels or {}, taints, unschedulable)


def tol(key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> Toleration:
    return Toleration(key, operator, value, effect)


GPU_NO_SCHEDULE = Taint("gpu", "true", "NoSchedule")


# ------------------------------------------------------------------------------------ tolerations
@pytest.mark.parametrize(
    ("toleration", "taint", "tolerates"),
    [
        # Exists with an empty key tolerates everything (of the given effect, if any)
        (tol(operator="Exists"), GPU_NO_SCHEDULE, True),
        (tol(operator="Exists"), Taint("x", "", "NoExecute"), True),
        (tol(operator="Exists", effect="NoExecute"), GPU_NO_SCHEDULE, False),
        (tol(operator="Exists", effect="NoSchedule"), GPU_NO_SCHEDULE, True),
        # Exists with a key: any value
        (tol("gpu", "Exists"), GPU_NO_SCHEDULE, True),
        (tol("gpu", "Exists"), Taint("gpu", "false", "NoExecute"), True),
        (tol("tpu", "Exists"), GPU_NO_SCHEDULE, False),
        # Equal: key and value
        (tol("gpu", "Equal", "true"), GPU_NO_SCHEDULE, True),
        (tol("gpu", "Equal", "false"), GPU_NO_SCHEDULE, False),
        (tol("gpu", "Equal", ""), GPU_NO_SCHEDULE, False),
        (tol("tpu", "Equal", "true"), GPU_NO_SCHEDULE, False),
        (tol("gpu", "Equal", "true", "NoSchedule"), GPU_NO_SCHEDULE, True),
        (tol("gpu", "Equal", "true", "NoExecute"), GPU_NO_SCHEDULE, False),
        (tol("gpu", "Equal", "true", "PreferNoSchedule"), GPU_NO_SCHEDULE, False),
        (tol("dedicated", "Equal", ""), Taint("dedicated", "", "NoSchedule"), True),
    ],
)
def test_toleration_tolerates(toleration: Toleration, taint: Taint, tolerates: bool) -> None:
    assert toleration.tolerates(taint) is tolerates


@pytest.mark.parametrize(
    ("tolerations", "taints", "expected"),
    [
        ([], (), None),
        ([], (GPU_NO_SCHEDULE,), "node has untolerated taint gpu=true:NoSchedule"),
        ([], (Taint("node.kubernetes.io/not-ready", "", "NoExecute"),),
         "node has untolerated taint node.kubernetes.io/not-ready=:NoExecute"),
        # PreferNoSchedule never excludes a node
        ([], (Taint("soft", "x", "PreferNoSchedule"),), None),
        ([{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}], (GPU_NO_SCHEDULE,), None),
        # operator defaults to Equal
        ([{"key": "gpu", "value": "true"}], (GPU_NO_SCHEDULE,), None),
        ([{"key": "gpu"}], (GPU_NO_SCHEDULE,), "node has untolerated taint gpu=true:NoSchedule"),
        ([{"operator": "Exists"}], (GPU_NO_SCHEDULE, Taint("b", "", "NoExecute")), None),
        ([{"key": "gpu", "operator": "Exists"}], (GPU_NO_SCHEDULE, Taint("b", "", "NoExecute")),
         "node has untolerated taint b=:NoExecute"),
        ([{"operator": "Exists", "effect": "NoExecute"}], (GPU_NO_SCHEDULE,),
         "node has untolerated taint gpu=true:NoSchedule"),
        # the first untolerated taint is reported
        ([], (Taint("a", "1", "NoSchedule"), Taint("b", "2", "NoExecute")),
         "node has untolerated taint a=1:NoSchedule"),
    ],
)
def test_placement_failure_taints(tolerations: list[dict[str, Any]], taints: tuple[Taint, ...],
                                  expected: str | None) -> None:
    placement = placement_from_spec({"tolerations": tolerations})
    assert placement_failure(placement, node(taints=taints)) == expected


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        ([], "node has untolerated taint node.kubernetes.io/unschedulable=:NoSchedule"),
        ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}], None),
        ([{"operator": "Exists"}], None),
        ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}],
         "node has untolerated taint node.kubernetes.io/unschedulable=:NoSchedule"),
    ],
)
def test_unschedulable_node(tolerations: list[dict[str, Any]], expected: str | None) -> None:
    placement = placement_from_spec({"tolerations": tolerations})
    assert placement_failure(placement, node(unschedulable=True)) == expected
    assert placement_failure(placement, node(unschedulable=False)) is None


def test_unschedulable_taint_constant() -> None:
    expected = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
    assert expected == UNSCHEDULABLE_TAINT


def test_taints_are_checked_before_selectors() -> None:
    placement = placement_from_spec({"nodeSelector": {"zone": "a"}})
    assert placement_failure(placement, node(taints=(GPU_NO_SCHEDULE,))) == \
        "node has untolerated taint gpu=true:NoSchedule"


# ----------------------------------------------------------------------------------- nodeSelector
@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {}, None),
        ({"zone": "a"}, {"zone": "a"}, None),
        ({"zone": "a"}, {"zone": "a", "other": "x"}, None),
        ({"zone": "a"}, {"zone": "b"}, NODE_SELECTOR_MISMATCH),
        ({"zone": "a"}, {}, NODE_SELECTOR_MISMATCH),
        ({"zone": "a", "disk": "ssd"}, {"zone": "a"}, NODE_SELECTOR_MISMATCH),
        ({"zone": "a", "disk": "ssd"}, {"zone": "a", "disk": "ssd"}, None),
        ({"zone": ""}, {"zone": ""}, None),
        ({"zone": ""}, {}, NODE_SELECTOR_MISMATCH),
    ],
)
def test_node_selector(selector: dict[str, str], labels: dict[str, str], expected: str | None) -> None:
    assert placement_failure(placement_from_spec({"nodeSelector": selector}), node(labels=labels)) == expected


# -------------------------------------------------------------------------------------- affinity
def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    item: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        item["values"] = list(values)
    return {"matchExpressions": [item]}


def field(operator: str, *values: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": operator, "values": list(values)}]}


LABELS = {"zone": "a", "cores": "16"}


@pytest.mark.parametrize(
    ("spec", "matches"),
    [
        (affinity(expr("zone", "In", "a", "b")), True),
        (affinity(expr("zone", "In", "b", "c")), False),
        (affinity(expr("missing", "In", "a")), False),
        (affinity(expr("zone", "NotIn", "b")), True),
        (affinity(expr("zone", "NotIn", "a")), False),
        (affinity(expr("missing", "NotIn", "a")), True),
        (affinity(expr("zone", "Exists")), True),
        (affinity(expr("missing", "Exists")), False),
        (affinity(expr("zone", "DoesNotExist")), False),
        (affinity(expr("missing", "DoesNotExist")), True),
        (affinity(expr("cores", "Gt", "8")), True),
        (affinity(expr("cores", "Gt", "16")), False),
        (affinity(expr("cores", "Gt", "32")), False),
        (affinity(expr("cores", "Lt", "32")), True),
        (affinity(expr("cores", "Lt", "16")), False),
        (affinity(expr("cores", "Lt", "8")), False),
        (affinity(expr("zone", "Gt", "1")), False),      # label is not an integer
        (affinity(expr("cores", "Gt", "x")), False),     # value is not an integer
        (affinity(expr("cores", "Gt", "1", "2")), False),  # Gt takes exactly one value
        (affinity(expr("missing", "Gt", "1")), False),
        (affinity(expr("missing", "Lt", "100")), False),
        (affinity(expr("zone", "Bogus", "a")), False),
        # matchFields: metadata.name only
        (affinity(field("In", "n1", "n2")), True),
        (affinity(field("In", "n2")), False),
        (affinity(field("NotIn", "n2")), True),
        (affinity(field("NotIn", "n1")), False),
        (affinity({"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["n1"]}]}), False),
        # terms are ORed
        (affinity(expr("zone", "In", "b"), expr("cores", "Exists")), True),
        (affinity(expr("zone", "In", "b"), field("In", "n9")), False),
        # requirements inside a term are ANDed, matchExpressions together with matchFields
        (affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                        {"key": "cores", "operator": "Gt", "values": ["4"]}]}), True),
        (affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                        {"key": "cores", "operator": "Gt", "values": ["64"]}]}), False),
        (affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                   "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}), True),
        (affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                   "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}), False),
        # "A null or empty node selector term matches no objects" (core/v1 NodeSelectorTerm)
        (affinity({}), False),
        (affinity({"matchExpressions": [], "matchFields": []}), False),
        (affinity({}, expr("zone", "In", "a")), True),
        # preferred affinity is not a constraint
        ({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": expr("zone", "In", "b")}]}}}, True),
        # inter-pod affinity is not evaluated here
        ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}}, True),
    ],
)
def test_required_node_affinity(spec: dict[str, Any], matches: bool) -> None:
    result = placement_failure(placement_from_spec(spec), node(labels=LABELS))
    assert result == (None if matches else AFFINITY_MISMATCH)


def test_selector_is_checked_before_affinity() -> None:
    spec = {"nodeSelector": {"zone": "b"}, **affinity(expr("zone", "In", "b"))}
    assert placement_failure(placement_from_spec(spec), node(labels=LABELS)) == NODE_SELECTOR_MISMATCH


# ------------------------------------------------------------------------------ placement_from_spec
def test_placement_from_spec_reads_everything() -> None:
    spec = {
        "nodeSelector": {"zone": "a", "disk": "ssd"},
        **affinity({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}],
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                   expr("zone", "Exists")),
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "t", "value": "v", "tolerationSeconds": 30}],
    }
    assert placement_from_spec(spec) == Placement(
        node_selector=(("disk", "ssd"), ("zone", "a")),
        affinity_terms=(
            (Requirement("cores", "Gt", ("4",)), Requirement("metadata.name", "In", ("n1",), field=True)),
            (Requirement("zone", "Exists", ()),),
        ),
        tolerations=(Toleration("gpu", "Exists", "", "NoSchedule"), Toleration("t", "Equal", "v", "")),
    )


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"nodeSelector": None, "affinity": None, "tolerations": None},
        {"nodeSelector": ["zone"], "affinity": "x", "tolerations": ["x", 1]},
        {"affinity": {"nodeAffinity": "x"}},
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}}},
    ],
)
def test_placement_from_spec_tolerates_junk(spec: dict[str, Any]) -> None:
    placement = placement_from_spec(spec)
    assert placement == NO_PLACEMENT
    assert placement.unconstrained


def test_placement_is_hashable_and_equal_by_value() -> None:
    spec = {"nodeSelector": {"b": "2", "a": "1"}, "tolerations": [{"operator": "Exists"}]}
    same = {"nodeSelector": {"a": "1", "b": "2"}, "tolerations": [{"operator": "Exists"}]}
    assert placement_from_spec(spec) == placement_from_spec(same)
    assert hash(placement_from_spec(spec)) == hash(placement_from_spec(same))


def test_unconstrained() -> None:
    assert NO_PLACEMENT.unconstrained
    assert placement_from_spec({"tolerations": [{"operator": "Exists"}]}).unconstrained
    assert not placement_from_spec({"nodeSelector": {"a": "b"}}).unconstrained
    assert not placement_from_spec(affinity(expr("a", "Exists"))).unconstrained


# -------------------------------------------------------------------------------------- shortfall
@pytest.mark.parametrize(
    ("requests", "free", "expected"),
    [
        ({}, {}, None),
        ({"cpu": 1000, "pods": 1}, {"cpu": 1000, "pods": 1}, None),
        ({"cpu": 1001}, {"cpu": 1000}, "cpu"),
        ({"cpu": 500, "memory": 2}, {"cpu": 1000, "memory": 1}, "memory"),
        ({"nvidia.com/gpu": 1}, {"cpu": 1000}, "nvidia.com/gpu"),
        ({"nvidia.com/gpu": 0}, {}, None),
        ({"cpu": 1}, {"cpu": -5}, "cpu"),
        ({"pods": 1}, {"pods": 0}, "pods"),
        # the first lacking resource, in request order
        ({"memory": 10, "cpu": 10}, {}, "memory"),
        ({"cpu": 10, "memory": 10}, {}, "cpu"),
    ],
)
def test_shortfall(requests: dict[str, int], free: dict[str, int], expected: str | None) -> None:
    assert shortfall(requests, free) == expected

"""Topology constraints (issue 12): label keys, reading the constraint from every source, merging.

Label key cases follow the API server's rules (k8s.io/apimachinery ``content.IsLabelKey``); the PodGroup
shapes follow k8s.io/api v0.37.2 (docs/versions.md, "Topology constraints"). Every bad input gives a problem string.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.cluster import topology_constraints as topology
from extender.cluster.topology_constraints import (
    ANNOTATION_PREFERRED,
    ANNOTATION_REQUIRED,
    KUEUE_PREFERRED,
    KUEUE_REQUIRED,
    NONE,
    Source,
    TopologyConstraint,
    TopologyProblem,
    from_group_annotations,
    from_pod,
    from_podgroup,
    merge,
)
from extender.labelkeys import label_key_problem

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
RACK, BLOCK, ZONE = "example.com/rack", "example.com/block", "topology.kubernetes.io/zone"


def golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / name).read_text())
    return data


# ------------------------------------------------------------------------------------ label keys
@pytest.mark.parametrize("key", [
    "simple", "now-with-dashes", "1-starts-with-num", "1234", "simple/simple", "now-with-dashes/simple",
    "now.with.dots/simple", "1-num.2-num/3-num", "1.2.3.4/5678", "Uppercase_Is_OK_123",
    "example.com/Uppercase_Is_OK_123", "kubernetes.io/hostname", "topology.kubernetes.io/zone", "a" * 63,
    ".".join(["a" * 63] * 3) + "." + "a" * 61 + "/" + "b" * 63,  # a 253-character prefix
])
def test_valid_label_keys(key: str) -> None:
    assert label_key_problem(key) is None


@pytest.mark.parametrize(("key", "why"), [
    ("", "it must not be empty"),
    ("nospecialchars%^=@", "the name must consist of letters, digits, '-', '_' or '.', and start and end with a "
                           "letter or digit"),
    ("cantendwithadash-", "the name must consist of"),
    ("-cantstartwithadash", "the name must consist of"),
    ("has space", "the name must consist of"),
    ("only/one/slash", "it may contain at most one '/'"),
    ("Example.com/abc", "the prefix must be a DNS subdomain"),
    ("example_com/abc", "the prefix must be a DNS subdomain"),
    ("example.com/", "the name must not be empty"),
    ("/simple", "the prefix before '/' must not be empty"),
    ("a" * 64, "the name must be at most 63 characters"),
    ("a" * 254 + "/abc", "the prefix must be at most 253 characters"),
    ("rack\n", "the name must consist of"),
    ("räck", "the name must consist of"),
])
def test_invalid_label_keys_say_why(key: str, why: str) -> None:
    problem = label_key_problem(key)
    assert problem is not None and problem.startswith(f"{key!r} is not a valid label key: ")
    assert why in problem


@pytest.mark.parametrize("value", [None, 3, ["rack"], {"key": "rack"}])
def test_a_label_key_must_be_a_string(value: object) -> None:
    assert label_key_problem(value) == f"{value!r} is not a valid label key: it must be a string"


@given(st.text(max_size=80))
def test_label_key_problem_never_raises(text: str) -> None:
    problem = label_key_problem(text)
    assert problem is None or problem.startswith(repr(text))


# ------------------------------------------------------------------------------------ PodGroup field
def test_v1beta1_podgroup_field_is_a_required_key() -> None:
    assert from_podgroup(golden("topology/podgroup-v1beta1-rack.json")) == TopologyConstraint(
        required=RACK, required_source=Source.PODGROUP_FIELD)


def test_v1alpha2_podgroup_field_is_a_required_key() -> None:
    assert from_podgroup(golden("groups/podgroup-v1alpha2.json")) == TopologyConstraint(
        required=ZONE, required_source=Source.PODGROUP_FIELD)


@pytest.mark.parametrize("name", ["groups/podgroup-v1beta1.json", "groups/podgroup-v1alpha3.json",
                                  "groups/podgroup-v1beta1-basic.json"])
def test_podgroups_without_the_field_have_no_constraint(name: str) -> None:
    assert from_podgroup(golden(name)) == NONE
    assert NONE.empty and NONE.describe() == "none"


def podgroup(constraints: object = None, annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = golden("topology/podgroup-v1beta1-rack.json")
    if constraints is None:
        del obj["spec"]["schedulingConstraints"]
    else:
        obj["spec"]["schedulingConstraints"] = constraints
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    return obj


@pytest.mark.parametrize(("constraints", "problem"), [
    ({"topology": [{"key": "foo-"}]}, "PodGroup ml/training-workers: spec.schedulingConstraints.topology[0].key: "
                                      "'foo-' is not a valid label key: the name must consist of letters, digits, "
                                      "'-', '_' or '.', and start and end with a letter or digit"),
    ({"topology": [{"key": "a"}, {"key": "b"}]}, "PodGroup ml/training-workers: spec.schedulingConstraints.topology "
                                                 "has 2 entries; at most one is allowed"),
    ({"topology": [{}]}, "PodGroup ml/training-workers: spec.schedulingConstraints.topology[0].key: None is not a "
                         "valid label key: it must be a string"),
    ({"topology": ["rack"]}, "PodGroup ml/training-workers: spec.schedulingConstraints.topology[0] must be an object "
                             "with a key, got 'rack'"),
    ({"topology": {"key": "rack"}}, "PodGroup ml/training-workers: spec.schedulingConstraints.topology must be a "
                                    "list, got {'key': 'rack'}"),
    ("rack", "PodGroup ml/training-workers: spec.schedulingConstraints must be an object, got 'rack'"),
])
def test_bad_podgroup_fields_are_problems(constraints: object, problem: str) -> None:
    assert from_podgroup(podgroup(constraints)) == TopologyProblem(problem)


@pytest.mark.parametrize("constraints", [{}, {"topology": []}, {"topology": None}])
def test_empty_podgroup_fields_are_no_constraint(constraints: object) -> None:
    assert from_podgroup(podgroup(constraints)) == NONE


def test_podgroup_field_and_annotations_combine() -> None:
    both = podgroup({"topology": [{"key": RACK}]},
                    {ANNOTATION_REQUIRED: RACK, ANNOTATION_PREFERRED: "kubernetes.io/hostname"})
    assert from_podgroup(both) == TopologyConstraint(RACK, "kubernetes.io/hostname", Source.PODGROUP_FIELD,
                                                     Source.GROUP_ANNOTATION)
    clash = podgroup({"topology": [{"key": RACK}]}, {ANNOTATION_REQUIRED: ZONE})
    assert from_podgroup(clash) == TopologyProblem(
        "PodGroup ml/training-workers: two different required topology keys: 'example.com/rack' (PodGroup "
        "spec.schedulingConstraints.topology) and 'topology.kubernetes.io/zone' (gang-extender annotation on the "
        "group object)")


# ------------------------------------------------------------------------------------ annotations
def test_group_annotations_on_any_group_object() -> None:
    workload = golden("groups/workload-v1alpha1.json")
    assert from_group_annotations(workload, "Workload") == NONE
    workload["metadata"]["annotations"] = {ANNOTATION_PREFERRED: BLOCK, "other": "x"}
    assert from_group_annotations(workload, "Workload") == TopologyConstraint(
        preferred=BLOCK, preferred_source=Source.GROUP_ANNOTATION)
    workload["metadata"]["annotations"] = {ANNOTATION_REQUIRED: "rack!"}
    problem = from_group_annotations(workload, "Workload")
    assert isinstance(problem, TopologyProblem)
    assert problem.message.startswith(f"Workload {workload['metadata']['namespace']}/"
                                      f"{workload['metadata']['name']}: annotation {ANNOTATION_REQUIRED}: "
                                      "'rack!' is not a valid label key")


def test_kueue_annotation_on_a_pod() -> None:
    assert from_pod(golden("topology/pod-kueue-preferred.json")) == TopologyConstraint(
        preferred=BLOCK, preferred_source=Source.KUEUE_ANNOTATION)


def pod(name: str = "w-0", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "annotations": annotations}}


def test_pod_annotations_every_form() -> None:
    assert from_pod(pod()) == NONE
    assert from_pod({"metadata": {"annotations": "not a map"}}) == NONE
    assert from_pod({}) == NONE
    assert from_pod(pod(**{KUEUE_REQUIRED: RACK, ANNOTATION_PREFERRED: "kubernetes.io/hostname"})) == \
        TopologyConstraint(RACK, "kubernetes.io/hostname", Source.KUEUE_ANNOTATION, Source.POD_ANNOTATION)
    assert from_pod(pod(**{KUEUE_REQUIRED: RACK, ANNOTATION_REQUIRED: RACK})) == TopologyConstraint(
        required=RACK, required_source=Source.KUEUE_ANNOTATION)
    assert from_pod(pod(**{KUEUE_PREFERRED: RACK, ANNOTATION_PREFERRED: BLOCK})) == TopologyProblem(
        "pod ml/w-0: two different preferred topology keys: 'example.com/rack' (Kueue annotation on the pods) and "
        "'example.com/block' (gang-extender annotation on the pods)")
    assert from_pod(pod(**{ANNOTATION_REQUIRED: ""})) == TopologyProblem(
        f"pod ml/w-0: annotation {ANNOTATION_REQUIRED}: '' is not a valid label key: it must not be empty")


# ------------------------------------------------------------------------------------ merging
def required(key: str, source: Source = Source.POD_ANNOTATION) -> TopologyConstraint:
    return TopologyConstraint(required=key, required_source=source)


def preferred(key: str, source: Source = Source.POD_ANNOTATION) -> TopologyConstraint:
    return TopologyConstraint(preferred=key, preferred_source=source)


def test_merge_members_that_agree_or_say_nothing() -> None:
    members = [("ml/w-0", required(RACK)), ("ml/w-1", NONE), ("ml/w-2", required(RACK, Source.KUEUE_ANNOTATION))]
    assert merge(NONE, members) == required(RACK)
    assert merge(NONE, []) == NONE
    assert merge(required(RACK, Source.PODGROUP_FIELD), members) == required(RACK, Source.PODGROUP_FIELD)


def test_merge_combines_a_required_and_a_preferred_key_from_different_places() -> None:
    merged = merge(required(BLOCK, Source.PODGROUP_FIELD), [("ml/w-0", preferred(RACK)), ("ml/w-1", NONE)])
    assert merged == TopologyConstraint(BLOCK, RACK, Source.PODGROUP_FIELD, Source.POD_ANNOTATION)
    assert isinstance(merged, TopologyConstraint)
    assert merged.describe() == ("required example.com/block (PodGroup spec.schedulingConstraints.topology), "
                                 "preferred example.com/rack (gang-extender annotation on the pods)")


def test_merge_members_that_disagree() -> None:
    members = [("ml/w-0", required(RACK)), ("ml/w-1", NONE), ("ml/w-2", required(BLOCK))]
    assert merge(NONE, members) == TopologyProblem(
        "members disagree on the required topology key: pod ml/w-0 has 'example.com/rack', pod ml/w-2 has "
        "'example.com/block'")
    assert merge(NONE, [("ml/w-0", preferred(RACK)), ("ml/w-1", preferred(ZONE))]) == TopologyProblem(
        "members disagree on the preferred topology key: pod ml/w-0 has 'example.com/rack', pod ml/w-1 has "
        "'topology.kubernetes.io/zone'")


def test_merge_two_required_keys_from_the_group_and_the_pods() -> None:
    assert merge(required(ZONE, Source.PODGROUP_FIELD), [("ml/w-0", required(RACK, Source.KUEUE_ANNOTATION))]) == \
        TopologyProblem("the group object and its pods: two different required topology keys: "
                        "'topology.kubernetes.io/zone' (PodGroup spec.schedulingConstraints.topology) and "
                        "'example.com/rack' (Kueue annotation on the pods)")


def test_merge_passes_the_first_problem_on() -> None:
    bad = TopologyProblem("pod ml/w-1: annotation x: 'a/b/c' is not a valid label key")
    assert merge(NONE, [("ml/w-0", required(RACK)), ("ml/w-1", bad), ("ml/w-2", required(ZONE))]) == bad
    assert merge(bad, [("ml/w-0", required(RACK))]) == bad


KEYS = st.sampled_from(["", RACK, BLOCK, ZONE])
SOURCES = st.sampled_from(list(Source))


@st.composite
def constraints(draw: st.DrawFn) -> TopologyConstraint:
    req, pref = draw(KEYS), draw(KEYS)
    return TopologyConstraint(req, pref, draw(SOURCES) if req else None, draw(SOURCES) if pref else None)


@given(constraints(), st.lists(constraints(), max_size=6))
def test_merge_is_a_problem_exactly_when_two_keys_of_one_kind_differ(group: TopologyConstraint,
                                                                     members: list[TopologyConstraint]) -> None:
    merged = merge(group, [(f"ml/w-{i}", m) for i, m in enumerate(members)])
    for mode in ("required", "preferred"):
        keys = {getattr(c, mode) for c in [group, *members]} - {""}
        if len(keys) > 1:
            assert isinstance(merged, TopologyProblem)
            return
    assert isinstance(merged, TopologyConstraint)
    for mode in ("required", "preferred"):
        keys = {getattr(c, mode) for c in [group, *members]} - {""}
        assert getattr(merged, mode) == (keys.pop() if keys else "")
        assert (getattr(merged, f"{mode}_source") is None) == (getattr(merged, mode) == "")


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner,
                                                                                max_size=3),
                    max_leaves=12))
def test_malformed_objects_never_raise(junk: Any) -> None:
    for obj in ({"spec": {"schedulingConstraints": junk}}, {"spec": {"schedulingConstraints": {"topology": junk}}},
                {"spec": {"schedulingConstraints": {"topology": [junk]}}}, {"metadata": {"annotations": junk}},
                {"metadata": {"annotations": {KUEUE_REQUIRED: junk, ANNOTATION_PREFERRED: junk}}}, {"metadata": junk}):
        for parse in (from_podgroup, from_pod, from_group_annotations):
            assert isinstance(parse(obj), TopologyConstraint | TopologyProblem)


def test_module_exports() -> None:
    assert set(topology.__all__) >= {"from_podgroup", "from_pod", "merge", "HOSTNAME"}

"""Every Workload API generation, from golden objects (tests/data/golden/groups/).

The objects are shaped as the API server serves them for Kubernetes 1.35 (Workload v1alpha1, Pod
``spec.workloadRef``), 1.36 (PodGroup v1alpha2, ``spec.podGroupTemplateRef``, Pod
``spec.schedulingGroup``), 1.37 (PodGroup v1alpha3/v1beta1, ``spec.workloadRef``, condition
``PodGroupInitiallyScheduled``), the scheduler-plugins CRD and the annotation form. Some of them the
kubernetes Python client cannot represent at all: the last tests show it, which is why the extender
reads raw JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from extender.cluster.groups import (
    GROUP_APIS,
    GROUP_PARSERS,
    OBJECT_KINDS,
    Condition,
    GroupMeta,
    group_meta,
    pod_link,
    status_apply,
    workload_groups,
)
from extender.cluster.mirror import ClusterMirror
from extender.cluster.records import pod_record
from extender.files.snapshot import load_into
from extender.model.gang import (
    GangKey,
    GangOrder,
    GangPhase,
    GangPolicy,
    GangStatus,
    GroupKind,
    GroupRef,
    Source,
    TopologyConstraint,
)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / "groups"
PG = GroupKind.PODGROUP
NOW = "2026-11-30T12:00:00Z"


def golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / name).read_text())
    return data


def kind_of(obj: dict[str, Any]) -> GroupKind:
    return OBJECT_KINDS[(obj["apiVersion"], obj["kind"])]


# ------------------------------------------------------------------------------ pods -> gang keys
@pytest.mark.parametrize(("name", "gang"), [
    ("pod-v1.35-workloadref.json",
     GangKey(GroupRef(GroupKind.WORKLOAD, "ml", "training-job-workload", "workers"), "0")),
    ("pod-v1.36-schedulinggroup.json", GangKey(GroupRef(PG, "ml", "training-workers-0"))),
    ("pod-v1.37-schedulinggroup.json", GangKey(GroupRef(PG, "ml", "training-workers"))),
    ("pod-coscheduling-label.json", GangKey(GroupRef(GroupKind.COSCHEDULING, "ml", "pg"))),
    ("pod-annotation.json", GangKey(GroupRef(GroupKind.ANNOTATION, "ml", "g"))),
])
def test_every_pod_link_generation(name: str, gang: GangKey) -> None:
    link = pod_link(golden(name))
    assert link is not None and link.gang == gang
    assert pod_record(golden(name)).gang == gang


def test_same_name_in_different_apis_is_a_different_gang() -> None:
    podgroup = GroupRef(PG, "ml", "pg")
    coscheduling = GroupRef(GroupKind.COSCHEDULING, "ml", "pg")
    assert podgroup != coscheduling and len({podgroup, coscheduling}) == 2
    assert sorted([coscheduling, podgroup]) == sorted([podgroup, coscheduling])  # orderable across kinds


def test_workload_ref_wins_over_scheduling_group() -> None:
    raw = golden("pod-v1.37-schedulinggroup.json")
    raw["spec"]["workloadRef"] = {"name": "w", "podGroup": "g"}
    link = pod_link(raw)
    assert link is not None and link.gang.group.kind is GroupKind.WORKLOAD


@pytest.mark.parametrize("value", [None, {}, {"podGroupName": ""}, "pg", []])
def test_empty_or_odd_scheduling_group_is_no_gang(value: object) -> None:
    raw = golden("pod-v1.37-schedulinggroup.json")
    raw["spec"]["schedulingGroup"] = value
    assert pod_link(raw) is None


# ------------------------------------------------------------------------- group objects -> policy
@pytest.mark.parametrize(("name", "groups"), [
    ("workload-v1alpha1.json", {GroupRef(GroupKind.WORKLOAD, "ml", "training-job-workload", "workers"): GangPolicy(4),
                                GroupRef(GroupKind.WORKLOAD, "ml", "training-job-workload", "driver"): None}),
    ("podgroup-v1alpha2.json", {GroupRef(PG, "ml", "training-workers-0"): GangPolicy(4, topology=TopologyConstraint(
        "topology.kubernetes.io/zone", required_source=Source.PODGROUP_FIELD),
        order=GangOrder(priority=0, disruption_all=False))}),  # 1.36: disruptionMode "Pod"
    ("podgroup-v1alpha3.json", {GroupRef(PG, "ml", "training-workers"): GangPolicy(
        3, order=GangOrder(disruption_all=False))}),  # 1.37: disruptionMode {single: {}}
    ("podgroup-v1beta1.json", {GroupRef(PG, "ml", "training-workers"): GangPolicy(
        8, 45.0, order=GangOrder(priority=1000, priority_class="high"))}),  # {all: {}}, priority 1000
    ("podgroup-v1beta1-basic.json", {GroupRef(PG, "ml", "driver"): None}),
    ("podgroup-x-k8s-v1alpha1.json", {GroupRef(GroupKind.COSCHEDULING, "ml", "pg"): GangPolicy(3, 30.0)}),
])
def test_every_group_object_generation(name: str, groups: dict[GroupRef, GangPolicy | None]) -> None:
    obj = golden(name)
    assert GROUP_PARSERS[kind_of(obj)](obj) == groups


@pytest.mark.parametrize("name", ["workload-v1alpha2.json", "workload-v1beta1.json"])
def test_1_36_workloads_are_templates_not_gangs(name: str) -> None:
    """A 1.36+ Workload holds templates: pods never point at it, so it defines no gang."""
    assert workload_groups(golden(name)) == {}
    assert all(api.kind is not GroupKind.WORKLOAD or api.versions == ("v1alpha1",) for api in GROUP_APIS)


@pytest.mark.parametrize(("spec", "problem"), [
    ({"schedulingPolicy": {"gang": {"minCount": 0}}}, "spec.schedulingPolicy.gang.minCount must be a positive"),
    ({"schedulingPolicy": {"gang": {}}}, "spec.schedulingPolicy.gang.minCount must be a positive"),
    ({"schedulingPolicy": {"gang": {"minCount": True}}}, "minCount must be a positive integer, got True"),
    ({"schedulingPolicy": "gang"}, "spec.schedulingPolicy must be an object"),
])
def test_malformed_podgroup_names_the_field(spec: dict[str, Any], problem: str) -> None:
    obj = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
           "metadata": {"name": "bad", "namespace": "ml"}, "spec": spec}
    with pytest.raises(ValueError, match=problem.replace(".", r"\.")):
        GROUP_PARSERS[PG](obj)


def test_discovery_prefers_the_newest_podgroup_version() -> None:
    (api,) = [a for a in GROUP_APIS if a.kind is PG]
    assert api.versions == ("v1beta1", "v1alpha3", "v1alpha2")
    assert api.name == "podgroups.scheduling.k8s.io"
    assert api.path("v1beta1") == "/apis/scheduling.k8s.io/v1beta1/podgroups"
    assert [a.name for a in GROUP_APIS] == ["workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io",
                                           "podgroups.scheduling.x-k8s.io"]


# ---------------------------------------------------------------------------- context and status
def test_template_reference_is_kept_as_context_for_both_shapes() -> None:
    assert group_meta(PG, golden("podgroup-v1alpha2.json")).template == "training/workers"
    assert group_meta(PG, golden("podgroup-v1alpha3.json")).template == "training/workers"
    assert group_meta(PG, golden("podgroup-v1beta1-basic.json")).template == "training/driver"
    assert group_meta(PG, {"apiVersion": "scheduling.k8s.io/v1beta1", "spec": {}}).template == ""


def test_status_as_the_object_has_it() -> None:
    assert group_meta(PG, golden("podgroup-v1alpha2.json")) == GroupMeta(
        "scheduling.k8s.io/v1alpha2", "11111111-2222-3333-4444-555555555555", "training/workers",
        Condition("False", "Unschedulable", "0/3 nodes are available", "2026-11-30T10:00:05Z"))
    v1beta1 = group_meta(PG, golden("podgroup-v1beta1.json"))
    assert v1beta1.condition == Condition("True", "Scheduled", "", "2026-11-30T10:01:00Z")
    # v1alpha3/v1beta1 name the condition differently: a v1alpha2 condition type is not theirs.
    renamed = golden("podgroup-v1beta1.json")
    renamed["status"]["conditions"][0]["type"] = "PodGroupScheduled"
    assert group_meta(PG, renamed).condition is None
    co = group_meta(GroupKind.COSCHEDULING, golden("podgroup-x-k8s-v1alpha1.json"))
    assert (co.phase, co.scheduled) == ("Pending", 0)


WAITING = GangStatus(GangPhase.WAITING, "waiting for gang ml/training-workers: 3/4 pods exist", 0, 4)
SCHEDULED = GangStatus(GangPhase.SCHEDULED, "gang ml/training-workers: 4 member(s) bound together at quorum", 4, 4)


@pytest.mark.parametrize(("version", "condition"), [
    ("v1alpha2", "PodGroupScheduled"), ("v1alpha3", "PodGroupInitiallyScheduled"),
    ("v1beta1", "PodGroupInitiallyScheduled"),
])
def test_podgroup_condition_per_version(version: str, condition: str) -> None:
    ref = GroupRef(PG, "ml", "training-workers")
    meta = GroupMeta(f"scheduling.k8s.io/{version}")
    body = status_apply(ref, meta, WAITING, NOW)
    assert body == {
        "apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup",
        "metadata": {"name": "training-workers", "namespace": "ml"},
        "status": {"conditions": [{"type": condition, "status": "False", "reason": "Unschedulable",
                                   "message": WAITING.message, "lastTransitionTime": NOW}]}}
    body = status_apply(ref, meta, SCHEDULED, NOW)
    assert body is not None
    assert body["status"]["conditions"][0] | {"message": ""} == {
        "type": condition, "status": "True", "reason": "Scheduled", "message": "", "lastTransitionTime": NOW}


def test_podgroup_condition_keeps_its_transition_time_and_never_goes_back() -> None:
    ref = GroupRef(PG, "ml", "training-workers")
    waiting = Condition("False", "Unschedulable", "older message", "2026-11-30T10:00:05Z")
    meta = GroupMeta("scheduling.k8s.io/v1beta1", condition=waiting)
    body = status_apply(ref, meta, WAITING, NOW)
    assert body is not None and body["status"]["conditions"][0]["lastTransitionTime"] == "2026-11-30T10:00:05Z"
    same = GroupMeta("scheduling.k8s.io/v1beta1", condition=Condition("False", "Unschedulable", WAITING.message, "t"))
    assert status_apply(ref, same, WAITING, NOW) is None  # already says so: no write
    flipped = status_apply(ref, meta, SCHEDULED, NOW)
    assert flipped is not None and flipped["status"]["conditions"][0]["lastTransitionTime"] == NOW
    done = GroupMeta("scheduling.k8s.io/v1beta1", condition=Condition("True", "Scheduled", "", "t"))
    assert status_apply(ref, done, WAITING, NOW) is None  # PodGroupInitiallyScheduled is terminal once True
    assert status_apply(ref, GroupMeta("scheduling.k8s.io/v1beta1"), GangStatus(GangPhase.SCHEDULING), NOW) is None


def test_coscheduling_phase_and_counts() -> None:
    ref = GroupRef(GroupKind.COSCHEDULING, "ml", "pg")
    meta = group_meta(GroupKind.COSCHEDULING, golden("podgroup-x-k8s-v1alpha1.json"))
    assert status_apply(ref, meta, GangStatus(GangPhase.WAITING, "x", 0, 3), NOW) is None  # Pending, 0: as is
    assert status_apply(ref, meta, GangStatus(GangPhase.SCHEDULING, "x", 0, 3), NOW) == {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ml"}, "status": {"phase": "Scheduling", "scheduled": 0}}
    body = status_apply(ref, meta, GangStatus(GangPhase.SCHEDULED, "x", 3, 3), NOW)
    assert body is not None and body["status"] == {"phase": "Scheduled", "scheduled": 3}


@pytest.mark.parametrize("kind", [GroupKind.WORKLOAD, GroupKind.ANNOTATION])
def test_kinds_without_status_get_no_write(kind: GroupKind) -> None:
    assert status_apply(GroupRef(kind, "ml", "w", "g"), GroupMeta("x/v1"), SCHEDULED, NOW) is None


# ------------------------------------------------------------------------------------ the mirror
def test_mirror_takes_every_generation_and_reports_policy_changes() -> None:
    mirror = ClusterMirror()
    names = sorted(p.name for p in GOLDEN.iterdir() if p.name.startswith(("podgroup", "workload")))
    counts = load_into(mirror, [golden(n) for n in names] + [golden(n) for n in sorted(
        p.name for p in GOLDEN.iterdir() if p.name.startswith("pod-"))])
    assert counts == {"Workload": 1, "skipped": 2, "PodGroup": 5, "Pod": 5}  # 1.36+ Workloads: templates
    gang = GangKey(GroupRef(PG, "ml", "training-workers"))
    # v1alpha3 and v1beta1 objects of one PodGroup are the same object: the later one wins.
    high = GangOrder(priority=1000, priority_class="high")
    assert mirror.gang_policy(gang) == (True, GangPolicy(8, 45.0, order=high))
    assert gang.group in mirror.take_policy_changes()  # every group appeared (and this one went 3 -> 8)
    assert mirror.take_policy_changes() == set()
    meta = mirror.group_meta(gang.group)
    assert meta is not None and meta.api_version == "scheduling.k8s.io/v1beta1"
    scaled = golden("podgroup-v1beta1.json")
    scaled["spec"]["schedulingPolicy"]["gang"]["minCount"] = 6
    mirror.upsert_group(PG, scaled)
    assert mirror.gang_policy(gang) == (True, GangPolicy(6, 45.0, order=high))
    assert mirror.take_policy_changes() == {gang.group}
    mirror.upsert_group(PG, scaled)  # a status-only update is no policy change
    assert mirror.take_policy_changes() == set()
    mirror.delete_group(PG, "ml", "training-workers")
    assert mirror.gang_policy(gang) == (False, None) and mirror.group_meta(gang.group) is None


# ------------------------------------------------------------- what the Python client cannot parse
def test_the_kubernetes_client_drops_what_older_versions_send() -> None:
    """With the client's generated models (37.x), a 1.35 pod loses its gang link, a 1.36 PodGroup does
    not even load (its ``disruptionMode`` was a string) and loses its template reference, and there is
    no v1alpha1/v1alpha2 API class at all. Raw JSON keeps all of it."""
    client = pytest.importorskip("kubernetes.client")
    if not hasattr(client, "V1beta1PodGroup"):
        pytest.skip("a kubernetes client without the 1.37 models")
    pod = client.V1Pod.from_dict(golden("pod-v1.35-workloadref.json"))
    assert "workload_ref" not in pod.spec.to_dict()
    assert pod_link(golden("pod-v1.35-workloadref.json")) is not None
    v1alpha2 = golden("podgroup-v1alpha2.json")
    with pytest.raises(ValueError, match=r"disruptionMode|V1beta1DisruptionMode"):
        client.V1beta1PodGroup.from_dict(v1alpha2)
    del v1alpha2["spec"]["disruptionMode"]
    podgroup = client.V1beta1PodGroup.from_dict(v1alpha2)
    assert podgroup.spec.workload_ref is None  # podGroupTemplateRef is gone
    assert group_meta(PG, golden("podgroup-v1alpha2.json")).template == "training/workers"
    assert not hasattr(client, "SchedulingV1alpha1Api") and not hasattr(client, "SchedulingV1alpha2Api")

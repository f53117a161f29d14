"""Reading what a user would submit (``fitting.submission``): every kind ``kubectl gang fit`` reads, the
pods each makes, and a clear refusal for what does not describe one gang."""

from __future__ import annotations

from typing import Any

import pytest

from extender.cluster.groups import COSCHEDULING_LABEL
from extender.errors import SubmissionError
from extender.fitting.submission import read, set_priorities
from extender.model.gang import GroupKind

TEMPLATE = {"metadata": {"annotations": {"gang-extender.io/group": "g", "gang-extender.io/min-count": "3"}},
            "spec": {"schedulerName": "gang", "containers": [{"name": "c", "image": "x",
                                                              "resources": {"requests": {"cpu": "1"}}}]}}


def linked(group: str) -> dict[str, Any]:
    return {"metadata": {}, "spec": {"schedulingGroup": {"podGroupName": group},
                                     "containers": [{"name": "c", "image": "x"}]}}


def test_a_podgroup_and_a_job_make_parallelism_pods_of_one_gang_marked_tried() -> None:
    group = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "train"},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"parallelism": 4, "completions": 8, "template": linked("train")}}
    out = read([{**group, "metadata": {"name": "train", "namespace": "ml"}}, job])
    assert [kind for kind, _ in out.groups] == [GroupKind.PODGROUP]
    assert [p["metadata"]["name"] for p in out.pods] == [f"train-{i}" for i in range(4)]
    assert {p["metadata"]["namespace"] for p in out.pods} == {"ml"} and str(out.gang) == "ml/train"
    assert len({p["metadata"]["uid"] for p in out.pods}) == 4
    assert all(p["status"]["conditions"][0]["reason"] == "Unschedulable" for p in out.pods)
    assert len(read([job | {"spec": {**job["spec"], "completions": 2}}]).pods) == 2  # no more than completions


def test_a_pod_template_with_annotations_and_a_count() -> None:
    template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "w"}, "template": TEMPLATE}
    assert len(read([template]).pods) == 3  # the min-count annotation
    out = read([template], namespace="team", count=5)
    assert len(out.pods) == 5 and out.scheduler_name == "gang" and str(out.gang) == "team/g"


def test_a_jobset_makes_replicas_times_parallelism() -> None:
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
              "spec": {"replicatedJobs": [
                  {"name": "workers", "replicas": 3, "template": {"spec": {"parallelism": 2, "template": TEMPLATE}}},
                  {"name": "driver", "template": {"spec": {"template": TEMPLATE}}}]}}
    out = read([jobset])
    assert len(out.pods) == 7
    assert out.pods[0]["metadata"]["name"] == "js-workers-0-0" and out.pods[-1]["metadata"]["name"] == "js-driver-0"


def test_a_pytorchjob_without_a_gang_gets_the_podgroup_the_training_operator_makes() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "bert", "namespace": "ml"},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}},
               "Worker": {"replicas": 3, "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}}}}
    out = read([job])
    (kind, group), = out.groups
    assert kind is GroupKind.COSCHEDULING and group["metadata"]["name"] == "bert" and group["spec"]["minMember"] == 4
    assert len(out.pods) == 4 and all(p["metadata"]["labels"][COSCHEDULING_LABEL] == "bert" for p in out.pods)
    assert "training operator" in out.notes[0]
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 2}}
    assert read([job]).groups[0][1]["spec"]["minMember"] == 2


def test_a_list_is_read_item_by_item() -> None:
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"}, **{"spec": TEMPLATE["spec"]},
             } for i in range(2)]
    for p in pods:
        p["metadata"]["annotations"] = TEMPLATE["metadata"]["annotations"]
    out = read([{"apiVersion": "v1", "kind": "List", "items": pods}])
    assert [p["metadata"]["name"] for p in out.pods] == ["p0", "p1"]


@pytest.mark.parametrize(("objects", "says"), [
    ([], "no object"),
    ([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}], "not a kind fit reads"),
    ([{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
       "spec": {"template": {"spec": {"containers": []}}}}], "names no gang"),
    ([{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"}, "spec": {"template": linked("a")}},
      {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b"}, "spec": {"template": linked("b")}}],
     "pods of 2 gangs"),
    ([{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"},
       "spec": {"parallelism": -1, "template": linked("a")}}], "is negative"),
    ([{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"},
       "spec": {"parallelism": "many", "template": linked("a")}}], "not a whole number"),
    ([{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"},
       "spec": {"parallelism": 10**6, "template": linked("a")}}], "more than 100000 pods"),
    (["text"], "must be an object"),
])
def test_what_is_not_one_gang_is_refused_with_what_to_change(objects: list[Any], says: str) -> None:
    with pytest.raises(SubmissionError, match=says):
        read(objects)


def test_pods_get_the_priority_the_api_server_would_give_them() -> None:
    classes = [{"metadata": {"name": "high"}, "value": 1000},
               {"metadata": {"name": "normal"}, "value": 5, "globalDefault": True}]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"},
           "spec": {"parallelism": 2, "template": linked("a")}}
    out = read([job])
    out.pods[0]["spec"]["priorityClassName"] = "high"
    set_priorities(out, classes)
    assert [p["spec"]["priority"] for p in out.pods] == [1000, 5]  # its class, else the global default
    out = read([job])
    out.pods[0]["spec"]["priorityClassName"] = "missing"
    with pytest.raises(SubmissionError, match="no PriorityClass 'missing'"):
        set_priorities(out, classes)


def test_a_jobset_of_millions_of_empty_jobs_is_refused_before_it_is_built() -> None:
    """A 200-byte body must not make a list of 5,000,000 Jobs (each of zero pods) before any cap applies."""
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
              "spec": {"replicatedJobs": [{"name": "w", "replicas": 5_000_000, "template": {"spec": {
                  "parallelism": 0, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}}]}}
    with pytest.raises(SubmissionError, match="more than"):
        read([jobset])

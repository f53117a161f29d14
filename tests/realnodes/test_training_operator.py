"""The Kubeflow training operator, a job controller people run, as a client of the chart's gang-scheduler.

Training operator v1.8.1 is built here from its Go module (``hack/jobs/build-training-operator.sh``: the
manager, its image, the module's own ``manifests/overlays/standalone``) and runs in the cluster with
``--gang-scheduler-name=gang-scheduler``: the mechanism its documentation gives for scheduler-plugins. It then
creates one scheduler-plugins PodGroup (``scheduling.x-k8s.io/v1alpha1``, the CRD of ``manifests/crds``) per
job, labels the job's pods with it and gives them ``schedulerName: gang-scheduler``; the TFJobs here say
nothing about scheduling at all. Checked: a TFJob of 4 workers runs whole through its PodGroup; a TFJob too
big for the nodes gets ``GangNeverFits`` and none of its pods is bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from controlplane import run_build_script, wait_for
from realcluster import SCHEDULER_NAME, GangSampler, RealCluster, all_running, bound_count, deploy_controller
from realcluster import worker_container as worker

pytestmark = [pytest.mark.e2e, pytest.mark.realnodes, pytest.mark.jobs_full]  # make test-jobs, not make test

ROOT = Path(__file__).resolve().parents[2]
VERSION = "1.8.1"  # keep in step with TRAINING_OPERATOR_VERSION in hack/jobs/build-training-operator.sh
IMAGE = f"localhost/training-operator:v{VERSION}"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


@pytest.fixture(scope="module")
def operator(chart: RealCluster) -> RealCluster:
    """The training operator running in the cluster with its webhooks answering."""
    out = run_build_script(ROOT / "hack" / "jobs" / "build-training-operator.sh",
                           missing="the training operator is not built and `go` is not installed")
    deploy_controller(chart, out / "training-operator.yaml", IMAGE, "kubeflow", "training-operator",
                      tfjob("default", "webhook-probe", 1))
    return chart


def tfjob(namespace: str, name: str, workers: int, cpu: str = "100m") -> dict[str, Any]:
    """A TFJob of ``workers`` workers (containers named ``tensorflow``, as TFJob requires) that says nothing
    about scheduling; ``gang`` labels its pods for the sampler."""
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"tfReplicaSpecs": {"Worker": {
            "replicas": workers, "restartPolicy": "Never",
            "template": {"metadata": {"labels": {"gang": name}},
                         "spec": {"terminationGracePeriodSeconds": 5,
                                  "containers": [{**worker("tensorflow", cpu=cpu),
                                                  "ports": [{"name": "tfjob-port", "containerPort": 2222}]}]}},
        }}},
    }  # fmt: skip


def test_tfjob_runs_whole_through_its_podgroup(operator: RealCluster) -> None:
    operator.create_namespace("tf-whole")
    sampler = GangSampler(operator, "tf-whole", "mnist", 4)
    operator.apply([tfjob("tf-whole", "mnist", 4)])
    sampler.until(lambda pods: all_running(pods, 4), timeout=180, what="the TFJob's 4 workers bound whole and running")
    for pod in sampler.last:
        assert pod["spec"]["schedulerName"] == SCHEDULER_NAME, pod["spec"]["schedulerName"]
        assert pod["metadata"]["labels"].get(POD_GROUP_LABEL) == "mnist", pod["metadata"]["labels"]
    group = operator.get("podgroups.scheduling.x-k8s.io", "mnist", "-n", "tf-whole")
    assert group["spec"]["minMember"] == 4, group["spec"]


def test_tfjob_too_big_is_never_partly_bound(operator: RealCluster) -> None:
    """4 workers of 1.5 CPUs on two nodes of 2: the gang never fits, and no worker is bound."""
    operator.create_namespace("tf-big")
    operator.apply([tfjob("tf-big", "big", 4, cpu="1500m")])
    wait_for(lambda: len(operator.pods("tf-big", "gang=big")) == 4, timeout=120, interval=0.5,
             what="the operator to create the 4 workers")
    try:
        wait_for(lambda: bool(operator.events("tf-big", "GangNeverFits")), timeout=180, interval=1.0,
                 what="GangNeverFits for tf-big/big")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{operator.diagnostics('tf-big')}") from exc
    assert bound_count(operator.pods("tf-big", "gang=big")) == 0

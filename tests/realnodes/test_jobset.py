"""JobSet, a job controller people run, as a client of the chart's gang-scheduler on real nodes.

JobSet v0.10.1 is built here from its Go module (``hack/jobs/build-jobset.sh``: the manager, its image, and
the module's own ``config/default`` manifests: CRDs, RBAC, webhooks with their self-signed certificates)
and runs in the cluster as its users run it. Its JobSets change in nothing but what a user of
gang-extender chooses: ``schedulerName: gang-scheduler`` and the gang annotations in the pod template
(the group is the JobSet's name, the quorum all its pods). Checked: a JobSet of two Jobs of two pods runs
whole (a sampler fails on a partial gang lasting 3 s); a JobSet too big for the nodes gets
``GangNeverFits`` and none of its pods is bound; a worker's failure makes JobSet's failure policy delete and
re-create every pod, and the new pods are again scheduled whole and run. ``make test`` runs the first
only (CI's short version); ``make test-jobs`` all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from controlplane import run_build_script, wait_for
from realcluster import (
    SCHEDULER_NAME,
    WORKER,
    GangSampler,
    RealCluster,
    all_running,
    bound_count,
    deploy_controller,
    worker_container,
)

pytestmark = [pytest.mark.e2e, pytest.mark.realnodes]

ROOT = Path(__file__).resolve().parents[2]
JOBSET_VERSION = "0.10.1"  # keep in step with JOBSET_VERSION in hack/jobs/build-jobset.sh
IMAGE = f"localhost/jobset:v{JOBSET_VERSION}"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
#: Exits 1 at once on the pod whose name says attempt 0, index 0 of the first Job; runs as WORKER elsewhere.
FAIL_ONCE = ("import os, sys; name = os.environ['POD']; "
             "restarts = os.environ.get('RESTARTS', '0'); "
             "sys.exit(1) if restarts == '0' and '-workers-0-0-' in name else None; " + WORKER)


@pytest.fixture(scope="module")
def jobset(chart: RealCluster) -> RealCluster:
    """JobSet's controller running in the cluster with its webhooks answering."""
    out = run_build_script(ROOT / "hack" / "jobs" / "build-jobset.sh",
                           missing="JobSet is not built and `go` is not installed")
    deploy_controller(chart, out / "jobset.yaml", IMAGE, "jobset-system", "jobset-controller-manager",
                      jobset_object("default", "webhook-probe", replicas=1, parallelism=1))
    return chart


def jobset_object(namespace: str, name: str, *, replicas: int, parallelism: int, cpu: str = "100m",
                  script: str = WORKER, max_restarts: int = 0) -> dict[str, Any]:
    """A JobSet of ``replicas`` Jobs of ``parallelism`` pods each, all one gang on gang-scheduler."""
    size = replicas * parallelism
    pod_template = {
        "metadata": {"labels": {"gang": name},
                     "annotations": {"gang-extender.io/group": name, "gang-extender.io/min-count": str(size)}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                **worker_container("worker", script, cpu),
                "env": [*worker_container("worker")["env"],
                        {"name": "RESTARTS", "valueFrom": {"fieldRef": {
                            "fieldPath": f"metadata.labels['{RESTART_ATTEMPT}']"}}}],
            }],
        },
    }  # fmt: skip
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "failurePolicy": {"maxRestarts": max_restarts},
            "replicatedJobs": [{
                "name": "workers", "replicas": replicas,
                "template": {"spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
                                      "template": pod_template}},
            }],
        },
    }  # fmt: skip


def test_jobset_runs_whole(jobset: RealCluster) -> None:
    jobset.create_namespace("js-whole")
    sampler = GangSampler(jobset, "js-whole", "train", 4)
    jobset.apply([jobset_object("js-whole", "train", replicas=2, parallelism=2)])
    sampler.until(lambda pods: all_running(pods, 4), timeout=180, what="the JobSet's 4 pods bound whole and running")
    jobs = {p["metadata"]["labels"].get("job-name") for p in sampler.last}
    assert jobs == {"train-workers-0", "train-workers-1"}, jobs
    for pod in sampler.last:
        logs = jobset.kubectl("logs", "-n", "js-whole", pod["metadata"]["name"]).stdout
        assert f"worker {pod['metadata']['name']} on {pod['spec']['nodeName']}" in logs, logs


@pytest.mark.jobs_full
def test_jobset_too_big_is_never_partly_bound(jobset: RealCluster) -> None:
    """4 pods of 1.5 CPUs on two nodes of 2: the gang never fits, and no pod of it is bound."""
    jobset.create_namespace("js-big")
    jobset.apply([jobset_object("js-big", "big", replicas=2, parallelism=2, cpu="1500m")])
    wait_for(lambda: len(jobset.pods("js-big", "gang=big")) == 4, timeout=120, interval=0.5,
             what="JobSet to create the 4 pods")
    try:
        wait_for(lambda: bool(jobset.events("js-big", "GangNeverFits")), timeout=180, interval=1.0,
                 what="GangNeverFits for js-big/big")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{jobset.diagnostics('js-big')}") from exc
    assert bound_count(jobset.pods("js-big", "gang=big")) == 0


@pytest.mark.jobs_full
def test_jobset_failure_policy_recreates_the_gang_whole(jobset: RealCluster) -> None:
    """A worker exits 1; JobSet's failure policy (maxRestarts 1) deletes every pod and creates them again
    (restart attempt 1); the new pods are scheduled whole and run."""
    jobset.create_namespace("js-restart")

    def newest_attempt(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The pods of the newest restart attempt (each attempt is a gang of its own, bound whole)."""
        attempts = [int(p["metadata"]["labels"].get(RESTART_ATTEMPT, "0")) for p in pods]
        newest = max(attempts, default=0)
        return [p for p, a in zip(pods, attempts, strict=True) if a == newest]

    sampler = GangSampler(jobset, "js-restart", "retry", 4, select=newest_attempt)
    jobset.apply([jobset_object("js-restart", "retry", replicas=2, parallelism=2, script=FAIL_ONCE, max_restarts=1)])

    def second_attempt_running(pods: list[dict[str, Any]]) -> bool:
        current = [p for p in pods if p["metadata"]["labels"].get(RESTART_ATTEMPT) == "1"]
        return all_running(current, 4)

    sampler.until(second_attempt_running, timeout=300, what="restart attempt 1's 4 pods bound whole and running")
    status = jobset.get("jobset", "retry", "-n", "js-restart").get("status", {})
    assert status.get("restarts") == 1, status

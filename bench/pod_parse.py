"""Cost of reading one Pod: raw JSON (orjson) vs the kubernetes client's generated models.

Why: the mirror lists and watches every pod in the cluster (up to ~150,000). extender/kube/client.py reads
the API server's bytes with orjson and extender/cluster/records.py keeps a compact record; this measures what
going through the client's models (``V1Pod.from_dict`` / ``ApiClient.deserialize``, which is what a
call without ``_preload_content=False`` does) would cost instead, on a pod shaped like what the API
server serves for a Job pod (managedFields, status, projected token volume, default tolerations).

Also measures the memory one pod takes held as a raw dict, as the client's model, and as the mirror's
compact record.

Run: ``.venv/bin/python bench/pod_parse.py`` (a few seconds). Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
import tracemalloc
from collections.abc import Callable
from importlib import metadata
from typing import Any

import orjson

from extender.cluster.records import pod_record

MIRROR_PODS = 150_000  # the largest cluster the mirror is sized for


def api_pod(index: int = 0) -> dict[str, Any]:
    """A pending Job pod as ``GET /api/v1/pods`` returns it (written by hand for this benchmark)."""
    name = f"trainer-{index}-x7k2p"
    time = "2025-11-30T09:00:00Z"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "ml", "uid": f"5f0c1d2e-0000-4000-8000-{index:012d}",
            "resourceVersion": "123456789", "creationTimestamp": time, "generateName": f"trainer-{index}-",
            "labels": {"app": "trainer", "batch.kubernetes.io/controller-uid": "9a8b7c6d",
                       "batch.kubernetes.io/job-name": "trainer", "controller-uid": "9a8b7c6d",
                       "job-name": "trainer", "batch.kubernetes.io/job-completion-index": str(index)},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "trainer", "uid": "9a8b7c6d",
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [{
                "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": time,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:job-name": {}},
                                            "f:ownerReferences": {".": {}, "k:{\"uid\":\"9a8b7c6d\"}": {}}},
                             "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {
                                 ".": {}, "f:image": {}, "f:name": {}, "f:resources": {
                                     ".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}},
                                     "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}}}},
                                 "f:restartPolicy": {}, "f:schedulerName": {}}},
            }],
        },
        "spec": {
            "schedulerName": "default-scheduler", "restartPolicy": "Never", "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "priority": 0,
            "terminationGracePeriodSeconds": 30, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
            "securityContext": {}, "hostname": name, "subdomain": "trainer",
            "workloadRef": {"name": "trainer", "podGroup": "workers"},
            "containers": [{
                "name": "main", "image": "registry.example/ml/trainer:1.4.2", "imagePullPolicy": "IfNotPresent",
                "command": ["python", "-m", "trainer"], "args": ["--epochs", "10", "--rank", str(index)],
                "env": [{"name": "RANK", "value": str(index)}, {"name": "WORLD_SIZE", "value": "8"},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                      "fieldPath": "status.podIP"}}}],
                "ports": [{"name": "dist", "containerPort": 29500, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}},
                "readinessProbe": {"tcpSocket": {"port": 29500}, "periodSeconds": 10, "timeoutSeconds": 1,
                                   "successThreshold": 1, "failureThreshold": 3},
                "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                 {"name": "kube-api-access-abcde", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            }],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                        "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}},
            ],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ],
        },
        "status": {
            "phase": "Pending", "qosClass": "Guaranteed",
            "conditions": [{"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                            "lastTransitionTime": time, "reason": "Unschedulable",
                            "message": "0/5000 nodes are available: waiting for gang ml/trainer/workers."}],
        },
    }


def per_call(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Median over ``repeat`` runs of the seconds one call takes."""
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number


def held_bytes(make: Callable[[bytes], object], raws: list[bytes]) -> float:
    """Bytes retained per pod when ``make`` turns each raw pod into what is kept."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [make(raw) for raw in raws]
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return (after - before) / len(raws)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke test)")
    args = parser.parse_args(argv)
    number, repeat = (200, 3) if args.quick else (2000, 7)

    from kubernetes.client import ApiClient, V1Pod

    raw = orjson.dumps(api_pod(3))
    text = raw.decode()
    api = ApiClient()
    model = V1Pod.from_dict(orjson.loads(raw))  # fails loudly if the client rejects the pod
    assert model is not None and model.metadata is not None and model.metadata.name == "trainer-3-x7k2p"

    cases: list[tuple[str, Callable[[], object], int]] = [
        ("orjson.loads", lambda: orjson.loads(raw), number),
        ("json.loads (stdlib)", lambda: json.loads(text), number),
        ("orjson.loads + records.pod_record (what the mirror keeps)", lambda: pod_record(orjson.loads(raw)), number),
        ("V1Pod.from_dict(orjson.loads(...)) (kubernetes client model)",
         lambda: V1Pod.from_dict(orjson.loads(raw)), max(number // 10, 20)),
        ('ApiClient().deserialize(text, "V1Pod") (default client path)',
         lambda: api.deserialize(text, "V1Pod", "application/json"), max(number // 10, 20)),
    ]
    print(f"one Pod of {len(raw):,} bytes; kubernetes {metadata.version('kubernetes')}, "
          f"pydantic {metadata.version('pydantic')}, orjson {metadata.version('orjson')}, "
          f"Python {sys.version.split()[0]}", flush=True)
    results = []
    for label, fn, n in cases:
        fn()
        seconds = per_call(fn, n, repeat)
        results.append((label, seconds))
        print(f"  {label}: {seconds * 1e6:.1f} us", file=sys.stderr, flush=True)
    base = results[0][1]
    print(f"\n| parse one Pod | per pod | x orjson.loads | {MIRROR_PODS:,} pods |")
    print("|---|---:|---:|---:|")
    for label, seconds in results:
        print(f"| {label} | {seconds * 1e6:.1f} us | {seconds / base:.1f}x | {seconds * MIRROR_PODS:.1f} s |")

    from kubernetes.client import V1Pod as Model

    raws = [orjson.dumps(api_pod(i)) for i in range(500 if args.quick else 2000)]
    print(f"\n| keep one Pod as | bytes held | {MIRROR_PODS:,} pods |")
    print("|---|---:|---:|")
    for label, make in (("raw dict (orjson.loads)", orjson.loads),
                        ("kubernetes client model (V1Pod.from_dict)", lambda b: Model.from_dict(orjson.loads(b))),
                        ("records.PodRecord (what the mirror keeps)", lambda b: pod_record(orjson.loads(b)))):
        per_pod = held_bytes(make, raws)
        print(f"| {label} | {per_pod:,.0f} | {per_pod * MIRROR_PODS / 2**20:,.0f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long the mirror takes to load 5,000 nodes and 150,000 pods, and how much memory it keeps.

    .venv/bin/python bench/mirror_scale.py [--nodes 5000] [--pods 150000]

Pods are generated as the API server serves them (JSON bytes of List pages of 500), parsed with
orjson page by page and streamed into ClusterMirror.replace_pods exactly as a relist through
kube.PagedList does. RSS is read from /proc/self/status; "kept" is the growth after loading.
"""

from __future__ import annotations

import argparse
import gc
import time

import orjson

from extender.cluster.mirror import ClusterMirror


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def node(i: int) -> dict[str, object]:
    return {"metadata": {"name": f"node-{i:05d}", "labels": {"kubernetes.io/hostname": f"node-{i:05d}",
                                                             "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
            "spec": {}, "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}}


def pod(i: int, nodes: int) -> dict[str, object]:
    gang = i % 4 == 0
    spec: dict[str, object] = {
        "schedulerName": "default-scheduler", "nodeName": f"node-{i % nodes:05d}" if i % 10 else "",
        "containers": [{"name": "main", "image": "registry.example/app:1.2.3",
                        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                                      "limits": {"cpu": "1", "memory": "1Gi"}},
                        "env": [{"name": "A", "value": "b"}] * 5, "ports": [{"containerPort": 8080}]}],
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
    }
    if gang:
        spec["workloadRef"] = {"name": f"job-{i // 64}", "podGroup": "workers"}
    return {"metadata": {"name": f"pod-{i:06d}", "namespace": f"ns-{i % 50}", "uid": f"uid-{i:06d}",
                         "labels": {"app": "bench", "job": f"job-{i // 64}"},
                         "annotations": {"note": "x" * 64}, "resourceVersion": str(i)},
            "spec": spec, "status": {"phase": "Running" if i % 10 else "Pending", "podIP": "10.0.0.1"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150000)
    args = parser.parse_args()

    node_page = orjson.dumps({"items": [node(i) for i in range(args.nodes)]})
    pod_pages = [orjson.dumps({"items": [pod(i, args.nodes) for i in range(start, min(start + 500, args.pods))]})
                 for start in range(0, args.pods, 500)]
    print(f"generated {args.nodes} nodes ({len(node_page) / 2**20:.1f} MiB JSON), {args.pods} pods "
          f"({sum(map(len, pod_pages)) / 2**20:.1f} MiB JSON in {len(pod_pages)} pages)", flush=True)
    gc.collect()
    base = rss_mib()

    mirror = ClusterMirror()
    started = time.perf_counter()
    nodes = orjson.loads(node_page)["items"]
    mirror.replace_nodes(nodes)
    node_seconds = time.perf_counter() - started
    del nodes

    started = time.perf_counter()
    for page in pod_pages[:20]:
        orjson.loads(page)
    parse_seconds = (time.perf_counter() - started) * len(pod_pages) / 20
    started = time.perf_counter()
    mirror.replace_pods(item for page in pod_pages for item in orjson.loads(page)["items"])
    pod_seconds = time.perf_counter() - started
    gc.collect()
    kept = rss_mib() - base

    started = time.perf_counter()
    mirror.replace_pods([])  # relist to empty: the cost of removing them all
    clear_seconds = time.perf_counter() - started

    print(f"nodes: {args.nodes} loaded in {node_seconds:.2f}s")
    print(f"pods: {args.pods} loaded into the mirror in {pod_seconds:.2f}s ({pod_seconds / args.pods * 1e6:.1f} "
          f"µs/pod), of which orjson parsing ~{parse_seconds:.2f}s")
    print(f"memory kept by the mirror: {kept:.0f} MiB ({kept * 2**20 / args.pods:.0f} B/pod incl. nodes)")
    print(f"removing all pods (relist to empty): {clear_seconds:.2f}s")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Filter CPU per request for a backlog of gangs, in process (no HTTP, no control plane).

The state of the end-to-end benchmark's backlog phase (``bench/e2e_scheduling.py``): 1,000 nodes
(984 general 8-cpu nodes in three zones, a 16-node 4-cpu pool) and 250 Workloads of 8 identical
members (500m / 1Gi) pending. Every member is filtered once in a shuffled queue order with 420
rotating node names (kube-scheduler's default share of 1,000 nodes), as the serving worker's direct
routes answer them (``routes.answer``; through the Flask app in trees without them) on a
``--cluster-snapshot`` runtime; a member that gets a feasible node is bound there from its own thread
(held at its gang's barrier, released at quorum), so later filters see admitted gangs, reservations
and bound members as kube-scheduler's would. Reports the CPU time (``time.thread_time``) of each
filter request: what the extender spends on kube-scheduler's serial scheduling cycle.

    .venv/bin/python bench/backlog_filter.py              # ~10 s
    .venv/bin/python bench/backlog_filter.py --profile    # + cProfile of the filter requests
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workloads as wl

from extender.config import Settings
from extender.http.app import create_app


def names_per_request(nodes: int) -> int:
    """kube-scheduler's adaptive feasible-node count (``numFeasibleNodesToFind``): 50 % less 1 % per
    125 nodes, at least 5 % and 100 nodes (420 of 1,000 nodes, 500 of 5,000)."""
    if nodes < 100:
        return nodes
    percent = max(5, 50 - nodes // 125)
    return max(100, nodes * percent // 100)


def node(name: str, cpu: str, memory: str, labels: dict[str, str]) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": resources, "capacity": resources}}


def snapshot(gangs: int, size: int, general: int = 984,
             cpu: str = "8") -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(nodes, pending pods, the List) of the backlog phase."""
    nodes = [node(f"node-{i:04d}", cpu, "32Gi", {**wl.GENERAL, "topology.kubernetes.io/zone": wl.ZONES[i % 3]})
             for i in range(general)]
    nodes += [node(f"pool-c-{i:02d}", "4", "16Gi", dict(wl.CONTENTION)) for i in range(16)]
    plan, _ = wl.e2e_plan(gangs=True, gang_count=gangs, size=size, namespace="backlog")
    pods = []
    for i, template in enumerate(plan.pods):
        pod = orjson.loads(orjson.dumps(template))
        pod["metadata"]["uid"] = f"uid-{i}"
        pod["metadata"]["resourceVersion"] = str(1000 + i)  # as the API server has it
        pod["spec"]["schedulerName"] = "default-scheduler"
        pod["status"] = {"phase": "Pending"}
        pods.append(pod)
    return nodes, pods, {"apiVersion": "v1", "kind": "List", "items": [*nodes, *plan.workloads, *pods]}


def poster(app: Any) -> Any:
    """``post(path, body) -> (status, reply bytes)`` as ``gang-extender serve`` answers: the worker's direct
    routes where this tree has them (``routes.answer``), else through Flask's test client."""
    from extender.http import routes

    answer = getattr(routes, "answer", None)
    if answer is not None:
        ext = app.extensions["gang_extender"]
        return lambda path, body: answer(ext, path.lstrip("/"), body, None)

    def through_flask(path: str, body: bytes) -> tuple[int, bytes]:
        reply = app.test_client().post(path, data=body, content_type="application/json")
        return reply.status_code, reply.data
    return through_flask


def timed_bind(post: Any, body: bytes, cpu: list[float]) -> None:
    before = time.thread_time()
    post("/bind", body)
    cpu.append(time.thread_time() - before)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--gangs", type=int, default=250)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=984, help="general nodes (+16 pool nodes) [984]")
    parser.add_argument("--node-cpu", default="8", help="cpu of a general node [8]")
    parser.add_argument("--in-order", action="store_true",
                        help="filter members in creation order (upstream's gang benchmark), not shuffled")
    parser.add_argument("--seed", type=int, default=1, help="queue order [1]")
    parser.add_argument("--profile", action="store_true", help="cProfile the filter requests (slower)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    nodes, pods, listing = snapshot(args.gangs, args.size, args.nodes, args.node_cpu)
    per_request = names_per_request(len(nodes))
    with tempfile.TemporaryDirectory(prefix="gang-backlog-") as tmp:
        path = Path(tmp) / "snapshot.json"
        path.write_bytes(orjson.dumps(listing))
        app = create_app(Settings(cluster_snapshot=str(path), gang_timeout_seconds=3600))
    post = poster(app)
    names = [n["metadata"]["name"] for n in nodes]
    queue = list(pods)
    if not args.in_order:
        random.Random(args.seed).shuffle(queue)  # gangs interleave in kube-scheduler's queue
    profile = cProfile.Profile(timer=time.thread_time) if args.profile else None
    cpu: list[float] = []
    binds: list[threading.Thread] = []
    bind_cpu: list[float] = []
    unplaced = 0
    start = 0
    for pod in queue:
        requested = [names[(start + j) % len(names)] for j in range(per_request)]
        start = (start + per_request) % len(names)
        body = orjson.dumps({"Pod": pod, "NodeNames": requested})
        before = time.thread_time()
        if profile:
            profile.enable()
        status, reply = post("/filter", body)
        if profile:
            profile.disable()
        cpu.append(time.thread_time() - before)
        if status != 200:
            raise SystemExit(f"filter answered {status}: {reply[:200]!r}")
        feasible = orjson.loads(reply).get("NodeNames") or []
        if not feasible:
            unplaced += 1
            continue
        bind = orjson.dumps({"PodName": pod["metadata"]["name"], "PodNamespace": pod["metadata"]["namespace"],
                             "PodUID": pod["metadata"]["uid"], "Node": feasible[0]})
        thread = threading.Thread(target=timed_bind, args=(post, bind, bind_cpu), daemon=True)
        thread.start()
        binds.append(thread)
        time.sleep(0.0005)  # let the bind take its place at the barrier, as it would over HTTP
    for thread in binds:
        thread.join(10)
    count = len(cpu)
    quarters = [cpu[q * count // 4:(q + 1) * count // 4] for q in range(4)]
    by_quarter = ", ".join(f"{sum(q) / max(1, len(q)) * 1e3:.3f}" for q in quarters)
    cpu.sort()

    def ms(q: float) -> str:
        return f"{cpu[min(count - 1, int(q * count))] * 1e3:.3f}"

    print(f"{count} filter requests ({args.gangs} gangs of {args.size}, {len(nodes)} nodes, "
          f"{per_request} names each); {unplaced} told to wait; {len(binds)} binds")
    print(f"filter CPU ms: mean {sum(cpu) / count * 1e3:.3f}, p50 {ms(0.5)}, p90 {ms(0.9)}, p99 {ms(0.99)}, "
          f"max {cpu[-1] * 1e3:.3f}; total {sum(cpu):.2f} s")
    print(f"filter CPU ms, mean of each quarter of the queue (gangs tracked grow): {by_quarter}")
    print(f"bind CPU ms: mean {sum(bind_cpu) / max(1, len(bind_cpu)) * 1e3:.3f} ({len(bind_cpu)} binds answered)")
    if profile:
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())

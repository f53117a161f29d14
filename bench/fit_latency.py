"""How long ``kubectl gang fit`` takes for a 1,000-member gang on 5,000 nodes, from the command line
(issue 28 item 3: under 2 s).

A local control plane (no scheduler: nothing here is placed) holds ``--nodes`` Ready nodes of 4 cpu /
32Gi in racks of 100 (``example.com/rack``) and one running pod of 2 cpu on each (bound by ``nodeName``),
so every node has 2 cpu free. Then the installed ``kubectl-gang`` (a new process each time, as a user runs
it) answers for a Job of ``--members`` pods with its Workload, in three cases:

- ``fits-now``: members of 1 cpu, anywhere (the whole planner, every node a candidate);
- ``capacity``: members of 3 cpu: no node can hold one now, so the planner fails, preemption finds no
  lower-priority victims, and the smallest growth is searched (fewest nodes of a shape the cluster has);
- ``rack``: members of 1 cpu that must share a rack (``topology-required``): no rack of 100 nodes can
  hold 1,000 even when empty, so the answer is never, with the nodes that would change that.

Each case runs ``--runs`` times; reported: the wall time of the whole command (median and worst), and,
in this process, the part spent listing the cluster from the API server. Exit status 1 when a median is
over ``--floor`` seconds or an answer is not the expected kind.

Run: ``make bench-fit`` (= ``.venv/bin/python bench/fit_latency.py``); ``--nodes 500 --members 100``
for a quick look. Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

from controlplane import ControlPlane, find_bin_dir  # noqa: E402

from extender.kube.client import KubeClient  # noqa: E402
from extender.kubectl import fit  # noqa: E402

KUBECTL_GANG = str(Path(sys.executable).with_name("kubectl-gang"))
RACK = "example.com/rack"
NAMESPACE = "fit-bench"
PAUSE = "registry.k8s.io/pause:3.10.1"
CASES = {"fits-now": ("1", False), "capacity": ("3", False), "rack": ("1", True)}


def expect(case: str, members: int, nodes: int, per_rack: int) -> str:
    """The answer each case must get: every node has 2 cpu free of 4."""
    if case == "fits-now":
        return "FitsNow"
    if case == "capacity":  # no node has 3 cpu free; empty, each would hold one member
        return "FitsAfterCapacity" if members <= nodes else "Never"
    if members > 4 * per_rack:
        return "Never"  # not even an empty rack holds the gang (nodes added to it would)
    return "FitsAfterCapacity" if members > 2 * per_rack else "FitsNow"


def log(line: str) -> None:
    print(f"[fit-bench] {line}", file=sys.stderr, flush=True)


def fill(cp: ControlPlane, nodes: Sequence[str]) -> None:
    """One running pod of 2 cpu on each node (bound by nodeName, as a kubelet's static pod would be)."""
    def post(node: str) -> None:
        cp.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"busy-{node}", "namespace": NAMESPACE},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": PAUSE, "resources": {
                "requests": {"cpu": "2", "memory": "1Gi"}}}]}})
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(post, nodes))


def job_file(members: int, cpu: str, rack: bool) -> str:
    """A Workload of minCount ``members`` and a Job of that parallelism whose pods join it."""
    annotations = {"gang-extender.io/topology-required": RACK} if rack else {}
    workload = {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
                "metadata": {"name": "train", "namespace": NAMESPACE, "annotations": annotations},
                "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": members}}}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": NAMESPACE},
           "spec": {"parallelism": members, "completions": members, "template": {"spec": {
               "restartPolicy": "Never", "workloadRef": {"name": "train", "podGroup": "workers"},
               "containers": [{"name": "main", "image": PAUSE,
                               "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}}}
    return yaml.safe_dump_all([workload, job])


def ask(kubeconfig: str, path: Path) -> tuple[float, dict[str, Any]]:
    """One ``kubectl-gang fit -f path -o json`` run: its wall time and answer."""
    started = time.monotonic()
    done = subprocess.run([KUBECTL_GANG, "--kubeconfig", kubeconfig, "fit", "-f", str(path), "-o", "json"],
                          capture_output=True, text=True, timeout=120, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"kubectl gang fit failed ({done.returncode}): {done.stderr}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return seconds, answer


def listing_seconds(kubeconfig: str) -> float:
    """The part of a fit spent listing the cluster and reading it into a mirror (in this process)."""
    started = time.monotonic()
    gc.disable()  # as the command does
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            fit.read_cluster(fit.fetch(KubeClient(kubeconfig), pool))
    finally:
        gc.enable()
    return time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000, help="nodes [5000]")
    p.add_argument("--members", type=int, default=1000, help="members of the gang asked about [1000]")
    p.add_argument("--runs", type=int, default=5, help="runs of each case [5]")
    p.add_argument("--floor", type=float, default=2.0, help="the median each case must stay under, s [2.0]")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    results: dict[str, Any] = {"nodes": args.nodes, "members": args.members, "cases": {}}
    ok = True
    with tempfile.TemporaryDirectory(prefix="fit-bench-") as tmp, \
            ControlPlane(find_bin_dir(), Path(tmp) / "cp", log=log) as cp:
        started = time.monotonic()
        racks = max(1, args.nodes // 100)
        names: list[str] = []
        for r in range(racks):
            names += cp.add_nodes(args.nodes // racks, cpu="4", memory="32Gi", prefix=f"r{r}-n",
                                  labels={RACK: f"r{r}"})
        cp.create_namespace(NAMESPACE)
        fill(cp, names)
        log(f"{len(names)} nodes in {racks} racks, one pod on each, in {time.monotonic() - started:.0f}s")
        results["listingSeconds"] = statistics.median(listing_seconds(cp.kubeconfig) for _ in range(3))
        per_rack = args.nodes // racks
        for case, (cpu, rack) in CASES.items():
            expected = expect(case, args.members, len(names), per_rack)
            path = Path(tmp) / f"{case}.yaml"
            path.write_text(job_file(args.members, cpu, rack))
            runs = [ask(cp.kubeconfig, path) for _ in range(args.runs)]
            seconds = [s for s, _ in runs]
            verdicts = {a["verdict"] for _, a in runs}
            median = statistics.median(seconds)
            results["cases"][case] = {"median": median, "worst": max(seconds), "verdicts": sorted(verdicts),
                                      "answer": runs[-1][1].get("summary", "")}
            good = verdicts == {expected} and median < args.floor and (expected == "FitsNow" or all(
                a.get("capacity") for _, a in runs))
            ok &= good
            log(f"{case}: median {median:.2f}s, worst {max(seconds):.2f}s, verdict {sorted(verdicts)} "
                f"(expected {expected}){'' if good else '  <-- FAILED'}")
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

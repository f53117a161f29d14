#!/usr/bin/env python3
"""A big gang under a stream of small work, side by side: gang-extender, kube-scheduler alone, and the
in-tree GangScheduling plugin (1.35 gates on), each on a fresh local control plane with 16 kwok nodes.

The scenario is ``tests/e2e/test_starvation.py``'s (its ``Stream``): 2-member gangs and plain pods of
2 cpu, each running 2-5 s, keep the 4-cpu nodes full; a gang of 16 members of 3 cpu is created; the
stream goes on until the big gang is bound or ``--seconds`` have passed. Reported per configuration:
when the big gang was whole, how many of its pods were bound at the end, how long some but not all of
them were bound (capacity held by a partial gang), and how many stream pods finished meanwhile.

    .venv/bin/python bench/starvation.py [--seconds 180] [--max-wait 60]
        [--configs gang-extender,kube-scheduler,in-tree]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "hack"), str(ROOT / "tests" / "e2e")]

import test_starvation as scenario  # noqa: E402
from controlplane import DEFAULT_SCHEDULER_CONFIG, ControlPlane, find_bin_dir, wait_for  # noqa: E402
from kwok_harness import Kwok, find_kwok_bin_dir  # noqa: E402
from support import bound, scheduling_with_extender  # noqa: E402

CONFIGS = ("gang-extender", "kube-scheduler", "in-tree")


def run(config: str, seconds: float, max_wait: float, workdir: Path) -> dict[str, Any]:
    gates = {"GangScheduling": True} if config == "in-tree" else {}
    with ControlPlane(find_bin_dir(), workdir / config, feature_gates=gates, log=lambda _line: None) as cp, \
            Kwok(cp, find_kwok_bin_dir()) as kwok:
        if config == "gang-extender":
            (workdir / config / "extender").mkdir(parents=True, exist_ok=True)
            with scheduling_with_extender(cp, workdir / config / "extender"):
                return measure(cp, kwok, seconds, max_wait)
        cp.start_scheduler(dict(DEFAULT_SCHEDULER_CONFIG))
        try:
            return measure(cp, kwok, seconds, max_wait)
        finally:
            cp.stop_scheduler()


def measure(cp: ControlPlane, kwok: Kwok, seconds: float, max_wait: float) -> dict[str, Any]:
    ns, size = "starve", scenario.NODES
    cp.create_namespace(ns)
    selector = {"e2e-pool": ns}
    kwok.add_nodes(size, prefix=f"{ns}-n", cpu="4", labels=selector)
    partial = 0.0
    with scenario.Stream(cp, ns, selector) as stream:
        wait_for(lambda: len(bound(cp, ns)) >= size * 2 - 2, timeout=60, what="the pool filled by the stream")
        created = last = time.monotonic()
        cp.request("POST", f"/apis/scheduling.k8s.io/v1alpha1/namespaces/{ns}/workloads",
                   scenario.workload(ns, "big", size, {"gang-extender.io/max-wait-seconds": str(max_wait)}))
        for i in range(size):
            cp.request("POST", f"/api/v1/namespaces/{ns}/pods",
                       {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"big-{i}", "namespace": ns},
                        "spec": scenario.spec("3", selector, "big")})
        whole = None
        while time.monotonic() - created < seconds:
            count = len(bound(cp, ns, "big-"))
            now = time.monotonic()
            if 0 < count < size:
                partial += now - last
            last = now
            if count == size:
                whole = now - created
                break
            time.sleep(0.2)
        finished = stream.finished
    return {"whole": whole, "bound": len(bound(cp, ns, "big-")), "partial": partial, "finished": finished}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="how long the stream may last after the big gang")
    parser.add_argument("--max-wait", type=float, default=60.0, help="gang-extender's max wait for the big gang")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="starvation-") as tmp:
        for config in args.configs.split(","):
            print(f"[starvation] {config} ...", file=sys.stderr, flush=True)
            result = run(config, args.seconds, args.max_wait, Path(tmp))
            rows.append((config, result))
            print(f"[starvation] {config}: {result}", file=sys.stderr, flush=True)
    print("| configuration | big gang whole after | its pods bound at the end | time partly bound | "
          "stream pods finished |\n|---|---:|---:|---:|---:|")
    for config, r in rows:
        whole = f"{r['whole']:.0f} s" if r["whole"] is not None else f"not within {args.seconds:.0f} s"
        print(f"| {config} | {whole} | {r['bound']}/{scenario.NODES} | {r['partial']:.0f} s | {r['finished']} |")


if __name__ == "__main__":
    main()

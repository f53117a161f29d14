#!/usr/bin/env python3
"""Admission planning with and without a topology constraint, in process, at 5,000 nodes.

5 zones x 10 blocks x 10 racks of 10 nodes (32 cpu, 128Gi, 110 pods each) in a ClusterMirror, each node
already running one pod of a random size (seeded: 0 to 30 cpu), and a gang of 16 members of 4 cpu /
8Gi. Each sample is what admission would compute for it: the gang's free cpu by node as admission
reads it (``GangPlacement.free_cpu_for``: each node's when the plan asks, every node's at once when it
reads them all) plus the plan, with ``free_of`` reading ``mirror.free`` as the ledger does, under the
mirror's lock. Cases, interleaved in one run:

- unconstrained: ``planner.plan`` over every node, in the order of the mirror's cpu index;
- required rack / preferred rack / required block: ``gangs.domains.place`` with the level order
  zone,block,rack;
- preferred rack, fallback: a gang of 90 members no rack can hold even empty (lands in one block);
- never-fits: ``gangs.domains.never_fits`` for a required rack (on allocatable, no mirror reads), for
  16 members (a rack could hold them) and for 90 (none could).

    .venv/bin/python bench/topology_planning.py [--samples 300] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable

import timing

from extender.cluster.mirror import ClusterMirror
from extender.cluster.topology_constraints import HOSTNAME
from extender.gangs import domains, planner
from extender.gangs.placement import GangPlacement
from extender.model.cluster import NodeRecord, PodRecord
from extender.model.gang import GangKey, GroupKind, GroupRef, TopologyConstraint
from extender.model.quantity import Resources

ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "example.com/block", "example.com/rack"
LEVELS = (ZONE, BLOCK, RACK)
GANG = GangKey(GroupRef(GroupKind.ANNOTATION, "bench", "gang"))


def build_mirror(seed: int) -> ClusterMirror:
    rng = random.Random(seed)
    mirror = ClusterMirror()
    nodes, pods = [], []
    for z in range(5):
        for b in range(10):
            for r in range(10):
                for n in range(10):
                    name = f"node-{z}-{b}-{r}-{n}"
                    labels = {ZONE: f"z{z}", BLOCK: f"z{z}-b{b}", RACK: f"z{z}-b{b}-r{r}", HOSTNAME: name}
                    nodes.append({"metadata": {"name": name, "labels": labels}, "spec": {},
                                  "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}})
                    used = rng.choice([0, 4, 8, 16, 24, 28, 30])
                    if used:
                        pods.append({"metadata": {"name": f"busy-{name}", "namespace": "bench", "uid": f"u-{name}"},
                                     "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {
                                         "requests": {"cpu": str(used), "memory": f"{used * 2}Gi"}}}]},
                                     "status": {"phase": "Running"}})
    mirror.replace_nodes(nodes)
    mirror.replace_pods(pods)
    return mirror


def gang(count: int) -> list[PodRecord]:
    return [PodRecord(f"g-{i}", "bench", f"m-{i}", "", {"cpu": 4000, "memory": 8 * 2**30, "pods": 1}, GANG)
            for i in range(count)]


def cases(mirror: ClusterMirror) -> dict[str, Callable[[], object]]:
    def free_of(node: NodeRecord) -> Resources:
        return mirror.free(node.name, GANG)

    placement = GangPlacement(mirror, lambda _gang: None)

    def callbacks() -> planner.FreeCpu:
        return placement.free_cpu_for(GANG)

    sixteen, ninety = gang(16), gang(90)

    def constrained(members: list[PodRecord], constraint: TopologyConstraint) -> Callable[[], object]:
        return lambda: domains.place(members, mirror.nodes.values(), free_of, callbacks(), constraint, LEVELS)

    return {
        "unconstrained": lambda: planner.plan(sixteen, mirror.nodes.values(), free_of, callbacks()),
        "required rack": constrained(sixteen, TopologyConstraint(required=RACK)),
        "preferred rack": constrained(sixteen, TopologyConstraint(preferred=RACK)),
        "required block": constrained(sixteen, TopologyConstraint(required=BLOCK)),
        "preferred rack, fallback (90 members)": constrained(ninety, TopologyConstraint(preferred=RACK)),
        "unconstrained (90 members)": lambda: planner.plan(ninety, mirror.nodes.values(), free_of, callbacks()),
        "never-fits, required rack": lambda: domains.never_fits(sixteen, mirror.nodes.values(),
                                                                  TopologyConstraint(required=RACK)),
        "never-fits, required rack (90 members)": lambda: domains.never_fits(
            ninety, mirror.nodes.values(), TopologyConstraint(required=RACK)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    mirror = build_mirror(args.seed)
    runs = cases(mirror)
    with mirror.lock:  # as admission plans (the cpu index is read under it)
        for name, run in runs.items():  # what each case chose, once
            result = run()
            if isinstance(result, domains.TopologyPlan):
                print(f"{name}: {result.domain} ({len(result.plan.slots)} slots, first choice {result.first_choice})")
            elif isinstance(result, planner.Plan):
                print(f"{name}: {len(result.per_node())} nodes ({len(result.slots)} slots)")
            else:
                print(f"{name}: {result or 'a rack could hold it'}")
        timing.interleaved(runs, args.samples, f"{len(mirror.nodes)} nodes", width=40, digits=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

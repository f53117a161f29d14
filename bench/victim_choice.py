#!/usr/bin/env python3
"""Preemption victim choice (``gangs/victims.choose_victims``), in process, on a full cluster.

300 nodes in 30 racks of 10 (32 cpu, 128Gi, 110 pods each), every node full (seeded):

- gangs: 300 running gangs of 2 to 8 pods (4 cpu / 16Gi each, spread over random nodes) and on each
  node one single pod filling the rest (4 cpu / 16Gi per 4 cpu): a few hundred units;
- singles: 3,000 single-pod units (3 cpu / 12Gi each, 10 per node) plus a 2 cpu pod of a higher
  priority on each node;

unit priorities 0 to 9, 1 unit in 20 unevictable, a preemptor of priority 100. Preemptors: 16 members of 8 cpu / 32Gi
unconstrained, the same with a required rack, and 64 members unconstrained; plus one that cannot fit
(a member larger than a node). ``free_of`` reads a precomputed dict (the mirror's cost is not in it).
Each case prints what it chose (victims, pods evicted, place_gang calls) once, then the timings.

    .venv/bin/python bench/victim_choice.py [--samples 30] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from typing import Any, cast

import timing

from extender.cluster.topology_constraints import HOSTNAME, NONE, TopologyConstraint
from extender.gangs import topology
from extender.gangs.victims import Preemption, VictimUnit, choose_victims
from extender.model.cluster import NodeRecord, PodRecord
from extender.model.gang import GangKey, GroupKind, GroupRef
from extender.model.quantity import Resources, add_into

RACK = "example.com/rack"
GI = 2**30
CPU = 1000
NODE = {"cpu": 32 * CPU, "memory": 128 * GI, "pods": 110}


def cluster() -> list[NodeRecord]:
    return [NodeRecord(f"r{r:02d}-n{n}", dict(NODE), {RACK: f"r{r:02d}", HOSTNAME: f"r{r:02d}-n{n}"})
            for r in range(30) for n in range(10)]


def pod(name: str, node: str, cpu: int, priority: int, gang: GangKey | None = None) -> PodRecord:
    return PodRecord(f"uid-{name}", "work", name, node, {"cpu": cpu * CPU, "memory": 4 * cpu * GI, "pods": 1}, gang,
                     priority=priority)


def unit(key: str, pods: tuple[PodRecord, ...], rng: random.Random) -> VictimUnit:
    evictable = rng.randrange(20) > 0
    return VictimUnit(key, pods[0].priority, pods, evictable, "" if evictable else "a PodDisruptionBudget")


def gang_units(nodes: list[NodeRecord], rng: random.Random) -> tuple[list[VictimUnit], list[PodRecord]]:
    room = {n.name: 32 for n in nodes}
    units = []
    for g in range(300):
        key = GangKey(GroupRef(GroupKind.ANNOTATION, "work", f"g{g}"))
        priority, pods = rng.randrange(10), []
        for i in range(rng.randint(2, 8)):
            fits = [name for name, cpu in room.items() if cpu >= 4]
            if not fits:
                break
            node = rng.choice(fits)
            room[node] -= 4
            pods.append(pod(f"g{g}-{i}", node, 4, priority, key))
        if pods:
            units.append(unit(f"gang work/g{g}", tuple(pods), rng))
    for node, cpu in room.items():  # one single pod fills what the gangs left on each node
        if cpu:
            units.append(unit(f"pod work/{node}", (pod(node, node, cpu, rng.randrange(10)),), rng))
    return units, []


def single_units(nodes: list[NodeRecord], rng: random.Random) -> tuple[list[VictimUnit], list[PodRecord]]:
    units = [unit(f"pod work/{n.name}-{i}", (pod(f"{n.name}-{i}", n.name, 3, rng.randrange(10)),), rng)
             for n in nodes for i in range(10)]
    return units, [pod(f"{n.name}-keep", n.name, 2, 1000) for n in nodes]


def free_view(nodes: list[NodeRecord], units: list[VictimUnit],
              others: list[PodRecord]) -> Callable[[NodeRecord], Resources]:
    free = {n.name: dict(n.allocatable) for n in nodes}
    for running in [*(p for u in units for p in u.pods), *others]:
        add_into(free[running.node_name], running.requests, -1)
    return lambda node: dict(free[node.name])


def preemptor(count: int, cpu: int) -> list[PodRecord]:
    return [pod(f"m{i}", "", cpu, 100) for i in range(count)]


def cases(seed: int) -> dict[str, Callable[[], Preemption | str]]:
    nodes = cluster()
    found: dict[str, Callable[[], Preemption | str]] = {}
    for name, build in (("gangs", gang_units), ("singles", single_units)):
        units, others = build(nodes, random.Random(seed))
        free_of = free_view(nodes, units, others)
        label = f"{name} ({len(units)} units)"

        def run(members: list[PodRecord], constraint: TopologyConstraint = NONE, units: list[VictimUnit] = units,
                free_of: Callable[[NodeRecord], Resources] = free_of) -> Callable[[], Preemption | str]:
            return lambda: choose_victims(members, members, nodes, free_of, constraint, (RACK,), (), units, 100)

        found[f"{label}, 16 x 8 cpu"] = run(preemptor(16, 8))
        found[f"{label}, 16 x 8 cpu, required rack"] = run(preemptor(16, 8), TopologyConstraint(required=RACK))
        found[f"{label}, 64 x 8 cpu"] = run(preemptor(64, 8))
        found[f"{label}, cannot fit (33 cpu)"] = run(preemptor(1, 33))
    return found


def describe(result: Preemption | str, plans: int) -> str:
    if isinstance(result, str):
        return f"{result} ({plans} plans)"
    pods = sum(len(u.pods) for u in result.victims)
    return (f"{len(result.victims)} victims, {pods} pods, max priority "
            f"{max((u.priority for u in result.victims), default='-')}, {plans} plans")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    runs = cases(args.seed)
    real = topology.place_gang
    patched = cast(Any, topology)  # the module victims calls place_gang through
    for name, run in runs.items():  # what each case chose, once, counting place_gang calls
        calls = [0]

        def counted(*a: Any, calls: list[int] = calls, **k: Any) -> topology.TopologyPlan:
            calls[0] += 1
            return real(*a, **k)

        patched.place_gang = counted
        try:
            result = run()
        finally:
            patched.place_gang = real
        print(f"{name}: {describe(result, calls[0])}")
    timing.interleaved(runs, args.samples, "300 nodes", width=50, digits=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

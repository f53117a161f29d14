"""Choosing preemption victims for a gang (pure).

Owns: which lower-priority running units (a whole gang, or one single pod) a high-priority gang (the
preemptor) would evict so that its chosen members fit under its topology constraint, and what evicting
them frees per node. A unit is all or nothing: its pods' requests are freed together, never part.
Must not: do I/O, read PodDisruptionBudgets or preemption policies (the caller marks a unit
``evictable`` or not and says ``why_not``), evict anything, or mutate its inputs.

How (each step judged by ``domains.place_gang`` over ``free_of`` plus what the units free; a set
failing a cheap necessary test, ``_Bound``, is not planned):

1. candidates: units of lower priority, evictable, with a bound pod on a node one of the chosen
   members could use (the planner's predicates), by priority, then fewer pods, then key; if evicting
   them all does not complete the plan, why not is returned (no smaller set is tried);
2. a short prefix of them that completes it: galloping, then bisecting (O(log units) plans; the
   shortest only if more capacity never undoes a complete plan, which first fit does not promise);
3. units with no pod on a node of that plan are left out when it still completes without them;
4. a removal pass: each unit, highest priority first, then larger first (the reverse order), is left
   out if the plan still completes, until no single victim can be spared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from extender.cluster.fit import placement_failure
from extender.cluster.records import pod_placement
from extender.gangs import domains
from extender.gangs.domains import TopologyPlan
from extender.gangs.planner import copies
from extender.model import messages
from extender.model.cluster import NodeRecord, Placement, PodRecord
from extender.model.gang import TopologyConstraint
from extender.model.quantity import CPU, Resources, add_into

NO_VICTIMS = messages.NO_VICTIMS
"""How every answer without victims begins (the text is ``messages``')."""


@dataclass(frozen=True, slots=True)
class VictimUnit:
    """What is evicted together: a whole gang, or one pod that is not a gang member."""

    key: str  # e.g. "gang ns/name" or "pod ns/name": what Events and explain name
    priority: int  # the unit's priority (a gang: its members' highest)
    pods: tuple[PodRecord, ...]  # its bound pods, evicted together
    evictable: bool = True  # False: never a victim (e.g. a PodDisruptionBudget forbids it)
    why_not: str = ""  # why it is not evictable (for explain)


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """The victims to evict (none: the preemptor fits already), where its chosen members then go, and
    what evicting the victims frees on each node."""

    victims: tuple[VictimUnit, ...]
    placement: TopologyPlan
    freed: dict[str, Resources]


def frees(units: Iterable[VictimUnit]) -> dict[str, Resources]:
    """Per node, the summed requests of the units' pods bound there (terminal pods hold nothing)."""
    return _plus({}, units)


def _plus(freed: dict[str, Resources], units: Iterable[VictimUnit], sign: int = 1) -> dict[str, Resources]:
    """A copy of ``freed`` with what ``units`` free added (``sign`` -1: taken away)."""
    total = {node: dict(amount) for node, amount in freed.items()}
    for unit in units:
        for pod in unit.pods:
            if pod.node_name and not pod.terminal:
                add_into(total.setdefault(pod.node_name, {}), pod.requests, sign)
    return {node: amount for node, amount in total.items() if amount}


class _Trial:
    """The preemptor's plan over ``free_of`` plus what a set of units frees (``free_of`` read once per node)."""

    def __init__(self, chosen: Sequence[PodRecord], pending: Sequence[PodRecord], nodes: list[NodeRecord],
                 free_of: Callable[[NodeRecord], Resources], constraint: TopologyConstraint,
                 levels: Sequence[str], bound_nodes: Sequence[NodeRecord]) -> None:
        self.chosen, self.pending, self.nodes = chosen, pending, nodes
        self.constraint, self.levels, self.bound_nodes = constraint, levels, bound_nodes
        self._free_of = free_of
        self._base: dict[str, Resources] = {}

    def room(self, node: NodeRecord) -> Resources:
        found = self._base.get(node.name)
        if found is None:
            found = self._base[node.name] = dict(self._free_of(node))
        return found

    def place(self, freed: dict[str, Resources]) -> TopologyPlan:
        def free_of(node: NodeRecord) -> Resources:
            room = dict(self.room(node))
            add_into(room, freed.get(node.name, {}))
            return room

        def free_cpu(node: NodeRecord) -> int:
            extra = freed.get(node.name)
            return self.room(node).get(CPU, 0) + (extra.get(CPU, 0) if extra else 0)

        return domains.place_gang(self.chosen, self.pending, self.nodes, free_of, free_cpu, self.constraint,
                                   self.levels, self.bound_nodes)

    def completes(self, freed: dict[str, Resources]) -> bool:
        return self.place(freed).plan.complete


class _Bound:
    """A cheap necessary condition for a complete plan: in some domain the plan may use (one of the
    required key, the pinned one if members are bound; else every node), each shape of the chosen
    members (the same requests and placement) fits on its own, its copies summed over the nodes its
    placement allows. A set of units failing it is never planned."""

    def __init__(self, trial: _Trial) -> None:
        shapes: dict[tuple[object, ...], tuple[Resources, Placement, list[int]]] = {}
        for pod in trial.chosen:
            placement = pod_placement(pod)
            shapes.setdefault((tuple(sorted(pod.requests.items())), placement),
                              (pod.requests, placement, [0]))[2][0] += 1
        self._shapes = [(requests, {n.name: n for n in trial.nodes if placement_failure(placement, n) is None},
                         count[0]) for requests, placement, count in shapes.values()]
        key = trial.constraint.required
        pinned = {n.labels.get(key) for n in trial.bound_nodes} if key else set()
        self._domain: dict[str, str] = {}  # node -> its domain, for the nodes in one the plan may use
        for node in trial.nodes:
            value = node.labels.get(key) if key else ""
            if value is not None and (not pinned or value in pinned):
                self._domain[node.name] = value
        self._room = trial.room
        self._freed: dict[str, Resources] = {}
        self._totals: dict[str, list[int]] = {}  # domain -> copies of each shape

    def _free(self, node: NodeRecord, less: Resources | None = None) -> Resources:
        room = dict(self._room(node))
        add_into(room, self._freed.get(node.name, {}))
        if less:
            add_into(room, less, -1)
        return room

    def _fits(self, totals: dict[str, list[int]]) -> bool:
        return any(all(n >= count for n, (_, _, count) in zip(copied, self._shapes, strict=True))
                   for copied in totals.values())

    def admits(self, freed: dict[str, Resources]) -> bool:
        """Whether the plan might complete with ``freed`` freed; it becomes what ``spares`` asks of."""
        self._freed, self._totals = freed, {}
        for index, (requests, allowed, _) in enumerate(self._shapes):
            for name, node in allowed.items():
                if name in self._domain:
                    copied = self._totals.setdefault(self._domain[name], [0] * len(self._shapes))
                    copied[index] += copies(requests, self._free(node))
        return self._fits(self._totals)

    def spares(self, unit: VictimUnit) -> bool:
        """Whether the plan might complete with what ``admits`` was last asked of, less what ``unit`` frees."""
        totals = {domain: list(copied) for domain, copied in self._totals.items()}
        for name, amount in frees([unit]).items():
            for index, (requests, allowed, _) in enumerate(self._shapes):
                node = allowed.get(name)
                if node is not None and name in self._domain:
                    totals[self._domain[name]][index] += (copies(requests, self._free(node, amount))
                                                          - copies(requests, self._free(node)))
        return self._fits(totals)


def choose_victims(chosen: Sequence[PodRecord], pending: Sequence[PodRecord], nodes: Iterable[NodeRecord],
                   free_of: Callable[[NodeRecord], Resources], constraint: TopologyConstraint,
                   levels: Sequence[str], bound_nodes: Sequence[NodeRecord], units: Sequence[VictimUnit],
                   preemptor_priority: int) -> VictimChoice | str:
    """The fewest, lowest-priority units whose eviction lets ``chosen`` (of ``pending``) be placed, with
    the placement and what they free; or why no set of units does. No victims when it fits already."""
    trial = _Trial(chosen, pending, list(nodes), free_of, constraint, levels, bound_nodes)
    placement = trial.place({})
    if placement.plan.complete:
        return VictimChoice((), placement, {})
    candidates, why_none = _candidates(chosen, trial.nodes, units, preemptor_priority)
    if not candidates:
        return why_none
    everything = trial.place(frees(candidates))
    if not everything.plan.complete:
        pods = sum(len(unit.pods) for unit in candidates)
        return messages.victims_not_enough(len(candidates), pods, len(everything.plan.slots), len(chosen),
                                           everything.plan.blocking)
    bound = _Bound(trial)
    victims = _shortest_prefix(trial, bound, candidates)
    victims = _on_plan_nodes(trial, victims)
    victims = _removal_pass(trial, bound, victims)
    freed = frees(victims)
    return VictimChoice(tuple(victims), trial.place(freed), freed)


def _cost(unit: VictimUnit) -> tuple[int, int, str]:
    """Candidates are taken cheapest first and left out dearest first: by priority, pods, then key."""
    return (unit.priority, len(unit.pods), unit.key)


def _candidates(chosen: Sequence[PodRecord], nodes: Sequence[NodeRecord], units: Sequence[VictimUnit],
                priority: int) -> tuple[list[VictimUnit], str]:
    """The units that may be victims and could help, cheapest first; else why there are none."""
    lower = [u for u in units if u.priority < priority]
    eligible = [u for u in lower if u.evictable]
    placements = {pod_placement(pod) for pod in chosen}
    usable = {n.name for n in nodes if any(placement_failure(p, n) is None for p in placements)}
    helpful = [u for u in eligible if any(pod.node_name in usable and not pod.terminal for pod in u.pods)]
    helpful.sort(key=_cost)
    if helpful:
        return helpful, ""
    parts = []
    if len(lower) < len(units):
        parts.append(messages.units_not_lower(len(units) - len(lower), priority))
    blocked = [u for u in lower if not u.evictable]
    if blocked:
        parts.append(messages.units_not_evictable(len(blocked), blocked[0].key, blocked[0].why_not))
    if eligible:
        parts.append(messages.units_on_unusable_nodes(len(eligible)))
    return [], messages.no_victims(parts)


def _shortest_prefix(trial: _Trial, bound: _Bound, candidates: list[VictimUnit]) -> list[VictimUnit]:
    """The shortest prefix found to complete the plan (the whole list is known to)."""
    short, freed_short = 0, frees(())  # the prefix of ``short`` units does not complete, and what it frees

    def completes(size: int) -> bool:
        nonlocal short, freed_short
        freed = _plus(freed_short, candidates[short:size])
        if bound.admits(freed) and trial.completes(freed):
            return True
        short, freed_short = size, freed
        return False

    size = 1
    while size < len(candidates) and not completes(size):
        size *= 2
    long = min(size, len(candidates))  # completes (checked, or the whole list)
    while long - short > 1:
        middle = (short + long) // 2
        if completes(middle):
            long = middle
    return candidates[:long]


def _on_plan_nodes(trial: _Trial, victims: list[VictimUnit]) -> list[VictimUnit]:
    """``victims`` less those with no pod on a node the plan uses, when the plan still completes."""
    used = set(trial.place(frees(victims)).plan.per_node())
    kept = [u for u in victims if any(pod.node_name in used for pod in u.pods)]
    if len(kept) < len(victims) and trial.completes(frees(kept)):
        return kept
    return victims


def _removal_pass(trial: _Trial, bound: _Bound, victims: list[VictimUnit]) -> list[VictimUnit]:
    """Leave out every unit the plan can do without, dearest first. After a round that left one out,
    the units tried before the last one left out are tried again (first fit's outcome need not grow
    with capacity), so every unit kept was last tried against the final set."""
    kept = sorted(victims, key=_cost, reverse=True)
    freed = frees(kept)
    bound.admits(freed)
    to_try = list(kept)
    while to_try:
        settled: set[int] = set()  # units tried in this round since its last removal
        removed = False
        for unit in to_try:
            less = _plus(freed, [unit], -1) if bound.spares(unit) else None
            if less is not None and trial.completes(less):
                kept, freed, settled, removed = [u for u in kept if u is not unit], less, set(), True
                bound.admits(freed)
            else:
                settled.add(id(unit))
        to_try = [u for u in kept if id(u) not in settled] if removed else []
    order = {id(unit): index for index, unit in enumerate(victims)}
    return sorted(kept, key=lambda u: order[id(u)])

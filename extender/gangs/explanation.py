"""What ``GET /explain`` shows about one gang (pure), and ``gang-extender explain`` prints.

Owns: the gang's state name, member counts and the largest shortfall of a gang that does not fit,
built from values the ledger copies under its lock. Must not: keep state, take locks or read the
clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.cluster.fit import placement_failure
from extender.gangs import growth, planner
from extender.gangs.domains import Domain, DomainReport
from extender.gangs.planner import Plan, _shapes, pick_for_reservation
from extender.model import messages
from extender.model.cluster import NodeRecord, PodRecord
from extender.model.gang import NONE, GangKey, GangPolicy, Parsed, TopologyProblem
from extender.model.quantity import CPU, PODS, Resources, add_into, describe


@dataclass(frozen=True, slots=True)
class Shortfall:
    """What most keeps the rest of a gang from fitting: ``amount`` more of ``resource`` is needed,
    summed over the cluster (``scope == "cluster"``) or on one node (``"node"``: enough in total but
    fragmented). ``resource`` is empty when no node is eligible at all (``reason`` says why)."""

    resource: str
    amount: int
    scope: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource or None, "amount": describe({self.resource: self.amount})
                if self.resource else None, "scope": self.scope, "reason": self.reason}


def largest_shortfall(result: Plan, nodes: Sequence[NodeRecord],
                      free_of: Callable[[NodeRecord], Resources]) -> Shortfall | None:
    """The largest shortfall of the members ``result`` could not place (None when it placed all).

    Resources are compared relative to what the unplaced members request, so a 2-cpu shortfall of a
    4-cpu need outranks a 1 GiB shortfall of a 64 GiB need.
    """
    if result.complete:
        return None
    left = {node.name: dict(free_of(node)) for node in nodes}
    for node_name, requests in result.slots:
        if node_name in left:
            add_into(left[node_name], requests, -1)
    shapes = _shapes(result.unplaced)
    eligible = [n for n in nodes if any(placement_failure(s.placement, n) is None for s in shapes)]
    if not eligible:
        return Shortfall("", 0, "node", messages.NO_NODE_MATCHES_MEMBERS)
    need: Resources = {}
    for pod in result.unplaced:
        add_into(need, pod.requests)
    need.pop(PODS, None)
    free_total: Resources = {}
    for node in eligible:
        add_into(free_total, {k: max(v, 0) for k, v in left[node.name].items()})
    short = {r: amount - free_total.get(r, 0) for r, amount in need.items() if amount > free_total.get(r, 0)}
    if short:
        resource = max(sorted(short), key=lambda r: short[r] / need[r])
        return Shortfall(resource, short[resource], "cluster",
                         messages.members_need(len(result.unplaced), resource, need[resource],
                                               free_total.get(resource, 0)))
    shape = shapes[0]
    fits = [n for n in eligible if placement_failure(shape.placement, n) is None]
    per_node = {r: amount - max(left[n.name].get(r, 0) for n in fits)
                for r, amount in shape.requests.items() if r != PODS}
    per_node = {r: v for r, v in per_node.items() if v > 0}
    if not per_node:
        return Shortfall("", 0, "node", result.blocking or messages.NO_ROOM_AT_ONCE)
    resource = max(sorted(per_node), key=lambda r: per_node[r] / shape.requests[r])
    return Shortfall(resource, per_node[resource], "node", messages.fragmented(resource, shape.requests[resource]))


@dataclass(frozen=True, slots=True)
class GangFacts:
    """What the ledger and the mirror know about one gang, copied under their lock."""

    gang: GangKey
    exists: bool
    policy: GangPolicy | None
    members: tuple[PodRecord, ...]
    placements: Mapping[str, str]      # uid -> node (bound or being bound), for members that have one
    held: frozenset[str]               # uids whose bind is held at the barrier
    reservation: Mapping[str, Resources]
    admitted: bool = False
    timeout_seconds: float = 0.0
    deadline_in: float | None = None   # seconds until the current attempt times out
    backoff_in: float = 0.0            # seconds of back-off left
    timeouts: int = 0
    completed: int = 0
    message: str = ""                  # the last verdict or ledger message
    never_fits: str = ""
    api_version: str = ""
    template: str = ""
    topology: Mapping[str, Any] | None = None  # the constraint, the chosen domain, the best other domains
    order: Mapping[str, Any] | None = None  # its place in the admission order (``queue.order_view``)
    draining: tuple[tuple[PodRecord, ...], tuple[NodeRecord, ...]] = ((), ())  # members, nodes (``drain_to_place``)
    constraint: Parsed = NONE          # its effective topology constraint (``GangPlacement.constraint_of``)
    levels: tuple[str, ...] = ()       # the topology levels its constraint falls back through


def _state(facts: GangFacts, placed: int, holding: bool) -> str:
    """The gang's state name: the first that applies, from the group missing to waiting for capacity."""
    policy = facts.policy
    if not facts.exists:
        return "GroupMissing"
    if policy is None:
        return "NotAGang"
    if placed >= policy.min_count:
        return "Complete"
    if facts.never_fits:
        return "NeverFits"
    if facts.backoff_in > 0 and not facts.admitted:
        return "BackingOff"
    if holding:
        return "Holding"
    if facts.admitted:
        return "Admitted"
    if len(facts.members) < policy.min_count:
        return "WaitingForMembers"
    if facts.order and facts.order.get("draining"):
        return "Draining"
    if facts.order and (facts.order.get("preemption") or {}).get("victims"):
        return "Preempting"
    return "WaitingForCapacity"


def _order(facts: GangFacts, free_of: Callable[[NodeRecord], Resources]) -> Mapping[str, Any] | None:
    """The gang's place in the order, with how many of its members fit in its draining reservation now."""
    order = facts.order
    if not order or not order.get("draining"):
        return order
    members, nodes = facts.draining
    fits = planner.plan(members, nodes, free_of, lambda node: free_of(node).get(CPU, 0))
    drain = order["draining"]
    return {**order, "draining": {"nodes": drain["nodes"], "members": drain["members"], "free": len(fits.slots),
                                  "sinceSeconds": drain["sinceSeconds"]}}


def explain(facts: GangFacts, nodes: Sequence[NodeRecord],
            free_of: Callable[[NodeRecord], Resources]) -> dict[str, Any]:
    """The JSON-ready explanation of one gang (``GET /explain``, ``gang-extender explain``): pure, so the
    ledger runs it after releasing the lock, with ``free_of`` reading a copy (``ClusterMirror.capacity``)."""
    policy = facts.policy
    min_count = policy.min_count if policy else None
    bound = [p for p in facts.members if p.bound]
    held = [p for p in facts.members if p.uid in facts.held]
    binding = [p for p in facts.members if not p.bound and p.uid not in facts.held and p.uid in facts.placements]
    pending = [p for p in facts.members if not p.bound and p.uid not in facts.held and p.uid not in facts.placements]
    placed = len(bound) + len(binding)
    shortfall: Shortfall | None = None
    state = _state(facts, placed, bool(held))
    if policy is not None and state not in ("Complete", "GroupMissing", "NotAGang"):
        needed = max(policy.min_count - placed - len(held), 0)
        chosen = pick_for_reservation(pending, needed)
        if chosen:
            shortfall = largest_shortfall(planner.plan(chosen, nodes, free_of), nodes, free_of)
    waiting = "" if state == "Complete" else (facts.never_fits or facts.message)
    order = _order(facts, free_of)
    fix = _fix(facts, state, order, pending, placed_on=[facts.placements[p.uid] for p in bound + binding],
               nodes=nodes, free_of=free_of) if policy is not None else None
    return {
        "gang": str(facts.gang),
        "kind": facts.gang.group.kind.value,
        "apiVersion": facts.api_version or None,
        "namespace": facts.gang.group.namespace,
        "name": facts.gang.group.name,
        "podGroup": facts.gang.group.pod_group or None,
        "replica": facts.gang.replica or None,
        "template": facts.template or None,
        "exists": facts.exists,
        "state": state,
        "minCount": min_count,
        "members": {"existing": len(facts.members), "bound": len(bound), "binding": len(binding),
                    "held": len(held), "pending": len(pending)},
        "admitted": facts.admitted,
        "reservation": {node: describe(amount) for node, amount in sorted(facts.reservation.items())},
        "timeoutSeconds": facts.timeout_seconds or None,
        "timeoutRemainingSeconds": None if facts.deadline_in is None else round(max(facts.deadline_in, 0.0), 1),
        "backoffRemainingSeconds": round(max(facts.backoff_in, 0.0), 1),
        "timeouts": facts.timeouts,
        "completed": facts.completed,
        "waiting": waiting or None,
        "shortfall": shortfall.to_json() if shortfall else None,
        "heldPods": sorted(p.name for p in held),
        "pendingPods": sorted(p.name for p in pending)[:50],
        **({"topology": dict(facts.topology)} if facts.topology else {}),  # only for a gang with a constraint
        **({"order": dict(order)} if order else {}),  # only for a complete gang waiting its turn
        **({"fix": fix} if fix else {}),  # only for a gang that waits on something a change could unblock
    }


FIX_STATES = ("WaitingForCapacity", "Draining", "Preempting")
"""The states in which ``explain`` looks for the smallest fix (a never-fitting gang's fix is its reason)."""


def _fix(facts: GangFacts, state: str, order: Mapping[str, Any] | None, pending: Sequence[PodRecord], *,
         placed_on: Sequence[str], nodes: Sequence[NodeRecord],
         free_of: Callable[[NodeRecord], Resources]) -> dict[str, Any] | None:
    """What would unblock a waiting gang, for people and autoscalers: the gangs it waits behind
    (``waitFor``), the victims of its preemption (``preempt``), or the fewest nodes of a shape the cluster
    has to add, and in which domain (``addNodes``); ``never`` with its reason (and, when nodes of a shape
    the cluster has would change that, how many: ``addNodes``). None: nothing to fix (it is placed,
    placing or missing members) or nothing found."""
    if state not in (*FIX_STATES, "NeverFits") or facts.policy is None:
        return None
    ahead = (order or {}).get("ahead") or []
    if state == "NeverFits":  # never as the cluster is; nodes of a shape it has may change that
        found = _growth(facts, pending, placed_on, nodes, free_of)
        return {"kind": "never", "reason": facts.never_fits, **({"addNodes": found.to_json()} if found else {})}
    if ahead:
        return {"kind": "waitFor", "gangs": [a.get("gang") for a in ahead], "position": (order or {}).get("position")}
    preemption = (order or {}).get("preemption") or {}
    if preemption.get("victims"):
        return {"kind": "preempt", "victims": list(preemption["victims"]), "pods": preemption.get("pods")}
    found = _growth(facts, pending, placed_on, nodes, free_of)
    return {"kind": "addNodes", **found.to_json()} if found is not None else None


def _growth(facts: GangFacts, pending: Sequence[PodRecord], placed_on: Sequence[str], nodes: Sequence[NodeRecord],
            free_of: Callable[[NodeRecord], Resources]) -> growth.Growth | None:
    """The fewest nodes of a shape the cluster has after which the rest of the gang fits now."""
    constraint = facts.constraint
    if isinstance(constraint, TopologyProblem) or facts.policy is None:
        return None
    needed = max(facts.policy.min_count - len(placed_on) - len(facts.held), 0)
    chosen = pick_for_reservation(list(pending), needed)
    by_name = {node.name: node for node in nodes}
    bound_nodes = [by_name[name] for name in placed_on if name in by_name]
    return growth.smallest_growth(chosen, pending, nodes, free_of, lambda node: free_of(node).get(CPU, 0),
                                  constraint, facts.levels, bound_nodes)


def topology_view(constraint: Parsed, domain: Domain | None,
                  others: Sequence[DomainReport]) -> dict[str, Any] | None:
    """What ``explain`` shows of a gang's topology constraint: the constraint and where it was written,
    the domain it keeps to, and the best other domains with what they lack (None: no constraint)."""
    if isinstance(constraint, TopologyProblem):
        return {"constraint": None, "problem": constraint.message}
    if constraint.empty:
        return None
    return {"constraint": constraint.describe(), "domain": str(domain) if domain else None,
            "level": domain.level if domain and domain.keys else None,
            "otherDomains": [{"domain": str(r.domain), "nodes": r.nodes, "freeCpu": describe({CPU: r.free_cpu}),
                              "lacks": r.lacks or None} for r in others]}


# ---------------------------------------------------------------------- published form
PUBLISHED_LIST_MAX = 8
"""Longest list (nodes of a reservation, pods, gangs ahead, other domains) kept in the published form."""
PUBLISHED_TEXT_MAX = 400

_RELATIVE = (("timeoutRemainingSeconds", "deadlineAt", 1), ("backoffRemainingSeconds", "backoffUntil", 1))
"""Top-level (seconds from now, absolute field, sign): time left becomes a wall-clock time."""


def _trimmed(value: Any) -> Any:
    """``value`` without empty fields, lists cut to ``PUBLISHED_LIST_MAX``, texts to ``PUBLISHED_TEXT_MAX``."""
    if isinstance(value, dict):
        return {k: t for k, v in value.items() if (t := _trimmed(v)) not in (None, "", [], {})}
    if isinstance(value, list):
        return [_trimmed(v) for v in value[:PUBLISHED_LIST_MAX]]
    if isinstance(value, str):
        return value[:PUBLISHED_TEXT_MAX]
    return value


def _since(view: Mapping[str, Any] | None, key: str, now: float) -> dict[str, Any] | None:
    """``view`` with its seconds-ago field ``key`` turned into an absolute ``since`` time."""
    if not view:
        return None
    out = {k: v for k, v in view.items() if k != key}
    if isinstance(view.get(key), int | float):
        out["since"] = round(now - view[key], 1)
    return out


OTHER_NAMESPACE = messages.OTHER_NAMESPACE
"""What a published form says in place of a gang or pod of another namespace (its readers may see only theirs)."""


def _ours(name: object, namespace: str) -> bool:
    """Whether a gang or victim unit (``ns/name``, ``gang ns/name``, ``pod ns/name[ of gang ...]``) is of
    ``namespace`` (given as ``ns/``)."""
    text = str(name)
    for kind in ("gang ", "pod "):
        if text.startswith(kind):
            text = text[len(kind):]
            break
    return text.startswith(namespace)


def compact(answer: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The published form of one ``explain`` answer (what ``kubectl gang explain`` reads from the API
    server): lists and texts cut short, empty fields dropped, every "seconds left / ago" turned into a
    wall-clock time (``now``, seconds since the epoch), so an unchanged gang publishes the same fields, and
    the gangs ahead and victims of other namespaces named only as such (the Event sits in the gang's)."""
    out = {k: v for k, v in answer.items() if k not in ("order", "topology", *(r for r, _, _ in _RELATIVE))}
    for relative, absolute, sign in _RELATIVE:
        seconds = answer.get(relative)
        if isinstance(seconds, int | float) and (seconds > 0 or relative == "timeoutRemainingSeconds"):
            out[absolute] = round(now + sign * seconds, 1)
    reservation = answer.get("reservation") or {}
    out["reservation"] = dict(list(reservation.items())[:PUBLISHED_LIST_MAX])
    if len(reservation) > PUBLISHED_LIST_MAX:
        out["reservationNodes"] = len(reservation)
    topology = answer.get("topology")
    if topology:
        out["topology"] = topology
    order = answer.get("order")
    if order:
        view = _since(order, "waitingSeconds", now) or {}
        mine = f"{answer.get('namespace')}/"
        view["ahead"] = [_since(a if str(a.get("gang", "")).startswith(mine) else {**a, "gang": OTHER_NAMESPACE},
                                "waitingSeconds", now) for a in order.get("ahead") or []]
        for part in ("draining", "preemption"):
            if order.get(part):
                view[part] = _since(order[part], "sinceSeconds", now)
        victims = (view.get("preemption") or {}).get("victims")
        if victims:
            view["preemption"]["victims"] = [v if _ours(v, mine) else OTHER_NAMESPACE for v in victims]
        out["order"] = view
    fix = answer.get("fix")
    if fix and fix.get("kind") in ("waitFor", "preempt"):
        field = "gangs" if fix["kind"] == "waitFor" else "victims"
        mine = f"{answer.get('namespace')}/"
        out["fix"] = {**fix, field: [v if _ours(v, mine) else OTHER_NAMESPACE for v in fix.get(field) or []]}
    return {**_trimmed(out), "publishedAt": round(now, 1)}


def steady(published: Mapping[str, Any]) -> dict[str, Any]:
    """What of a published form is worth a new write: everything but the clock times (a moving deadline
    is written with the next real change) and the place in the order (it moves whenever any gang joins or
    leaves the queue: written with the next real change, or the periodic refresh)."""
    clock = {"publishedAt", "deadlineAt", "backoffUntil", "since", "position", "of", "ahead"}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in clock}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    result: dict[str, Any] = strip(published)
    return result


def _ago(view: Mapping[str, Any] | None, key: str, now: float) -> dict[str, Any] | None:
    if not view:
        return None
    out = {k: v for k, v in view.items() if k != "since"}
    if isinstance(view.get("since"), int | float):
        out[key] = round(max(now - view["since"], 0.0), 1)
    return out


def expand(published: Mapping[str, Any], now: float) -> dict[str, Any]:
    """A published form back in the shape of an ``explain`` answer as of ``now`` (what
    ``extender.explain.render`` prints): wall-clock times become seconds left / ago again."""
    out = {k: v for k, v in published.items() if k not in ("deadlineAt", "backoffUntil", "publishedAt", "order")}
    for relative, absolute, _ in _RELATIVE:
        at = published.get(absolute)
        out[relative] = round(max(at - now, 0.0), 1) if isinstance(at, int | float) else None
    out["backoffRemainingSeconds"] = out["backoffRemainingSeconds"] or 0.0
    order = published.get("order")
    if order:
        view = _ago(order, "waitingSeconds", now) or {}
        view["ahead"] = [_ago(a, "waitingSeconds", now) for a in order.get("ahead") or []]
        for part in ("draining", "preemption"):
            if order.get(part):
                view[part] = _ago(order[part], "sinceSeconds", now)
        out["order"] = view
    return out


def summary(answer: Mapping[str, Any]) -> str:
    """One line for the ``GangState`` Event's message (``kubectl describe``, ``kubectl get events``)."""
    members = answer.get("members") or {}
    shortfall = answer.get("shortfall") or {}
    why = answer.get("waiting") or shortfall.get("reason") or ""
    return messages.state_summary(answer.get("gang"), answer.get("state"), members.get("existing", 0),
                                  members.get("bound", 0), members.get("held", 0), answer.get("minCount"), why)

"""The values the verbs take and return (pure).

Owns: a filter or prioritize request as the engine sees it (the pod as raw camelCase JSON, the
candidate node names, checked lazily: the hot path proves every name valid by finding it among known
nodes, every other path calls ``cluster.verdicts.check_node_names`` first), the filter verdicts it
answers, a bind request. Must not: know the wire format (``http/protocol`` parses
request bodies into these values and renders replies from them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from extender.cluster.facts import PodFacts
from extender.errors import ObjectError, ProtocolError
from extender.model.cluster import PodRecord


@dataclass(frozen=True, slots=True)
class FilterArgs:
    """ExtenderArgs: the pod and the candidate nodes (names, plus full objects when not cache-capable).

    ``node_names`` is a list, but its elements from a ``NodeNames`` request are checked lazily: the
    hot path proves them valid by finding all of them in a set of known node names, and everything
    else calls ``cluster.verdicts.check_node_names`` first, so an invalid name is a ProtocolError either
    way.
    """

    pod: dict[str, Any]
    node_names: list[str]
    nodes: list[dict[str, Any]] | None  # full Node objects, only when the request carried ``Nodes``
    names_text: bytes | None = None  # the NodeNames array as sent, when it alone decides the list (http.protocol)


@dataclass(frozen=True, slots=True)
class BindArgs:
    """ExtenderBindingArgs."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


@dataclass(slots=True)
class FilterResult:
    """ExtenderFilterResult, built from the request's nodes only."""

    feasible: list[str]
    failed: dict[str, str]
    failed_unresolvable: dict[str, str]
    error: str = ""


@dataclass(frozen=True, slots=True)
class Victims:
    """MetaVictims: the UIDs of the pods kube-scheduler would evict on one node, and how many of those
    evictions violate a PodDisruptionBudget (passed back unchanged)."""

    uids: tuple[str, ...]
    pdb_violations: int


@dataclass(frozen=True, slots=True)
class PreemptArgs:
    """ExtenderPreemptionArgs: the preemptor and kube-scheduler's candidate nodes with their victims
    (the full-Pod ``NodeNameToVictims`` form is reduced to the same UIDs)."""

    pod: dict[str, Any]
    victims: dict[str, Victims]


@dataclass(slots=True)
class PreemptResult:
    """The candidates kept (a subset of the request's, victims unchanged) and why each other one was
    dropped (node name -> reason; for logs and tests, not on the wire)."""

    kept: dict[str, Victims]
    dropped: dict[str, str]


def request_record(facts: PodFacts) -> PodRecord:
    """The record of a request's pod (its gang link already read); a pod too malformed to read is a bad
    request (HTTP 400), not a cluster object to skip."""
    try:
        return facts.record
    except ObjectError as exc:
        raise ProtocolError(f"Pod: {exc}") from None

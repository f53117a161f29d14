"""The cluster's objects as the extender keeps them: compact node and pod records (pure values).

Owns: ``NodeRecord`` and ``PodRecord`` (what scheduling needs of a Node and a Pod), a pod's placement
constraints (``Placement``, ``Requirement``, ``Toleration``) and a node's ``Taint``. Must not: parse
Kubernetes JSON (``cluster.records`` does), hold mutable state, or import anything but the stdlib and
this package.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from extender.model.gang import NONE, GangKey, GangPolicy, Parsed
from extender.model.quantity import Resources

QUORUM_GATE = "gang-extender.io/quorum"
"""The scheduling gate the quorum-gate MutatingAdmissionPolicy sets on the pods of gang-extender's scheduler at
creation (docs/deploy.md "The quorum gate"): kube-scheduler does not try a gated pod, so a gang member that
comes before its quorum costs no attempt and no back-off; gang-extender removes the gate once the pod's gang
has its quorum (and at once from a pod of no gang)."""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What scheduling needs of a Node (compact: the mirror holds thousands)."""

    name: str
    allocatable: Resources
    labels: dict[str, str]
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]
    field: bool = False  # matchFields (metadata.name) rather than labels
    # ``values`` as a set: In/NotIn against thousands of values on thousands of nodes stays linear
    members: frozenset[str] = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", frozenset(self.values))


@dataclass(frozen=True, slots=True)
class Placement:
    """The placement constraints of one pod: everything but resources."""

    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[tuple[Requirement, ...], ...] = ()  # OR of ANDs; empty: no affinity
    tolerations: tuple[Toleration, ...] = ()

    @property
    def unconstrained(self) -> bool:
        return not self.node_selector and not self.affinity_terms


NO_PLACEMENT = Placement()


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What scheduling needs of a Pod (compact: the mirror holds up to 150,000)."""

    uid: str
    namespace: str
    name: str
    node_name: str            # "" while unbound
    requests: Resources       # effective requests incl. init containers and overhead, plus pods=1
    gang: GangKey | None      # None: not a gang member
    link_policy: GangPolicy | None = None  # policy carried by the pod itself (annotation form)
    terminal: bool = False    # Succeeded/Failed or being deleted: holds no capacity, not a member
    scheduler_name: str = "default-scheduler"
    spec: dict[str, object] | None = None  # placement fields: kept for gang members and unbound pods
    needs_preparation: bool = False  # PVC or ephemeral volumes, or resource claims: kube-scheduler prepares them
    topology: Parsed = NONE  # a gang member's own topology constraint (annotations)
    priority: int = 0  # spec.priority (the API server resolves priorityClassName into it)
    preempt_never: bool = False  # spec.preemptionPolicy: Never
    # metadata.labels as sorted (key, value) pairs, kept for bound pods only (a victim's
    # PodDisruptionBudgets select it by them); () for pending pods, to keep the mirror small
    labels: tuple[tuple[str, str], ...] = ()
    unschedulable: bool = False  # unbound and marked by kube-scheduler: it tried the pod and found no node
    quorum_gate: int = -1  # unbound: the index of QUORUM_GATE in spec.schedulingGates; -1: not gated by it
    # ``spec`` read once into the constraints the predicates evaluate (None: not read; see records.pod_placement)
    placement: Placement | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def quorum_gated(self) -> bool:
        return self.quorum_gate >= 0

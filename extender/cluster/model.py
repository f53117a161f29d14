"""Value types shared by every layer (pure).

Owns: the frozen records the rest of the extender passes around: group keys and gang policies,
compact node and pod records, a pod's placement constraints, and the verdict codes of the gang
rules. Must not: parse Kubernetes JSON (that is ``groups``/``records``), hold mutable state, or
import anything outside the stdlib.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from extender.cluster.quantity import Resources


class GroupKind(enum.StrEnum):
    """Where a gang's definition comes from (a str enum: group keys order by kind first)."""

    WORKLOAD = "Workload"              # scheduling.k8s.io/v1alpha1 Workload + pod spec.workloadRef (1.35)
    PODGROUP = "PodGroup"              # scheduling.k8s.io/v1alpha2|v1alpha3|v1beta1 PodGroup (1.36+)
    #                                    + pod spec.schedulingGroup.podGroupName
    COSCHEDULING = "PodGroup.x-k8s.io"  # scheduler-plugins PodGroup CRD + pod label
    ANNOTATION = "annotation"          # gang-extender.io/* pod annotations only


@dataclass(frozen=True, slots=True, order=True)
class GroupRef:
    """A group definition object: one Workload pod group, one PodGroup, one PodGroup CR, one annotation
    group. The kind is part of the identity: a 1.36+ PodGroup and a scheduler-plugins PodGroup of the
    same name in the same namespace are two different gangs."""

    kind: GroupKind
    namespace: str
    name: str
    pod_group: str = ""

    def __str__(self) -> str:
        base = f"{self.namespace}/{self.name}"
        return f"{base}/{self.pod_group}" if self.pod_group else base


@dataclass(frozen=True, slots=True, order=True)
class GangKey:
    """One independent gang: a group definition plus the pod's replica key (Workload API only)."""

    group: GroupRef
    replica: str = ""

    def __str__(self) -> str:
        return f"{self.group}[{self.replica}]" if self.replica else str(self.group)


class Source(enum.StrEnum):
    """Where a constraint's key was written (what ``explain`` shows)."""

    PODGROUP_FIELD = "PodGroup spec.schedulingConstraints.topology"
    KUEUE_ANNOTATION = "Kueue annotation on the pods"
    GROUP_ANNOTATION = "gang-extender annotation on the group object"
    POD_ANNOTATION = "gang-extender annotation on the pods"


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    """A gang's topology constraint: label keys ("" for none) and where each came from."""

    required: str = ""
    preferred: str = ""
    required_source: Source | None = None
    preferred_source: Source | None = None

    @property
    def empty(self) -> bool:
        return not self.required and not self.preferred

    def describe(self) -> str:
        """E.g. ``required example.com/rack (gang-extender annotation on the pods)``; ``none``."""
        parts = [f"{mode} {key} ({source})" for mode, key, source in (
            ("required", self.required, self.required_source), ("preferred", self.preferred, self.preferred_source))
            if key]
        return ", ".join(parts) or "none"


@dataclass(frozen=True, slots=True)
class TopologyProblem:
    """Why a gang's topology constraint cannot be used; the gang waits and users are told this."""

    message: str


Parsed = TopologyConstraint | TopologyProblem


NONE = TopologyConstraint()


@dataclass(frozen=True, slots=True)
class GangOrder:
    """What a group object says about its gang's place in the admission order and about preemption."""

    priority: int | None = None  # the 1.37 PodGroup's spec.priority (None: the members' pod priority)
    priority_class: str = ""  # its spec.priorityClassName (told when it did not resolve to a priority)
    max_wait_seconds: float | None = None  # gang-extender.io/max-wait-seconds (None: --max-wait-seconds)
    disruption_all: bool = True  # evicted whole (disruptionMode all, and every gang by default) or pod by pod
    preempt_never: bool = False  # the group's preemptionPolicy: Never
    problem: str = ""  # malformed settings, told in an Event and explain (the defaults apply instead)


@dataclass(frozen=True, slots=True)
class GangPolicy:
    """All-or-nothing policy of a group: ``min_count`` members bind together or none does."""

    min_count: int
    timeout_seconds: float | None = None  # per-gang override of the barrier timeout
    topology: Parsed = NONE  # the group object's topology constraint (its members may add theirs)
    order: GangOrder | None = None  # priority, maximum wait, disruption and preemption settings (None: defaults)


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
    # ``spec`` read once into the constraints the predicates evaluate (None: not read; see records.pod_placement)
    placement: Placement | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def bound(self) -> bool:
        return bool(self.node_name)


class GangPhase(enum.Enum):
    """What users are told about a gang in its group object's status."""

    WAITING = "Waiting"        # quorum not met, no capacity, backing off, never fits, timed out
    SCHEDULING = "Scheduling"  # admitted: capacity reserved, members being placed and held
    SCHEDULED = "Scheduled"    # quorum reached: minCount members bound together


@dataclass(frozen=True, slots=True)
class GangStatus:
    """A gang's phase and the message explaining it (the input of status writes; equal values are
    written once)."""

    phase: GangPhase
    message: str = ""
    bound: int = 0     # members bound (or being bound) when the status was taken
    min_count: int = 0


class Code(enum.Enum):
    """Outcome codes of gang rules; each maps to one wire placement of a node."""

    PASS = "pass"                      # no gang constraint applies / gang admitted
    WAIT_UNRESOLVABLE = "unresolvable"  # FailedAndUnresolvableNodes: preemption cannot help
    WAIT_RESOLVABLE = "resolvable"      # FailedNodes: may change with cluster events


@dataclass(frozen=True, slots=True)
class Verdict:
    """The decision of a gang rule for one pod, with the exact message users will see."""

    code: Code
    message: str = ""

    @property
    def passes(self) -> bool:
        return self.code is Code.PASS


PASS = Verdict(Code.PASS)

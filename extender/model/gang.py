"""The gang vocabulary: what every layer says about gangs (pure values).

Owns: group keys (``GroupKind``, ``GroupRef``, ``GangKey``) and the gang policy a group object defines
(``GangPolicy``, ``GangOrder``, a topology constraint or its problem), what users are told of a gang's
phase (``GangPhase``, ``GangStatus``) and the verdicts of gang rules (``Code``, ``Verdict``). Must not:
parse Kubernetes JSON (``cluster.groups`` and ``cluster.topology_keys`` do), hold mutable state, or import
anything but the stdlib.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


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
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.kind.value, self.namespace, self.name, self.pod_group)))

    def __hash__(self) -> int:
        """Computed once: group and gang keys are looked up in dicts on every request."""
        return self._hash

    def __reduce__(self) -> tuple[type[GroupRef], tuple[GroupKind, str, str, str]]:
        """Pickled as its fields: another process hashes strings differently."""
        return GroupRef, (self.kind, self.namespace, self.name, self.pod_group)

    def __str__(self) -> str:
        base = f"{self.namespace}/{self.name}"
        return f"{base}/{self.pod_group}" if self.pod_group else base


@dataclass(frozen=True, slots=True, order=True)
class GangKey:
    """One independent gang: a group definition plus the pod's replica key (Workload API only)."""

    group: GroupRef
    replica: str = ""
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.group, self.replica)))

    def __hash__(self) -> int:
        """Computed once, as ``GroupRef``'s."""
        return self._hash

    def __reduce__(self) -> tuple[type[GangKey], tuple[GroupRef, str]]:
        return GangKey, (self.group, self.replica)

    def __str__(self) -> str:
        return f"{self.group}[{self.replica}]" if self.replica else str(self.group)

    def to_json(self) -> dict[str, str]:
        """The key as a JSON object (what a release written down names its gang by)."""
        group = self.group
        return {"kind": group.kind.value, "namespace": group.namespace, "name": group.name,
                "podGroup": group.pod_group, "replica": self.replica}

    @staticmethod
    def from_json(value: object) -> GangKey:
        """The key ``to_json`` wrote; ValueError for anything else."""
        if not isinstance(value, dict):
            raise ValueError(f"a gang key is a JSON object, not {type(value).__name__}")
        try:
            fields = {name: value[name] for name in ("kind", "namespace", "name", "podGroup", "replica")}
        except KeyError as exc:
            raise ValueError(f"a gang key has no {exc.args[0]!r}") from None
        if not all(isinstance(v, str) for v in fields.values()):
            raise ValueError("a gang key's fields are strings")
        return GangKey(GroupRef(GroupKind(fields["kind"]), fields["namespace"], fields["name"], fields["podGroup"]),
                       fields["replica"])


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

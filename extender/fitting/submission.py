"""Submission: what a user would submit, read as one gang's group object and pods (pure).

Owns: turning the objects of a file (a YAML or JSON document, several, or a ``List``) into the group
objects and the pods they would make, without creating anything. Read kinds:

- group objects: a 1.35 ``Workload``, a 1.36+ ``scheduling.k8s.io`` ``PodGroup``, a scheduler-plugins
  ``PodGroup`` (``scheduling.x-k8s.io``);
- ``Pod`` (as many as given; with ``count``, that many copies of the one pod) and ``PodTemplate``
  (``count`` copies, default the ``gang-extender.io/min-count`` annotation), linked to their gang as the
  extender reads any pod;
- ``batch/v1`` ``Job``: ``parallelism`` pods (no more than ``completions``) of its template;
- ``jobset.x-k8s.io`` ``JobSet``: per replicated Job, ``replicas`` times its Job's pods;
- ``kubeflow.org/v1`` ``PyTorchJob``: the replicas of every replica type; a template that names no gang
  gets what the Kubeflow training operator makes with scheduler-plugins gang scheduling: a PodGroup named
  after the job with ``minMember`` the job's ``runPolicy.schedulingPolicy.minAvailable`` or every replica,
  and the pod-group label on its pods.

The pods have the namespace the object (or the caller's default) gives, made-up uids, no node, and the
condition kube-scheduler writes on a pod it tried and could not place (so the order counts them as
tried). Must not: read the cluster, decide anything about fitting, or accept pods of more than one gang
(``SubmissionError`` says which).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.cluster.groups import ANNOTATION_MIN_COUNT, COSCHEDULING_LABEL, OBJECT_KINDS, pod_link
from extender.errors import GroupError, SubmissionError
from extender.model.gang import GangKey, GroupKind

MAX_PODS = 100_000
"""The most pods one question may make (a typo in a count must not exhaust memory)."""

DEFAULT_SCHEDULER = "default-scheduler"
UID_PREFIX = "fit-"
"""The made-up uids of a submission's pods: ``fit-<n>`` (no real pod's uid looks like this)."""


@dataclass
class Submission:
    """One gang as it would be submitted: its group objects (kind, object), its pods, and notes on how
    they were read (a default taken, a group object made up as a controller would)."""

    groups: list[tuple[GroupKind, dict[str, Any]]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gang: GangKey | None = None
    scheduler_name: str = DEFAULT_SCHEDULER


def read(objects: Iterable[Mapping[str, Any]], namespace: str = "default", count: int | None = None) -> Submission:
    """The gang ``objects`` would make (``namespace``: where objects without one go; ``count``: copies of a
    lone pod or template)."""
    items = list(_flatten(objects))
    if not items:
        raise SubmissionError("the file holds no object")
    out = Submission()
    made = 0
    for obj in items:
        kind, api = str(obj.get("kind") or ""), str(obj.get("apiVersion") or "")
        ns = str(_dict(obj.get("metadata")).get("namespace") or namespace)
        group_kind = OBJECT_KINDS.get((api, kind))
        if group_kind is not None:
            group = copy.deepcopy(dict(obj))
            meta = group.setdefault("metadata", {})
            meta.setdefault("namespace", ns)
            meta.setdefault("uid", f"{UID_PREFIX}group-{len(out.groups)}")
            out.groups.append((group_kind, group))
            continue
        templates = _templates(obj, kind, api, ns, count, out)
        for name, template, copies in templates:
            made += copies
            if made > MAX_PODS:
                raise SubmissionError(f"the file would make more than {MAX_PODS} pods")
            names = [name] if copies == 1 else [f"{name}-{i}" for i in range(copies)]
            out.pods.extend(_pod(template, ns, pod_name, len(out.pods) + i) for i, pod_name in enumerate(names))
    if not out.pods:
        raise SubmissionError("the file makes no pod: give the pods, a pod template with a count, or a Job, "
                              "JobSet or PyTorchJob")
    _one_gang(out)
    return out


def set_priorities(out: Submission, classes: Iterable[Mapping[str, Any]]) -> None:
    """Give each pod the priority the API server's Priority admission would: its ``priorityClassName``'s
    value, else the global default class's, else 0 (a pod that has ``priority`` keeps it). An unknown class
    is refused, as the API server refuses the pod."""
    values: dict[str, int] = {}
    default = 0
    for obj in classes:
        name = str(_dict(obj.get("metadata")).get("name") or "")
        value = obj.get("value")
        if name and isinstance(value, int) and not isinstance(value, bool):
            values[name] = value
            if obj.get("globalDefault") is True:
                default = value
    for pod in out.pods:
        spec = pod["spec"]
        if isinstance(spec.get("priority"), int):
            continue
        name = spec.get("priorityClassName")
        if name and name not in values:
            raise SubmissionError(f"pod {pod['metadata']['name']}: no PriorityClass {name!r} (the API server would "
                                  "refuse the pod)")
        spec["priority"] = values[name] if name else default


def require_priorities(out: Submission) -> None:
    """Where no PriorityClasses are read (the extender's ``/fit``): every pod that names a class must also
    give ``spec.priority``, the value the API server would set."""
    for pod in out.pods:
        spec = pod["spec"]
        if spec.get("priorityClassName") and not isinstance(spec.get("priority"), int):
            raise SubmissionError(f"pod {pod['metadata']['name']}: give spec.priority with priorityClassName "
                                  f"{spec['priorityClassName']!r} (the value the API server would set; the "
                                  "extender does not read PriorityClasses: kubectl gang fit does)")


def _flatten(objects: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for obj in objects:
        if not isinstance(obj, Mapping):
            raise SubmissionError(f"every document must be an object, not {type(obj).__name__}")
        if str(obj.get("kind") or "").endswith("List") and isinstance(obj.get("items"), list):
            yield from _flatten(obj["items"])
        else:
            yield obj


Template = tuple[str, Mapping[str, Any], int]  # (pod name prefix, pod template {metadata, spec}, copies)


def _templates(obj: Mapping[str, Any], kind: str, api: str, namespace: str, count: int | None,
               out: Submission) -> list[Template]:
    name = str(_dict(obj.get("metadata")).get("name") or kind.lower() or "pod")
    if (api, kind) == ("v1", "Pod"):
        return [(name, obj, count or 1)]
    if (api, kind) == ("v1", "PodTemplate"):
        template = _dict(obj.get("template"))
        annotations = _dict(_dict(template.get("metadata")).get("annotations"))
        copies = count or _int(annotations.get(ANNOTATION_MIN_COUNT), f"PodTemplate {name}: {ANNOTATION_MIN_COUNT}")
        if not copies:
            raise SubmissionError(f"PodTemplate {name}: give a count (or the {ANNOTATION_MIN_COUNT} annotation)")
        return [(name, template, copies)]
    if api == "batch/v1" and kind == "Job":
        return [(name, *_job(_dict(obj.get("spec")), f"Job {name}"))]
    if api.startswith("jobset.x-k8s.io/") and kind == "JobSet":
        return _jobset(obj, name)
    if api == "kubeflow.org/v1" and kind == "PyTorchJob":
        return _pytorchjob(obj, name, namespace, out)
    raise SubmissionError(f"{kind or '(no kind)'} {api or '(no apiVersion)'} {name}: not a kind fit reads (group "
                          "objects, Pod, PodTemplate, Job, JobSet, PyTorchJob)")


def _job(spec: Mapping[str, Any], what: str) -> tuple[Mapping[str, Any], int]:
    parallelism = _int(spec.get("parallelism", 1), f"{what}: parallelism")
    completions = spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, _int(completions, f"{what}: completions"))
    return _dict(spec.get("template")), parallelism


def _jobset(obj: Mapping[str, Any], name: str) -> list[Template]:
    out: list[Template] = []
    for raw in _list(_dict(obj.get("spec")).get("replicatedJobs")):
        job = _dict(raw)
        job_name = str(job.get("name") or "job")
        replicas = _int(job.get("replicas", 1), f"JobSet {name}: replicatedJobs[{job_name}].replicas")
        if len(out) + replicas > MAX_PODS:  # checked before the list is built, however few pods each makes
            raise SubmissionError(f"JobSet {name}: more than {MAX_PODS} Jobs")
        template, pods = _job(_dict(_dict(job.get("template")).get("spec")), f"JobSet {name} job {job_name}")
        out.extend((f"{name}-{job_name}-{r}", template, pods) for r in range(replicas))
    return out


def _pytorchjob(obj: Mapping[str, Any], name: str, namespace: str, out: Submission) -> list[Template]:
    spec = _dict(obj.get("spec"))
    templates: list[Template] = []
    for role, raw in sorted(_dict(spec.get("pytorchReplicaSpecs")).items()):
        replica_spec = _dict(raw)
        replicas = _int(replica_spec.get("replicas", 1), f"PyTorchJob {name}: {role}.replicas")
        if replicas > MAX_PODS:
            raise SubmissionError(f"PyTorchJob {name}: {role}: more than {MAX_PODS} replicas")
        templates.append((f"{name}-{str(role).lower()}", _dict(replica_spec.get("template")), replicas))
    total = sum(t[2] for t in templates)
    if not total:
        raise SubmissionError(f"PyTorchJob {name}: no replicas")
    if all(_link_of(t[1], namespace) is None for t in templates):
        policy = _dict(_dict(spec.get("runPolicy")).get("schedulingPolicy"))
        min_member = _int(policy.get("minAvailable", total), f"PyTorchJob {name}: minAvailable")
        out.groups.append((GroupKind.COSCHEDULING, {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": f"{UID_PREFIX}group-{len(out.groups)}"},
            "spec": {"minMember": min_member}}))
        templates = [(prefix, _labelled(t, COSCHEDULING_LABEL, name), n) for prefix, t, n in templates]
        out.notes.append(f"PyTorchJob {name}: as the Kubeflow training operator makes it with scheduler-plugins "
                         f"gang scheduling: PodGroup {namespace}/{name}, minMember {min_member}")
    return templates


def _labelled(template: Mapping[str, Any], key: str, value: str) -> dict[str, Any]:
    out = copy.deepcopy(dict(template))
    out.setdefault("metadata", {}).setdefault("labels", {})[key] = value
    return out


def _link_of(template: Mapping[str, Any], namespace: str) -> GangKey | None:
    try:
        link = pod_link({"metadata": {**_dict(template.get("metadata")), "namespace": namespace},
                         "spec": _dict(template.get("spec"))})
    except GroupError as exc:
        raise SubmissionError(str(exc)) from None
    return link.gang if link is not None else None


def _pod(template: Mapping[str, Any], namespace: str, name: str, index: int) -> dict[str, Any]:
    metadata = copy.deepcopy(dict(_dict(template.get("metadata"))))
    spec = copy.deepcopy(dict(_dict(template.get("spec"))))
    spec.pop("nodeName", None)
    metadata.update({"name": name, "namespace": namespace, "uid": f"{UID_PREFIX}{index}"})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec,
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}


def _one_gang(out: Submission) -> None:
    gangs: dict[GangKey, int] = {}
    for pod in out.pods:
        gang = _link_of(pod, str(pod["metadata"]["namespace"]))
        if gang is None:
            raise SubmissionError(f"pod {pod['metadata']['name']} names no gang: link it to a group (workloadRef, "
                                  "schedulingGroup, the scheduling.x-k8s.io/pod-group label or the gang-extender.io "
                                  "annotations)")
        gangs[gang] = gangs.get(gang, 0) + 1
    if len(gangs) > 1:
        names = ", ".join(f"{g} ({n} pods)" for g, n in sorted(gangs.items(), key=lambda kv: str(kv[0])))
        raise SubmissionError(f"the file makes pods of {len(gangs)} gangs: {names}; ask about one at a time")
    out.gang = next(iter(gangs))
    schedulers = {str(_dict(p.get("spec")).get("schedulerName") or DEFAULT_SCHEDULER) for p in out.pods}
    if len(schedulers) > 1:
        raise SubmissionError(f"the gang's pods name {len(schedulers)} schedulers ({', '.join(sorted(schedulers))}): "
                              "one gang is scheduled by one scheduler")
    out.scheduler_name = schedulers.pop()


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list) else []


def _int(value: object, what: str) -> int:
    if value is None:
        return 0
    try:
        number = int(str(value))
    except ValueError:
        raise SubmissionError(f"{what}: {value!r} is not a whole number") from None
    if number < 0:
        raise SubmissionError(f"{what}: {value!r} is negative")
    return number

"""extender.cluster.signature: which pods may share a filter result."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from extender.cluster.signature import signature, unsignable_reason


def base_pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "web-1", "namespace": "ns", "uid": "uid-1", "labels": {"app": "web", "pod": "1"},
                     "annotations": {"a": "1"}, "resourceVersion": "10"},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [{"name": "main", "image": "nginx:1.27",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                            "ports": [{"containerPort": 80}]}],
            "nodeSelector": {"pool": "web"},
            "tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule"},
                            {"key": "b", "operator": "Equal", "value": "x", "effect": "NoExecute"}],
            "volumes": [{"name": "config", "configMap": {"name": "web-config"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}}],
        },
        "status": {"phase": "Pending"},
    }


def sig(pod: dict[str, Any]) -> bytes | None:
    return signature(pod)


Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(pod: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = pod
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return mutate


def _delete(path: str) -> Mutation:
    def mutate(pod: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = pod
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        del target[last]
    return mutate


def _append(path: str, value: Any) -> Mutation:
    def mutate(pod: dict[str, Any]) -> None:
        target = pod
        for key in path.split("."):
            target = target[key]
        target.append(value)
    return mutate


def test_signature_is_a_16_byte_digest() -> None:
    value = sig(base_pod())
    assert isinstance(value, bytes)
    assert len(value) == 16


def test_signature_is_deterministic() -> None:
    assert sig(base_pod()) == sig(base_pod())


@pytest.mark.parametrize(
    "mutate",
    [
        _set("metadata.name", "web-2"),
        _set("metadata.uid", "uid-2"),
        _set("metadata.labels", {"app": "other", "pod": "2"}),
        _delete("metadata.labels"),
        _set("metadata.annotations", {"b": "2"}),
        _set("metadata.resourceVersion", "11"),
        _set("status", {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}),
        _set("spec.containers.0.name", "other"),
        _set("spec.containers.0.image", "nginx:1.28"),
        _set("spec.containers.0.env", [{"name": "X", "value": "1"}]),
        _set("spec.containers.0.ports", [{"containerPort": 8080}]),  # no hostPort: irrelevant
        _set("spec.tolerations", [{"key": "b", "operator": "Equal", "value": "x", "effect": "NoExecute"},
                                  {"key": "a", "operator": "Exists", "effect": "NoSchedule"}]),  # same set
        _set("spec.tolerations.0", {"effect": "NoSchedule", "operator": "Exists", "key": "a"}),  # key order
        _set("spec.nodeSelector", {"pool": "web"}),
        # ConfigMap, Secret, projected, downwardAPI and emptyDir volumes never affect feasibility
        _set("spec.volumes.0", {"name": "config", "configMap": {"name": "other-config"}}),
        _set("spec.volumes.0", {"name": "config", "secret": {"secretName": "s"}}),
        _set("spec.volumes.0", {"name": "tok", "projected": {"sources": []}}),
        _set("spec.volumes.0", {"name": "info", "downwardAPI": {"items": []}}),
        _set("spec.volumes.0", {"name": "scratch", "emptyDir": {}}),
        _set("spec.volumes.1", {"name": "renamed", "persistentVolumeClaim": {"claimName": "data-web-1"}}),
        _set("spec.serviceAccountName", "robot"),
        _set("spec.affinity", {"nodeAffinity": None}),
    ],
)
def test_interchangeable_pods_share_a_signature(mutate: Mutation) -> None:
    pod = base_pod()
    mutate(pod)
    assert sig(pod) == sig(base_pod())


def test_config_and_secret_volumes_are_ignored_entirely() -> None:
    without = base_pod()
    without["spec"]["volumes"] = [v for v in without["spec"]["volumes"] if "configMap" not in v]
    with_more = base_pod()
    with_more["spec"]["volumes"].append({"name": "creds", "secret": {"secretName": "creds"}})
    assert sig(without) == sig(base_pod()) == sig(with_more)


@pytest.mark.parametrize(
    "mutate",
    [
        _set("spec.containers.0.resources.requests.cpu", "2"),
        _set("spec.containers.0.resources.requests.memory", "2Gi"),
        _set("spec.containers.0.resources.limits", {"nvidia.com/gpu": "1"}),
        _set("spec.containers.0.ports", [{"containerPort": 80, "hostPort": 80}]),
        _set("spec.containers.0.restartPolicy", "Always"),
        _set("spec.containers", [base_pod()["spec"]["containers"][0]] * 2),
        _set("spec.initContainers", [{"name": "init", "resources": {"requests": {"cpu": "3"}}}]),
        _set("spec.overhead", {"cpu": "250m"}),
        _set("spec.schedulerName", "other-scheduler"),
        _set("spec.nodeSelector", {"pool": "batch"}),
        _set("spec.nodeSelector", {"pool": "web", "zone": "a"}),
        _delete("spec.nodeSelector"),
        _set("spec.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "In", "values": ["a"]}]}]}}}),
        _set("spec.tolerations", [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}]),
        _set("spec.tolerations.1.value", "y"),
        _set("spec.nodeName", "node-1"),
        _set("spec.priority", 1000),  # a draining reservation holds off only pods up to its priority
        _set("spec.volumes.1.persistentVolumeClaim.claimName", "data-web-2"),  # PVC volumes count
        _delete("spec.volumes"),
        _append("spec.volumes", {"name": "host", "hostPath": {"path": "/data"}}),
    ],
)
def test_differing_pods_do_not_share_a_signature(mutate: Mutation) -> None:
    pod = base_pod()
    mutate(pod)
    assert sig(pod) != sig(base_pod())


def test_pvc_volumes_are_counted() -> None:
    other_claim = base_pod()
    other_claim["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"] = "data-web-2"
    no_claim = base_pod()
    del no_claim["spec"]["volumes"][1]
    assert len({sig(base_pod()), sig(other_claim), sig(no_claim)}) == 3


def test_the_gang_is_not_part_of_the_signature() -> None:
    """Members of different gangs with the same spec share results; the engine evaluates the nodes
    holding a gang's own reservation outside the cache (tests/unit/test_engine.py)."""
    member = base_pod()
    member["spec"]["workloadRef"] = {"name": "train", "podGroup": "workers"}
    other = copy.deepcopy(member)
    other["spec"]["workloadRef"] = {"name": "eval", "podGroup": "workers", "podGroupReplicaKey": "1"}
    annotated = base_pod()
    annotated["metadata"]["annotations"]["gang-extender.io/group"] = "train"
    assert sig(member) == sig(other) == sig(annotated) == sig(base_pod())


def test_missing_or_junk_spec_is_still_signable() -> None:
    assert sig({"metadata": {"name": "p"}}) == sig({"metadata": {"name": "q"}, "spec": None})
    assert sig({"metadata": {"name": "p"}, "spec": "junk"}) is not None


@pytest.mark.parametrize(
    ("spec_update", "reason"),
    [
        ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}},
         "inter-pod affinity"),
        ({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone"}}]}}},
         "inter-pod affinity"),
        ({"affinity": {"nodeAffinity": {}, "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {}, "topologyKey": "zone"}]}}},
         "inter-pod affinity"),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                         "labelSelector": {"matchLabels": {"app": "web"}}}]},
         "topology spread constraints"),
        ({"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]}, "resource claims"),
    ],
)
def test_unsignable_pods(spec_update: dict[str, Any], reason: str) -> None:
    pod = base_pod()
    pod["spec"].update(spec_update)
    assert unsignable_reason(pod["spec"]) == reason
    assert sig(pod) is None


@pytest.mark.parametrize(
    "spec_update",
    [
        {},
        {"affinity": {"podAffinity": None, "podAntiAffinity": {}}},
        {"affinity": "junk"},
        {"topologySpreadConstraints": []},
        {"resourceClaims": []},
        {"resourceClaims": None},
    ],
)
def test_empty_inter_pod_constraints_stay_signable(spec_update: dict[str, Any]) -> None:
    pod = base_pod()
    pod["spec"].update(spec_update)
    assert unsignable_reason(pod["spec"]) is None
    assert sig(pod) is not None


def test_signature_does_not_mutate_the_pod() -> None:
    pod = base_pod()
    before = copy.deepcopy(pod)
    sig(pod)
    assert pod == before


def test_non_json_values_are_unsignable_rather_than_an_error() -> None:
    pod = base_pod()
    pod["spec"]["nodeSelector"] = {"pool": object()}
    assert sig(pod) is None

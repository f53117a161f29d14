"""The scheduling signature of a pod (pure).

Owns: deciding which pods are interchangeable for the extender's filter, after KEP-5598's
opportunistic batching: canonical JSON of the fields that decide feasibility (scheduler name,
container/init/overhead resources, nodeSelector and node affinity, tolerations, nodeName, priority (a
draining reservation holds off only pods of its gang's priority or lower), host ports, volumes other
than ConfigMap/Secret/projected/downwardAPI/emptyDir), hashed with blake2b. The gang a
pod belongs to is not part of it: the engine evaluates the nodes holding a gang's own reservation
outside the cache, so members of different gangs with the same spec share results. Must not: cache
anything or look at the cluster.

Pods whose feasibility depends on other pods (inter-pod affinity, explicit topology spread) or on
resource claims are *unsignable*: ``signature()`` returns None and their results are never reused.
Our filter does not evaluate those constraints, so this is conservative, matching upstream.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

_SYNTHETIC_VOLUMES = frozenset({"configMap", "secret", "projected", "downwardAPI", "emptyDir"})


def _container_part(container: object) -> object:
    if not isinstance(container, dict):
        return None
    ports = [p for p in container.get("ports") or [] if isinstance(p, dict) and p.get("hostPort")]
    return [container.get("resources"), ports, container.get("restartPolicy")]


def _canonical_bytes(value: object) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return repr(value).encode()


def unsignable_reason(spec: Mapping[str, Any]) -> str | None:
    """Why a pod's filter result may not be shared with other pods; None when it may."""
    affinity = spec.get("affinity")
    if isinstance(affinity, dict) and (affinity.get("podAffinity") or affinity.get("podAntiAffinity")):
        return "inter-pod affinity"
    if spec.get("topologySpreadConstraints"):
        return "topology spread constraints"
    if spec.get("resourceClaims"):
        return "resource claims"
    return None


def signature(pod: Mapping[str, Any]) -> bytes | None:
    """A 16-byte digest shared by pods the filter treats identically, or None if unsignable."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    if unsignable_reason(spec):
        return None
    affinity = spec.get("affinity")
    tolerations = spec.get("tolerations") or []
    volumes = [
        v for v in spec.get("volumes") or []
        if isinstance(v, dict) and not _SYNTHETIC_VOLUMES.intersection(v)
    ]
    canonical = {
        "schedulerName": spec.get("schedulerName"),
        "containers": [_container_part(c) for c in spec.get("containers") or []],
        "initContainers": [_container_part(c) for c in spec.get("initContainers") or []],
        "overhead": spec.get("overhead"),
        "nodeSelector": spec.get("nodeSelector"),
        "nodeAffinity": affinity.get("nodeAffinity") if isinstance(affinity, dict) else None,
        "tolerations": sorted(tolerations, key=_canonical_bytes) if isinstance(tolerations, list)
        else tolerations,
        "nodeName": spec.get("nodeName"),
        "priority": spec.get("priority"),  # a draining reservation holds off only pods of its gang's priority or lower
        "volumes": [{k: v for k, v in vol.items() if k != "name"} for vol in volumes],
    }
    try:
        blob = orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return None  # not JSON-representable (cannot come from the API server): just don't share
    return hashlib.blake2b(blob, digest_size=16).digest()

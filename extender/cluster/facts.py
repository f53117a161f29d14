"""PodFacts: what the extender reads from one request's raw pod, each fact read once (pure).

Owns: reading a request's pod lazily and at most once per request: its gang link, its record
(requests, gang, placement fields), its placement constraints and its scheduling signature; or, for a
pod the mirror holds at the request's version, those the pod watch read already (``adopt``). A cache
hit whose nodes did not change reads only the signature. Must not: keep state beyond one request or
do I/O; errors of the readers (``GroupError``, ``RecordError``, ``QuantityError``) reach the caller.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from extender.cluster.groups import PodLink, pod_link
from extender.cluster.records import linked_pod_record, placement_from_spec, resource_version
from extender.cluster.signature import signature
from extender.model.cluster import NO_PLACEMENT, Placement, PodRecord


class PodFacts:
    """The facts of one raw pod, each read on first use."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw

    @functools.cached_property
    def uid(self) -> str:
        """The pod's uid as its record has it (``namespace/name`` for a pod without one)."""
        metadata = self.raw.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        return str(metadata.get("uid") or f"{metadata.get('namespace') or 'default'}/{metadata.get('name', '')}")

    @functools.cached_property
    def version(self) -> str:
        """The pod's ``metadata.resourceVersion`` ("" without one)."""
        return resource_version(self.raw)

    def adopt(self, record: PodRecord, signature: bytes | None) -> None:
        """Take ``record`` and ``signature`` as this pod's, read from the same version of it elsewhere (the
        pod watch: ``ClusterMirror.as_read``, unbound pods only), instead of reading them from the raw pod:
        every fact a verdict depends on (record, link, placement, signature) then comes from that read, none
        from the request (they are what the properties below hold once read: set before any of them is)."""
        self.__dict__.update(record=record, signature=signature,
                             link=PodLink(record.gang, record.link_policy) if record.gang is not None else None,
                             # an unbound pod's record keeps every placement field it has: none is none
                             placement=record.placement if record.placement is not None else NO_PLACEMENT)

    @functools.cached_property
    def link(self) -> PodLink | None:
        """The pod's gang link (raises GroupError for a malformed one)."""
        return pod_link(self.raw)

    @functools.cached_property
    def record(self) -> PodRecord:
        """The pod's record (raises RecordError or QuantityError for a malformed pod)."""
        return linked_pod_record(self.raw, self.link)

    @functools.cached_property
    def placement(self) -> Placement:
        if self.record.placement is not None:
            return self.record.placement
        spec = self.raw.get("spec")  # a request pod that names a node: its record keeps no placement
        return placement_from_spec(spec if isinstance(spec, dict) else {})

    @functools.cached_property
    def signature(self) -> bytes | None:
        return signature(self.raw)

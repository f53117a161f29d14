"""The engine's ports: what the I/O edges implement for it (the API server or a snapshot binds; a
journal file or the leader's Lease records releases), and the errors they raise.

Must not: import an edge; the edges import this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class Binder(Protocol):
    """The one seam through which the engine changes the cluster."""

    def bind(self, namespace: str, name: str, uid: str, node: str, timeout: float = 10.0) -> None:
        """Create the Binding; give up (BindError) after ``timeout`` seconds."""

    def read_pod(self, namespace: str, name: str, timeout: float = 10.0) -> Mapping[str, Any] | None:
        """The pod from the API server (None: it does not exist); give up after ``timeout`` seconds."""


class ReleaseLog(Protocol):
    """Where the engine writes a release down before its first Binding (the release journal, or the
    intents on the leader's Lease)."""

    def opened(self, gang: str, pods: Sequence[tuple[str, str, str, str]]) -> int:
        """Record the release; raises ReleaseNotRecordedError when it is not known to be recorded."""

    def closed(self, release_id: int) -> None: ...

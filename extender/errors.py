"""Every error the extender raises on purpose, in one small hierarchy (pure).

Owns: the exception classes and what each means to whoever catches it. Must not: import anything of
the extender; every layer imports this.

    ExtenderError
    ├── BadInputError (also a ValueError): input that cannot be used; the message says what to fix
    │   ├── ProtocolError: a request that is not a valid extender request (answered with HTTP 400)
    │   ├── ConfigError: a setting
    │   ├── SnapshotError: a cluster snapshot file
    │   ├── SubmissionError: objects kubectl gang fit was asked about that are not one gang
    │   └── ObjectError: a Kubernetes object too malformed to use
    │       ├── RecordError: a Pod or Node
    │       ├── GroupError: a gang link or group object
    │       └── QuantityError: a resource quantity
    ├── EdgeError: an outside system failed or refused (the API server, the Lease, a file)
    │   ├── KubeError: an API call failed
    │   ├── GoneError: what a call named is gone: the resourceVersion a watch resumes from is too old
    │   │   (relist), or the pod to evict no longer exists
    │   ├── BindError: a Binding refused or failed
    │   ├── EvictionError: an eviction refused or failed
    │   │   └── BudgetError: refused by a PodDisruptionBudget (the Eviction API's 429)
    │   ├── ReleaseNotRecordedError: a release could not be written down, so it must not start
    │   │   └── IntentNotRecordedError (IntentsFullError)
    │   └── LeaseWriteError (NotLeaderError, FencedError, LeaseWriteFailedError)
    └── RefusedError: a request the HTTP worker answers itself, with a status, and closes

Catch the narrowest class that has one meaning for the caller: ``BadInputError`` where any unusable input
gets the same answer, ``ObjectError`` where an object from the API server is skipped and counted.
"""

from __future__ import annotations

from collections.abc import Sequence


class ExtenderError(Exception):
    """The root: an error raised on purpose by gang-extender."""


class BadInputError(ExtenderError, ValueError):
    """Input that cannot be used; the message says what is wrong and what to fix."""


class ProtocolError(BadInputError):
    """A request that is not a valid extender request. Rendered as HTTP 400."""


class ConfigError(BadInputError):
    """One or more invalid settings; ``problems`` lists each (all are reported before anything starts)."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("invalid settings:\n" + "\n".join(f"  - {p}" for p in problems))
        self.problems = list(problems)


class SnapshotError(BadInputError):
    """A cluster snapshot file that cannot be read."""


class SubmissionError(BadInputError):
    """Objects that do not describe one gang that could be submitted; the message says what to change."""


class ObjectError(BadInputError):
    """A Kubernetes object too malformed to use: the mirror skips and counts it, a request gets a 400."""


class RecordError(ObjectError):
    """A Pod or Node without the fields scheduling needs."""


class GroupError(ObjectError):
    """A malformed gang link on a pod or a malformed group object."""


class QuantityError(ObjectError):
    """A quantity string that Kubernetes would not accept."""


class EdgeError(ExtenderError):
    """An outside system (the API server, the Lease, a file) failed or refused."""


class KubeError(EdgeError):
    """A failed API call. ``status`` is the HTTP status (0 when the server was not reached)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class GoneError(EdgeError):
    """What a call named is gone: the resourceVersion we watch from is too old (relist), or the pod an
    eviction names (that uid) no longer exists."""


class BindError(EdgeError):
    """The API server (or snapshot) refused a binding; the message is answered to the scheduler."""


class EvictionError(EdgeError):
    """The API server did not evict a pod (or the outcome is unknown: a timeout); the message says why."""


class BudgetError(EvictionError):
    """The Eviction API refused because a PodDisruptionBudget allows no more disruptions now (HTTP 429)."""


class ReleaseNotRecordedError(EdgeError):
    """A release could not be written down (not the leader, fenced, full): it must not start."""


class IntentNotRecordedError(ReleaseNotRecordedError):
    """The release was not (known to be) written on the leader's Lease: bind none of its members."""


class IntentsFullError(IntentNotRecordedError):
    """Recording the release would make the Lease's annotation larger than allowed."""


class LeaseWriteError(EdgeError):
    """A write attached to the Lease was not made (``NotLeaderError``, ``FencedError``) or its outcome
    is unknown (``LeaseWriteFailedError``)."""


class NotLeaderError(LeaseWriteError):
    """This replica does not lead now; nothing was sent."""


class FencedError(LeaseWriteError):
    """The API server refused the write (409): the Lease changed since we last wrote it, possibly
    taken over by another replica. This replica stopped leading."""


class LeaseWriteFailedError(LeaseWriteError):
    """The write failed or timed out (the server may or may not have applied it)."""


class RefusedError(ExtenderError):
    """A request the HTTP worker answers itself with ``status`` and closes the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

"""Waitlist: the pods to wake when what they wait for happens (no I/O).

Owns: the pods a filter rejected for want of capacity (woken, all at once, when a reservation is dropped
and capacity frees: ``take_blocked``), the members a gang rule rejected (woken when their gang is
admitted: ``take_rejected``), the uids of gang members filtered before the pod watch delivered them
(woken when it does: ``take_unseen``), and the last waiting message of a gang the ledger keeps no record
for (``explain`` shows it). Each is bounded; only pods the mirror has seen are ever kept to be woken.
Must not: decide anything, wake anyone itself (the apply step hands what it takes to the waker), or take
the lock (its callers hold the mirror's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from extender.model.cluster import PodRecord
from extender.model.gang import GangKey

MAX_REMEMBERED = 100_000
"""The most pods (and gang messages) remembered: blocked pods, members rejected by a gang rule, messages."""


class Waitlist:
    """Blocked pods, rejected members and the messages of gangs without a record."""

    def __init__(self) -> None:
        self._blocked: dict[str, PodRecord] = {}
        self._rejected: dict[GangKey, set[str]] = {}
        self._messages: dict[GangKey, str] = {}
        self._unseen: dict[str, None] = {}  # uids, oldest first

    def block(self, pod: PodRecord) -> None:
        """``pod`` was rejected for want of capacity: wake it when capacity frees up."""
        if len(self._blocked) < MAX_REMEMBERED:
            self._blocked[pod.uid] = pod

    def reject(self, pod: PodRecord, gang: GangKey) -> None:
        """Member ``pod`` was rejected by a gang rule: wake it when ``gang`` is admitted."""
        rejected = self._rejected.setdefault(gang, set())
        if len(rejected) < MAX_REMEMBERED:
            rejected.add(pod.uid)

    def unseen(self, uid: str) -> None:
        """A filter came for gang member ``uid`` before the pod watch delivered it: wake it when it does (the
        oldest is forgotten when too many wait)."""
        if uid not in self._unseen and len(self._unseen) >= MAX_REMEMBERED:
            del self._unseen[next(iter(self._unseen))]
        self._unseen[uid] = None

    def take_unseen(self, uid: str) -> bool:
        """Whether a filter was refused for ``uid`` before it was seen (and no longer is)."""
        return self._unseen.pop(uid, 0) is None

    def remember(self, gang: GangKey, message: str) -> None:
        """The last waiting message of a gang the ledger keeps no record for."""
        if gang in self._messages or len(self._messages) < MAX_REMEMBERED:
            self._messages[gang] = message

    def take_blocked(self) -> list[PodRecord]:
        taken = list(self._blocked.values())
        self._blocked.clear()
        return taken

    def take_rejected(self, gang: GangKey) -> set[str]:
        return self._rejected.pop(gang, set())

    def message(self, gang: GangKey) -> str:
        return self._messages.get(gang, "")

    def gangs(self) -> Iterable[GangKey]:
        """The gangs with a message remembered."""
        return self._messages.keys()

    def waiting(self) -> bool:
        """Whether any pod waits to be woken."""
        return bool(self._blocked) or any(self._rejected.values())

    def prune(self, gone: Callable[[GangKey], bool], recorded: Callable[[GangKey], bool]) -> None:
        """Forget the rejected members of gangs that are ``gone`` (no member left) and the messages of
        those and of gangs now ``recorded``."""
        for gang in [g for g in self._messages if recorded(g) or gone(g)]:
            del self._messages[gang]
        for gang in [g for g in self._rejected if gone(g)]:
            del self._rejected[gang]

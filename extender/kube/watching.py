"""Reflector: list -> watch -> relist on 410, with backoff and a stop event.

Owns: keeping one collection of the mirror in step with the API server through injected ``list`` and
``watch`` callables (so tests can drive it without a server), its sync/health flags for ``/readyz``,
and relist/error counters. Must not: parse objects (the ``apply`` callbacks do) or import the client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from extender.errors import GoneError

log = logging.getLogger(__name__)

class Listing(Protocol):
    """A collection to iterate once; ``resource_version`` is valid after iteration."""

    resource_version: str

    def __iter__(self) -> Iterator[dict[str, Any]]: ...


ListFn = Callable[[], Listing]
WatchFn = Callable[[str], Iterator[tuple[str, dict[str, Any]]]]


class Reflector:
    def __init__(self, name: str, list_fn: ListFn, watch_fn: WatchFn,
                 replace: Callable[[Iterable[dict[str, Any]]], None],
                 apply: Callable[[str, dict[str, Any]], None], stop: threading.Event,
                 *, initial_backoff: float = 0.5, max_backoff: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._clock = clock
        self._list, self._watch, self._replace, self._apply = list_fn, watch_fn, replace, apply
        self._stop = stop
        self._initial_backoff, self._max_backoff = initial_backoff, max_backoff
        self.synced = threading.Event()   # listed at least once
        self.initial_sync_seconds: float | None = None  # first list call -> its objects in the mirror
        self.healthy = False              # last list/watch succeeded
        self.failing_since: float | None = None  # monotonic time of the first failure since the last list
        self.last_error = ""
        self.relists = 0
        self.errors = 0
        self.events = 0
        self._progressed = False  # the current list+watch delivered something after listing
        self._first_attempt: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def failing_for(self, now: float) -> float:
        """Seconds this collection has been failing to list or watch (0 while healthy)."""
        since = self.failing_since
        return 0.0 if since is None else max(now - since, 0.0)

    def _run(self) -> None:
        backoff = self._initial_backoff
        while not self._stop.is_set():
            self._progressed = False
            try:
                self._list_and_watch()
                backoff = self._initial_backoff
            except GoneError:
                log.info("watch %s: resourceVersion expired, relisting", self.name)
            except Exception as exc:  # any failure: the loop must survive, report, and retry
                if self._progressed:  # it had been working: a new failure, not the same outage
                    backoff = self._initial_backoff
                self.errors += 1
                self.healthy = False
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                self.last_error = str(exc)
                log.warning("watch %s failed (%s); retrying in %.1fs", self.name, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)

    def _list_and_watch(self) -> None:
        if self._first_attempt is None:
            self._first_attempt = self._clock()
        listing = self._list()
        self._replace(listing)
        if self.initial_sync_seconds is None:  # retries of a failed first list count: the mirror waited
            self.initial_sync_seconds = self._clock() - self._first_attempt
        version = listing.resource_version
        self.relists += 1
        self.synced.set()
        self.healthy = True
        self.failing_since = None
        self.last_error = ""
        while not self._stop.is_set():
            for kind, obj in self._watch(version):
                if self._stop.is_set():
                    return
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise GoneError
                    raise RuntimeError(f"watch error: {obj.get('message') or obj}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                self._progressed = True
                if kind != "BOOKMARK":
                    self.events += 1
                    self._apply(kind, obj)
            self._progressed = True  # a watch call that ends normally (server timeout) also worked

    @staticmethod
    def is_gone(exc: BaseException) -> bool:
        return getattr(exc, "status", None) == 410


def watch_or_gone(watch_fn: WatchFn) -> WatchFn:
    """Wrap a watch so an HTTP 410 on the request itself also triggers a relist."""
    def watch(version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        try:
            yield from watch_fn(version)
        except Exception as exc:
            if Reflector.is_gone(exc):
                raise GoneError from None
            raise
    return watch

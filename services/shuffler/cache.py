"""A bounded, single-flight cache of the server's public documents.

:class:`SingleFlightCache` maps a key (e.g. ``("view", campaign_id)``) to the last value
fetched for it, with three rules:

- **bounded**: at most ``max_entries`` values, least recently used evicted first; the
  fetches in flight are bounded by the caller's connection pool, and each one is
  removed when it ends;
- **single flight**: concurrent misses of one key share one fetch (one asyncio task per
  key); a burst of N requests for an expired document costs one upstream request, not
  N.  A waiter that is cancelled does not cancel the fetch for the others;
- **freshness**: a value the fetch marks ``immutable`` is kept until evicted; any other
  value for ``ttl`` seconds.  ``fresh=True`` asks for a value at most ``min_refresh``
  seconds old, so even callers that insist on freshness reach the upstream at most
  1 / ``min_refresh`` times a second per key.  If a fetch fails and an expired value is
  still held, ``stale_on_error`` decides whether it is served instead of the error.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Fetched(Generic[T]):
    """What a fetch returns: the value and whether it can never change."""

    value: T
    immutable: bool = False


@dataclass
class _Entry(Generic[T]):
    fetched: Fetched[T]
    at: float


class SingleFlightCache(Generic[T]):
    """See the module docstring."""

    def __init__(self, *, max_entries: int = 1024, ttl: float = 1.0, min_refresh: float = 0.25,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1 or ttl < 0 or min_refresh < 0:
            raise ValueError("cache needs max_entries >= 1, ttl >= 0 and min_refresh >= 0")
        self.max_entries = max_entries
        self.ttl = ttl
        self.min_refresh = min_refresh
        self._clock = clock
        self._entries: OrderedDict[Hashable, _Entry[T]] = OrderedDict()
        self._inflight: dict[Hashable, asyncio.Task[Fetched[T]]] = {}
        self.fetches = 0
        """Fetches started so far (upstream requests, for tests and metrics)."""

    def __len__(self) -> int:
        return len(self._entries)

    def knows(self, key: Hashable) -> bool:
        """Whether ``key`` has a stored value (fresh or not) or a fetch in flight."""
        return key in self._entries or key in self._inflight

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def _usable(self, entry: _Entry[T], fresh: bool) -> bool:
        if entry.fetched.immutable:
            return True
        age = self._clock() - entry.at
        return age < (self.min_refresh if fresh else self.ttl)

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[Fetched[T]]], *,
                  fresh: bool = False,
                  stale_on_error: Callable[[BaseException], bool] | None = None) -> Fetched[T]:
        """The cached value of ``key``, or the result of one shared ``fetch()``."""
        entry = self._entries.get(key)
        if entry is not None and self._usable(entry, fresh):
            self._entries.move_to_end(key)
            return entry.fetched
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._fetch(key, fetch))
            task.add_done_callback(_retrieve)
            self._inflight[key] = task
        try:
            return await asyncio.shield(task)
        except Exception as exc:
            stale = self._entries.get(key)
            if stale is not None and stale_on_error is not None and stale_on_error(exc):
                return stale.fetched
            raise

    async def _fetch(self, key: Hashable, fetch: Callable[[], Awaitable[Fetched[T]]]
                     ) -> Fetched[T]:
        self.fetches += 1
        me = asyncio.current_task()
        try:
            fetched = await fetch()
            if self._inflight.get(key) is me:  # not discarded meanwhile
                self.put(key, fetched)
            return fetched
        finally:
            if self._inflight.get(key) is me:
                del self._inflight[key]

    def put(self, key: Hashable, fetched: Fetched[T]) -> None:
        """Store a value (evicting the least recently used beyond ``max_entries``)."""
        self._entries[key] = _Entry(fetched, self._clock())
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def discard(self, key: Hashable) -> None:
        """Forget ``key``: its next ``get`` starts a new fetch.  A fetch already in flight
        still answers its waiters but no longer stores its (possibly outdated) value."""
        self._entries.pop(key, None)
        self._inflight.pop(key, None)


def _retrieve(task: asyncio.Task[object]) -> None:
    """Mark a fetch's exception as retrieved (its waiters may all have been cancelled)."""
    if not task.cancelled():
        task.exception()

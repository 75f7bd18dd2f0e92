"""Bounded memo tables for the accountant's bounds, numpy or not.

The accountant evaluates the same loss distributions and summation windows over and
over while a client checks every privacy level, so it keeps them in small
least-recently-used tables.  :func:`registered_cache` makes one that
:func:`clear_all_caches` empties (to measure cold costs).

Imports nothing from numpy, so the numpy-free accountant (:mod:`segshuffle.core.portable`)
keeps its tables here too.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["BoundedCache", "clear_all_caches", "key_of", "on_clear_all", "registered_cache"]

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """A mapping that keeps at most ``limit`` entries, forgetting the least recently used.

    Safe to share between threads (the server's optimizer and its requests): the table is
    read and changed under a lock, and ``make`` runs outside it, so two threads missing the
    same key may both compute it (the values are equal; the later one is kept).
    """

    __slots__ = ("limit", "lock", "map")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.map: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value kept under ``key``, computed by ``make()`` (and kept) when there is none."""
        table = self.map
        with self.lock:
            if key in table:
                table.move_to_end(key)
                return table[key]
        value = make()
        with self.lock:
            if key in table:  # another thread computed it meanwhile
                table.move_to_end(key)
            else:  # room first: the table never holds more than ``limit``, even briefly
                while table and len(table) >= self.limit:
                    table.popitem(last=False)
            table[key] = value
        return value

    def clear(self) -> None:
        """Forget every entry."""
        with self.lock:
            self.map.clear()

    def __len__(self) -> int:
        return len(self.map)


def key_of(*parts: Hashable) -> tuple[Hashable, ...]:
    """A cache key of numbers, flags and other keys: the tuple of the parts.

    Python floats hash and compare exactly (1 and 1.0 are one key, as in the JavaScript
    accountant, which prints numbers exactly); lists are turned into tuples.
    """
    for part in parts:
        if isinstance(part, list):
            return tuple(tuple(p) if isinstance(p, list) else p for p in parts)
    return parts


_registry: list[BoundedCache] = []
_clear_hooks: list[Callable[[], None]] = []


def registered_cache(limit: int) -> BoundedCache:
    """A bounded cache of at most ``limit`` entries that :func:`clear_all_caches` empties."""
    cache: BoundedCache = BoundedCache(limit)
    _registry.append(cache)
    return cache


def on_clear_all(clear: Callable[[], None]) -> None:
    """Have :func:`clear_all_caches` call ``clear`` too (for a table kept another way, such
    as :func:`segshuffle.core.memo.memory_bounded_cache`'s)."""
    _clear_hooks.append(clear)


def clear_all_caches() -> None:
    """Forget every cached computation of the accountant (to measure cold costs)."""
    for cache in _registry:
        cache.clear()
    for clear in _clear_hooks:
        clear()

"""A least-recently-used memo whose bound is the memory its values hold, not their count.

The accountant keeps loss distributions between calls: a root search over lambda, the
levels of one campaign and the finalists of the optimizer's m search ask for the same
ones again.  Their sizes vary by three orders of magnitude (a few kilobytes on the
steering grid, megabytes for an 8-fold composition on the certified grid of a small
population), so a table bounded by its count either forgets the small ones too soon or
holds gigabytes of large ones.  :func:`memory_bounded_cache` bounds the bytes instead.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar

__all__ = ["Sized", "memory_bounded_cache"]


class Sized(Protocol):
    """A value that says how many bytes it holds."""

    @property
    def nbytes(self) -> int: ...


F = TypeVar("F", bound=Callable[..., Any])


def _size_of(value: object) -> int:
    """Bytes held by a cached value: its ``nbytes`` where it has one (None holds 0)."""
    return int(getattr(value, "nbytes", 0) or 0)


def memory_bounded_cache(max_bytes: int, max_entries: int = 4096) -> Callable[[F], F]:
    """Memoize a function of hashable arguments, forgetting the least recently used
    values once they hold more than ``max_bytes`` (or number more than ``max_entries``).

    A single value larger than the budget is returned but not kept.  The wrapped
    function gains ``cache_clear()``, as with :func:`functools.lru_cache`, and
    ``cache_bytes()``, the memory its kept values hold.
    """
    if max_bytes <= 0 or max_entries <= 0:
        raise ValueError("a cache needs a positive budget")

    def decorate(function: F) -> F:
        table: OrderedDict[Hashable, object] = OrderedDict()
        held = 0

        @functools.wraps(function)
        def cached(*args: Hashable, **kwargs: Hashable) -> object:
            nonlocal held
            key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
            try:
                table.move_to_end(key)
                return table[key]
            except KeyError:
                pass
            value = function(*args, **kwargs)
            size = _size_of(value)
            if size > max_bytes:
                return value
            table[key] = value
            held += size
            while held > max_bytes or len(table) > max_entries:
                _, dropped = table.popitem(last=False)
                held -= _size_of(dropped)
            return value

        def cache_clear() -> None:
            nonlocal held
            table.clear()
            held = 0

        def cache_bytes() -> int:
            return held

        cached.cache_clear = cache_clear  # type: ignore[attr-defined]
        cached.cache_bytes = cache_bytes  # type: ignore[attr-defined]
        return cached  # type: ignore[return-value]

    return decorate

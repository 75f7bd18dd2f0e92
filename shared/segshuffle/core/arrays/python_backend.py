"""The standard-library backend of :mod:`segshuffle.core.arrays`: vectors as Python lists.

A :class:`Vector` is a list with numpy's elementwise arithmetic and comparisons (a scalar
operand is broadcast), and slices that stay vectors; the functions mirror the numpy
backend's, element by element.  The special functions are the numpy-free ones of
:mod:`segshuffle.core.portable.distributions`, and :func:`total` is Neumaier's compensated
sum, as in the web client's JavaScript accountant.  Python's floats give inf and nan where
numpy's do, except that ``x / 0.0`` raises: a bound never divides by zero.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..portable import distributions

__all__ = [
    "Vector", "arange", "binom_cdf", "binom_pmf", "binom_sf", "binom_tails_range", "ceil_int",
    "clip", "concatenate", "floor_int", "half_tail", "isfinite", "largest", "maximum",
    "minimum", "poisson_tails", "quiet", "segment_totals", "take", "total", "vector", "where",
]


def _binary(op: Callable[[Any, Any], Any]) -> Callable[[Vector, Any], Vector]:
    """The operator method ``self op other`` (:func:`_map2`)."""
    def method(self: Vector, other: Any) -> Vector:
        return _map2(op, self, other)
    return method


def _reflected(op: Callable[[Any, Any], Any]) -> Callable[[Vector, Any], Vector]:
    """The reflected operator method ``other op self``, ``other`` a scalar."""
    def method(self: Vector, other: Any) -> Vector:
        return _map2(op, other, self)
    return method


class Vector(list):  # type: ignore[type-arg]
    """A list with numpy's elementwise operators (``+`` adds, ``==`` compares, ...)."""

    __slots__ = ()

    __add__ = _binary(operator.add)
    __radd__ = _reflected(operator.add)
    __sub__ = _binary(operator.sub)
    __rsub__ = _reflected(operator.sub)
    __mul__ = _binary(operator.mul)
    __rmul__ = _reflected(operator.mul)
    __truediv__ = _binary(operator.truediv)
    __rtruediv__ = _reflected(operator.truediv)
    __eq__ = _binary(operator.eq)  # type: ignore[assignment]
    __ne__ = _binary(operator.ne)  # type: ignore[assignment]
    __lt__ = _binary(operator.lt)  # type: ignore[assignment]
    __le__ = _binary(operator.le)  # type: ignore[assignment]
    __gt__ = _binary(operator.gt)  # type: ignore[assignment]
    __ge__ = _binary(operator.ge)  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]

    def __neg__(self) -> Vector:
        return Vector([-a for a in self])

    def __getitem__(self, index: Any) -> Any:
        item = list.__getitem__(self, index)
        return Vector(item) if isinstance(index, slice) else item

    @property
    def size(self) -> int:
        """The number of entries (numpy's ``size``)."""
        return len(self)

    def tolist(self) -> list[Any]:
        """A plain list of the entries."""
        return list(self)


def _map2(function: Callable[[Any, Any], Any], x: Any, y: Any) -> Vector:
    """``function`` elementwise over two vectors, or a vector and a scalar (either side)."""
    if isinstance(x, list) and isinstance(y, list):
        return Vector([function(a, b) for a, b in zip(x, y, strict=True)])
    if isinstance(x, list):
        return Vector([function(a, y) for a in x])
    return Vector([function(x, b) for b in y])


def vector(values: Iterable[float]) -> Vector:
    """A vector of ``values``."""
    return Vector(values)


def arange(start: int, stop: int) -> Vector:
    """The integers start, ..., stop - 1."""
    return Vector(range(start, stop))


def isfinite(x: Vector) -> Vector:
    return Vector([math.isfinite(a) for a in x])


def maximum(x: Any, y: Any) -> Vector:
    """The larger of x and y, elementwise (nan if either is nan, as numpy's)."""
    return _map2(_larger, x, y)


def minimum(x: Any, y: Any) -> Vector:
    """The smaller of x and y, elementwise (nan if either is nan, as numpy's)."""
    return _map2(_smaller, x, y)


def _larger(a: float, b: float) -> float:
    if a != a or b != b:
        return math.nan
    return a if a >= b else b


def _smaller(a: float, b: float) -> float:
    if a != a or b != b:
        return math.nan
    return a if a <= b else b


def where(condition: Vector, x: Any, y: Any) -> Vector:
    """x where ``condition`` holds, else y, elementwise (scalars broadcast)."""
    xs = x if isinstance(x, list) else None
    ys = y if isinstance(y, list) else None
    return Vector([(x if xs is None else xs[i]) if c else (y if ys is None else ys[i])
                   for i, c in enumerate(condition)])


def clip(x: Vector, lo: Any, hi: Any) -> Vector:
    """x limited to [lo, hi], elementwise (numpy's ``clip``: min(max(x, lo), hi))."""
    return minimum(maximum(x, lo), hi)


def floor_int(x: Vector) -> Vector:
    """floor(x) as integers (x finite)."""
    return Vector([math.floor(a) for a in x])


def ceil_int(x: Vector) -> Vector:
    """ceil(x) as integers (x finite)."""
    return Vector([math.ceil(a) for a in x])


def total(x: Vector) -> float:
    """The sum of the entries, compensated (Neumaier: within about 2 ulp of the sum)."""
    return distributions.compensated_sum(x)


def quiet() -> AbstractContextManager[object]:
    """Nothing to silence: Python's floats give inf and nan without warnings."""
    return nullcontext()


def binom_pmf(k: Any, n: Any, p: float) -> Vector:
    """Pr[Binomial(n, p) = k], elementwise over k (and n, when a vector)."""
    return _map2(lambda kk, nn: distributions.binom_pmf(kk, nn, p), k, n)


def binom_cdf(k: Any, n: int, p: float) -> Any:
    """Pr[Binomial(n, p) <= k]: a float for an integer k, elementwise over a vector."""
    if isinstance(k, list):
        return Vector([distributions.binom_cdf(a, n, p) for a in k])
    return distributions.binom_cdf(k, n, p)


def binom_sf(k: Any, n: int, p: float) -> Any:
    """Pr[Binomial(n, p) > k]: a float for an integer k, elementwise over a vector."""
    if isinstance(k, list):
        return Vector([distributions.binom_sf(a, n, p) for a in k])
    return distributions.binom_sf(k, n, p)


def binom_tails_range(lo: int, hi: int, n: int, p: float) -> tuple[Vector, Vector]:
    """(Pr[Binomial(n, p) <= t], Pr[Binomial(n, p) > t]) for t = lo..hi."""
    tails = distributions.binom_tails_range(lo, hi, n, p)
    return Vector(tails.lower), Vector(tails.upper)


def poisson_tails(k: Vector, mean: float) -> distributions.Tails:
    """Pr[Poisson(mean) <= k] and Pr[Poisson(mean) > k] at the counts ``k``, with a bound
    on their relative error (``lower``, ``upper``: vectors; ``rtol``)."""
    tails = distributions.poisson_tails(k, mean)
    return distributions.Tails(Vector(tails.lower), Vector(tails.upper), tails.rtol)


def largest(x: Vector) -> float:
    """The largest entry (nan if any is nan, as numpy's)."""
    if any(a != a for a in x):
        return math.nan
    return max(x)


def take(x: Vector, indices: list[int]) -> Vector:
    """The entries of x at ``indices``."""
    return Vector([x[i] for i in indices])


def concatenate(parts: list[Vector]) -> Vector:
    """The vectors of ``parts`` end to end."""
    return Vector([a for part in parts for a in part])


def segment_totals(x: Vector, starts: list[int]) -> Vector:
    """The sums (:func:`total`) of x[starts[i]:starts[i + 1]] (the last segment runs to
    the end); ``starts`` increasing from 0."""
    ends = [*starts[1:], len(x)]
    return Vector([distributions.compensated_sum(x[a:b]) for a, b in zip(starts, ends,
                                                                          strict=True)])


def half_tail(trials: Vector, k: Vector) -> Vector:
    """S_c(k) = Pr[Binomial(c, 1/2) >= k], elementwise; 1 for k <= 0, 0 for k > c."""
    return _map2(distributions.half_tail, trials, k)

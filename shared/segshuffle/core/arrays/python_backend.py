"""The standard-library backend of :mod:`segshuffle.core.arrays`: vectors as Python lists.

A :class:`Vector` is a list with numpy's elementwise arithmetic and comparisons (a scalar
operand is broadcast), and slices that stay vectors; the functions mirror the numpy
backend's, element by element.  The special functions are the numpy-free ones of
:mod:`segshuffle.core.arrays.python_distributions`, the transforms those of
:mod:`segshuffle.core.arrays.python_fft` (lengths padded to powers of two), the exact
convolution adds its products in the JavaScript accountant's order, and :func:`total` is
Neumaier's compensated sum, as in the web client's JavaScript accountant.  Python's floats
give inf and nan where numpy's do, except that ``x / 0.0`` raises: a bound never divides
by zero.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from itertools import accumulate, chain
from itertools import compress as _compress
from itertools import repeat as _each_time
from typing import Any

from . import KERNELS, exp_or_inf, log_or_minus_inf
from . import python_distributions as distributions
from .python_fft import irfft, multiply_spectra, next_power_of_two, power_spectrum, rfft

__all__ = ["Vector", *KERNELS]


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
    __and__ = _binary(operator.and_)
    __or__ = _binary(operator.or_)
    __hash__ = None  # type: ignore[assignment]

    def __neg__(self) -> Vector:
        return Vector(map(operator.neg, self))

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
    """``function`` elementwise over two vectors, or a vector and a scalar (either side).

    By :func:`map`, which runs an operator over lists without a Python frame per entry."""
    if isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            raise ValueError(f"vectors of {len(x)} and {len(y)} entries")
        return Vector(map(function, x, y))
    if isinstance(x, list):
        return Vector(map(function, x, _each_time(y)))
    return Vector(map(function, _each_time(x), y))


def vector(values: Iterable[float]) -> Vector:
    """A vector of ``values``."""
    return Vector(values)


def indices(values: Iterable[int]) -> Vector:
    """An integer vector of ``values``."""
    return Vector(values)


def log(x: Vector) -> Vector:
    """ln x, elementwise: -inf at 0, nan below."""
    try:
        return Vector(map(math.log, x))
    except ValueError:
        return Vector(map(log_or_minus_inf, x))


def repeat(x: Vector, counts: Iterable[int]) -> Vector:
    """Each entry of x ``counts`` times, in order."""
    return Vector(chain.from_iterable(map(_each_time, x, counts)))


def cumsum(x: Iterable[Any]) -> Vector:
    """Running sums x[0], x[0] + x[1], ..."""
    return Vector(accumulate(x))


def nonzero_at(mask: Iterable[Any]) -> Vector:
    """The indices where ``mask`` holds, increasing."""
    flags = list(mask)
    return Vector(_compress(range(len(flags)), flags))


def any_true(mask: Iterable[Any]) -> bool:
    """Whether ``mask`` holds anywhere."""
    return any(mask)


def logical_not(mask: Iterable[Any]) -> Vector:
    """Where ``mask`` does not hold."""
    return Vector([not holds for holds in mask])


def ceil(x: Vector) -> Vector:
    """ceil(x) as floats (x finite)."""
    return Vector([float(math.ceil(value)) for value in x])


def arange(start: int, stop: int) -> Vector:
    """The integers start, ..., stop - 1."""
    return Vector(range(start, stop))


def isfinite(x: Vector) -> Vector:
    return Vector(map(math.isfinite, x))


def _has_nan(x: Any) -> bool:
    """Whether the vector or scalar x is or holds a nan (a vector's builtin sum, a fast
    pass, is nan only if it holds one or infinities of both signs: then they are looked
    for one by one)."""
    if not isinstance(x, list):
        return x != x
    whole = sum(x)
    return whole != whole and any(map(math.isnan, x))


def maximum(x: Any, y: Any) -> Vector:
    """The larger of x and y, elementwise (nan if either is nan, as numpy's; without a
    nan, the builtin's choice is the same)."""
    return _map2(_larger if _has_nan(x) or _has_nan(y) else max, x, y)


def minimum(x: Any, y: Any) -> Vector:
    """The smaller of x and y, elementwise (nan if either is nan, as numpy's; without a
    nan, the builtin's choice is the same)."""
    if isinstance(x, list) != isinstance(y, list) and not _has_nan(y if isinstance(x, list)
                                                                    else x):
        # A vector and a scalar cap c: a entry a stays unless a > c (a nan stays).
        vector, cap = (x, y) if isinstance(x, list) else (y, x)
        return Vector([a if not a > cap else cap for a in vector])
    return _map2(_smaller if _has_nan(x) or _has_nan(y) else min, x, y)


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
    for side in (x, y):
        if isinstance(side, list) and len(side) != len(condition):
            raise ValueError(f"vectors of {len(condition)} and {len(side)} entries")
    # zip over plain lists (a scalar repeated): no Python-level indexing of a Vector.
    xs = x if isinstance(x, list) else _each_time(x)
    ys = y if isinstance(y, list) else _each_time(y)
    return Vector([a if c else b for c, a, b in zip(condition, xs, ys, strict=False)])


def clip(x: Vector, lo: Any, hi: Any) -> Vector:
    """x limited to [lo, hi], elementwise (numpy's ``clip``: min(max(x, lo), hi))."""
    return minimum(maximum(x, lo), hi)


def floor_int(x: Vector) -> Vector:
    """floor(x) as integers (x finite)."""
    return Vector(map(math.floor, x))


def ceil_int(x: Vector) -> Vector:
    """ceil(x) as integers (x finite)."""
    return Vector(map(math.ceil, x))


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


def binom_ppf(q: float, n: int, p: float) -> int:
    """The smallest k in -1..n with Pr[Binomial(n, p) <= k] >= q (-1 when q <= 0)."""
    return distributions.binom_ppf(q, n, p)


def binom_isf(q: float, n: int, p: float) -> int:
    """The smallest k in -1..n with Pr[Binomial(n, p) > k] <= q (-1 when q >= 1)."""
    return distributions.binom_isf(q, n, p)


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
    return math.nan if _has_nan(x) else max(x)


def take(x: Vector, indices: list[int]) -> Vector:
    """The entries of x at ``indices``."""
    # list's own indexing, called from C: not a Vector's __getitem__ per entry, no copy
    return Vector(map(list.__getitem__, _each_time(x), indices))


def concatenate(parts: list[Vector]) -> Vector:
    """The vectors of ``parts`` end to end."""
    return Vector([a for part in parts for a in part])


def run_totals(x: list[float], starts: list[int], ends: list[int]) -> Vector:
    """The sums of x[starts[i]:ends[i]], each added in order (runs disjoint, increasing,
    none empty)."""
    entries = list(x)  # a plain list's slices, not a Vector's
    return Vector([sum(entries[a:b]) for a, b in zip(starts, ends, strict=True)])


def runs(first: Iterable[int], last: Iterable[int]) -> Vector:
    """The integers first[i]..last[i] of every run i, end to end (runs not empty)."""
    return Vector([a for lo, hi in zip(first, last, strict=True) for a in range(lo, hi + 1)])


def half_pmf_runs(totals: Iterable[int], first: Iterable[int], last: Iterable[int]) -> Vector:
    """Pr[Binomial(t_i, 1/2) = a] for a = first[i]..last[i] of every run i, end to end:
    t! / (a! (t - a)!) 2^-t, from one table of ln j! over the range every a and t - a
    lie in (a run's splits sit around t / 2) and ln t! once per run."""
    runs_ = list(zip(totals, first, last, strict=True))
    if not runs_:
        return Vector()
    ln_fact = distributions.ln_factorial
    low = min(min(lo, t - hi) for t, lo, hi in runs_)
    high = max(max(hi, t - lo) for t, lo, hi in runs_)
    table = [ln_fact(j) for j in range(low, high + 1)]
    exp = math.exp
    log2 = math.log(2.0)
    out: list[float] = []
    for t, lo, hi in runs_:
        head = ln_fact(t) - t * log2
        out.extend([exp(head - table[a - low] - table[t - a - low]) for a in range(lo, hi + 1)])
    return Vector(out)


def segment_totals(x: Vector, starts: list[int]) -> Vector:
    """The sums (:func:`total`) of x[starts[i]:starts[i + 1]] (the last segment runs to
    the end); ``starts`` increasing from 0."""
    entries = list(x)
    ends = [*starts[1:], len(entries)]
    return Vector([distributions.compensated_sum(entries[a:b])
                   for a, b in zip(starts, ends, strict=True)])


def half_tail(trials: Vector, k: Vector) -> Vector:
    """S_c(k) = Pr[Binomial(c, 1/2) >= k], elementwise; 1 for k <= 0, 0 for k > c."""
    return _map2(distributions.half_tail, trials, k)


def poisson_pmf(k: Vector, mean: float) -> Vector:
    """Pr[Poisson(mean) = k], elementwise (0 below 0)."""
    pmf = distributions.poisson_pmf
    return Vector([pmf(a, mean) for a in k])


def poisson_outside(lo: int, hi: int, mean: float) -> float:
    """Pr[Poisson(mean) < lo] + Pr[Poisson(mean) > hi]."""
    tails = distributions.poisson_tails([lo - 1, hi], mean)
    return tails.lower[0] + tails.upper[1]


def _log1p(x: float) -> float:
    """ln(1 + x): -inf at x = -1 and nan below, as numpy's (and JavaScript's)."""
    if x > -1.0:
        return math.log1p(x)
    return -math.inf if x == -1.0 else math.nan


def log1p(x: Vector) -> Vector:
    return Vector(map(_log1p, x))


def exp(x: Vector) -> Vector:
    """e^x, elementwise (inf where it overflows, as numpy's)."""
    try:
        return Vector(map(math.exp, x))
    except OverflowError:
        return Vector(map(exp_or_inf, x))


def _expm1_or_inf(x: float) -> float:
    try:
        return math.expm1(x)
    except OverflowError:
        return math.inf


def expm1(x: Vector) -> Vector:
    """e^x - 1, elementwise (inf where it overflows, as numpy's)."""
    try:
        return Vector(map(math.expm1, x))
    except OverflowError:
        return Vector(map(_expm1_or_inf, x))


def compress(mask: Vector, x: Vector) -> Vector:
    """The entries of x where ``mask`` holds, in order."""
    if len(x) != len(mask):
        raise ValueError(f"vectors of {len(x)} and {len(mask)} entries")
    return Vector(_compress(x, mask))


def smallest(x: Vector) -> Any:
    """The smallest entry (nan if any is nan, as numpy's)."""
    return math.nan if _has_nan(x) else min(x)


def count_nonzero(x: list[float]) -> int:
    """The number of entries other than 0."""
    return len(x) - x.count(0.0)


def scatter_add(index: Vector, weights: Vector, size: int, offset: int = 0) -> Vector:
    """A vector of ``size`` zeros with each weight added, in order, at its index less
    ``offset`` (0 <= index - offset < size)."""
    out = [0.0] * size
    for at, weight in zip(index, weights, strict=True):
        out[at - offset] += weight
    return Vector(out)


def split_scatter(index: Vector, masses: Vector, share: Vector, size: int, offset: int = 0
                  ) -> Vector:
    """A vector of ``size`` zeros with each mass split between two neighbours: m (1 - w)
    computed as m - m w added at i = index - ``offset``, m w at i + 1 (0 <= i < size - 1),
    in order; the two parts are summed apart, then added."""
    lower = [0.0] * size
    raised = [0.0] * (size + 1)  # raised[i] is the mass moved up from point i
    for at, mass, fraction in zip(index, masses, share, strict=True):
        up = mass * fraction
        lower[at - offset] += mass - up
        raised[at - offset] += up
    raised.pop()
    raised.insert(0, 0.0)
    return Vector(map(operator.add, lower, raised))


def suffix_sums(x: list[float]) -> Vector:
    """s[i] = x[i] + x[i + 1] + ... + x[-1], summed from the end."""
    sums = list(accumulate(reversed(x)))
    sums.reverse()
    return Vector(sums)


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """(start, end) positions in ``indices`` of each run of consecutive values."""
    out = []
    first = 0
    for position in range(1, len(indices)):
        if indices[position] != indices[position - 1] + 1:
            out.append((first, position))
            first = position
    if indices:
        out.append((first, len(indices)))
    return out


def convolve_exact(x: list[float], y: list[float]) -> tuple[int, Vector]:
    """(shift, z): the convolution of x and y summed term by term over their non-zero
    entries (no transform rounding), z[i] being the entry at index i + shift of the full
    convolution; z starts at the first non-zero sum.

    Entries are added in the order of the direct double loop (x outer, y inner); runs of
    consecutive non-zero entries of y are added as slices, which adds the same products to
    the same entries in the same order (the JavaScript accountant's order).
    """
    xi = [i for i, value in enumerate(x) if value != 0]
    yi = [j for j, value in enumerate(y) if value != 0]
    if not xi or not yi:
        return 0, Vector([0.0])
    low = xi[0] + yi[0]
    out = [0.0] * (xi[-1] + yi[-1] - low + 1)
    runs = _runs(yi)
    if 4 * len(runs) <= len(yi):
        blocks = [(yi[start] - yi[0], y[yi[start]:yi[start] + end - start])
                  for start, end in runs]
        for i in xi:
            value = x[i]
            base = i - xi[0]
            for shift, values in blocks:
                at = base + shift
                stop = at + len(values)
                out[at:stop] = map(operator.add, out[at:stop],
                                   map(operator.mul, _each_time(value), values))
    else:
        y_pairs = [(j - yi[0], y[j]) for j in yi]
        for i in xi:
            value = x[i]
            base = i - xi[0]
            for shift, y_value in y_pairs:
                out[base + shift] += value * y_value
    return low, Vector(out)


def fft_compose(base: list[float], pair: list[float], times: int) -> Vector:
    """base * pair^{*times} (``times``-fold convolution power) by the real FFT of
    :mod:`segshuffle.core.arrays.python_fft` (lengths padded to a power of two), unclipped.
    ``base`` may be ``pair`` itself (its transform is then taken once)."""
    size = len(base) + times * (len(pair) - 1)
    n = next_power_of_two(size)
    pair_spectrum = rfft(pair, n)
    base_spectrum = pair_spectrum if base is pair else rfft(base, n)
    spectrum = multiply_spectra(base_spectrum, power_spectrum(pair_spectrum, times))
    return Vector(irfft(spectrum.re, spectrum.im, n)[:size])

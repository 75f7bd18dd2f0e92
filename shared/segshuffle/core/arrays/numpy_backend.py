"""The numpy backend of :mod:`segshuffle.core.arrays`: numpy arrays and scipy's functions.

Vectors are numpy arrays (integer vectors are int64); each function is numpy's or scipy's,
elementwise.  The special functions are :mod:`segshuffle.core.distributions`', whose
tails carry a stated relative error; the transforms are scipy's real FFT at its fast
lengths.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from contextlib import AbstractContextManager

import numpy as np
from scipy import special

from .. import distributions
from . import KERNELS

__all__ = list(KERNELS)

Vector = np.ndarray

isfinite = np.isfinite
maximum = np.maximum
minimum = np.minimum
where = np.where
clip = np.clip
exp = np.exp
expm1 = np.expm1
log1p = np.log1p
ceil = np.ceil
logical_not = np.logical_not

#: Poisson means up to which two tail values are summed by the scalar sums (numpy's cost
#: per call on two-entry arrays is larger than the sums themselves).
SCALAR_TAILS_UP_TO = 1000.0

#: An exact convolution runs numpy's direct one (dense) while its length product is at
#: most this many times the pairs of non-zero entries: the products of non-zero entries
#: (sparse) take about as long as 35 times as many multiply-adds of the direct one
#: (measured at 500 to 6,000 entries, densities 0.02 to 0.5).
_DENSE_FACTOR = 32


def vector(values: Iterable[float]) -> np.ndarray:
    """A float vector of ``values``."""
    return np.asarray(list(values), dtype=float)


def indices(values: Iterable[int]) -> np.ndarray:
    """An integer vector of ``values``."""
    return np.asarray(list(values) if not isinstance(values, np.ndarray) else values,
                      dtype=np.int64)


def log(x: np.ndarray) -> np.ndarray:
    """ln x, elementwise: -inf at 0, nan below (silently)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x)


def repeat(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each entry of x ``counts`` times, in order."""
    return np.repeat(x, counts)


def cumsum(x: np.ndarray) -> np.ndarray:
    """Running sums x[0], x[0] + x[1], ..."""
    return np.cumsum(x)


def nonzero_at(mask: np.ndarray) -> np.ndarray:
    """The indices where ``mask`` holds, increasing."""
    return np.flatnonzero(mask)


def any_true(mask: np.ndarray) -> bool:
    """Whether ``mask`` holds anywhere."""
    return bool(mask.any())


def arange(start: int, stop: int) -> np.ndarray:
    """The integers start, ..., stop - 1."""
    return np.arange(start, stop, dtype=np.int64)


def floor_int(x: np.ndarray) -> np.ndarray:
    """floor(x) as integers (x finite)."""
    return np.floor(x).astype(np.int64)


def ceil_int(x: np.ndarray) -> np.ndarray:
    """ceil(x) as integers (x finite)."""
    return np.ceil(x).astype(np.int64)


def total(x: np.ndarray) -> float:
    """The sum of the entries (numpy's pairwise summation)."""
    return float(np.sum(x))


def quiet() -> AbstractContextManager[object]:
    """Overflow and invalid operations give inf and nan silently (as Python's floats do
    where they do not raise)."""
    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def binom_pmf(k: np.ndarray, n: np.ndarray | int, p: float) -> np.ndarray:
    """Pr[Binomial(n, p) = k], elementwise (0 outside 0..n)."""
    return distributions.binom_pmf(k, n, p)


def binom_cdf(k: int | np.ndarray, n: int, p: float) -> float | np.ndarray:
    """Pr[Binomial(n, p) <= k]: a float for an integer k, elementwise over a vector."""
    value = distributions.binom_cdf(k, n, p)
    return value if isinstance(k, np.ndarray) else float(value)


def binom_sf(k: int | np.ndarray, n: int, p: float) -> float | np.ndarray:
    """Pr[Binomial(n, p) > k]: a float for an integer k, elementwise over a vector."""
    value = distributions.binom_sf(k, n, p)
    return value if isinstance(k, np.ndarray) else float(value)


def binom_ppf(q: float, n: int, p: float) -> int:
    """The smallest k in -1..n with Pr[Binomial(n, p) <= k] >= q (-1 when q <= 0)."""
    return distributions.binom_ppf(q, n, p)


def binom_isf(q: float, n: int, p: float) -> int:
    """The smallest k in -1..n with Pr[Binomial(n, p) > k] <= q (-1 when q >= 1)."""
    return distributions.binom_isf(q, n, p)


def binom_tails_range(lo: int, hi: int, n: int, p: float) -> tuple[np.ndarray, np.ndarray]:
    """(Pr[Binomial(n, p) <= t], Pr[Binomial(n, p) > t]) for t = lo..hi."""
    t = np.arange(lo, hi + 1, dtype=np.int64)
    return distributions.binom_cdf(t, n, p), distributions.binom_sf(t, n, p)


def poisson_tails(k: np.ndarray, mean: float) -> distributions.Tails:
    """Pr[Poisson(mean) <= k] and Pr[Poisson(mean) > k] at the counts ``k`` (vectors), with
    a bound on their relative error (``lower``, ``upper``, ``rtol``)."""
    return distributions.poisson_tails(k, mean)


def largest(x: np.ndarray) -> float:
    """The largest entry."""
    return float(np.max(x))


def take(x: np.ndarray, indices: list[int]) -> np.ndarray:
    """The entries of x at ``indices``."""
    return x[np.asarray(indices, dtype=np.int64)]


def concatenate(parts: list[np.ndarray]) -> np.ndarray:
    """The vectors of ``parts`` end to end."""
    return np.concatenate(parts)


def run_totals(x: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The sums of x[starts[i]:ends[i]], each added in order (runs disjoint, increasing,
    none empty)."""
    if starts.size == 0:
        return np.zeros(0)
    bounds = np.empty(2 * starts.size, dtype=np.int64)
    bounds[0::2] = starts
    bounds[1::2] = ends
    padded = np.append(x, 0.0) if bounds[-1] >= x.size else x
    # The odd segments, between one run's end and the next one's start, are dropped (where
    # the two meet, reduceat gives one entry there instead of an empty sum).
    return np.add.reduceat(padded, bounds)[0::2]


def runs(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The integers first[i]..last[i] of every run i, end to end (runs not empty)."""
    widths = last - first + 1
    starts = np.cumsum(widths) - widths
    return np.arange(int(widths.sum()), dtype=np.int64) + np.repeat(first - starts, widths)


def half_pmf_runs(totals: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Pr[Binomial(t_i, 1/2) = a] for a = first[i]..last[i] of every run i, end to end:
    t! / (a! (t - a)!) 2^-t from scipy's gammaln."""
    widths = last - first + 1
    per_run = np.asarray(totals, dtype=float)
    t = np.repeat(per_run, widths)
    a = runs(first, last).astype(float)
    # What depends on the run alone is computed once per run and repeated (the same values
    # in the same order of operations as per atom: a run has thousands of atoms).
    return np.exp(np.repeat(special.gammaln(per_run + 1.0), widths) - special.gammaln(a + 1.0)
                  - special.gammaln(t - a + 1.0) - np.repeat(per_run * math.log(2.0), widths))


def segment_totals(x: np.ndarray, starts: list[int]) -> np.ndarray:
    """The sums of x[starts[i]:starts[i + 1]] (the last segment runs to the end);
    ``starts`` increasing from 0."""
    return np.add.reduceat(x, np.asarray(starts, dtype=np.int64))


def half_tail(trials: np.ndarray, k: np.ndarray) -> np.ndarray:
    """S_c(k) = Pr[Binomial(c, 1/2) >= k], elementwise; 1 for k <= 0, 0 for k > c.

    For 1 <= k <= c it is the regularized incomplete beta I_{1/2}(k, c - k + 1).
    """
    out = np.where(k <= 0, 1.0, 0.0)
    inside = (k >= 1) & (k <= trials)
    if inside.any():
        kk = k[inside].astype(float)
        cc = trials[inside].astype(float)
        out[inside] = special.betainc(kk, cc - kk + 1.0, 0.5)
    return out


def poisson_pmf(k: np.ndarray, mean: float) -> np.ndarray:
    """Pr[Poisson(mean) = k], elementwise (0 below 0)."""
    return distributions.poisson_pmf(k, mean)


def poisson_outside(lo: int, hi: int, mean: float) -> float:
    """Pr[Poisson(mean) < lo] + Pr[Poisson(mean) > hi]."""
    if mean <= SCALAR_TAILS_UP_TO:
        scalar = distributions.scalar_poisson_tails([lo - 1, hi], mean)
        return scalar.lower[0] + scalar.upper[1]
    tails = distributions.poisson_tails(np.array([lo - 1, hi]), mean)
    return float(tails.lower[0] + tails.upper[1])


def compress(mask: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The entries of x where ``mask`` holds, in order."""
    return x[mask]


def smallest(x: np.ndarray) -> float | int:
    """The smallest entry (an int for an integer vector)."""
    return x.min().item()


def count_nonzero(x: np.ndarray) -> int:
    """The number of entries other than 0."""
    return int(np.count_nonzero(x))


def scatter_add(index: np.ndarray, weights: np.ndarray, size: int, offset: int = 0
                ) -> np.ndarray:
    """A vector of ``size`` zeros with each weight added, in order, at its index less
    ``offset`` (0 <= index - offset < size)."""
    return np.bincount(index - offset, weights=weights, minlength=size)


def split_scatter(index: np.ndarray, masses: np.ndarray, share: np.ndarray, size: int,
                  offset: int = 0) -> np.ndarray:
    """A vector of ``size`` zeros with each mass split between two neighbours: m (1 - w)
    computed as m - m w added at i = index - ``offset``, m w at i + 1 (0 <= i < size - 1);
    the two parts are summed apart, then added."""
    up = masses * share
    at = index - offset
    return (np.bincount(at, weights=masses - up, minlength=size)
            + np.bincount(at + 1, weights=up, minlength=size))


def suffix_sums(x: np.ndarray) -> np.ndarray:
    """s[i] = x[i] + x[i + 1] + ... + x[-1], summed from the end."""
    return np.cumsum(x[::-1])[::-1]


def convolve_exact(x: np.ndarray, y: np.ndarray) -> tuple[int, np.ndarray]:
    """(shift, z): the convolution of x and y summed term by term (no transform rounding),
    z[i] being the entry at index i + shift of the full convolution.

    numpy's direct convolution when the vectors are dense, else the products of the
    non-zero entries only (then z starts at the first non-zero sum)."""
    xi, yi = np.flatnonzero(x), np.flatnonzero(y)
    if xi.size == 0 or yi.size == 0:
        return 0, np.zeros(1)
    if x.size * y.size <= _DENSE_FACTOR * xi.size * yi.size:
        return 0, np.convolve(x, y)
    sums = (xi[:, None] + yi[None, :]).ravel()
    low = int(sums.min())
    return low, np.bincount(sums - low, weights=np.outer(x[xi], y[yi]).ravel())


def fft_compose(base: np.ndarray, pair: np.ndarray, times: int) -> np.ndarray:
    """base * pair^{*times} (``times``-fold convolution power) by real FFT, unclipped: the
    entries of the exact result are non-negative, the computed ones carry the transform's
    rounding.  ``base`` may be ``pair`` itself (its transform is then taken once)."""
    from scipy import fft  # imported on first use: many checks never need a transform

    size = base.size + times * (pair.size - 1)
    n = fft.next_fast_len(size, real=True)
    pair_spectrum = fft.rfft(pair, n)
    base_spectrum = pair_spectrum if base is pair else fft.rfft(base, n)
    return fft.irfft(base_spectrum * pair_spectrum**times, n)[:size]

"""Binomial and Poisson probabilities without ``scipy.stats``.

The accountant needs point masses, logarithms of masses, tails and quantiles of
Binomial and Poisson laws.  ``scipy.stats`` provides them but costs about 0.6 s of
CPU to import and about 0.3 ms of argument checking per call, more than the
accountant's own work in a command-line ``audit`` or ``optimize``.  This module
computes binomial tails from the regularized incomplete beta function (scipy's
``betainc``/``betaincc``, which are Boost's), Poisson tails as sums of point masses,
and point masses with the saddle-point expansion of Catherine Loader ("Fast and accurate computation
of binomial probabilities", 2000), the method behind R's ``dbinom``/``dpois``:

    Binomial(n, p) at 0 < k < n:
        f(k) = exp(-(D(k, n p) + D(n - k, n q)) + e(n) - e(k) - e(n - k))
               * sqrt(n / (2 pi k (n - k))),
    Poisson(mu) at k >= 1:
        f(k) = exp(-D(k, mu) - e(k)) / sqrt(2 pi k),

where q = 1 - p, e(x) = ln x! - (x + 1/2) ln x + x - ln sqrt(2 pi) is the Stirling
remainder and D(x, M) = x ln(x / M) + M - x >= 0 the deviance.  Both are small
numbers computed without cancellation: e(x) from its asymptotic series (five terms,
truncation below 3e-16 of e for x > 15; ``gammaln`` below), and D(x, M), when x is
within 10% of M, from

    D(x, M) = (x - M) v + 2 x sum_{j >= 1} v^(2j + 1) / (2j + 1),  v = (x - M) / (x + M),

a series whose terms fall by v^2 <= 0.0028 each (fourteen terms are far beyond
double precision).  Against 40-digit arithmetic the binomial masses are within a few
1e-12 relative up to n = 1e9 (as Boost's, which scipy.stats uses: the error is the
rounding of n p itself), and the Poisson masses within 1e-15 at every mean, where
scipy.stats' Poisson mass (exp(k ln mu - mu - ln k!)) loses about mu * 1e-16
relative (1e-6 at mu = 1e9).  The test suite checks both against mpmath; the
accountant charges a relative margin of 1e-9 on every published delta besides.

Every tail comes with a bound on its relative error (BINOMIAL_TAIL_RTOL, and the
``rtol`` of :func:`poisson_tails`), well inside that margin, so that a comparison of
two tails that must hold to an absolute precision far below it (the Poisson slack of
:mod:`segshuffle.core.poisson_comparison`) can be widened by exactly what rounding
could hide.  scipy's Cephes tails (``bdtr``, ``bdtrc``, ``pdtr``, ``pdtrc``) are not
used: from about a million trials they are off by more than the margin.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import special

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

#: Terms of the deviance series (|v| < 1/19 where it is used: v^28 < 1e-35).
_DEVIANCE_TERMS = 14

#: Below this argument the Stirling remainder comes from gammaln (no cancellation to
#: speak of: ln x! < 28 there), above it from the series.
_STIRLING_SERIES_FROM = 15.0


def stirling_remainder(x: np.ndarray) -> np.ndarray:
    """e(x) = ln x! - (x + 1/2) ln x + x - ln sqrt(2 pi), for x > 0 (0 returned at x = 0,
    where the masses that would need it, at k = 0 and k = n, are computed directly)."""
    x = np.asarray(x, dtype=float)
    out = np.zeros_like(x)
    small = (x > 0.0) & (x <= _STIRLING_SERIES_FROM)
    if small.any():
        xs = x[small]
        out[small] = special.gammaln(xs + 1.0) - (xs + 0.5) * np.log(xs) + xs - _LOG_SQRT_2PI
    large = x > _STIRLING_SERIES_FROM
    if large.any():
        inv = 1.0 / x[large]
        inv2 = inv * inv
        out[large] = inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (
            1.0 / 1260.0 - inv2 * (1.0 / 1680.0 - inv2 / 1188.0))))
    return out


def deviance(x: np.ndarray, mean: np.ndarray | float) -> np.ndarray:
    """D(x, M) = x ln(x / M) + M - x (0 ln 0 = 0), accurate where x is close to M."""
    x = np.asarray(x, dtype=float)
    mean = np.broadcast_to(np.asarray(mean, dtype=float), x.shape)
    out = np.empty_like(x)
    near = np.abs(x - mean) < 0.1 * (x + mean)
    far = ~near
    if far.any():
        xf, mf = x[far], mean[far]
        with np.errstate(divide="ignore", invalid="ignore"):
            out[far] = np.where(xf > 0.0, xf * np.log(xf / mf), 0.0) + mf - xf
    if near.any():
        xn, mn = x[near], mean[near]
        v = (xn - mn) / (xn + mn)
        v2 = v * v
        term = 2.0 * xn * v
        total = (xn - mn) * v
        for j in range(1, _DEVIANCE_TERMS + 1):
            term = term * v2
            total = total + term / (2 * j + 1)
        out[near] = total
    return out


def binom_logpmf(k: np.ndarray | int, n: np.ndarray | int, p: float) -> np.ndarray:
    """ln Pr[Binomial(n, p) = k], elementwise (-inf outside 0..n)."""
    k, n = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
    q = 1.0 - p
    out = np.full(k.shape, -np.inf)
    log_p = math.log(p) if p > 0.0 else -math.inf
    log_q = math.log1p(-p) if p < 1.0 else -math.inf
    zero, full = (k == 0) & (n >= 0), (k == n) & (n > 0)
    if zero.any():  # q^n: n log1p(-p) is accurate for every p (and 1 at n = 0, even p = 1)
        trials = n[zero]
        out[zero] = np.where(trials > 0, trials * log_q if log_q > -math.inf else -math.inf,
                             0.0)
    if full.any():
        out[full] = n[full] * log_p
    inside = (k > 0) & (k < n)
    if inside.any() and 0.0 < p < 1.0:
        ki, ni = k[inside], n[inside]
        rest = ni - ki
        log_core = (stirling_remainder(ni) - stirling_remainder(ki) - stirling_remainder(rest)
                    - deviance(ki, ni * p) - deviance(rest, ni * q))
        out[inside] = log_core + 0.5 * (np.log(ni) - np.log(ki) - np.log(rest)) - _LOG_SQRT_2PI
    return out


def binom_pmf(k: np.ndarray | int, n: np.ndarray | int, p: float) -> np.ndarray:
    """Pr[Binomial(n, p) = k], elementwise (0 outside 0..n)."""
    return np.exp(binom_logpmf(k, n, p))


def poisson_pmf(k: np.ndarray | int, mean: float) -> np.ndarray:
    """Pr[Poisson(mean) = k], elementwise (0 below 0)."""
    k = np.asarray(k, dtype=float)
    out = np.zeros(k.shape)
    out[k == 0] = math.exp(-mean)
    positive = k > 0
    if positive.any() and mean > 0.0:
        kp = k[positive]
        out[positive] = (np.exp(-deviance(kp, mean) - stirling_remainder(kp))
                         / np.sqrt(2.0 * math.pi * kp))
    return out


#: A bound on the relative error of :func:`binom_cdf` and :func:`binom_sf`.  They are
#: the regularized incomplete beta function and its complement (scipy's ``betainc`` and
#: ``betaincc``, Boost's ``ibeta``/``ibetac`` since scipy 1.11): Pr[Binomial(n, p) <= k]
#: = 1 - I_p(k + 1, n - k), Pr[Binomial(n, p) > k] = I_p(k + 1, n - k).  Against
#: 40-digit sums of exact masses (tests/test_distributions.py) they are within 1.6e-14
#: (lower) and 4.7e-11 (upper) from n = 1e3 to 1e9, over p from 1e-4 to 0.9 and k from
#: 30 standard deviations below the mean to 30 above; the bound allows twice that.  (The
#: Cephes routines ``bdtr``/``bdtrc`` that scipy also offers lose 2.8e-3 near the mean
#: of Binomial(1e7, 0.3).)
BINOMIAL_TAIL_RTOL = 1e-10

#: Rounding of one Poisson mass (Loader's expansion, within 1e-15 of 40-digit values
#: at every mean the tests reach), allowed in :func:`poisson_tail_rtol`.
_POISSON_MASS_RTOL = 1e-14

#: A summed tail leaves out masses whose total is below 2^-60 of its first one.
_TAIL_CUTOFF_LOG = -60.0 * math.log(2.0)


def _tail_arguments(k: np.ndarray | int, n: np.ndarray | int
                    ) -> tuple[np.ndarray, np.ndarray, bool]:
    scalar = np.ndim(k) == 0 and np.ndim(n) == 0
    k, n = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
    return k, n, scalar


def _shaped(values: np.ndarray, scalar: bool) -> np.ndarray | float:
    return float(values) if scalar else values


def _binomial_tail(k: np.ndarray | int, n: np.ndarray | int, p: float, *, upper: bool
                   ) -> np.ndarray | float:
    """Pr[Binomial(n, p) > k] (``upper``) or <= k, elementwise: I_p(k + 1, n - k) by
    ``betainc``, or its complement by ``betaincc``; each side's value off the support is
    what the law gives there.  A float for scalar arguments."""
    incomplete_beta = special.betainc if upper else special.betaincc
    below, above = (1.0, 0.0) if upper else (0.0, 1.0)
    if isinstance(k, int) and isinstance(n, int):  # the quantile searches' fast path
        return below if k < 0 else above if k >= n else float(incomplete_beta(k + 1, n - k, p))
    k, n, scalar = _tail_arguments(k, n)
    out = np.where(k < 0, below, above)
    inside = (k >= 0) & (k < n)
    if inside.any():
        ki = np.floor(k[inside])
        out[inside] = incomplete_beta(ki + 1.0, n[inside] - ki, p)
    return _shaped(out, scalar)


def binom_cdf(k: np.ndarray | int, n: np.ndarray | int, p: float) -> np.ndarray | float:
    """Pr[Binomial(n, p) <= k], elementwise: 0 below the support, 1 from its top on;
    1 - I_p(k + 1, n - k) by ``betaincc``, relative error below BINOMIAL_TAIL_RTOL."""
    return _binomial_tail(k, n, p, upper=False)


def binom_sf(k: np.ndarray | int, n: np.ndarray | int, p: float) -> np.ndarray | float:
    """Pr[Binomial(n, p) > k], elementwise: 1 below the support, 0 from its top on;
    I_p(k + 1, n - k) by ``betainc``, relative error below BINOMIAL_TAIL_RTOL."""
    return _binomial_tail(k, n, p, upper=True)


def poisson_logpmf(k: np.ndarray | int, mean: float) -> np.ndarray:
    """ln Pr[Poisson(mean) = k] for mean > 0, elementwise (-inf below 0)."""
    k = np.asarray(k, dtype=float)
    out = np.full(k.shape, -np.inf)
    out[k == 0] = -mean
    positive = k > 0
    if positive.any():
        kp = k[positive]
        out[positive] = (-deviance(kp, mean) - stirling_remainder(kp)
                         - 0.5 * np.log(kp) - _LOG_SQRT_2PI)
    return out


def _log_mass(k: int, mean: float) -> float:
    return float(poisson_logpmf(np.array([float(k)]), mean)[0])


def _lower_window_start(k: int, mean: float) -> int:
    """The first count a of the sum of Pr[Poisson(mean) = j], a <= j <= k (k < mean).

    For j <= a the masses fall going down by f(j - 1) / f(j) = j / mean <= r = a / mean,
    so the masses below a total at most f(a) r / (1 - r); a is moved down (doubling the
    distance) until that is below 2^-60 f(k), or to 0 (nothing left out).
    """
    top = _log_mass(k, mean)
    width = 16
    while True:
        a = k - width
        if a <= 0:
            return 0
        r = a / mean
        if _log_mass(a, mean) + math.log(r / (1.0 - r)) <= top + _TAIL_CUTOFF_LOG:
            return a
        width *= 2


def _upper_window_end(k: int, mean: float) -> int:
    """The last count b of the sum of Pr[Poisson(mean) = j], k < j <= b (k >= mean - 1).

    For j >= b the masses fall by f(j + 1) / f(j) = mean / (j + 1) <= r = mean / (b + 1),
    so the masses above b total at most f(b) r / (1 - r); b is moved up (doubling) until
    that is below 2^-60 f(k + 1).
    """
    first = _log_mass(k + 1, mean)
    width = 16
    while True:
        b = k + 1 + width
        r = mean / (b + 1.0)
        if r < 1.0 and _log_mass(b, mean) + math.log(r / (1.0 - r)) <= first + _TAIL_CUTOFF_LOG:
            return b
        width *= 2


class Tails(NamedTuple):
    """Both tails of a law at counts k, and a bound on their relative error."""

    lower: np.ndarray  #: Pr[X <= k]
    upper: np.ndarray  #: Pr[X > k]
    rtol: float


def _summed_tail_rtol(terms: int) -> float:
    """The relative error of a summed tail of ``terms`` masses and of 1 minus it.

    Each mass is within _POISSON_MASS_RTOL; a running sum of L positive terms is within
    (L - 1) u of the exact sum (u = 2^-53); the masses left out are below 2^-60 of it.
    The other tail, 1 minus the sum, holds at least 1/e of the mass (the mode never
    splits a Poisson law more unevenly: Pr[X <= floor(mean)] >= 1/e and Pr[X >=
    floor(mean)] >= 1/2), so its relative error is at most e times that plus a rounding;
    the factor 4 covers both.
    """
    return 4.0 * (terms * 2.0 ** -53 + _POISSON_MASS_RTOL + 2.0 ** -60)


#: Counts farther apart than this many standard deviations are summed in separate windows
#: (one window from 0 to the mode would add millions of masses at a large mean).
_WINDOW_GAP_SIGMAS = 2.0


def _clusters(counts: np.ndarray, gap: float) -> list[tuple[int, int]]:
    """(first, last) of each run of sorted distinct ``counts`` with steps of at most gap."""
    values = np.unique(counts)
    breaks = np.flatnonzero(np.diff(values) > gap)
    firsts = np.concatenate(([0], breaks + 1))
    lasts = np.concatenate((breaks, [values.size - 1]))
    return [(int(values[i]), int(values[j])) for i, j in zip(firsts, lasts, strict=True)]


def poisson_tails(k: np.ndarray | int, mean: float) -> Tails:
    """Pr[Poisson(mean) <= k] and Pr[Poisson(mean) > k], elementwise, with their error.

    The tail away from the mode is summed from Loader's masses (below the mode the
    lower tail from k down, above it the upper tail from k + 1 up, each window widened
    until what it leaves out is provably below 2^-60 of its first mass; counts far
    apart get windows of their own) and the other tail is 1 minus it.  Within a
    relative 4e-11 for means up to 1e7 (the accountant's cap) where the counts asked
    span at most 28 standard deviations; Cephes' ``pdtrc``, which scipy offers, is
    3.1e-2 off five standard deviations above a mean of 1e7.
    """
    k = np.floor(np.asarray(k, dtype=float))
    lower = np.where(k < 0, 0.0, 1.0)
    if mean <= 0.0:
        return Tails(lower, 1.0 - lower, 0.0)
    mode, terms = math.floor(mean), 0
    gap = max(64.0, _WINDOW_GAP_SIGMAS * math.sqrt(mean))
    below = (k >= 0) & (k < mode)
    for kmin, kmax in _clusters(k[below], gap) if below.any() else ():
        a = _lower_window_start(kmin, mean)
        sums = np.cumsum(poisson_pmf(np.arange(a, kmax + 1, dtype=float), mean))
        here = below & (k >= kmin) & (k <= kmax)
        lower[here] = sums[(k[here] - a).astype(np.int64)]
        terms = max(terms, sums.size)
    upper = 1.0 - lower
    above = k >= mode
    for kmin, kmax in _clusters(k[above], gap) if above.any() else ():
        b = _upper_window_end(kmax, mean)
        masses = poisson_pmf(np.arange(kmin + 1, b + 1, dtype=float), mean)
        sums = np.cumsum(masses[::-1])[::-1]  # sums[i]: the masses from kmin + 1 + i up
        here = above & (k >= kmin) & (k <= kmax)
        upper[here] = sums[(k[here] - kmin).astype(np.int64)]
        lower[here] = 1.0 - upper[here]
        terms = max(terms, sums.size)
    return Tails(lower, upper, _summed_tail_rtol(terms))


def poisson_cdf(k: np.ndarray | int, mean: float) -> np.ndarray | float:
    """Pr[Poisson(mean) <= k] (:func:`poisson_tails`); a float for a scalar k."""
    return _shaped(poisson_tails(k, mean).lower, np.ndim(k) == 0)


def poisson_sf(k: np.ndarray | int, mean: float) -> np.ndarray | float:
    """Pr[Poisson(mean) > k] (:func:`poisson_tails`); a float for a scalar k."""
    return _shaped(poisson_tails(k, mean).upper, np.ndim(k) == 0)


def binom_ppf(q: float, n: int, p: float) -> int:
    """The smallest k in -1..n with Pr[Binomial(n, p) <= k] >= q (-1 when q <= 0).

    A bisection on :func:`binom_cdf` over the support: at most log2(n + 2) + 1 evaluations.
    """
    if q <= 0.0:
        return -1
    lo, hi = -1, n  # cdf(-1) = 0 < q <= cdf(n) = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if binom_cdf(mid, n, p) >= q:
            hi = mid
        else:
            lo = mid
    return hi


def binom_isf(q: float, n: int, p: float) -> int:
    """The smallest k in -1..n with Pr[Binomial(n, p) > k] <= q (-1 when q >= 1).

    A bisection on :func:`binom_sf` (the upper tail, accurate where it is small).
    """
    if q >= 1.0:
        return -1
    lo, hi = -1, n  # sf(-1) = 1 > q >= sf(n) = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if binom_sf(mid, n, p) <= q:
            hi = mid
        else:
            lo = mid
    return hi

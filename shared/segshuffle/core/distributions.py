"""Binomial and Poisson probabilities without ``scipy.stats``.

The accountant needs point masses, logarithms of masses, tails and quantiles of
Binomial and Poisson laws.  ``scipy.stats`` provides them but costs about 0.6 s of
CPU to import and about 0.3 ms of argument checking per call, more than the
accountant's own work in a command-line ``audit`` or ``optimize``.  This module
computes binomial tails from the regularized incomplete beta function (scipy's
``betainc``/``betaincc``, which are Boost's) and, where that is not accurate enough, as
sums of point masses (below), Poisson tails as sums of point masses, and point masses
with the saddle-point expansion of Catherine Loader ("Fast and accurate computation
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

**Binomial tails, what is used where.**  Pr[X <= k] = 1 - I_p(k + 1, n - k) and
Pr[X > k] = I_p(k + 1, n - k) for X ~ Binomial(n, p), 0 <= k < n.  Against 50-digit
sums of exact masses (tests/test_binomial_tail_accuracy.py; a scan of n from 1e3 to
4e15, p from 1e-15 to 1 - 1e-9, k at 0, 1, 3 and 6 sd either side of the mean and at
every count below 39):

- *Small counts*, k < 39 while 1 - p is not a double (p < 1/2 with low bits set):
  Boost sums the binomial series itself when a = k + 1 < 40 (and n < 2^31), with
  1 - p rounded, which costs about n |fl(1 - p) - (1 - p)| <= n 2^-54 relative:
  ``betainc`` was off by up to 7e-8 in the bulk (n just below 2^31; 1.5e-8 at
  Binomial(1e9, 3.2e-8), k = 31; 1.7e-10 at 1e7 trials, 2e-11 at 1e6), ``betaincc``
  by up to 2.4e-11.  Both tails are taken from
  :mod:`segshuffle.core.arrays.python_distributions` instead, sums of Loader's masses:
  below the mean the lower tail, from k down (at most k + 1 masses), above it the
  upper tail from k + 1 up, each until what is left is provably below 2^-60 of the
  sum; the other tail is one minus it.  Within 7.7e-14 relative and 1.9e-15 absolute.
  Where 1 - p is a double (every p >= 1/2, or p = 2^-25) Boost's sums are within
  1e-14 and are kept.
- *Lower tails* elsewhere: ``betaincc``, within 5.1e-13 up to 1e14 trials and 1.0e-11
  at Binomial(1e15, 0.3).
- *Upper tails* elsewhere: ``betainc`` up to 1e9 trials, within 2.0e-11 there (six sd
  above the mean of Binomial(4.6e8, 0.46)).  Beyond, it loses where the mean is large
  (5.6e-11 at 1e10 trials, 3.8e-10 six sd above the mean of Binomial(1e12, 1/2),
  4.5e-10 three sd above that of Binomial(1e14, 0.01), 9.8e-9 six sd above that of
  Binomial(1e15, 0.3) and 1.3e-9 at it), while the lower tail of the mirrored law
  stays accurate.  So from p = 2^-20 on, Pr[X > k] = Pr[Binomial(n, 1 - p) <=
  n - k - 1], taken as ``betaincc(n - k, k + 1, q)`` with q = fl(1 - p): that is the
  upper tail at p' = 1 - q (exact), |p - p'| <= 2^-54, and the difference is added as

      integral_{p'}^{p} n Pr[Binomial(n - 1, t) = k] dt
          = g s (1 - s (k - (n - 1) p) / (2 p q) + ...),   g = (k + 1) f(k + 1) / p,

  s = p - p', with Loader's mass f: at most 7e-5 of the tail (n = 1e15, p = 2^-20,
  37 sd out; the second-order part 2.3e-9), the third order below 1e-13.  Measured
  within 3.1e-13 up to 1e14 trials and 2.9e-12 at 1e15.  Below p = 2^-20 (means up to
  1e9 at the accountant's largest n, MAX_USERS times 1024 slots) ``betainc`` is kept,
  within 2.0e-11 (six sd above the mean of Binomial(4e15, 2.5e-7)); where
  k + 1 <= n p, so that the upper tail is at least 1/2, it is 1 - ``betaincc`` instead
  (1.2e-14 absolute there, not 1.2e-12).  (``betaincc`` costs four to five times what
  ``betainc`` does, so the mirror is kept to the laws that need it.)

The worst relative error seen over the scan is 2.0e-11 (7e-8 before the small counts
and the mirror; over 700 random points 2.9e-12, against 1.1e-9 before), inside
BINOMIAL_TAIL_RTOL = 1e-10.  The cost: a small count is at most a few dozen
pure-Python masses (1 to 45 us a tail, against 2 to 5 us for Boost's sum); beyond 1e9
trials an upper tail costs one ``betaincc`` instead of a ``betainc``, plus one mass
where 1 - p is inexact (about 3 us); elsewhere nothing changes.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

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


#: A bound on the relative error of :func:`binom_cdf` and :func:`binom_sf` (module
#: docstring: how each tail is computed where, and what was measured against 50-digit
#: sums of exact masses up to 4e15 trials; the worst seen is 2.0e-11, the bound allows
#: five times that).  (The Cephes routines ``bdtr``/``bdtrc`` that scipy also offers
#: lose 2.8e-3 near the mean of Binomial(1e7, 0.3).)
BINOMIAL_TAIL_RTOL = 1e-10

#: Counts k below this are the small counts of the module docstring: Boost sums the
#: binomial series itself when a = k + 1 < 40, with 1 - p rounded.
_SMALL_COUNTS = 39

#: Up to this many trials ``betainc`` gives the upper tail (module docstring).
_BETAINC_UPPER_UP_TO = 10**9

#: Beyond that, from this p on the upper tail is taken as the lower tail of the mirrored
#: law Binomial(n, 1 - p) (module docstring); below it ``betainc`` is accurate as it is.
_MIRROR_FROM = 2.0 ** -20

#: Rounding of one Poisson mass (Loader's expansion, within 1e-15 of 40-digit values
#: at every mean the tests reach), allowed in :func:`poisson_tail_rtol`.
_POISSON_MASS_RTOL = 1e-14



def _tail_arguments(k: np.ndarray | int, n: np.ndarray | int
                    ) -> tuple[np.ndarray, np.ndarray, bool]:
    scalar = np.ndim(k) == 0 and np.ndim(n) == 0
    k, n = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
    return k, n, scalar


def _shaped(values: np.ndarray, scalar: bool) -> np.ndarray | float:
    return float(values) if scalar else values


def _python_distributions():
    """The numpy-free :mod:`segshuffle.core.arrays.python_distributions` (imported on first use:
    about 30 ms to import)."""
    from .arrays import python_distributions as portable

    return portable


def _mirror_slack(p: float) -> tuple[float, float]:
    """(q, s): q = 1 - p rounded to a double, and s = p - (1 - q), exactly (0 where 1 - p
    is a double, as for every p >= 1/2; |s| <= 2^-54 otherwise)."""
    q = 1.0 - p
    return q, p - (1.0 - q)  # 1 - q is exact (Sterbenz), and so is the difference


def _mirror_correction(k: np.ndarray | int, n: np.ndarray | int, p: float, q: float,
                       slack: float) -> np.ndarray | float:
    """The integral over [1 - q, p] of n Pr[Binomial(n - 1, t) = k] dt, to second order in
    the slack s = p - (1 - q): g s (1 - s (k - (n - 1) p) / (2 p q)), g = (k + 1) f(k + 1) / p
    (module docstring).  Scalars through the pure-Python mass, arrays through numpy's."""
    if np.ndim(k) == 0 and np.ndim(n) == 0:
        mass = _python_distributions().binom_pmf(k + 1, n, p)
    else:
        mass = binom_pmf(k + 1.0, n, p)
    return (k + 1.0) / p * mass * slack * (1.0 - 0.5 * slack * (k - (n - 1.0) * p) / (p * q))


def _upper_scalar(k: int, n: int, p: float, q: float, slack: float) -> float:
    """Pr[Binomial(n, p) > k] for 0 <= k < n outside the small counts (module docstring)."""
    if n <= _BETAINC_UPPER_UP_TO or (p < _MIRROR_FROM and k + 1 > n * p):
        return float(special.betainc(k + 1, n - k, p))
    if p < _MIRROR_FROM:  # k + 1 <= n p, so the tail is at least 1/2: one minus the other
        return 1.0 - float(special.betaincc(k + 1, n - k, p))
    value = float(special.betaincc(n - k, k + 1, q))
    return value + _mirror_correction(k, n, p, q, slack) if slack else value


def _upper_array(k: np.ndarray, n: np.ndarray, p: float, q: float, slack: float
                 ) -> np.ndarray:
    """:func:`_upper_scalar`, elementwise."""
    out = np.empty(k.shape)
    large = n > _BETAINC_UPPER_UP_TO
    if p < _MIRROR_FROM:
        complement, mirror = large & (k + 1.0 <= n * p), np.zeros(k.shape, dtype=bool)
    else:
        complement, mirror = np.zeros(k.shape, dtype=bool), large
    direct = ~(complement | mirror)
    if direct.any():
        out[direct] = special.betainc(k[direct] + 1.0, n[direct] - k[direct], p)
    if complement.any():
        out[complement] = 1.0 - special.betaincc(k[complement] + 1.0,
                                                 n[complement] - k[complement], p)
    if mirror.any():
        km, nm = k[mirror], n[mirror]
        values = special.betaincc(nm - km, km + 1.0, q)
        out[mirror] = values + _mirror_correction(km, nm, p, q, slack) if slack else values
    return out


def _binomial_tail(k: np.ndarray | int, n: np.ndarray | int, p: float, *, upper: bool
                   ) -> np.ndarray | float:
    """Pr[Binomial(n, p) > k] (``upper``) or <= k, elementwise, as the module docstring
    says (each side's value off the support is what the law gives there).  A float for
    scalar arguments."""
    below, above = (1.0, 0.0) if upper else (0.0, 1.0)
    q, slack = _mirror_slack(p)
    if isinstance(k, int) and isinstance(n, int):  # the quantile searches' fast path
        if k < 0 or k >= n:
            return below if k < 0 else above
        if slack and k < _SMALL_COUNTS:
            portable = _python_distributions()
            return portable.binom_sf(k, n, p) if upper else portable.binom_cdf(k, n, p)
        if upper:
            return _upper_scalar(k, n, p, q, slack)
        return float(special.betaincc(k + 1, n - k, p))
    k, n, scalar = _tail_arguments(k, n)
    out = np.where(k < 0, below, above)
    inside = (k >= 0) & (k < n)
    if inside.any():
        ki, ni = np.floor(k[inside]), n[inside]
        values = np.empty(ki.shape)
        small = ki < _SMALL_COUNTS if slack else np.zeros(ki.shape, dtype=bool)
        rest = ~small
        if rest.any():
            kr, nr = ki[rest], ni[rest]
            values[rest] = (_upper_array(kr, nr, p, q, slack) if upper
                            else special.betaincc(kr + 1.0, nr - kr, p))
        if small.any():  # at most _SMALL_COUNTS counts per number of trials
            portable = _python_distributions()
            tail = portable.binom_sf if upper else portable.binom_cdf
            values[small] = [tail(int(a), int(b), p)
                             for a, b in zip(ki[small].tolist(), ni[small].tolist(),
                                             strict=True)]
        out[inside] = values
    return _shaped(out, scalar)


def binom_cdf(k: np.ndarray | int, n: np.ndarray | int, p: float) -> np.ndarray | float:
    """Pr[Binomial(n, p) <= k], elementwise: 0 below the support, 1 from its top on;
    1 - I_p(k + 1, n - k) by ``betaincc`` (summed masses at small counts: module
    docstring), relative error below BINOMIAL_TAIL_RTOL."""
    return _binomial_tail(k, n, p, upper=False)


def binom_sf(k: np.ndarray | int, n: np.ndarray | int, p: float) -> np.ndarray | float:
    """Pr[Binomial(n, p) > k], elementwise: 1 below the support, 0 from its top on;
    I_p(k + 1, n - k) by ``betainc`` up to 1e9 trials, beyond by ``betaincc`` on the
    mirrored law (summed masses at small counts: module docstring), relative error below
    BINOMIAL_TAIL_RTOL."""
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
    mode = math.floor(mean)
    gap = max(64.0, _WINDOW_GAP_SIGMAS * math.sqrt(mean))
    if mean > 0.0 and _one_run_a_side(k, gap):
        return _run_tails(k, mean, mode)
    lower = np.where(k < 0, 0.0, 1.0)
    if mean <= 0.0:
        return Tails(lower, 1.0 - lower, 0.0)
    terms = 0
    below = (k >= 0) & (k < mode)
    for kmin, kmax in _clusters(k[below], gap) if below.any() else ():
        a = _python_distributions().lower_window_start(kmin, mean)
        sums = np.cumsum(poisson_pmf(np.arange(a, kmax + 1, dtype=float), mean))
        here = below & (k >= kmin) & (k <= kmax)
        lower[here] = sums[(k[here] - a).astype(np.int64)]
        terms = max(terms, sums.size)
    upper = 1.0 - lower
    above = k >= mode
    for kmin, kmax in _clusters(k[above], gap) if above.any() else ():
        b = _python_distributions().upper_window_end(kmax, mean)
        masses = poisson_pmf(np.arange(kmin + 1, b + 1, dtype=float), mean)
        sums = np.cumsum(masses[::-1])[::-1]  # sums[i]: the masses from kmin + 1 + i up
        here = above & (k >= kmin) & (k <= kmax)
        upper[here] = sums[(k[here] - kmin).astype(np.int64)]
        lower[here] = 1.0 - upper[here]
        terms = max(terms, sums.size)
    return Tails(lower, upper, _summed_tail_rtol(terms))


def _one_run_a_side(k: np.ndarray, gap: float) -> bool:
    """Whether the counts ``k`` are non-negative and non-decreasing in steps of at most
    ``gap``: then each side of the mode is one window of :func:`poisson_tails`."""
    if k.ndim != 1 or k.size == 0 or k[0] < 0:
        return False
    if k.size == 1:
        return True
    steps = np.diff(k)
    return bool(steps.min() >= 0 and steps.max() <= gap)


def _run_tails(k: np.ndarray, mean: float, mode: int) -> Tails:
    """:func:`poisson_tails` at non-decreasing counts ``k`` forming one window a side of the mode
    (:func:`_one_run_a_side`), with the masses of both windows from one array.

    The same windows as the general path (the lower from lower_window_start(k[0]) up, the
    upper from the first count at or above the mode up to upper_window_end(k[-1])), the
    same masses elementwise and the same running sums (a prefix sum does not depend on
    where it stops, nor a suffix sum, taken from the top, on where it starts): the same
    values and the same error bound, bit for bit, at a third of the cost per call on the
    Poisson comparisons' windows, where the general path's per-call work (distinct
    counts, clusters, masks, two mass arrays) was most of it.
    """
    portable = _python_distributions()
    split = int(np.searchsorted(k, mode))  # k[:split] < mode <= k[split:]
    first = portable.lower_window_start(int(k[0]), mean) if split > 0 else int(k[split]) + 1
    last = (portable.upper_window_end(int(k[-1]), mean) if split < k.size
            else int(k[split - 1]))
    masses = poisson_pmf(np.arange(first, last + 1, dtype=float), mean)
    offsets = (k - first).astype(np.int64)
    lower, upper, terms = np.empty(k.size), np.empty(k.size), 0
    if split > 0:
        sums = np.cumsum(masses[: int(k[split - 1]) - first + 1])
        lower[:split] = sums[offsets[:split]]
        upper[:split] = 1.0 - lower[:split]
        terms = sums.size
    if split < k.size:
        skip = int(k[split]) + 1 - first  # the upper sums start above the first such count
        sums = np.cumsum(masses[skip:][::-1])[::-1]
        upper[split:] = sums[offsets[split:] - skip + 1]
        lower[split:] = 1.0 - upper[split:]
        terms = max(terms, sums.size)
    return Tails(lower, upper, _summed_tail_rtol(terms))


def scalar_poisson_tails(counts: list[int], mean: float) -> Any:
    """:func:`poisson_tails` at a few counts by the scalar sums of the portable accountant
    (the same masses and windows, without numpy's cost per call on tiny arrays)."""
    return _python_distributions().poisson_tails(counts, mean)


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

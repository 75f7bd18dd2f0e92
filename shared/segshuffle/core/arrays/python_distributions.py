"""Binomial and Poisson point masses and tails in double precision, without numpy.

The special functions of the standard-library array backend (:mod:`.python_backend`), which
light client installs verify parameters with; the port of the JavaScript accountant's
``clients/web/src/accountant/distributions.js``.  ``tests/test_portable_accountant*.py``
and ``tests/test_portable_distributions.py`` keep it equal to the JavaScript and numpy
accountants.  Every formula, constant and order of
summation is the JavaScript one.

Point masses follow Catherine Loader's saddle-point method ("Fast and accurate
computation of binomial probabilities", 2000), the method behind R's dbinom/dpois:

    Binomial(n, p) at 0 < k < n:
        f(k) = exp(-(D(k, n p) + D(n - k, n q)) + e(n) - e(k) - e(n - k))
               * sqrt(n / (2 pi k (n - k))),
    Poisson(mu) at k >= 1:
        f(k) = exp(-D(k, mu) - e(k)) / sqrt(2 pi k),

where q = 1 - p, e(x) = ln x! - (x + 1/2) ln x + x - ln sqrt(2 pi) is the Stirling
remainder and D(x, M) = x ln(x / M) + M - x >= 0 the deviance.  Both are small numbers
computed without cancellation: e(x) from a table of exact factorials up to 15 and from
its asymptotic series above (five terms, truncation below 3e-16 of e), and D(x, M), when
x is within 10% of M, from

    D(x, M) = (x - M) v + 2 x sum_{j >= 1} v^(2j + 1) / (2j + 1),   v = (x - M) / (x + M),

whose terms fall by a factor v^2 <= 0.0028 each (fourteen terms are far beyond double
precision).  The masses are then within a few units in the last place near the mode,
and within ~1e-14 relative far out in the tails (the rounding of the exponent itself).

Binomial tails are sums of these masses, taken from the side where they are small:

    Pr[X >= k] = f(k) (1 + r_k + r_k r_{k+1} + ...),   r_j = f(j + 1) / f(j),

and alike downwards.  Past the mode the ratios r_j fall monotonically (for the binomial
r_j = (n - j) p / ((j + 1) q), for the Poisson mu / (j + 1)), so once r_j < 1 everything
after term j is at most f(j) r_j / (1 - r_j) (a geometric series): the sum stops when
that bound is below 2^-60 of the sum.  Terms come from the ratio recurrence (a few
roundings each) and are recomputed from the saddle-point formula every sixteen terms,
so no term is off by more than ~16 ulp; the sum is compensated (Neumaier).  A tail that
holds the bulk of the law is one minus the opposite tail.  The result is within ~1e-13
relative of the exact tail wherever that tail is below 1/2, and within ~1e-15 absolute
elsewhere (the test suite checks this against 50-digit arithmetic).  The cost is a few
standard deviations of terms per tail.  Poisson tails (:func:`poisson_tails`) are
running sums over windows widened the same way, and carry a bound on their error.

Unlike JavaScript, Python raises on a division by zero, on ``math.log(0)`` and on an
overflowing ``math.exp``; the functions here never reach those cases for arguments in
their documented ranges (0 <= p <= 1, counts and sizes non-negative integers, means
positive), and return what the JavaScript accountant returns at the edges of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import accumulate, pairwise
from typing import NamedTuple

__all__ = [
    "LOG_SQRT_2PI",
    "TailPair",
    "Tails",
    "binom_cdf",
    "binom_isf",
    "binom_log_pmf",
    "binom_pmf",
    "binom_ppf",
    "binom_sf",
    "binom_tails_range",
    "compensated_sum",
    "deviance",
    "fsum",
    "half_tail",
    "ln_factorial",
    "lower_window_start",
    "poisson_cdf",
    "poisson_log_pmf",
    "poisson_pmf",
    "poisson_sf",
    "poisson_tails",
    "stirling_remainder",
    "upper_window_end",
]

_log = math.log
_log1p = math.log1p
_exp = math.exp
_sqrt = math.sqrt
_inf = math.inf

#: ln sqrt(2 pi).
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

#: 2 pi, as ``2.0 * Math.PI`` in JavaScript.
_TWO_PI = 2.0 * math.pi

#: Terms of the deviance series (|v| < 1/19 where it is used: v^28 < 1e-35); the series
#: is written out term by term in :func:`deviance`.
DEVIANCE_TERMS = 14

#: Below this argument the Stirling remainder comes from exact factorials.
STIRLING_SERIES_FROM = 15


def _small_log_factorials() -> list[float]:
    out = []
    factorial = 1.0
    for k in range(STIRLING_SERIES_FROM + 1):
        if k > 0:
            factorial *= k
        out.append(math.log(factorial))
    return out


#: ln k! for k = 0..15, from the exact factorials (all below 2^53).
_SMALL_LOG_FACTORIALS = _small_log_factorials()

#: The Stirling remainder e(k) for k = 1..15 (index k; 0 at 0), as the JavaScript
#: stirlingRemainder computes it.
_SMALL_REMAINDERS = [0.0] + [
    _SMALL_LOG_FACTORIALS[x] - (x + 0.5) * math.log(x) + x - LOG_SQRT_2PI
    for x in range(1, STIRLING_SERIES_FROM + 1)
]


def _stirling_series(x: float) -> float:
    """The asymptotic series of e(x) (x > 15)."""
    inv = 1.0 / x
    inv2 = inv * inv
    return inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (
        1.0 / 1260.0 - inv2 * (1.0 / 1680.0 - inv2 / 1188.0))))


def ln_factorial(k: float) -> float:
    """ln k! for an integer k >= 0.

    Exact factorials up to 15, Stirling's formula with the series remainder above
    (within a few ulp of ln k!).  NaN below 0.
    """
    if k <= STIRLING_SERIES_FROM:
        return _SMALL_LOG_FACTORIALS[int(k)] if k >= 0 else math.nan
    return ((k + 0.5) * _log(k) - k) + LOG_SQRT_2PI + _stirling_series(k)


def stirling_remainder(x: float) -> float:
    """e(x) = ln x! - (x + 1/2) ln x + x - ln sqrt(2 pi) for an integer x >= 0.

    0 at x = 0 (where the masses that would need it are computed directly).
    """
    if x <= 0:
        return 0.0
    if x <= STIRLING_SERIES_FROM:
        return _SMALL_REMAINDERS[int(x)]
    inv = 1.0 / x
    inv2 = inv * inv
    return inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (
        1.0 / 1260.0 - inv2 * (1.0 / 1680.0 - inv2 / 1188.0))))


def deviance(x: float, mean: float) -> float:
    """D(x, M) = x ln(x / M) + M - x (0 ln 0 = 0), accurate where x is close to M."""
    d = x - mean
    s = x + mean
    if not abs(d) < 0.1 * s:
        if x > 0.0:
            if mean > 0.0:
                return x * _log(x / mean) + mean - x
            return _inf if mean == 0.0 else math.nan
        return 0.0 + mean - x
    v = d / s
    v2 = v * v
    t = 2.0 * x * v
    # (x - M) v plus the fourteen terms 2 x v^(2j + 1) / (2j + 1), j = 1..14, summed in
    # this order (one expression: each term is the previous one times v^2).
    return (d * v + (t := t * v2) / 3.0 + (t := t * v2) / 5.0 + (t := t * v2) / 7.0
            + (t := t * v2) / 9.0 + (t := t * v2) / 11.0 + (t := t * v2) / 13.0
            + (t := t * v2) / 15.0 + (t := t * v2) / 17.0 + (t := t * v2) / 19.0
            + (t := t * v2) / 21.0 + (t := t * v2) / 23.0 + (t := t * v2) / 25.0
            + (t := t * v2) / 27.0 + (t := t * v2) / 29.0)


def binom_log_pmf(k: float, n: float, p: float) -> float:
    """ln Pr[Binomial(n, p) = k] (-inf outside 0..n)."""
    q = 1.0 - p
    if k == 0 and n >= 0:
        # q^n: n log1p(-p) is accurate for every p (and 1 at n = 0, even at p = 1).
        if n == 0:
            return 0.0
        return n * _log1p(-p) if p < 1.0 else -_inf
    if k == n and n > 0:
        return n * (_log(p) if p > 0.0 else -_inf)
    if not (k > 0 and k < n and p > 0.0 and p < 1.0):
        return -_inf
    rest = n - k
    log_core = (stirling_remainder(n) - stirling_remainder(k) - stirling_remainder(rest)
                - deviance(k, n * p) - deviance(rest, n * q))
    return log_core + 0.5 * (_log(n) - _log(k) - _log(rest)) - LOG_SQRT_2PI


def binom_pmf(k: float, n: float, p: float) -> float:
    """Pr[Binomial(n, p) = k] (0 outside 0..n)."""
    return _exp(binom_log_pmf(k, n, p))


def poisson_pmf(k: float, mean: float) -> float:
    """Pr[Poisson(mean) = k] (0 below 0)."""
    if k == 0:
        return _exp(-mean)
    if not (k > 0 and mean > 0.0):
        return 0.0
    return _exp(-deviance(k, mean) - stirling_remainder(k)) / _sqrt(_TWO_PI * k)


#: Terms between exact recomputations in a tail sum.
ANCHOR_EVERY = 16

#: A tail sum stops once what is left is provably below this share of it.
NEGLIGIBLE = 2.0 ** -60


def _binom_sum_up(k: float, n: float, p: float) -> float:
    """Pr[Binomial(n, p) >= k] for k in 1..n, summed upwards from k (k above the mean).

    sum_{j = k, k + 1, ...} f(j) up to j = n by the ratio recurrence
    f(j + 1) = f(j) (n - j) p / ((j + 1) q), which falls monotonically once below 1
    (module docstring); compensated, 0 when f(k) underflows.
    """
    q = 1.0 - p
    term = binom_pmf(k, n, p)
    if term == 0:
        return 0.0
    total = term
    compensation = 0.0
    j = k
    count = 0
    pmf = binom_pmf
    anchor = ANCHOR_EVERY
    negligible = NEGLIGIBLE
    while j != n:
        r = ((n - j) * p) / ((j + 1) * q)
        if r < 1 and term * r <= negligible * (1 - r) * total:
            break
        j += 1
        count += 1
        term = pmf(j, n, p) if count % anchor == 0 else term * r
        if term == 0:
            break
        new = total + term
        if total >= term:
            compensation += (total - new) + term
        else:
            compensation += (term - new) + total
        total = new
    return total + compensation


def _binom_sum_down(k: float, n: float, p: float) -> float:
    """Pr[Binomial(n, p) <= k] for k in 0..n-1, summed downwards from k (k below the mean).

    The mirror of :func:`_binom_sum_up`, by f(j - 1) = f(j) j q / ((n - j + 1) p).
    """
    q = 1.0 - p
    term = binom_pmf(k, n, p)
    if term == 0:
        return 0.0
    total = term
    compensation = 0.0
    j = k
    count = 0
    pmf = binom_pmf
    anchor = ANCHOR_EVERY
    negligible = NEGLIGIBLE
    while j != 0:
        r = (j * q) / ((n - j + 1) * p)
        if r < 1 and term * r <= negligible * (1 - r) * total:
            break
        j -= 1
        count += 1
        term = pmf(j, n, p) if count % anchor == 0 else term * r
        if term == 0:
            break
        new = total + term
        if total >= term:
            compensation += (total - new) + term
        else:
            compensation += (term - new) + total
        total = new
    return total + compensation


def binom_cdf(k: float, n: float, p: float) -> float:
    """Pr[Binomial(n, p) <= k]: 0 below the support, 1 from its top on."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return _binom_sum_down(k, n, p) if k < n * p else 1.0 - _binom_sum_up(k + 1, n, p)


def binom_sf(k: float, n: float, p: float) -> float:
    """Pr[Binomial(n, p) > k]: 1 below the support, 0 from its top on."""
    if k < 0:
        return 1.0
    if k >= n:
        return 0.0
    return _binom_sum_up(k + 1, n, p) if k + 1 > n * p else 1.0 - _binom_sum_down(k, n, p)


def half_tail(c: float, k: float) -> float:
    """Pr[Binomial(c, 1/2) >= k]: 1 for k <= 0, 0 for k > c.

    (The regularized incomplete beta function I_{1/2}(k, c - k + 1) inside.)
    """
    if k <= 0:
        return 1.0
    if k > c:
        return 0.0
    return binom_sf(k - 1, c, 0.5)


class TailPair(NamedTuple):
    """Both tails of a law at consecutive counts."""

    lower: list[float]
    """Pr[X <= t] at each count t."""
    upper: list[float]
    """Pr[X > t]."""


def _cdf_on_range(lo: int, hi: int, mass: Callable[[int], float],
                  cdf: Callable[[int], float], sf: Callable[[int], float]) -> TailPair:
    """Both tails F(t) and S(t) = 1 - F(t) for t = lo..hi of a law.

    ``mass`` gives the point masses, ``cdf`` and ``sf`` the two tails: one mass per
    point, the two ends' tails once, and compensated running sums from both ends; at
    each t the smaller running tail is taken as it is and the other is 1 minus it (so
    each keeps the relative accuracy of a tail).
    """
    size = hi - lo + 1
    masses = [mass(t) for t in range(lo, lo + size)]
    below = [0.0] * size
    total = cdf(lo - 1)
    compensation = 0.0
    for i, term in enumerate(masses):
        new = total + term
        if total >= term:
            compensation += (total - new) + term
        else:
            compensation += (term - new) + total
        total = new
        below[i] = total + compensation
    lower = [0.0] * size
    upper = [0.0] * size
    total = sf(hi)
    compensation = 0.0
    for i in range(size - 1, -1, -1):
        above = total + compensation  # Pr[X > lo + i]
        b = below[i]
        if b <= above:
            lower[i] = b
            upper[i] = 1.0 - b
        else:
            lower[i] = 1.0 - above
            upper[i] = above
        term = masses[i]
        new = total + term
        if total >= term:
            compensation += (total - new) + term
        else:
            compensation += (term - new) + total
        total = new
    return TailPair(lower, upper)


def binom_tails_range(lo: int, hi: int, n: int, p: float) -> TailPair:
    """Pr[Binomial(n, p) <= t] and Pr[Binomial(n, p) > t] for t = lo..hi (0 <= lo <= hi <= n)."""
    return _cdf_on_range(lo, hi, lambda k: binom_pmf(k, n, p), lambda k: binom_cdf(k, n, p),
                         lambda k: binom_sf(k, n, p))


#: A bound on the relative error of one Poisson mass (Loader's expansion is within 1e-15
#: of 40-digit values), as charged in the error bound of :func:`poisson_tails`.
POISSON_MASS_RTOL = 1e-14

#: A summed Poisson tail leaves out masses whose total is below 2^-60 of its first one.
TAIL_CUTOFF_LOG = -60.0 * math.log(2.0)

#: Counts farther apart than this many standard deviations are summed in separate windows.
WINDOW_GAP_SIGMAS = 2.0


def poisson_log_pmf(k: float, mean: float) -> float:
    """ln Pr[Poisson(mean) = k] for mean > 0 (-inf below 0)."""
    if k == 0:
        return -mean
    if not k > 0:
        return -_inf
    return -deviance(k, mean) - stirling_remainder(k) - 0.5 * _log(k) - LOG_SQRT_2PI


def lower_window_start(k: int, mean: float) -> int:
    """The first count a of the lower sum f(a) + ... + f(k) (k below the mode).

    Below a the masses fall going down by f(j - 1) / f(j) = j / mean <= r = a / mean, so
    together they are at most f(a) r / (1 - r); a moves down (doubling the distance)
    until that is below 2^-60 f(k), or to 0 (nothing left out).
    """
    top = poisson_log_pmf(k, mean)
    width = 16
    while True:
        a = k - width
        if a <= 0:
            return 0
        r = a / mean
        if poisson_log_pmf(a, mean) + _log(r / (1.0 - r)) <= top + TAIL_CUTOFF_LOG:
            return a
        width *= 2


def upper_window_end(k: int, mean: float) -> int:
    """The last count b of the upper sum f(k + 1) + ... + f(b) (k at or above the mode).

    Above b the masses fall by f(j + 1) / f(j) = mean / (j + 1) <= r = mean / (b + 1), so
    together they are at most f(b) r / (1 - r); b moves up (doubling) until that is below
    2^-60 f(k + 1).
    """
    first = poisson_log_pmf(k + 1, mean)
    width = 16
    while True:
        b = k + 1 + width
        r = mean / (b + 1.0)
        if r < 1.0 and poisson_log_pmf(b, mean) + _log(r / (1.0 - r)) <= first + TAIL_CUTOFF_LOG:
            return b
        width *= 2


def _clusters(counts: Sequence[int], gap: float) -> list[list[int]]:
    """The runs of sorted distinct counts whose steps are at most ``gap`` (each sorted)."""
    values = sorted(set(counts))
    out: list[list[int]] = []
    if not values:
        return out
    run = [values[0]]
    for previous, value in pairwise(values):
        if value - previous > gap:
            out.append(run)
            run = []
        run.append(value)
    out.append(run)
    return out


def _positions(counts: list[int], keep: Callable[[int], bool]) -> dict[int, list[int]]:
    """The indices of each count that ``keep`` accepts."""
    where: dict[int, list[int]] = {}
    for i, c in enumerate(counts):
        if keep(c):
            where.setdefault(c, []).append(i)
    return where


class Tails(NamedTuple):
    """Both tails of a Poisson law at the counts asked, with a bound on their error."""

    lower: list[float]
    """Pr[X <= k] at each count asked."""
    upper: list[float]
    """Pr[X > k]."""
    rtol: float
    """A bound on the relative error of both."""


def poisson_tails(counts: Sequence[int], mean: float) -> Tails:
    """Pr[Poisson(mean) <= k] and Pr[Poisson(mean) > k] at integer counts k, with an error bound.

    The tail away from the mode is summed from the point masses (below the mode the lower
    tail from k down, above it the upper tail from k + 1 up; each window widened until
    what it leaves out is provably below 2^-60 of its first mass, counts more than two
    standard deviations apart in windows of their own), and the other tail is 1 minus
    it.  A running sum of L positive terms is within (L - 1) u of the exact one
    (u = 2^-53) and each mass within POISSON_MASS_RTOL; the complement holds at least
    1/e of the law (Pr[X <= floor(mean)] >= 1/e, Pr[X >= floor(mean)] >= 1/2), so
    rtol = 4 (L u + POISSON_MASS_RTOL + 2^-60) bounds both.
    """
    counts = list(counts)
    lower = [0.0 if c < 0 else 1.0 for c in counts]
    if mean <= 0.0:
        return Tails(lower, [1.0 - x for x in lower], 0.0)
    mode = math.floor(mean)
    gap = max(64.0, WINDOW_GAP_SIGMAS * _sqrt(mean))
    terms = 0
    below = _positions(counts, lambda c: 0 <= c < mode)
    above = _positions(counts, lambda c: c >= mode)
    pmf = poisson_pmf
    for run in _clusters(list(below), gap):
        k_min = run[0]
        k_max = run[-1]
        a = lower_window_start(k_min, mean)
        sums = list(accumulate([pmf(j, mean) for j in range(int(a), int(k_max) + 1)]))
        for c in run:
            value = sums[int(c - a)]
            for i in below[c]:
                lower[i] = value
        terms = max(terms, len(sums))
    upper = [1.0 - x for x in lower]
    for run in _clusters(list(above), gap):
        k_min = run[0]
        k_max = run[-1]
        b = upper_window_end(k_max, mean)
        # sums[b - j] = f(b) + ... + f(j) for j = b down to k_min + 1.
        sums = list(accumulate([pmf(j, mean) for j in range(int(b), int(k_min), -1)]))
        for c in run:
            value = sums[int(b - c - 1)]
            complement = 1.0 - value
            for i in above[c]:
                upper[i] = value
                lower[i] = complement
        terms = max(terms, len(sums))
    return Tails(lower, upper, 4.0 * (terms * 2.0 ** -53 + POISSON_MASS_RTOL + 2.0 ** -60))


def poisson_cdf(k: int, mean: float) -> float:
    """Pr[Poisson(mean) <= k] (:func:`poisson_tails`)."""
    return poisson_tails([k], mean).lower[0]


def poisson_sf(k: int, mean: float) -> float:
    """Pr[Poisson(mean) > k] (:func:`poisson_tails`)."""
    return poisson_tails([k], mean).upper[0]


def binom_ppf(q: float, n: int, p: float) -> int:
    """The smallest k in -1..n with Pr[Binomial(n, p) <= k] >= q (-1 when q <= 0), by bisection."""
    if q <= 0.0:
        return -1
    lo = -1
    hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if binom_cdf(mid, n, p) >= q:
            hi = mid
        else:
            lo = mid
    return hi


def binom_isf(q: float, n: int, p: float) -> int:
    """The smallest k in -1..n with Pr[Binomial(n, p) > k] <= q (-1 when q >= 1).

    By bisection on the upper tail (accurate where it is small).
    """
    if q >= 1.0:
        return -1
    lo = -1
    hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if binom_sf(mid, n, p) <= q:
            hi = mid
        else:
            lo = mid
    return hi


def _exact_partials_sum(values: Sequence[float]) -> float:
    """Shewchuk's exact partials as the JavaScript accountant writes them (for non-finite
    input, where :func:`math.fsum` raises or treats infinities apart)."""
    partials: list[float] = []
    for value in values:
        x = value
        i = 0
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo != 0:
                partials[i] = lo
                i += 1
            x = hi
        del partials[i:]
        partials.append(x)
    n = len(partials)
    if n == 0:
        return 0.0
    n -= 1
    hi = partials[n]
    lo = 0.0
    while n > 0:
        x = hi
        n -= 1
        y = partials[n]
        hi = x + y
        lo = y - (hi - x)
        if lo != 0:
            break
    if n > 0 and ((lo < 0 and partials[n - 1] < 0) or (lo > 0 and partials[n - 1] > 0)):
        y = lo * 2
        x = hi + y
        if y == x - hi:
            hi = x
    return hi


def fsum(values: Sequence[float]) -> float:
    """The correctly rounded sum of ``values``, for sums whose terms may cancel.

    Shewchuk's exact partials with the final round-half-even correction: the algorithm
    of :func:`math.fsum`, which is used for finite sums (the correctly rounded result is
    unique); non-finite input goes through the JavaScript accountant's own loop.
    """
    if not isinstance(values, list | tuple):
        values = list(values)
    try:
        total = math.fsum(values)
    except (OverflowError, ValueError):
        return _exact_partials_sum(values)
    if math.isfinite(total):
        return total
    return _exact_partials_sum(values)


def compensated_sum(values: Sequence[float], start: int = 0, end: int | None = None) -> float:
    """The sum of ``values[start:end]`` with Neumaier's compensation (error ~2 ulp of the sum)."""
    if end is None:
        end = len(values)
    total = 0.0
    compensation = 0.0
    for i in range(start, end):
        term = values[i]
        new = total + term
        if abs(total) >= abs(term):
            compensation += (total - new) + term
        else:
            compensation += (term - new) + total
        total = new
    return total + compensation

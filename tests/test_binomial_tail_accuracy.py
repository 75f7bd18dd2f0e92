"""The numpy accountant's binomial tails where scipy's incomplete beta alone is not
accurate enough: small counts with 1 - p inexact in doubles, and the upper tails of laws
with a very large mean (``segshuffle.core.distributions``, module docstring), against
50-digit sums of exact masses."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from segshuffle.core import distributions

_BITS = 320  # fixed-point precision of the reference sums


def _log_mass(j: int, n: int, p: float) -> mpmath.mpf:
    with mpmath.workdps(60):
        x = mpmath.mpf(p)
        return (mpmath.loggamma(n + 1) - mpmath.loggamma(j + 1) - mpmath.loggamma(n - j + 1)
                + j * mpmath.log(x) + (n - j) * mpmath.log1p(-x))


def _reference_tails(k: int, n: int, p: float) -> tuple[mpmath.mpf, mpmath.mpf]:
    """(Pr[X <= k], Pr[X > k]) for X ~ Binomial(n, p), p the double exactly, 0 <= k < n.

    The tail away from the mean is summed from k down (or from k + 1 up), each mass
    from the last by the exact rational ratio in 320-bit fixed point, until a mass past
    the mode is below 2^-170 of the sum; the first mass in 60 digits, the other tail one
    minus the sum.  Good to about 45 digits, and fast enough for 10^7 terms.
    """
    ratio = Fraction(p)
    a, b = ratio.numerator, ratio.denominator - ratio.numerator  # p = a / (a + b)
    term, total = 1 << _BITS, 0
    if k < math.floor(n * p):
        j = first = k
        while j >= 0 and term:
            total += term
            if term < total >> 170 and j * b < (n - j + 1) * a:
                break
            term = term * j * b // ((n - j + 1) * a)
            j -= 1
    else:
        j = first = k + 1
        while j <= n and term:
            total += term
            if term < total >> 170 and (n - j) * a < (j + 1) * b:
                break
            term = term * (n - j) * a // ((j + 1) * b)
            j += 1
    with mpmath.workdps(60):
        tail = mpmath.exp(_log_mass(first, n, p)) * mpmath.mpf(total) / mpmath.mpf(2) ** _BITS
        return (tail, 1 - tail) if first == k else (1 - tail, tail)


def _relative(value: float, exact: mpmath.mpf) -> float:
    with mpmath.workdps(60):
        return float(abs((mpmath.mpf(value) - exact) / exact))


def _both_paths(k: int, n: int, p: float) -> list[tuple[float, float]]:
    """(lower, upper) from the scalar path and from an array holding k among others."""
    counts = np.array([0, k, max(k - 1, 0), min(k + 1, n - 1)], dtype=np.int64)
    return [(distributions.binom_cdf(k, n, p), distributions.binom_sf(k, n, p)),
            (float(distributions.binom_cdf(counts, n, p)[1]),
             float(distributions.binom_sf(counts, n, p)[1]))]


#: (k, n, p, Pr[X <= k], Pr[X > k]): points where scipy's betainc/betaincc alone were
#: off by more than BINOMIAL_TAIL_RTOL, or close to it (the figures are scipy 1.17.1's),
#: with 50-digit references from :func:`_reference_tails`.
MEASURED = [
    # Small counts, 1 - p inexact: Boost sums the series itself with 1 - p rounded.
    # betainc off by -1.5e-8, betaincc by -1.6e-11.
    (31, 10**9, 3.2e-8, "0.47648830435081383013411852612893873966075390580365",
     "0.52351169564918616986588147387106126033924609419635"),
    # betainc off by -1.7e-10.
    (31, 10**7, 3.2e-6, "0.47648819293159069352211459768129386974465114255713",
     "0.52351180706840930647788540231870613025534885744287"),
    # betainc off by -1.5e-11.
    (31, 10**6, 3.2e-5, "0.47648718001083955056748748708736723261288782144974",
     "0.52351281998916044943251251291263276738711217855026"),
    (9, 2 * 10**9, 5e-9, "0.45792971415907709194891212606086364262019939901715",
     "0.54207028584092290805108787393913635737980060098285"),
    # Upper tails of laws with a large mean: betainc off by 2.4e-10, -3.8e-10, 4.5e-10
    # and -3.0e-10 (three, six, three and six sd above the mean).
    (30000434741, 10**11, 0.3, "0.99865009170132025391317253135592074370529796509651",
     "0.0013499082986797460868274686440792562947020349034930"),
    (500003000000, 10**12, 0.5, "0.99999999901341843093325143555592674614635559931165",
     "9.8658156906674856444407325385364440068835317177409e-10"),
    (1000002984962, 10**14, 0.01, "0.99865009698856784362789253899834278067167714822202",
     "0.0013499030114321563721074610016572193283228517779750"),
    (1000005996999, 10**15, 0.001, "0.99999999901337848690430818677101351151516817463165",
     "9.8662151309569181322898648848483182536835381516314e-10"),
]


@pytest.mark.parametrize(("k", "n", "p", "lower", "upper"), MEASURED)
def test_binomial_tails_at_the_points_where_the_incomplete_beta_failed(
        k: int, n: int, p: float, lower: str, upper: str) -> None:
    exact_lower, exact_upper = mpmath.mpf(lower), mpmath.mpf(upper)
    for got_lower, got_upper in _both_paths(k, n, p):
        # Measured: within 1e-13 (small counts) and 4e-13 (large means).
        assert _relative(got_lower, exact_lower) < 1e-12, (k, n, p)
        assert _relative(got_upper, exact_upper) < 1e-12, (k, n, p)


def test_the_reference_sums_agree_with_exact_masses_summed_in_mpmath() -> None:
    # Pr[Binomial(10^9, 3.2e-8) <= 31] as the 32 masses C(n, j) p^j q^(n - j) in 50 digits.
    with mpmath.workdps(50):
        x = mpmath.mpf(3.2e-8)
        exact = mpmath.fsum(mpmath.binomial(10**9, j) * x**j * (1 - x) ** (10**9 - j)
                            for j in range(32))
        lower, upper = _reference_tails(31, 10**9, 3.2e-8)
        assert abs(lower / exact - 1) < mpmath.mpf("1e-40")
        assert abs(mpmath.mpf(MEASURED[0][4]) / upper - 1) < mpmath.mpf("1e-40")


@pytest.mark.parametrize(("n", "mean"), [(10**6, 30.3), (10**7, 3.7), (10**7, 17.1),
                                         (2 * 10**9, 33.3), (10**12, 25.0), (4 * 10**15, 9.9)])
def test_every_small_count_holds_the_bound(n: int, mean: float) -> None:
    p = mean / n
    assert 1.0 - (1.0 - p) != p  # 1 - p is inexact: the case Boost gets wrong
    ks = np.arange(0, 39)
    lower, upper = distributions.binom_cdf(ks, n, p), distributions.binom_sf(ks, n, p)
    for k in ks.tolist():
        exact_lower, exact_upper = _reference_tails(k, n, p)
        assert lower[k] == distributions.binom_cdf(k, n, p)
        assert upper[k] == distributions.binom_sf(k, n, p)
        assert _relative(lower[k], exact_lower) < 1e-12, (k, n, p)
        assert _relative(upper[k], exact_upper) < 1e-12, (k, n, p)


def test_array_and_scalar_tails_agree_on_every_route() -> None:
    rng = np.random.default_rng(5)
    for n, p in [(10**9, 3.2e-8), (10**7, 0.3), (10**5, 0.5), (10**12, 1e-9), (300, 0.9)]:
        mean, sd = n * p, math.sqrt(n * p * (1 - p))
        ks = np.unique(np.clip(np.round(mean + sd * rng.normal(size=40) * 4), -2, n + 1)
                       .astype(np.int64))
        ks = np.concatenate((ks, np.arange(-1, 41)))
        for function in (distributions.binom_cdf, distributions.binom_sf):
            together = function(ks, n, p)
            one_by_one = np.array([function(int(k), n, p) for k in ks.tolist()])
            np.testing.assert_allclose(together, one_by_one, rtol=1e-15, atol=0.0)
            rows = function(ks[None, :], np.array([[n], [n]]), p)
            np.testing.assert_allclose(rows, np.vstack((together, together)), rtol=1e-15)


def _random_cases(seed: int, count: int):
    """(k, n, p): n from 10^3 to 10^15; a third small counts (k < 39, means from 0.3 to
    50), the rest p from 10^-12 to 1 - 10^-9 and k within 9 sd of the mean."""
    rng = random.Random(seed)
    made = 0
    while made < count:
        n = int(10 ** rng.uniform(3, 15))
        small = rng.random() < 1 / 3
        if small:
            p = 10 ** rng.uniform(-0.5, 1.7) / n
        elif rng.random() < 0.7:
            p = 10 ** rng.uniform(-12, -0.3)
        else:
            p = rng.uniform(0.0, 1.0) if rng.random() < 0.5 else 1.0 - 10 ** rng.uniform(-9, -0.3)
        sd = math.sqrt(n * p * (1.0 - p))
        if not 0.0 < p < 1.0 or sd > 2e4:  # the reference sums some 30 sd of masses
            continue
        k = rng.randrange(0, min(n, 39)) if small else int(n * p + rng.uniform(-9.0, 9.0) * sd)
        if 0 <= k < n:
            made += 1
            yield k, n, p


@pytest.mark.slow
def test_binomial_tails_hold_their_bound_on_a_random_scan() -> None:
    # 400 points (:func:`_random_cases`).  Measured worst: 1.1e-11 (betainc, an upper
    # tail of 6.4e8 trials); betainc/betaincc alone were 5.8e-9 off (an upper tail at a
    # small count).  The worst seen on any scan is 2.0e-11.
    worst = 0.0
    for k, n, p in _random_cases(2024, 400):
        exact_lower, exact_upper = _reference_tails(k, n, p)
        for got, exact in ((distributions.binom_cdf(k, n, p), exact_lower),
                           (distributions.binom_sf(k, n, p), exact_upper)):
            if exact > mpmath.mpf("1e-290"):
                worst = max(worst, _relative(got, exact))
    assert worst < distributions.BINOMIAL_TAIL_RTOL / 4, worst

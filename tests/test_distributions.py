"""The accountant's Binomial and Poisson probabilities against 40-digit arithmetic."""

from __future__ import annotations

import math
import subprocess
import sys

import mpmath
import numpy as np
import pytest

from segshuffle.core import distributions
from segshuffle.core.privacy_loss import BinLaw

mpmath.mp.dps = 40


def _exact_binomial(k: int, n: int, p: float) -> mpmath.mpf:
    return mpmath.binomial(n, k) * mpmath.mpf(p) ** k * (1 - mpmath.mpf(p)) ** (n - k)


def _exact_poisson(k: int, mean: float) -> mpmath.mpf:
    mu = mpmath.mpf(mean)
    return mpmath.e ** (k * mpmath.log(mu) - mu - mpmath.loggamma(k + 1)) if k else mpmath.e ** -mu


def _points(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.choice([1, 2, 5, 16, 17, 100, 1000, 10**5, 10**7, 10**9]))
        p = float(10 ** rng.uniform(-9, 0)) if rng.random() < 0.8 else float(rng.uniform(0, 1))
        sd = np.sqrt(n * p * (1 - p)) + 1.0
        k = int(np.clip(round(n * p + rng.normal() * sd * rng.choice([1, 4, 10])), 0, n))
        yield k, n, p


def test_binomial_masses_are_accurate() -> None:
    for k, n, p in _points(11, 300):
        exact = _exact_binomial(k, n, p)
        if exact < mpmath.mpf("1e-300"):
            continue
        value = float(distributions.binom_pmf([k], n, p)[0])
        # The rounding of n p itself costs a few 1e-12 at n = 1e9 (Boost's masses too).
        assert abs(value / exact - 1) < 1e-11 * max(1.0, n / 1e8) ** 0.5 + 5e-14, (k, n, p)
        log_value = float(distributions.binom_logpmf([k], n, p)[0])
        assert abs(log_value - float(mpmath.log(exact))) < 1e-11 + 1e-14 * abs(log_value)


def test_poisson_masses_are_accurate_at_every_mean() -> None:
    for k, n, p in _points(12, 300):
        mean = n * p
        exact = _exact_poisson(k, mean)
        if exact < mpmath.mpf("1e-300"):
            continue
        assert abs(float(distributions.poisson_pmf([k], mean)[0]) / exact - 1) < 1e-13


def test_the_accountants_poisson_bins_keep_their_precision_at_a_billion() -> None:
    # exp(k ln mu - mu - ln k!) in doubles loses mu * 1e-16 relative: 1e-6 here, a
    # thousand times the accountant's relative margin on delta.
    mean = 919_428_212.739924
    counts = np.array([int(mean) - 30_000, int(mean), int(mean) + 5_000])
    values = BinLaw(mean).pmf(counts)
    for k, value in zip(counts.tolist(), values.tolist(), strict=True):
        assert abs(value / _exact_poisson(k, mean) - 1) < 1e-12


@pytest.mark.parametrize(("k", "n", "p", "expected"), [
    (-1, 5, 0.3, 0.0), (6, 5, 0.3, 0.0), (0, 0, 0.3, 1.0), (0, 5, 0.0, 1.0), (5, 5, 1.0, 1.0),
    (2, 5, 0.0, 0.0), (2, 5, 1.0, 0.0), (0, 5, 1.0, 0.0)])
def test_binomial_masses_at_the_edges_of_the_support(k: int, n: int, p: float,
                                                     expected: float) -> None:
    assert float(distributions.binom_pmf([k], n, p)[0]) == expected


def test_masses_broadcast_rows_of_trials_against_counts() -> None:
    trials = np.array([0, 3, 7])[:, None]
    counts = np.arange(-1, 9)[None, :]
    table = distributions.binom_pmf(counts, trials, 0.4)
    assert table.shape == (3, 10)
    assert np.allclose(table.sum(axis=1), 1.0, rtol=1e-14)


def test_quantiles_are_the_smallest_counts_meeting_the_tail() -> None:
    rng = np.random.default_rng(13)
    for _ in range(200):
        n = int(rng.choice([1, 7, 100, 10**4, 10**6]))
        p = float(rng.uniform(0.001, 0.999))
        q = float(10 ** rng.uniform(-14, -0.01))
        k = distributions.binom_ppf(q, n, p)
        assert k == n or distributions.binom_cdf(k, n, p) >= q
        assert k <= 0 or distributions.binom_cdf(k - 1, n, p) < q
        j = distributions.binom_isf(q, n, p)
        assert j == n or distributions.binom_sf(j, n, p) <= q
        assert j <= 0 or distributions.binom_sf(j - 1, n, p) > q
    assert distributions.binom_ppf(0.0, 10, 0.5) == -1
    assert distributions.binom_isf(1.0, 10, 0.5) == -1


def test_the_command_line_accountant_imports_neither_scipy_stats_nor_optimize() -> None:
    # scipy.stats costs about 0.6 s of CPU to import, more than an audit's own work, and
    # scipy.optimize 0.2 s, a tenth of an optimize.
    code = ("import sys, segshuffle.cli.main, segshuffle.core.optimizer; "
            "from segshuffle.cli.main import main\n"
            "try:\n    main(['audit', '--users', '1000', '--domain-size', '17', '--set-size',"
            " '2', '--blanket', '1.5', '--lam', '0.5', '--delta', '1e-6'])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(name for name in ('scipy.stats', 'scipy.optimize') "
            "if name in sys.modules))")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=120).stdout
    assert output.strip().splitlines()[-1] == "[]"


def _exact_lower_tail(k: int, n: int, p: float) -> mpmath.mpf:
    """Pr[Binomial(n, p) <= k] in 40 digits: the masses from k down, each from the last
    by the exact ratio, until they fall below 1e-45 of the sum."""
    term, total, pp = _exact_binomial(k, n, p), mpmath.mpf(0), mpmath.mpf(p)
    j = k
    while j >= 0 and term > total * mpmath.mpf("1e-45"):
        total += term
        term *= j * (1 - pp) / ((n - j + 1) * pp)
        j -= 1
    return total


def _exact_upper_tail(k: int, n: int, p: float) -> mpmath.mpf:
    """Pr[Binomial(n, p) > k] in 40 digits, summed from k + 1 up like the lower tail."""
    j, total, pp = k + 1, mpmath.mpf(0), mpmath.mpf(p)
    term = _exact_binomial(j, n, p)
    while j <= n and term > total * mpmath.mpf("1e-45"):
        total += term
        term *= (n - j) * pp / ((j + 1) * (1 - pp))
        j += 1
    return total


def _exact_poisson_tails(k: int, mean: float) -> tuple[mpmath.mpf, mpmath.mpf]:
    """(Pr[Poisson(mean) <= k], Pr[Poisson(mean) > k]) in 40 digits: the tail away from
    the mean summed term by term, the other one minus it."""
    mu = mpmath.mpf(mean)
    total = mpmath.mpf(0)
    if k < mean:
        j, term = k, _exact_poisson(k, mean)
        while j >= 0 and term > total * mpmath.mpf("1e-45"):
            total, term, j = total + term, term * j / mu, j - 1
        return total, 1 - total
    j, term = k + 1, _exact_poisson(k + 1, mean)
    while term > total * mpmath.mpf("1e-45"):
        total, j = total + term, j + 1
        term *= mu / j
    return 1 - total, total


def _binomial_tail_cases(sizes: tuple[int, ...], probabilities: tuple[float, ...]):
    for n in sizes:
        for p in probabilities:
            sd = math.sqrt(n * p * (1 - p))
            for z in (-30.0, -3.0, -0.01, 0.5, 3.0, 10.0):
                k = int(n * p + z * sd)
                if 0 <= k < n:
                    yield k, n, p, z


def _assert_binomial_tails_within_their_bound(
        sizes: tuple[int, ...], probabilities: tuple[float, ...] = (0.5, 0.3, 0.0156, 1e-4, 0.9)
        ) -> None:
    worst = 0.0
    for k, n, p, z in _binomial_tail_cases(sizes, probabilities):
        if z < 0:
            lower = _exact_lower_tail(k, n, p)
            upper = 1 - lower
        else:
            upper = _exact_upper_tail(k, n, p)
            lower = 1 - upper
        for got, exact in ((distributions.binom_cdf(k, n, p), lower),
                           (distributions.binom_sf(k, n, p), upper)):
            if exact > 1e-290:
                worst = max(worst, abs(float(got / exact) - 1.0))
    assert worst < distributions.BINOMIAL_TAIL_RTOL / 2, worst


@pytest.mark.slow  # 2-4 s on a 2-core machine: the fast tier stays within 3 minutes
def test_binomial_tails_hold_their_bound_up_to_a_million_trials() -> None:
    # scipy's Cephes bdtr, which the accountant used before, is 2.8e-3 off near the mean
    # of Binomial(1e7, 0.3) and 5.7e-9 at 1e6, beyond the certified 1e-9 margin.
    _assert_binomial_tails_within_their_bound((10**3, 10**5, 10**6))


@pytest.mark.slow
def test_binomial_tails_hold_their_bound_up_to_a_billion_trials() -> None:
    # The largest errors seen: 4.7e-11 (upper tail, ten sd above the mean of 1e9 trials).
    _assert_binomial_tails_within_their_bound((10**4, 10**6, 10**8))
    _assert_binomial_tails_within_their_bound((10**9,), (0.3, 0.0079))


def test_binomial_tails_broadcast_and_keep_the_support_edges() -> None:
    k = np.array([-3, -1, 0, 5, 9, 10, 12])
    lower, upper = distributions.binom_cdf(k, 10, 0.3), distributions.binom_sf(k, 10, 0.3)
    assert lower[:2].tolist() == [0.0, 0.0] and lower[-2:].tolist() == [1.0, 1.0]
    assert upper[:2].tolist() == [1.0, 1.0] and upper[-2:].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(lower + upper, 1.0, rtol=1e-15)
    rows = distributions.binom_cdf(np.array([[2], [4]]), np.array([10, 20]), 0.3)
    assert rows.shape == (2, 2)
    assert rows[1, 1] == distributions.binom_cdf(4, 20, 0.3)
    assert isinstance(distributions.binom_sf(np.int64(3), 10, 0.3), float)


@pytest.mark.parametrize("mean", [0.3, 0.999, 1.0, 7.5, 1e3, 1e5,
                                  pytest.param(1e7, marks=pytest.mark.slow)])
def test_poisson_tails_hold_their_stated_bound(mean: float) -> None:
    # scipy's Cephes pdtrc is 3.1e-2 off five standard deviations above a mean of 1e7.
    sd = math.sqrt(mean)
    ks = sorted({int(mean + z * sd) for z in (-30, -14, -5, -1, -0.01, 0, 0.5, 3, 5, 14, 30)
                 if mean + z * sd >= 0} | {0})
    tails = distributions.poisson_tails(np.array(ks), mean)
    assert 0.0 < tails.rtol < 1e-10
    for i, k in enumerate(ks):
        lower, upper = _exact_poisson_tails(k, mean)
        for got, exact in ((tails.lower[i], lower), (tails.upper[i], upper)):
            if exact > 1e-290:
                assert abs(float(got / exact) - 1.0) <= tails.rtol, (mean, k)
    assert distributions.poisson_cdf(-1, mean) == 0.0
    assert distributions.poisson_sf(-1, mean) == 1.0


def test_binomial_tails_hold_the_certified_margin_at_ten_million_trials() -> None:
    # Near the mean of Binomial(1e7, 0.3) scipy 1.17.1's Cephes bdtr is 2.8e-3 off; the
    # accountant's margin is 1e-9 relative.
    n, p = 10**7, 0.3
    k = int(n * p - 0.01 * math.sqrt(n * p * (1 - p)))
    exact = _exact_lower_tail(k, n, p)
    assert abs(distributions.binom_cdf(k, n, p) / exact - 1) < 1e-10

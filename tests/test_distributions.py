"""The accountant's Binomial and Poisson probabilities against 40-digit arithmetic."""

from __future__ import annotations

import math
import subprocess
import sys

import mpmath
import numpy as np
import pytest
from scipy import special

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
        assert k == n or special.bdtr(k, n, p) >= q
        assert k <= 0 or special.bdtr(k - 1, n, p) < q
        j = distributions.binom_isf(q, n, p)
        assert j == n or special.bdtrc(j, n, p) <= q
        assert j <= 0 or special.bdtrc(j - 1, n, p) > q
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


@pytest.mark.xfail(strict=True, reason="known limit (docs/protocol.md section 7): the "
                   "library's binomial tails lose precision from about 1e6 trials")
def test_binomial_tails_hold_the_certified_margin_at_ten_million_trials() -> None:
    # Near the mean of Binomial(1e7, 0.3) scipy 1.17.1's bdtr is 2.8e-3 off; the
    # accountant's margin is 1e-9 relative.  Passes (and so fails as xfail) once the
    # tails are summed from exact masses.
    n, p = 10**7, 0.3
    k = int(n * p - 0.01 * math.sqrt(n * p * (1 - p)))
    exact = _exact_lower_tail(k, n, p)
    assert abs(distributions.binom_cdf(k, n, p) / exact - 1) < 1e-10

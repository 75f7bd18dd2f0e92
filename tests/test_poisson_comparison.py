"""The Poisson slack eta against 40-digit arithmetic: certified, and not loose."""

from __future__ import annotations

import math

import mpmath
import pytest

from segshuffle.core.poisson_comparison import (
    cdf_excess,
    dominated_poisson_mean,
    steering_poisson_mean,
)

mpmath.mp.dps = 40


def _exact_cdfs(trials: int, q: float, nu: float, lo: int, hi: int
                ) -> tuple[list[mpmath.mpf], list[mpmath.mpf]]:
    """F_Binomial(trials, q)(t) and F_Poisson(nu)(t) for t = lo..hi, in 40 digits: each
    from its lower tail at lo (summed down term by term) by adding masses, every mass
    from the last by its exact ratio."""
    p, mu = mpmath.mpf(q), mpmath.mpf(nu)
    mass_b = mpmath.binomial(trials, lo) * p**lo * (1 - p) ** (trials - lo)
    mass_p = mpmath.e ** (lo * mpmath.log(mu) - mu - mpmath.loggamma(lo + 1))
    tail_b, tail_p = mpmath.mpf(0), mpmath.mpf(0)
    term_b, term_p = mass_b, mass_p
    for j in range(lo, 0, -1):  # the lower tails at lo
        if term_b < tail_b * mpmath.mpf("1e-45") and term_p < tail_p * mpmath.mpf("1e-45"):
            break
        tail_b, tail_p = tail_b + term_b, tail_p + term_p
        term_b *= j * (1 - p) / ((trials - j + 1) * p)
        term_p *= j / mu
    f_b, f_p = [tail_b], [tail_p]
    for t in range(lo, hi):  # add the mass at t + 1
        mass_b *= (trials - t) * p / ((t + 1) * (1 - p))
        mass_p *= mu / (t + 1)
        f_b.append(f_b[-1] + mass_b)
        f_p.append(f_p[-1] + mass_p)
    return f_b, f_p


@pytest.mark.parametrize(("trials", "q"), [
    (2 * 10**6, 0.05),
    # A mean of 5e6: scipy's Cephes CDFs, which computed eta before, are about 1e-9 off
    # there, a thousand times the slack.
    pytest.param(10**8, 0.05, marks=pytest.mark.slow),
])
def test_eta_is_certified_against_exact_cdfs(trials: int, q: float) -> None:
    slack = 1e-12
    nu, eta = dominated_poisson_mean(trials, q, slack)
    assert 0.0 < nu < trials * q and eta <= slack
    sd = math.sqrt(trials * q)
    lo, hi = int(trials * q - 16 * sd), int(trials * q + 16 * sd)
    f_b, f_p = _exact_cdfs(trials, q, nu, lo, hi)
    # Beyond lo..hi: F_B(t) - F_P(t) <= F_B(lo - 1) below, <= 1 - F_P(hi) above.
    exact = max(max(b - p for b, p in zip(f_b, f_p, strict=True)), 1 - f_p[-1], f_b[0], 0)
    assert exact <= eta  # never below the exact slack ...
    assert eta <= exact + 1e-14  # ... and charged no more than rounding needs
    assert cdf_excess(trials, q, nu) == eta


@pytest.mark.parametrize("slack", [-1e-9, float("nan")])
def test_a_negative_slack_is_refused_rather_than_searched_for_ever(slack: float) -> None:
    # eta = 0 at nu = 0 is never below a negative slack: the verification loop never ended.
    with pytest.raises(ValueError, match="slack"):
        dominated_poisson_mean(1000, 0.1, slack)


@pytest.mark.parametrize(("trials", "q", "slack"), [
    (15_299, 0.01, 1e-11), (15_299, 0.05, 1e-11), (3_000_000, 1e-4, 1e-11), (300, 0.2, 1e-6),
    (100, 1e-3, 1e-9)])
def test_the_steering_comparison_lands_next_to_the_certified_one(trials: int, q: float,
                                                                  slack: float) -> None:
    nu, eta = steering_poisson_mean(trials, q, slack)
    certified, _ = dominated_poisson_mean(trials, q, slack)
    mean = trials * q
    # Within a small share of the gap below the mean (the search only steers with it).
    assert abs(nu - certified) <= 0.05 * (mean - certified) + 1e-9 * mean
    assert 0.0 <= eta <= slack * (1.0 + 1e-6)

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


def _steering_every_candidate(trials: int, q: float, slack: float) -> tuple[float, float]:
    """The steering comparison evaluating all 48 candidates of each scan at once (its
    form before the scans stopped at their first answering block)."""
    import numpy as np
    from scipy import special

    from segshuffle.core import poisson_comparison

    mean = trials * q
    lo, hi = poisson_comparison._window_bounds(trials, q)
    totals = np.unique(np.linspace(lo, hi, 48).round())
    cdf, sf = special.bdtr(totals, trials, min(q, 1.0)), special.bdtrc(totals, trials, min(q, 1.0))

    def excess(nus):
        p_cdf = special.pdtr(totals[None, :], nus[:, None])
        p_sf = special.pdtrc(totals[None, :], nus[:, None])
        gap = np.minimum(cdf[None, :] - p_cdf, p_sf - sf[None, :])
        return np.maximum(gap.max(axis=1), p_sf[:, -1])

    unit = max(q * math.sqrt(mean), 1e-9 * mean)
    gaps = np.concatenate(([0.0], unit * np.geomspace(1e-2, max(mean / unit, 2e-2), 47)))
    nus = np.maximum(mean - gaps, 0.0)
    admissible = np.flatnonzero(excess(nus) <= slack)
    if admissible.size == 0:
        return 0.0, 0.0
    first = int(admissible[0])
    if first == 0:
        return mean, float(excess(nus[:1])[0])
    finer = np.linspace(nus[first], nus[first - 1], 48)
    values = excess(finer)
    best = int(np.flatnonzero(values <= slack).max())
    return float(finer[best]), float(values[best])


@pytest.mark.slow  # 2-4 s on a 2-core machine: the fast tier stays within 3 minutes
def test_the_steering_scans_stop_early_with_the_same_answer(monkeypatch) -> None:
    """Before, both scans evaluated all 48 candidates (the Poisson tails, 80% of a
    steering evaluation at an integer m); now they stop at the first block that answers."""
    import random

    from scipy import special

    from segshuffle.core import poisson_comparison

    rng = random.Random(3)
    cases = [(rng.randint(1, 10**7), 10 ** rng.uniform(-5, -0.5), 10 ** rng.uniform(-14, -4))
             for _ in range(300)]
    cases += [(198_000, 2 * i / 128, 1e-11) for i in range(2, 9)]  # n = 1e4, m = 22
    rows: list[int] = []
    pdtr = special.pdtr

    def counted(k, nu):
        rows.append(nu.shape[0])
        return pdtr(k, nu)

    for trials, q, slack in cases:
        expected = _steering_every_candidate(trials, q, slack)
        monkeypatch.setattr(special, "pdtr", counted)
        assert poisson_comparison.steering_poisson_mean(trials, q, slack) == expected
        monkeypatch.setattr(special, "pdtr", pdtr)
    assert sum(rows) < 0.75 * 96 * len(cases)

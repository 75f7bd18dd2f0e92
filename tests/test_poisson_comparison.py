"""The Poisson slack eta against 40-digit arithmetic: certified, and not loose."""

from __future__ import annotations

import math
import random

import mpmath
import pytest

from segshuffle.core import poisson_comparison
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


def _plain_bisection(trials: int, q: float, slack: float) -> float:
    """The comparison's bisection on the coarse totals, every question evaluated: the
    answer the guided search must reproduce."""
    full = poisson_comparison._full_window(trials, q)
    size = len(full.totals)
    stride = max(1, size // poisson_comparison._COARSE_POINTS)
    coarse = full.subsampled([*range(0, size, stride), size - 1])
    return poisson_comparison._bisection(
        lambda nu: poisson_comparison._excess_on(coarse, nu) <= slack, trials * q, q,
        1e-3)[0]


def test_the_guided_search_gives_the_bisection_answer_bit_for_bit() -> None:
    """The search answers the bisection's questions from what its evaluations imply, so
    its mean is the plain bisection's exactly (random comparisons, slack 0 included)."""
    rng = random.Random(7)
    for k in range(120):
        trials = int(math.exp(rng.uniform(math.log(2), math.log(5e7))))
        q = math.exp(rng.uniform(math.log(1e-7), math.log(0.7)))
        slack = 0.0 if k % 17 == 0 else math.exp(rng.uniform(math.log(1e-15), math.log(1e-3)))
        poisson_comparison.clear_caches()
        nu, _ = dominated_poisson_mean(trials, q, slack)
        plain = _plain_bisection(trials, q, slack)
        if _excess_on_full(trials, q, plain) <= slack:  # the verification keeps it as is
            assert nu == plain, (trials, q, slack)
        else:
            assert nu <= plain


def _excess_on_full(trials: int, q: float, nu: float) -> float:
    return poisson_comparison._excess_on(poisson_comparison._full_window(trials, q), nu)


def test_the_revealed_send_comparisons_take_few_evaluations(monkeypatch) -> None:
    """The seven comparisons of a revealed-send bound (n = 1e4, m = 1.4654, d = 128, s = 8)
    took 13 excess evaluations each in their bisection (100 with the verifications);
    started from the last comparison's crossing and slope, they take about 5."""
    from segshuffle.core.revealed_send import RevealedSendBound
    from segshuffle.core.user_bound import blanket_geometry

    evaluated = []
    excess_on = poisson_comparison._excess_on

    def counted(totals, nu):
        evaluated.append(nu)
        return excess_on(totals, nu)

    monkeypatch.setattr(poisson_comparison, "_excess_on", counted)
    poisson_comparison.clear_caches()
    n_slots, r = blanket_geometry(10_000, 1.4654, 128)
    bound = RevealedSendBound(n_slots, r, 8, 128, 1e-11)
    bound.taus(2.0)
    assert len(bound._poisson) == 7
    assert len(evaluated) <= 50, len(evaluated)
    poisson_comparison.clear_caches()

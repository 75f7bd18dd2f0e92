"""The bias that levels going with items cause, and its bound from public parameters.

docs/protocol.md section 5.1; segshuffle.core.correlation.  Every bound is checked against
the exact bias of explicit populations: the bound holds for every level assignment within
the odds-ratio class, and the worst case the proof exhibits attains it.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from segshuffle.core.correlation import (
    CorrelationGuard,
    holder_covariance,
    largest_covariance,
    plackett,
    relative_bias_bound,
    require_correlation_ratio,
    signal_profile,
)
from segshuffle.core.estimator import estimate_frequencies, variance_given_data

COUNTS = (1250, 2500, 1250)  # MSNBC S1, n = 5000
LAMBDAS = (0.52, 1.0, 1.0)  # the optimizer's rates there at R = 1


def exact_bias(holders: np.ndarray, counts: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """E[W^_j] - w_j given holders[k, j], from the estimator's definition (no blanket
    needed: it is subtracted exactly in expectation)."""
    n = counts.sum()
    weight = float(counts @ lambdas)
    return lambdas @ holders / weight - holders.sum(axis=0) / n


def test_plackett_cell_has_the_margins_and_the_odds_ratio():
    for w, x, ratio in itertools.product((0.01, 0.3, 0.5, 0.9), (0.05, 0.25, 0.75),
                                         (1.0, 1.5, 3.0, 50.0)):
        t = float(plackett(w, x, ratio))
        a, b, c, d = t, w - t, x - t, 1.0 - w - x + t  # the four cells
        assert min(a, b, c, d) >= -1e-15
        if ratio == 1.0:
            assert t == pytest.approx(w * x, rel=1e-12)
        else:
            assert a * d / (b * c) == pytest.approx(ratio, rel=1e-9)


def test_largest_covariance_is_the_maximum_over_the_share():
    xs = np.linspace(0.02, 0.98, 25)
    shares = np.linspace(0.0, 1.0, 200_001)[1:]
    for ratio, cap in ((3.0, 1.0), (2.0, 0.3), (10.0, 1 / 32)):
        found = largest_covariance(xs, ratio, cap)
        brute = np.array([holder_covariance(shares[shares <= cap + 1e-12], x, ratio).max()
                          for x in xs])
        assert np.all(found >= brute - 1e-12)
        assert np.allclose(found, brute, rtol=1e-5)  # the brute grid is 5e-6 coarse


def test_the_bias_identity_holds_for_any_population():
    """b_j = w_j (1 - w_j)(<pi_j, lambda> - <q_j, lambda>) / lambda_bar, exactly."""
    rng = np.random.default_rng(7)
    counts = np.array(COUNTS, dtype=float)
    lambdas = np.array(LAMBDAS)
    n = counts.sum()
    for _ in range(20):
        holders = np.minimum(rng.integers(0, 1300, size=(3, 6)), counts[:, None] - 1)
        bias = exact_bias(holders.astype(float), counts, lambdas)
        w = holders.sum(axis=0) / n
        pi = holders / holders.sum(axis=0)
        q = (counts[:, None] - holders) / (n - holders.sum(axis=0))
        mean = counts @ lambdas / n
        identity = w * (1 - w) * (lambdas @ pi - lambdas @ q) / mean
        assert np.allclose(bias, identity, rtol=1e-12, atol=1e-15)


def _table(share: float, tilted: np.ndarray, ratio: float, shares: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """pi, q with holders' odds R on the ``tilted`` part of the mass (a level may be split:
    ``tilted`` is the tilted mass per level), margins p = w pi + (1 - w) q."""
    x = float(tilted.sum())
    t = float(plackett(share, x, ratio))
    pi = (tilted * t / x + (shares - tilted) * (share - t) / (1 - x)) / share
    q = (shares - share * pi) / (1 - share)
    return pi, q


def test_the_bound_holds_for_every_assignment_within_the_odds_ratio():
    """Random level shares of holders and others with every pairwise odds ratio <= R:
    the bias never exceeds beta(w) nor phi w."""
    rng = np.random.default_rng(3)
    counts = np.array(COUNTS, dtype=float)
    lambdas = np.array(LAMBDAS)
    shares = counts / counts.sum()
    mean = shares @ lambdas
    for ratio in (1.5, 3.0):
        bounds = {w: CorrelationGuard(ratio, w).bias_bound(COUNTS, LAMBDAS)
                  for w in (0.05, 0.3, 1.0)}
        phi = relative_bias_bound(COUNTS, LAMBDAS, ratio)
        for _ in range(400):
            share = float(rng.choice([0.05, 0.3, 1.0])) * rng.uniform(0.01, 0.999)
            # odds r_k within [r, r R]: q_k = p_k h(r_k), h(r) = 1 / (1 - w + w r),
            # the common r solved so that q sums to 1 (then pi does too).
            spread = rng.uniform(1.0, ratio, size=3)
            spread /= spread.min()

            def total(log_r: float, spread: np.ndarray = spread, share: float = share) -> float:
                r = math.exp(log_r) * spread
                return float(np.sum(shares / (1 - share + share * r))) - 1.0

            low, high = -30.0, 30.0
            for _ in range(64):
                middle = 0.5 * (low + high)
                if total(middle) > 0:
                    low = middle
                else:
                    high = middle
            r = math.exp(0.5 * (low + high)) * spread
            q = shares / (1 - share + share * r)
            pi = r * q
            assert pi.sum() == pytest.approx(1.0, abs=1e-9)
            bias = share * (1 - share) * (pi @ lambdas - q @ lambdas) / mean
            cap = min(w for w in bounds if w >= share)
            assert abs(bias) <= bounds[cap] * (1 + 1e-9) + 1e-15
            assert abs(bias) <= phi * share * (1 + 1e-9)


def test_the_bound_is_attained_by_the_worst_two_by_two_table():
    """The strict level alone tilted (x = 1/4) at the share where the covariance peaks:
    the exact bias of that population equals the bound."""
    ratio = 3.0
    counts = np.array(COUNTS, dtype=float)
    lambdas = np.array(LAMBDAS)
    shares = counts / counts.sum()
    grid = np.linspace(0.0, 1.0, 200_001)[1:-1]
    share = float(grid[np.argmax(holder_covariance(grid, 0.25, ratio))])
    pi, _ = _table(share, np.array([0.25, 0.0, 0.0]), ratio, shares)
    holders = share * counts.sum() * pi
    bias = exact_bias(holders[:, None], counts, lambdas)[0]
    bound = CorrelationGuard(ratio).bias_bound(COUNTS, LAMBDAS)
    assert bias < 0  # strict holders pull the estimate down
    assert abs(bias) == pytest.approx(bound, rel=1e-6)


def test_the_relative_bound_is_a_breakpoint_maximum_and_the_small_share_limit():
    ratio = 3.0
    phi = relative_bias_bound(COUNTS, LAMBDAS, ratio)
    profile = signal_profile(COUNTS, LAMBDAS)
    x = np.linspace(1e-6, 1 - 1e-6, 100_001)
    dense = ((ratio - 1) * profile.two_sided_gap(x) / (1 + (ratio - 1) * x)).max()
    assert phi >= dense / profile.mean
    assert phi == pytest.approx(dense / profile.mean, rel=1e-5)
    tiny = 1e-7
    assert CorrelationGuard(ratio, tiny).bias_bound(COUNTS, LAMBDAS) / tiny == \
        pytest.approx(phi, rel=1e-5)


def test_no_bias_without_correlation_or_with_equal_rates():
    assert CorrelationGuard(1.0).bias_bound(COUNTS, LAMBDAS) == 0.0
    assert relative_bias_bound(COUNTS, LAMBDAS, 1.0) == 0.0
    assert CorrelationGuard(5.0).bias_bound(COUNTS, (0.7, 0.7, 0.7)) == 0.0
    assert relative_bias_bound(COUNTS, (1.0, 1.0, 1.0), 5.0) == 0.0


def test_the_bound_grows_with_the_ratio_and_the_spread_of_the_rates():
    bounds = [CorrelationGuard(r).bias_bound(COUNTS, LAMBDAS) for r in (1.2, 2.0, 3.0, 10.0)]
    assert bounds == sorted(bounds) and bounds[0] > 0
    spread = [CorrelationGuard(3.0).bias_bound(COUNTS, (a, 1.0, 1.0))
              for a in (0.95, 0.8, 0.52, 0.2)]
    assert spread == sorted(spread)


def test_the_ratio_and_share_are_validated():
    for bad in (0.99, -1.0, math.inf, math.nan, 1001.0, "x"):
        with pytest.raises(ValueError):
            require_correlation_ratio(bad)  # type: ignore[arg-type]
    for bad in (0.0, 1.5, math.nan):
        with pytest.raises(ValueError):
            CorrelationGuard(2.0, bad)


def test_the_guard_caps_the_rates_only_when_it_pays():
    n, m, s, d = 5000, 0.58, 4, 21

    def variance(rates):
        return variance_given_data(n, m, s, COUNTS, rates, d)

    value, rates = CorrelationGuard(1.0).best_cap(variance, COUNTS, LAMBDAS)
    assert rates == LAMBDAS and value == variance(LAMBDAS)
    guard = CorrelationGuard(3.0)
    value, rates = guard.best_cap(variance, COUNTS, LAMBDAS)
    assert all(r <= lam for r, lam in zip(rates, LAMBDAS, strict=True))
    assert value <= guard.worst_case(variance(LAMBDAS), COUNTS, LAMBDAS) * (1 + 1e-12)
    assert value == pytest.approx(guard.worst_case(variance(rates), COUNTS, rates), rel=1e-12)
    # A very strong correlation: sending the strict level's rate everywhere wins.
    _, rates = CorrelationGuard(1000.0).best_cap(variance, COUNTS, (0.9, 1.0, 1.0))
    assert max(rates) - min(rates) < 0.02


def test_the_estimate_is_off_by_the_identity_in_a_simulated_round():
    """The decoder's own estimate, averaged over many simulated rounds with strict holders,
    sits at w + b with b the identity's value (not at w)."""
    rng = np.random.default_rng(11)
    counts = np.array([300, 600, 300])
    lambdas = np.array([0.5, 1.0, 1.0])
    holders = np.array([[150.0], [100.0], [50.0]])  # half the holders strict, a quarter overall
    d, m = 2, 0.0
    full = np.hstack([holders, counts[:, None] - holders])
    estimates = []
    for _ in range(4000):
        sent = rng.binomial(full.astype(np.int64), lambdas[:, None]).sum(axis=0)
        estimates.append(estimate_frequencies(sent, counts, lambdas, m).values[0])
    bias = exact_bias(full, counts.astype(float), lambdas)[0]
    assert bias < -0.01
    se = np.std(estimates) / math.sqrt(len(estimates))
    assert abs(np.mean(estimates) - holders.sum() / counts.sum() - bias) < 4 * se
    assert d == full.shape[1]

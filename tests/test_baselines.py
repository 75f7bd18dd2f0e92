"""The baselines: PrivSet's subset exponential mechanism and balls-into-bins.

- PrivSet's probabilities equal a brute-force enumeration of the mechanism;
- every estimator is unbiased in simulation;
- every calibrated privacy parameter is checked by the accountant (and is tight:
  a slightly weaker setting fails);
- the one-item balls-into-bins pair is the accountant's single-item pair and
  bounds the server's full view (histogram and null count), by exact enumeration;
- large domains (16,470 items) are planned in seconds.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from segshuffle.core import accounting
from segshuffle.core.hockey_stick import delta_for, epsilon_for, poisson_pair, variation_ratio_pair
from segshuffle.experiments.balls_into_bins import (
    BallsIntoBins,
    calibrate_blanket,
    one_item_delta,
    pair_for,
)
from segshuffle.experiments.calibration import (
    _largest_local_epsilon,
    amplified_delta,
    balls_into_bins_config,
    expected_bib_mse,
    subexp_local_mechanism,
    subexp_shuffle_mechanism,
)
from segshuffle.experiments.privset import (
    SubsetExponential,
    _ordered_outside,
    _subset_counts,
    optimal_subset,
)
from segshuffle.experiments.settings import LOCAL_EPSILON, UNIFORM_EPSILON


def _enumerate(d: int, k: int, x: set[int], eps: float) -> dict[tuple[int, ...], float]:
    weights = {z: (math.exp(eps) if x & set(z) else 1.0)
               for z in itertools.combinations(range(d), k)}
    total = sum(weights.values())
    return {z: w / total for z, w in weights.items()}


@pytest.mark.parametrize(("d", "s"), [(5, 1), (6, 2), (7, 3), (8, 2)])
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_privset_rates_equal_brute_force(d, s, eps):
    x = set(range(s))
    disjoint = set(range(s, min(d, 2 * s)))
    for k in range(1, d - s + 1):
        mech = SubsetExponential(d, s, eps, k)
        dist = _enumerate(d, k, x, eps)
        hit_rate = sum(p for z, p in dist.items() if 0 in z)
        false_rate = sum(p for z, p in dist.items() if d - 1 in z)
        meets = sum(p for z, p in dist.items() if x & set(z))
        assert mech.p_true == pytest.approx(hit_rate, rel=1e-12)
        assert mech.p_false == pytest.approx(false_rate, rel=1e-12)
        assert mech.hit_probability == pytest.approx(meets, rel=1e-12)
        # beta: the total variation between two inputs as far apart as possible.
        other = _enumerate(d, k, disjoint | set(range(2 * s, 2 * s + s - len(disjoint))), eps)
        tv = sum(max(0.0, dist[z] - other[z]) for z in dist)
        p, beta, q = mech.variation_ratio_parameters()
        assert beta == pytest.approx(tv, rel=1e-12, abs=1e-15)
        assert p == q == pytest.approx(math.exp(eps))
        # eps-LDP: every output's probability changes by at most e^eps across inputs.
        ratio = max(dist[z] / other[z] for z in dist)
        assert ratio <= math.exp(eps) * (1 + 1e-12)
        assert mech.output_probability(True) == pytest.approx(max(dist.values()))


def test_privset_beta_is_the_largest_total_variation():
    d, s, eps, k = 7, 2, 1.0, 3
    mech = SubsetExponential(d, s, eps, k)
    base = _enumerate(d, k, {0, 1}, eps)
    largest = 0.0
    for y in itertools.combinations(range(d), s):
        other = _enumerate(d, k, set(y), eps)
        largest = max(largest, sum(max(0.0, base[z] - other[z]) for z in base))
    assert mech.variation_ratio_parameters()[1] == pytest.approx(largest, rel=1e-12)


# rank arithmetic; partial sort of keys; first distinct values of uniform draws
@pytest.mark.parametrize(("d", "k"), [(10, 4), (40, 30), (2000, 60)])
def test_privset_sampler_matches_rates(rng, d, k):
    mech = SubsetExponential(d, 3, 1.2, k)
    n = 100_000
    x = np.array([7, 0, 4])  # unsorted on purpose
    items = np.tile(x, (n, 1))
    counts = mech.sample_counts(items, rng)
    assert counts.sum() == n * k  # every report is a k-subset
    sd_t = math.sqrt(mech.p_true * (1 - mech.p_true) / n)
    sd_f = math.sqrt(mech.p_false * (1 - mech.p_false) / n)
    for j in range(d):
        if j in x:
            assert abs(counts[j] / n - mech.p_true) < 5 * sd_t
        else:
            assert abs(counts[j] / n - mech.p_false) < 5 * sd_f


def test_outside_items_of_a_large_domain_are_a_uniform_ordered_sample(rng):
    """The first-distinct sampler (k small against d): uniform first pick, uniform pairs."""
    d, k, n = 1000, 40, 40_000
    x = np.array([3, 50, 51, 999])
    picked = _ordered_outside(np.tile(x, (n, 1)), k, d, rng)
    assert picked.shape == (n, k)
    assert not np.isin(picked, x).any()
    assert all(np.unique(row).size == k for row in picked[:200])
    free = d - x.size
    first = np.bincount(picked[:, 0], minlength=d)
    assert first[x].sum() == 0
    expected = n / free
    assert np.abs(first[np.setdiff1d(np.arange(d), x)] - expected).max() < 5.5 * math.sqrt(
        expected)
    # Pair inclusion k (k - 1) / (free (free - 1)), for pairs around the items of x.
    for a, b in ((0, 1), (4, 52), (998, 2)):
        both = np.count_nonzero((picked == a).any(axis=1) & (picked == b).any(axis=1))
        rate = k * (k - 1) / (free * (free - 1))
        assert abs(both - n * rate) < 5 * math.sqrt(n * rate)


def test_privset_reports_are_uniform_given_their_overlap(rng):
    # Exact check of the sampler's joint law on a tiny domain: report frequencies
    # against the enumerated output distribution (chi-square style bound).
    d, s, k, eps = 6, 2, 2, 0.8
    mech = SubsetExponential(d, s, eps, k)
    dist = _enumerate(d, k, {1, 4}, eps)
    n = 3000
    seen = {z: 0 for z in dist}
    user = np.array([[1, 4]])
    overlap = [sum(p for z, p in dist.items() if len({1, 4} & set(z)) == i) for i in range(3)]
    assert mech.hit_probability == pytest.approx(overlap[1] + overlap[2])
    for i in rng.choice(np.arange(3), size=n, p=overlap):
        counts = _subset_counts(user, np.array([i]), d, k, rng)
        seen[tuple(np.flatnonzero(counts).tolist())] += 1
    total = sum(seen.values())
    for z, p in dist.items():
        sd = math.sqrt(p * (1 - p) / total)
        assert abs(seen[z] / total - p) < 5 * sd + 1e-9


def _check_unbiased(estimates: np.ndarray, truth: np.ndarray) -> None:
    """Mean of many independent estimates within 5 standard errors of the truth."""
    mean = estimates.mean(axis=0)
    se = estimates.std(axis=0, ddof=1) / math.sqrt(estimates.shape[0])
    z = np.abs(mean - truth) / np.maximum(se, 1e-12)
    assert z.max() < 5.0, (mean, truth, z)


def _population(rng, n=2000, d=12, s=3):
    # A skewed population: items 0..3 are popular.
    weights = np.linspace(3.0, 0.5, d)
    items = np.array([np.sort(rng.choice(d, size=s, replace=False, p=weights / weights.sum()))
                      for _ in range(n)])
    truth = np.bincount(items.ravel(), minlength=d) / n
    return items, truth


def test_privset_estimator_is_unbiased(rng):
    items, truth = _population(rng)
    mech = optimal_subset(12, 3, 2.0)
    runs = np.array([mech.estimate(mech.sample_counts(items, rng), items.shape[0])
                     for _ in range(400)])
    _check_unbiased(runs, truth)
    # The analytic total variance matches the spread of the estimates.
    measured = runs.var(axis=0, ddof=1).sum()
    assert measured == pytest.approx(mech.total_variance(items.shape[0]), rel=0.2)


@pytest.mark.parametrize("variant", ["one-item", "all-items"])
def test_balls_into_bins_estimator_is_unbiased(rng, variant):
    items, truth = _population(rng)
    n, s = items.shape
    config = BallsIntoBins(12, s, 1.7, variant)
    runs = np.array([config.estimate(config.sample_counts(items, rng), n) for _ in range(400)])
    _check_unbiased(runs, truth)
    mse = ((runs - truth) ** 2).sum(axis=1).mean()
    expected = expected_bib_mse(n, 12, s, 1.7, variant)
    assert mse == pytest.approx(expected, rel=0.2)
    assert mse <= config.mse_bound(n)


def test_sepmm_weighted_estimators_are_unbiased(rng):
    # Averages of unbiased per-level estimators are unbiased for the same average of
    # the levels' own frequencies (equal weights: SepMM; paper weights: weighted SepMM).
    items, _ = _population(rng, n=3000)
    levels = rng.permutation(np.repeat([0, 1, 2], 1000))
    configs = [BallsIntoBins(12, 3, m, v) for m, v in
               ((0.4, "one-item"), (2.0, "all-items"), (0.9, "all-items"))]
    weights = np.array([0.2, 0.5, 0.3])
    groups = [items[levels == k] for k in range(3)]
    group_truth = np.array([np.bincount(g.ravel(), minlength=12) / len(g) for g in groups])
    runs = []
    for _ in range(300):
        est = np.array([c.estimate(c.sample_counts(g, rng), len(g))
                        for c, g in zip(configs, groups, strict=True)])
        runs.append(np.concatenate([est.mean(axis=0), weights @ est]))
    runs = np.array(runs)
    _check_unbiased(runs, np.concatenate([group_truth.mean(axis=0), weights @ group_truth]))


@pytest.mark.parametrize(("n", "d", "s", "eps"), [
    (5000, 21, 4, 0.5),
    pytest.param(50000, 128, 8, 0.5, marks=pytest.mark.slow),
    (1250, 21, 4, 0.5),
    (2000, 128, 4, 2.0),
])
def test_balls_into_bins_calibration_checked_by_accountant(n, d, s, eps):
    delta = 0.01 / n
    m = calibrate_blanket(n, d, s, eps, delta, "one-item")
    # The accountant, called directly on the p = +inf, beta = 1, q = d/(s gamma) pair.
    slots = math.ceil(m)
    pair = variation_ratio_pair(math.inf, 1.0, d * slots / (s * m), n * slots)
    achieved = epsilon_for(pair, delta)
    assert achieved is not None and achieved <= eps
    assert pair == pair_for(n, d, s, m)
    # The same pair written as the Poisson pair with lambda = 1, r = s gamma / d.
    assert delta_for(pair, eps) == pytest.approx(
        delta_for(poisson_pair(1.0, n * slots - 1, s * m / (slots * d)), eps), rel=1e-12)
    # Minimal: 1% less blanket breaks the guarantee.
    assert one_item_delta(n, d, s, 0.99 * m, eps) > delta

    # All items: the segmented protocol at lambda = 1, by the user-level accountant on
    # the full view (no group privacy), and minimal there too.
    m_all = calibrate_blanket(n, d, s, eps, delta, "all-items")
    assert accounting.user_level_holds(eps, 1.0, s, delta, n, m_all, d)
    upper = accounting.user_epsilon(1.0, s, delta, n, m_all, d)
    assert upper is not None and upper <= eps * (1 + 1e-6)  # the search's own precision
    assert not accounting.user_level_holds(eps, 1.0, s, delta, n, 0.99 * m_all, d)


@pytest.mark.parametrize(("n", "d", "s"), [(5000, 128, 4), (300, 24, 3), (40, 16, 8)])
@pytest.mark.parametrize("m", [0.4, 1.0, 2.7])
def test_one_item_pair_bounds_the_accountants_single_item_view(n, d, s, m):
    """One ball uniform over s items is one item sent with lambda = 1 over d / s super-items:
    the baseline's one-item pair bounds the view the accountant computes exactly at s = 1
    (the single-item mixture over every slot, protocol.md section 4.2.1), so the
    accountant is at most the pair (plus its rounding margin) and at least the exact view's
    exhibited lower bound."""
    for eps in (0.25, 0.5, 1.0, 2.0):
        accountant = accounting.user_delta(eps, 1.0, 1, n, m, d // s)
        pair = one_item_delta(n, d, s, m, eps)
        lower = accounting.user_delta_lower(eps, 1.0, 1, n, m, d // s)
        assert lower * (1 - 1e-9) <= accountant <= pair * (1 + 1e-6) + 1e-15


@pytest.mark.slow  # the all-items calibration at 100 users takes the joint view: 20 CPU-s
def test_infeasible_variant_is_left_out():
    # 100 users over 2,000 items: no blanket up to the cap lets them send all 4 items
    # at eps = 0.5, but one uniformly chosen item can still be hidden.
    n, d, s, eps = 100, 2000, 4, 0.5
    delta = 0.01 / n
    with pytest.raises(accounting.UnprotectableLevelError):
        calibrate_blanket(n, d, s, eps, delta, "all-items")
    choice = balls_into_bins_config(n, d, s, eps, delta)
    assert choice.config.variant == "one-item"
    assert [variant for variant, _, _ in choice.alternatives] == ["one-item"]
    assert one_item_delta(n, d, s, choice.config.m, eps) <= delta
    # 40 users over 4,000 items: neither variant fits under the cap.
    with pytest.raises(ValueError, match="no balls-into-bins variant"):
        balls_into_bins_config(40, 4000, s, eps, 0.01 / 40)


def test_subexp_shuffle_calibration_checked_by_accountant():
    n, d, s, eps = 5000, 21, 4, 0.5
    delta = 0.01 / n
    mech = subexp_shuffle_mechanism(n, d, s, eps, delta)
    p, beta, q = mech.variation_ratio_parameters()
    achieved = epsilon_for(variation_ratio_pair(p, beta, q, n), delta)
    assert achieved is not None and achieved <= eps
    assert mech.epsilon > eps  # amplification helps
    stronger = SubsetExponential(d, s, mech.epsilon * 1.01, mech.subset_size)
    assert amplified_delta(stronger, n, eps) > delta
    # Its subset size beats the other calibrated subset sizes.
    for k in range(1, 8):
        eps0 = _largest_local_epsilon(d, s, k, n, eps, delta, 1e-4)
        rival = SubsetExponential(d, s, eps0, k)
        assert rival.total_variance(n) >= mech.total_variance(n) * (1 - 1e-12)


def test_balls_into_bins_choice_picks_the_smaller_expected_error():
    choice = balls_into_bins_config(5000, 21, 4, 0.5, 0.01 / 5000)
    variants = {v: mse for v, _, mse in choice.alternatives}
    assert set(variants) == {"one-item", "all-items"}
    assert choice.expected_mse == min(variants.values())
    assert choice.config.variant == min(variants, key=variants.get)


def _exact_view_distribution(sets, d, slots, gamma):
    """Exact law of the server's full view: (item histogram, null count).

    One ball uniform over each user's set, plus ``slots`` blanket slots, each null
    with probability 1 - gamma and a uniform item otherwise.
    """
    dist = {(tuple([0] * d), 0): 1.0}

    def add(dist, outcomes):
        new = defaultdict(float)
        for (counts, nulls), p in dist.items():
            for item, q in outcomes:
                if item is None:
                    new[(counts, nulls + 1)] += p * q
                else:
                    c = list(counts)
                    c[item] += 1
                    new[(tuple(c), nulls)] += p * q
        return new

    for user_set in sets:
        dist = add(dist, [(i, 1.0 / len(user_set)) for i in user_set])
    for _ in range(slots):
        dist = add(dist, [(None, 1.0 - gamma)] + [(j, gamma / d) for j in range(d)])
    return dist


@pytest.mark.parametrize(("d", "s", "n"), [(4, 2, 3), (6, 3, 2), (5, 2, 3)])
@pytest.mark.parametrize("m", [1.0, 0.6, 1.5])
def test_one_item_pair_bounds_the_full_view(d, s, n, m):
    """Brute force: the protocol's divergence on the full view never exceeds the pair's.

    Every pair of victim sets (disjoint and overlapping) against two backgrounds.
    """
    slots = math.ceil(m)
    gamma = m / slots
    sets = list(itertools.combinations(range(d), s))
    victim = sets[0]
    bounds = {eps: one_item_delta(n, d, s, m, eps) for eps in (0.25, 0.5, 1.0, 2.0)}
    closest = 0.0
    for other in sets[1:]:
        for background in ([sets[0]] * (n - 1), [sets[-1]] * (n - 1)):
            p = _exact_view_distribution([victim, *background], d, n * slots, gamma)
            q = _exact_view_distribution([other, *background], d, n * slots, gamma)
            assert sum(p.values()) == pytest.approx(1.0)
            for eps, bound in bounds.items():
                e = math.exp(eps)
                exact = sum(max(0.0, p.get(v, 0.0) - e * q.get(v, 0.0)) for v in set(p) | set(q))
                assert exact <= bound + 1e-12, (other, background, eps, exact, bound)
                closest = max(closest, exact / bound)
    assert closest > 0.3  # the bound is not vacuous: some pair of inputs comes close


def _exact_rates(d: int, s: int, k: int, eps: float) -> dict[str, float]:
    """PrivSet's rates with exact rational binomials (the definition, no simplification)."""
    e = Fraction(math.exp(eps))
    total = math.comb(d, k)
    omega = e * (total - math.comb(d - s, k)) + math.comb(d - s, k)
    with_j, with_j_miss = math.comb(d - 1, k - 1), math.comb(d - 1 - s, k - 1)
    beta = (e - 1) * (math.comb(d - s, k) - math.comb(d - 2 * s, k)) / omega
    return {"p_true": float(e * with_j / omega),
            "p_false": float((e * (with_j - with_j_miss) + with_j_miss) / omega),
            "hit_probability": float(e * (total - math.comb(d - s, k)) / omega),
            "beta": float(beta)}


@pytest.mark.parametrize(("d", "s"), [(200, 8), (1000, 4), (64, 30)])
def test_privset_rates_equal_exact_binomials_on_larger_domains(d, s):
    for k in sorted({1, 2, 5, d // 3, d - 2 * s, d - s - 1, d - s} & set(range(1, d - s + 1))):
        for eps in (0.5, 2.0, 6.0):
            mech = SubsetExponential(d, s, eps, k)
            exact = _exact_rates(d, s, k, eps)
            assert mech.p_true == pytest.approx(exact["p_true"], rel=1e-11)
            assert mech.p_false == pytest.approx(exact["p_false"], rel=1e-11, abs=1e-300)
            assert mech.hit_probability == pytest.approx(exact["hit_probability"], rel=1e-11)
            assert mech.variation_ratio_parameters()[1] == pytest.approx(
                exact["beta"], rel=1e-10, abs=1e-300)


def test_optimal_subset_scans_every_size():
    d, s, eps = 150, 5, 1.3
    best = optimal_subset(d, s, eps)
    variances = [SubsetExponential(d, s, eps, k).total_variance(1) for k in range(1, d - s + 1)]
    assert best.total_variance(1) == pytest.approx(min(variances), rel=1e-12)
    assert best.subset_size == 1 + int(np.argmin(variances))


def test_large_domain_privset_planning_takes_seconds():
    """Regression: a 16,470-item file (privacy domain 16,474) used to hang in planning.

    The subset sizes were searched with exact big-integer binomials for every k;
    both PrivSet baselines must now be planned in a few seconds, and the chosen
    subset sizes must beat their neighbours.
    """
    d, s, n = 16_470 + 4, 4, 5000
    started = time.perf_counter()
    local = subexp_local_mechanism(d, s, LOCAL_EPSILON)
    shuffled = subexp_shuffle_mechanism(n, d, s, UNIFORM_EPSILON, 0.01 / n)
    elapsed = time.perf_counter() - started
    assert elapsed < 10.0, elapsed
    k = local.subset_size
    assert 1 < k < d - s
    for other in (k - 1, k + 1, k // 2, 2 * k):
        rival = SubsetExponential(d, s, LOCAL_EPSILON, other)
        assert rival.total_variance(n) >= local.total_variance(n)
    assert 0.0 < local.p_false < local.p_true < 1.0
    assert local.p_true == pytest.approx(math.exp(LOCAL_EPSILON) * k / d / local.normalizer)
    p, beta, q = shuffled.variation_ratio_parameters()
    assert shuffled.epsilon > UNIFORM_EPSILON
    assert amplified_delta(shuffled, n, UNIFORM_EPSILON) <= 0.01 / n
    assert 0.0 < beta < 1.0 and p == q


def test_privset_samples_a_large_domain(rng):
    d, s, k = 16_474, 4, 476
    mech = SubsetExponential(d, s, 2.0, k)
    items = np.tile(np.array([5, 900, 16_000, 16_473]), (400, 1))
    counts = mech.sample_counts(items, rng)
    assert counts.sum() == 400 * k
    held = counts[[5, 900, 16_000, 16_473]]
    sd = math.sqrt(400 * mech.p_true * (1 - mech.p_true))
    assert abs(held.mean() - 400 * mech.p_true) < 5 * sd

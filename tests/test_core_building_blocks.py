"""Randomizers, level histogram, estimator and validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from segshuffle.core import validation
from segshuffle.core.estimator import estimate_frequencies, mse_bound, project_to_simplex
from segshuffle.core.levels import (
    debias_histogram,
    level_histogram,
    randomize_level,
    randomize_levels,
)
from segshuffle.core.randomizers import (
    blanket_items,
    blanket_probability,
    blanket_slots,
    fit_set,
    fixed_size_slots,
    poisson_sample,
)


def test_fit_set_pads_with_distinct_reserved_items(rng) -> None:
    fitted = fit_set([3, 3, 1], 4, 10, rng)
    assert len(fitted) == 4 and list(fitted) == sorted(fitted)
    assert {1, 3} <= set(fitted)
    padding = [i for i in fitted if i >= 10]
    assert len(padding) == 2 and len(set(padding)) == 2 and all(i < 14 for i in padding)


def test_fit_set_samples_large_sets_uniformly(rng) -> None:
    hits = np.zeros(8)
    for _ in range(4000):
        hits[list(fit_set(range(8), 2, 8, rng))] += 1
    assert np.allclose(hits / 4000, 0.25, atol=0.03)


def test_fit_set_rejects_out_of_domain(rng) -> None:
    with pytest.raises(ValueError, match="ids in"):
        fit_set([12], 2, 10, rng)


def test_poisson_and_blanket_rates(rng) -> None:
    kept = sum(len(poisson_sample(range(10), 0.3, rng)) for _ in range(2000))
    assert abs(kept / 20000 - 0.3) < 0.02
    assert blanket_slots(2.4) == 3 and blanket_probability(2.4) == pytest.approx(0.8)
    assert blanket_slots(0.0) == 0 and blanket_probability(0.0) == 0.0
    sent = sum(len(blanket_items(2.4, 5, rng)) for _ in range(2000))
    assert abs(sent / 2000 - 2.4) < 0.1


def test_fixed_size_slots_have_a_fixed_count(rng) -> None:
    for lam in (0.0, 0.5, 1.0):
        slots = fixed_size_slots(np.array([1, 2, 3]), lam, 1.5, 10, rng)
        assert len(slots) == 3 + 2
    assert fixed_size_slots(np.array([1, 2]), 1.0, 0.0, 10, rng) == [1, 2]


def test_level_histogram_and_randomized_response(rng) -> None:
    assert level_histogram([0, 2, 2], 3).tolist() == [1, 0, 2]
    true = rng.choice(3, 60_000, p=[0.2, 0.5, 0.3])
    noisy = randomize_levels(true, 3, 1.0, rng)
    estimate = debias_histogram(level_histogram(noisy, 3), 1.0)
    assert np.allclose(estimate / 60_000, [0.2, 0.5, 0.3], atol=0.02)
    assert randomize_level(0, 1, 1.0, rng) == 0
    values = {randomize_level(0, 3, 0.1, rng) for _ in range(200)}
    assert values == {0, 1, 2}


def test_randomizers_draw_from_any_random_source() -> None:
    """A seeded random.Random and a seeded numpy Generator both reproduce a user's draws;
    with no source the randomizers draw from the operating system's CSPRNG."""
    import random

    from segshuffle.core.randomness import StdlibSource, as_source

    for make in (lambda: random.Random(7), lambda: np.random.default_rng(7)):
        first = fixed_size_slots(fit_set([1, 5], 4, 10, make()), 0.5, 2.5, 14, make())
        assert first == fixed_size_slots(fit_set([1, 5], 4, 10, make()), 0.5, 2.5, 14, make())
    assert isinstance(as_source(None), StdlibSource)
    assert len(fixed_size_slots([1, 2, 3], 0.5, 1.5, 10)) == 5
    with pytest.raises(TypeError, match="rng must be"):
        as_source(42)


def test_estimator_is_exact_without_noise() -> None:
    # lambda = 1, m = 0: counts are the holders, W^ = C / n.
    estimate = estimate_frequencies([5, 0, 10], [10, 10], [1.0, 1.0], 0.0)
    assert estimate.values.tolist() == [0.25, 0.0, 0.5]


def test_estimator_removes_the_blanket_mean() -> None:
    estimate = estimate_frequencies([30, 30], [100], [0.5], 0.4)
    # (C - n m / d) / (n lambda) = (30 - 20) / 50.
    assert estimate.values.tolist() == pytest.approx([0.2, 0.2])
    assert np.all(estimate.standard_errors > 0)


def test_projection_onto_the_simplex() -> None:
    projected = project_to_simplex([0.9, -0.2, 0.5, 0.1], 1.0)
    assert projected.sum() == pytest.approx(1.0)
    assert np.all(projected >= 0)
    assert project_to_simplex([0.5, 0.5], 1.0).tolist() == [0.5, 0.5]


def test_the_projection_keeps_every_share_at_most_one() -> None:
    """A share is at most 1 (the demo's projected column once showed 3.8)."""
    assert project_to_simplex([3.8, 0.1, -0.2], 1.0).tolist() == pytest.approx([1, 0, 0])
    capped = project_to_simplex([1.5, 1.2, 0.1, 0.0], 2.0)  # unconstrained: 1.15, 0.85
    assert capped.tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0])
    rng = np.random.default_rng(3)
    for _ in range(200):
        values = rng.normal(0.3, 1.5, size=12)
        total = float(rng.integers(0, 13))
        projected = project_to_simplex(values, total)
        assert projected.sum() == pytest.approx(total, abs=1e-9)
        assert np.all((projected >= 0) & (projected <= 1))
        # it is the nearest point of the set: no feasible step towards v gets closer
        for _ in range(5):
            other = project_to_simplex(rng.uniform(0, 1, 12) * 2, total)
            assert np.sum((values - projected) ** 2) <= np.sum((values - other) ** 2) + 1e-9


def test_mse_bound_formula() -> None:
    assert mse_bound(100, 2.0, 3, [50, 50], [0.5, 1.0]) == pytest.approx(
        (200 + 3 * 75) / 75**2)
    assert math.isinf(mse_bound(100, 2.0, 3, [50, 50], [0.0, 0.0]))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: validation.require_levels([]), "at least one"),
        (lambda: validation.require_shares([0.5, 0.6], 2), "sum to 1"),
        (lambda: validation.require_shares([1.0], 2), "one entry per level"),
        (lambda: validation.require_int("users", 2.5, 2), "integer"),
        (lambda: validation.require_int("users", True, 2), "integer"),
        (lambda: validation.require_finite("x", float("nan")), "finite"),
        (lambda: validation.require_domain(5, 6), "must not exceed"),
    ],
)
def test_validation_messages(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


# --- the independent blanket mode -----------------------------------------------------------


def test_independent_blanket_sends_each_item_with_probability_m_over_d(rng) -> None:
    d, m, runs = 8, 2.0, 6000
    per_item = np.zeros(d)
    totals = np.empty(runs)
    for index in range(runs):
        sent = blanket_items(m, d, rng, mode="independent")
        assert len(set(sent)) == len(sent)  # at most one message per item
        per_item[sent] += 1
        totals[index] = len(sent)
    # each item: Binomial(runs, m / d); total per user: Binomial(d, m / d)
    p = m / d
    assert np.all(np.abs(per_item - runs * p) < 4.5 * math.sqrt(runs * p * (1 - p)))
    assert abs(totals.mean() - m) < 4.5 * math.sqrt(d * p * (1 - p) / runs)
    assert abs(totals.var() - d * p * (1 - p)) < 0.1
    assert blanket_items(0.0, d, rng, mode="independent") == []
    assert blanket_items(8.0, d, rng, mode="independent") == list(range(8))


def test_independent_fixed_size_slots_carry_their_own_item(rng) -> None:
    items, d, m, runs = np.array([1, 4, 6]), 9, 3.0, 4000
    sent = np.zeros(d)
    for _ in range(runs):
        slots = fixed_size_slots(items, 0.5, m, d, rng, mode="independent")
        assert len(slots) == items.size + d  # s + d, whatever is sent
        assert all(j is None or j == i for i, j in zip(items, slots[:3], strict=True))
        blanket = slots[3:]
        assert all(j is None or j == t for t, j in enumerate(blanket))
        sent += [j is not None for j in blanket]
    p = m / d
    assert np.all(np.abs(sent - runs * p) < 4.5 * math.sqrt(runs * p * (1 - p)))
    assert fixed_size_slots(np.array([1, 2]), 1.0, 0.0, d, rng, mode="independent") == [1, 2]


def test_slots_mode_is_the_default_and_unchanged() -> None:
    items = np.array([1, 2, 3])
    default = fixed_size_slots(items, 0.5, 1.5, 10, np.random.default_rng(3))
    explicit = fixed_size_slots(items, 0.5, 1.5, 10, np.random.default_rng(3), mode="slots")
    assert default == explicit and len(default) == 3 + 2
    assert (blanket_items(2.4, 5, np.random.default_rng(4))
            == blanket_items(2.4, 5, np.random.default_rng(4), mode="slots"))


def test_independent_mode_refuses_bad_rates_and_modes(rng) -> None:
    with pytest.raises(ValueError, match="at most the privacy domain size 5"):
        fixed_size_slots(np.array([1]), 1.0, 5.5, 5, rng, mode="independent")
    with pytest.raises(ValueError, match="at most the privacy domain size 5"):
        blanket_items(6.0, 5, rng, mode="independent")
    with pytest.raises(ValueError, match="blanket mode must be one of slots, independent"):
        blanket_items(1.0, 5, rng, mode="uniform")
    with pytest.raises(ValueError, match="at most the privacy domain size 2"):
        estimate_frequencies([1, 1], [10], [1.0], 3.0, mode="independent")


def test_estimator_variance_follows_the_blanket_mode() -> None:
    counts, n, m, d = [30, 30, 30, 30], 100, 1.5, 4
    slots = estimate_frequencies(counts, [n], [0.5], m)
    independent = estimate_frequencies(counts, [n], [0.5], m, mode="independent")
    # the mean correction n m / d is the same in both modes
    assert independent.values.tolist() == pytest.approx(slots.values.tolist())
    w = np.clip(slots.values, 0.0, 1.0)
    signal = n * w * 0.5 * (1 - w * 0.5)
    gamma = m / 2
    slot_var = n * 2 * (gamma / d) * (1 - gamma / d)
    independent_var = n * (m / d) * (1 - m / d)
    assert slots.standard_errors == pytest.approx(np.sqrt(signal + slot_var) / (n * 0.5))
    assert independent.standard_errors == pytest.approx(
        np.sqrt(signal + independent_var) / (n * 0.5))

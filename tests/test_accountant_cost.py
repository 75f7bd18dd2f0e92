"""What the numpy accountant spends, counted rather than timed: no per-count numpy calls in
the Poisson tails, no revealed-send bound where a cheaper one is already smaller, each
value of a search computed once, and kept loss distributions bounded by their memory."""

from __future__ import annotations

import numpy as np
import pytest

from segshuffle.core import (
    accounting,
    distributions,
    poisson_comparison,
    privacy_loss,
    revealed_send,
    scalar_search,
)
from segshuffle.core.memo import memory_bounded_cache
from segshuffle.core.privacy_loss import BinLaw, composed_pair


class _Counted:
    """A stand-in that counts the calls of the function it wraps."""

    def __init__(self, function) -> None:
        self.function = function
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.function(*args, **kwargs)


def test_poisson_tails_find_their_windows_without_numpy_calls(monkeypatch) -> None:
    # Regression: each window end was found by doubling with a one-element numpy mass per
    # step, about 60 numpy calls per tail; a Poisson comparison made thousands of them.
    counted = _Counted(distributions.poisson_logpmf)
    monkeypatch.setattr(distributions, "poisson_logpmf", counted)
    totals = np.arange(4_000, 6_001, 8, dtype=float)
    tails = distributions.poisson_tails(totals, 5_000.0)
    assert counted.calls == 0
    assert np.all((tails.lower > 0.0) & (tails.upper > 0.0))


def test_a_poisson_comparison_costs_one_mass_array_per_evaluation(monkeypatch) -> None:
    poisson_comparison.clear_caches()
    pmf = _Counted(distributions.poisson_pmf)
    tails = _Counted(distributions.poisson_tails)
    monkeypatch.setattr(distributions, "poisson_pmf", pmf)
    monkeypatch.setattr(distributions, "poisson_tails", tails)
    nu, eta = poisson_comparison.dominated_poisson_mean(2_000_000, 3e-3, 1e-12)
    assert 0.0 < nu < 6_000.0 and 0.0 <= eta <= 1e-12
    # One mass array per evaluation: the counts asked straddle the mean, and both sides'
    # windows come from one array (two before, one per side, and their clusters each time).
    assert pmf.calls == tails.calls


@pytest.mark.parametrize("mean", [0.3, 7.5, 140.0, 5_000.0, 2.5e6])
def test_poisson_tails_on_a_run_of_counts_are_the_general_paths_bit_for_bit(mean) -> None:
    # Increasing counts (a comparison's window or its subsample) take one mass array for
    # both sides of the mode; the same counts in another order take the general path, one
    # window per cluster and side.  Same values and the same error bound, exactly.
    sigma = max(1.0, mean**0.5)
    lo, hi = max(0, int(mean - 14 * sigma - 50)), int(mean + 14 * sigma + 50)
    rng = np.random.default_rng(7)
    for stride in (1, 3, max(1, (hi - lo) // 256)):
        run = np.arange(lo, hi + 1, stride, dtype=float)
        run = np.sort(np.concatenate((run, [float(hi)], rng.choice(run, 3))))  # repeats too
        order = rng.permutation(run.size)
        fast = distributions.poisson_tails(run, mean)
        general = distributions.poisson_tails(run[order], mean)
        assert np.array_equal(fast.lower[order], general.lower)
        assert np.array_equal(fast.upper[order], general.upper)
        assert fast.rtol == general.rtol


def _groups_accountant() -> accounting.SlotAccountant:
    accounting.clear_caches()
    bound = accounting.slot_bound(900, 16.5, 128, 8, 1e-11)
    assert bound.groups is not None and not bound.joint
    return bound


def test_the_revealed_bound_is_not_built_where_the_groups_bound_is_below_its_floor(
        monkeypatch) -> None:
    # Regression: the revealed-send bound (a Poisson comparison and a composition per
    # number of differing items) was built at every m and lambda, though at lambda < 1
    # the labelled groups are far below it.
    bound = _groups_accountant()
    counted = _Counted(poisson_comparison.dominated_poisson_mean)
    monkeypatch.setattr(revealed_send, "dominated_poisson_mean", counted)
    value = bound.user_delta(0.5, 0.25)
    assert counted.calls == 0
    # And the value is the smaller of the two bounds, as when both are computed.
    revealed = bound.revealed.user_delta(0.5, 0.25)
    assert counted.calls > 0
    assert value == min(revealed, bound.groups.delta(0.5, 0.25))
    assert value <= bound.revealed.user_delta_floor(0.5, 0.25)


@pytest.mark.parametrize("lam", [1e-3, 0.3, 0.9, 1.0])
def test_the_revealed_floor_is_below_the_revealed_bound(lam: float) -> None:
    bound = _groups_accountant().revealed
    for eps in (0.0, 0.3, 1.0, 3.0):
        assert bound.user_delta_floor(eps, lam) <= bound.user_delta(eps, lam)


def test_a_lambda_search_evaluates_each_point_once(monkeypatch) -> None:
    accounting.clear_caches()
    seen: list[float] = []
    original = accounting.SlotAccountant.user_delta

    def recording(self, eps: float, lam: float) -> float:
        seen.append(lam)
        return original(self, eps, lam)

    monkeypatch.setattr(accounting.SlotAccountant, "user_delta", recording)
    lam = accounting.max_lambda(1.0, 4, 1e-6, 5000, 0.4, 17, bracket=(0.7, 0.95))
    assert 0.0 < lam < 1.0
    assert len(seen) == len(set(seen))


def test_remembered_computes_each_value_once() -> None:
    counted = _Counted(lambda x: x * x)
    square = scalar_search.remembered(counted)
    assert [square(3.0), square(3.0), square(2.0)] == [9.0, 9.0, 4.0]
    assert counted.calls == 2


class _Blob:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def test_a_memory_bounded_cache_keeps_what_fits_and_forgets_the_oldest() -> None:
    made = _Counted(lambda key, size: _Blob(size))
    cached = memory_bounded_cache(100)(made)
    first = cached("a", 40)
    cached("b", 40)
    assert cached("a", 40) is first and made.calls == 2  # "a" is now the newest
    cached("c", 40)  # 120 bytes: the oldest, "b", goes
    assert made.calls == 3
    cached("a", 40)
    assert made.calls == 3
    cached("b", 40)
    assert made.calls == 4
    big = cached("huge", 1000)  # larger than the budget: returned, never kept
    assert cached("huge", 1000) is not big
    cached.cache_clear()
    cached("a", 40)
    assert made.calls == 7


def test_a_memory_bounded_cache_refuses_an_empty_budget() -> None:
    with pytest.raises(ValueError):
        memory_bounded_cache(0)


def test_kept_compositions_stay_within_their_budget(monkeypatch) -> None:
    # Regression: 512 compositions of up to megabytes each were kept (2.2 GB at n = 1000).
    budget = 2 << 20
    kept = privacy_loss._composed_pair
    cached = memory_bounded_cache(budget, max_entries=512)(kept.__wrapped__)
    monkeypatch.setattr(privacy_loss, "_composed_pair", cached)
    held = []
    for i in range(40):
        held.append(composed_pair(BinLaw(50.0 + i), 0.5, 8, upper=True,
                                  step=privacy_loss.DEFAULT_STEP).nbytes)
    assert sum(held) > 2 * budget
    assert cached.cache_bytes() <= budget
    assert kept.cache_bytes() <= privacy_loss.COMPOSED_CACHE_BYTES


def test_half_pmf_runs_take_each_runs_own_terms_once(monkeypatch) -> None:
    # Regression: ln t! and t ln 2 were computed for every atom of a run (a group pair has
    # up to half a million atoms in a few hundred runs): a third of a heavy client check.
    from segshuffle.core.arrays import numpy_backend

    totals = np.array([400, 1_000, 2_500])
    first, last = (totals * 0.4).astype(np.int64), (totals * 0.6).astype(np.int64)
    atoms = int((last - first + 1).sum())
    sizes: list[int] = []
    gammaln = numpy_backend.special.gammaln

    class Recorded:
        @staticmethod
        def gammaln(x):
            sizes.append(np.size(x))
            return gammaln(x)

    monkeypatch.setattr(numpy_backend, "special", Recorded)
    masses = numpy_backend.half_pmf_runs(totals, first, last)
    assert sum(sizes) == 2 * atoms + totals.size  # 3 * atoms before
    # The same values as the per-atom formula, bit for bit.
    t = np.repeat(totals, last - first + 1).astype(float)
    a = numpy_backend.runs(first, last).astype(float)
    expected = np.exp(gammaln(t + 1.0) - gammaln(a + 1.0) - gammaln(t - a + 1.0)
                      - t * np.log(2.0))
    assert np.array_equal(masses, expected)

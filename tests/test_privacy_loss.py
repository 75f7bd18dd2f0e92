"""The accountant's building blocks: discretised PLDs, the Poisson comparison, exhibited views."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from segshuffle.core.full_view import aggregated_shift_delta
from segshuffle.core.hockey_stick import delta_for, poisson_pair
from segshuffle.core.poisson_comparison import cdf_excess, dominated_poisson_mean
from segshuffle.core.privacy_loss import BinLaw, composed_pair, pair_loss


def _exact_composed_delta(law: BinLaw, lam: float, times: int, eps: float) -> float:
    """delta of ``times`` independent item pairs by brute force over every bin count."""
    hi = int(law.mean + 10 * math.sqrt(law.mean + 1) + 12)
    if law.trials is not None:
        hi = min(hi, law.trials + 1)
    counts = np.arange(0, hi + 1)
    f = law.pmf(counts)
    f_lam = (1 - lam) * f + lam * law.pmf(counts - 1)
    p_pair, q_pair = np.outer(f_lam, f).ravel(), np.outer(f, f_lam).ravel()
    p, q = p_pair, q_pair
    for _ in range(times - 1):
        p, q = np.outer(p, p_pair).ravel(), np.outer(q, q_pair).ravel()
    return float(np.maximum(p - math.exp(eps) * q, 0.0).sum())


@pytest.mark.parametrize(("law", "lam"), [
    (BinLaw(5.0), 1.0), (BinLaw(3.0), 0.5), (BinLaw(4.0, 40), 0.7), (BinLaw(2.0, 10), 1.0),
    (BinLaw(0.4, 8), 0.3),
])
@pytest.mark.parametrize("times", [1, 2])
@pytest.mark.parametrize("eps", [0.2, 1.0, 2.0])
def test_pessimistic_and_optimistic_grids_bracket_the_exact_divergence(
        law: BinLaw, lam: float, times: int, eps: float) -> None:
    exact = _exact_composed_delta(law, lam, times, eps)
    upper = composed_pair(law, lam, times, upper=True).delta(eps)
    lower = composed_pair(law, lam, times, upper=False).delta(eps)
    assert lower <= exact * (1 + 1e-9) + 1e-15
    assert upper >= exact * (1 - 1e-9) - 1e-15
    # The grid step is 1e-4: both sit close to the exact value.
    assert upper <= exact * 1.05 + 1e-12


def test_no_blanket_reveals_every_sent_message() -> None:
    law = BinLaw(0.0)
    assert composed_pair(law, 1.0, 1, upper=True).delta(3.0) == pytest.approx(1.0)
    assert composed_pair(law, 0.4, 3, upper=True).delta(3.0) == pytest.approx(1 - 0.6**3)


@pytest.mark.parametrize(("trials", "q"), [(9999, 2 / 17), (149, 0.2), (10, 0.5),
                                           (199_999, 4 / 128), (100, 0.01)])
def test_dominated_poisson_mean_meets_its_slack_everywhere(trials: int, q: float) -> None:
    slack = 1e-12
    nu, eta = dominated_poisson_mean(trials, q, slack)
    assert 0.0 < nu <= trials * q
    assert eta <= slack
    # Checked on every total from 0 to trials (and the Poisson tail beyond).
    t = np.arange(0, trials + 1)
    worst = max(float(np.max(special.bdtr(t, trials, q) - special.pdtr(t, nu))),
                float(special.pdtrc(trials, nu)))
    assert worst <= slack
    # ... and it is nearly the largest such mean.
    assert cdf_excess(trials, q, nu * 1.01 + 0.02) > slack


def test_aggregated_view_of_one_item_is_the_two_bin_pair() -> None:
    for n_slots, r, eps in ((4000, 1 / 32, 0.5), (5000, 1 / 21, 0.3), (50, 0.1, 1.0)):
        assert aggregated_shift_delta(n_slots, r, 1, eps) == pytest.approx(
            delta_for(poisson_pair(1.0, n_slots, r), eps), rel=1e-9)


def test_aggregated_view_by_enumeration() -> None:
    # (U0 + j, U1) against (U0, U1 + j), (U0, U1) ~ Multinomial(N; q, q), by a 2-D sum.
    n_slots, q, j, eps = 30, 0.15, 2, 0.7
    a = np.arange(0, n_slots + j + 1)
    joint = np.zeros((a.size, a.size))
    for u0 in range(n_slots + 1):
        for u1 in range(n_slots + 1 - u0):
            joint[u0, u1] = stats.multinomial.pmf([u0, u1, n_slots - u0 - u1], n_slots,
                                                  [q, q, 1 - 2 * q])
    p = np.zeros_like(joint)
    p[j:, :] = joint[:-j, :]
    q_view = np.zeros_like(joint)
    q_view[:, j:] = joint[:, :-j]
    exact = float(np.maximum(p - math.exp(eps) * q_view, 0.0).sum())
    assert aggregated_shift_delta(n_slots, q, j, eps) == pytest.approx(exact, rel=1e-9)


def test_single_item_full_view_matches_enumeration() -> None:
    # The exhibited s = 1 view (a, b, non-null rest) against the brute-force enumerator.
    from segshuffle.core.accounting import blanket_geometry
    from segshuffle.core.full_view import single_item_full_view_delta
    from tests.full_view import slot_full_view_delta

    for users, m, d, lam, eps in ((5, 1.5, 4, 0.5, 1.0), (4, 0.5, 5, 0.9, 0.5),
                                  (6, 2.0, 4, 0.5, 2.0), (8, 0.25, 4, 0.5, 4.0)):
        n_slots, r = blanket_geometry(users, m, d, every_slot=True)
        gamma = m / math.ceil(m)
        assert single_item_full_view_delta(eps, lam, n_slots, r, gamma) == pytest.approx(
            slot_full_view_delta(eps, lam, users, m, d, (0,), (1,)), rel=1e-9)


def _exact_outside(law: BinLaw, lo: int, hi: int) -> float:
    """Pr[X < lo] + Pr[X > hi] in 60-digit arithmetic (mpmath), summed term by term."""
    import mpmath

    mpmath.mp.dps = 60
    mean = mpmath.mpf(law.mean)
    if law.trials is None:
        def mass(k: int) -> mpmath.mpf:
            return mpmath.exp(-mean + k * mpmath.log(mean) - mpmath.loggamma(k + 1))
    else:
        p = mean / law.trials

        def mass(k: int) -> mpmath.mpf:
            return mpmath.binomial(law.trials, k) * p**k * (1 - p) ** (law.trials - k)
    # Terms beyond 60 standard deviations and 400 counts past the mean are below 1e-700.
    top = int(law.mean + 60 * math.sqrt(law.mean) + 400)
    if law.trials is not None:
        top = min(top, law.trials)
    below = mpmath.fsum(mass(k) for k in range(0, max(lo, 0)))
    above = mpmath.fsum(mass(k) for k in range(hi + 1, top + 1))
    return float(below + above)


@pytest.mark.parametrize(("mean", "trials"), [
    (0.3, None), (10.0, None), (300.0, None), (3906.0, None), (200.0, 1000), (50.0, 60),
    (2.0, 5), (400.0, 100_000)])
def test_window_tails_are_bounded_above_and_cheaply(mean: float, trials: int | None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An upper bound's mass outside a bin's window is Chernoff's bound on each tail (never
    below the exact mass, found here in 60-digit arithmetic), and a pair whose window
    reaches far into both tails no longer sums them: at small means those sums cost more
    than the rest of the pair (0.41 of 1.04 s of item pairs in an optimize at n = 1e4)."""
    law = BinLaw(mean, trials)
    lo, hi = law.window()
    for a, b in ((lo, hi), (lo - 1, hi - 1)):
        exact = _exact_outside(law, a, b)
        bound = law.outside_bound(a, b)
        assert bound >= exact, (a, b, bound, exact)
        assert bound <= 1e3 * exact + 1e-300 or bound < 1e-21, (a, b, bound, exact)
    if mean >= 10.0 and (trials is None or trials - mean > 200):
        # Both tails are far: the exact sums are never asked for.
        def refuse(self: BinLaw, lo: int, hi: int) -> float:
            raise AssertionError("the window's tails were summed")

        monkeypatch.setattr(BinLaw, "outside", refuse)
        loss = pair_loss(law, 0.5, upper=True)
        assert loss.infinity < 1e-20 and loss.pmf.sum() > 0.99


@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_a_blanket_on_every_item_has_bounded_tails(backend: str) -> None:
    """The independent blanket at m = d puts every user's blanket message on every item: a
    point mass, Binomial(n, 1).  Its lower tail's Chernoff exponent divided by 1 - p = 0
    (ZeroDivisionError, or log1p(-1): "math domain error") and crashed the accountant, the
    audit and a client's check of such parameters; it is infinite (no mass below n)."""
    from segshuffle.core import accounting, arrays
    from segshuffle.core.portable import user_delta as portable_user_delta

    law = BinLaw(40.0, 40)
    with arrays.use(backend):
        assert law.outside_bound(10, 40) == 0.0
        assert law.outside_bound(0, 40) == 0.0
    value = accounting.user_delta(1.0, 0.5, 2, 500, 20.0, 20, mode="independent", delta=1e-6)
    assert value == pytest.approx(0.75, rel=1e-8)  # no blanket noise: 1 - (1 - lambda)^2
    assert portable_user_delta(1.0, 0.5, 2, 500, 20.0, 20, mode="independent",
                               delta=1e-6) == pytest.approx(value, rel=1e-12)
    assert accounting.audit(500, 20, 2, 20.0, 0.5, 1e-6, mode="independent").epsilon_upper is None


@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_a_laws_masses_are_computed_once_for_every_rate(backend, monkeypatch) -> None:
    """A root search over lambda asks for one law's pair at a dozen rates; before, each
    recomputed the law's masses (their Stirling series), ratios and tail bounds: about a
    tenth of an optimize at n = 1e4 (d 128, s 8)."""
    from segshuffle.core import arrays, privacy_loss

    privacy_loss.clear_caches()
    calls: list[int] = []
    pmf = privacy_loss.BinLaw.pmf

    def counted(self, counts):
        calls.append(len(counts))
        return pmf(self, counts)

    law = privacy_loss.BinLaw(mean=40.0, trials=5_000)
    rates = (0.1, 0.3, 0.5, 0.9, 1.0)
    with arrays.use(backend):
        before = [pair_loss(law, lam, upper=True) for lam in rates]
        privacy_loss.clear_caches()
        monkeypatch.setattr(privacy_loss.BinLaw, "pmf", counted)
        after = [pair_loss(law, lam, upper=True) for lam in rates]
    assert len(calls) == 1
    for old, new in zip(before, after, strict=True):
        assert (old.step, old.offset, old.infinity, old.noise) == (
            new.step, new.offset, new.infinity, new.noise)
        assert list(old.pmf) == list(new.pmf)

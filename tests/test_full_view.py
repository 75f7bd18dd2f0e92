"""The exact full-view enumerator of :mod:`tests.full_view`, and the accountants against it.

Three groups of tests:

1. the enumerator itself: normalisation, x = x', values computed by hand, and the
   identity delta_full(E) = lambda D_{e^E}(pair(1, n c, r)) for s = 1, gamma = 1;
2. a regression record that the old rule (item-level Poisson pair with
   N = n c - 1 slots, group privacy over s items) is unsound against the full view;
3. the new accountant ``segshuffle.core.accounting.user_delta``: an upper bound of the
   exact full-view delta over a grid, and close to it where it should be tight.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from scipy import stats

from segshuffle.core.hockey_stick import delta_for, poisson_pair

from .full_view import (
    Distribution,
    hockey_stick,
    independent_full_view_delta,
    independent_views,
    old_pair_group_privacy_holds,
    old_pair_item_delta,
    slot_full_view_delta,
    slot_views,
    symmetric_delta,
)

LEVELS = (0.1, 0.5, 1.0, 2.0, 4.0)
LAMBDAS = (0.1, 0.5, 0.9, 1.0)

#: Victim item sets (x, x'): s = 1; s = 2 disjoint; s = 2 sharing one item.
SET_PAIRS: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((0,), (1,)),
    ((0, 1), (2, 3)),
    ((0, 1), (0, 2)),
)

FullViewDelta = Callable[[float, float, int, float, int, Sequence[int], Sequence[int]], float]
ENUMERATORS: dict[str, FullViewDelta] = {
    "slots": slot_full_view_delta,
    "independent": independent_full_view_delta,
}
Views = Callable[[float, int, float, int, Sequence[int], Sequence[int]],
                 tuple[Distribution, Distribution]]
VIEWS: dict[str, Views] = {"slots": slot_views, "independent": independent_views}


def _user_delta() -> Callable[..., float]:
    """The new accountant, imported per test so the enumerator tests run without it."""
    from segshuffle.core.accounting import user_delta

    return user_delta


# ---------------------------------------------------------------------------
# 1. The enumerator itself
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("users", "m", "d"), [(1, 1.0, 4), (3, 0.5, 4), (4, 2.0, 5), (2, 2.5, 8)])
@pytest.mark.parametrize(("x", "x_prime"), SET_PAIRS)
@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
def test_view_distributions_sum_to_one(users: int, m: float, d: int, x: tuple[int, ...],
                                       x_prime: tuple[int, ...], lam: float) -> None:
    for views in (slot_views, independent_views):
        p, q = views(lam, users, m, d, x, x_prime)
        assert math.fsum(p.values()) == pytest.approx(1.0, abs=1e-12)
        assert math.fsum(q.values()) == pytest.approx(1.0, abs=1e-12)
        assert min(p.values()) >= 0.0 and min(q.values()) >= 0.0


@pytest.mark.parametrize("x", [(0,), (1, 3), (0, 2)])
@pytest.mark.parametrize("mode", ["slots", "independent"])
def test_identical_sets_give_zero_delta(x: tuple[int, ...], mode: str) -> None:
    """x = x' makes P = Q, so D_{e^E}(P || Q) = 0 even at E = 0 (total variation)."""
    for level in (0.0, *LEVELS):
        assert ENUMERATORS[mode](level, 0.7, 3, 1.5, 4, x, x) == 0.0


@pytest.mark.parametrize("lam", [0.25, 0.5, 1.0])
@pytest.mark.parametrize("level", [0.0, 1.0, 4.0])
def test_no_blanket_reveals_the_sent_items(lam: float, level: float) -> None:
    """m = 0: the view is exactly the set S of items the victim sent.

    P and Q agree only on the views whose sent items lie in x intersect x'.  With
    x, x' disjoint that is S = {} alone, of probability (1 - lam)^s under both, so
    delta = 1 - (1 - lam)^s for every E (lam = 1: delta = 1 - 0, the data is
    revealed).  With x = (0, 1), x' = (0, 2) the views differ exactly when item 1
    (resp. 2) is sent, so delta = lam.
    """
    assert slot_full_view_delta(level, lam, 5, 0.0, 4, (0,), (1,)) == pytest.approx(lam)
    assert slot_full_view_delta(level, lam, 5, 0.0, 4, (0, 1), (2, 3)) == pytest.approx(
        1.0 - (1.0 - lam) ** 2)
    assert slot_full_view_delta(level, lam, 5, 0.0, 4, (0, 1), (0, 2)) == pytest.approx(lam)


@pytest.mark.parametrize(
    ("lam", "m", "d", "expected"),
    [(1.0, 1.0, 4, 3 / 4), (0.5, 1.0, 4, 3 / 8), (1.0, 0.5, 2, 3 / 4), (0.5, 1.0, 2, 1 / 4)],
)
def test_single_user_by_hand(lam: float, m: float, d: int, expected: float) -> None:
    """One user (the victim), one slot, x = (0,), x' = (1,); views (count 0, count 1, R).

    m = 1, d = 4: the slot lands on 0, 1 or elsewhere w.p. 1/4, 1/4, 1/2.  With
    lam = 1, P = {(2,0,0): 1/4, (1,1,0): 1/4, (1,0,1): 1/2} and Q is its mirror
    image, so only (1,1,0) is shared: delta = 3/4 for every E.  With lam = 1/2 the
    unsent half is common to P and Q and delta = 3/8.
    m = 1/2, d = 2: the slot is on 0, on 1 or null w.p. 1/4, 1/4, 1/2, and lam = 1
    gives P = {(2,0): 1/4, (1,1): 1/4, (1,0): 1/2}: again delta = 3/4.
    m = 1, d = 2, lam = 1/2: P = {(2,0), (1,1), (1,0), (0,1)} each 1/4 and Q the
    mirror image, so only (2,0) is not covered: delta = 1/4.
    """
    for level in (0.0, 0.5, 3.0):
        assert slot_full_view_delta(level, lam, 1, m, d, (0,), (1,)) == pytest.approx(
            expected, abs=1e-15)


@pytest.mark.parametrize(
    ("users", "m", "d", "lam"),
    [(3, 1.0, 4, 0.5), (5, 2.0, 6, 0.9), (8, 1.0, 5, 1.0), (2, 3.0, 8, 0.1), (6, 2.0, 4, 0.3)],
)
def test_integer_rate_single_item_identity(users: int, m: float, d: int, lam: float) -> None:
    """s = 1, gamma = 1: delta_full(E) = lam D_{e^E}(pair(own = 1, N = n c, r = 1/d)).

    With no null slots the non-null total is n c + (victim sent), so it reveals
    whether the victim sent.  Unsent, P = Q; sent, the view is the n c blanket slots
    (the victim's own included) plus one message on x vs x'; the rest of the view
    is then determined by the two counts.
    """
    slots = math.ceil(m)
    pair = poisson_pair(1.0, users * slots, (m / slots) / d)
    for level in LEVELS:
        exact = slot_full_view_delta(level, lam, users, m, d, (0,), (1,))
        assert exact == pytest.approx(lam * delta_for(pair, level), rel=1e-9)


@pytest.mark.parametrize(
    ("users", "m", "d", "lam"),
    [(3, 0.5, 4, 0.5), (5, 1.5, 6, 0.9), (4, 2.0, 5, 1.0), (6, 0.8, 4, 0.3)],
)
def test_full_view_dominates_the_two_item_marginal(users: int, m: float, d: int,
                                                   lam: float) -> None:
    """Data processing: the counts on (x, x') alone are the pair(lam, n c, gamma / d).

    The full view refines it, so its divergence can only be larger; for lam = 1
    (nothing to learn from the total) and gamma = 1 the two coincide.
    """
    slots = math.ceil(m)
    pair = poisson_pair(lam, users * slots, (m / slots) / d)
    for level in LEVELS:
        marginal = delta_for(pair, level)
        exact = slot_full_view_delta(level, lam, users, m, d, (0,), (1,))
        assert exact >= marginal * (1 - 1e-9) - 1e-15
        if lam == 1.0 and m == slots:
            assert exact == pytest.approx(marginal, rel=1e-9)


@pytest.mark.parametrize(("users", "m", "d", "lam"), [(3, 1.0, 4, 0.5), (6, 2.5, 5, 0.8)])
def test_independent_single_item_against_outer_product(users: int, m: float, d: int,
                                                       lam: float) -> None:
    """Independent mode, s = 1, written out on a 2-D grid of (count on 0, count on 1).

    With f the Binomial(n, m / d) pmf: P(a, b) = (1 - lam) f(a) f(b) + lam f(a - 1) f(b)
    and Q(a, b) = (1 - lam) f(a) f(b) + lam f(a) f(b - 1).
    """
    f = np.append(stats.binom.pmf(np.arange(users + 1), users, m / d), 0.0)  # f(n + 1) = 0
    shifted = np.roll(f, 1)  # f(a - 1), 0 at a = 0
    p = (1 - lam) * np.outer(f, f) + lam * np.outer(shifted, f)
    q = (1 - lam) * np.outer(f, f) + lam * np.outer(f, shifted)
    for level in LEVELS:
        expected = float(np.maximum(p - math.exp(level) * q, 0.0).sum())
        exact = independent_full_view_delta(level, lam, users, m, d, (0,), (1,))
        assert exact == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize(("x", "x_prime"), SET_PAIRS)
def test_delta_is_symmetric_and_falls_with_level(x: tuple[int, ...],
                                                 x_prime: tuple[int, ...]) -> None:
    """Swapping the item labels maps P to Q, so both directions agree; delta falls in E."""
    p, q = slot_views(0.6, 4, 1.5, 5, x, x_prime)
    previous = 1.0
    for level in LEVELS:
        forward, backward = hockey_stick(p, q, level), hockey_stick(q, p, level)
        assert forward == pytest.approx(backward, rel=1e-9, abs=1e-15)
        assert symmetric_delta(p, q, level) <= previous
        previous = symmetric_delta(p, q, level)


# ---------------------------------------------------------------------------
# 2. The old rule is unsound
# ---------------------------------------------------------------------------

#: (users, m, d, lam, x, x', E, delta, exact full-view delta(E)).  The old rule
#: accepts (E, delta), i.e. delta'(E / s) <= delta / (s e^{(s-1) E / s}) for the pair
#: with N = n c - 1 slots; the smallest delta it accepts is noted per case.  The
#: pair cannot see the non-null total, which tells whether the victim sent a message.
OLD_RULE_COUNTEREXAMPLES = [
    # s = 1; old rule accepts delta >= 2.00e-6
    (8, 2.0, 6, 0.5, (0,), (1,), 2.0, 1e-3, 0.027207250688519678),
    # s = 1; old rule accepts delta >= 5.10e-3
    (5, 1.0, 4, 0.5, (0,), (1,), 2.0, 1e-2, 0.11865234375),
    # s = 1; old rule accepts delta >= 8.15e-4
    (8, 2.0, 4, 0.5, (0,), (1,), 1.0, 2e-3, 0.0261626307731402),
    # s = 1, gamma = 3/4; old rule accepts delta >= 1.45e-6
    (8, 1.5, 4, 0.5, (0,), (1,), 2.0, 1e-5, 0.000129383817941228),
    # s = 2 disjoint; old rule accepts delta >= 2.96e-5
    (8, 2.0, 6, 0.5, (0, 1), (2, 3), 4.0, 1e-3, 0.02742464307476148),
    # s = 2 disjoint, n = 3; old rule accepts delta >= 4.45e-2
    (3, 2.0, 6, 0.5, (0, 1), (2, 3), 4.0, 0.1, 0.18939686213991766),
    # s = 2 disjoint, gamma = 3/4; old rule accepts delta >= 8.55e-5
    (8, 1.5, 6, 0.5, (0, 1), (2, 3), 4.0, 2e-4, 0.00034142807040977004),
    # s = 2 sharing item 0; old rule accepts delta >= 1.76e-4
    (6, 2.0, 4, 0.5, (0, 1), (0, 2), 4.0, 1e-3, 0.007980123162269592),
]


@pytest.mark.parametrize(
    ("users", "m", "d", "lam", "x", "x_prime", "level", "delta", "recorded"),
    OLD_RULE_COUNTEREXAMPLES,
)
def test_old_pair_rule_is_unsound(users: int, m: float, d: int, lam: float,
                                  x: tuple[int, ...], x_prime: tuple[int, ...], level: float,
                                  delta: float, recorded: float) -> None:
    s = len(x)
    assert old_pair_group_privacy_holds(level, lam, s, delta, users, m, d)
    exact = slot_full_view_delta(level, lam, users, m, d, x, x_prime)
    assert exact == pytest.approx(recorded, rel=1e-9)
    assert exact > delta


def test_old_rule_helper_matches_its_formula() -> None:
    """The helper is delta'(E / s) <= delta / (s e^{(s-1) E / s}) with N = n c - 1, r = gamma/d."""
    item = delta_for(poisson_pair(0.5, 8 * 2 - 1, 0.75 / 6), 2.0 / 2)
    assert old_pair_item_delta(2.0, 0.5, 2, 8, 1.5, 6) == item
    threshold = item * 2 * math.exp(1.0)
    assert old_pair_group_privacy_holds(2.0, 0.5, 2, threshold * 1.001, 8, 1.5, 6)
    assert not old_pair_group_privacy_holds(2.0, 0.5, 2, threshold * 0.999, 8, 1.5, 6)


# ---------------------------------------------------------------------------
# 3. The new accountant
# ---------------------------------------------------------------------------


def _bound_failures(mode: str, users: int, m: float, d: int, x: tuple[int, ...],
                    x_prime: tuple[int, ...], lambdas: Sequence[float] = LAMBDAS,
                    levels: Sequence[float] = LEVELS) -> list[str]:
    """Every (lam, E) at which user_delta falls below the exact full-view delta."""
    user_delta = _user_delta()
    failures = []
    for lam in lambdas:
        p, q = VIEWS[mode](lam, users, m, d, x, x_prime)
        for level in levels:
            exact = symmetric_delta(p, q, level)
            bound = user_delta(level, lam, len(x), users, m, d, mode=mode)
            if not bound >= exact * (1 - 1e-9) - 1e-15:
                failures.append(
                    f"mode={mode} users={users} m={m} d={d} x={x} x'={x_prime} lam={lam} "
                    f"E={level}: exact={exact!r} user_delta={bound!r}")
    return failures


#: Short names of SET_PAIRS for test ids.
LAYOUTS = ("s1", "s2-disjoint", "s2-overlap")


def _grid(users: Sequence[int], rates: Sequence[float], domains: Sequence[int],
          max_slots_for_pairs: int) -> list[object]:
    """(mode, users, m, d, x, x') over the product, skipping s = 2 slot cases with n c too big.

    The slot enumeration of s = 2 disjoint sets has ~ (n c)^5 / 120 outcomes.
    """
    cases: list[object] = []
    for mode, n, m, d, ((x, x_prime), layout) in itertools.product(
            ("slots", "independent"), users, rates, domains, zip(SET_PAIRS, LAYOUTS, strict=True)):
        if mode == "slots" and len(x) == 2 and n * math.ceil(m) > max_slots_for_pairs:
            continue
        cases.append(pytest.param(mode, n, m, d, x, x_prime,
                                  id=f"{mode}-n{n}-m{m}-d{d}-{layout}"))
    return cases


GRID_FIELDS = ("mode", "users", "m", "d", "x", "x_prime")


@pytest.mark.parametrize(GRID_FIELDS, _grid((2, 5), (0.4, 1.0, 1.7, 3.0), (4, 5, 8), 10))
def test_user_delta_bounds_full_view(mode: str, users: int, m: float, d: int,
                                     x: tuple[int, ...], x_prime: tuple[int, ...]) -> None:
    failures = _bound_failures(mode, users, m, d, x, x_prime)
    assert not failures, "user_delta below the exact full-view delta:\n" + "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize(
    GRID_FIELDS, _grid((2, 3, 4, 6, 8), (0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 4.0), (4, 5, 8), 12))
def test_user_delta_bounds_full_view_large_grid(mode: str, users: int, m: float, d: int,
                                                x: tuple[int, ...],
                                                x_prime: tuple[int, ...]) -> None:
    failures = _bound_failures(mode, users, m, d, x, x_prime)
    assert not failures, "user_delta below the exact full-view delta:\n" + "\n".join(failures)


@pytest.mark.parametrize(
    ("level", "lam", "users", "m", "d"),
    [(1.0, 0.5, 8, 1.0, 4), (0.5, 0.9, 5, 2.0, 5), (1.0, 1.0, 6, 1.0, 8),
     (0.1, 0.1, 4, 2.0, 4), (2.0, 0.5, 3, 3.0, 4)],
)
def test_user_delta_is_tight_for_one_item_integer_rate(level: float, lam: float, users: int,
                                                       m: float, d: int) -> None:
    """s = 1, integer m, slots: exact <= user_delta <= 1.5 exact (exact in 0.03..0.46 here).

    By the identity above exact = lam D(pair(1, n c, 1/d)); a bound that reveals the
    send indicator and drops the victim's own slot gives lam D(pair(1, n c - 1, 1/d)).
    """
    exact = slot_full_view_delta(level, lam, users, m, d, (0,), (1,))
    bound = _user_delta()(level, lam, 1, users, m, d, mode="slots")
    assert exact * (1 - 1e-9) - 1e-15 <= bound <= 1.5 * exact, (exact, bound)


@pytest.mark.parametrize(
    ("level", "lam", "users", "m", "d"),
    [(1.0, 0.5, 8, 1.0, 4), (0.5, 0.9, 5, 2.0, 5), (1.0, 1.0, 6, 1.5, 8),
     (0.1, 0.1, 4, 2.0, 4), (2.0, 0.5, 3, 3.0, 4)],
)
@pytest.mark.parametrize(("x", "x_prime"), SET_PAIRS[:2])
def test_user_delta_is_nearly_exact_in_independent_mode(level: float, lam: float, users: int,
                                                        m: float, d: int, x: tuple[int, ...],
                                                        x_prime: tuple[int, ...]) -> None:
    """Independent mode, s = 1 and s = 2 disjoint: 1 - 1e-9 <= user_delta / exact <= 1.5.

    The active bins are independent binomials, so for disjoint sets the view is a
    product of s item pairs and the accountant is exact up to its discretisation
    and the victim's own blanket, which it leaves out (Binomial(n - 1, m / d) bins;
    at n = 3 that alone costs a factor 4/3).  Exact values are in 0.013..0.61 here.
    """
    exact = independent_full_view_delta(level, lam, users, m, d, x, x_prime)
    bound = _user_delta()(level, lam, len(x), users, m, d, mode="independent")
    assert 1 - 1e-9 <= bound / exact <= 1.5, (exact, bound)

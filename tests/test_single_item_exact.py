"""One differing item on the slot blanket: the bound against the exact epsilon of the view.

The accountant's one-item mixture is the full view's divergence when it counts every
blanket slot, the victim's own included (h ceil(m)).  Counting one slot fewer left no
bound at all in 103 of the 1,273 cases of :data:`tests.single_item_exact.SWEEP` whose
exact epsilon is finite (every recorded case below is one of them), in all three
accountants.  The exact values come from brute-force enumeration of the view
(:mod:`tests.single_item_exact`).
"""

from __future__ import annotations

import math

import pytest
from scipy import optimize

from segshuffle.core import accounting
from segshuffle.core.hockey_stick import delta_for, poisson_pair
from segshuffle.core.portable import accounting as portable_accounting

from .full_view import slot_full_view_delta
from .node_support import javascript_user_deltas
from .single_item_exact import SWEEP, Case, Grid, compare, exact_epsilon

#: (case, exact epsilon to 4 decimals): cases that had no bound, integer and fractional m,
#: d = 2 (no outside item) to 8, h = 2 to 12.
RECORDED = [
    (Case(6, 3, 2.0, 1.0, 1e-2), 1.9430),
    (Case(6, 3, 2.0, 0.1, 1e-3), 1.9430),
    (Case(3, 3, 2.0, 0.1, 1e-2), 1.3760),
    (Case(2, 2, 0.5, 0.1, 1e-2), 0.3646),
    (Case(5, 8, 0.5, 0.6, 1e-2), 3.5671),
    (Case(12, 8, 1.5, 1.0, 1e-1), 1.5705),
    (Case(10, 4, 2.0, 0.3, 1e-3), 2.3139),
    (Case(8, 8, 1.5, 0.6, 1e-3), 2.7518),
    (Case(12, 6, 3.0, 0.6, 1e-3), 2.2898),
    (Case(4, 6, 1.5, 0.3, 1e-2), 1.1277),
]

#: Relative distance above the exact epsilon at which every accountant must hold delta:
#: the bound is the view's divergence up to its certified margins (relative 1e-9).
ABOVE_EXACT = 1e-5

#: A smaller grid than SWEEP for the fast tier: 128 cases, each below a few ms.
FAST_GRID = Grid(users=(2, 3, 5, 8), domains=(2, 3, 6, 8), rates=(0.5, 2.0),
                 lambdas=(0.3, 1.0), deltas=(1e-1, 1e-3))


def _exact(case: Case) -> float:
    return exact_epsilon(case.lam, case.users, case.m, case.d, case.delta)


def _exact_delta(case: Case, level: float) -> float:
    return slot_full_view_delta(level, case.lam, case.users, case.m, case.d, (0,), (1,))


# --- the enumeration itself ---------------------------------------------------------------


@pytest.mark.parametrize(("users", "d", "m", "lam", "delta"), [
    (10, 4, 1, 0.5, 5e-2), (6, 3, 2, 0.3, 1e-2), (8, 8, 3, 1.0, 1e-1)])
def test_exact_epsilon_is_the_root_of_the_integer_rate_identity(users: int, d: int, m: int,
                                                                lam: float,
                                                                delta: float) -> None:
    """At gamma = 1 the view's delta is lam D(pair(lambda = 1, h m slots, 1/d)); its root
    in E, found by a root search, is the closed form's epsilon."""
    pair = poisson_pair(1.0, users * m, 1.0 / d)
    root = optimize.brentq(lambda e: lam * delta_for(pair, e) - delta, 0.0, 30.0, xtol=1e-13)
    assert exact_epsilon(lam, users, float(m), d, delta) == pytest.approx(root, rel=1e-9)


def test_exact_epsilon_without_blanket_is_zero_or_none() -> None:
    """m = 0: the view shows the sent item, delta = lam at every E (0 below delta, else
    no epsilon)."""
    assert exact_epsilon(0.05, 4, 0.0, 5, 0.1) == 0.0
    assert exact_epsilon(0.2, 4, 0.0, 5, 0.1) == math.inf


@pytest.mark.parametrize(("case", "recorded"), RECORDED, ids=str)
def test_the_recorded_epsilons_are_the_views(case: Case, recorded: float) -> None:
    exact = _exact(case)
    assert exact == pytest.approx(recorded, abs=5e-5)
    # The view itself meets delta just above it and not just below it.
    assert _exact_delta(case, exact * (1 + 1e-9)) <= case.delta
    assert _exact_delta(case, exact * (1 - 1e-6)) > case.delta


# --- the three accountants ----------------------------------------------------------------


@pytest.mark.parametrize(("case", "recorded"), RECORDED, ids=str)
def test_a_bound_exists_where_the_exact_epsilon_is_finite(case: Case, recorded: float
                                                          ) -> None:
    comparison = compare(case)
    assert comparison.upper is not None, f"no bound, exact {comparison.exact}"
    assert comparison.exact <= comparison.upper <= comparison.exact * (1 + ABOVE_EXACT)


@pytest.mark.parametrize(("case", "recorded"), RECORDED, ids=str)
def test_the_portable_accountant_holds_delta_just_above_the_exact_epsilon(
        case: Case, recorded: float) -> None:
    exact = _exact(case)
    for level in (exact * (1 + ABOVE_EXACT), 0.5 * exact, exact):
        value = portable_accounting.user_delta(level, case.lam, 1, case.users, case.m,
                                               case.d, delta=case.delta)
        assert value >= _exact_delta(case, level)
        assert value == pytest.approx(
            accounting.user_delta(level, case.lam, 1, case.users, case.m, case.d,
                                  delta=case.delta), rel=1e-9, abs=1e-13)
    assert portable_accounting.user_delta(exact * (1 + ABOVE_EXACT), case.lam, 1, case.users,
                                          case.m, case.d, delta=case.delta) <= case.delta


def test_the_javascript_accountant_holds_delta_just_above_the_exact_epsilon() -> None:
    calls, expected = [], []
    for case, _ in RECORDED:
        exact = _exact(case)
        for level, holds in ((exact * (1 + ABOVE_EXACT), True), (0.5 * exact, False)):
            calls.append(([level, case.lam, 1, case.users, case.m, case.d],
                          {"delta": case.delta}))
            expected.append((case, level, holds))
    got = javascript_user_deltas(calls)
    for value, (case, level, holds) in zip(got, expected, strict=True):
        assert value >= _exact_delta(case, level), (case, level, value)
        assert value == pytest.approx(
            portable_accounting.user_delta(level, case.lam, 1, case.users, case.m, case.d,
                                           delta=case.delta), rel=1e-9, abs=1e-13)
        assert value <= case.delta or not holds, (case, level, value)


# --- the grids ----------------------------------------------------------------------------


def _grid_failures(grid: Grid) -> list[str]:
    """Every case of ``grid`` with no bound where the exact epsilon is finite, a bound below
    it, or a published epsilon at which the view exceeds delta."""
    failures = []
    for case in grid.cases():
        comparison = compare(case)
        if comparison.missing or comparison.below:
            failures.append(f"{case}: exact {comparison.exact!r}, upper {comparison.upper!r}")
        elif comparison.upper is not None and _exact_delta(case, comparison.upper) > case.delta:
            failures.append(f"{case}: the view exceeds delta at the bound {comparison.upper!r}")
    return failures


def test_no_bound_is_missing_or_below_exact_on_a_small_grid() -> None:
    failures = _grid_failures(FAST_GRID)
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_no_bound_is_missing_or_below_exact_on_the_sweep() -> None:
    failures = _grid_failures(SWEEP)
    assert not failures, "\n".join(failures)

"""The certified lambda search spends few evaluations of the bound: its bracket follows the
secant of the log excess, Brent's method runs on ln lambda, a feasible rate whose divergence
is within the tolerance of delta ends it, and a level's certified / steering ratio at one
rate brackets it at the next.  Each answer is still verified feasible."""

from __future__ import annotations

import math

import pytest

from segshuffle.core import accounting, optimizer, user_bound
from segshuffle.core.blanket import BlanketMode
from segshuffle.core.hockey_stick import _largest_feasible
from segshuffle.core.scalar_search import remembered


class _Counting:
    """Counts the certified bound's evaluations (the slot accountant at the default grid)."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        original = user_bound.SlotAccountant.user_delta

        def counted(bound, *args, **kwargs):
            if bound.step == accounting.DEFAULT_STEP:
                self.calls += 1
            return original(bound, *args, **kwargs)

        monkeypatch.setattr(user_bound.SlotAccountant, "user_delta", counted)


@pytest.fixture
def counting(monkeypatch) -> _Counting:
    accounting.clear_caches()
    return _Counting(monkeypatch)


@pytest.mark.parametrize(("level", "hint", "most"), [(1.0, 0.56, 7), (0.5, 0.29, 7)])
def test_a_root_far_below_its_steering_hint_costs_a_few_evaluations(counting, level, hint,
                                                                    most) -> None:
    # Regression: at n = 30 (m = 547, d = 128, s = 8) the certified roots sit 8 and 500
    # times below the steering solutions; the hint was widened geometrically (1.6, 2.56,
    # 4.1, ...) and the root closed in by Brent's method on lambda: 10 and 13 evaluations.
    low, high = 0.85 * hint, 1.05 * hint
    lam = accounting.max_lambda(level, 8, 1e-8, 30, 547.0, 128, xtol=1e-4,
                                bracket=(low, high))
    assert counting.calls <= most
    assert 0.0 < lam < low / 5.0
    assert accounting.user_delta(level, lam, 8, 30, 547.0, 128, delta=1e-8) <= 1e-8


def test_the_bracket_follows_the_secant_of_the_log_excess() -> None:
    # A log excess linear in ln lambda (a divergence growing like lambda^3), root five times
    # below the hint: the secant through the hint's ends lands past the root at once.
    root = 0.01

    def excess(lam: float) -> float:
        asked.append(lam)
        return 3.0 * math.log(lam / root)

    asked: list[float] = []
    lo, hi = accounting._verified_bracket(remembered(excess), 0.85 * 5 * root,
                                          1.05 * 5 * root)
    assert len(asked) == 2 + 1  # the hint's two ends and one step (geometric: four steps)
    assert excess(lo) <= 0.0 < excess(hi)
    assert lo > root / 2.0  # and close to the root


def test_the_bracket_search_is_bounded_where_the_secant_never_helps() -> None:
    # A flat excess above the root: the secant is undefined, the steps are geometric, and
    # lambda = 1e-12 ends the search with 0 (always feasible) as the bracket's bottom.
    lo, hi = accounting._verified_bracket(lambda lam: 1.0 if lam > 0.0 else -1.0, 0.4, 0.5)
    assert lo == 0.0 and 0.0 < hi < 1e-10


def test_a_feasible_point_close_to_delta_ends_the_root_search() -> None:
    # Values closer to delta than the tolerance are not told apart by the certified bound
    # (its loss grid moves it by more between neighbouring rates): the first feasible one
    # is the answer, and Brent's method on ln lambda finds it within two steps.
    root = 0.3
    asked: list[float] = []

    def excess(lam: float) -> float:
        asked.append(lam)
        return 4.0 * math.log(lam / root)

    lam = _largest_feasible(remembered(excess), 0.2, 0.4, 1e-7, logarithmic=True, close=1e-7)
    assert len(asked) <= 4  # the ends and two interpolated steps
    assert -1e-7 <= excess(lam) <= 0.0
    # Without ``close`` the answer is within the tolerance of the root all the same.
    assert _largest_feasible(excess, 0.2, 0.4, 1e-7) == pytest.approx(root, rel=2e-7)


def test_the_final_refinement_from_a_ranking_bracket_is_short(counting) -> None:
    lam = accounting.max_lambda(1.0, 8, 1e-8, 30, 547.0, 128, xtol=1e-4, bracket=(0.47, 0.59))
    counting.calls = 0
    fine = accounting.max_lambda(1.0, 8, 1e-8, 30, 547.0, 128, xtol=accounting.LAMBDA_XTOL,
                                 bracket=(lam, lam * (1.0 + 2e-4)))
    assert counting.calls <= 3  # 4 before
    assert fine >= lam
    assert accounting.user_delta(1.0, fine, 8, 30, 547.0, 128, delta=1e-8) <= 1e-8


def test_a_levels_certified_to_steering_ratio_brackets_its_next_rate(counting) -> None:
    # At n = 1e4 the certified lambda of a level is 0.955-0.958 of its steering one at every
    # finalist: after one rate, the next is bracketed 2% either side of that prediction.
    solver = optimizer._LambdaSolver([0.5, 1.0, 2.0], 8, 1e-8, 10_000, 128, BlanketMode.SLOTS)
    solver.level(1.62, optimizer.RANKING_XTOL, 1)
    assert 0.9 < solver._ratios[1] < 1.0
    solver.approximate(1.66)
    counting.calls = 0
    lam = solver.level(1.66, optimizer.RANKING_XTOL, 1)
    assert counting.calls <= 5  # 6 from the steering solution's own bracket
    low, high = optimizer._learnt_bracket(solver.approximate(1.66)[1], solver._ratios[1])
    assert low <= lam <= high


def test_a_learnt_bracket_is_not_used_at_the_steering_ends() -> None:
    assert optimizer._learnt_bracket(1.0, 0.9) == optimizer._hint_bracket(1.0)
    assert optimizer._learnt_bracket(0.0, 0.9) == optimizer._hint_bracket(0.0)
    assert optimizer._learnt_bracket(0.5, None) == optimizer._hint_bracket(0.5)
    low, high = optimizer._learnt_bracket(0.5, 0.9)
    assert low == pytest.approx(0.45 * 0.98) and high == pytest.approx(0.45 * 1.02)


def test_the_integer_full_signal_search_follows_the_secant(monkeypatch) -> None:
    # Regression: the smallest integer m at which a level keeps its full signal was found
    # by doubling from m = 1 (1, 2, 4, 8, 16, 32 for m = 23 at h = 9000, E = 0.5), every
    # rate a new blanket for the accountant; along the secant of the log excess, which is
    # close to linear in m there, the search lands next to it.
    asked: list[float] = []
    original = accounting.user_delta

    def recorded(level, lam, s, users, m, d, **kwargs):
        asked.append(m)
        return original(level, lam, s, users, m, d, **kwargs)

    monkeypatch.setattr(accounting, "user_delta", recorded)
    accounting.clear_caches()
    m_k = accounting.full_signal_blanket(0.5, 8, 1e-8, 9_000, 128, rtol=1e-2,
                                         step=accounting.COARSE_STEP)
    assert 22.0 < m_k < 23.0
    integers = sorted({m for m in asked if m == int(m) and m > 1.0})
    assert len(integers) <= 6  # 2, 8, 21, 24, 22, 23; doubling: 2, 4, 8, 16, 32, 22, 23
    assert max(integers) <= 24.0


def test_the_integer_step_is_bounded_either_way() -> None:
    from segshuffle.core.accounting import _next_integer_rate

    falling = {1.0: 10.0, 2.0: 9.0}
    assert _next_integer_rate(falling.__getitem__, 1, 2) == 8  # the secant says 11: x4 at most
    assert _next_integer_rate({1.0: 10.0, 2.0: 0.01}.__getitem__, 1, 2) == 3  # at least +1
    assert _next_integer_rate({1.0: 5.0, 2.0: 6.0}.__getitem__, 1, 2) == 4  # rising: doubles
    assert _next_integer_rate(falling.__getitem__, 0, 1) == 2  # one point: doubles


def test_a_root_far_above_its_hint_is_bracketed_along_the_lines() -> None:
    # Regression: a learnt bracket 4% wide whose top held, the root three times above it
    # (n = 30, where certified / steering ratios move from rate to rate), was widened by
    # additive steps growing by 1.6: nine evaluations before the root search began.
    root = 0.2286
    asked: list[float] = []

    def excess(lam: float) -> float:
        asked.append(lam)
        x = math.log(lam / root)
        return 4.0 * x - 0.8 * x * abs(x)  # concave in ln lambda, as the bound's

    lo, hi = accounting._verified_bracket(remembered(excess), 0.0742, 0.0772)
    assert excess(lo) <= 0.0 < excess(hi)
    assert len(set(asked)) <= 2 + 3  # lambda = 1 and the hint's top, then three steps


def test_the_upward_bracket_at_a_real_point(counting) -> None:
    lam = accounting.max_lambda(1.0, 8, 1e-8, 30, 547.0, 128, xtol=1e-4,
                                bracket=(0.020, 0.0208))
    assert 0.06 < lam < 0.09
    assert counting.calls <= 8


@pytest.mark.parametrize(("hint", "root"), [((0.0, 0.0), 0.01), ((0.0, 0.0), 1e-5),
                                            ((0.5, math.nextafter(1.0, 0.0)), 1.0 - 1e-17),
                                            ((0.2, 0.3), 0.999)])
def test_upward_brackets_from_the_ends_of_the_range(hint, root) -> None:
    # A hint at 0 (a level whose steering rate is 0) and a top next to 1: still a verified
    # bracket, with no division by an empty span.
    def excess(lam: float) -> float:
        return 3.0 * math.log(max(lam, 1e-300) / root) if lam < 1.0 else 1.0

    lo, hi = accounting._verified_bracket(remembered(excess), *hint)
    assert excess(lo) <= 0.0 < excess(hi) and lo < hi <= 1.0


def test_the_close_enough_band_follows_the_slope(counting) -> None:
    # The search stops at a feasible rate whose log excess is within xtol times the
    # bracket's rise per unit of ln lambda: within about xtol of the crossing along it.
    # At n = 1e4 (m = 1.64, E = 1) that rise is about 30: a band of 3e-3 instead of 1e-4.
    lam = accounting.max_lambda(1.0, 8, 1e-8, 10_000, 1.64, 128, xtol=1e-4,
                                bracket=(0.459, 0.567))
    assert counting.calls <= 4  # 6 with a band of xtol itself
    delta = accounting.user_delta(1.0, lam, 8, 10_000, 1.64, 128, delta=1e-8)
    assert 1e-8 * math.exp(-0.1) < delta <= 1e-8

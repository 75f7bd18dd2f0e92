"""The optimizer's searches ask the accountant for fewer bounds, with the same answers.

Each test counts evaluations of the slot bound (``SlotAccountant.user_delta``): counts do
not depend on the machine's speed, and each bound below is one the searches before the
change exceeded (their counts are given).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator

import pytest

from segshuffle.core import accounting
from segshuffle.core.accounting import COARSE_STEP, full_signal_blanket, max_lambda, user_delta
from segshuffle.core.hockey_stick import _largest_feasible, _smallest_feasible
from segshuffle.core.optimizer import optimize


@pytest.fixture
def evaluations(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter]:
    """Every slot bound evaluated, keyed by (bound, E, lambda), counted."""
    counter: Counter = Counter()
    original = accounting.SlotAccountant.user_delta

    def counted(self, eps: float, lam: float, enough: float = 0.0) -> float:
        counter[(id(self), eps, lam)] += 1
        return original(self, eps, lam, enough)

    monkeypatch.setattr(accounting.SlotAccountant, "user_delta", counted)
    accounting.clear_caches()
    yield counter
    accounting.clear_caches()


def test_an_m_search_evaluates_the_bound_about_half_as_often(evaluations: Counter) -> None:
    # d = 17, s = 2, n = 5000: 616 evaluations before (a sweep of every grid rate, the
    # steering's cell ends evaluated twice, root searches on delta itself), 339 after.
    result = optimize([1250, 2500, 1250], [0.5, 1.0, 2.0], 17, 2, 2e-6, lower_bounds=False)
    assert sum(evaluations.values()) <= 450
    # The steering's grid bisection and its root search share one memory: 120 of the
    # 616 evaluations repeated an earlier one before, 6 of 339 after.
    repeated = sum(count - 1 for count in evaluations.values())
    assert repeated <= 0.05 * sum(evaluations.values())
    assert 0.2 < result.m < 0.4 and result.lambdas[1] == 1.0


def test_a_hint_whose_top_fails_spares_the_full_signal_bound(evaluations: Counter) -> None:
    # Before, max_lambda evaluated lambda = 1 first (a new m builds every composition of
    # the revealed-send bound there) though the hint's top, below 1, already failed.
    lam = max_lambda(0.5, 8, 1e-8, 900, 30.0, 128, bracket=(0.3, 0.4))
    rates = [key[2] for key in evaluations]
    assert 1.0 not in rates
    assert user_delta(0.5, lam, 8, 900, 30.0, 128, delta=1e-8) <= 1e-8
    # The hint is 50 times too high: the bracket's steps grow (17 evaluations before).
    assert len(rates) <= 13


def test_the_full_signal_rate_interpolates_its_bucket(evaluations: Counter) -> None:
    # m_1 = 223 at n = 900, d = 128, s = 8: doubling to 256, then the bucket; bisection
    # took 18 evaluations in all, interpolation in the logarithmic excess 13.
    m_k = full_signal_blanket(0.5, 8, 1e-8, 900, 128, rtol=1e-2, step=COARSE_STEP)
    assert m_k == pytest.approx(223.0)
    assert sum(evaluations.values()) <= 14


@pytest.mark.parametrize("root", [1, 2, 3, 57, 128, 255, 256])
@pytest.mark.parametrize("shape", ["linear", "cubic", "logarithmic"])
def test_the_integer_search_finds_the_first_feasible_integer(root: int, shape: str) -> None:
    from segshuffle.core.accounting import _smallest_feasible_integer

    def excess(c: int) -> float:
        x = root - 0.5 - c
        if shape == "linear":
            return 3.0 * x
        if shape == "cubic":
            return x + 0.01 * x**3
        return math.copysign(math.log1p(abs(x)), x)

    asked: list[int] = []

    def counted(c: int) -> float:
        asked.append(c)
        return excess(c)

    assert _smallest_feasible_integer(counted, 0, 256) == root
    assert all(0 < c <= 256 for c in asked)
    assert len(asked) <= 3 * (math.log2(256) + 1)


def test_a_verified_root_reuses_the_brackets_feasible_end() -> None:
    # Brent's last point can sit on the infeasible side of a crossing; the other end of
    # its final bracket is feasible and was evaluated.  Before, the answer was nudged
    # from the infeasible point with new evaluations.
    asked: list[float] = []
    for crossing in (0.3, 0.123456789, 0.7071):
        asked.clear()

        def excess(x: float, crossing: float = crossing) -> float:
            asked.append(x)
            return math.log(x / crossing) + 1e-3 * (x > crossing)

        below = _largest_feasible(excess, 0.01, 1.0, rtol=1e-5)
        assert excess(below) <= 0.0 and below == pytest.approx(crossing, rel=1e-5)
        asked.clear()
        above = _smallest_feasible(lambda x: -excess(x), 0.01, 1.0, rtol=1e-5)
        assert -excess(above) <= 0.0 and above == pytest.approx(crossing, rel=1e-5)
        assert len(set(asked[:-1])) == len(asked) - 1  # nothing asked twice


def test_the_sweep_fills_in_around_its_leaders_only() -> None:
    from segshuffle.core.optimizer import _coarse_to_fine

    grid = [1.0 + 0.1 * i for i in range(101)]
    asked: list[float] = []

    def objective(m: float) -> float:
        asked.append(m)
        return (m - 6.37) ** 2 + 0.3 * math.sin(7.0 * m)

    values = _coarse_to_fine(grid, objective, {grid[17]})
    full = [objective(m) for m in grid]
    swept = len(asked) - len(grid)
    assert swept <= len(grid) // 4 + 2 + 3 * 2 * 4
    best = min(range(len(grid)), key=full.__getitem__)
    assert min(range(len(grid)), key=values.__getitem__) == best
    assert values[17] == full[17]  # a kept point is always evaluated
    assert all(v in (math.inf, f) for v, f in zip(values, full, strict=True))


def test_a_full_signal_rate_below_one_slot_is_searched_in_log_m(evaluations: Counter) -> None:
    # n = 900,000, d = 16, s = 1: m_k = 0.0011 for level 1.  The search on m itself
    # bisected down from m = 1 (16 evaluations); by decades, then in log m, 9.
    m_k = full_signal_blanket(1.0, 1, 1e-8, 900_000, 16, rtol=1e-2, step=COARSE_STEP)
    assert 0.00109 < m_k < 0.00112
    assert user_delta(1.0, 1.0, 1, 900_000, m_k, 16, delta=1e-8, step=COARSE_STEP) <= 1e-8
    assert sum(evaluations.values()) <= 11


def test_finalists_are_ranked_at_a_coarser_precision_and_the_winner_refined() -> None:
    # Certified lambdas to 1e-7 cost a bisection through the bound's staircase for every
    # level of every finalist; the ranking needs 1e-4, and only the winner is refined.
    from segshuffle.core import optimizer

    asked: list[float] = []
    original = optimizer.max_lambda

    def recorded(*args, **kwargs):
        asked.append(kwargs["xtol"])
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(optimizer, "max_lambda", recorded)
        result = optimize([1250, 2500, 1250], [0.5, 1.0, 2.0], 17, 2, 2e-6,
                          lower_bounds=False)
    fine = [x for x in asked if x == accounting.LAMBDA_XTOL]
    assert len(fine) <= 3  # the published rate's three levels, nothing else
    assert result.lambdas[1] == 1.0


def test_levels_between_two_full_signal_anchors_cost_nothing(evaluations: Counter) -> None:
    # With K > 24 levels the lambdas between two anchor levels are searched on a grid
    # between the anchors' rates.  When both anchors send their full signal, every level
    # between them does too (the left anchor's level is stricter): before, each of them
    # evaluated the bound at lambda = 1 once more (1,000 evaluations per solve at K = 1000).
    import numpy as np

    from segshuffle.core.blanket import BlanketMode
    from segshuffle.core.optimizer import _LambdaSolver

    solver = _LambdaSolver([0.5, 1.0, 1.5], 8, 1e-8, 900_000, 128, BlanketMode.SLOTS)
    assert solver._largest_feasible_on(np.ones(65), 1.0, 0.25) == 1.0
    assert not evaluations
    grid = np.linspace(0.5, 1.0, 65)
    assert 0.5 <= solver._largest_feasible_on(grid, 1.0, 0.25) <= 1.0
    assert evaluations  # a grid that spans rates is still searched


def test_the_steering_spends_little_where_no_level_can_send(evaluations: Counter) -> None:
    # 27 honest users, d = 128, s = 8: below m of about 100 every level's steering rate
    # is under the grid's first positive rate, 1e-4.  Before, each level then ran a root
    # search towards 0 (12 to 27 evaluations, two thirds of the m search at n = 30) and
    # first evaluated lambda = 1 at every new m.
    from segshuffle.core.blanket import BlanketMode
    from segshuffle.core.optimizer import _LambdaSolver

    solver = _LambdaSolver([0.5, 1.0, 2.0], 8, 1e-8, 27, 128, BlanketMode.SLOTS)
    assert solver.approximate(34.0) == [0.0, 0.0, 0.0]
    evaluations.clear()
    assert solver.approximate(61.0) == [0.0, 0.0, 0.0]
    assert 1.0 not in {key[2] for key in evaluations}
    assert sum(evaluations.values()) <= 6


def test_close_finalists_share_their_full_signal_neighbour(monkeypatch) -> None:
    # n = 1e4, d = 128, s = 8: the finalists 1.6288 and 1.6311 both sit just below the
    # least strict level's certified full-signal rate 1.6401; each ran its own search of
    # certified lambda = 1 bounds at new rates (0.15 s each) for the same answer.
    from segshuffle.core import optimizer
    from segshuffle.core.blanket import BlanketMode

    class Solver:
        levels = (0.5, 1.0, 2.0)
        mode = BlanketMode.SLOTS

        @staticmethod
        def level(rate: float, xtol: float, index: int) -> float:
            return [0.26, 0.5, 0.985][index]

    def excess_of(solver, level):
        return lambda m: math.log(1.6401 / m) * 50.0

    searches: list[tuple[float, float]] = []
    original = optimizer._smallest_feasible

    def counted(excess, lo, hi, rtol):
        searches.append((lo, hi))
        return original(excess, lo, hi, rtol)

    monkeypatch.setattr(optimizer, "_full_signal_excess", excess_of)
    monkeypatch.setattr(optimizer, "_smallest_feasible", counted)
    found = optimizer._full_signal_neighbours(Solver(), [1.6311, 1.6288], 1024.0)
    assert len(found) == 1 and found[0] == pytest.approx(1.6401, rel=1e-5)
    assert len(searches) == 1  # before: one per finalist, for the same rate


def test_the_steering_revealed_bound_composes_one_pair_and_compares_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside the steering estimate (groups of at least STEERING_GROUP_SLOTS slots), the
    revealed-send bound only steers too.  It took a Poisson comparison and a pair loss per
    number of differing pairs at every new m of the sweep (7 of each at s = 8: about 20
    ms of every rate swept at n = 1e4, 0.8 of its 1.3 CPU-s); it now composes the
    estimate's own Poisson(N gamma / d) pair (one pair loss) and compares nothing."""
    from segshuffle.core import poisson_comparison, privacy_loss, revealed_send

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Poisson comparison was computed for a steering bound")

    monkeypatch.setattr(revealed_send, "steering_poisson_mean", refused)
    monkeypatch.setattr(poisson_comparison, "steering_poisson_mean", refused)
    built = Counter()
    original = privacy_loss.pair_loss

    def counted(law: object, lam: float, **kwargs: object) -> object:
        built[(law, lam)] += 1
        return original(law, lam, **kwargs)

    monkeypatch.setattr(privacy_loss, "pair_loss", counted)
    accounting.clear_caches()
    users, d, s, delta = 10_000, 128, 8, 1e-8
    for m in (1.61, 1.62, 1.63):
        bound = accounting.slot_bound(users, m, d, s, accounting.POISSON_SLACK_SHARE * delta,
                                       COARSE_STEP)
        assert bound.estimate is not None
        steered = bound.user_delta(1.0, 1.0)  # at lambda = 1 the revealed bound is taken
        assert steered <= bound.revealed.user_delta(1.0, 1.0)
        taus = bound.revealed.taus(1.0)
        assert len(taus) == s and all(b >= a for a, b in itertools.pairwise(taus))
    # One pair loss per new m for the estimate at lambda = 1, shared by i = 2..8.
    assert sum(built.values()) == 3 and all(count == 1 for count in built.values())
    accounting.clear_caches()


def test_the_steering_revealed_bound_tracks_the_certified_one() -> None:
    """The steering taus (the mean instead of the comparisons' lower one, the whole slack
    budget as their eta, the coarse grid) stay close to the certified ones: within 15% at
    every number of pairs where a tau is not the slack alone (n = 1e4, d = 128, s = 8,
    m = 1.64; they are 1-11% below: a steering estimate, never a published value)."""
    accounting.clear_caches()
    users, d, s, delta, m = 10_000, 128, 8, 1e-8, 1.64
    slack = accounting.POISSON_SLACK_SHARE * delta
    steering = accounting.slot_bound(users, m, d, s, slack, COARSE_STEP).revealed
    certified = accounting.slot_bound(users, m, d, s, slack).revealed
    assert steering.steering_law is not None and certified.steering_law is None
    compared = 0
    for eps in (0.5, 1.0, 2.0):
        for coarse, exact in zip(steering.taus(eps), certified.taus(eps), strict=True):
            if exact > 100.0 * slack:
                assert exact * 0.85 <= coarse <= exact * 1.05
                compared += 1
            else:
                assert coarse == pytest.approx(exact, rel=0.5, abs=2.0 * slack)
    assert compared >= 12
    accounting.clear_caches()


def test_the_lowest_full_signal_rate_costs_one_certified_rate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where every level sends its full signal, the strictest level's full-signal rate just
    below is found along the steering excess's slope: one certified evaluation at a new m
    here.  The regula falsi on the certified excess took four (each all the revealed-send
    bound's compositions and comparisons: 0.53 of 1.6 CPU-s at n = 1e6) and stalled
    against its bracket's far end."""
    from segshuffle.core import optimizer
    from segshuffle.core.blanket import BlanketMode
    from segshuffle.core.privacy_loss import DEFAULT_STEP

    accounting.clear_caches()
    certified: list[float] = []
    original = optimizer.user_delta

    def counted(*args: object, **kwargs: object) -> float:
        if kwargs.get("step", DEFAULT_STEP) == DEFAULT_STEP:
            certified.append(float(args[4]))  # m
        return original(*args, **kwargs)

    monkeypatch.setattr(optimizer, "user_delta", counted)
    # n = 1e6 with the default dropout tolerance 0.1: h = 900,000 accounted users.
    users, d, s, delta = 900_000, 128, 8, 1e-8
    solver = optimizer._LambdaSolver([0.5, 1.0, 2.0], s, delta, users, d, BlanketMode.SLOTS)
    start = 0.22263160154614495  # the strictest level's steering full-signal rate
    lowest = optimizer._lowest_full_signal_blanket(solver, 0.5, start)
    new_rates = {m for m in certified if m != start}
    assert len(new_rates) <= 2
    assert lowest <= 0.998 * start  # the certified crossing, 0.28% below (0.2220034)
    assert original(0.5, 1.0, s, users, lowest, d, delta=delta) <= delta
    assert max_lambda(0.5, s, delta, users, lowest, d) == 1.0
    accounting.clear_caches()


def test_one_differing_item_steers_with_one_count_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """For s = 1 the steering estimate (groups of 200 slots or more) is the one-item
    mixture's count pair at the mean of b, one window sum per rate; it was a Poisson pair's
    loss distribution per rate (0.3 of the 0.5 CPU-s of the m sweep at n = 1e3,
    d = 16384).  Near delta it is 0.67-0.85 of the exact mixture here, where the Poisson
    pair was 0.29-0.56 of it."""
    from segshuffle.core import privacy_loss
    from segshuffle.core.slot_groups import group_geometry

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a loss distribution was built for a one-item steering bound")

    accounting.clear_caches()
    users, d, m, delta = 900, 16384, 11.6, 1e-8
    slack = accounting.POISSON_SLACK_SHARE * delta
    exact = accounting.slot_bound(users, m, d, 1, slack)
    assert exact.single is not None
    n_slots, r = accounting.blanket_geometry(users, m, d)
    p_group, r_pair = group_geometry(r * d, d, 1)
    poisson = privacy_loss.BinLaw(n_slots * p_group * r_pair)
    points = ((0.5, 0.05), (1.0, 0.12), (2.0, 0.32), (1.0, 1.0))
    before = [privacy_loss.composed_pair(poisson, lam, 1, upper=True,
                                         step=COARSE_STEP).delta(eps) for eps, lam in points]
    monkeypatch.setattr(privacy_loss, "pair_loss", refused)
    accounting.clear_caches()
    steering = accounting.slot_bound(users, m, d, 1, slack, COARSE_STEP)
    assert steering.single_estimate is not None and steering.single is None
    for (eps, lam), old in zip(points, before, strict=True):
        value, estimate = exact.user_delta(eps, lam), steering.user_delta(eps, lam)
        assert 0.6 * value <= estimate <= 1.05 * value
        if value < 1e-6:  # near delta, where the steering's roots are
            assert abs(estimate - value) < abs(old - value)
    accounting.clear_caches()


def test_a_full_signal_rate_below_one_slot_never_evaluates_one_slot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At m = 1 every slot sends (gamma = 1): the steering estimate does not apply and the
    revealed-send bound's loss distributions are as large as the blanket, 100 ms of the
    first level's 135 ms at n = 1e6, d = 128, s = 8 (156 ms at n = 1e8).  The search below
    one slot now starts from gamma = 0.999, and where that holds, m = 1 is never asked."""
    asked: list[float] = []
    original = accounting.user_delta

    def recorded(level: float, lam: float, s: int, users: int, m: float, d: int,
                 **kwargs: object) -> float:
        asked.append(m)
        return original(level, lam, s, users, m, d, **kwargs)

    monkeypatch.setattr(accounting, "user_delta", recorded)
    accounting.clear_caches()
    m_k = full_signal_blanket(0.5, 8, 1e-8, 900_000, 128, rtol=1e-2, step=COARSE_STEP)
    assert 0.2 < m_k < 0.25
    assert original(0.5, 1.0, 8, 900_000, m_k, 128, delta=1e-8, step=COARSE_STEP) <= 1e-8
    assert 1.0 not in asked and accounting.ONE_SLOT_PROBE in asked
    # Where even gamma = 0.999 fails (few users), m = 1 and the integers above are asked.
    asked.clear()
    above = full_signal_blanket(0.5, 8, 1e-8, 900, 128, rtol=1e-2, step=COARSE_STEP)
    assert above > 1.0 and 1.0 in asked
    accounting.clear_caches()


N_1E4 = ([3000, 4000, 3000], [0.5, 1.0, 2.0], 128, 8, 1e-8)
N_1E4_OPTIONS = {"dropout_tolerance": 0.1, "lower_bounds": False}  # the command's defaults


@pytest.mark.slow  # 2-4 s on a 2-core machine: the fast tier stays within 3 minutes
def test_no_two_finalists_are_one_rate_to_the_search(monkeypatch) -> None:
    """At n = 1e4 the refined best rate (1.62892) and the grid's full-signal point
    (1.62906), 1e-4 apart, were both ranked: every level certified twice (0.2 CPU-s)."""
    from segshuffle.core import optimizer

    ranked: set[float] = set()
    solve = optimizer._LambdaSolver.solve

    def recorded(self, level, m, xtol, bracket=(0.0, 1.0)):
        if xtol == optimizer.RANKING_XTOL:
            ranked.add(m)
        return solve(self, level, m, xtol, bracket)

    monkeypatch.setattr(optimizer._LambdaSolver, "solve", recorded)
    accounting.clear_caches()
    optimize(*N_1E4, **N_1E4_OPTIONS)
    assert len(ranked) >= 2
    for a, b in itertools.combinations(ranked, 2):
        same_bucket = math.ceil(a) == math.ceil(b)
        assert not (same_bucket and abs(a - b) <= 3e-3 * min(a, b)), (a, b)  # REFINE_XTOL


@pytest.mark.slow  # 2-4 s on a 2-core machine: the fast tier stays within 3 minutes
def test_the_full_signal_neighbour_is_sought_to_the_ranking_precision(monkeypatch) -> None:
    """Its certified excess at lambda = 1 is a staircase below 1e-5: to 1e-6 the search
    took six evaluations of every revealed-send term (40 ms each at n = 1e4) besides the
    finalists' own, now two."""
    from segshuffle.core import optimizer

    evaluated: list[float] = []
    excess_of = optimizer._full_signal_excess

    def recorded(solver, level, step=optimizer.DEFAULT_STEP):
        excess = excess_of(solver, level, step)

        def value(m: float) -> float:
            evaluated.append(m)
            return excess(m)
        return value

    monkeypatch.setattr(optimizer, "_full_signal_excess", recorded)
    accounting.clear_caches()
    result = optimize(*N_1E4, **N_1E4_OPTIONS)
    assert result.lambdas[2] == 1.0
    assert len(set(evaluated)) <= 4  # 8 before
    assert user_delta(2.0, 1.0, 8, result.honest_users, result.m, 128, delta=1e-8) <= 1e-8


def _recorded_sweep(monkeypatch) -> list[float]:
    """The rates at which the m search computes steering lambdas, recorded as it goes (the
    accountant's caches cleared first)."""
    from segshuffle.core import optimizer

    swept: list[float] = []
    approximate = optimizer._LambdaSolver.approximate

    def recorded(self, m: float) -> list[float]:
        if m not in self._steering:
            swept.append(m)
        return approximate(self, m)

    monkeypatch.setattr(optimizer._LambdaSolver, "approximate", recorded)
    accounting.clear_caches()
    return swept


def test_the_independent_sweep_fills_in_around_its_best_point_only(monkeypatch) -> None:
    """Its objective has no buckets; the fill-in around two runners-up (as the slot mode
    needs) cost a fifth of its rates and changed no answer on 48 campaigns."""
    swept = _recorded_sweep(monkeypatch)
    result = optimize([300, 400, 300], [0.5, 1.0, 2.0], 128, 8, 1e-8, dropout_tolerance=0.1,
                      lower_bounds=False, blanket_mode="independent")
    assert len(swept) <= 22  # 26 before
    assert result.m == pytest.approx(18.996, rel=1e-4)


@pytest.mark.parametrize(("mode", "before", "most"), [("independent", 20, 16),
                                                       ("slots", 40, 34)])
def test_the_refinement_starts_from_the_grids_best_point(monkeypatch, mode, before,
                                                         most) -> None:
    """The m search's refinement inside the best grid point's cell began from scratch
    (a golden-section point) and spent up to 16 steering evaluations there; seeded with the
    grid's best point and its neighbours, it stops once the parabola through them predicts
    less than REFINE_FTOL to gain (n = 1e3, d = 128, s = 8)."""
    swept = _recorded_sweep(monkeypatch)
    result = optimize([300, 400, 300], [0.5, 1.0, 2.0], 128, 8, 1e-8, dropout_tolerance=0.1,
                      lower_bounds=False, blanket_mode=mode, compare_modes=False)
    assert len(swept) <= most, (len(swept), before)
    assert result.variance == pytest.approx(
        {"independent": 0.0501084, "slots": 0.0538447}[mode], rel=1e-4)


def _bisected(holds, floor: int, last: int) -> int:
    lo, hi = floor, last
    if holds(last):
        return last
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def test_the_steering_grid_search_finds_what_bisection_finds() -> None:
    """An interpolation search on the grid's indices (the log excess is close to linear in
    them) returns the largest holding index whatever its start and slope hint, and probes
    the top, lambda = 1, only once everything below it held."""
    import random

    from segshuffle.core.optimizer import _largest_holding_index

    rng = random.Random(11)
    for _ in range(3000):
        last = 42
        crossing = rng.uniform(-1.0, last + 2.0)
        rise = rng.choice([0.05, 0.4, 3.0, 25.0])
        bend = rng.choice([0.0, 0.02, 0.3])

        def excess(j: int, crossing=crossing, rise=rise, bend=bend) -> float:
            if j == 0:
                return -700.0  # lambda = 0
            x = j - crossing
            return rise * x + bend * x * abs(x)  # increasing in j

        floor = rng.randrange(0, max(1, min(last, int(crossing)) + 1))
        if excess(floor) > 0.0:
            floor = 0
        start = rng.choice([None, rng.randrange(floor, last)]) if floor < last else None
        slope = rng.choice([None, rise, rise * rng.uniform(0.2, 5.0)])
        asked: list[int] = []
        found, _ = _largest_holding_index(lambda j, asked=asked, excess=excess:
                                          asked.append(j) or excess(j),
                                          floor, last, start, slope)
        assert found == _bisected(lambda j: excess(j) <= 0.0, floor, last)
        assert len(asked) == len(set(asked)) <= 16
        if last in asked:
            assert all(excess(j) <= 0.0 for j in asked if j != last)


def test_the_steering_grid_search_predicts_the_cell_from_the_last_slope() -> None:
    # Regression: from the last rate's cell the search galloped (start, start + 1, start + 3,
    # start + 2 for a root 2.5 cells up); with that cell's slope it probes the start and the
    # predicted cell's two ends.
    from segshuffle.core.optimizer import _largest_holding_index

    asked: list[int] = []

    def excess(j: int) -> float:
        asked.append(j)
        return 4.7 * (j - 12.45)

    found, slope = _largest_holding_index(excess, 0, 42, 10, 4.7)
    assert found == 12 and asked == [10, 12, 13]
    assert slope == pytest.approx(4.7)


def test_small_populations_steer_with_fewer_evaluations(monkeypatch) -> None:
    from segshuffle.core import optimizer

    calls = 0
    original = optimizer.user_delta

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(optimizer, "user_delta", counted)
    accounting.clear_caches()
    result = optimize([12, 16, 12], [0.5, 1.0, 2.0], 8, 2, 1e-8, lower_bounds=False,
                      compare_modes=False)
    assert calls <= 700  # 850 before (n = 40, d = 8, s = 2)
    assert result.m == pytest.approx(8.0)

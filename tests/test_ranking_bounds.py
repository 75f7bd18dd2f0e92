"""The m search's finalists are ranked by branch and bound over their levels.

Before, every finalist (and full-signal neighbour) had every level certified before the
ranking, though at small populations most of them lose by far on their least strict
levels alone: at n = 30 (d = 128, s = 8) seven rates times three levels, the strictest
(lambda ~ 1e-4..1e-3) the costliest.  The ranking now certifies a rate's levels from the
least strict down and drops a rate once a floor on its score exceeds the best complete
score; its answer is the exhaustive ranking's.
"""

from __future__ import annotations

import random

import pytest

from segshuffle.core import accounting, optimizer
from segshuffle.core.blanket import BlanketMode
from segshuffle.core.estimator import (
    mse_bound,
    mse_bound_floor,
    variance_floor,
    variance_given_data,
)


@pytest.mark.parametrize("mode", [BlanketMode.SLOTS, BlanketMode.INDEPENDENT])
def test_the_floors_are_never_above_the_objectives(mode) -> None:
    rng = random.Random(7)
    for _ in range(2_000):
        count = rng.randint(1, 5)
        counts = [rng.uniform(0.5, 50.0) for _ in range(count)]
        d = rng.choice([8, 128, 1024])
        m = rng.uniform(0.0, min(d / 2.0, 30.0))
        n, s = sum(counts), rng.randint(1, 8)
        largest = sorted(rng.uniform(0.0, 1.0) for _ in range(count))
        known = {k: largest[k] for k in range(count) if rng.random() < 0.5}
        lambdas = [known.get(k, rng.uniform(0.0, largest[k])) for k in range(count)]
        floor = variance_floor(n, m, s, counts, known, largest, d, mode)
        assert floor <= variance_given_data(n, m, s, counts, lambdas, d, mode)
        capped = [min(lam, rng.uniform(0.0, 1.0)) for lam in lambdas]
        floor = variance_floor(n, m, s, counts, known, largest, d, mode, data=False)
        assert floor <= variance_given_data(n, m, s, counts, capped, d, mode)
        assert mse_bound_floor(n, m, s, counts, largest) <= mse_bound(n, m, s, counts, lambdas)


def test_the_largest_lambdas_follow_the_levels() -> None:
    largest = optimizer._largest_lambdas({2: 0.4, 4: 1.0}, 5)
    slack = 1.0 + optimizer.LEVEL_ORDER_SLACK
    assert largest == [0.4 * slack, 0.4 * slack, 0.4, 1.0, 1.0]
    assert optimizer._largest_lambdas({}, 3) == [1.0, 1.0, 1.0]


def _certified_levels(monkeypatch) -> list[tuple[float, float]]:
    solved: list[tuple[float, float]] = []
    solve = optimizer._LambdaSolver.solve

    def recorded(self, level, m, xtol, bracket=(0.0, 1.0)):
        if xtol == optimizer.RANKING_XTOL and self.mode is BlanketMode.SLOTS:
            solved.append((m, level))
        return solve(self, level, m, xtol, bracket)

    monkeypatch.setattr(optimizer._LambdaSolver, "solve", recorded)
    return solved


SMALL = ([9, 12, 9], [0.5, 1.0, 2.0], 128, 8, 1e-8)


@pytest.mark.slow  # 2-4 s on a 2-core machine: the fast tier stays within 3 minutes
def test_a_small_population_certifies_few_of_its_finalists_levels(monkeypatch) -> None:
    accounting.clear_caches()
    solved = _certified_levels(monkeypatch)
    result = optimizer.optimize(*SMALL, dropout_tolerance=0.1, lower_bounds=False)
    rates = {m for m, _ in solved}
    assert len(rates) >= 5  # the finalists and the full-signal neighbour
    strictest = [m for m, level in solved if level == 0.5]
    # Before: every level of every rate (21 root searches for 7 rates), the strictest
    # level's at each; now that level (the costliest) only where a rate could still win.
    assert len(strictest) <= len(rates) // 2
    assert len(solved) < 3 * len(rates) - 3
    assert result.m in strictest  # the winner is complete


def _exhaustive(solver: optimizer._LambdaSolver, candidates, score) -> float:
    ranked = [(score(rate, solver.all_exact(rate, optimizer.RANKING_XTOL)), i, rate)
              for i, rate in enumerate(candidates)]
    return min(ranked)[2]


@pytest.mark.parametrize(("counts", "levels", "d", "s", "users_h"), [
    ([9, 12, 9], [0.5, 1.0, 2.0], 128, 8, 27),
    ([30, 40, 30], [0.5, 1.0, 2.0], 128, 8, 90),
    ([12, 16, 12], [0.5, 1.0, 2.0], 8, 2, 36),
    ([6, 8, 6], [0.5, 1.0, 2.0], 8, 3, 18),
])
@pytest.mark.slow  # 2-4 s on a 2-core machine: the fast tier stays within 3 minutes
def test_branch_and_bound_picks_what_the_exhaustive_ranking_picks(counts, levels, d, s,
                                                                  users_h) -> None:
    from segshuffle.core.estimator import variance_given_data as variance

    accounting.clear_caches()
    users = sum(counts)
    solver = optimizer._LambdaSolver(levels, s, 1e-8, users_h, d, BlanketMode.SLOTS)

    def score(rate, lambdas):
        return variance(users, rate, s, counts, lambdas, d, BlanketMode.SLOTS)

    def floor(rate, known):
        largest = optimizer._largest_lambdas(known, len(levels))
        return variance_floor(users, rate, s, counts, known, largest, d, BlanketMode.SLOTS)

    top = optimizer.full_signal_blanket(levels[-1], s, 1e-8, users_h, d, rtol=1e-2,
                                        step=accounting.COARSE_STEP)
    candidates = sorted({top * f for f in (0.55, 0.7, 0.85, 0.93, 1.0, 1.1)}
                        | {float(round(top))})
    chosen = optimizer._ranked_best(solver, candidates, score, floor)
    assert chosen == _exhaustive(solver, candidates, score)

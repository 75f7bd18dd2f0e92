"""The guarantee holds at every valid input and refuses the rest (core side)."""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segshuffle.core import rules
from segshuffle.core.accounting import audit, max_lambda, user_delta, user_epsilon
from segshuffle.core.estimator import mse_bound, variance_given_data
from segshuffle.core.hockey_stick import delta_for, poisson_pair
from segshuffle.core.optimizer import optimize


def _exact_single_item_delta(eps: float, lam: float, users: int, m: int, d: int) -> mpmath.mpf:
    """lam * D_{e^eps}((B0 + 1, B1) || (B0, B1 + 1)) in 50-digit arithmetic.

    For s = 1 and integer m this is the exact full-view delta (every slot sends, so
    the non-null total reveals whether the victim sent).
    """
    mpmath.mp.dps = 50
    n = users * m
    r = mpmath.mpf(1) / d
    rest = 1 - 2 * r
    e = mpmath.exp(mpmath.mpf(eps))

    def multinomial(a: int, b: int) -> mpmath.mpf:
        if a < 0 or b < 0 or a + b > n:
            return mpmath.mpf(0)
        return (mpmath.factorial(n) / (mpmath.factorial(a) * mpmath.factorial(b)
                                       * mpmath.factorial(n - a - b))
                * r ** (a + b) * rest ** (n - a - b))

    total = mpmath.mpf(0)
    for a in range(n + 2):
        for b in range(n + 2 - a):
            gap = multinomial(a - 1, b) - e * multinomial(a, b - 1)
            if gap > 0:
                total += gap
    return mpmath.mpf(lam) * total


@pytest.mark.parametrize(("users", "m", "d", "lam", "delta"), [
    (20, 2, 4, 0.5, 1e-3), (30, 1, 3, 0.9, 1e-3), (15, 3, 6, 0.3, 1e-3), (25, 2, 5, 1.0, 1e-3),
])
def test_published_epsilon_is_never_below_exact_arbitrary_precision(
        users: int, m: int, d: int, lam: float, delta: float) -> None:
    # At the epsilon the accountant certifies, the exact delta must not exceed the target.
    eps = user_epsilon(lam, 1, delta, users, float(m), d)
    assert eps is not None
    assert _exact_single_item_delta(eps, lam, users, m, d) <= delta
    # and the certified delta at any epsilon is at least the exact one.
    for probe in (0.25 * eps, 0.5 * eps, eps, 2.0 * eps):
        certified = user_delta(probe, lam, 1, users, float(m), d, delta=delta)
        assert mpmath.mpf(certified) >= _exact_single_item_delta(probe, lam, users, m, d)


def test_the_infinite_loss_atom_survives_large_epsilons() -> None:
    # lambda = 1, no blanket on the other item with probability (1 - r)^N: that mass has
    # infinite privacy loss and stays in delta at every epsilon (it was dropped past ~36.7).
    pair = poisson_pair(1.0, 10, 0.1)
    atom = 0.9**10
    for eps in (1.0, 30.0, 37.0, 40.0, 80.0):
        assert delta_for(pair, eps) >= atom * (1 - 1e-12)


@pytest.mark.parametrize("call", [
    lambda: optimize([5000], [40.0], 17, 1, 1e-6),
    lambda: optimize([2500, 2500], [1.0, 1000.0], 17, 1, 1e-6),
    lambda: optimize([2500, 2500], [5e-324, 1.0], 17, 1, 1e-6),
    lambda: max_lambda(31.0, 1, 1e-6, 5000, 1.0, 17),
    lambda: audit(10**13, 17, 1, 1.0, 0.5, 1e-6),
    lambda: audit(5000, 17, 1, 1e12, 1.0, 1e-6),
    lambda: audit(5000, 17, 1, 1.0, 0.5, 1e-13),
    lambda: optimize([2500, 2500], [0.5, 1.0], 2_000_000, 1, 1e-6),
])
def test_inputs_beyond_the_caps_are_refused(call) -> None:
    with pytest.raises(ValueError, match=r"must be|at most|at least"):
        call()


def test_n_min_has_one_exact_definition() -> None:
    # 0.55 * 100 is 55.000000000000007 in floating point; n_min must be 55 everywhere.
    assert rules.accounting_users(100, 0.45) == 55
    assert rules.accounting_users(10, 0.7) == 3
    assert rules.accounting_users(1, 0.99) == 1


@settings(max_examples=200, deadline=None)
@given(users=st.integers(1, 10**9), tau=st.floats(0.0, 0.99))
def test_n_min_is_the_ceiling_of_the_exact_product(users: int, tau: float) -> None:
    n_min = rules.accounting_users(users, tau)
    exact = (1 - Fraction(repr(tau))) * users  # tau as its JSON text
    assert n_min >= exact and (n_min - 1 < exact or n_min == 1)


@settings(max_examples=12, deadline=None)  # each an optimize: 40 took 18 s
@given(users=st.integers(2, 10**6 - 1), tau=st.floats(0.0, 0.99))
def test_the_optimizer_accounts_n_min_users(users: int, tau: float) -> None:
    assert optimize([users / 2, users / 2], [1.0, 2.0], 17, 1, 1e-6, dropout_tolerance=tau,
                    blanket=1.0, lower_bounds=False).accounting_users == \
        rules.accounting_users(users, tau)


@pytest.mark.slow  # 20 s for 2 users on a 2-core machine: the fast tier stays within 3 minutes
@pytest.mark.parametrize(("users", "objective"), [
    (n, objective) for n in (2, 3, 5, 8, 13, 20) for objective in ("paper-bound", "variance")])
def test_optimizer_finds_the_global_minimum_for_small_populations(users: int,
                                                                  objective: str) -> None:
    levels, counts = [1.0, 5.0], [users / 2, users / 2]
    result = optimize(counts, levels, 17, 1, 1e-3, lower_bounds=False, objective=objective)
    grid = np.unique(np.concatenate([np.geomspace(1e-3, 2 * max(result.m, 1.0), 120),
                                     np.arange(1, math.ceil(2 * max(result.m, 1.0)) + 1)]))

    def score(m: float) -> float:
        lambdas = [max_lambda(e, 1, 1e-3, users, m, 17) for e in levels]
        if objective == "paper-bound":
            return mse_bound(users, m, 1, counts, lambdas)
        return variance_given_data(users, m, 1, counts, lambdas, 17)

    best = min(score(float(m)) for m in grid)
    # The variance objective is jagged at a handful of users (lambda (1 - lambda) moves
    # with every level's root): within a percent of the grid's best, the bound within 0.1%.
    assert result.objective_value <= best * (1 + (1e-2 if objective == "variance" else 1e-3))


@pytest.mark.parametrize("arguments", [
    ["audit", "--users", "1e300", "--domain-size", "17", "--set-size", "1", "--blanket", "1",
     "--lam", "0.5", "--delta", "1e-6"],
    ["optimize", "--users", "5000", "--domain-size", "17", "--set-size", "1", "--levels",
     "1,1000", "--shares", "0.5,0.5", "--delta", "1e-6"],
    ["audit", "--users", "5000", "--domain-size", "17", "--set-size", "1", "--blanket",
     "1e12", "--lam", "1", "--delta", "1e-6"],
    ["optimize", "--users", "5000", "--domain-size", "17", "--set-size", "1", "--levels", "40",
     "--shares", "1", "--delta", "1e-6", "--json"],
    ["optimize", "--users", "5000", "--domain-size", "17", "--set-size", "1", "--levels",
     "0.001,1", "--shares", "0.5,0.5", "--delta", "1e-6"],
])
def test_command_line_refuses_out_of_range_inputs_in_one_line(arguments: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "segshuffle.cli.main", *arguments],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_largest_population_answers_in_seconds() -> None:
    # n = 1e12 at the smallest level and delta: bounded windows keep this to seconds.
    result = audit(10**12, 17, 1, 1.0, 1.0, 1e-10)
    assert result.epsilon_upper is not None and result.epsilon_upper < 0.01

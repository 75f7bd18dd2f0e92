"""Brent's root and minimum searches (core/scalar_search) on functions with known answers."""

from __future__ import annotations

import math

import pytest

from segshuffle.core.scalar_search import (
    NoConvergenceError,
    bounded_minimum,
    bracketed_root,
    refined_minimum,
)


@pytest.mark.parametrize(("function", "a", "b", "root"), [
    (lambda x: x * x - 2.0, 0.0, 2.0, math.sqrt(2.0)),
    (lambda x: math.exp(x) - 5.0, -3.0, 4.0, math.log(5.0)),
    (lambda x: math.log(x / 3e-9), 1e-12, 1.0, 3e-9),
    (lambda x: -1.0 if x < 0.7 else 1.0, 0.0, 1.0, 0.7),  # a jump: bisection steps
    (lambda x: (x - 0.25) ** 3, 0.0, 1.0, 0.25),  # a flat crossing
])
def test_the_root_is_within_its_tolerance(function, a: float, b: float, root: float) -> None:
    calls = 0

    def counted(x: float) -> float:
        nonlocal calls
        calls += 1
        return function(x)

    found = bracketed_root(counted, a, b, xtol=1e-14, rtol=1e-10)
    assert abs(found - root) <= 1e-14 + 2e-10 * abs(root) + 1e-15
    assert calls <= 120


def test_an_endpoint_root_and_a_missing_bracket() -> None:
    assert bracketed_root(lambda x: x, 0.0, 1.0, xtol=1e-12, rtol=0.0) == 0.0
    with pytest.raises(ValueError, match="same sign"):
        bracketed_root(lambda x: x + 1.0, 0.0, 1.0, xtol=1e-12, rtol=0.0)
    with pytest.raises(NoConvergenceError):
        bracketed_root(lambda x: -1.0 if x < 0.3 else 1.0, 0.0, 1.0, xtol=0.0, rtol=0.0,
                       maxiter=3)


@pytest.mark.parametrize(("function", "a", "b", "minimum"), [
    (lambda x: (x - 0.3) ** 2 + 1.0, 0.0, 1.0, 0.3),
    (lambda x: abs(x - 2.5), 1.0, 4.0, 2.5),
    (lambda x: math.inf if x < 0.4 else (x - 0.45) ** 2, 0.0, 1.0, 0.45),  # an infeasible side
    (lambda x: x, 0.2, 0.9, 0.2),  # at the edge
])
def test_the_bounded_minimum_is_found(function, a: float, b: float, minimum: float) -> None:
    x, value = bounded_minimum(function, a, b, xatol=1e-6, maxiter=60)
    assert abs(x - minimum) < 1e-4
    assert value == function(x)


def test_the_minimum_search_keeps_to_its_evaluations() -> None:
    calls = 0

    def counted(x: float) -> float:
        nonlocal calls
        calls += 1
        return abs(x - 0.123456789) ** 0.5  # a cusp: parabolas do not converge on it

    bounded_minimum(counted, 0.0, 10.0, xatol=1e-15, maxiter=16)
    assert calls == 16


class _Counted:
    def __init__(self, function) -> None:
        self.function, self.points = function, []

    def __call__(self, x: float) -> float:
        self.points.append(x)
        return self.function(x)


def test_a_good_grid_point_is_refined_in_one_or_two_evaluations() -> None:
    # Regression: the m search's refinement started from scratch inside the best grid
    # point's cell (1.33 .. 1.60 around 1.4813 at n = 1e4, independent blanket) and took
    # ten evaluations to conclude that the grid's point was the best.  From the point and
    # its neighbours' values, the parabola's vertex is evaluated and then predicts nothing
    # worth another evaluation.
    function = _Counted(lambda m: 0.05 * (1.0 + 3.0 * (m - 1.479) ** 2))
    known = {m: function.function(m) for m in (1.3322, 1.4813, 1.5995)}
    x, value = refined_minimum(function, 1.3322, 1.5995, 1.4813, known=known,
                               xatol=3e-3 * 1.4813, ftol=1e-4, maxiter=16)
    assert len(function.points) <= 1
    assert abs(x - 1.479) < 3e-3 and value == function.function(x)
    counted = _Counted(function.function)
    bounded_minimum(counted, 1.3322, 1.5995, xatol=3e-3 * 1.4813, maxiter=16)
    assert len(counted.points) >= 5  # what it replaces, for the record


@pytest.mark.parametrize(("function", "a", "b", "start", "minimum"), [
    (lambda x: (x - 0.3) ** 2 + 1.0, 0.0, 1.0, 0.5, 0.3),
    (lambda x: abs(x - 2.5) + 1.0, 1.0, 4.0, 3.0, 2.5),  # a kink: parabolas overshoot
    (lambda x: math.inf if x < 0.4 else (x - 0.45) ** 2 + 1.0, 0.0, 1.0, 0.6, 0.45),
    (lambda x: x + 1.0, 0.2, 0.9, 0.5, 0.2),  # at the edge: golden steps towards it
    (lambda x: -((x - 0.5) ** 2) + 2.0, 0.0, 1.0, 0.1, 0.0),  # opens downwards
])
def test_the_refined_minimum_improves_on_its_start(function, a, b, start, minimum) -> None:
    known = {start: function(start), a: function(a)} if math.isfinite(function(a)) else {}
    x, value = refined_minimum(function, a, b, start, known=known, xatol=1e-6, ftol=1e-9,
                               maxiter=60)
    assert value == function(x) <= function(start)
    assert abs(x - minimum) < 1e-3


def test_the_refinement_keeps_to_its_evaluations_and_ignores_points_outside() -> None:
    counted = _Counted(lambda x: abs(x - 0.123456789) ** 0.5)
    x, _ = refined_minimum(counted, 0.0, 10.0, 5.0, known={-1.0: -100.0, 11.0: -100.0},
                           xatol=1e-15, ftol=0.0, maxiter=16)
    assert len(counted.points) <= 17 and 0.0 <= x <= 10.0  # the start, then 16 at most

"""A joint view that no plan can fit is not planned (:mod:`segshuffle.core.joint_budget`).

Before, every accountant built each coarser plan of the joint view (binomial quantiles and
weights per bucket) only to find it over the budget by dozens of orders of magnitude: 6.5 s
of a pure-Python check at 54 million slots.  The floor must never exceed the values of any
plan, or a view that fits would be refused.
"""

from __future__ import annotations

import math
import random

import pytest

from segshuffle.core import arrays, slot_joint
from segshuffle.core.joint_budget import values_floor

from .node_support import run_accountant_script


def _geometry(gamma: float, d: int, k: int) -> tuple[float, float]:
    """(q_out, rate) as JointView computes them."""
    q_out = gamma * (d - 2 * k) / d
    inside = (1.0 - gamma) + 2.0 * k * gamma / d
    return q_out, (gamma / d) / inside


def _views(seed: int, count: int) -> list[tuple[int, float, int, int]]:
    """(N, gamma, d, k) from 1 to 2 million slots, k up to 5, d from 2k up."""
    rng = random.Random(seed)
    views = []
    for _ in range(count):
        k = rng.randint(1, 5)
        views.append((int(math.exp(rng.uniform(0.0, math.log(2e6)))),
                      rng.choice([1.0, rng.uniform(0.01, 1.0)]),
                      2 * k + int(math.exp(rng.uniform(0.0, 7.0))), k))
    return views


def _smallest_plan(n: int, gamma: float, d: int, k: int) -> int:
    """The fewest values of any of the view's plans, each built as JointView builds it."""
    q_out, rate = _geometry(gamma, d, k)
    view = object.__new__(slot_joint.JointView)
    for name, value in (("n_slots", n), ("gamma", gamma), ("domain_size", d), ("pairs", k),
                        ("lower", False)):
        object.__setattr__(view, name, value)
    smallest = math.inf
    for coarse in range(len(slot_joint.COARSE_BUCKET_EDGES) + 1):
        buckets, _ = slot_joint._window(n, q_out, False, coarse)
        atoms = view._plan(buckets, q_out, rate)[1]
        smallest = min(smallest, atoms * 2 * (k + 1))
    return smallest


@pytest.mark.parametrize("view", _views(20261128, 60))
def test_the_floor_is_never_above_a_plan(view: tuple[int, float, int, int]) -> None:
    n, gamma, d, k = view
    q_out, rate = _geometry(gamma, d, k)
    floor = values_floor(n, q_out, rate, k, bucket_tail=slot_joint.BUCKET_TAIL,
                         view_tail=slot_joint.VIEW_TAIL)
    assert 0 < floor <= _smallest_plan(n, gamma, d, k)


#: The joint view of the first random campaign of the verification benchmark that took
#: seconds: 54 million slots, eight differing items.
LARGE = (54_069_287, 1.0, 279, 8)


def test_a_large_view_builds_no_plan(monkeypatch) -> None:
    def refused(*_):
        raise AssertionError("planned a view that cannot fit")

    monkeypatch.setattr(slot_joint.JointView, "_plan", refused)
    with arrays.use(arrays.PYTHON):
        light = slot_joint.JointView(*LARGE)
    for view in (slot_joint.JointView(*LARGE), light):
        assert not view.usable and view.values > slot_joint.MAX_VALUES
        assert len(view.plan) == 0 and view.left_out == 1.0


def test_a_view_that_fits_is_planned_as_before() -> None:
    """30 slots at d = 8, two items: the per-b plan fits."""
    view = slot_joint.JointView(30, 0.9, 8, 2)
    assert view.usable and view.coarse == 0 and len(view.plan) > 1
    with arrays.use(arrays.PYTHON):
        light = slot_joint.JointView(30, 0.9, 8, 2)
    assert light.usable and light.values == view.values


_JOINT_SCRIPT = """
const views = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
import(process.argv[1]).then(({ JointView }) => {
  console.log(JSON.stringify(views.map((args) => {
    const view = new JointView(...args);
    return [view.usable, view.plan.length, view.values];
  })));
});
"""


def test_the_javascript_view_is_not_planned_either() -> None:
    views = [list(LARGE), [30, 0.9, 8, 2]]
    (large_usable, large_plan, large_values), (small_usable, small_plan, small_values) = (
        run_accountant_script(_JOINT_SCRIPT, "slot_joint.js", views))
    assert not large_usable and large_plan == 0 and large_values > slot_joint.MAX_VALUES
    assert small_usable and small_plan > 1
    assert small_values == slot_joint.JointView(30, 0.9, 8, 2).values

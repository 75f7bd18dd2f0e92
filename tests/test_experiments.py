"""Experiment plumbing: settings, planning, determinism across workers, ours against its bound."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from segshuffle.core.estimator import estimate_frequencies
from segshuffle.core.optimizer import optimize
from segshuffle.core.simulate import simulate_counts
from segshuffle.datasets import synthetic_source
from segshuffle.experiments.methods import (
    BASELINES,
    METHODS,
    OURS,
    assign_levels,
    paper_weight,
    plan_panel,
    run_repeat,
    stream,
)
from segshuffle.experiments.report import panel_rows, summarize_rows, summary_markdown
from segshuffle.experiments.runner import run_figures
from segshuffle.experiments.settings import (
    FIGURES,
    SHARES,
    Figure,
    Panel,
    level_counts,
    resolve_figures,
)


def test_figures_cover_the_paper():
    assert set(FIGURES) == {"msnbc-s1", "msnbc-s2", "msnbc-s3", "synthetic-s1",
                            "synthetic-s2", "synthetic-s3"}
    assert [(p.n, p.set_size) for p in FIGURES["msnbc-s2"].panels] == [(5000, 4), (50000, 4)]
    assert {(p.n, p.set_size) for p in FIGURES["synthetic-s3"].panels} == {
        (5000, 4), (50000, 4), (5000, 8), (50000, 8)}
    assert FIGURES["msnbc-s3"].shares == (0.25, 0.25, 0.5)
    assert len(resolve_figures("all")) == 6
    with pytest.raises(ValueError, match="unknown figure"):
        resolve_figures("msnbc-s4")


def test_level_counts_are_exact():
    assert level_counts(5000, SHARES["S1"]) == [1250, 2500, 1250]
    assert level_counts(7, SHARES["S2"]) == [4, 2, 1]
    assert sum(level_counts(50001, SHARES["S3"])) == 50001


def test_streams_are_keyed_and_reproducible():
    a = stream(3, "panel", 7, 1).random(4)
    assert np.array_equal(a, stream(3, "panel", 7, 1).random(4))
    assert not np.array_equal(a, stream(3, "panel", 7, 2).random(4))
    assert not np.array_equal(a, stream(3, "panel", 8, 1).random(4))
    assert not np.array_equal(a, stream(4, "panel", 7, 1).random(4))
    levels = assign_levels((2, 3, 1), stream(0, "x", 0))
    assert np.bincount(levels).tolist() == [2, 3, 1]


def test_paper_weights_favour_liberal_and_large_levels():
    d, s, delta = 21, 4, 2e-6
    assert paper_weight(1000, 2.0, d, s, delta) > paper_weight(1000, 0.5, d, s, delta)
    assert paper_weight(4000, 1.0, d, s, delta) > paper_weight(1000, 1.0, d, s, delta)


@pytest.fixture(scope="module")
def small_plan():
    return plan_panel("test|synthetic|S1|n=3000|s=4", 3000, 4, 32, 32, SHARES["S1"],
                      (0.3, 1.0, 3.0))


def test_plan_uses_the_accountant(small_plan):
    plan = small_plan
    assert plan.counts == (750, 1500, 750)
    assert plan.delta == pytest.approx(0.01 / 3000)
    assert [p.m for p in plan.ours[:-1]] == [0.3, 1.0, 3.0]
    assert plan.ours[-1].optimal and not any(p.optimal for p in plan.ours[:-1])
    best = min(plan.ours, key=lambda p: p.mse_bound)
    assert best.optimal or best.mse_bound >= plan.ours[-1].mse_bound * (1 - 1e-9)
    for point in plan.ours:
        assert all(0.0 < lam <= 1.0 for lam in point.lambdas)
        assert list(point.lambdas) == sorted(point.lambdas)  # liberal levels send more
    assert sum(plan.sepmm_weights) == pytest.approx(1.0)
    assert plan.local.epsilon == 2.0 and plan.shuffled.epsilon > 0.5


def test_run_repeat_is_deterministic(small_plan):
    source = synthetic_source(32)
    first = run_repeat(small_plan, source, 11, 0)
    assert set(first) == set(METHODS)
    assert len(first[OURS]) == len(small_plan.ours)
    assert first == run_repeat(small_plan, source, 11, 0)
    assert first != run_repeat(small_plan, source, 11, 1)
    assert all(v >= 0.0 for values in first.values() for v in values)


def test_results_do_not_depend_on_workers():
    figure = Figure(name="tiny", dataset="synthetic", shares_name="S3",
                    panels=(Panel(1500, 4),))
    kwargs = dict(repeats=7, grid=(0.5, 2.0), seed=5, log=io.StringIO())
    serial = run_figures([figure], jobs=1, **kwargs)
    parallel = run_figures([figure], jobs=2, **kwargs)
    assert serial[0].errors == parallel[0].errors
    rows = panel_rows(parallel[0])
    assert [r["method"] for r in rows] == [*BASELINES, OURS, OURS, OURS]
    assert all(r["m"] == "" for r in rows if r["method"] in BASELINES)
    assert all(r["repeats"] == "7" for r in rows)
    summary = summarize_rows(rows)
    assert len(summary) == 1 and summary[0].n == 1500
    assert summary[0].best_m in (0.5, 2.0)
    assert "| tiny | 1500 | 4 |" in summary_markdown(summary)


@pytest.mark.parametrize(("m", "shares"), [(0.5, (0.25, 0.5, 0.25)), (2.0, (0.5, 0.25, 0.25)),
                                           (6.0, (0.25, 0.25, 0.5))])
def test_ours_stays_within_its_mse_bound(m, shares):
    """The measured MSE of the segmented protocol never exceeds the paper's bound.

    The bound is on the error against the item distribution, so every repeat
    draws fresh users from it; the mean over repeats must stay below the bound
    up to three standard errors.
    """
    n, d, s = 4000, 24, 3
    counts = level_counts(n, shares)
    params = optimize(counts, (0.5, 1.0, 2.0), d, s, 0.01 / n, blanket=m, lower_bounds=False)
    rng = np.random.default_rng(99)
    source = synthetic_source(d)
    truth = np.full(d, s / d)  # the distribution the synthetic users are drawn from
    errors = []
    for _ in range(150):
        population = source.draw(n, s, rng)
        levels = assign_levels(tuple(counts), rng)
        holders = population.level_holders(levels, 3)
        observed = simulate_counts(holders, params.lambdas, m, rng, users=n)
        estimate = estimate_frequencies(observed, counts, params.lambdas, m)
        errors.append(float(np.sum((estimate.values - truth) ** 2)))
    mean = float(np.mean(errors))
    se = float(np.std(errors, ddof=1)) / math.sqrt(len(errors))
    assert mean <= params.mse_bound + 3 * se
    assert mean >= 0.3 * params.mse_bound  # the bound is not vacuous either

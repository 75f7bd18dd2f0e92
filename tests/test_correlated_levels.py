"""Levels that go with items in the experiments, the SepMM weightings, bias reporting.

segshuffle.experiments.correlated_levels, methods.inverse_variance_weights,
report.bias_summary and the ``reproduce`` options of docs/results.md ("When levels go with
items").  Nothing here plans a panel (no accountant search), so every test is fast.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from segshuffle.cli.main import main
from segshuffle.datasets import synthetic_source
from segshuffle.datasets.population import Population
from segshuffle.experiments.balls_into_bins import BallsIntoBins
from segshuffle.experiments.calibration import BallsIntoBinsChoice
from segshuffle.experiments.correlated_levels import (
    Correlation,
    conditional_poisson_sample,
    correlated_levels,
    draw_conditional,
    inclusion_probabilities,
    strict_weights,
    uniform_levels,
)
from segshuffle.experiments.methods import (
    BASELINES,
    assign_levels,
    guarded_name,
    guarded_ratio,
    inverse_variance_weights,
    paper_weight,
)
from segshuffle.experiments.report import (
    bias_summary,
    correlation_markdown,
    correlation_pivot_markdown,
    summarize_rows,
    summary_markdown,
)

COUNTS = (1000, 2000, 1000)


def _population(n: int = 4000, seed: int = 0) -> Population:
    return synthetic_source(32).draw(n, 4, np.random.default_rng(seed))


def test_independent_levels_keep_the_papers_random_stream():
    population = _population()
    old = np.repeat(np.arange(3), COUNTS)
    np.random.default_rng(5).shuffle(old)  # what assign_levels did before correlations
    assert np.array_equal(assign_levels(COUNTS, np.random.default_rng(5)), old)
    assert np.array_equal(
        correlated_levels(COUNTS, population, Correlation(ratio=1.0), np.random.default_rng(5)),
        old)
    assert np.array_equal(uniform_levels(COUNTS, np.random.default_rng(5)), old)


@pytest.mark.parametrize("mode", ["items", "sets"])
def test_correlated_levels_keep_the_exact_counts(mode):
    population = _population()
    levels = correlated_levels(COUNTS, population, Correlation(mode, 3.0, (0, 1)),
                               np.random.default_rng(1))
    assert np.bincount(levels, minlength=3).tolist() == list(COUNTS)


def test_the_conditional_poisson_sample_has_the_product_law():
    weights = np.array([1.0, 1.0, 3.0, 6.0])
    rng = np.random.default_rng(2)
    subsets = list(itertools.combinations(range(4), 2))
    expected = np.array([weights[list(s)].prod() for s in subsets])
    expected /= expected.sum()
    seen = dict.fromkeys(subsets, 0)
    draws = 20_000
    probability = inclusion_probabilities(weights, 2)
    assert probability.sum() == pytest.approx(2.0, rel=1e-12)
    for _ in range(draws):
        chosen = tuple(np.flatnonzero(draw_conditional(probability, 2, rng)))
        seen[chosen] += 1
    assert tuple(np.flatnonzero(conditional_poisson_sample(weights, 2, rng))) in seen
    observed = np.array([seen[s] for s in subsets]) / draws
    se = np.sqrt(expected * (1 - expected) / draws)
    assert np.all(np.abs(observed - expected) < 4 * se), (observed, expected)
    assert conditional_poisson_sample(weights, 0, rng).sum() == 0
    assert conditional_poisson_sample(weights, 4, rng).all()
    with pytest.raises(ValueError):
        conditional_poisson_sample(weights, 5, rng)


def test_holders_of_the_chosen_item_are_r_times_likelier_to_be_strict():
    """Items mode, R = 3: the odds of the strict level among the holders of item 0 over
    the others' odds, pooled over draws, is about 3 (item 0's holders: about 1/8)."""
    population = _population(8000)
    holds = (population.items == 0).any(axis=1)
    rng = np.random.default_rng(4)
    table = np.zeros((2, 2))
    counts = (2000, 4000, 2000)
    for _ in range(20):
        strict = correlated_levels(counts, population, Correlation("items", 3.0, (0,)),
                                   rng) == 0
        table += [[np.sum(strict & holds), np.sum(~strict & holds)],
                  [np.sum(strict & ~holds), np.sum(~strict & ~holds)]]
    ratio = table[0, 0] * table[1, 1] / (table[0, 1] * table[1, 0])
    assert 2.6 < ratio < 3.4, ratio


def test_the_data_driven_variant_makes_holders_of_rare_items_strict():
    population = _population()
    weights = strict_weights(population, Correlation("sets", 4.0))
    assert weights.min() >= 1.0 and weights.max() <= 4.0
    holders = np.bincount(population.items.ravel(), minlength=32)
    rarest, commonest = int(np.argmin(holders)), int(np.argmax(holders))
    strict = correlated_levels(COUNTS, population, Correlation("sets", 4.0),
                               np.random.default_rng(3)) == 0
    share = [strict[(population.items == j).any(axis=1)].mean() for j in (rarest, commonest)]
    assert share[0] > share[1]


def test_a_correlation_is_validated():
    for bad in ({"mode": "levels"}, {"ratio": 0.5}, {"items": ()}, {"items": (-1,)}):
        with pytest.raises(ValueError):
            Correlation(**bad)
    assert Correlation().label == "none" and Correlation("sets", 2.0).label == "sets:2"
    with pytest.raises(ValueError, match="not a real item"):
        strict_weights(_population(), Correlation("items", 2.0, (40,)))


def test_guarded_method_names_round_trip():
    assert guarded_name(3.0) == "ours-r3" and guarded_ratio("ours-r3") == 3.0
    assert guarded_name(1.5) == "ours-r1.5" and guarded_ratio("ours-r1.5") == 1.5
    assert guarded_ratio("ours") is None and guarded_ratio("ours-rx") is None


def _choice(expected_mse: float) -> BallsIntoBinsChoice:
    return BallsIntoBinsChoice(config=BallsIntoBins(21, 4, 1.0, "all-items"),
                               expected_mse=expected_mse, alternatives=())


def _combined_error(weights, variances, counts, total):
    """sum_k w_k^2 (V_k + T / n_k) - T / n: a weighted SepMM's expected summed error."""
    n = sum(counts)
    return sum(w * w * (v + total / c) for w, v, c in zip(weights, variances, counts,
                                                          strict=True)) - total / n


def test_inverse_variance_weights_beat_the_papers_by_their_own_formula():
    """On MSNBC S1's calibrated per-level errors (n = 5000, levels 0.5, 1, 2) the public
    inverse-variance weights have the smaller expected error whatever the data's
    sum_j w_j (1 - w_j) in (0, s], and they are its minimiser when that sum is s."""
    counts = (1250, 2500, 1250)
    variances = (6.3228e-3, 4.5059e-4, 5.3942e-4)
    ivw = inverse_variance_weights(tuple(_choice(v) for v in variances), counts, 4)
    assert sum(ivw) == pytest.approx(1.0)
    raw = [paper_weight(c, e, 21, 4, 0.01 / 5000) for c, e in zip(counts, (0.5, 1.0, 2.0),
                                                                   strict=True)]
    paper = [w / sum(raw) for w in raw]
    for total in (0.5, 2.0, 4.0):
        assert _combined_error(ivw, variances, counts, total) < \
            _combined_error(paper, variances, counts, total)
    rng = np.random.default_rng(0)
    best = _combined_error(ivw, variances, counts, 4.0)
    for _ in range(200):
        other = rng.dirichlet(np.ones(3))
        assert _combined_error(other, variances, counts, 4.0) >= best * (1 - 1e-12)


def test_bias_summary_finds_a_biased_item_and_only_it():
    rng = np.random.default_rng(9)
    errors = rng.normal(0.0, 0.01, size=(500, 17))
    errors[:, 3] += 0.005  # a bias of half a standard deviation per repeat
    summary = bias_summary(errors)
    assert summary.items_z3 >= 1 and summary.max_z > 8
    assert summary.squared_bias == pytest.approx(0.005**2, rel=0.3)
    clean = bias_summary(rng.normal(0.0, 0.01, size=(500, 17)))
    assert clean.max_z < 4.5 and abs(clean.squared_bias) < 5e-6


def _row(method, mse, correlation, m="", optimal="", z="", repeats="400"):
    return {"figure": "f", "n": "100", "s": "2", "method": method, "m": m, "mse": str(mse),
            "mse_std": "0.1", "repeats": repeats, "optimal": optimal,
            "correlation": correlation, "squared_bias": "1e-4" if z else "",
            "bias_max_z": z, "items_z3": "2" if z else ""}


def test_summaries_and_tables_per_correlation_without_a_sweep():
    rows = []
    for correlation, ours in (("none", 1.0), ("items:3", 5.0)):
        rows += [_row(name, 4.0, correlation, z="1.0") for name in BASELINES]
        rows += [_row("ours", ours, correlation, m="0.5", optimal="true", z="40.0"),
                 _row("ours-r3", 3.0, correlation, m="1.8", optimal="true", z="3.5")]
    summaries = summarize_rows(rows)
    assert [s.correlation for s in summaries] == ["none", "items:3"]
    assert summaries[1].best_m == 0.5 and summaries[1].optimizer_reduction == -0.25
    assert "| f [items:3] | 100 | 2 |" in summary_markdown(summaries)
    table = correlation_markdown(rows)
    assert "| f | 100 | 2 | items:3 | ours-r3 | 1.8 | 3.000e+00 | 5.00e-03 | 1.00e-04 | 3.5 | 2 |" \
        in table
    assert table.count("\n") == 2 + 2 * (len(BASELINES) + 2)
    pivot = correlation_pivot_markdown(rows)
    assert "| method | none | items:3 |" in pivot
    assert "| ours-r3 | 3.000e+00 +- 5.0e-03 (3.5; 2) | 3.000e+00 +- 5.0e-03 (3.5; 2) |" in pivot


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--correlation", "0.5"], "--correlation"),
        (["--correlation", "x"], "--correlation"),
        (["--guard", "1"], "--guard values must be above 1"),
        (["--guard", "1e9"], "--guard"),
        (["--largest-share", "0"], "--largest-share"),
        (["--correlated-items", "-1", "--correlation", "2"], "--correlated-items"),
        (["--correlated-items", "17", "--correlation", "2"], "correlated item 17"),
        (["--set-sizes", "8"], "msnbc-s1 has set sizes 4, not 8"),
    ],
)
def test_bad_correlation_options_are_one_line_and_exit_2(arguments, message, tmp_path, capsys):
    code = main(["reproduce", "--figure", "msnbc-s1", "--grid", "none", *arguments,
                 "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert math.isfinite(code)


@pytest.mark.slow
def test_a_correlated_run_shows_the_bias_the_guard_removes(tmp_path):
    """A small synthetic panel, strict users three times likelier (odds) among the holders
    of items 0-7: today's lambdas are biased (items with |z| > 3), the share-weighted
    SepMM is not, and the slot blanket tuned for R = 3 has a smaller squared bias; the
    plans come from the cache the second time."""
    import io

    from segshuffle.experiments.report import panel_rows
    from segshuffle.experiments.runner import run_figures
    from segshuffle.experiments.settings import Figure, Panel

    figure = Figure(name="tiny", dataset="synthetic", shares_name="S1", panels=(Panel(3000, 4),))
    correlation = Correlation("items", 3.0, tuple(range(8)))
    kwargs = dict(repeats=150, grid=(), seed=1, jobs=1, guards=(3.0,),
                  correlations=(Correlation(), correlation), plan_cache=tmp_path)
    log = io.StringIO()
    results = run_figures([figure], log=log, **kwargs)
    assert [r.correlation.label for r in results] == ["none", "items:3"]
    rows = {(r["correlation"], r["method"]): r for res in results for r in panel_rows(res)}
    assert ("none", "ours-r3") in rows and "bias_bound=" in rows["none", "ours-r3"]["detail"]
    assert int(rows["items:3", "ours"]["items_z3"]) >= 1
    assert float(rows["items:3", "share-sepmm-shuffle"]["bias_max_z"]) < 4.5
    assert float(rows["items:3", "ours-r3"]["squared_bias"]) < \
        float(rows["items:3", "ours"]["squared_bias"])
    again = run_figures([figure], log=log, **kwargs)
    assert "read from" in log.getvalue()
    assert again[1].errors == results[1].errors


def test_the_bias_bounds_of_published_parameters():
    from segshuffle.experiments.report import bias_bound_markdown

    row = {"figure": "msnbc-s1", "shares": "S1", "n": "5000", "s": "4", "method": "ours",
           "m": "0.581", "optimal": "true", "detail": "lambdas=0.5207/1/1; eps=0.5/1/1"}
    table = bias_bound_markdown([row, {**row, "method": "mm-shuffle"},
                                 {**row, "optimal": "false"}])
    assert table.count("\n") == 3
    assert "| msnbc-s1 | 5000 | 4 | ours | 0.581 | 0.5207/1/1 | 0.0175 | 0.082 | 0.0274 | 0.136 |" \
        in table

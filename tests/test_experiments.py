"""Experiment plumbing: settings, planning, determinism across workers, ours against its bound.

Planning a panel runs the user-level accountant many times (about 10 s for a
small panel), so the tests that plan are marked slow.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from segshuffle.core import accounting
from segshuffle.core.blanket import BlanketMode
from segshuffle.core.estimator import estimate_frequencies
from segshuffle.core.optimizer import optimize
from segshuffle.core.rules import MAX_MESSAGES_PER_USER
from segshuffle.core.simulate import simulate_counts
from segshuffle.datasets import synthetic_source
from segshuffle.experiments import compare
from segshuffle.experiments.balls_into_bins import calibrate_blanket, one_item_delta
from segshuffle.experiments.methods import (
    BASELINES,
    METHODS,
    OURS,
    OURS_INDEPENDENT,
    OURS_MODES,
    _plan_ours,
    assign_levels,
    paper_weight,
    plan_panel,
    run_repeat,
    stream,
)
from segshuffle.experiments.report import (
    panel_rows,
    summarize_rows,
    summary_markdown,
)
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


def test_methods_name_both_blanket_modes():
    assert (*BASELINES, OURS, OURS_INDEPENDENT) == METHODS
    assert OURS_MODES == {OURS: BlanketMode.SLOTS, OURS_INDEPENDENT: BlanketMode.INDEPENDENT}


@pytest.fixture(scope="module")
def small_plan():
    return plan_panel("test|synthetic|S1|n=3000|s=4", 3000, 4, 32, 32, SHARES["S1"],
                      (0.3, 1.0, 3.0, 20.0))


@pytest.mark.slow
def test_plan_uses_the_accountant(small_plan):
    plan = small_plan
    n, s, d = 3000, 4, 32
    assert plan.counts == (750, 1500, 750)
    assert plan.delta == pytest.approx(0.01 / 3000)
    assert [p.m for p in plan.ours[:-1]] == [0.3, 1.0, 3.0, 20.0]
    # The independent blanket is swept only up to m = d / 2.
    assert [p.m for p in plan.ours_independent[:-1]] == [0.3, 1.0, 3.0]
    for method, mode in OURS_MODES.items():
        points = plan.points(method)
        assert points[-1].optimal and not any(p.optimal for p in points[:-1])
        best = min(points, key=lambda p: p.mse_bound)
        assert best.optimal or best.mse_bound >= points[-1].mse_bound * (1 - 1e-9)
        for point in points:
            assert all(0.0 < lam <= 1.0 for lam in point.lambdas)
            assert list(point.lambdas) == sorted(point.lambdas)  # liberal levels send more
            expected = s + (d if mode is BlanketMode.INDEPENDENT else math.ceil(point.m))
            assert point.ciphertexts == expected
            # Every level's guarantee, re-checked by the user-level accountant on the
            # full view; the achieved epsilons never exceed the levels.
            for level, lam, achieved in zip(plan.levels, point.lambdas, point.epsilons,
                                            strict=True):
                assert achieved is not None and achieved <= level * (1 + 1e-9)
                assert accounting.user_level_holds(level, lam, s, plan.delta, n, point.m, d,
                                                   mode=mode)
                if lam < 1.0:  # on its constraint: a 1% larger rate breaks the level
                    assert not accounting.user_level_holds(level, min(1.0, 1.01 * lam), s,
                                                           plan.delta, n, point.m, d, mode=mode)
    assert sum(plan.sepmm_weights) == pytest.approx(1.0)
    assert plan.local.epsilon == 2.0 and plan.shuffled.epsilon > 0.5
    # Balls-into-bins at the user level: every calibrated blanket re-checked.
    for choice, users, level in ((plan.mm, n, 0.5),
                                 *zip(plan.sepmm, plan.counts, plan.levels, strict=True)):
        config = choice.config
        if config.variant == "all-items":
            assert accounting.user_level_holds(level, 1.0, s, plan.delta, users, config.m, d)
        else:
            assert one_item_delta(users, d, s, config.m, level) <= plan.delta


@pytest.mark.slow
def test_run_repeat_is_deterministic(small_plan):
    source = synthetic_source(32)
    first = run_repeat(small_plan, source, 11, 0)
    assert set(first) == set(METHODS)
    assert len(first[OURS]) == len(small_plan.ours)
    assert len(first[OURS_INDEPENDENT]) == len(small_plan.ours_independent)
    assert first == run_repeat(small_plan, source, 11, 0)
    assert first != run_repeat(small_plan, source, 11, 1)
    assert all(v >= 0.0 for values in first.values() for v in values)
    # The two modes draw from their own streams: equal parameters, different noise.
    assert first[OURS][:3] != first[OURS_INDEPENDENT][:3]


@pytest.mark.slow
def test_results_do_not_depend_on_workers():
    figure = Figure(name="tiny", dataset="synthetic", shares_name="S3",
                    panels=(Panel(1500, 4),))
    kwargs = dict(repeats=7, grid=(0.5, 2.0), seed=5, log=io.StringIO())
    serial = run_figures([figure], jobs=1, **kwargs)
    parallel = run_figures([figure], jobs=2, **kwargs)
    assert serial[0].errors == parallel[0].errors
    rows = panel_rows(parallel[0])
    assert [r["method"] for r in rows] == [*BASELINES, *[OURS] * 3, *[OURS_INDEPENDENT] * 3]
    assert all(r["m"] == "" for r in rows if r["method"] in BASELINES)
    assert all(r["repeats"] == "7" for r in rows)
    for r in rows:
        if r["method"] in OURS_MODES:
            assert "eps=" in r["detail"] and "ciphertexts=" in r["detail"]
    assert {r["detail"].split("ciphertexts=")[1] for r in rows
            if r["method"] == OURS_INDEPENDENT} == {"132"}  # s + d = 4 + 128
    summary = summarize_rows(rows)
    assert len(summary) == 1 and summary[0].n == 1500
    assert summary[0].best_m in (0.5, 2.0)
    assert summary[0].independent_mse == float(rows[-1]["mse"])
    assert "| tiny | 1500 | 4 |" in summary_markdown(summary)


def _row(method: str, mse: float, m: str = "", optimal: str = "") -> dict[str, str]:
    return {"figure": "f", "n": "100", "s": "2", "method": method, "m": m, "mse": str(mse),
            "optimal": optimal}


def test_no_independent_variant_beyond_the_message_cap():
    # s + d above the cap on ciphertexts per user: the variant is not planned at all.
    d = MAX_MESSAGES_PER_USER - 3
    assert _plan_ours((10, 10), (0.5, 1.0), d, 4, 1e-3, (1.0,), BlanketMode.INDEPENDENT) == ()


def test_summary_of_rows_with_and_without_the_independent_mode():
    rows = [_row("mm-shuffle", 4.0), _row("subexp-local", 9.0),
            _row(OURS, 3.0, "0.5", "false"), _row(OURS, 1.0, "1", "false"),
            _row(OURS, 2.0, "1.2", "true")]
    old = summarize_rows(rows)[0]
    assert (old.best_m, old.best_mse, old.optimizer_m, old.best_baseline) == (
        1.0, 1.0, 1.2, "mm-shuffle")
    assert old.reduction == pytest.approx(0.75) and old.optimizer_reduction == 0.5
    assert math.isnan(old.independent_mse) and math.isnan(old.independent_m)
    rows += [_row(OURS_INDEPENDENT, 0.5, "1", "false"), _row(OURS_INDEPENDENT, 0.8, "0.7", "true")]
    new = summarize_rows(rows)[0]
    assert (new.independent_m, new.independent_mse, new.independent_best_mse) == (0.7, 0.8, 0.5)
    assert new.independent_reduction == pytest.approx(0.8)
    # Baselines are never mistaken for the segmented variants, nor the reverse.
    assert new.best_baseline == "mm-shuffle" and new.best_mse == 1.0
    table = summary_markdown([new])
    assert "| 0.7 | 8.000e-01 |" in table and "| 80% |" in table
    assert summary_markdown([old]).rstrip().endswith("| 50% | - |")


@pytest.mark.parametrize("mode", list(BlanketMode))
@pytest.mark.parametrize(("m", "shares"), [(0.5, (0.25, 0.5, 0.25)), (2.0, (0.5, 0.25, 0.25)),
                                           (6.0, (0.25, 0.25, 0.5))])
def test_ours_stays_within_its_mse_bound(m, shares, mode):
    """The measured MSE of the segmented protocol never exceeds the paper's bound.

    The bound is on the error against the item distribution, so every repeat
    draws fresh users from it; the mean over repeats must stay below the bound
    up to three standard errors.
    """
    n, d, s = 4000, 24, 3
    counts = level_counts(n, shares)
    params = optimize(counts, (0.5, 1.0, 2.0), d, s, 0.01 / n, blanket=m, lower_bounds=False,
                      blanket_mode=mode)
    rng = np.random.default_rng(99)
    source = synthetic_source(d)
    truth = np.full(d, s / d)  # the distribution the synthetic users are drawn from
    errors = []
    for _ in range(150):
        population = source.draw(n, s, rng)
        levels = assign_levels(tuple(counts), rng)
        holders = population.level_holders(levels, 3)
        observed = simulate_counts(holders, params.lambdas, m, rng, users=n, mode=mode)
        estimate = estimate_frequencies(observed, counts, params.lambdas, m, mode=mode)
        errors.append(float(np.sum((estimate.values - truth) ** 2)))
    mean = float(np.mean(errors))
    se = float(np.std(errors, ddof=1)) / math.sqrt(len(errors))
    assert mean <= params.mse_bound + 3 * se
    assert mean >= 0.3 * params.mse_bound  # the bound is not vacuous either


def _ours_row(m: float, lambdas: tuple[float, ...], *, n: int = 1000, s: int = 2, d: int = 21,
              detail_extra: str = "") -> dict[str, str]:
    detail = "lambdas=" + "/".join(repr(lam) for lam in lambdas) + detail_extra
    return {"figure": "f", "dataset": "synthetic", "shares": "S1", "method": OURS,
            "n": str(n), "s": str(s), "domain_size": str(d), "m": repr(m), "mse": "1e-3",
            "optimal": "true", "detail": detail}


def test_detail_fields_of_old_and_new_rows():
    assert compare.parse_detail("lambdas=0.5336/1/1") == {"lambdas": "0.5336/1/1"}
    assert compare.parse_detail("lambdas=0.2/1/1; eps=0.5/0.9/0.9; ciphertexts=7") == {
        "lambdas": "0.2/1/1", "eps": "0.5/0.9/0.9", "ciphertexts": "7"}
    assert compare.ours_parameters(_ours_row(2.5, (0.25, 1.0))) == (2.5, (0.25, 1.0))
    assert compare.baseline_parameters("all-items m=8.288") == ("all-items", 8.288)


def test_audit_of_old_parameters_finds_an_overstated_level():
    """A rate above the sound lambda_k certifies less than the level it claimed, and one
    at lambda_k certifies the level (to the searches' precision)."""
    n, s, d, m = 1000, 2, 21, 1.0
    delta = 0.01 / n
    sound = accounting.max_lambda(0.5, s, delta, n, m, d)
    assert 0.0 < sound < 0.5
    at, above = compare.audited_epsilons(_ours_row(m, (sound, 1.5 * sound)))
    assert at == pytest.approx(0.5, rel=1e-6)
    assert above is not None and above > 0.52


def test_audit_of_the_mm_baseline():
    n, d, s, eps = 1000, 21, 2, 0.5
    delta = 0.01 / n
    for variant in ("one-item", "all-items"):
        m = calibrate_blanket(n, d, s, eps, delta, variant)
        row = {"n": str(n), "s": str(s), "domain_size": str(d), "detail": f"{variant} m={m!r}"}
        assert compare.audited_bib_epsilon(row) == pytest.approx(eps, rel=1e-4)
        row["detail"] = f"{variant} m={2 * m!r}"  # more blanket, a stronger guarantee
        assert compare.audited_bib_epsilon(row) < 0.9 * eps

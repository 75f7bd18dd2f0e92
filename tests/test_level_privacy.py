"""Round 2's level accountant (segshuffle.core.level_privacy) against exact enumeration.

The server's full view (tests/full_view.py) of one user whose items stay the same while
its level, and so its lambda, changes: the bound is never below the exact divergence,
the exhibited lower bound never above it, and both are the exact value where the view
is one-dimensional (one item in the slot blanket, any s in the independent one).
"""

from __future__ import annotations

import itertools

import pytest

from segshuffle.core.level_privacy import (
    LevelSetting,
    level_delta,
    level_delta_lower,
    level_epsilon,
    level_report,
)

from .full_view import add_victim, independent_blanket, slot_blanket, symmetric_delta

RATES = [(0.3, 1.0), (0.1, 0.5), (0.0, 0.8), (0.9, 0.6)]
LEVELS = [0.0, 0.5, 1.5]


def exact_level_delta(level: float, lam: float, other: float, setting: LevelSetting) -> float:
    """max(D(P || Q), D(Q || P)) of the full view, the victim's items the first s ids."""
    s = setting.set_size
    if setting.mode.value == "slots":
        blanket = slot_blanket(setting.users, float(setting.m), setting.domain_size, s)
    else:
        blanket = independent_blanket(setting.users, float(setting.m), setting.domain_size, s)
    items = list(range(s))
    return symmetric_delta(add_victim(blanket, items, items, lam),
                           add_victim(blanket, items, items, other), level)


def _check(setting: LevelSetting, exact_where_one_dimensional: bool) -> None:
    for (lam, other), level in itertools.product(RATES, LEVELS):
        exact = exact_level_delta(level, lam, other, setting)
        upper = level_delta(level, lam, other, setting, delta=1e-3)
        lower = level_delta_lower(level, lam, other, setting)
        where = (setting, lam, other, level)
        assert upper >= exact * (1.0 - 1e-12), (where, upper, exact)
        assert lower <= exact * (1.0 + 1e-9) + 1e-15, (where, lower, exact)
        if exact_where_one_dimensional:
            assert upper == pytest.approx(exact, rel=2e-4, abs=1e-9), where
            # the lower bound's losses are rounded down to a 1e-4 grid
            assert lower == pytest.approx(exact, rel=2e-3, abs=1e-9), where


@pytest.mark.parametrize("setting", [
    LevelSetting(6, 1, 6, 0.5), LevelSetting(5, 1, 4, 1.5), LevelSetting(7, 1, 5, 2.0),
], ids=str)
def test_one_item_slot_blanket_is_the_exact_view(setting: LevelSetting) -> None:
    _check(setting, exact_where_one_dimensional=True)


@pytest.mark.parametrize("setting", [
    LevelSetting(6, 2, 6, 0.5, "independent"), LevelSetting(5, 3, 4, 1.0, "independent"),
], ids=str)
def test_independent_blanket_is_the_exact_view(setting: LevelSetting) -> None:
    _check(setting, exact_where_one_dimensional=True)


@pytest.mark.parametrize("setting", [
    LevelSetting(6, 2, 6, 0.5), LevelSetting(5, 2, 6, 1.0), LevelSetting(4, 2, 5, 1.5),
    LevelSetting(5, 3, 4, 0.7),
], ids=str)
def test_several_items_slot_blanket_is_never_below_the_exact_view(setting: LevelSetting
                                                                  ) -> None:
    _check(setting, exact_where_one_dimensional=False)


@pytest.mark.slow
@pytest.mark.parametrize(("users", "set_size", "domain", "m"), [
    (users, s, d, m) for users in (3, 8) for s, d in ((1, 3), (2, 4), (2, 7), (3, 6))
    for m in (0.3, 1.0, 1.6)])
def test_the_level_bound_is_never_below_the_exact_view_on_a_grid(users: int, set_size: int,
                                                                 domain: int, m: float
                                                                 ) -> None:
    """A wider grid, both modes (slow: a few hundred exact enumerations)."""
    for mode in ("slots", "independent"):
        setting = LevelSetting(users, set_size, domain, m, mode)
        _check(setting, exact_where_one_dimensional=mode == "independent" or set_size == 1)


def test_every_slot_sending_reveals_how_many_items_were_sent() -> None:
    """m = 1: the non-null total tells 0.3 from 1 (two items) with delta 0.91 at every E."""
    setting = LevelSetting(1000, 2, 20, 1.0)
    for level in (0.5, 5.0, 20.0):
        assert level_delta_lower(level, 0.3, 1.0, setting) == pytest.approx(0.91, abs=1e-9)
        assert level_delta(level, 0.3, 1.0, setting, delta=1e-5) >= 0.91
    assert level_epsilon(0.3, 1.0, setting, 1e-5) is None
    assert level_epsilon(0.3, 1.0, setting, 1e-5, lower=True) is None


def test_a_non_integer_blanket_bounds_the_level_and_the_lower_bound_is_close() -> None:
    """The README's optimize example (4500 honest users, d + s = 21, s = 4, m = 0.524):
    level 0.5's lambda 0.522 against the others' 1."""
    setting = LevelSetting(4500, 4, 21, 0.523742)
    upper = level_epsilon(0.521689, 1.0, setting, 2e-6)
    lower = level_epsilon(0.521689, 1.0, setting, 2e-6, lower=True)
    assert upper is not None and lower is not None
    assert lower <= upper <= 1.1 * lower
    assert 0.3 < upper < 0.6


def test_levels_with_the_same_rate_are_not_told_apart() -> None:
    setting = LevelSetting(500, 2, 10, 0.6)
    assert level_delta(0.0, 0.7, 0.7, setting) == 0.0
    report = level_report([0.5, 1.0, 2.0], [0.4, 1.0, 1.0], setting, 1e-5,
                          level_privacy=1.0, lower=False)
    assert len(report.pairs) == 1 and report.complete
    (pair,) = report.pairs
    assert pair.levels == (0.5, 1.0) and pair.lambdas == (0.4, 1.0)
    assert pair.epsilon_upper is not None
    assert pair.epsilon_both_rounds == pytest.approx(pair.epsilon_upper + 1.0)
    assert report.worst_per_level([0.4, 1.0, 1.0]) == [pair.epsilon_upper] * 3
    same = level_report([0.5, 1.0], [1.0, 1.0], setting, 1e-5)
    assert same.pairs == () and same.worst_per_level([1.0, 1.0]) == [0.0, 0.0]


def test_without_level_privacy_no_both_rounds_figure() -> None:
    setting = LevelSetting(500, 1, 10, 0.6)
    (pair,) = level_report([0.5, 1.0], [0.4, 1.0], setting, 1e-5, lower=False).pairs
    assert pair.epsilon_upper is not None and pair.epsilon_both_rounds is None


def test_the_results_report_the_level_pairs_at_the_published_parameters() -> None:
    """decode's privacy report carries round 2's level guarantee (the vectors' campaign)."""
    import json
    from pathlib import Path

    from segshuffle.services.server.aggregation import level_pairs
    from segshuffle.wire.models import CampaignConfig, PublishedParameters, Results

    vectors = json.loads((Path(__file__).resolve().parents[1] / "docs" /
                          "test-vectors.json").read_text(encoding="utf-8"))
    document = vectors["parameters"][0]
    config = CampaignConfig.model_validate(document["config"])
    parameters = PublishedParameters.model_validate(document["parameters"])
    report = level_pairs(config, parameters)
    rates = sorted(set(parameters.lambdas))
    assert len(report["pairs"]) == len(rates) * (len(rates) - 1) // 2 and report["complete"]
    setting = LevelSetting(parameters.honest_users, parameters.set_size,
                           parameters.privacy_domain_size, parameters.m)
    for pair in report["pairs"]:
        a, b = pair["lambdas"]
        assert pair["epsilon_upper"] == level_epsilon(a, b, setting, parameters.delta)
        assert pair["epsilon_lower"] <= pair["epsilon_upper"]
        assert pair["epsilon_both_rounds"] is None  # exact level counts in round 1
    from segshuffle.cli.admin_results import to_table

    results = Results.model_validate({
        "campaign_id": config.id, "phase": "done", "items": [], "padding": [],
        "parameters_hash": document["parameters_hash"],
        "round2_messages": 0, "null_messages": 0, "dropped_messages": 0,
        "privacy": {"delta": parameters.delta, "m": parameters.m, "lambdas": parameters.lambdas,
                    "users": parameters.users, "accounting_users": parameters.accounting_users,
                    "round2_users": 0, "levels": [], "insecure": False,
                    "level_pairs": report["pairs"]}})
    table = to_table(results)
    assert "level privacy, round 2" in table and "round 1 sends the level itself" in table


@pytest.mark.slow
def test_optimize_prints_round_2s_level_guarantee(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from segshuffle.cli.main import main

    argv = ["optimize", "--users", "300", "--domain-size", "9", "--set-size", "1",
            "--levels", "0.5,4", "--shares", "0.5,0.5", "--delta", "1e-4", "--no-compare"]
    assert main([*argv, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    pairs = payload["level_privacy"]["pairs"]
    lambdas = payload["lambdas"]
    if lambdas[0] == lambdas[1]:
        assert pairs == []
    else:
        (pair,) = pairs
        assert pair["lambdas"] == sorted(lambdas)
        setting = LevelSetting(payload["honest_users"], 1, 9, payload["m"])
        assert pair["epsilon_upper"] == level_epsilon(*sorted(lambdas), setting, 1e-4)
    assert main(argv) == 0
    assert "level privacy       round" in capsys.readouterr().out


@pytest.mark.parametrize("lower", [False, True])
def test_the_level_epsilon_search_runs_on_the_log_of_delta(lower, monkeypatch) -> None:
    """delta_level(E) falls over decades between 0 and the cap: Brent's method on
    delta_level - delta took 20 evaluations for the upper bound's crossing (to 1e-6) and
    18 for the lower bound's (to 1e-4) at n = 9000, d = 128, s = 8, m = 1.64 between the
    optimizer's rates 0.26 and 0.50; on its logarithm 15 and 10."""
    from segshuffle.core import level_privacy

    calls: list[float] = []
    name = "level_delta_lower" if lower else "level_delta"
    original = getattr(level_privacy, name)

    def counted(eps, *args, **kwargs):
        calls.append(eps)
        return original(eps, *args, **kwargs)

    monkeypatch.setattr(level_privacy, name, counted)
    setting = LevelSetting(9000, 8, 128, 1.6401425081165253)
    epsilon = level_epsilon(0.26037553134775276, 0.5039649114704509, setting, 1e-8,
                            lower=lower)
    assert epsilon == pytest.approx(0.3567 if lower else 0.37608, rel=1e-3)
    assert len(calls) <= (11 if lower else 16), len(calls)

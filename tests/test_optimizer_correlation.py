"""The optimizer guarding against levels that go with items (docs/protocol.md section 5.1).

R = 1 is the variance objective itself; R > 1 adds the worst squared bias of one item and
lets the lambdas move toward each other, every published rate still certified.  A small
campaign (n = 1000, privacy domain 10, s = 2) keeps each optimisation to about a second.
"""

from __future__ import annotations

import pytest

from segshuffle.core import accounting
from segshuffle.core.correlation import CorrelationGuard
from segshuffle.core.optimizer import optimize

LEVELS = [0.5, 1.0, 2.0]
D, S, DELTA = 10, 2, 1e-5


@pytest.fixture(scope="module")
def by_ratio():
    counts = [250, 500, 250]
    return {ratio: optimize(counts, LEVELS, D, S, DELTA, lower_bounds=False,
                            correlation_ratio=ratio)
            for ratio in (1.0, 3.0)}


def test_ratio_one_is_the_variance_objective(by_ratio):
    default = optimize([250, 500, 250], LEVELS, D, S, DELTA, lower_bounds=False)
    one = by_ratio[1.0]
    assert (one.m, one.lambdas, one.epsilons) == (default.m, default.lambdas, default.epsilons)
    assert one.bias_bound == 0.0 and one.objective_value == one.variance
    assert one.correlation_ratio == 1.0


def test_a_larger_ratio_trades_variance_for_a_smaller_bias(by_ratio):
    default, guarded = by_ratio[1.0], by_ratio[3.0]
    at_three = CorrelationGuard(3.0)
    exposed = at_three.bias_bound(default.level_counts, default.lambdas)
    assert guarded.bias_bound < 0.8 * exposed  # the default's lambdas at R = 3
    assert guarded.variance > default.variance
    # The guarded choice minimises the worst case at R = 3: better than the default there.
    assert guarded.objective_value < default.variance + exposed**2
    spread = [max(r.lambdas) - min(r.lambdas) for r in (default, guarded)]
    assert spread[1] < spread[0]  # the lambdas move toward each other
    assert guarded.relative_bias_bound > 0.0 and guarded.to_dict()["correlation_ratio"] == 3.0


def test_every_guarded_rate_meets_its_published_epsilon(by_ratio):
    for result in by_ratio.values():
        for level, lam, achieved in zip(LEVELS, result.lambdas, result.epsilons, strict=True):
            assert achieved is not None and achieved <= level * (1 + 1e-9)
            assert accounting.user_level_holds(achieved, lam, S, DELTA, result.honest_users,
                                               result.m, D)


def test_capped_levels_share_a_tighter_epsilon():
    """At a fixed m the guard lowers the middle and top levels to one cap: both then send
    less than their levels allow and publish the smaller epsilon that cap meets."""
    counts = [500, 250, 250]
    free = optimize(counts, LEVELS, D, S, DELTA, blanket=0.5, lower_bounds=False)
    capped = optimize(counts, LEVELS, D, S, DELTA, blanket=0.5, lower_bounds=False,
                      correlation_ratio=3.0)
    assert capped.lambdas[0] == free.lambdas[0]
    assert capped.lambdas[1] == capped.lambdas[2] < free.lambdas[1]
    assert capped.epsilons[1] == capped.epsilons[2] < 1.0
    for level, lam, achieved in zip(LEVELS, capped.lambdas, capped.epsilons, strict=True):
        assert achieved <= level
        assert accounting.user_level_holds(achieved, lam, S, DELTA, capped.honest_users, 0.5, D)


def test_the_ratio_needs_the_variance_objective_and_a_valid_value():
    with pytest.raises(ValueError, match="variance objective"):
        optimize([250, 500, 250], LEVELS, D, S, DELTA, objective="paper-bound",
                 correlation_ratio=2.0)
    for bad in (0.5, float("nan"), 5000.0):
        with pytest.raises(ValueError, match="correlation ratio"):
            optimize([250, 500, 250], LEVELS, D, S, DELTA, correlation_ratio=bad)
    with pytest.raises(ValueError, match="largest share"):
        optimize([250, 500, 250], LEVELS, D, S, DELTA, correlation_ratio=2.0,
                 largest_share=0.0)


def test_the_command_line_refuses_a_bad_ratio(capsys):
    from segshuffle.cli.main import main

    base = ["optimize", "--users", "1000", "--domain-size", "10", "--set-size", "2",
            "--levels", "0.5,1,2", "--shares", "0.25,0.5,0.25", "--delta", "1e-5"]
    for extra, message in ((["--correlation-ratio", "0.5"], "correlation ratio"),
                           (["--correlation-ratio", "2", "--largest-share", "2"],
                            "largest share"),
                           (["--correlation-ratio", "2", "--objective", "paper-bound"],
                            "variance objective")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err

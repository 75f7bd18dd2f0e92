"""User-level accounting on the server's full view: bounds, searches, monotonicity."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize

from segshuffle.core.accounting import (
    audit,
    blanket_geometry,
    full_signal_blanket,
    item_pair,
    max_lambda,
    user_delta,
    user_delta_lower,
    user_epsilon,
    user_level_holds,
)
from segshuffle.core.hockey_stick import delta_for, epsilon_for, poisson_pair


def test_blanket_geometry_follows_the_paper() -> None:
    # N = n ceil(m) - 1 slots, r = gamma / d with gamma = m / ceil(m).
    assert blanket_geometry(100, 2.5, 10) == (299, pytest.approx(2.5 / 3 / 10))
    assert blanket_geometry(100, 2.5, 10, every_slot=True)[0] == 300
    assert blanket_geometry(100, 0.0, 10) == (0, 0.0)


def _exact_single_item_epsilon(users: int, d: int, m: int, lam: float, delta: float) -> float:
    """s = 1, integer m: the full view's delta is lam * delta_pair(lambda = 1) with every slot.

    With every slot sending, the non-null total tells the server whether the
    victim sent; given that it did, the view is the two-bin pair with lambda = 1
    over all users * m slots.
    """
    pair = poisson_pair(1.0, users * m, 1.0 / d)
    return optimize.brentq(lambda e: lam * delta_for(pair, e) - delta, 0.0, 30.0, xtol=1e-12)


@pytest.mark.parametrize(("users", "d", "m", "lam", "delta", "exact_hint"), [
    (2000, 32, 2, 0.5, 1e-6, 0.502),
    (5000, 21, 1, 0.3, 2e-6, 0.323),
    (300, 17, 3, 0.9, 1e-6, None),
    (10_000, 64, 1, 0.1, 1e-7, None),
])
def test_single_item_upper_bound_is_sound_and_tight(users: int, d: int, m: int, lam: float,
                                                    delta: float,
                                                    exact_hint: float | None) -> None:
    exact = _exact_single_item_epsilon(users, d, m, lam, delta)
    if exact_hint is not None:
        assert exact == pytest.approx(exact_hint, abs=1e-3)
    result = audit(users, d, 1, float(m), lam, delta)
    assert result.epsilon_upper is not None
    assert exact <= result.epsilon_upper <= 1.1 * exact
    # The exhibited lower bound is this exact value (up to the search precision).
    assert result.epsilon_lower == pytest.approx(exact, rel=1e-6)


@pytest.mark.parametrize(("users", "d", "m", "lam", "delta"), [
    (2000, 32, 2, 0.5, 1e-6),
    (5000, 21, 1, 0.3, 2e-6),
])
def test_the_old_two_bin_pair_understates_epsilon(users: int, d: int, m: int, lam: float,
                                                   delta: float) -> None:
    # Regression: the paper's pair at lambda looks at two bins only; the published
    # epsilon was that pair's, far below what the full view needs.
    old = epsilon_for(item_pair(lam, users, float(m), d), delta)
    exact = _exact_single_item_epsilon(users, d, m, lam, delta)
    assert old is not None and old < 0.8 * exact


def test_max_lambda_is_feasible_and_maximal() -> None:
    for mode in ("slots", "independent"):
        lam = max_lambda(1.0, 4, 1e-6, 5000, 0.4, 17, mode=mode)
        assert 0.0 < lam < 1.0
        assert user_level_holds(1.0, lam, 4, 1e-6, 5000, 0.4, 17, mode=mode)
        assert not user_level_holds(1.0, min(1.0, lam + 1e-6), 4, 1e-6, 5000, 0.4, 17,
                                    mode=mode)


def test_max_lambda_saturates_with_a_large_blanket() -> None:
    assert max_lambda(2.0, 1, 1e-6, 50_000, 5.0, 17) == 1.0


def test_achieved_epsilon_matches_the_requested_level() -> None:
    lam = max_lambda(1.0, 4, 1e-6, 5000, 0.4, 17)
    assert user_epsilon(lam, 4, 1e-6, 5000, 0.4, 17) == pytest.approx(1.0, rel=1e-5)


def test_no_blanket_full_rate_is_not_achievable() -> None:
    result = audit(5000, 17, 4, 0.0, 1.0, 1e-6)
    assert result.epsilon_upper is None
    assert result.epsilon_lower is None
    # Without a blanket a message at rate lambda is seen with probability lambda.
    assert user_delta(1.0, 0.3, 1, 5000, 0.0, 17) == pytest.approx(0.3)
    assert user_delta(1.0, 0.3, 2, 5000, 0.0, 17) == pytest.approx(1 - 0.7**2)


@pytest.mark.parametrize("mode", ["slots", "independent"])
def test_full_signal_blanket_is_the_smallest_feasible_m(mode: str) -> None:
    m_k = full_signal_blanket(1.0, 4, 1e-6, 5000, 17, mode=mode)
    assert user_level_holds(1.0, 1.0, 4, 1e-6, 5000, m_k, 17, mode=mode)
    assert not user_level_holds(1.0, 1.0, 4, 1e-6, 5000, m_k * (1 - 1e-6), 17, mode=mode)
    assert max_lambda(1.0, 4, 1e-6, 5000, m_k * 0.9, 17, mode=mode) < 1.0


def test_independent_mode_is_exact_up_to_the_grid() -> None:
    # The independent blanket's upper and lower bounds are the same composition,
    # discretised pessimistically and optimistically (lower: one more user's blanket).
    for lam, level in ((0.5, 0.5), (1.0, 1.0), (0.2, 2.0)):
        upper = user_delta(level, lam, 3, 4000, 0.8, 20, mode="independent")
        lower = user_delta_lower(level, lam, 3, 4000, 0.8, 20, mode="independent")
        assert lower <= upper <= 1.3 * lower + 1e-12


def test_the_mode_is_validated() -> None:
    with pytest.raises(ValueError, match="blanket mode"):
        user_delta(1.0, 0.5, 1, 100, 1.0, 10, mode="bogus")
    with pytest.raises(ValueError, match="at most the privacy domain size"):
        user_delta(1.0, 0.5, 1, 100, 11.0, 10, mode="independent")


# Derandomized: the same examples every run, so that the known gap below (pinned by its own
# test) cannot turn a run red by chance.
@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    users=st.integers(2, 5000),
    domain=st.integers(2, 64),
    set_size=st.integers(1, 4),
    m=st.floats(0.05, 4.0),
    lam=st.floats(0.05, 0.95),
    level=st.floats(0.05, 4.0),
    mode=st.sampled_from(["slots", "independent"]),
)
def test_the_bound_is_monotone(users: int, domain: int, set_size: int, m: float, lam: float,
                               level: float, mode: str) -> None:
    set_size = min(set_size, domain)
    m = min(m, float(domain))
    # Up to the FFT rounding allowance an upper bound carries (absolute, below 1e-11).
    allowance = 1e-11
    base = user_delta(level, lam, set_size, users, m, domain, mode=mode)
    # More signal: weaker; more users or a larger epsilon: stronger.
    assert user_delta(level, min(1.0, lam + 0.05), set_size, users, m, domain,
                      mode=mode) >= base * (1 - 1e-9) - allowance
    assert user_delta(level, lam, set_size, 2 * users, m, domain, mode=mode) <= base * (
        1 + 1e-9) + allowance
    assert user_delta(level * 1.2, lam, set_size, users, m, domain, mode=mode) <= base * (
        1 + 1e-9) + allowance


@pytest.mark.xfail(strict=True, reason=(
    "known gap: past the exact joint view's enumeration limit the slot bound falls back to "
    "the looser revealed-send bound, so more users can raise it"))
def test_more_users_never_raise_the_slot_bound_past_the_joint_views_limit() -> None:
    """The exact joint view covers s = 3, d = 6, m = 4 up to 5 users (19 slots); at 6 users
    the accountant falls back to the revealed-send bound, 5x higher (0.39 against 0.08).

    Sound either way (both are upper bounds), but not monotone: the view with more slots
    is the view with fewer plus independent blanket slots, a post-processing, so the
    bound of the largest enumerable slot count would also hold.  That fix has to reach the
    three accountants (numpy, portable, JavaScript) together; this test then passes and its
    xfail mark must go."""
    fewer = user_delta(1.0, 0.5, 3, 5, 4.0, 6, mode="slots")
    more = user_delta(1.0, 0.5, 3, 6, 4.0, 6, mode="slots")
    assert more <= fewer * (1 + 1e-9) + 1e-11


@settings(max_examples=20, deadline=None)
@given(
    users=st.integers(2, 20_000),
    domain=st.integers(2, 200),
    set_size=st.integers(1, 6),
    m=st.floats(0.05, 6.0),
    lam=st.floats(0.05, 1.0),
    delta_exp=st.floats(-9.0, -3.0),
    mode=st.sampled_from(["slots", "independent"]),
)
@pytest.mark.slow  # 2-4 s on a 2-core machine: the fast tier stays within 3 minutes
def test_lower_bound_never_exceeds_upper_bound(users: int, domain: int, set_size: int,
                                               m: float, lam: float, delta_exp: float,
                                               mode: str) -> None:
    set_size = min(set_size, domain)
    m = min(m, float(domain))
    result = audit(users, domain, set_size, m, lam, 10**delta_exp, mode=mode)
    if result.epsilon_upper is None:
        return
    assert result.epsilon_lower is not None
    assert result.epsilon_lower <= result.epsilon_upper * (1 + 1e-7)


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="delta"):
        max_lambda(1.0, 2, 1.5, 100, 1.0, 10)
    with pytest.raises(ValueError, match="set size"):
        user_epsilon(0.5, 11, 1e-6, 100, 1.0, 10)
    with pytest.raises(ValueError, match="blanket rate m"):
        audit(100, 10, 2, -1.0, 0.5, 1e-6)
    with pytest.raises(ValueError, match="privacy level"):
        max_lambda(0.0, 2, 1e-6, 100, 1.0, 10)
    assert math.isfinite(user_delta(0.5, 0.5, 2, 100, 1.0, 10))


@pytest.mark.parametrize("delta", [0.0, -1e-9, 1.0, float("nan")])
def test_user_delta_refuses_a_target_delta_outside_the_unit_interval(delta: float) -> None:
    # A negative target once made the Poisson comparison's verification loop run for ever.
    with pytest.raises(ValueError, match="delta"):
        user_delta(1.0, 0.5, 2, 1000, 1.5, 16, delta=delta)


@pytest.mark.parametrize("level", ["1", True, None])
def test_user_delta_refuses_a_level_that_is_not_a_number(level: object) -> None:
    # "1" used to end in a TypeError deep in the bound, True to be taken as E = 1; the
    # portable accountant refuses both, and the two must answer alike.
    with pytest.raises(ValueError, match="privacy level"):
        user_delta(level, 0.5, 2, 1000, 1.0, 20, delta=1e-6)  # type: ignore[arg-type]

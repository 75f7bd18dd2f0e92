"""User-level accounting: lambda search, epsilon search, bounds, full-signal blanket."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segshuffle.core.accounting import (
    audit,
    blanket_geometry,
    full_signal_blanket,
    item_delta_target,
    item_pair,
    max_lambda,
    user_epsilon,
    user_level_holds,
)
from segshuffle.core.hockey_stick import delta_for, epsilon_for


def test_blanket_geometry_follows_the_paper() -> None:
    # N = n ceil(m) - 1 slots, r = gamma / d with gamma = m / ceil(m).
    assert blanket_geometry(100, 2.5, 10) == (299, pytest.approx(2.5 / 3 / 10))
    assert blanket_geometry(100, 2.5, 10, lower=True)[0] == 300
    assert blanket_geometry(100, 0.0, 10) == (0, 0.0)


def test_single_item_user_level_is_item_level() -> None:
    # s = 1: the user-level condition is exactly (E, delta) on the item pair.
    pair = item_pair(0.8, 2000, 1.5, 17)
    eps_item = epsilon_for(pair, 1e-6)
    assert user_epsilon(0.8, 1, 1e-6, 2000, 1.5, 17) == pytest.approx(eps_item, rel=1e-7)
    assert item_delta_target(0.7, 1, 1e-6) == 1e-6


def test_group_privacy_target() -> None:
    # delta / (s e^{(s-1) E / s}) (SPEC section 3), looser paper form is delta / (s e^E).
    assert item_delta_target(2.0, 4, 1e-6) == pytest.approx(1e-6 / (4 * math.exp(1.5)))
    assert item_delta_target(2.0, 4, 1e-6) > 1e-6 / (4 * math.exp(2.0))


def test_max_lambda_is_feasible_and_maximal() -> None:
    lam = max_lambda(1.0, 4, 1e-6, 5000, 1.0, 17)
    assert 0.0 < lam < 1.0
    assert user_level_holds(1.0, lam, 4, 1e-6, 5000, 1.0, 17)
    assert not user_level_holds(1.0, min(1.0, lam + 1e-8), 4, 1e-6, 5000, 1.0, 17)


def test_max_lambda_saturates_with_a_large_blanket() -> None:
    assert max_lambda(2.0, 1, 1e-6, 50_000, 5.0, 17) == 1.0


def test_achieved_epsilon_matches_the_requested_level() -> None:
    lam = max_lambda(1.0, 4, 1e-6, 5000, 1.0, 17)
    achieved = user_epsilon(lam, 4, 1e-6, 5000, 1.0, 17)
    assert achieved == pytest.approx(1.0, rel=1e-5)


def test_no_blanket_full_rate_is_not_achievable() -> None:
    result = audit(5000, 17, 4, 0.0, 1.0, 1e-6)
    assert result.epsilon_upper is None
    assert result.epsilon_lower is None


def test_full_signal_blanket_is_the_smallest_feasible_m() -> None:
    m_k = full_signal_blanket(1.0, 4, 1e-6, 5000, 17)
    assert user_level_holds(1.0, 1.0, 4, 1e-6, 5000, m_k, 17)
    assert not user_level_holds(1.0, 1.0, 4, 1e-6, 5000, m_k * (1 - 1e-6), 17)
    assert max_lambda(1.0, 4, 1e-6, 5000, m_k * 0.9, 17) < 1.0


def test_user_level_condition_is_checked_with_the_right_pair() -> None:
    lam, users, m, d, s, delta, level = 0.4, 3000, 2.2, 21, 4, 1e-6, 0.9
    pair = item_pair(lam, users, m, d)
    holds = delta_for(pair, level / s) <= delta / (s * math.exp((s - 1) * level / s))
    assert user_level_holds(level, lam, s, delta, users, m, d) == holds


@settings(max_examples=25, deadline=None)
@given(
    users=st.integers(2, 20_000),
    domain=st.integers(2, 200),
    set_size=st.integers(1, 8),
    m=st.floats(0.05, 6.0),
    lam=st.floats(0.05, 1.0),
    delta_exp=st.floats(-9.0, -3.0),
)
def test_lower_bound_never_exceeds_upper_bound(users: int, domain: int, set_size: int,
                                               m: float, lam: float, delta_exp: float) -> None:
    set_size = min(set_size, domain)
    result = audit(users, domain, set_size, m, lam, 10**delta_exp)
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

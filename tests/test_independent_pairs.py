"""The independent blanket counts min(s, d - s) differing items, in both bounds and in all
three accountants.

Two s-sets of d items differ in at most min(s, d - s) items: with s = 3 of d = 4 ids, in
one.  Composing min(s, d // 2) = 2 item pairs instead put the exhibited lower bound above
the exact epsilon of the full view (4.53 against 2.67 at 8 users, m = 0.5, lambda = 0.7,
delta = 1e-3) and loosened the upper bound.
"""

from __future__ import annotations

import itertools

import pytest

from segshuffle.core import accounting
from segshuffle.core.portable import accounting as portable_accounting

from .full_view import independent_full_view_delta
from .node_support import javascript_user_deltas

USERS, DOMAIN, SET_SIZE, M, LAM, DELTA = 8, 4, 3, 0.5, 0.7, 1e-3


def _exact_delta(level: float) -> float:
    """The largest exact full-view delta over every pair of 3-sets of the 4 ids."""
    sets = list(itertools.combinations(range(DOMAIN), SET_SIZE))
    return max(independent_full_view_delta(level, LAM, USERS, M, DOMAIN, x, y)
               for x, y in itertools.combinations(sets, 2))


def test_two_sets_differ_in_at_most_min_s_and_d_minus_s_items() -> None:
    assert accounting.independent_pairs(3, 4) == 1
    assert accounting.independent_pairs(2, 4) == 2
    assert accounting.independent_pairs(4, 4) == 0
    assert accounting.independent_pairs(5, 8) == 3
    assert accounting.independent_pairs(1, 2) == 1


def test_the_independent_lower_bound_is_not_above_the_exact_epsilon_when_s_exceeds_half_d(
        ) -> None:
    """The server can tell the sets apart at delta at the exhibited epsilon (exact view)."""
    result = accounting.audit(USERS, DOMAIN, SET_SIZE, M, LAM, DELTA, mode="independent")
    assert result.epsilon_lower is not None and result.epsilon_upper is not None
    assert _exact_delta(result.epsilon_lower * (1.0 - 1e-6)) >= DELTA
    assert _exact_delta(result.epsilon_upper) <= DELTA
    assert result.epsilon_lower == pytest.approx(2.674, abs=2e-3)


@pytest.mark.parametrize("level", [0.5, 1.0, 2.5])
def test_the_independent_upper_bound_composes_one_pair_for_three_of_four_items(
        level: float) -> None:
    """s = 3 of d = 4 is one differing item: the bound of s = 1 on the same blanket, and
    never below the exact full view."""
    three = accounting.user_delta(level, LAM, SET_SIZE, USERS, M, DOMAIN, mode="independent")
    one = accounting.user_delta(level, LAM, 1, USERS, M, DOMAIN, mode="independent")
    assert three == one
    assert three >= _exact_delta(level)


@pytest.mark.parametrize("level", [0.5, 2.5])
def test_the_portable_independent_bound_composes_one_pair_for_three_of_four_items(
        level: float) -> None:
    three, one = (portable_accounting.user_delta(level, LAM, s, USERS, M, DOMAIN,
                                                 mode="independent") for s in (SET_SIZE, 1))
    assert three == one
    assert three >= _exact_delta(level)


def test_the_javascript_independent_bound_composes_min_s_and_d_minus_s_pairs() -> None:
    got = javascript_user_deltas([([level, LAM, s, USERS, M, DOMAIN], {"mode": "independent"})
                                  for level in (0.5, 2.5) for s in (1, 3)])
    assert got[0] == got[1] and got[2] == got[3]
    assert got[0] >= _exact_delta(0.5) and got[2] >= _exact_delta(2.5)

"""A client's check of delta_user <= delta stops at the first slot bound that certifies it.

``user_delta(..., enough=delta)`` may return a larger bound than the smallest one, but
only at or below ``delta``: the verdict is the full computation's, in all three
accountants, and the costly revealed-send bound is not built where the labelled groups
already certify the level.
"""

from __future__ import annotations

import pytest

from segshuffle.core import accounting, slot_groups
from segshuffle.core.portable import accounting as portable_accounting

from .node_support import javascript_user_deltas

DELTA = 1e-8

#: (level, lambda, s, h, m, d): large campaigns whose groups certify their level (the first
#: two; before, each check also built the revealed-send bound: 1.7 CPU-s for the first),
#: one whose rate is far above its constraint (every bound is taken), and a small one.
CAMPAIGNS = [
    (0.5, 0.387, 8, 6_758_661, 7.483665219857224, 279),
    (1.0, 0.3, 4, 9_294_142, 0.111, 185),
    (0.5, 0.95, 3, 20_000, 2.5, 64),
    (1.0, 0.5, 2, 500, 1.5, 40),
]


def _both(implementation, case: tuple) -> tuple[float, float]:
    level, lam, s, h, m, d = case
    full = implementation.user_delta(level, lam, s, h, m, d, delta=DELTA)
    early = implementation.user_delta(level, lam, s, h, m, d, delta=DELTA, enough=DELTA)
    return full, early


@pytest.mark.parametrize("implementation", [
    pytest.param(accounting, id="numpy"),
    # The full computation costs the pure-Python accountant up to 18 CPU-s here.
    pytest.param(portable_accounting, id="portable", marks=pytest.mark.slow),
])
@pytest.mark.parametrize("case", CAMPAIGNS)
def test_stopping_early_keeps_the_verdict(implementation, case: tuple) -> None:
    full, early = _both(implementation, case)
    assert (early <= DELTA) == (full <= DELTA)
    assert early >= full  # a bound among those the full computation takes the least of
    if full > DELTA:
        assert early == full


def test_the_groups_certify_without_the_revealed_send_bound() -> None:
    accounting.clear_caches()
    level, lam, s, h, m, d = CAMPAIGNS[0]
    assert accounting.user_delta(level, lam, s, h, m, d, delta=DELTA, enough=DELTA) <= DELTA
    bound = accounting.slot_bound(h, m, d, s, accounting.POISSON_SLACK_SHARE * DELTA,
                                   accounting.DEFAULT_STEP)  # the cached one user_delta used
    assert bound.groups is not None
    assert bound._revealed is None  # never built
    # Asked for the least bound, it builds it.
    accounting.user_delta(level, lam, s, h, m, d, delta=DELTA)
    assert bound._revealed is not None


@pytest.mark.slow
def test_the_javascript_accountant_stops_early_with_the_same_verdicts() -> None:
    deltas = javascript_user_deltas(
        [(list(case), options) for case in CAMPAIGNS
         for options in ({"delta": DELTA}, {"delta": DELTA, "enough": DELTA})])
    pairs = zip(deltas[::2], deltas[1::2], strict=True)
    for (full, early), case in zip(pairs, CAMPAIGNS, strict=True):
        assert (early <= DELTA) == (full <= DELTA), case
        assert early >= full, case
        if full > DELTA:
            assert early == full, case


#: Nearly every group slot on the pair (m just below an integer: gamma = 0.998, r_S =
#: 0.486): a million atoms per rung of the groups' ladder, four rungs.  Its rates are far
#: below their constraint, so a check needs no more than the first rung.
FULL_GROUPS = (160_755, 3, 84, 19.961569615349426)
FULL_GROUPS_LEVELS = [(0.5, 0.8610472179531965), (1.0, 0.8080487072041964),
                      (2.0, 0.6068905883189007)]


def test_a_check_the_first_rung_certifies_composes_one_group_size(monkeypatch) -> None:
    """Before, each of the three checks composed every rung's pair (1.9 CPU-s in all)."""
    h, s, d, m = FULL_GROUPS
    accounting.clear_caches()
    composed_sizes: set[int] = set()
    compose = slot_groups._composed_groups

    def recorded(slots: int, *rest):
        composed_sizes.add(slots)
        return compose(slots, *rest)

    monkeypatch.setattr(slot_groups, "_composed_groups", recorded)
    for level, lam in FULL_GROUPS_LEVELS:
        assert accounting.user_delta(level, lam, s, h, m, d, delta=DELTA, enough=DELTA) <= DELTA
    bound = accounting.slot_bound(h, m, d, s, accounting.POISSON_SLACK_SHARE * DELTA,
                                   accounting.DEFAULT_STEP)
    assert bound.groups is not None and len(bound.groups.ladder) >= 3
    assert composed_sizes == {bound.groups.ladder[0] + 1}
    # The full bound agrees with the verdict, and the first rung alone is never below it.
    for level, lam in FULL_GROUPS_LEVELS:
        full = accounting.user_delta(level, lam, s, h, m, d, delta=DELTA)
        assert full <= accounting.user_delta(level, lam, s, h, m, d, delta=DELTA,
                                             enough=DELTA) <= DELTA


@pytest.mark.slow
def test_the_first_rung_stop_is_the_same_in_every_accountant() -> None:
    h, s, d, m = FULL_GROUPS
    cases = [([level, lam, s, h, m, d], {"delta": DELTA, "enough": DELTA})
             for level, lam in FULL_GROUPS_LEVELS]
    javascript = javascript_user_deltas(cases)
    for (level, lam), js in zip(FULL_GROUPS_LEVELS, javascript, strict=True):
        ours = accounting.user_delta(level, lam, s, h, m, d, delta=DELTA, enough=DELTA)
        light = portable_accounting.user_delta(level, lam, s, h, m, d, delta=DELTA,
                                               enough=DELTA)
        assert ours <= DELTA and light <= DELTA and js <= DELTA
        assert light == pytest.approx(ours, rel=1e-6) and js == pytest.approx(ours, rel=1e-6)

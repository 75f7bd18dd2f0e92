"""The s = 1 exhibited full view sums a grid built once per blanket.

The lower-bound search over E (and the optimizer's report of it at every level) evaluates
:func:`segshuffle.core.full_view.single_item_full_view_delta` a dozen times per level on
one blanket.  Everything in it but the threshold of the set P > e^E Q depends on the
blanket alone, so it is built once: the cells' blanket weights, their ratio and a table of
the Binomial(t, 1/2) tails.  These tests hold the grid to the brute-force enumerator, with
and without the table, and show the search builds one grid per blanket.
"""

from __future__ import annotations

import math

import pytest

from segshuffle.core import full_view
from segshuffle.core.accounting import blanket_geometry, user_epsilon
from segshuffle.core.full_view import single_item_full_view_delta

from .full_view import slot_full_view_delta

ENUMERATED = ((5, 1.5, 4, 0.5, 1.0), (4, 0.5, 5, 0.9, 0.5), (6, 2.0, 4, 0.5, 2.0),
              (8, 0.25, 4, 0.5, 4.0), (7, 0.75, 3, 0.999, 0.0))


@pytest.fixture(autouse=True)
def _cold_grids() -> None:
    full_view.clear_caches()


@pytest.mark.parametrize("tabled", [True, False], ids=["tail-table", "tails-per-cell"])
@pytest.mark.parametrize(("users", "m", "d", "lam", "eps"), ENUMERATED)
def test_the_grid_gives_the_enumerated_full_view(users: int, m: float, d: int, lam: float,
                                                 eps: float, tabled: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if not tabled:
        monkeypatch.setattr(full_view, "MAX_TAIL_TABLE", 0)
    n_slots, r = blanket_geometry(users, m, d, every_slot=True)
    gamma = m / math.ceil(m)
    assert single_item_full_view_delta(eps, lam, n_slots, r, gamma) == pytest.approx(
        slot_full_view_delta(eps, lam, users, m, d, (0,), (1,)), rel=1e-9)


def test_the_tail_table_reads_what_the_tails_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blanket of 900 slots (a table of a few thousand tails): every E and lambda
    gives the per-cell tails' value to rounding."""
    n_slots, r = blanket_geometry(300, 2.7, 64, every_slot=True)
    gamma = 2.7 / 3
    points = [(eps, lam) for eps in (0.0, 0.1, 0.7, 2.0) for lam in (0.05, 0.5, 1.0)]
    tabled = [single_item_full_view_delta(eps, lam, n_slots, r, gamma) for eps, lam in points]
    assert full_view._full_view_grid(n_slots, r, gamma).tails.table is not None
    full_view.clear_caches()
    monkeypatch.setattr(full_view, "MAX_TAIL_TABLE", 0)
    direct = [single_item_full_view_delta(eps, lam, n_slots, r, gamma) for eps, lam in points]
    assert full_view._full_view_grid(n_slots, r, gamma).tails.table is None
    assert max(tabled) > 1e-3
    assert tabled == pytest.approx(direct, rel=1e-12, abs=1e-300)


def test_a_lower_bound_search_builds_one_grid_per_blanket() -> None:
    """The search over E asks for the full view a dozen times at one blanket: it is built
    once and read after (before, every call recomputed the rest counts' pmfs and every
    cell's incomplete beta functions)."""
    users, m, d = 1000, 0.45, 16
    lower = user_epsilon(0.6, 1, 1e-8, users, m, d, lower=True)
    assert lower is not None and lower > 0.0
    info = full_view._full_view_grid.cache_info()
    assert info.misses == 1 and info.hits >= 5

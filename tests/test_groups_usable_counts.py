"""Whether the labelled groups' pairs fit is counted, not built.

Before, ``GroupsBound.usable`` built the pair at the ladder's largest rung (a million atoms
for nearly full groups) only to see that it fit; a check that the first rung certifies then
built two pairs where it needs one.  The count (:func:`segshuffle.core.pair_windows.
atom_count`) is the number of atoms the pair would hold, in every accountant.
"""

from __future__ import annotations

import pytest

from segshuffle.core import accounting, arrays, multinomial_pair, pair_windows, slot_groups
from segshuffle.core import bounded_cache as portable_cache
from segshuffle.core.portable import accounting as portable_accounting

from .node_support import run_accountant_script
from .test_check_stops_early import DELTA, FULL_GROUPS, FULL_GROUPS_LEVELS

PAIRS = [(0, 0.25), (1, 0.1), (40, 0.3), (1_000, 0.01), (12_345, 0.2), (80_000, 0.486)]


@pytest.mark.parametrize(("slots", "r"), PAIRS)
def test_the_count_is_the_number_of_atoms_built(slots: int, r: float) -> None:
    count = pair_windows.atom_count(slots, 2.0 * r)
    assert count == multinomial_pair.pair_atoms(slots, r).split.size
    with arrays.use(arrays.PYTHON):
        assert count == multinomial_pair.pair_atoms(slots, r).size
    assert pair_windows.enumerable(slots, r)


def test_a_pair_beyond_the_limit_is_not_enumerable() -> None:
    slots, r = 10**8, 0.4999999
    assert pair_windows.atom_count(slots, 2.0 * r) > pair_windows.MAX_ATOMS
    assert not pair_windows.enumerable(slots, r)
    assert multinomial_pair.pair_atoms(slots, r) is None


def _built_sizes(monkeypatch, module) -> list[int]:
    built: list[int] = []
    build = module.pair_atoms

    def recorded(slots: int, r: float):
        built.append(slots)
        return build(slots, r)

    monkeypatch.setattr(module, "pair_atoms", recorded)
    return built


def test_a_check_the_first_rung_certifies_builds_one_pair(monkeypatch) -> None:
    """Before, the largest rung's pair was built too (0.22 of 0.9 CPU-s of this check)."""
    h, s, d, m = FULL_GROUPS
    accounting.clear_caches()
    built = _built_sizes(monkeypatch, slot_groups)
    for level, lam in FULL_GROUPS_LEVELS:
        assert accounting.user_delta(level, lam, s, h, m, d, delta=DELTA, enough=DELTA) <= DELTA
    bound = accounting.slot_bound(h, m, d, s, accounting.POISSON_SLACK_SHARE * DELTA,
                                   accounting.DEFAULT_STEP)
    assert bound.groups is not None and bound.groups.usable
    assert set(built) == {bound.groups.ladder[0] + 1}


@pytest.mark.slow
def test_the_pure_python_check_builds_one_pair(monkeypatch) -> None:
    h, s, d, m = FULL_GROUPS
    portable_cache.clear_all_caches()
    built = _built_sizes(monkeypatch, slot_groups)
    for level, lam in FULL_GROUPS_LEVELS:
        assert portable_accounting.user_delta(level, lam, s, h, m, d, delta=DELTA,
                                              enough=DELTA) <= DELTA
    groups = accounting.slot_bound(h, m, d, s, accounting.POISSON_SLACK_SHARE * DELTA,
                                    accounting.DEFAULT_STEP).groups
    assert groups is not None
    assert set(built) == {groups.ladder[0] + 1}


_ENUMERABLE_SCRIPT = """
const pairs = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
import(process.argv[1]).then(({ enumerable }) => {
  console.log(JSON.stringify(pairs.map(([slots, r]) => enumerable(slots, r))));
});
"""


def test_the_javascript_count_agrees() -> None:
    """On both sides of the limit: the slot counts at r = 0.4999 where the atoms first
    exceed MAX_ATOMS (located by bisection on the Python count) and their neighbours."""
    r = 0.4999
    fits, too_many = 10**6, 10**7
    assert pair_windows.enumerable(fits, r) and not pair_windows.enumerable(too_many, r)
    while too_many - fits > 1:
        middle = (fits + too_many) // 2
        if pair_windows.enumerable(middle, r):
            fits = middle
        else:
            too_many = middle
    pairs = [*PAIRS, *((slots, r) for slots in range(fits - 2, too_many + 3))]
    expected = [pair_windows.enumerable(n, rate) for n, rate in pairs]
    assert expected[len(PAIRS):].count(True) >= 3 and expected[len(PAIRS):].count(False) >= 3
    assert run_accountant_script(_ENUMERABLE_SCRIPT, "multinomial_pair.js", pairs) == expected


def test_forgetting_every_cache_forgets_the_groups_compositions(monkeypatch) -> None:
    """The labelled groups keep their compositions in a memory-bounded table, which
    ``clear_all_caches`` (what the light client's cold checks and their tests call) did not
    reach: a check after it reused a composition an earlier one had built, so the pure-
    Python check's test saw no pair built when another test of its worker had run the
    same campaign first (a slow-tier failure that depended on test order)."""
    h, s, d, m = FULL_GROUPS
    level, lam = FULL_GROUPS_LEVELS[0]
    portable_cache.clear_all_caches()
    accounting.user_delta(level, lam, s, h, m, d, delta=DELTA, enough=DELTA)
    portable_cache.clear_all_caches()
    built = _built_sizes(monkeypatch, slot_groups)
    accounting.user_delta(level, lam, s, h, m, d, delta=DELTA, enough=DELTA)
    assert built, "the check after clear_all_caches reused a kept composition"

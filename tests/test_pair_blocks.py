"""The labelled-groups pair enumerated by blocks of observed totals (core/multinomial_pair).

The block pair dominates the pair (every hockey-stick divergence at least the pair's,
checked here on the atoms themselves, no grid), stays within a hair of it, and needs a
tenth of the atoms or fewer where the groups are large.
"""

from __future__ import annotations

import numpy as np
import pytest

from segshuffle.core import multinomial_pair, pair_windows


def _divergences(atoms: multinomial_pair.PairAtoms, lam: float,
                 epsilons: np.ndarray) -> np.ndarray:
    """delta(E) of the atoms' pair at each E, from the atoms themselves (no grid): the P- and
    Q-mass above E, summed from the largest loss down, plus the infinite loss and the tail."""
    loss, p_mass = multinomial_pair.pair_losses(atoms, lam)
    keep = p_mass > 0.0
    loss, p_mass = loss[keep], p_mass[keep]
    infinite = float(np.sum(p_mass[np.isposinf(loss)])) + atoms.tail
    finite = np.isfinite(loss)
    loss, p_mass = loss[finite], p_mass[finite]
    order = np.argsort(loss)
    loss, p_mass = loss[order], p_mass[order]
    tail_p = np.append(np.cumsum(p_mass[::-1])[::-1], 0.0)
    tail_q = np.append(np.cumsum((p_mass * np.exp(-loss))[::-1])[::-1], 0.0)
    start = np.searchsorted(loss, epsilons, side="right")
    return infinite + np.maximum(0.0, tail_p[start] - np.exp(epsilons) * tail_q[start])


def _exact_atoms(slots: int, r: float, monkeypatch: pytest.MonkeyPatch
                 ) -> multinomial_pair.PairAtoms:
    """The pair with blocks of one total each (the pair itself)."""
    with monkeypatch.context() as patch:
        patch.setattr(pair_windows, "BLOCK_SHARE", 0.0)
        multinomial_pair.clear_caches()
        atoms = multinomial_pair.pair_atoms(slots, r)
    multinomial_pair.clear_caches()
    assert atoms is not None
    return atoms


#: (k, r, lambda): groups of a 2M-user campaign (s = 8, d = 35), of one where nearly every
#: slot lands on the pair (s = 3, d = 84, m = 19.96), and a middle one.
CASES = [(237_173, 0.0212, 0.42), (78_324, 0.486877, 0.81), (40_000, 0.05, 0.2)]


@pytest.mark.parametrize(("slots", "r", "lam"), CASES)
def test_the_block_pair_dominates_the_pair_and_stays_close(
        slots: int, r: float, lam: float, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = multinomial_pair.pair_atoms(slots, r)
    assert blocked is not None
    exact = _exact_atoms(slots, r, monkeypatch)
    assert blocked.low.size < exact.low.size  # some blocks span several totals
    epsilons = np.linspace(0.0, 0.3, 301)
    upper = _divergences(blocked, lam, epsilons)
    pair = _divergences(exact, lam, epsilons)
    # Below 1e-15 each is its window's tail mass (1e-19 here), and the two windows differ.
    meaningful = pair > 1e-15
    assert meaningful.sum() >= 20
    ratio = upper[meaningful] / pair[meaningful]
    assert np.all(ratio >= 1.0 - 1e-12), ratio.min()
    assert ratio.max() < 1.05


def test_large_groups_need_a_tenth_of_the_atoms() -> None:
    # One total per block, the groups pair of a 2M-user campaign (s = 8, d = 35, m = 0.089)
    # enumerated 1,679,801 atoms, and each of its compositions cost 0.6 CPU-s.
    atoms = multinomial_pair.pair_atoms(237_173, 0.0212)
    assert atoms is not None
    assert atoms.split.size <= 200_000

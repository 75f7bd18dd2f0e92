"""The multinomial pair put on the loss grid cell by cell, on both array backends and in JavaScript.

Before, every atom of the block pair had its loss computed (two logarithms) and was put on
the grid by itself: about a million atoms per lambda where the labelled groups are nearly
full (0.9 of the 1.0 CPU-s a numpy check took, 5 s in pure Python).  A cell's atoms are now
summed from lambda-free sums; the result must dominate the atom-by-atom grid pair (every
divergence of its exact compositions at least as large) and stay within the certified
margin of it.
"""

from __future__ import annotations

import numpy as np
import pytest

from segshuffle.core import arrays, multinomial_pair

from .node_support import run_accountant_script

STEP = 2e-3

#: (slots, r, lambda): nearly full groups (r = 0.486), a mid-sized and a large pair, small
#: pairs that stay atom by atom, and a top block with c = 0.
PAIRS = [(80_000, 0.486, 0.86), (80_000, 0.486, 0.3), (20_000, 0.45, 0.05),
         (200_000, 0.05, 0.7), (5_000, 0.2, 0.5), (300, 0.1, 0.9), (40, 0.3, 0.5),
         (3, 0.3, 0.5)]


def _delta(pmf: np.ndarray, offset: int, infinity: float, step: float, times: int,
           eps: float) -> float:
    """delta(eps) of the ``times``-fold composition, by exact (direct) convolution."""
    composed = pmf
    for _ in range(times - 1):
        composed = np.convolve(composed, pmf)
    losses = (times * offset + np.arange(composed.size)) * step
    above = losses > eps
    tail = float(np.sum(composed[above] * -np.expm1(eps - losses[above])))
    return 1.0 - (1.0 - infinity) ** times + tail


@pytest.mark.parametrize(("slots", "r", "lam"), PAIRS)
def test_the_cells_dominate_the_atoms_within_the_margin(slots: int, r: float,
                                                        lam: float) -> None:
    atoms = multinomial_pair.pair_atoms(slots, r)
    cells = multinomial_pair.pair_loss(atoms, lam, upper=True, step=STEP)
    each = multinomial_pair._by_atom(atoms, lam, upper=True, step=STEP)
    assert cells.step == each.step and cells.offset == each.offset
    assert cells.pmf.size == each.pmf.size
    assert cells.pmf.sum() == pytest.approx(each.pmf.sum(), rel=1e-12)
    for times in (1, 2, 3):
        for eps in (0.0, 0.01, 0.05, 0.2, 0.5, 1.0):
            by_cells = _delta(cells.pmf, cells.offset, cells.infinity, cells.step, times, eps)
            by_atoms = _delta(each.pmf, each.offset, each.infinity, each.step, times, eps)
            assert by_cells >= by_atoms * (1.0 - 1e-14) - 1e-300
            assert by_cells <= by_atoms * (1.0 + 1e-9) + 1e-18


@pytest.mark.parametrize(("slots", "r", "lam"), PAIRS)
def test_the_pure_python_pair_agrees(slots: int, r: float, lam: float) -> None:
    ours = multinomial_pair.pair_loss(multinomial_pair.pair_atoms(slots, r), lam, upper=True,
                                      step=STEP)
    with arrays.use(arrays.PYTHON):
        light = multinomial_pair.pair_loss(multinomial_pair.pair_atoms(slots, r), lam,
                                           upper=True, step=STEP)
    assert light.step == ours.step and light.offset == ours.offset
    np.testing.assert_allclose(light.pmf, ours.pmf, rtol=1e-9, atol=1e-300)
    assert light.infinity == pytest.approx(ours.infinity, rel=1e-12)


def test_nearly_full_groups_take_no_logarithm_per_atom(monkeypatch) -> None:
    """1.37 million atoms, a few hundred blocks: the losses are evaluated near the cells' ends
    (about 60,000 evaluations)."""
    atoms = multinomial_pair.pair_atoms(80_000, 0.486)
    evaluated = []
    loss = multinomial_pair._split_loss

    def counted(c, t0, a, c_plus_a=None):
        evaluated.append(np.size(a))
        return loss(c, t0, a, c_plus_a)

    monkeypatch.setattr(multinomial_pair, "_split_loss", counted)
    multinomial_pair.pair_loss(atoms, 0.86, upper=True, step=STEP)
    assert 0 < sum(evaluated) < atoms.split.size / 10


def test_the_pure_python_pair_sums_nearly_full_groups_by_cells(monkeypatch) -> None:
    evaluated = []
    loss = multinomial_pair._split_loss

    def counted(c, t0, a, c_plus_a=None):
        evaluated.append(len(a))
        return loss(c, t0, a, c_plus_a)

    with arrays.use(arrays.PYTHON):
        atoms = multinomial_pair.pair_atoms(80_000, 0.486)
        monkeypatch.setattr(multinomial_pair, "_split_loss", counted)
        multinomial_pair.pair_loss(atoms, 0.86, upper=True, step=STEP)
    assert 0 < sum(evaluated) < atoms.size / 10


_PAIR_SCRIPT = """
const pairs = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
import(process.argv[1]).then(({ pairAtoms, multinomialPairLoss }) => {
  console.log(JSON.stringify(pairs.map(([slots, r, lam, step]) => {
    const pair = multinomialPairLoss(pairAtoms(slots, r), lam, { upper: true, step });
    return [pair.step, pair.offset, Array.from(pair.pmf), pair.infinity];
  })));
});
"""


def test_the_javascript_pair_agrees() -> None:
    pairs = run_accountant_script(_PAIR_SCRIPT, "multinomial_pair.js",
                                  [[*pair, STEP] for pair in PAIRS], timeout=300)
    for (slots, r, lam), (step, offset, pmf, infinity) in zip(PAIRS, pairs, strict=True):
        ours = multinomial_pair.pair_loss(multinomial_pair.pair_atoms(slots, r), lam,
                                          upper=True, step=STEP)
        assert step == ours.step and offset == ours.offset
        np.testing.assert_allclose(pmf, ours.pmf, rtol=1e-9, atol=1e-300)
        assert infinity == pytest.approx(ours.infinity, rel=1e-12)

"""Putting privacy losses on the grid: connect the dots for upper bounds, exact where it must be."""

from __future__ import annotations

import math

import numpy as np
import pytest

from segshuffle.core import multinomial_pair, privacy_loss
from segshuffle.core.privacy_loss import LossDistribution, compose_loss, discretise
from segshuffle.core.slot_groups import group_geometry


def _hockey_stick(losses: np.ndarray, masses: np.ndarray, alpha: float) -> float:
    """D_alpha = E_P[(1 - alpha e^{-L})_+] of atoms (P-mass at loss L)."""
    return float(np.sum(masses * np.maximum(1.0 - alpha * np.exp(-losses), 0.0)))


def _random_atoms(seed: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    losses = rng.normal(0.0, 1.5, count)
    masses = rng.dirichlet(np.ones(count))
    return losses, masses


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("step", [1e-3, 0.05, 0.7])
def test_connect_the_dots_keeps_the_p_and_q_mass_of_every_atom(seed: int, step: float) -> None:
    losses, masses = _random_atoms(seed, 200)
    offset, pmf = discretise(losses, masses, step, upper=True)
    grid = step * (offset + np.arange(pmf.size))
    assert math.isclose(pmf.sum(), masses.sum(), rel_tol=1e-13)
    q_exact = float(np.sum(masses * np.exp(-losses)))
    q_grid = float(np.sum(pmf * np.exp(-grid)))
    # Mass moved up only: the Q-mass can only shrink, and by rounding at most.
    assert q_grid <= q_exact
    assert q_grid >= q_exact * (1.0 - 1e-9)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("step", [1e-3, 0.05, 0.7])
def test_connect_the_dots_is_never_below_the_atoms_at_any_threshold(seed: int, step: float
                                                                    ) -> None:
    losses, masses = _random_atoms(seed, 200)
    offset, pmf = discretise(losses, masses, step, upper=True)
    grid = step * (offset + np.arange(pmf.size))
    for alpha in np.exp(np.linspace(-4.0, 4.0, 97)):
        exact = _hockey_stick(losses, masses, alpha)
        assert _hockey_stick(grid, pmf, alpha) >= exact - 1e-15


@pytest.mark.parametrize("seed", range(6))
def test_connect_the_dots_is_never_above_rounding_up_on_the_same_grid(seed: int) -> None:
    losses, masses = _random_atoms(seed, 200)
    step = 0.05
    offset, pmf = discretise(losses, masses, step, upper=True)
    grid = step * (offset + np.arange(pmf.size))
    rounded_up = step * np.ceil(losses / step)
    for alpha in np.exp(np.linspace(-3.0, 3.0, 61)):
        assert _hockey_stick(grid, pmf, alpha) <= _hockey_stick(rounded_up, masses, alpha) + 1e-15


def test_rounding_down_gives_lower_bounds() -> None:
    losses, masses = _random_atoms(7, 200)
    offset, pmf = discretise(losses, masses, 0.05, upper=False)
    grid = 0.05 * (offset + np.arange(pmf.size))
    for alpha in np.exp(np.linspace(-3.0, 3.0, 61)):
        assert _hockey_stick(grid, pmf, alpha) <= _hockey_stick(losses, masses, alpha) + 1e-15


def _exact_composition(losses: np.ndarray, masses: np.ndarray, times: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    total_l, total_m = losses, masses
    for _ in range(times - 1):
        total_l = (total_l[:, None] + losses[None, :]).ravel()
        total_m = (total_m[:, None] * masses[None, :]).ravel()
    return total_l, total_m


@pytest.mark.parametrize(("slots", "lam", "times"), [
    (12, 0.3, 3), (12, 1.0, 3), (20, 0.8, 2), (30, 1.0, 2), (30, 0.1, 2)])
def test_composed_groups_pair_on_a_coarse_grid_stays_above_the_exact_composition(
        slots: int, lam: float, times: int) -> None:
    atoms = multinomial_pair.pair_atoms(slots, 0.2)
    loss, p_mass = multinomial_pair.pair_losses(atoms, lam)
    finite = np.isfinite(loss) & (p_mass > 0.0)
    infinite = float(np.sum(p_mass[np.isposinf(loss) & (p_mass > 0.0)]))
    exact_l, exact_m = _exact_composition(loss[finite], p_mass[finite], times)
    exact_inf = 1.0 - (1.0 - infinite - atoms.tail) ** times
    step = 0.02
    composed = compose_loss(multinomial_pair.pair_loss(atoms, lam, upper=True, step=step),
                         times, True)
    for eps in (0.0, 0.1, 0.5, 1.0, 2.0):
        exact = exact_inf + _hockey_stick(exact_l, exact_m, math.exp(eps))
        assert composed.delta(eps) >= exact * (1 - 1e-12)


def _heavy_groups_pair() -> tuple[multinomial_pair.PairAtoms, float]:
    """The labelled-groups pair of a 1,000-user campaign (d = 128, s = 8, m = 16.47)."""
    n_slots = 900 * 17 - 1
    _, r = group_geometry(16.47 / 17, 128, 8)
    slots = math.floor(n_slots * group_geometry(16.47 / 17, 128, 8)[0])
    return multinomial_pair.pair_atoms(slots, r), 0.489


def test_the_heavy_groups_composition_needs_few_grid_points() -> None:
    # Regression: rounding up on a 1e-4 grid composed eight pairs over 104,576 points,
    # most of the optimizer's time at a thousand users.
    atoms, lam = _heavy_groups_pair()
    composed = compose_loss(multinomial_pair.pair_loss(atoms, lam, upper=True,
                                                    step=privacy_loss.DEFAULT_STEP), 8, True)
    assert composed.tail_p.size <= 12_000


def test_the_coarser_grid_is_tighter_than_rounding_up_on_the_fine_one() -> None:
    atoms, lam = _heavy_groups_pair()
    loss, p_mass = multinomial_pair.pair_losses(atoms, lam)
    finite = np.isfinite(loss) & (p_mass > 0.0)
    index = np.ceil(loss[finite] / 1e-4 + 1e-9).astype(np.int64)
    offset = int(index.min())
    fine_up = LossDistribution(step=1e-4, offset=offset,
                               pmf=np.bincount(index - offset, weights=p_mass[finite]),
                               infinity=atoms.tail + float(np.sum(p_mass[np.isposinf(loss)])))
    before = compose_loss(fine_up, 8, True)
    after = compose_loss(multinomial_pair.pair_loss(atoms, lam, upper=True,
                                                 step=privacy_loss.DEFAULT_STEP), 8, True)
    # Beyond E = 1 both are below 1e-12, where each is its FFT rounding charge (about
    # 1e-17 per grid point) and the comparison says nothing about the grids.
    for eps in (0.25, 0.5, 0.75, 1.0):
        assert after.delta(eps) <= before.delta(eps)

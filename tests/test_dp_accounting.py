"""Agreement with an independent accountant: Google's dp-accounting, PMF pair -> PLD."""

from __future__ import annotations

import math

import numpy as np
import pytest

from segshuffle.core.hockey_stick import delta_for, poisson_pair, variation_ratio_pair

from .brute_force import pair_pmfs

pld_module = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")


def _log_pmf(table: np.ndarray) -> dict[tuple[int, int], float]:
    rows, cols = np.nonzero(table > 0.0)
    return {(int(a), int(b)): math.log(table[a, b]) for a, b in zip(rows, cols, strict=True)}


def _pld_delta(pair, eps: float, interval: float) -> float:
    p, q = pair_pmfs(pair)
    distribution = pld_module.from_two_probability_mass_functions(
        _log_pmf(q), _log_pmf(p), pessimistic_estimate=True,
        value_discretization_interval=interval,
    )
    return float(distribution.get_delta_for_epsilon(eps))


@pytest.mark.parametrize(
    ("lam", "n_slots", "r", "eps"),
    [(0.5, 500, 0.02, 0.5), (1.0, 480, 0.05, 1.0), (0.25, 520, 0.01, 0.3),
     (0.9, 500, 0.004, 1.5)],
)
def test_poisson_pair_agrees_with_dp_accounting(lam: float, n_slots: int, r: float,
                                                eps: float) -> None:
    ours = delta_for(poisson_pair(lam, n_slots, r), eps)
    interval = 1e-4
    theirs = _pld_delta(poisson_pair(lam, n_slots, r), eps, interval)
    # The pessimistic PLD rounds losses up by at most one interval: its delta lies between
    # ours and ours evaluated at eps - interval.
    looser = delta_for(poisson_pair(lam, n_slots, r), max(eps - interval, 0.0))
    assert ours * (1 - 1e-9) - 1e-15 <= theirs <= looser * (1 + 1e-9) + 1e-15


def test_finite_p_pair_agrees_with_dp_accounting() -> None:
    p = math.exp(1.0)
    pair = variation_ratio_pair(p, (p - 1) / (p + 1), p, 501)
    ours = delta_for(pair, 0.2)
    theirs = _pld_delta(pair, 0.2, 1e-4)
    looser = delta_for(pair, 0.2 - 1e-4)
    assert ours * (1 - 1e-9) <= theirs <= looser * (1 + 1e-9)

"""A vectorised, seeded simulation of the whole protocol without the network.

Rather than drawing every message, the simulation draws the decoded counts
directly, which is exact in distribution (paper Algorithm 2):

- the item messages on item j from level-k users are Binomial(h_kj, lambda_k),
  where h_kj is the number of level-k users holding j (each holder sends j
  independently with probability lambda_k);
- the blanket in the ``slots`` mode: n ceil(m) slots each send with probability
  gamma = m / ceil(m), so the number sent is Binomial(n ceil(m), gamma), and
  their items are uniform over the domain, so they split
  Multinomial(total; 1/d, ..., 1/d);
- the blanket in the ``independent`` mode: each of the n users sends item j with
  probability m / d, independently for every item and user, so the blanket
  counts are d independent Binomial(n, m / d).

The blanket geometry (slots, per-slot probability) comes from
:mod:`segshuffle.core.blanket`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import blanket as _blanket
from .blanket import BlanketMode
from .estimator import FrequencyEstimate, estimate_frequencies
from .levels import level_histogram
from .optimizer import OptimizationResult, optimize


@dataclass(frozen=True)
class SimulationResult:
    """One simulated run: estimates, the true frequencies, and the squared error."""

    estimates: FrequencyEstimate
    truth: np.ndarray
    mse: float
    parameters: OptimizationResult
    counts: np.ndarray


def item_holders(user_items: np.ndarray, user_levels: np.ndarray, level_count: int,
                 domain_size: int) -> np.ndarray:
    """h[k, j]: the number of level-k users holding item j.

    ``user_items`` is an (n, s) array of distinct item ids per row.
    """
    items = np.asarray(user_items, dtype=np.int64)
    levels = np.asarray(user_levels, dtype=np.int64)
    if items.ndim != 2 or items.shape[0] != levels.shape[0]:
        raise ValueError("user_items must be (n, s) with one row per entry of user_levels")
    if items.size and (items.min() < 0 or items.max() >= domain_size):
        raise ValueError(f"item ids must be in [0, {domain_size})")
    flat = (levels[:, None] * domain_size + items).ravel()
    return np.bincount(flat, minlength=level_count * domain_size).reshape(
        level_count, domain_size)


def simulate_counts(holders: np.ndarray, lambdas: Sequence[float], m: float,
                    rng: np.random.Generator, *, users: int,
                    mode: str | BlanketMode = BlanketMode.SLOTS) -> np.ndarray:
    """Decoded item counts C_j of one round 2 with ``users`` participants.

    ``holders[k, j]`` is the number of level-k participants holding item j;
    ``mode`` is the blanket mode (module docstring), d = ``holders.shape[1]``.
    """
    h = np.asarray(holders, dtype=np.int64)
    lam = np.asarray(lambdas, dtype=float)
    if h.ndim != 2 or h.shape[0] != lam.size:
        raise ValueError("holders must be (K, d) with one row per lambda")
    mode = _blanket.parse_mode(mode)
    d = h.shape[1]
    counts = rng.binomial(h, lam[:, None]).sum(axis=0)
    slots = _blanket.blanket_slots(m, d, mode)
    if slots:
        probability = _blanket.slot_probability(m, d, mode)
        if mode is BlanketMode.SLOTS:
            sent = rng.binomial(users * slots, probability)
            counts = counts + rng.multinomial(sent, np.full(d, 1.0 / d))
        else:  # one slot per item and user
            counts = counts + rng.binomial(users, probability, size=d)
    return counts.astype(np.int64)


def run_protocol(
    user_items: np.ndarray,
    user_levels: np.ndarray,
    levels: Sequence[float],
    domain_size: int,
    delta: float,
    rng: np.random.Generator,
    *,
    m: float | None = None,
    dropout_tolerance: float = 0.0,
    parameters: OptimizationResult | None = None,
    blanket_mode: str | BlanketMode = BlanketMode.SLOTS,
) -> SimulationResult:
    """Both rounds for a population with exact level counts.

    Round 1 is the exact level histogram; the optimizer picks the parameters for
    ``blanket_mode`` (``m`` fixes the blanket rate; pass ``parameters`` to reuse an
    earlier optimisation of the same histogram in the same mode); round 2 is
    simulated by :func:`simulate_counts` and decoded with the paper's estimator.
    MSE is sum_j (W^_j - w_j)^2, the paper's error measure.
    """
    mode = _blanket.parse_mode(blanket_mode)
    items = np.asarray(user_items, dtype=np.int64)
    n, s = items.shape
    counts_per_level = level_histogram(user_levels, len(levels))
    if parameters is None:
        parameters = optimize(counts_per_level.tolist(), levels, domain_size, s, delta,
                              dropout_tolerance=dropout_tolerance, blanket=m,
                              blanket_mode=mode)
    if _blanket.parse_mode(parameters.blanket_mode) is not mode:
        raise ValueError(f"the parameters were optimised for the {parameters.blanket_mode} "
                         f"blanket mode, not {mode.value}")
    holders = item_holders(items, user_levels, len(levels), domain_size)
    counts = simulate_counts(holders, parameters.lambdas, parameters.m, rng, users=n,
                             mode=mode)
    estimate = estimate_frequencies(counts, counts_per_level.tolist(), parameters.lambdas,
                                    parameters.m, mode=mode)
    truth = holders.sum(axis=0) / n
    mse = float(np.sum((estimate.values - truth) ** 2))
    return SimulationResult(estimates=estimate, truth=truth, mse=mse, parameters=parameters,
                            counts=counts)

"""The compared methods, planned once per panel and run once per repeat.

Names (used in every output):

- ``subexp-local``: PrivSet's subset exponential mechanism, local model, every user at
  eps = 2, optimal subset size (:mod:`~segshuffle.experiments.privset`);
- ``subexp-shuffle``: the same randomizer shuffled, every user at (0.5, delta), local
  eps0 as large as the variation-ratio amplification allows
  (:func:`~segshuffle.experiments.calibration.subexp_shuffle_mechanism`);
- ``mm-shuffle``: balls-into-bins, every user at (0.5, delta), blanket calibrated by
  the exact accountant (:mod:`~segshuffle.experiments.balls_into_bins`);
- ``sepmm-shuffle``: balls-into-bins run separately by the users of each level k at
  (E_k, delta), with delta = 0.01 / n for the whole population; the K estimators
  are averaged;
- ``weighted-sepmm-shuffle``: the same, averaged with the paper's weights
  1 / sqrt(d s^2 log(1/delta) / (n_k E_k)^2 + s / n_k), normalised to sum to 1;
- ``ours``: the segmented protocol at each swept m (lambdas from the optimizer with m
  fixed), and at the optimizer's m*.

Planning (:func:`plan_panel`) runs every accountant search; it depends only on
public parameters (n, d, s, levels, shares, delta), never on the data.  Running
(:func:`run_repeat`) draws a population and one estimate per method, from random
streams keyed by (panel, repeat, method) so results do not depend on scheduling or
on which other methods run.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from ..core.estimator import estimate_frequencies
from ..core.optimizer import optimize
from ..core.simulate import simulate_counts
from ..datasets.population import DatasetSource, Population
from .balls_into_bins import BallsIntoBins
from .calibration import (
    BallsIntoBinsChoice,
    balls_into_bins_config,
    subexp_local_mechanism,
    subexp_shuffle_mechanism,
)
from .privset import SubsetExponential
from .settings import LEVELS, LOCAL_EPSILON, UNIFORM_EPSILON, delta_for_users, level_counts

OURS = "ours"
BASELINES: tuple[str, ...] = (
    "subexp-local",
    "subexp-shuffle",
    "mm-shuffle",
    "sepmm-shuffle",
    "weighted-sepmm-shuffle",
)
METHODS: tuple[str, ...] = (*BASELINES, OURS)


@dataclass(frozen=True)
class OursPoint:
    """One blanket rate of the segmented protocol and the optimizer's lambdas there."""

    m: float
    lambdas: tuple[float, ...]
    mse_bound: float
    optimal: bool  # the optimizer's own m*


@dataclass(frozen=True)
class PanelPlan:
    """Everything the accountant decides for one panel (public parameters only)."""

    key: str
    n: int
    set_size: int
    domain_size: int
    item_count: int
    delta: float
    levels: tuple[float, ...]
    counts: tuple[int, ...]
    local: SubsetExponential
    shuffled: SubsetExponential
    mm: BallsIntoBinsChoice
    sepmm: tuple[BallsIntoBinsChoice, ...]
    sepmm_weights: tuple[float, ...]
    ours: tuple[OursPoint, ...]


def paper_weight(n_k: int, level: float, domain_size: int, set_size: int,
                 delta: float) -> float:
    """The paper's weight of one level's estimator (before normalisation):

        1 / sqrt(d s^2 log(1/delta) / (n_k E_k)^2 + s / n_k).
    """
    d, s = domain_size, set_size
    return 1.0 / math.sqrt(d * s**2 * math.log(1.0 / delta) / (n_k * level) ** 2 + s / n_k)


def plan_panel(key: str, n: int, set_size: int, domain_size: int, item_count: int,
               shares: tuple[float, ...], grid: tuple[float, ...],
               levels: tuple[float, ...] = LEVELS) -> PanelPlan:
    """Run every accountant search of one panel."""
    s, d = set_size, domain_size
    delta = delta_for_users(n)
    counts = tuple(level_counts(n, shares))
    local = subexp_local_mechanism(d, s, LOCAL_EPSILON)
    shuffled = subexp_shuffle_mechanism(n, d, s, UNIFORM_EPSILON, delta)
    mm = balls_into_bins_config(n, d, s, UNIFORM_EPSILON, delta)
    sepmm = tuple(balls_into_bins_config(n_k, d, s, level, delta)
                  for n_k, level in zip(counts, levels, strict=True))
    raw = [paper_weight(n_k, level, d, s, delta) for n_k, level in zip(counts, levels,
                                                                        strict=True)]
    weights = tuple(w / sum(raw) for w in raw)
    points = []
    for m in grid:
        result = optimize(list(counts), levels, d, s, delta, blanket=m, lower_bounds=False)
        points.append(OursPoint(m=m, lambdas=result.lambdas, mse_bound=result.mse_bound,
                                optimal=False))
    best = optimize(list(counts), levels, d, s, delta, lower_bounds=False)
    points.append(OursPoint(m=best.m, lambdas=best.lambdas, mse_bound=best.mse_bound,
                            optimal=True))
    return PanelPlan(key=key, n=n, set_size=s, domain_size=d, item_count=item_count,
                     delta=delta, levels=tuple(levels), counts=counts, local=local,
                     shuffled=shuffled, mm=mm, sepmm=sepmm, sepmm_weights=weights,
                     ours=tuple(points))


def stream(seed: int, key: str, repeat: int, *tags: int) -> np.random.Generator:
    """An independent generator for (panel key, repeat, tags), stable across runs."""
    sequence = np.random.SeedSequence(seed, spawn_key=(zlib.crc32(key.encode()), repeat, *tags))
    return np.random.default_rng(sequence)


def assign_levels(counts: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Level indices with exactly counts[k] users at level k, in a uniformly random order."""
    levels = np.repeat(np.arange(len(counts)), counts)
    rng.shuffle(levels)
    return levels


def _squared_error(estimate: np.ndarray, truth: np.ndarray, item_count: int) -> float:
    """sum over the real items (padding items excluded) of (W^_j - w_j)^2."""
    return float(np.sum((estimate[:item_count] - truth[:item_count]) ** 2))


def _balls_into_bins_estimate(config: BallsIntoBins, population: Population,
                              rng: np.random.Generator) -> np.ndarray:
    counts = config.sample_counts(population.items, rng)
    return config.estimate(counts, population.n)


def run_repeat(plan: PanelPlan, source: DatasetSource, seed: int, repeat: int
               ) -> dict[str, list[float]]:
    """One repeat of a panel: the squared error of every method (``ours``: one per point)."""
    data_rng = stream(seed, plan.key, repeat, 0)
    population = source.draw(plan.n, plan.set_size, data_rng)
    if population.domain_size != plan.domain_size:
        raise ValueError("the population's domain does not match the plan")
    levels = assign_levels(plan.counts, data_rng)
    truth = population.frequencies()
    d_real = plan.item_count
    errors: dict[str, list[float]] = {}

    for tag, mech in ((1, plan.local), (2, plan.shuffled)):
        rng = stream(seed, plan.key, repeat, tag)
        estimate = mech.estimate(mech.sample_counts(population.items, rng), population.n)
        errors[BASELINES[tag - 1]] = [_squared_error(estimate, truth, d_real)]

    estimate = _balls_into_bins_estimate(plan.mm.config, population, stream(seed, plan.key,
                                                                            repeat, 3))
    errors["mm-shuffle"] = [_squared_error(estimate, truth, d_real)]

    group_estimates = []
    for k, choice in enumerate(plan.sepmm):
        group = population.subset(np.flatnonzero(levels == k))
        group_estimates.append(_balls_into_bins_estimate(
            choice.config, group, stream(seed, plan.key, repeat, 4, k)))
    stacked = np.vstack(group_estimates)
    errors["sepmm-shuffle"] = [_squared_error(stacked.mean(axis=0), truth, d_real)]
    weighted = np.asarray(plan.sepmm_weights) @ stacked
    errors["weighted-sepmm-shuffle"] = [_squared_error(weighted, truth, d_real)]

    holders = population.level_holders(levels, len(plan.levels))
    ours = []
    for index, point in enumerate(plan.ours):
        rng = stream(seed, plan.key, repeat, 5, index)
        counts = simulate_counts(holders, point.lambdas, point.m, rng, users=plan.n)
        estimate = estimate_frequencies(counts, list(plan.counts), point.lambdas, point.m)
        ours.append(_squared_error(estimate.values, truth, d_real))
    errors[OURS] = ours
    return errors

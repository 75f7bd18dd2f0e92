"""The compared methods, planned once per panel and run once per repeat.

Names (used in every output):

- ``subexp-local``: PrivSet's subset exponential mechanism, local model, every user at
  eps = 2, optimal subset size (:mod:`~segshuffle.experiments.privset`);
- ``subexp-shuffle``: the same randomizer shuffled, every user at (0.5, delta), local
  eps0 as large as the variation-ratio amplification allows
  (:func:`~segshuffle.experiments.calibration.subexp_shuffle_mechanism`);
- ``mm-shuffle``: balls-into-bins, every user at (0.5, delta), blanket calibrated by
  the user-level accountant (:mod:`~segshuffle.experiments.balls_into_bins`);
- ``sepmm-shuffle``: balls-into-bins run separately by the users of each level k at
  (E_k, delta), with delta = 0.01 / n for the whole population; the K estimators
  are averaged;
- ``weighted-sepmm-shuffle``: the same, averaged with the paper's weights
  1 / sqrt(d s^2 log(1/delta) / (n_k E_k)^2 + s / n_k), normalised to sum to 1;
- ``ours``: the segmented protocol with the paper's slot blanket at each swept m
  (lambdas from the optimizer with m fixed), and at the optimizer's m*;
- ``ours-independent``: the segmented protocol with the independent blanket (each
  user sends each item as blanket with probability m / d; exact accounting), at
  each swept m <= d / 2 and at its own optimizer's m*; absent where s + d
  ciphertexts per user exceed the protocol's cap.

Every (E, delta) above is a user-level guarantee on the server's full view:
the two segmented variants and the all-items balls-into-bins variant through
:mod:`segshuffle.core.accounting`; the single-message baselines (one-item
balls-into-bins, shuffled PrivSet) through single-message pairs that are proven
bounds for one message per user.

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

from ..core.blanket import BlanketMode, messages_per_user
from ..core.estimator import estimate_frequencies
from ..core.optimizer import OptimizationResult, optimize
from ..core.rules import MAX_MESSAGES_PER_USER
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
OURS_INDEPENDENT = "ours-independent"
BASELINES: tuple[str, ...] = (
    "subexp-local",
    "subexp-shuffle",
    "mm-shuffle",
    "sepmm-shuffle",
    "weighted-sepmm-shuffle",
)
#: The segmented protocol in each blanket mode: method name -> mode.
OURS_MODES: dict[str, BlanketMode] = {
    OURS: BlanketMode.SLOTS,
    OURS_INDEPENDENT: BlanketMode.INDEPENDENT,
}
OURS_METHODS: tuple[str, ...] = tuple(OURS_MODES)
METHODS: tuple[str, ...] = (*BASELINES, *OURS_METHODS)

#: Random-stream tag of each segmented variant (tags 1-4 are the baselines').
_OURS_TAGS: dict[str, int] = {OURS: 5, OURS_INDEPENDENT: 6}


@dataclass(frozen=True)
class OursPoint:
    """One blanket rate of the segmented protocol and the optimizer's lambdas there.

    ``epsilons`` are the achieved user-level guarantees per level (upper bounds
    from :mod:`segshuffle.core.accounting`, at most the levels); ``ciphertexts``
    the data ciphertexts of one fixed-size submission (s + ceil(m) slots, or s + d
    in the independent mode).
    """

    m: float
    lambdas: tuple[float, ...]
    mse_bound: float
    optimal: bool  # the optimizer's own m*
    epsilons: tuple[float | None, ...] = ()
    ciphertexts: int = 0


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
    ours_independent: tuple[OursPoint, ...] = ()

    def points(self, method: str) -> tuple[OursPoint, ...]:
        """The planned points of one segmented variant (``ours`` or ``ours-independent``)."""
        if method == OURS:
            return self.ours
        if method == OURS_INDEPENDENT:
            return self.ours_independent
        raise ValueError(f"{method!r} is not a segmented variant")


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
    variants = {method: _plan_ours(counts, levels, d, s, delta, grid, mode)
                for method, mode in OURS_MODES.items()}
    return PanelPlan(key=key, n=n, set_size=s, domain_size=d, item_count=item_count,
                     delta=delta, levels=tuple(levels), counts=counts, local=local,
                     shuffled=shuffled, mm=mm, sepmm=sepmm, sepmm_weights=weights,
                     ours=variants[OURS], ours_independent=variants[OURS_INDEPENDENT])


def _plan_ours(counts: tuple[int, ...], levels: tuple[float, ...], d: int, s: int,
               delta: float, grid: tuple[float, ...], mode: BlanketMode
               ) -> tuple[OursPoint, ...]:
    """The segmented protocol in one blanket mode: every swept m, then the optimizer's m*.

    The optimizer takes the independent blanket only up to m = d / 2 (a per-item
    rate of 1/2, the most variable Binomial blanket; past it the blanket grows
    more predictable); swept values above d / 2 are skipped in that mode.  A
    domain whose independent blanket would exceed the protocol's cap on messages
    per user (s + d > :data:`segshuffle.core.rules.MAX_MESSAGES_PER_USER`) has no
    independent variant at all: no points.
    """
    if mode is BlanketMode.INDEPENDENT and s + d > MAX_MESSAGES_PER_USER:
        return ()
    def point(result: OptimizationResult, optimal: bool) -> OursPoint:
        return OursPoint(m=result.m, lambdas=result.lambdas, mse_bound=result.mse_bound,
                         optimal=optimal, epsilons=result.epsilons,
                         ciphertexts=messages_per_user(s, result.m, d, mode))

    points = []
    for m in grid:
        if mode is BlanketMode.INDEPENDENT and m > d / 2:
            continue
        result = optimize(list(counts), levels, d, s, delta, blanket=m, lower_bounds=False,
                          blanket_mode=mode)
        points.append(point(result, optimal=False))
    best = optimize(list(counts), levels, d, s, delta, lower_bounds=False, blanket_mode=mode)
    points.append(point(best, optimal=True))
    return tuple(points)


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
    """One repeat of a panel: the squared error of every method.

    The segmented variants have one error per planned point (swept m, then m*).
    """
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
    for method, mode in OURS_MODES.items():
        measured = []
        for index, point in enumerate(plan.points(method)):
            rng = stream(seed, plan.key, repeat, _OURS_TAGS[method], index)
            counts = simulate_counts(holders, point.lambdas, point.m, rng, users=plan.n,
                                     mode=mode)
            estimate = estimate_frequencies(counts, list(plan.counts), point.lambdas, point.m,
                                            mode=mode)
            measured.append(_squared_error(estimate.values, truth, d_real))
        errors[method] = measured
    return errors

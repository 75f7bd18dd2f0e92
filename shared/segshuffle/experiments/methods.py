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
- ``ivw-sepmm-shuffle``: the same, averaged with inverse-variance weights
  1 / (V_k + s / n_k), V_k the expected summed squared error of level k's estimator
  (:func:`~segshuffle.experiments.calibration.expected_bib_mse`) and s / n_k a bound on
  the error of the level's users as a sample of the population
  (:func:`inverse_variance_weights`; public parameters only), normalised to sum to 1;
- ``share-sepmm-shuffle``: the same, averaged with the levels' shares n_k / n: the
  one combination that is unbiased whatever the levels have to do with the items
  (docs/protocol.md section 5.1), since w_j = sum_k (n_k / n) w_j^(k);
- ``ours``: the segmented protocol with the paper's slot blanket at each swept m
  (lambdas from the optimizer with m fixed), and at the optimizer's m*;
- ``ours-independent``: the segmented protocol with the independent blanket (each
  user sends each item as blanket with probability m / d; exact accounting), at
  each swept m <= d / 2 and at its own optimizer's m*; absent where s + d
  ciphertexts per user exceed the protocol's cap;
- ``ours-r<R>`` (planned on request, :func:`guarded_name`): the slot blanket at the
  optimizer's m* when it guards against correlation up to R
  (:mod:`segshuffle.core.correlation`); ``ours`` is R = 1.

Every (E, delta) above is a user-level guarantee on the server's full view:
the two segmented variants and the all-items balls-into-bins variant through
:mod:`segshuffle.core.accounting`; the single-message baselines (one-item
balls-into-bins, shuffled PrivSet) through single-message pairs that are proven
bounds for one message per user.

Planning (:func:`plan_panel`) runs every accountant search; it depends only on
public parameters (n, d, s, levels, shares, delta), never on the data.  Running
(:func:`run_repeat`) draws a population and one estimate per method, from random
streams keyed by (panel, repeat, method) so results do not depend on scheduling or
on which other methods run.  A :class:`~.correlated_levels.Correlation` makes the
strictest level go with the items (:mod:`~.correlated_levels`); every method then sees
the same population and levels, and its own random stream as at R = 1.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from ..core.blanket import BlanketMode, messages_per_user
from ..core.correlation import require_correlation_ratio
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
from .correlated_levels import NO_CORRELATION, Correlation, correlated_levels, uniform_levels
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
    "ivw-sepmm-shuffle",
    "share-sepmm-shuffle",
)
#: The SepMM baselines: how each combines the levels' estimates (PanelPlan weights).
SEPMM_BASELINES: tuple[str, ...] = BASELINES[3:]
#: The segmented protocol in each blanket mode: method name -> mode.
OURS_MODES: dict[str, BlanketMode] = {
    OURS: BlanketMode.SLOTS,
    OURS_INDEPENDENT: BlanketMode.INDEPENDENT,
}
OURS_METHODS: tuple[str, ...] = tuple(OURS_MODES)
METHODS: tuple[str, ...] = (*BASELINES, *OURS_METHODS)

#: Random-stream tag of each segmented variant (tags 1-4 are the baselines'; the SepMM
#: combinations share tag 4's estimates).
_OURS_TAGS: dict[str, int] = {OURS: 5, OURS_INDEPENDENT: 6}
#: Random-stream tag of the guarded variants (with R in thousandths after it).
_GUARDED_TAG = 7
GUARDED_PREFIX = "ours-r"


def guarded_name(ratio: float) -> str:
    """The method name of the slot blanket tuned for correlation up to R: ``ours-r3``."""
    return f"{GUARDED_PREFIX}{require_correlation_ratio(ratio):g}"


def guarded_ratio(method: str) -> float | None:
    """R of a ``ours-r<R>`` method name, None for any other name."""
    if not method.startswith(GUARDED_PREFIX):
        return None
    try:
        return require_correlation_ratio(float(method[len(GUARDED_PREFIX):]))
    except ValueError:
        return None


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
    bias_bound: float = 0.0  # the guarded variants': one item's worst bias at their R


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
    ivw_weights: tuple[float, ...] = ()
    share_weights: tuple[float, ...] = ()
    guarded: tuple[tuple[float, OursPoint], ...] = ()  # (R, the optimizer's m* at R)
    largest_share: float = 1.0  # the guarded variants' w_max

    def points(self, method: str) -> tuple[OursPoint, ...]:
        """The planned points of one segmented variant (``ours``, ``ours-independent`` or
        ``ours-r<R>``)."""
        if method == OURS:
            return self.ours
        if method == OURS_INDEPENDENT:
            return self.ours_independent
        ratio = guarded_ratio(method)
        for planned, point in self.guarded:
            if ratio is not None and planned == ratio:
                return (point,)
        raise ValueError(f"{method!r} is not a segmented variant of this plan")

    @property
    def guarded_methods(self) -> tuple[str, ...]:
        return tuple(guarded_name(ratio) for ratio, _ in self.guarded)

    @property
    def methods(self) -> tuple[str, ...]:
        """Every method this plan runs, baselines first."""
        return (*METHODS, *self.guarded_methods)

    def sepmm_combination(self, method: str) -> tuple[float, ...] | None:
        """The weights of a SepMM baseline (None: the plain mean)."""
        return {"sepmm-shuffle": None, "weighted-sepmm-shuffle": self.sepmm_weights,
                "ivw-sepmm-shuffle": self.ivw_weights,
                "share-sepmm-shuffle": self.share_weights}[method]


def paper_weight(n_k: int, level: float, domain_size: int, set_size: int,
                 delta: float) -> float:
    """The paper's weight of one level's estimator (before normalisation):

        1 / sqrt(d s^2 log(1/delta) / (n_k E_k)^2 + s / n_k).
    """
    d, s = domain_size, set_size
    return 1.0 / math.sqrt(d * s**2 * math.log(1.0 / delta) / (n_k * level) ** 2 + s / n_k)


def inverse_variance_weights(choices: tuple[BallsIntoBinsChoice, ...],
                             counts: tuple[int, ...], set_size: int) -> tuple[float, ...]:
    """omega_k proportional to 1 / (V_k + s / n_k), normalised (public parameters only).

    Level k's estimate targets its own users' shares w^(k), so against the population's
    shares w = sum_k (n_k / n) w^(k) a combination sum_k omega_k W^(k) (sum omega = 1)
    also carries the split of the users into levels.  For a uniformly random split of
    exact sizes its summed squared error is

        sum_k omega_k^2 V_k + T (sum_k omega_k^2 / n_k - 1 / n),
        T = (n / (n - 1)) sum_j w_j (1 - w_j) <= s (about; every user holds s items),

    V_k the expected summed squared error of level k's own estimator
    (:func:`~segshuffle.experiments.calibration.expected_bib_mse`).  With T bounded by s
    it is smallest at omega_k proportional to 1 / (V_k + s / n_k).
    """
    raw = [1.0 / (choice.expected_mse + set_size / n_k)
           for choice, n_k in zip(choices, counts, strict=True)]
    return tuple(w / math.fsum(raw) for w in raw)


def plan_panel(key: str, n: int, set_size: int, domain_size: int, item_count: int,
               shares: tuple[float, ...], grid: tuple[float, ...],
               levels: tuple[float, ...] = LEVELS, guards: tuple[float, ...] = (),
               largest_share: float = 1.0) -> PanelPlan:
    """Run every accountant search of one panel; ``guards`` lists the R > 1 whose guarded
    slot blanket is planned too (at most ``largest_share`` w_max of the users per item)."""
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
    guarded = tuple((ratio, _plan_guarded(counts, levels, d, s, delta, ratio, largest_share))
                    for ratio in sorted({require_correlation_ratio(r) for r in guards})
                    if ratio > 1.0)
    return PanelPlan(key=key, n=n, set_size=s, domain_size=d, item_count=item_count,
                     delta=delta, levels=tuple(levels), counts=counts, local=local,
                     shuffled=shuffled, mm=mm, sepmm=sepmm, sepmm_weights=weights,
                     ours=variants[OURS], ours_independent=variants[OURS_INDEPENDENT],
                     ivw_weights=inverse_variance_weights(sepmm, counts, s),
                     share_weights=tuple(c / n for c in counts), guarded=guarded,
                     largest_share=largest_share)


def _plan_guarded(counts: tuple[int, ...], levels: tuple[float, ...], d: int, s: int,
                  delta: float, ratio: float, largest_share: float) -> OursPoint:
    """The slot blanket at the optimizer's m* for correlation up to R."""
    result = optimize(list(counts), levels, d, s, delta, lower_bounds=False,
                      correlation_ratio=ratio, largest_share=largest_share)
    return OursPoint(m=result.m, lambdas=result.lambdas, mse_bound=result.mse_bound,
                     optimal=True, epsilons=result.epsilons,
                     ciphertexts=messages_per_user(s, result.m, d, BlanketMode.SLOTS),
                     bias_bound=result.bias_bound)


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
    return uniform_levels(counts, rng)


def _squared_error(estimate: np.ndarray, truth: np.ndarray, item_count: int) -> float:
    """sum over the real items (padding items excluded) of (W^_j - w_j)^2."""
    return float(np.sum((estimate[:item_count] - truth[:item_count]) ** 2))


def _balls_into_bins_estimate(config: BallsIntoBins, population: Population,
                              rng: np.random.Generator) -> np.ndarray:
    counts = config.sample_counts(population.items, rng)
    return config.estimate(counts, population.n)


@dataclass(frozen=True)
class RepeatOutcome:
    """One repeat of a panel.

    ``errors``: per method, the squared error of every planned point (segmented variants:
    swept m, then m*).  ``item_errors``: per method, W^_j - w_j over the real items at its
    headline point (baselines: their one estimate; segmented variants: m*), from which
    the runs' biases and their z-scores are computed.
    """

    errors: dict[str, list[float]]
    item_errors: dict[str, np.ndarray]


def run_repeat(plan: PanelPlan, source: DatasetSource, seed: int, repeat: int,
               correlation: Correlation = NO_CORRELATION) -> dict[str, list[float]]:
    """One repeat of a panel: the squared error of every method (:class:`RepeatOutcome`)."""
    return run_repeat_outcome(plan, source, seed, repeat, correlation).errors


def run_repeat_outcome(plan: PanelPlan, source: DatasetSource, seed: int, repeat: int,
                       correlation: Correlation = NO_CORRELATION) -> RepeatOutcome:
    """One repeat of a panel: every method's errors (:class:`RepeatOutcome`).

    The population and the levels come from the panel's data stream (the levels going
    with the items as ``correlation`` says); each method adds its own stream's noise.
    """
    data_rng = stream(seed, plan.key, repeat, 0)
    population = source.draw(plan.n, plan.set_size, data_rng)
    if population.domain_size != plan.domain_size:
        raise ValueError("the population's domain does not match the plan")
    levels = correlated_levels(plan.counts, population, correlation, data_rng)
    truth = population.frequencies()
    d_real = plan.item_count
    errors: dict[str, list[float]] = {}
    items: dict[str, np.ndarray] = {}

    def record(method: str, estimate: np.ndarray) -> None:
        difference = estimate[:d_real] - truth[:d_real]
        errors.setdefault(method, []).append(float(np.sum(difference**2)))
        items[method] = difference

    for tag, mech in ((1, plan.local), (2, plan.shuffled)):
        rng = stream(seed, plan.key, repeat, tag)
        record(BASELINES[tag - 1],
               mech.estimate(mech.sample_counts(population.items, rng), population.n))

    record("mm-shuffle", _balls_into_bins_estimate(plan.mm.config, population,
                                                   stream(seed, plan.key, repeat, 3)))

    group_estimates = []
    for k, choice in enumerate(plan.sepmm):
        group = population.subset(np.flatnonzero(levels == k))
        group_estimates.append(_balls_into_bins_estimate(
            choice.config, group, stream(seed, plan.key, repeat, 4, k)))
    stacked = np.vstack(group_estimates)
    for method in SEPMM_BASELINES:
        weights = plan.sepmm_combination(method)
        record(method, stacked.mean(axis=0) if weights is None
               else np.asarray(weights) @ stacked)

    holders = population.level_holders(levels, len(plan.levels))
    segmented = [(method, mode, _OURS_TAGS[method], plan.points(method))
                 for method, mode in OURS_MODES.items()]
    segmented += [(guarded_name(ratio), BlanketMode.SLOTS, (_GUARDED_TAG, round(1000 * ratio)),
                   (point,)) for ratio, point in plan.guarded]
    for method, mode, tag, points in segmented:
        errors[method] = []
        tags = tag if isinstance(tag, tuple) else (tag,)
        for index, point in enumerate(points):
            rng = stream(seed, plan.key, repeat, *tags, index)
            counts = simulate_counts(holders, point.lambdas, point.m, rng, users=plan.n,
                                     mode=mode)
            estimate = estimate_frequencies(counts, list(plan.counts), point.lambdas, point.m,
                                            mode=mode)
            record(method, estimate.values)
    return RepeatOutcome(errors=errors, item_errors=items)

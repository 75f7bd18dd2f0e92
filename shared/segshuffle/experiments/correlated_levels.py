"""Level assignments where the level a user picks goes with the items it holds.

The paper's experiments draw levels independently of the data: exactly n_k users at
level k, in a uniformly random order (:func:`~segshuffle.experiments.methods.assign_levels`).
A :class:`Correlation` makes the strictest level depend on the sets instead, with the
level counts unchanged:

- ``items``: the users holding any of the chosen items are *marked*; a marked user's odds
  of being strict are R times an unmarked one's (the review's setting: R = 3, item 0);
- ``sets``: the data-driven variant.  Every real item gets a sensitivity sigma_j in [0, 1],
  its rank by how many users of the population hold it (0 for the most held, 1 for the
  least held; padding items have 0), and a user's odds of being strict are R^u with u the
  mean sensitivity of its real items: users of rare items tend to be strict.

In both, every user's odds lie within a factor R of every other user's, so the holders of
any item and the other users differ in their odds of the strictest level by at most R: the
correlation class of docs/protocol.md section 5.1.

**Sampling.**  The n_1 strict users are a conditional Poisson sample: independent
Bernoulli(c u_i / (1 + c u_i)) draws for weights u_i, conditioned on exactly n_1 successes,
which gives every set S of n_1 users a probability proportional to prod_{i in S} u_i (so
the odds of any two users are in the ratio of their weights, exactly).  c is set so that
the expected count is n_1, and the draws are repeated until the count is exactly n_1: the
count has a standard deviation sigma of about sqrt(n / 5) here, so about 2.5 sigma draws
are needed on average (under 100 at 5,000 users); at most :data:`MAX_ATTEMPTS`.  The other
levels are assigned uniformly at random among the remaining users.  R = 1 uses the
independent assignment itself, so its random stream is the paper's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.correlation import require_correlation_ratio
from ..datasets.population import Population

MODES: tuple[str, ...] = ("items", "sets")

#: Bound on the conditional Poisson sampler's redraws (the expected number is about
#: 2.5 standard deviations of the count, under 300 at 50,000 users).
MAX_ATTEMPTS = 100_000


@dataclass(frozen=True)
class Correlation:
    """How levels go with items: ``mode`` (``items`` or ``sets``), the odds ratio R, and
    the chosen items of the ``items`` mode."""

    mode: str = "items"
    ratio: float = 1.0
    items: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"correlation mode must be one of {', '.join(MODES)}, "
                             f"got {self.mode!r}")
        require_correlation_ratio(self.ratio)
        if self.mode == "items" and not self.items:
            raise ValueError("the items mode needs at least one chosen item")
        if any(int(item) != item or item < 0 for item in self.items):
            raise ValueError("chosen items must be non-negative integers")

    @property
    def independent(self) -> bool:
        return self.ratio == 1.0

    @property
    def label(self) -> str:
        """``none`` at R = 1; otherwise e.g. ``items:3`` or ``sets:2``."""
        if self.independent:
            return "none"
        return f"{self.mode}:{self.ratio:g}"


NO_CORRELATION = Correlation()


def uniform_levels(counts: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Level indices with exactly counts[k] users at level k, in a uniformly random order."""
    levels = np.repeat(np.arange(len(counts)), counts)
    rng.shuffle(levels)
    return levels


def strict_weights(population: Population, correlation: Correlation) -> np.ndarray:
    """Each user's odds weight of being strict (1 .. R; module docstring)."""
    items = population.items
    ratio = correlation.ratio
    if correlation.mode == "items":
        chosen = np.asarray(correlation.items, dtype=np.int64)
        if chosen.max() >= population.item_count:
            raise ValueError(f"chosen item {int(chosen.max())} is not a real item of a "
                             f"population with {population.item_count}")
        marked = np.isin(items, chosen).any(axis=1)
        return np.where(marked, ratio, 1.0)
    real = population.item_count
    holders = np.bincount(items.ravel(), minlength=population.domain_size)[:real]
    order = np.argsort(-holders, kind="stable")  # most held first
    sensitivity = np.zeros(population.domain_size)
    sensitivity[order] = np.arange(real) / max(real - 1, 1)
    is_real = items < real
    counts = is_real.sum(axis=1)
    total = np.where(is_real, sensitivity[items], 0.0).sum(axis=1)
    mean = np.divide(total, counts, out=np.zeros(items.shape[0]), where=counts > 0)
    return ratio ** mean


def inclusion_probabilities(weights: np.ndarray, size: int) -> np.ndarray:
    """c u_i / (1 + c u_i) with c such that they sum to ``size`` (0 < size < n).

    The sum is increasing in c: bisection on log c over [-60, 60], 64 halvings (to about
    1e-17 of the bracket), so the expected count is ``size`` to rounding.
    """
    u = np.asarray(weights, dtype=float)
    low, high = -60.0, 60.0
    for _ in range(64):
        middle = 0.5 * (low + high)
        scale = math.exp(middle)
        if float(np.sum(scale * u / (1.0 + scale * u))) < size:
            low = middle
        else:
            high = middle
    scale = math.exp(0.5 * (low + high))
    return scale * u / (1.0 + scale * u)


def draw_conditional(probability: np.ndarray, size: int, rng: np.random.Generator
                     ) -> np.ndarray:
    """Independent Bernoulli(probability) draws, repeated until exactly ``size`` succeed."""
    n = probability.size
    for _ in range(MAX_ATTEMPTS):
        chosen = rng.random(n) < probability
        if int(chosen.sum()) == size:
            return chosen
    raise RuntimeError(f"no conditional Poisson sample of {size} in {MAX_ATTEMPTS} draws")


def conditional_poisson_sample(weights: np.ndarray, size: int,
                               rng: np.random.Generator) -> np.ndarray:
    """A boolean mask of exactly ``size`` users, P(S) proportional to prod_{i in S} u_i."""
    u = np.asarray(weights, dtype=float)
    n = u.size
    if not 0 <= size <= n:
        raise ValueError(f"cannot choose {size} of {n} users")
    if size in (0, n):
        return np.full(n, size == n)
    return draw_conditional(inclusion_probabilities(u, size), size, rng)


def correlated_levels(counts: tuple[int, ...], population: Population,
                      correlation: Correlation, rng: np.random.Generator) -> np.ndarray:
    """Level indices with exactly counts[k] users at level k, the strictest (index 0)
    going with the items as ``correlation`` says; R = 1 is :func:`uniform_levels`."""
    if correlation.independent:
        return uniform_levels(counts, rng)
    n = population.n
    if sum(counts) != n:
        raise ValueError("the level counts must add up to the population")
    strict = conditional_poisson_sample(strict_weights(population, correlation), counts[0], rng)
    levels = np.empty(n, dtype=np.int64)
    levels[strict] = 0
    rest = np.flatnonzero(~strict)
    levels[rest] = uniform_levels(tuple(counts[1:]), rng) + 1
    return levels

"""Round 1: the histogram of privacy levels (paper Algorithm 2, lines 1-5; docs/protocol.md 2).

By default levels are anonymised by the shuffler but not noised, so the
histogram is exact.  Optionally each user reports its level index through K-ary
randomized response with parameter eps_p, which is eps_p-LDP for the level:
the true index is kept with probability p = e^eps_p / (e^eps_p + K - 1) and any
other index is reported with probability q = 1 / (e^eps_p + K - 1).  One user's
report is :func:`~segshuffle.core.randomizers.randomize_level` (numpy-free, for
clients); this module holds the population-wide, vectorised side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .randomizers import keep_probability, randomize_level
from .validation import require_int, require_positive

__all__ = [
    "debias_histogram", "keep_probability", "level_histogram", "randomize_level",
    "randomize_levels",
]


def level_histogram(level_indices: Sequence[int] | np.ndarray, level_count: int) -> np.ndarray:
    """Counts n_1..n_K of level indices in ``range(level_count)``."""
    k = require_int("level count", level_count, 1)
    indices = np.asarray(level_indices, dtype=np.int64)
    if indices.size and (indices.min() < 0 or indices.max() >= k):
        raise ValueError(f"level indices must be in [0, {k})")
    return np.bincount(indices, minlength=k).astype(np.int64)


def randomize_levels(
    level_indices: np.ndarray, level_count: int, eps_p: float, rng: np.random.Generator
) -> np.ndarray:
    """Vectorised :func:`randomize_level` for a whole population."""
    k = require_int("level count", level_count, 1)
    indices = np.asarray(level_indices, dtype=np.int64)
    if k == 1:
        return indices.copy()
    keep = rng.random(indices.size) < keep_probability(eps_p, k)
    other = rng.integers(0, k - 1, size=indices.size)
    other = np.where(other < indices, other, other + 1)
    return np.where(keep, indices, other)


def debias_histogram(observed: Sequence[float] | np.ndarray, eps_p: float) -> np.ndarray:
    """Unbiased level counts from a randomized-response histogram, clipped at 0.

    With n reports, E[observed_k] = n_k p + (n - n_k) q, so
    n^_k = (observed_k - n q) / (p - q).  Clipping at 0 (docs/protocol.md section 2) makes the
    estimate slightly biased upwards for rare levels; the optimizer only needs it
    to be close.
    """
    counts = np.asarray(observed, dtype=float)
    k = counts.size
    if k == 1:
        return counts.copy()
    e = math.exp(require_positive("level privacy eps_p", eps_p))
    p = e / (e + k - 1)
    q = 1.0 / (e + k - 1)
    n = counts.sum()
    return np.clip((counts - n * q) / (p - q), 0.0, None)

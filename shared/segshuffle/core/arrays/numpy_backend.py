"""The numpy backend of :mod:`segshuffle.core.arrays`: numpy arrays and scipy's functions.

Vectors are numpy arrays (integer vectors are int64); each function is numpy's or scipy's,
elementwise.  The special functions are :mod:`segshuffle.core.distributions`', whose
tails carry a stated relative error.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager

import numpy as np
from scipy import special

from .. import distributions

__all__ = [
    "arange", "binom_cdf", "binom_pmf", "binom_sf", "binom_tails_range", "ceil_int", "clip",
    "concatenate", "floor_int", "half_tail", "isfinite", "largest", "maximum", "minimum",
    "poisson_tails", "quiet", "segment_totals", "take", "total", "vector", "where",
]

Vector = np.ndarray

isfinite = np.isfinite
maximum = np.maximum
minimum = np.minimum
where = np.where
clip = np.clip


def vector(values: Iterable[float]) -> np.ndarray:
    """A float vector of ``values``."""
    return np.asarray(list(values), dtype=float)


def arange(start: int, stop: int) -> np.ndarray:
    """The integers start, ..., stop - 1."""
    return np.arange(start, stop, dtype=np.int64)


def floor_int(x: np.ndarray) -> np.ndarray:
    """floor(x) as integers (x finite)."""
    return np.floor(x).astype(np.int64)


def ceil_int(x: np.ndarray) -> np.ndarray:
    """ceil(x) as integers (x finite)."""
    return np.ceil(x).astype(np.int64)


def total(x: np.ndarray) -> float:
    """The sum of the entries (numpy's pairwise summation)."""
    return float(np.sum(x))


def quiet() -> AbstractContextManager[object]:
    """Overflow and invalid operations give inf and nan silently (as Python's floats do
    where they do not raise)."""
    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def binom_pmf(k: np.ndarray, n: np.ndarray | int, p: float) -> np.ndarray:
    """Pr[Binomial(n, p) = k], elementwise (0 outside 0..n)."""
    return distributions.binom_pmf(k, n, p)


def binom_cdf(k: int | np.ndarray, n: int, p: float) -> float | np.ndarray:
    """Pr[Binomial(n, p) <= k]: a float for an integer k, elementwise over a vector."""
    value = distributions.binom_cdf(k, n, p)
    return value if isinstance(k, np.ndarray) else float(value)


def binom_sf(k: int | np.ndarray, n: int, p: float) -> float | np.ndarray:
    """Pr[Binomial(n, p) > k]: a float for an integer k, elementwise over a vector."""
    value = distributions.binom_sf(k, n, p)
    return value if isinstance(k, np.ndarray) else float(value)


def binom_tails_range(lo: int, hi: int, n: int, p: float) -> tuple[np.ndarray, np.ndarray]:
    """(Pr[Binomial(n, p) <= t], Pr[Binomial(n, p) > t]) for t = lo..hi."""
    t = np.arange(lo, hi + 1, dtype=np.int64)
    return distributions.binom_cdf(t, n, p), distributions.binom_sf(t, n, p)


def poisson_tails(k: np.ndarray, mean: float) -> distributions.Tails:
    """Pr[Poisson(mean) <= k] and Pr[Poisson(mean) > k] at the counts ``k`` (vectors), with
    a bound on their relative error (``lower``, ``upper``, ``rtol``)."""
    return distributions.poisson_tails(k, mean)


def largest(x: np.ndarray) -> float:
    """The largest entry."""
    return float(np.max(x))


def take(x: np.ndarray, indices: list[int]) -> np.ndarray:
    """The entries of x at ``indices``."""
    return x[np.asarray(indices, dtype=np.int64)]


def concatenate(parts: list[np.ndarray]) -> np.ndarray:
    """The vectors of ``parts`` end to end."""
    return np.concatenate(parts)


def segment_totals(x: np.ndarray, starts: list[int]) -> np.ndarray:
    """The sums of x[starts[i]:starts[i + 1]] (the last segment runs to the end);
    ``starts`` increasing from 0."""
    return np.add.reduceat(x, np.asarray(starts, dtype=np.int64))


def half_tail(trials: np.ndarray, k: np.ndarray) -> np.ndarray:
    """S_c(k) = Pr[Binomial(c, 1/2) >= k], elementwise; 1 for k <= 0, 0 for k > c.

    For 1 <= k <= c it is the regularized incomplete beta I_{1/2}(k, c - k + 1).
    """
    out = np.where(k <= 0, 1.0, 0.0)
    inside = (k >= 1) & (k <= trials)
    if inside.any():
        kk = k[inside].astype(float)
        cc = trials[inside].astype(float)
        out[inside] = special.betainc(kk, cc - kk + 1.0, 0.5)
    return out

"""Round 2 decoding: unbiased item frequencies and standard errors (docs/protocol.md section 2).

With C_j the number of decoded messages equal to item j, n2 round-2 participants
of whom n2_k chose level k, blanket rate m, Poisson rates lambda_k and d the
number of items of the (privacy) domain, the paper's estimator (Algorithm 2,
line 21) is

    W^_j = (C_j - n2 m / d) / sum_k n2_k lambda_k,

unbiased for the lambda-weighted share sum_i [j in x_i] lambda_{k_i} / sum_k n_k lambda_k,
which is the share w_j of users holding item j when items are independent of the
chosen levels (the paper's setting; exactly so on average over level choices).
The blanket correction n2 m / d is the same in both blanket modes
(:mod:`segshuffle.core.blanket`): each puts m / d blanket messages per user on
every item in expectation.  The variance is

    Var[C_j] = sum_k n2_k w_j lambda_k (1 - w_j lambda_k) + V_blanket,

    V_blanket = n2 ceil(m) (gamma/d)(1 - gamma/d)    (slots, gamma = m / ceil(m)),
    V_blanket = n2 (m/d)(1 - m/d)                    (independent),

(:func:`segshuffle.core.blanket.blanket_item_variance`), evaluated at the
plug-in w_j = clip(W^_j, 0, 1) (the first term uses the same w_j for every
level, which is exact when items are independent of levels).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .blanket import BlanketMode, blanket_item_variance


@dataclass(frozen=True)
class FrequencyEstimate:
    """Per-item estimates W^_j with their standard errors."""

    values: np.ndarray
    standard_errors: np.ndarray


def signal_weight(level_counts: Sequence[float], lambdas: Sequence[float]) -> float:
    """sum_k n_k lambda_k: the expected number of item messages per unit of frequency."""
    return math.fsum(float(n) * float(lam) for n, lam in zip(level_counts, lambdas, strict=True))


def estimate_frequencies(
    counts: Sequence[float] | np.ndarray,
    level_counts: Sequence[float],
    lambdas: Sequence[float],
    m: float,
    *,
    mode: str | BlanketMode = BlanketMode.SLOTS,
) -> FrequencyEstimate:
    """Unbiased W^ and standard errors from decoded item counts.

    ``counts`` has one entry per item of the domain (d = len(counts));
    ``level_counts`` are the n2_k of the round-2 participants; ``mode`` is the
    campaign's blanket mode, which only changes the blanket variance (module
    docstring).  In the independent mode m must not exceed d.
    """
    c = np.asarray(counts, dtype=float)
    d = c.size
    if d < 1:
        raise ValueError("counts must cover at least one item")
    n2 = math.fsum(float(n) for n in level_counts)
    weight = signal_weight(level_counts, lambdas)
    if weight <= 0.0:
        raise ValueError("no signal: every participating level has lambda = 0")
    values = (c - n2 * m / d) / weight
    w = np.clip(values, 0.0, 1.0)
    item_variance = np.zeros(d)
    for n_k, lam in zip(level_counts, lambdas, strict=True):
        item_variance += float(n_k) * w * lam * (1.0 - w * lam)
    blanket_variance = blanket_item_variance(n2, m, d, mode)
    errors = np.sqrt(item_variance + blanket_variance) / weight
    return FrequencyEstimate(values=values, standard_errors=errors)


def project_to_simplex(values: Sequence[float] | np.ndarray, total: float) -> np.ndarray:
    """Euclidean projection onto {0 <= w <= 1, sum w = total}: an optional post-processed
    estimate (the capped simplex).

    w_j is the share of users holding item j, so it lies in [0, 1], and every user holds
    exactly s items, so the shares sum to s.  Projecting the unbiased estimate onto that
    convex set, which contains the truth, never increases the squared error to it, at the
    price of bias.  The projection is w_j = clip(v_j - tau, 0, 1) with tau the root of
    g(tau) = sum_j clip(v_j - tau, 0, 1) - total, which is continuous and non-increasing
    in tau, positive at tau = min v - 1 and non-positive at tau = max v; tau is found by
    bisection to the last bit (at most 200 halvings).  Requires 0 <= total <= len(values).
    """
    v = np.asarray(values, dtype=float)
    if not 0 <= total <= v.size:
        raise ValueError(f"total must be in [0, {v.size}], got {total}")
    if v.size == 0:
        return v.copy()

    def excess(tau: float) -> float:
        return float(np.clip(v - tau, 0.0, 1.0).sum()) - total

    low, high = float(v.min()) - 1.0, float(v.max())
    for _ in range(200):
        middle = 0.5 * (low + high)
        if middle in (low, high):
            break
        if excess(middle) > 0.0:
            low = middle
        else:
            high = middle
    return np.clip(v - high, 0.0, 1.0)


def mse_bound(n: float, m: float, set_size: int, level_counts: Sequence[float],
              lambdas: Sequence[float]) -> float:
    """The paper's MSE bound (Section "Optimize Protocol Parameters"):

        sum_j E[(W^_j - w_j)^2] <= (n m + s sum_k n_k lambda_k) / (sum_k n_k lambda_k)^2.

    Infinite when no level sends any signal.
    """
    weight = signal_weight(level_counts, lambdas)
    if weight <= 0.0:
        return math.inf
    return (n * m + set_size * weight) / weight**2


def _blanket_term(n: float, m: float, domain_size: int, mode: str | BlanketMode) -> float:
    """d V_blanket, the blanket's share of the variance summed over items (0 without one)."""
    return domain_size * blanket_item_variance(n, m, domain_size, mode) if m > 0 else 0.0


def variance_given_data(n: float, m: float, set_size: int, level_counts: Sequence[float],
                        lambdas: Sequence[float], domain_size: int,
                        mode: str | BlanketMode = BlanketMode.SLOTS) -> float:
    """sum_j Var[W^_j | the data]: the error the estimator really has, summed over items.

    Given the users' sets, item j's count is its blanket count plus one
    Bernoulli(lambda_k) per holder at level k.  Summed over the d items, a user
    contributes s lambda_k (1 - lambda_k) (its s items) and the blanket
    d V_blanket (:func:`segshuffle.core.blanket.blanket_item_variance`), which is
    n m (1 - gamma / d) in the slot mode and n m (1 - m / d) in the independent one:

        V(m, lambda) = (d V_blanket + s sum_k n_k lambda_k (1 - lambda_k)) / (sum_k n_k lambda_k)^2.

    Unlike :func:`mse_bound` (which charges s lambda_k, not s lambda_k (1 - lambda_k))
    it does not favour lambda = 1 over a smaller blanket.  Infinite with no signal.
    """
    weight = signal_weight(level_counts, lambdas)
    if weight <= 0.0:
        return math.inf
    data = set_size * math.fsum(float(c) * float(lam) * (1.0 - float(lam))
                                for c, lam in zip(level_counts, lambdas, strict=True))
    blanket = _blanket_term(n, m, domain_size, mode)
    return (blanket + data) / weight**2


def mse_bound_floor(n: float, m: float, set_size: int, level_counts: Sequence[float],
                    largest: Sequence[float]) -> float:
    """The smallest :func:`mse_bound` over lambdas with lambda_k <= ``largest[k]``.

    With W = sum_k n_k lambda_k the bound is (n m + s W) / W^2, which falls as W grows
    (its derivative is -(s W + 2 n m) / W^3), so its smallest value is the bound itself at
    the largest lambdas.
    """
    return mse_bound(n, m, set_size, level_counts, largest)


def variance_floor(n: float, m: float, set_size: int, level_counts: Sequence[float],
                   known: Mapping[int, float], largest: Sequence[float], domain_size: int,
                   mode: str | BlanketMode = BlanketMode.SLOTS, *,
                   data: bool = True) -> float:
    """A value :func:`variance_given_data` is never below over lambdas that equal ``known``
    (level index -> lambda) where given and satisfy lambda_k <= ``largest[k]`` elsewhere
    (``largest`` holds the known values at their own levels):

        (d V_blanket + s sum_{k known} n_k lambda_k (1 - lambda_k)) / W_max^2,

    W_max = sum_k n_k largest_k: the other levels' data terms (each >= 0) are left out
    and the signal weight is taken at its largest.  ``data=False`` leaves out the known
    levels' data terms as well: a floor also for any lambdas at or below ``largest``
    everywhere (the correlation guard's capped ones).
    """
    weight = signal_weight(level_counts, largest)
    if weight <= 0.0:
        return math.inf
    terms = (float(level_counts[k]) * float(lam) * (1.0 - float(lam))
             for k, lam in known.items()) if data else ()
    blanket = _blanket_term(n, m, domain_size, mode)
    return (blanket + set_size * math.fsum(terms)) / weight**2

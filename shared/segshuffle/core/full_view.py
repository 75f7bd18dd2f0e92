"""Divergences of exhibited datasets' views, for lower bounds (docs/protocol.md, "Lower bounds").

A lower bound on the privacy of the protocol must be the divergence of a view
the server really gets for some pair of neighbouring datasets, or of a
post-processing of such a view (post-processing never increases a divergence).
The dataset exhibited here: the victim holds x or x' (disjoint), nobody else
holds any of those items, and the other users' data messages are deterministic
(they sit at levels with lambda = 1, as most levels do at the optimum).  The
blanket is the protocol's, from all ``n_slots`` slots of the accounted users
(the victim's own slots included).

**Aggregated pair** (slot blanket, gamma = 1).  Coarsen the server's view to
(a, b, T): the number of messages on the items of x, on those of x', and the
number of non-null messages T.  With every slot sending, T reveals how many
items j the victim sent, with j ~ Binomial(s, lambda) under both hypotheses, so

    delta(E) = sum_j Binom(s, lambda)(j) D_j(E),

where D_j is the divergence between (U0 + j, U1) and (U0, U1 + j) with
(U0, U1) ~ Multinomial(N; q, q), q = s r.  Conditioning on the blanket total
u = U0 + U1 ~ Binomial(N, 2q), U0 ~ Binomial(u, 1/2) and the likelihood ratio at
a = U0 + j is C(u, a - j) / C(u, a) = prod_{i<j} (a - i) / (u - a + j - i),
increasing in a; so the set where P > e^E Q is {a >= a*(u)} and

    D_j(E) = sum_u Bin(N, 2q)(u) [ S_u(a* - j) - e^E S_u(a*) ],   S_u(k) = Pr[Bin(u, 1/2) >= k].

For s = 1 this is lambda times the two-bin pair of
:mod:`segshuffle.core.hockey_stick` with lambda = 1: the exact full view.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special, stats

#: Standard deviations each side of the mean of the blanket total that are summed.
_WINDOW_SIGMAS = 12.0


@lru_cache(maxsize=1024)
def _total_window(n_slots: int, q2: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Totals u in a window, Binomial(n_slots, q2) pmf on them, and the mass outside."""
    if n_slots == 0 or q2 == 0.0:
        return np.array([0]), np.array([1.0]), 0.0
    law = stats.binom(n_slots, q2)
    mean = n_slots * q2
    sigma = math.sqrt(mean * (1.0 - q2))
    margin = _WINDOW_SIGMAS * sigma + _WINDOW_SIGMAS**2 + 2.0
    lo = max(0, math.floor(mean - margin))
    hi = min(n_slots, math.ceil(mean + margin))
    u = np.arange(lo, hi + 1)
    return u, law.pmf(u), float(law.cdf(lo - 1) + law.sf(hi))


def _log_ratio(a: np.ndarray, u: np.ndarray, shift: int) -> np.ndarray:
    """log C(u, a - j) / C(u, a) for j = ``shift`` <= a <= u (increasing in a)."""
    return (special.gammaln(a + 1.0) - special.gammaln(a - shift + 1.0)
            + special.gammaln(u - a + 1.0) - special.gammaln(u - a + shift + 1.0))


def _threshold(u: np.ndarray, shift: int, eps: float) -> np.ndarray:
    """a*(u): the smallest a in [j, u + 1] with log ratio > eps (u + 1: none inside)."""
    lo = np.full(u.shape, shift - 1, dtype=np.int64)  # ratio 0 below j: never in the set
    hi = u + 1  # past u, Q(a) = 0 < P(a): always in the set
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        inside = (mid >= shift) & (mid <= u)
        above = np.zeros(u.shape, dtype=bool)
        if inside.any():
            above[inside] = _log_ratio(mid[inside].astype(float), u[inside].astype(float),
                                       shift) > eps
        move_hi = (hi - lo > 1) & above
        move_lo = (hi - lo > 1) & ~above
        hi = np.where(move_hi, mid, hi)
        lo = np.where(move_lo, mid, lo)
    return hi


def _half_tail(trials: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Pr[Binomial(trials, 1/2) >= k] elementwise (1 for k <= 0, 0 for k > trials)."""
    out = np.where(k <= 0, 1.0, 0.0)
    inside = (k >= 1) & (k <= trials)
    if inside.any():
        kk = k[inside].astype(float)
        out[inside] = special.betainc(kk, trials[inside] - kk + 1.0, 0.5)
    return out


def aggregated_shift_delta(n_slots: int, q: float, shift: int, eps: float) -> float:
    """D_j(E) of the module docstring: (U0 + j, U1) against (U0, U1 + j), a lower bound.

    The mass of totals outside the summation window is left out, so the value
    never exceeds the exact divergence.
    """
    if shift == 0:
        return 0.0
    u, weights, _ = _total_window(n_slots, min(2.0 * q, 1.0))
    a_star = _threshold(u, shift, eps)
    terms = _half_tail(u, a_star - shift) - math.exp(eps) * _half_tail(u, a_star)
    return float(np.sum(weights * np.maximum(terms, 0.0)))


def slot_view_lower_delta(eps: float, lam: float, set_size: int, n_slots: int,
                          r: float) -> float:
    """sum_j Binom(s, lambda)(j) D_j(E): the gamma = 1 exhibited dataset's coarsened view."""
    weights = stats.binom.pmf(np.arange(set_size + 1), set_size, lam)
    return math.fsum(float(weights[j]) * aggregated_shift_delta(n_slots, set_size * r, j, eps)
                     for j in range(1, set_size + 1) if weights[j] > 0.0)

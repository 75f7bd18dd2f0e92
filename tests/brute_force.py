"""Plain 2-D enumeration of the count pair's hockey-stick divergence, for tests only.

Independent of the per-total reduction: it writes the multinomial pmf of the
blanket counts (B0, B1) directly and sums max(0, P - e^eps Q) over every (a, b).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln

from segshuffle.core.hockey_stick import CountPair


def multinomial_pmf(n_slots: int, r: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pr[B0 = a, B1 = b] for (B0, B1, rest) ~ Multinomial(N; r, r, 1 - 2r); 0 off support."""
    inside = (a >= 0) & (b >= 0) & (a + b <= n_slots)
    aa = np.where(inside, a, 0)
    bb = np.where(inside, b, 0)
    if r == 0.0:
        return np.where(inside & (aa + bb == 0), 1.0, 0.0)
    log_pmf = (gammaln(n_slots + 1) - gammaln(aa + 1) - gammaln(bb + 1)
               - gammaln(n_slots - aa - bb + 1) + (aa + bb) * math.log(r))
    rest = n_slots - aa - bb
    if 2.0 * r < 1.0:
        log_pmf = log_pmf + rest * math.log1p(-2.0 * r)
    else:
        log_pmf = np.where(rest == 0, log_pmf, -np.inf)
    return np.where(inside, np.exp(log_pmf), 0.0)


def pair_pmfs(pair: CountPair) -> tuple[np.ndarray, np.ndarray]:
    """P and Q as (N+2) x (N+2) arrays indexed by (a, b)."""
    size = pair.n_slots + 2
    a = np.arange(size)[:, None]
    b = np.arange(size)[None, :]
    rest = 1.0 - pair.own - pair.other

    def m(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return multinomial_pmf(pair.n_slots, pair.r, x, y)

    p = rest * m(a, b) + pair.own * m(a - 1, b) + pair.other * m(a, b - 1)
    q = rest * m(a, b) + pair.other * m(a - 1, b) + pair.own * m(a, b - 1)
    return p, q


def brute_force_delta(pair: CountPair, eps: float) -> float:
    p, q = pair_pmfs(pair)
    return float(np.maximum(p - math.exp(eps) * q, 0.0).sum())

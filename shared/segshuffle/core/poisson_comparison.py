"""A Poisson law that a binomial blanket total dominates, up to a stated slack.

The slot-blanket accountant (:mod:`segshuffle.core.accounting`) replaces the
multinomial blanket on 2j active bins by independent Poisson(mu) bins.  It needs

    eta = max_t ( F_B(t) - F_P(t) )_+,     B ~ Binomial(N, q),  P ~ Poisson(nu),

to be small, where F is a CDF: then for every non-increasing g with
0 <= g <= 1, E[g(B)] <= E[g(P)] + eta (Abel summation:
E[g(X)] = sum_t F_X(t) (g(t) - g(t + 1)) with g(t) - g(t + 1) >= 0 summing to at
most g(0) <= 1).  eta grows with nu (a Poisson law is stochastically increasing
in its mean), so the largest admissible nu is found by bisection.

A binomial has lighter tails than the Poisson law of the same mean, so nu must
sit somewhat below N q; the gap is a few standard deviations times q / 2.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special

#: Standard deviations each side of the means over which the CDFs are compared.
_SIGMAS = 14.0


def _window(trials: int, q: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Totals t where F_B is not negligible, F_B on them, and F_B just below them.

    Below the window F_B(t) <= F_B(lo - 1) (returned as the bound of the
    difference there); above it, up to ``trials``, F_B is within 1e-40 of 1 and
    the difference is at most the Poisson tail checked by the caller.
    """
    mean = trials * q
    sigma = math.sqrt(max(mean, 1.0))
    lo = max(0, math.floor(mean - _SIGMAS * sigma - 50))
    hi = min(trials, math.ceil(mean + _SIGMAS * sigma + 50))
    t = np.arange(lo, hi + 1, dtype=float)
    below = float(special.bdtr(lo - 1, trials, q)) if lo > 0 else 0.0
    return t, special.bdtr(t, trials, q), below


def _excess_on(t: np.ndarray, f_binomial: np.ndarray, below: float, nu: float) -> float:
    if nu <= 0.0:
        return 0.0
    excess = float(np.max(f_binomial - special.pdtr(t, nu)))
    # Past the window the binomial CDF is 1 (to 1e-40): the difference is the Poisson tail.
    tail = float(special.pdtrc(t[-1], nu)) + 1e-40
    return max(0.0, excess, tail, below)


def cdf_excess(trials: int, q: float, nu: float) -> float:
    """eta = max_t (F_Binomial(trials, q)(t) - F_Poisson(nu)(t))_+ over all t >= 0."""
    if trials <= 0 or q <= 0.0:
        return 0.0 if nu == 0.0 else float(special.pdtrc(0, nu))  # F_B = 1 everywhere
    return _excess_on(*_window(trials, q), nu)


@lru_cache(maxsize=4096)
def dominated_poisson_mean(trials: int, q: float, slack: float) -> tuple[float, float]:
    """(nu, eta): a nu within about 1e-4 relative of the largest with eta <= ``slack``.

    Returns eta = cdf_excess at the returned nu, verified on every t (at most
    ``slack``).  The bisection runs on every ``stride``-th total (the CDF
    difference is smooth in t), then the answer is checked on all totals and
    lowered until it passes.  nu = 0 always qualifies (eta = 0 there).
    """
    if trials <= 0 or q <= 0.0:
        return 0.0, 0.0
    t, f_binomial, below = _window(trials, q)
    stride = max(1, t.size // 256)
    coarse = (t[::stride], f_binomial[::stride], below)
    lo, hi = 0.0, trials * q
    if _excess_on(t, f_binomial, below, hi) <= slack:
        return hi, _excess_on(t, f_binomial, below, hi)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if _excess_on(*coarse, mid) <= slack:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-5 * hi:
            break
    step = 1e-4
    while (eta := _excess_on(t, f_binomial, below, lo)) > slack:
        lo *= 1.0 - step
        step *= 2.0
    return lo, eta

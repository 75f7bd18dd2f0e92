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


def _window_bounds(trials: int, q: float) -> tuple[int, int]:
    """Totals lo..hi within 14 standard deviations (plus 50) of the mean, clipped to the support."""
    mean = trials * q
    sigma = math.sqrt(max(mean, 1.0))
    lo = max(0, math.floor(mean - _SIGMAS * sigma - 50))
    hi = min(trials, math.ceil(mean + _SIGMAS * sigma + 50))
    return lo, hi


def _window(trials: int, q: float, stride: int = 1
            ) -> tuple[np.ndarray, np.ndarray, float]:
    """Totals t where F_B is not negligible (every ``stride``-th), F_B on them, F_B below them.

    Below the window F_B(t) <= F_B(lo - 1) (returned as the bound of the
    difference there); above it, up to ``trials``, F_B is within 1e-40 of 1 and
    the difference is at most the Poisson tail checked by the caller.
    """
    lo, hi = _window_bounds(trials, q)
    t = np.arange(lo, hi + 1, dtype=float)
    if stride > 1:
        t = np.append(t[::stride], t[-1])
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


def _largest_admissible(admissible, mean: float, q: float, precision: float) -> float:
    """Largest nu in [0, mean] (to ``precision`` times the gap) that is ``admissible``.

    The gap mean - nu is a few times q sqrt(mean); it is bracketed by doubling
    from that unit, then bisected.
    """
    if admissible(mean):
        return mean
    unit = max(q * math.sqrt(mean), 1e-9 * mean)
    gap = unit
    while gap < mean and not admissible(mean - gap):
        gap *= 2.0
    if gap >= mean:
        lo, hi = 0.0, mean - gap / 2.0
    else:
        lo, hi = mean - gap, mean - gap / 2.0 if gap > unit else mean
    while hi - lo > precision * max(gap, unit):
        mid = 0.5 * (lo + hi)
        if admissible(mid):
            lo = mid
        else:
            hi = mid
    return lo


#: Totals compared during the bisection (the answer is then verified on all of them).
_COARSE_POINTS = 256


@lru_cache(maxsize=4096)
def dominated_poisson_mean(trials: int, q: float, slack: float, *, verified: bool = True
                           ) -> tuple[float, float]:
    """(nu, eta): a nu within about 1e-4 relative of the largest with eta <= ``slack``.

    The bisection compares the CDFs at about 256 totals (the difference is
    smooth in t).  ``verified``: the answer is then checked on every total and
    lowered until it passes, and eta = cdf_excess at the returned nu, so the
    pair is a certified comparison.  Unverified answers (eta measured on the
    coarse totals only) are for steering searches, never for a published bound.
    nu = 0 always qualifies (eta = 0 there).
    """
    if trials <= 0 or q <= 0.0:
        return 0.0, 0.0
    lo, hi = _window_bounds(trials, q)
    points = _COARSE_POINTS if verified else _COARSE_POINTS // 4
    stride = max(1, (hi - lo + 1) // points)
    full = _window(trials, q) if verified else None
    if full is not None:  # subsample the full window rather than evaluate twice
        keep = np.append(np.arange(0, full[0].size, stride), full[0].size - 1)
        coarse = (full[0][keep], full[1][keep], full[2])
    else:
        coarse = _window(trials, q, stride)
    lo = _largest_admissible(lambda nu: _excess_on(*coarse, nu) <= slack, trials * q, q,
                             1e-3 if verified else 2e-2)
    if full is None:
        return lo, _excess_on(*coarse, lo)
    step = max(q * math.sqrt(trials * q), 1e-9 * trials * q) / 64.0
    while (eta := _excess_on(*full, lo)) > slack:
        lo = max(0.0, lo - step)
        step *= 2.0
    return lo, eta

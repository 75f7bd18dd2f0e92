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

**Rounding.**  eta is charged at an absolute precision far below the accountant's
relative margin (the slack is 1e-3 delta, 1e-11 at a million users), and at totals
above the means both CDFs are within 1e-9 of 1, so F_B(t) - F_P(t) is never formed
from two numbers near 1.  It equals S_P(t) - S_B(t) with S = 1 - F the upper tails,
and each tail comes with a bound on its relative error (rho_B, rho_P:
:mod:`segshuffle.core.distributions`).  At every t the excess is charged as the
smaller of

    F_B (1 + rho_B) - F_P (1 - rho_P)   and   S_P (1 + rho_P) - S_B (1 - rho_B),

each an upper bound on the exact difference, so the computed eta is never below the
exact one.  Below the window the difference is at most F_B(lo - 1), above it at most
S_P(hi), both widened alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from . import distributions
from .distributions import BINOMIAL_TAIL_RTOL

#: Standard deviations each side of the means over which the CDFs are compared.
_SIGMAS = 14.0


def _window_bounds(trials: int, q: float) -> tuple[int, int]:
    """Totals lo..hi within 14 standard deviations (plus 50) of the mean, clipped to the support."""
    mean = trials * q
    sigma = math.sqrt(max(mean, 1.0))
    lo = max(0, math.floor(mean - _SIGMAS * sigma - 50))
    hi = min(trials, math.ceil(mean + _SIGMAS * sigma + 50))
    return lo, hi


@dataclass(frozen=True)
class _Window:
    """Totals t where F_B is not negligible (every ``stride``-th), both binomial tails
    on them, and F_B just below them."""

    totals: np.ndarray
    lower: np.ndarray  #: F_B(t)
    upper: np.ndarray  #: S_B(t) = 1 - F_B(t)
    below: float  #: F_B(lo - 1)

    def subsampled(self, keep: np.ndarray) -> _Window:
        return _Window(self.totals[keep], self.lower[keep], self.upper[keep], self.below)


def _window(trials: int, q: float, stride: int = 1) -> _Window:
    """The comparison window of Binomial(trials, q) (:func:`_window_bounds`)."""
    lo, hi = _window_bounds(trials, q)
    t = np.arange(lo, hi + 1, dtype=float)
    if stride > 1:
        t = np.append(t[::stride], t[-1])
    below = distributions.binom_cdf(lo - 1, trials, q)
    return _Window(t, distributions.binom_cdf(t, trials, q),
                   distributions.binom_sf(t, trials, q), below)


def _excess_on(window: _Window, nu: float) -> float:
    """A certified upper bound on max_t (F_B(t) - F_P(t))_+ (module docstring)."""
    if nu <= 0.0:
        return 0.0
    poisson = distributions.poisson_tails(window.totals, nu)
    rho_b, rho_p = BINOMIAL_TAIL_RTOL, poisson.rtol
    via_lower = window.lower * (1.0 + rho_b) - poisson.lower * (1.0 - rho_p)
    via_upper = poisson.upper * (1.0 + rho_p) - window.upper * (1.0 - rho_b)
    excess = float(np.max(np.minimum(via_lower, via_upper)))
    above = float(poisson.upper[-1]) * (1.0 + rho_p)  # S_P(hi) bounds every t > hi
    return max(0.0, excess, above, window.below * (1.0 + rho_b))


def cdf_excess(trials: int, q: float, nu: float) -> float:
    """eta = max_t (F_Binomial(trials, q)(t) - F_Poisson(nu)(t))_+ over all t >= 0,
    widened by the tails' rounding bounds."""
    if trials <= 0 or q <= 0.0:  # F_B = 1 everywhere
        if nu == 0.0:
            return 0.0
        tails = distributions.poisson_tails(np.zeros(1), nu)
        return float(tails.upper[0]) * (1.0 + tails.rtol)
    return _excess_on(_window(trials, q), nu)


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


#: Candidate means and totals of one pass of :func:`steering_poisson_mean`.
_STEERING_GRID = 48


def steering_poisson_mean(trials: int, q: float, slack: float) -> tuple[float, float]:
    """(nu, eta) near the largest nu with eta <= ``slack``: for searches that only steer.

    Never certified: the tails are Cephes' ``bdtr``/``pdtr`` family, whose relative
    error is far beyond the accountant's margins in the tails of large means (module
    docstring of :mod:`segshuffle.core.distributions`), and the CDFs are compared at
    48 totals.  In exchange it costs two array evaluations instead of a bisection:
    48 candidate gaps below the mean on a geometric grid, then 48 inside the best cell.
    """
    if trials <= 0 or q <= 0.0:
        return 0.0, 0.0
    mean = trials * q
    lo, hi = _window_bounds(trials, q)
    totals = np.unique(np.linspace(lo, hi, _STEERING_GRID).round())
    binomial_cdf = special.bdtr(totals, trials, min(q, 1.0))
    binomial_sf = special.bdtrc(totals, trials, min(q, 1.0))

    def excess(nus: np.ndarray) -> np.ndarray:
        poisson_cdf = special.pdtr(totals[None, :], nus[:, None])
        poisson_sf = special.pdtrc(totals[None, :], nus[:, None])
        gap = np.minimum(binomial_cdf[None, :] - poisson_cdf, poisson_sf - binomial_sf[None, :])
        return np.maximum(gap.max(axis=1), poisson_sf[:, -1])

    unit = max(q * math.sqrt(mean), 1e-9 * mean)
    gaps = np.concatenate(([0.0], unit * np.geomspace(1e-2, max(mean / unit, 2e-2),
                                                       _STEERING_GRID - 1)))
    nus = np.maximum(mean - gaps, 0.0)
    admissible = np.flatnonzero(excess(nus) <= slack)
    if admissible.size == 0:
        return 0.0, 0.0
    first = int(admissible[0])
    if first == 0:
        return mean, float(excess(nus[:1])[0])
    finer = np.linspace(nus[first], nus[first - 1], _STEERING_GRID)
    values = excess(finer)
    best = int(np.flatnonzero(values <= slack).max())
    return float(finer[best]), float(values[best])


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
    if not slack >= 0.0:  # the verification below lowers nu until eta <= slack
        raise ValueError(f"the Poisson slack must be a number >= 0, got {slack!r}")
    if trials <= 0 or q <= 0.0:
        return 0.0, 0.0
    lo, hi = _window_bounds(trials, q)
    points = _COARSE_POINTS if verified else _COARSE_POINTS // 4
    stride = max(1, (hi - lo + 1) // points)
    full = _window(trials, q) if verified else None
    if full is not None:  # subsample the full window rather than evaluate twice
        keep = np.append(np.arange(0, full.totals.size, stride), full.totals.size - 1)
        coarse = full.subsampled(keep)
    else:
        coarse = _window(trials, q, stride)
    lo = _largest_admissible(lambda nu: _excess_on(coarse, nu) <= slack, trials * q, q,
                             1e-3 if verified else 2e-2)
    if full is None:
        return lo, _excess_on(coarse, lo)
    step = max(q * math.sqrt(trials * q), 1e-9 * trials * q) / 64.0
    while (eta := _excess_on(full, lo)) > slack:
        lo = max(0.0, lo - step)
        step *= 2.0
    return lo, eta

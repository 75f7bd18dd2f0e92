"""A Poisson law that a binomial blanket total dominates, up to a stated slack.

This is the numpy-free port of the accountant that light client installs use to verify a
server's privacy parameters; ``tests/test_portable_accountant*.py`` keep it equal to the
JavaScript and numpy accountants.

The revealed-send bound of the slot blanket replaces the multinomial blanket on 2j active
bins by independent Poisson(nu) bins.  It needs

    eta = max_t (F_B(t) - F_P(t))_+,   B ~ Binomial(N, q),  P ~ Poisson(nu),

to be small (F a CDF): then for every non-increasing g with 0 <= g <= 1,
E[g(B)] <= E[g(P)] + eta, by Abel summation: E[g(X)] = sum_t F_X(t) (g(t) - g(t + 1))
with non-negative differences that sum to at most g(0) <= 1.  eta grows with nu (a
Poisson law is stochastically increasing in its mean), so the largest admissible nu is
found by bisection.  A binomial has lighter tails than the Poisson law of the same mean,
so nu sits a few standard deviations times q / 2 below N q.

**Rounding.**  eta must hold to an absolute precision far below the accountant's relative
margin (the slack is 1e-3 delta), and above the means both CDFs are close to 1, so the
difference is never formed from two numbers near 1: it equals S_P(t) - S_B(t) with
S = 1 - F the upper tails.  Each tail comes with a bound on its relative error (rho_B,
rho_P), and the excess at t is charged as the smaller of

    F_B (1 + rho_B) - F_P (1 - rho_P)   and   S_P (1 + rho_P) - S_B (1 - rho_B),

each an upper bound on the exact difference, so the computed eta is never below the exact
one.  Below the window the difference is at most F_B(lo - 1), above it at most S_P(hi),
both widened alike.  rho_B is the bound the numpy accountant states for its binomial tails
(1e-10; these are within ~1e-13), so both charge the same eta.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..bounded_cache import key_of, registered_cache
from .distributions import binom_cdf, binom_tails_range, poisson_tails

__all__ = ["BINOMIAL_TAIL_RTOL", "dominated_poisson_mean"]

#: Standard deviations each side of the means over which the CDFs are compared.
_SIGMAS = 14.0

#: The relative error charged on a binomial tail (module docstring).
BINOMIAL_TAIL_RTOL = 1e-10

#: Totals compared during the bisection (the answer is then verified on all of them).
_COARSE_POINTS = 256


def _window_bounds(trials: int, q: float) -> tuple[int, int]:
    """Totals lo..hi within 14 standard deviations (plus 50) of the mean, clipped to the
    support."""
    mean = trials * q
    sigma = math.sqrt(max(mean, 1.0))
    lo = max(0, math.floor(mean - _SIGMAS * sigma - 50))
    hi = min(trials, math.ceil(mean + _SIGMAS * sigma + 50))
    return lo, hi


@dataclass(frozen=True, slots=True)
class _ComparedTotals:
    """Totals compared (increasing), F_B (``lower``) and S_B = 1 - F_B (``upper``) on them,
    and ``below`` = F_B(lo - 1), a bound on the difference below the window."""

    t: list[int]
    lower: list[float]
    upper: list[float]
    below: float


def _full_window(trials: int, q: float) -> _ComparedTotals:
    """Every total of the window, with both binomial tails there."""
    lo, hi = _window_bounds(trials, q)
    tails = binom_tails_range(lo, hi, trials, q)
    return _ComparedTotals(list(range(lo, hi + 1)), tails.lower, tails.upper,
                           binom_cdf(lo - 1, trials, q))


def _excess_on(totals: _ComparedTotals, nu: float) -> float:
    """A certified upper bound on max_t (F_B(t) - F_P(t))_+ (module docstring)."""
    if nu <= 0.0:
        return 0.0
    poisson = poisson_tails(totals.t, nu)
    rho_b = BINOMIAL_TAIL_RTOL
    rho_p = poisson.rtol
    up_b = 1.0 + rho_b
    down_b = 1.0 - rho_b
    up_p = 1.0 + rho_p
    down_p = 1.0 - rho_p
    excess = max(
        (min(b_lower * up_b - p_lower * down_p, p_upper * up_p - b_upper * down_b)
         for b_lower, b_upper, p_lower, p_upper
         in zip(totals.lower, totals.upper, poisson.lower, poisson.upper, strict=True)),
        default=-math.inf,
    )
    above = poisson.upper[len(totals.t) - 1] * up_p  # S_P(hi) bounds every t > hi
    return max(0.0, excess, above, totals.below * up_b)


def _largest_admissible(admissible: Callable[[float], bool], mean: float, q: float,
                        precision: float) -> float:
    """The largest nu in [0, mean] (to ``precision`` times the gap) that is ``admissible``.

    The gap mean - nu, a few times q sqrt(mean), is bracketed by doubling from that unit,
    then bisected.
    """
    if admissible(mean):
        return mean
    unit = max(q * math.sqrt(mean), 1e-9 * mean)
    gap = unit
    while gap < mean and not admissible(mean - gap):
        gap *= 2.0
    if gap >= mean:
        lo = 0.0
        hi = mean - gap / 2.0
    else:
        lo = mean - gap
        hi = mean - gap / 2.0 if gap > unit else mean
    while hi - lo > precision * max(gap, unit):
        mid = 0.5 * (lo + hi)
        if admissible(mid):
            lo = mid
        else:
            hi = mid
    return lo


_dominated_cache = registered_cache(4096)


def dominated_poisson_mean(trials: int, q: float, slack: float) -> tuple[float, float]:
    """(nu, eta): nu within about 1e-4 relative of the largest with eta <= ``slack``, and
    eta the excess at that nu, verified on every total of the window (nu = 0 always
    qualifies).

    The bisection compares the CDFs at about 256 totals (the difference is smooth in t);
    its answer is then checked on every total and lowered until it passes.  Cached.
    """
    return _dominated_cache.get(key_of(trials, q, slack),
                                lambda: _dominated(trials, q, slack))


def _dominated(trials: int, q: float, slack: float) -> tuple[float, float]:
    if trials <= 0 or q <= 0.0:
        return 0.0, 0.0
    lo, hi = _window_bounds(trials, q)
    stride = max(1, (hi - lo + 1) // _COARSE_POINTS)
    full = _full_window(trials, q)
    # Subsample the full window rather than evaluate twice.
    keep = [*range(0, len(full.t), stride), len(full.t) - 1]
    coarse = _ComparedTotals([full.t[i] for i in keep], [full.lower[i] for i in keep],
                             [full.upper[i] for i in keep], full.below)
    nu = _largest_admissible(lambda value: _excess_on(coarse, value) <= slack, trials * q, q,
                             1e-3)
    step = max(q * math.sqrt(trials * q), 1e-9 * trials * q) / 64.0
    eta = _excess_on(full, nu)
    while eta > slack:
        nu = max(0.0, nu - step)
        step *= 2.0
        eta = _excess_on(full, nu)
    return nu, eta

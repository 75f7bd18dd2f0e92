"""Hockey-stick divergence of the two-bin count pair, evaluated per total count.

This is the numpy-free port of the accountant that light client installs use to verify a
server's privacy parameters; ``tests/test_portable_accountant*.py`` keep it equal to the
JavaScript and numpy accountants.

A count pair is (N, r, own, other): N blanket trials each land on the victim's item j0
with probability r and on j1 with probability r; the victim's message lands on its own
item with probability ``own`` and on the other one with probability ``other``.  With
(B0, B1) the blanket counts and (D0, D1) the victim's contribution,

    P = (B0 + D0, B1 + D1),   Q = (B0 + D1, B1 + D0),
    delta(eps) = D_{e^eps}(P || Q) = sum_{a,b} max(0, P(a, b) - e^eps Q(a, b)).

The Poisson randomizer with the slot blanket is own = lambda, other = 0, with
N = h ceil(m) - 1 slots and r = gamma / d.

**Per total.**  Given t = a + b, write w0(t) for the Binomial(N, 2r) mass at t and w1(t)
for the same at t - 1.  The blanket's share of a is then Binomial(t, 1/2), and after
dividing by w0(t) C(t, a) / 2^t,

    P ~ K0 + c (own a + other b),   Q ~ K0 + c (other a + own b),
    K0 = 1 - own - other,           1 / c = rho (N - t + 1),  rho = r / (1 - 2r).

P / Q grows with a, so P > e^eps Q exactly for a >= a*(t), the smallest integer above

    x(t) = [K0 (e^eps - 1) rho (N - t + 1) + t (e^eps own - other)]
           / ((own - other) (1 + e^eps)).

With S_c(k) = Pr[Binomial(c, 1/2) >= k] the per-total masses of {a >= a*} are

    P_t = K0 w0 S_t(a*) + own w1 S_{t-1}(a* - 1) + other w1 S_{t-1}(a*),
    Q_t = K0 w0 S_t(a*) + other w1 S_{t-1}(a* - 1) + own w1 S_{t-1}(a*),

and delta(eps) = sum_t (P_t - e^eps Q_t).

**Truncation.**  Only totals within 9.5 standard deviations (plus a skew margin) of the
mean are summed.  An omitted total contributes at most K0 w0(t) + (own + other) w1(t), so
that binomial mass, weighted the same way, is added: the result is an upper bound on the
exact divergence up to the rounding of the terms (~1e-13 relative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .cache import key_of, registered_cache
from .distributions import binom_cdf, binom_pmf, binom_sf, compensated_sum, half_tail
from .errors import AccountantError

__all__ = ["CountPair", "PairWindow", "delta_for", "pair_window", "poisson_pair"]

#: Standard deviations each side of the mean spanned by the summation window (plus a skew
#: margin); the binomial mass outside, below 1e-20, is added to the result.
_WINDOW_SIGMAS = 9.5


@dataclass(frozen=True, slots=True)
class CountPair:
    """The count pair (module docstring).

    ``n_slots`` is N, the blanket trials that may land on the two items; ``r`` the chance
    that one trial lands on j0 (the same for j1); ``own`` the chance that the victim's
    message lands on its own item and ``other`` that it lands on the other item.
    """

    n_slots: int
    r: float
    own: float
    other: float


def poisson_pair(lam: float, n_slots: int, r: float) -> CountPair:
    """The pair of the Poisson randomizer with rate ``lam`` and the slot blanket (own = lambda)."""
    if not (lam >= 0 and lam <= 1):
        raise AccountantError(f"lambda must be in [0, 1], got {lam}")
    if n_slots < 0:
        raise AccountantError(f"n_slots must be >= 0, got {n_slots}")
    if not (r >= 0 and r <= 0.5):
        raise AccountantError(f"r must be in [0, 1/2], got {r}")
    return CountPair(n_slots, r, lam, 0.0)


@dataclass(frozen=True, slots=True)
class PairWindow:
    """The summation window of :func:`pair_window`.

    ``t`` holds the totals lo..hi, ``w0`` the Binomial(N, 2r) masses at t and ``w1`` the
    same at t - 1; ``omitted0`` and ``omitted1`` are the w0 and w1 masses outside the
    window, and ``rho_slack`` holds rho (N - t + 1).
    """

    t: list[int]
    w0: list[float]
    w1: list[float]
    omitted0: float
    omitted1: float
    rho_slack: list[float]


_window_cache = registered_cache(256)


def pair_window(n_slots: int, r: float) -> PairWindow:
    """The summation window and weights of Binomial(N, 2r), cached per (N, r).

    Totals range over 0..N+1 (the victim may add one); the mass outside the window is
    computed from the binomial tails.
    """
    return _window_cache.get(key_of(n_slots, r), lambda: _make_window(n_slots, r))


def _make_window(n_slots: int, r: float) -> PairWindow:
    trials = n_slots
    prob = 2.0 * r
    if trials == 0 or prob == 0.0:
        # No blanket mass lands on j0 or j1: the totals are 0 and 1.
        lo = 0
        hi = 1
        w0 = [1.0, 0.0]
        w1 = [0.0, 1.0]
        omitted0 = 0.0
        omitted1 = 0.0
    else:
        mean = trials * prob
        sigma = math.sqrt(trials * prob * (1.0 - prob))
        margin = _WINDOW_SIGMAS * sigma + _WINDOW_SIGMAS**2 + 2.0
        lo = max(0, math.floor(mean - margin))
        hi = min(trials + 1, math.ceil(mean + margin) + 1)
        size = hi - lo + 1
        pmf = [binom_pmf(k, trials, prob) for k in range(lo - 1, lo + size)]
        w0 = pmf[1:]
        w1 = pmf[:size]
        omitted0 = binom_cdf(lo - 1, trials, prob) + binom_sf(hi, trials, prob)
        omitted1 = binom_cdf(lo - 2, trials, prob) + binom_sf(hi - 1, trials, prob)
    t = list(range(lo, hi + 1))
    rho = r / (1.0 - prob) if prob < 1.0 else math.inf
    rho_slack = []
    for total in t:
        remaining = trials - total + 1
        rho_slack.append(0.0 if remaining == 0 else rho * remaining)
    return PairWindow(t, w0, w1, omitted0, omitted1, rho_slack)


def _exp(x: float) -> float:
    """e^x, +inf where it overflows (as in JavaScript)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def delta_for(pair: CountPair, eps: float) -> float:
    """delta(eps) = D_{e^eps}(P || Q) of the count pair (module docstring).

    The sum over the window plus the omitted mass: an upper bound on the exact divergence.
    ``eps`` must be >= 0.
    """
    inside, omitted = _window_sum(pair, eps)
    return inside + omitted


def window_delta(pair: CountPair, eps: float) -> float:
    """The window's part of :func:`delta_for`, without the omitted mass: a lower bound on
    the pair's exact divergence, up to the rounding of its terms."""
    return _window_sum(pair, eps)[0]


def _window_sum(pair: CountPair, eps: float) -> tuple[float, float]:
    """(sum of the window's terms, the omitted mass that bounds every term outside it)."""
    if not eps >= 0:
        raise AccountantError(f"eps must be >= 0, got {eps}")
    own = pair.own
    other = pair.other
    if own <= other:  # identical distributions
        return 0.0, 0.0
    window = pair_window(pair.n_slots, pair.r)
    e = _exp(eps)
    k0 = max(0.0, 1.0 - own - other)
    denominator = (own - other) * (1.0 + e)
    slope = e * own - other
    one_plus_e = 1.0 + e
    k0_scale = k0 * (e - 1.0)
    isfinite = math.isfinite
    floor = math.floor
    ceil = math.ceil
    terms = []
    append = terms.append
    for t, w0, w1, rho_slack in zip(window.t, window.w0, window.w1, window.rho_slack,
                                    strict=True):
        if k0 == 0.0 and other == 0.0:
            # Every message is the victim's or the blanket's: x = t - t / (1 + e), so
            # a* = t + 1 - ceil(t / (1 + e)) <= t exactly, also where e / (1 + e) rounds to 1.
            a_star = t + 1 - ceil(t / one_plus_e)
        else:
            # A threshold beyond every a (rho = inf, or overflow) empties the set for that t.
            base = k0_scale * rho_slack if k0 > 0.0 else 0.0
            x = (base + t * slope) / denominator
            a_star = min(max(floor(x) + 1, 0), t + 1) if isfinite(x) else t + 1
        # S_{t-1}(a*) from the tail sums, S_{t-1}(a* - 1) by adding the mass at a* - 1, and
        # S_t(a*) by Pascal's rule as the mean of the two: sums of non-negative terms only.
        previous = max(t - 1, 0)
        s_prev_hi = half_tail(previous, a_star)
        s_prev_lo = min(s_prev_hi + binom_pmf(a_star - 1, previous, 0.5), 1.0)
        s_t = (1.0 if a_star <= 0 else 0.0) if t == 0 else 0.5 * (s_prev_lo + s_prev_hi)
        shared = k0 * w0 * s_t
        p_t = shared + w1 * (own * s_prev_lo + other * s_prev_hi)
        q_t = shared + w1 * (other * s_prev_lo + own * s_prev_hi)
        append(max(p_t - e * q_t, 0.0))
    omitted = k0 * window.omitted0 + (own + other) * window.omitted1
    return compensated_sum(terms), omitted

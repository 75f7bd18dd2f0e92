"""Hockey-stick divergence of the variation-ratio count pair, evaluated per total count.

The variation-ratio reduction (paper Theorem "Variation-ratio reduction", and its
random-number-blanket and Poisson-randomizer extensions) bounds the privacy of a
shuffled protocol by the divergence between two distributions on pairs of counts.
In the form used here, a *count pair* is described by

- ``n_slots`` = N: the number of blanket trials that may land on the victim's two
  candidate items j0 and j1,
- ``r``: the probability that one trial lands on j0 (the same for j1), so the
  blanket counts (B0, B1) are multinomial(N; r, r),
- ``own`` and ``other``: the probabilities that the victim's message lands on its
  own item and on the other one (the rest, 1 - own - other, lands elsewhere).

With (D0, D1) the victim's contribution,

    P = (B0 + D0, B1 + D1),   Q = (B0 + D1, B1 + D0),

and the guarantee is delta(eps) = D_{e^eps}(P || Q) = sum_{a,b} max(0, P(a,b) - e^eps Q(a,b)).

Two instances matter:

- the Poisson randomizer with a random-number blanket (docs/protocol.md section 4; paper Lemma
  "Poisson reduction" with p = +inf, beta = lambda, q = d lambda and Theorem
  "random-number blanket"): ``own = lambda``, ``other = 0``, N = n ceil(m) - 1,
  r = gamma / d;
- a general eps0-LDP randomizer with the (p, beta, q) variation-ratio parameters:
  ``own = p alpha``, ``other = alpha`` with alpha = beta / (p - 1), N = n - 1,
  r = p alpha / q (the variation-ratio paper's Theorem 4.2 / Proposition I.1).

**Per-total evaluation.** Conditioning on t = a + b, write w0(t) for the
Binomial(N, 2r) pmf at t and w1(t) for the same at t - 1.  Given t, the blanket
part of a is Binomial(t, 1/2), and dividing P(a, t - a) by w0(t) C(t, a) / 2^t gives

    P ~ K0 + c (own a + other b),    Q ~ K0 + c (other a + own b),
    K0 = 1 - own - other,            1 / c = rho (N - t + 1),  rho = r / (1 - 2r),

because w1(t) / w0(t) * 2 / t = 1 / (rho (N - t + 1)).  P/Q increases with a, so
P > e^eps Q exactly for a >= a*(t), the smallest integer above

    x(t) = [K0 (e^eps - 1) rho (N - t + 1) + t (e^eps own - other)]
           / ((own - other) (1 + e^eps)).

With S_c(k) = Pr[Binomial(c, 1/2) >= k] the per-t masses of the set a >= a* are

    P_t = K0 w0(t) S_t(a*) + own w1(t) S_{t-1}(a* - 1) + other w1(t) S_{t-1}(a*)
    Q_t = K0 w0(t) S_t(a*) + other w1(t) S_{t-1}(a* - 1) + own w1(t) S_{t-1}(a*)

and delta(eps) = sum_t (P_t - e^eps Q_t).  For own = lambda, other = 0 this is the
formula of docs/protocol.md section 4 (there u = c lambda / (1 - lambda)).  By the symmetry
of the pair, D_{e^eps}(Q || P) is the same number.

**Truncation.** Only totals in a window around the mean 2rN are summed.  Each
omitted per-t term is at most K0 w0(t) + (own + other) w1(t), so the omitted
binomial mass, weighted that way, is added to the result: the returned value is
an upper bound on the exact divergence (up to floating-point rounding of the
terms, which is relative to the mass involved, ~1e-13).

**One implementation.**  The server's optimizer and every Python client evaluate the pair
with this module: its vectors are numpy's where numpy is installed and lists otherwise
(:mod:`segshuffle.core.arrays`), the same formulas either way.  The web client's
JavaScript accountant is its port (``clients/web/src/accountant/hockey_stick.js``), held
equal to it by the test vectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import arrays
from .bounded_cache import key_of, registered_cache
from .errors import AccountantError
from .scalar_search import bracketed_root

__all__ = [
    "EPSILON_CAP",
    "CountPair",
    "SummationWindow",
    "clear_caches",
    "delta_for",
    "epsilon_for",
    "poisson_pair",
    "summation_window",
    "variation_ratio_pair",
    "window_delta",
    "window_terms",
]

#: Largest item-level epsilon any search considers.  e^eps has lost the
#: precision the divergence needs well before eps ~ 36 (docs/protocol.md section 4).
EPSILON_CAP = 30.0

#: Standard deviations on each side of the mean that the summation window spans
#: (plus a skew margin); the binomial mass outside, below 1e-20, is added to the result.
_WINDOW_SIGMAS = 9.5


@dataclass(frozen=True, slots=True)
class CountPair:
    """The count pair (P, Q) of the variation-ratio reduction (see the module docstring)."""

    n_slots: int
    r: float
    own: float
    other: float = 0.0

    def __post_init__(self) -> None:
        if not self.n_slots >= 0:
            raise AccountantError(f"n_slots must be >= 0, got {self.n_slots}")
        if not 0.0 <= self.r <= 0.5:
            raise AccountantError(f"r must be in [0, 1/2], got {self.r}")
        if not (0.0 <= self.other <= self.own and self.own + self.other <= 1.0 + 1e-15):
            raise AccountantError(
                f"need 0 <= other <= own and own + other <= 1, got own={self.own}, "
                f"other={self.other}"
            )


def poisson_pair(lam: float, n_slots: int, r: float) -> CountPair:
    """The p = +inf pair of the Poisson randomizer with rate ``lam`` (docs/protocol.md sec. 4)."""
    if not 0.0 <= lam <= 1.0:
        raise AccountantError(f"lambda must be in [0, 1], got {lam}")
    return CountPair(n_slots=int(n_slots), r=float(r), own=float(lam), other=0.0)


def variation_ratio_pair(p: float, beta: float, q: float, n_users: int) -> CountPair:
    """The pair P^{q,n}_{p,beta}, Q^{q,n}_{p,beta} of the variation-ratio reduction.

    Parameters follow the paper's Theorem "Variation-ratio reduction": p > 1
    (``math.inf`` allowed), beta in [0, (p - 1)/(p + 1)], q >= 1, n users.  Then
    alpha = beta / (p - 1), the victim's message is on its own item with
    probability p alpha = beta p / (p - 1) and on the other with alpha, and each
    of the n - 1 other users lands on either item with probability
    r = beta p / ((p - 1) q).  For p = +inf: own = beta, other = 0, r = beta / q.
    """
    if not p > 1.0:
        raise AccountantError(f"p must be > 1, got {p}")
    if q < 1.0:
        raise AccountantError(f"q must be >= 1, got {q}")
    if n_users < 1:
        raise AccountantError(f"n_users must be >= 1, got {n_users}")
    if math.isinf(p):
        if not 0.0 <= beta <= 1.0:
            raise AccountantError(f"beta must be in [0, 1] for p = inf, got {beta}")
        own, other = float(beta), 0.0
    else:
        if not 0.0 <= beta <= (p - 1.0) / (p + 1.0) + 1e-15:
            raise AccountantError(f"beta must be in [0, (p-1)/(p+1)], got {beta}")
        other = beta / (p - 1.0)
        own = p * other
    r = own / q
    if 2.0 * r > 1.0 + 1e-15:
        raise AccountantError(f"2 beta p / ((p-1) q) must be <= 1, got {2.0 * r}")
    return CountPair(n_slots=int(n_users) - 1, r=min(r, 0.5), own=own, other=other)


@dataclass(frozen=True, slots=True)
class SummationWindow:
    """Totals t = lo..hi and the binomial weights w0(t), w1(t) over them (vectors of the
    backend that built the window)."""

    t: Any
    w0: Any
    w1: Any
    omitted0: float  # w0 mass outside the window
    omitted1: float  # w1 mass outside the window
    rho_slack: Any  # rho (N - t + 1)


_windows = registered_cache(256)


def summation_window(n_slots: int, r: float) -> SummationWindow:
    """Summation window and weights for Binomial(n_slots, 2r); kept per (backend, N, r).

    Totals range over 0..N+1 (the victim may add one).  The window spans the
    mean +- 9.5 standard deviations plus a skew margin, clipped to the support;
    the mass outside is computed from the binomial tails and reported so callers can
    add it.
    """
    backend = arrays.name()
    return _windows.get(key_of(backend, n_slots, r),
                        lambda: _make_window(n_slots, r, arrays.namespace()))


def clear_caches() -> None:
    """Forget every kept summation window (benchmarks measure cold costs)."""
    _windows.clear()


def _make_window(n_slots: int, r: float, xp: Any) -> SummationWindow:
    trials = n_slots
    prob = 2.0 * r
    if trials == 0 or prob == 0.0:
        # No blanket mass can land on j0 or j1: the totals are 0 and 1.
        t = xp.arange(0, 2)
        w0, w1 = xp.vector([1.0, 0.0]), xp.vector([0.0, 1.0])
        omitted0 = omitted1 = 0.0
    else:
        mean = trials * prob
        sigma = math.sqrt(trials * prob * (1.0 - prob))
        margin = _WINDOW_SIGMAS * sigma + _WINDOW_SIGMAS**2 + 2.0
        lo = max(0, math.floor(mean - margin))
        hi = min(trials + 1, math.ceil(mean + margin) + 1)
        t = xp.arange(lo, hi + 1)
        pmf = xp.binom_pmf(xp.arange(lo - 1, hi + 1), trials, prob)  # f(lo - 1) .. f(hi)
        w0, w1 = pmf[1:], pmf[:-1]
        # Mass outside the window: w0 at t < lo or t > hi, w1 at t - 1 < lo - 1 or t - 1 > hi - 1.
        omitted0 = xp.binom_cdf(lo - 1, trials, prob) + xp.binom_sf(hi, trials, prob)
        omitted1 = xp.binom_cdf(lo - 2, trials, prob) + xp.binom_sf(hi - 1, trials, prob)
    rho = r / (1.0 - prob) if prob < 1.0 else math.inf
    remaining = trials - t + 1
    with xp.quiet():  # rho = inf times no remaining trial: charged 0 below
        slack = xp.where(remaining == 0, 0.0, rho * remaining)
    return SummationWindow(t, w0, w1, omitted0, omitted1, slack)


def delta_for(pair: CountPair, eps: float) -> float:
    """delta(eps) = D_{e^eps}(P || Q) for the count pair, evaluated in O(window) time.

    Returns an upper bound: the exact sum over the window plus the omitted mass.
    ``eps`` must be >= 0 (for eps < 0 the divergence is not a privacy guarantee).
    """
    inside, omitted = _window_sum(pair, eps)
    return inside + omitted


def window_delta(pair: CountPair, eps: float) -> float:
    """The window's part of :func:`delta_for`, without the omitted mass: a lower bound on
    the pair's exact divergence, up to the rounding of its terms (about 1e-11 relative,
    :data:`segshuffle.core.accounting.CERTIFIED_RELATIVE_MARGIN` covers it)."""
    return _window_sum(pair, eps)[0]


def _window_sum(pair: CountPair, eps: float) -> tuple[float, float]:
    """(sum of the window's terms, the omitted mass that bounds every term outside it)."""
    if not eps >= 0.0:
        raise AccountantError(f"eps must be >= 0, got {eps}")
    own, other = pair.own, pair.other
    if own <= other:  # identical distributions
        return 0.0, 0.0
    window = summation_window(pair.n_slots, pair.r)
    terms = window_terms(window.t, window.w0, window.w1, window.rho_slack, own, other, eps)
    omitted = max(0.0, 1.0 - own - other) * window.omitted0 + (own + other) * window.omitted1
    return arrays.namespace().total(terms), float(omitted)


def window_terms(t: Any, w0: Any, w1: Any, rho_slack: Any, own: float, other: float,
                 eps: float) -> Any:
    """(P_t - e^eps Q_t)_+ at every total of a window (the module docstring's per-t sum).

    Elementwise in t, so the windows of several pairs (several slot counts) may be
    laid end to end and evaluated in one pass.  Needs own > other and eps >= 0; the
    vectors are those of the backend in use.
    """
    xp = arrays.namespace()
    e = arrays.exp_or_inf(eps)
    k0 = max(0.0, 1.0 - own - other)
    if k0 == 0.0 and other == 0.0:
        # Every message is the victim's or the blanket's: x = t e / (1 + e) = t - y with
        # y = t / (1 + e) > 0, so a* = t + 1 - ceil(y) <= t exactly.  Computing t - y in
        # floating point rounds to t once e / (1 + e) rounds to 1 (eps >~ 36.7), which
        # would drop the b = 0 atom of infinite privacy loss.
        a_star = t + 1 - xp.ceil_int(t / (1.0 + e))
    else:
        with xp.quiet():
            # A threshold beyond every a (rho = inf when 2r = 1, or overflow when
            # own - other is subnormal) empties the set for that t.
            base = k0 * (e - 1.0) * rho_slack if k0 > 0.0 else 0.0
            x = (base + t * (e * own - other)) / ((own - other) * (1.0 + e))
        x = xp.where(xp.isfinite(x), x, t + 1.0)
        # a* = min(max(floor(x) + 1, 0), t + 1), clipped before it becomes an integer.
        a_star = xp.floor_int(xp.clip(x, -1.0, t)) + 1
    # S_{t-1}(a*) by the incomplete beta function, S_{t-1}(a* - 1) by adding the pmf at
    # a* - 1, and S_t(a*) by Pascal's rule as the mean of the two: only sums of
    # non-negative terms, so no precision is lost, and one incomplete beta per t instead
    # of three.  At t = 0 the t - 1 terms carry w1(0) = 0 and S_0(a*) = 0 as a* >= 1.
    previous = xp.maximum(t - 1, 0)
    s_prev_hi = xp.half_tail(previous, a_star)
    s_prev_lo = xp.minimum(s_prev_hi + xp.binom_pmf(a_star - 1, previous, 0.5), 1.0)
    s_t = xp.where(t == 0, xp.where(a_star <= 0, 1.0, 0.0), 0.5 * (s_prev_lo + s_prev_hi))
    shared = k0 * w0 * s_t
    p_t = shared + w1 * (own * s_prev_lo + other * s_prev_hi)
    q_t = shared + w1 * (other * s_prev_lo + own * s_prev_hi)
    return xp.maximum(p_t - e * q_t, 0.0)


def epsilon_for(pair: CountPair, delta: float, *, rtol: float = 1e-9) -> float | None:
    """The smallest eps in [0, EPSILON_CAP] with delta_for(pair, eps) <= delta.

    ``None`` when even EPSILON_CAP does not reach ``delta`` (for own = 1 the pair
    has an atom of infinite privacy loss, so small deltas are never reached).
    The returned eps always satisfies the bound; it overshoots the exact
    threshold by at most ``rtol`` relative.
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if delta_for(pair, 0.0) <= delta:
        return 0.0
    if delta_for(pair, EPSILON_CAP) > delta:
        return None
    return _smallest_feasible(lambda eps: delta_for(pair, eps) - delta, 0.0, EPSILON_CAP, rtol)


def _smallest_feasible(excess, lo: float, hi: float, rtol: float) -> float:
    """Smallest x in (lo, hi] with excess(x) <= 0, given excess(lo) > 0 >= excess(hi).

    Brent's method locates the crossing (:func:`_verified_root`); the answer is on
    the safe side: verified feasible.
    """
    return _verified_root(excess, lo, hi, rtol, upwards=True)


def _largest_feasible(excess, lo: float, hi: float, rtol: float, *,
                      logarithmic: bool = False, close: float = 0.0) -> float:
    """Largest x in [lo, hi) with excess(x) <= 0, given excess(lo) <= 0 < excess(hi).

    ``logarithmic``: the root search runs on ln x (where lo > 0), for an excess close to
    linear in ln x; ``close``: a feasible point with excess >= -close is the answer
    (:func:`_verified_root`)."""
    return _verified_root(excess, lo, hi, rtol, upwards=False, logarithmic=logarithmic,
                          close=close)


def _slope_band(excess, lo: float, hi: float, rtol: float) -> float:
    """A ``close`` for :func:`_largest_feasible` on a log excess over [lo, hi]: rtol times
    the excess's rise per unit of ln x between the two ends (at least 1; 1 where lo = 0).
    A feasible point whose excess is within it of 0 lies within about rtol (relative) of
    the crossing along that slope."""
    if not lo > 0.0:
        return rtol
    rise = (excess(hi) - excess(lo)) / math.log(hi / lo)
    return rtol * max(1.0, rise)


def _verified_root(excess, lo: float, hi: float, rtol: float, *, upwards: bool,
                   logarithmic: bool = False, close: float = 0.0) -> float:
    """A point within about rtol (relative) of where ``excess`` crosses 0, verified <= 0.

    :func:`bracketed_root` ends with a bracket at most rtol / 4 wide (relative) whose
    ends have opposite signs, and both ends were evaluated: the feasible evaluated point
    closest to its answer, when within rtol / 2 of it, is returned with no further
    evaluation.  Otherwise the answer is nudged towards the feasible side (``upwards``:
    the feasible side is above) in doubling steps until it is verified feasible.

    ``logarithmic`` (used where lo > 0): Brent's method runs on u = ln x, to rtol / 4 in u
    (a relative rtol / 4 in x, to first order).  An excess that is a log divergence
    falling like a power of x is close to linear in u, where the interpolating steps land
    within one or two evaluations of the crossing; in x it is concave and the steps fall
    short.  The bracket's ends are evaluated at lo and hi themselves (not at exp(ln lo),
    which may differ in the last bit), so a caller's remembered values are used again.

    ``close`` > 0: the first evaluated point with -close <= excess <= 0 is the answer (for
    a log excess: feasible, with a divergence within exp(-close) of the target).
    """
    seen: dict[float, float] = {}

    def recorded(x: float) -> float:
        value = seen[x] = excess(x)
        return value

    def close_enough(value: float) -> bool:
        return -close <= value <= 0.0

    accept = close_enough if close > 0.0 else None
    if logarithmic and lo > 0.0:
        ends = {math.log(lo): lo, math.log(hi): hi}

        def at(u: float) -> float:
            return ends[u] if u in ends else math.exp(u)

        found = bracketed_root(lambda u: recorded(at(u)), math.log(lo), math.log(hi),
                               xtol=rtol / 4.0, rtol=0.0, accept=accept)
        root = min(max(at(found), lo), hi)
    else:
        root = bracketed_root(recorded, lo, hi, xtol=1e-14, rtol=rtol / 4.0, accept=accept)
    if accept is not None and root in seen and close_enough(seen[root]):
        return root
    reach = abs(root) * rtol / 2.0 + 1e-14
    near = [x for x, value in seen.items() if value <= 0.0 and abs(x - root) <= reach]
    if near:
        return min(near) if upwards else max(near)
    step = max(abs(root) * rtol / 4.0, 1e-14)
    x = min(root, hi) if upwards else max(root, lo)
    while excess(x) > 0.0:
        x = min(x + step, hi) if upwards else max(x - step, lo)
        step *= 2.0
    return x

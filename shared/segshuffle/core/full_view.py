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
from scipy import special

from . import distributions

#: Standard deviations each side of the mean of the blanket total that are summed.
_WINDOW_SIGMAS = 12.0


@lru_cache(maxsize=1024)
def _total_window(n_slots: int, q2: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Totals u in a window, Binomial(n_slots, q2) pmf on them, and the mass outside."""
    if n_slots == 0 or q2 == 0.0:
        return np.array([0]), np.array([1.0]), 0.0
    mean = n_slots * q2
    sigma = math.sqrt(mean * (1.0 - q2))
    margin = _WINDOW_SIGMAS * sigma + _WINDOW_SIGMAS**2 + 2.0
    lo = max(0, math.floor(mean - margin))
    hi = min(n_slots, math.ceil(mean + margin))
    u = np.arange(lo, hi + 1)
    outside = distributions.binom_cdf(lo - 1, n_slots, q2) + distributions.binom_sf(
        hi, n_slots, q2)
    return u, distributions.binom_pmf(u, n_slots, q2), outside


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
    weights = distributions.binom_pmf(np.arange(set_size + 1), set_size, lam)
    return math.fsum(float(weights[j]) * aggregated_shift_delta(n_slots, set_size * r, j, eps)
                     for j in range(1, set_size + 1) if weights[j] > 0.0)


#: The most (total, rest) cells :func:`single_item_full_view_delta` sums before giving up.
MAX_FULL_VIEW_CELLS = 200_000

#: The most entries of a table of Binomial(t, 1/2) tails (8 bytes each) that a grid keeps;
#: a larger grid evaluates its tails where it needs them, at every E.
MAX_TAIL_TABLE = 2_000_000


def _rest_pmf(rest: np.ndarray, trials: np.ndarray, p: float) -> np.ndarray:
    """Binomial(trials, p) pmf at ``rest`` (rows: trials), 0 where trials < 0."""
    valid = trials >= 0
    pmf = distributions.binom_pmf(rest[None, :], np.maximum(trials, 0)[:, None], p)
    return np.where(valid[:, None], np.nan_to_num(pmf), 0.0)


class _HalfTails:
    """S_t(k) = Pr[Binomial(t, 1/2) >= k] for the totals of one grid.

    Where the totals are few enough, every S_t(k) with 0 <= t <= ``top`` and
    -1 <= k <= top + 2 is computed once (the incomplete beta function, as
    :func:`_half_tail` computes it) and read by index afterwards: the same numbers, at a
    small fraction of the cost, for every E and lambda the lower-bound search asks for.
    """

    def __init__(self, top: int) -> None:
        self.table: np.ndarray | None = None
        if (top + 1) * (top + 4) <= MAX_TAIL_TABLE:
            t = np.arange(top + 1)[:, None]
            k = np.arange(-1, top + 3)[None, :]
            self.table = _half_tail(np.broadcast_to(t, (t.size, k.size)).ravel(),
                                    np.broadcast_to(k, (t.size, k.size)).ravel()
                                    ).reshape(t.size, k.size)

    def __call__(self, trials: np.ndarray, k: np.ndarray) -> np.ndarray:
        """S_trials(k) elementwise (broadcast), for 0 <= trials <= top and
        -1 <= k <= trials + 2."""
        if self.table is None:
            trials, k = np.broadcast_arrays(trials, k)
            return _half_tail(trials.ravel(), k.ravel()).reshape(k.shape)
        return self.table[trials, k + 1]


class _FullViewGrid:
    """What :func:`single_item_full_view_delta` sums over that depends on neither E nor
    lambda, for one blanket (N, r, gamma): the totals t, the blanket's weights
    W(t) g_t(R) and W(t - 1) g_{t-1}(R) of every (t, R) cell, their ratio, and the tails."""

    def __init__(self, n_slots: int, t: np.ndarray, u: np.ndarray, w_u: np.ndarray,
                 rest: np.ndarray, rest_p: float) -> None:
        w_t = np.interp(t, u, w_u, left=0.0, right=0.0)
        w_prev = np.interp(t - 1, u, w_u, left=0.0, right=0.0)
        self.with_total = w_t[:, None] * _rest_pmf(rest, n_slots - t, rest_p)
        self.with_previous = w_prev[:, None] * _rest_pmf(rest, n_slots - t + 1, rest_p)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.ratio = np.where(self.with_previous > 0.0,
                                  self.with_total / self.with_previous, np.inf)
        self.totals = t[:, None].astype(np.int64)  # a column: rows are totals
        self.previous = np.maximum(self.totals - 1, 0)
        self.totals_float = self.totals.astype(float)
        self.tails = _HalfTails(int(t[-1]))


@lru_cache(maxsize=4)
def _full_view_grid(n_slots: int, r: float, gamma: float) -> _FullViewGrid | None:
    """The grid of :func:`single_item_full_view_delta` (kept for the few blankets a
    search visits: each holds up to MAX_FULL_VIEW_CELLS cells in a few arrays), or
    ``None`` when it would exceed :data:`MAX_FULL_VIEW_CELLS`."""
    u, w_u, _ = _total_window(n_slots, min(2.0 * r, 1.0))
    rest_p = min(max((gamma - 2.0 * r) / (1.0 - 2.0 * r), 0.0), 1.0) if r < 0.5 else 0.0
    t = np.arange(max(int(u[0]), 0), int(u[-1]) + 2)  # blanket u plus 0 or 1
    trials = n_slots - t
    mean = trials * rest_p
    sigma = np.sqrt(np.maximum(trials * rest_p * (1.0 - rest_p), 0.0))
    lo = max(0, int(np.floor(np.min(mean - _WINDOW_SIGMAS * sigma))) - 2)
    hi = int(np.ceil(np.max(mean + _WINDOW_SIGMAS * sigma))) + 3
    rest = np.arange(lo, hi + 1)
    if t.size * rest.size > MAX_FULL_VIEW_CELLS:
        return None
    return _FullViewGrid(n_slots, t, u, w_u, rest, rest_p)


def single_item_full_view_delta(eps: float, lam: float, n_slots: int, r: float,
                                gamma: float) -> float | None:
    """The exact full view of the s = 1 exhibited dataset, for any gamma: a lower bound.

    Each of the N = ``n_slots`` slots lands on j0 or j1 with probability r each,
    elsewhere with rho = gamma - 2r, and is null otherwise.  The server sees
    (a, b, R): the counts on j0 and j1 and the non-null count elsewhere (the
    split of R over the other items is uniform in both worlds).  With
    u = B0 + B1 ~ Binomial(N, 2r), R | u ~ Binomial(N - u, rho / (1 - 2r)) and
    B0 | u ~ Binomial(u, 1/2), the victim adding its item to a with probability
    lambda gives, per total t = a + b and rest R,

        P(a | t, R) ~ A h_t(a) + B h_{t-1}(a - 1),   Q(a | t, R) ~ A h_t(a) + B h_{t-1}(a),
        A = (1 - lambda) W(t) g_t(R),   B = lambda W(t - 1) g_{t-1}(R),

    where h is the Binomial(., 1/2) pmf, W the pmf of u and g_u that of R given u.
    Since h_{t-1}(a - 1) = (2a/t) h_t(a), the ratio P/Q = (kt/2 + a)/(kt/2 + t - a),
    k = A / B, grows with a: the set P > e^E Q is a > [(e^E - 1) k t/2 + e^E t]/(1 + e^E),
    summed with binomial tails as in :mod:`segshuffle.core.hockey_stick`.  Mass
    outside the windows is left out, so the value never exceeds the exact one.
    ``None`` when the grid would exceed :data:`MAX_FULL_VIEW_CELLS`.

    Everything but the set's threshold depends on the blanket alone (k is the blanket's
    ratio W(t) g_t / W(t - 1) g_{t-1} times (1 - lambda) / lambda): it is computed once
    per blanket (:class:`_FullViewGrid`), and a search over E or lambda pays for the
    thresholds and the table reads only.
    """
    if n_slots == 0 or r == 0.0 or lam == 0.0:
        return 0.0
    grid = _full_view_grid(n_slots, r, gamma)
    if grid is None:
        return None
    big_a = (1.0 - lam) * grid.with_total
    big_b = lam * grid.with_previous
    e = math.exp(eps)
    tt = grid.totals_float
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        k = grid.ratio * ((1.0 - lam) / lam)
        x = ((e - 1.0) * k * tt / 2.0 + e * tt) / (1.0 + e)
    x = np.where(np.isfinite(x), x, tt + 1.0)
    a_star = np.clip(np.floor(x) + 1.0, 0.0, tt + 1.0).astype(np.int64)
    s_t = grid.tails(grid.totals, a_star)
    s_prev_lo = grid.tails(grid.previous, a_star - 1)
    s_prev_hi = grid.tails(grid.previous, a_star)
    p_set = big_a * s_t + big_b * s_prev_lo
    q_set = big_a * s_t + big_b * s_prev_hi
    return float(np.sum(np.maximum(p_set - e * q_set, 0.0)))


def clear_caches() -> None:
    """Forget the kept windows and grids (benchmarks measure cold costs)."""
    _total_window.cache_clear()
    _full_view_grid.cache_clear()

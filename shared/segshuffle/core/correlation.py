"""When the level a user picks goes with the items it holds: the bias, and a bound on it.

docs/protocol.md section 5.1.  The estimator W^_j = (C_j - n m / d) / sum_k n_k lambda_k
divides by the population's signal weight, so it is unbiased for the share w_j of users
holding j only when item j's holders pick levels like everyone else.  With h_jk the
holders of j at level k, pi_j their level shares, q_j the level shares of the users who do
not hold j and lambda_bar = sum_k p_k lambda_k (p_k = n_k / n), the exact bias is

    b_j = E[W^_j] - w_j = w_j (1 - w_j) (<pi_j, lambda> - <q_j, lambda>) / lambda_bar.

**Correlation up to R.**  The holders' odds of any level against any other are at most R
times the other users' odds of the same pair:

    (pi_jk / q_jk) / (pi_jl / q_jl) <= R      for every item j and levels k, l.

R = 1 is independence (b = 0).  "Strict users are R times more likely among the holders of
item 0" is the case where only the strictest level's odds move.

**The worst case is a 2 x 2 table.**  Write pi_k = r_k q_k and fix the item's share w.  The
margins p = w pi + (1 - w) q give q_k = p_k h(r_k) with h(r) = 1 / (1 - w + w r), so
<pi - q, lambda> = (lambda_bar - sum_k p_k lambda_k h(r_k)) / w under sum_k p_k h(r_k) = 1,
with every r_k in [r, r R] for a common r.  For each r this is a linear program in the
h(r_k): its optimum gives the largest h to the smallest lambdas and the smallest h to the
largest, with at most one level in between, which is the same as splitting that level in
two.  So the worst case puts odds R on the top (or the bottom) x of the population's mass
in lambda order, and within each part the two groups' level shares are p's.  That is the
2 x 2 table of (holder, top part) with margins w and x and odds ratio R, whose joint cell is
the Plackett copula

    C_R(w, x) = (1 + (R - 1)(w + x) - sqrt((1 + (R - 1)(w + x))^2 - 4 R (R - 1) w x))
                / (2 (R - 1)),

and the bias is (C_R(w, x) - w x) l(x) / (x (1 - x) lambda_bar), where
l(x) = S(x) - x lambda_bar and S(x) is the sum of p_k lambda_k over the top x of the mass
(piecewise linear and concave, l(0) = l(1) = 0).  Favouring the bottom x instead gives
l(1 - x) in place of l(x).  Hence, exactly,

    |b_j| <= beta(w_j) = max_x (C_R(w_j, x) - w_j x) max(l(x), l(1 - x)) / (x (1 - x) lambda_bar).

C_R(w, x) - w x is concave in w (Plackett's family with R >= 1 is stochastically
increasing), so its largest value over w in (0, w_max] is a one-dimensional concave
maximisation.  Its ratio to w is largest as w -> 0 (the family is left-tail decreasing:
C_R(w, x) / w does not increase with w), where it is x (1 - x)(R - 1) / (1 + (R - 1) x),
so every item also has |b_j| <= phi w_j with the *relative* bound

    phi = max_x (R - 1) max(l(x), l(1 - x)) / ((1 + (R - 1) x) lambda_bar),

a linear-fractional function on each piece of l, hence maximal at a breakpoint.

**The objective.**  :class:`CorrelationGuard` adds the worst squared bias of one item,
beta^2 = max over w <= w_max of beta(w)^2, to the variance given the data, and lets the
lambdas move toward each other: lambda'_k = min(lambda_k, c) with the cap c chosen with m
(a smaller lambda is always allowed: the guarantee only gets stronger).  At R = 1 it is
the variance objective.  Everything here depends on public parameters only (levels' counts
and lambdas, R, w_max).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .rules import MAX_CORRELATION_RATIO
from .scalar_search import bounded_minimum

#: Points of the x grid on which the bias over the tilted mass is maximised before the
#: best cell is refined.
X_GRID_POINTS = 257

#: Points of the local grid that refines the best cell of the x grid (a cell of 1/256 on
#: 4097 points: 2e-6 apart).
REFINE_POINTS = 4097

#: Golden-section steps of the concave maximisation over the item's share w (the bracket
#: shrinks by 0.618 per step: 80 steps leave 2e-17 of it).
SHARE_STEPS = 80

#: Caps tried per blanket rate when the lambdas may move toward each other (besides the
#: lambdas themselves and 1), then refined.
CAP_GRID_POINTS = 24

_GOLDEN = 0.5 * (math.sqrt(5.0) - 1.0)


def require_correlation_ratio(value: float) -> float:
    """R as a float in [1, MAX_CORRELATION_RATIO]; ValueError otherwise."""
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"correlation ratio must be a number, got {value!r}") from None
    if not math.isfinite(ratio) or not 1.0 <= ratio <= MAX_CORRELATION_RATIO:
        raise ValueError(f"correlation ratio must be in [1, {MAX_CORRELATION_RATIO:g}], "
                         f"got {value!r}")
    return ratio


def require_largest_share(value: float) -> float:
    """w_max as a float in (0, 1]; ValueError otherwise."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"largest share must be a number, got {value!r}") from None
    if not math.isfinite(share) or not 0.0 < share <= 1.0:
        raise ValueError(f"largest share must be in (0, 1], got {value!r}")
    return share


def plackett(w: np.ndarray | float, x: np.ndarray | float, ratio: float) -> np.ndarray:
    """C_R(w, x): the joint cell of a 2 x 2 table with margins w, x and odds ratio R.

    Written without cancellation: with a = 1 + (R - 1)(w + x) and the discriminant
    a^2 - 4 R (R - 1) w x, C = 2 R w x / (a + sqrt(discriminant)) (the smaller root of
    (R - 1) C^2 - a C + R w x = 0, rationalised).  At R = 1 this is w x.
    """
    w = np.asarray(w, dtype=float)
    x = np.asarray(x, dtype=float)
    a = 1.0 + (ratio - 1.0) * (w + x)
    discriminant = np.maximum(a * a - 4.0 * ratio * (ratio - 1.0) * w * x, 0.0)
    return 2.0 * ratio * w * x / (a + np.sqrt(discriminant))


def holder_covariance(w: np.ndarray | float, x: np.ndarray | float,
                      ratio: float) -> np.ndarray:
    """C_R(w, x) - w x: how much more of the tilted mass x the holders (share w) have."""
    return plackett(w, x, ratio) - np.asarray(w, dtype=float) * np.asarray(x, dtype=float)


def largest_covariance(x: np.ndarray, ratio: float, largest_share: float) -> np.ndarray:
    """max over w in (0, w_max] of C_R(w, x) - w x, for every x (concave in w: golden section)."""
    x = np.asarray(x, dtype=float)
    a = np.zeros_like(x)
    b = np.full_like(x, largest_share)
    c = b - _GOLDEN * (b - a)
    d = a + _GOLDEN * (b - a)
    f_c = holder_covariance(c, x, ratio)
    f_d = holder_covariance(d, x, ratio)
    for _ in range(SHARE_STEPS):
        left = f_c >= f_d  # a concave maximum lies in [a, d]; otherwise in [c, b]
        a, b = np.where(left, a, c), np.where(left, d, b)
        c_next = np.where(left, b - _GOLDEN * (b - a), d)
        d_next = np.where(left, c, a + _GOLDEN * (b - a))
        f_c, f_d = (np.where(left, holder_covariance(c_next, x, ratio), f_d),
                    np.where(left, f_c, holder_covariance(d_next, x, ratio)))
        c, d = c_next, d_next
    return np.maximum(np.maximum(f_c, f_d), holder_covariance(b, x, ratio))


@dataclass(frozen=True)
class SignalProfile:
    """The population's signal in lambda order: the breakpoints of l(x) (module docstring).

    ``mass`` and ``signal`` are the cumulative p_k and p_k lambda_k over the levels sorted
    by decreasing lambda, starting at (0, 0) and ending at (1, lambda_bar).
    """

    mass: np.ndarray
    signal: np.ndarray

    @property
    def mean(self) -> float:
        """lambda_bar = sum_k p_k lambda_k."""
        return float(self.signal[-1])

    def gap(self, x: np.ndarray) -> np.ndarray:
        """l(x) = S(x) - x lambda_bar: the top x of the mass's signal above its share."""
        x = np.asarray(x, dtype=float)
        return np.interp(x, self.mass, self.signal) - x * self.mean

    def two_sided_gap(self, x: np.ndarray) -> np.ndarray:
        """max(l(x), l(1 - x)): the holders favour the top x, or the bottom x."""
        x = np.asarray(x, dtype=float)
        return np.maximum(self.gap(x), self.gap(1.0 - x))

    def breakpoints(self) -> np.ndarray:
        """Every x where max(l(x), l(1 - x)) may bend, inside (0, 1)."""
        points = np.concatenate([self.mass, 1.0 - self.mass])
        return np.unique(points[(points > 0.0) & (points < 1.0)])


def signal_profile(level_counts: Sequence[float], lambdas: Sequence[float]) -> SignalProfile:
    """The :class:`SignalProfile` of the levels' counts n_k and rates lambda_k."""
    counts = np.asarray([float(c) for c in level_counts], dtype=float)
    rates = np.asarray([float(lam) for lam in lambdas], dtype=float)
    if counts.shape != rates.shape or counts.size == 0:
        raise ValueError("one count per lambda is required")
    total = float(counts.sum())
    if total <= 0.0:
        raise ValueError("the level counts must sum to a positive number")
    order = np.argsort(-rates, kind="stable")
    shares = counts[order] / total
    mass = np.concatenate([[0.0], np.cumsum(shares)])
    signal = np.concatenate([[0.0], np.cumsum(shares * rates[order])])
    mass[-1] = 1.0
    return SignalProfile(mass=mass, signal=signal)


def relative_bias_bound(level_counts: Sequence[float], lambdas: Sequence[float],
                        ratio: float) -> float:
    """phi: every item's bias is at most phi w_j under correlation up to R (module docstring).

    Exact: the maximum over x sits at a breakpoint of max(l(x), l(1 - x)).  0 at R = 1 or
    when every lambda is equal; infinite when R > 1 and no level sends anything.
    """
    if require_correlation_ratio(ratio) == 1.0:
        return 0.0
    profile = signal_profile(level_counts, lambdas)
    if profile.mean <= 0.0:
        return math.inf
    x = profile.breakpoints()
    if x.size == 0:
        return 0.0
    values = (ratio - 1.0) * profile.two_sided_gap(x) / (1.0 + (ratio - 1.0) * x)
    return max(0.0, float(values.max()) / profile.mean)


class CorrelationGuard:
    """The worst squared bias of one item under correlation up to R, and the objective.

    ``largest_share`` w_max limits the items considered to those held by at most that
    share of users (1: any item).  The largest covariance over w is tabulated once on a
    grid of x; :meth:`bias_bound` maximises over that grid and its breakpoints, then
    refines the best cell (the reported bound is that maximum, to about 1e-10 relative).
    """

    def __init__(self, ratio: float, largest_share: float = 1.0) -> None:
        self.ratio = require_correlation_ratio(ratio)
        self.largest_share = require_largest_share(largest_share)
        grid = np.linspace(0.0, 1.0, X_GRID_POINTS)[1:-1]
        self._grid = grid
        self._grid_weight = self._weight(grid)
        self._corner_weights: dict[float, float] = {}

    @property
    def active(self) -> bool:
        """Whether any correlation is guarded against (R > 1)."""
        return self.ratio > 1.0

    def _weight(self, x: np.ndarray) -> np.ndarray:
        """max_w (C_R(w, x) - w x) / (x (1 - x)), w in (0, w_max]."""
        return largest_covariance(x, self.ratio, self.largest_share) / (x * (1.0 - x))

    def _corner_weight(self, corners: np.ndarray) -> np.ndarray:
        """:meth:`_weight` at the profile's breakpoints, kept per x (the level counts, hence
        the breakpoints, are the same at every blanket rate of one search)."""
        missing = [x for x in corners.tolist() if x not in self._corner_weights]
        if missing:
            if len(self._corner_weights) > 100_000:
                self._corner_weights.clear()
            values = self._weight(np.asarray(missing))
            self._corner_weights.update(zip(missing, values.tolist(), strict=True))
        return np.asarray([self._corner_weights[x] for x in corners.tolist()])

    def bias_bound(self, level_counts: Sequence[float], lambdas: Sequence[float],
                   *, refine: bool = True) -> float:
        """beta: no item held by at most w_max of the users is off by more (absolute share)."""
        if not self.active:
            return 0.0
        profile = signal_profile(level_counts, lambdas)
        if profile.mean <= 0.0:
            return math.inf
        corners = profile.breakpoints()
        x = np.concatenate([self._grid, corners])
        weight = np.concatenate([self._grid_weight, self._corner_weight(corners)])
        values = weight * profile.two_sided_gap(x)
        best = int(np.argmax(values))
        value = float(values[best])
        if refine and value > 0.0:
            value = max(value, self._refine(profile, float(x[best])))
        return max(0.0, value) / profile.mean

    def _refine(self, profile: SignalProfile, x_best: float) -> float:
        """The largest weight x gap within one grid step of ``x_best``: a grid of
        :data:`REFINE_POINTS` there and the breakpoints inside it (the product is smooth
        between breakpoints, so the grid misses its maximum by a relative ~1e-10)."""
        step = 1.0 / (X_GRID_POINTS - 1)
        low, high = max(x_best - step, 1e-12), min(x_best + step, 1.0 - 1e-12)
        corners = profile.breakpoints()
        x = np.concatenate([np.linspace(low, high, REFINE_POINTS),
                            corners[(corners >= low) & (corners <= high)]])
        return float(np.max(self._weight(x) * profile.two_sided_gap(x)))

    def worst_case(self, variance: float, level_counts: Sequence[float],
                   lambdas: Sequence[float], *, refine: bool = False) -> float:
        """variance + beta^2: the objective at these lambdas."""
        if not self.active:
            return variance
        bias = self.bias_bound(level_counts, lambdas, refine=refine)
        return variance + bias * bias

    def best_cap(self, variance_of: Callable[[Sequence[float]], float],
                 level_counts: Sequence[float], lambdas: Sequence[float],
                 *, refine: bool = False) -> tuple[float, tuple[float, ...]]:
        """(objective, lambdas') minimising variance + beta^2 over lambda'_k = min(lambda_k, c).

        ``variance_of(lambdas')`` is the variance given the data at the blanket rate in
        question.  c runs over 1, the lambdas themselves and a geometric grid between the
        smallest lambda and 1, then a bounded search refines the best cell.  At R = 1 the
        lambdas are returned unchanged (no cap lowers the variance).
        """
        rates = tuple(float(lam) for lam in lambdas)

        def capped(cap: float) -> tuple[float, ...]:
            return tuple(min(lam, cap) for lam in rates)

        def objective(cap: float) -> float:
            shaped = capped(cap)
            return self.worst_case(variance_of(shaped), level_counts, shaped, refine=refine)

        if not self.active:
            return variance_of(rates), rates
        floor = min(rates)
        if floor <= 0.0 or max(rates) <= floor:
            return objective(1.0), rates
        caps = sorted({1.0, *rates, *np.geomspace(floor, 1.0, CAP_GRID_POINTS).tolist()})
        caps = [c for c in caps if floor <= c <= 1.0]
        values = [objective(c) for c in caps]
        best = int(np.argmin(values))
        cap, value = caps[best], values[best]
        left = caps[best - 1] if best > 0 else floor
        right = caps[best + 1] if best + 1 < len(caps) else 1.0
        if right - left > 1e-9:
            found, found_value = bounded_minimum(objective, left, right,
                                                 xatol=max(1e-4 * cap, 1e-9), maxiter=24)
            if found_value < value:
                cap, value = found, found_value
        if cap >= max(rates):
            return value, rates
        return value, capped(cap)

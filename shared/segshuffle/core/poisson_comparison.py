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

**The search.**  The answer is defined by a bisection (:func:`_bisection`), but its
questions are answered from what the evaluations so far imply (the excess grows with nu),
and the points evaluated are chosen where the crossing is predicted: from the last
comparison's crossing and slope (a campaign's comparisons are alike), by regula falsi on
ln eta, and at the ends of the bisection's predicted final cell.  The same answer, bit for
bit, in about 5 evaluations instead of 13 (:func:`_largest_admissible`).

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

**One implementation.**  The comparison is written once against
:mod:`segshuffle.core.arrays`: the server runs it on numpy, the numpy-free accountant of
:mod:`segshuffle.core.portable` on Python lists, with the same windows, bisection and
verification; the two backends' tails differ by about 1e-13 relative, far inside the
1e-10 charged, so both charge the same eta.  Only :func:`steering_poisson_mean`, which
never certifies anything, needs numpy and scipy (it imports them when called).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import arrays
from .bounded_cache import key_of, registered_cache

__all__ = ["BINOMIAL_TAIL_RTOL", "cdf_excess", "clear_caches", "dominated_poisson_mean",
           "steering_poisson_mean"]

#: The relative error charged on every binomial tail (numpy's are within
#: :data:`segshuffle.core.distributions.BINOMIAL_TAIL_RTOL`, the same 1e-10, and the
#: standard library's within about 1e-13 of numpy's).
BINOMIAL_TAIL_RTOL = 1e-10

#: Standard deviations each side of the means over which the CDFs are compared.
_SIGMAS = 14.0

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


@dataclass(frozen=True)
class _ComparedTotals:
    """Totals compared (increasing), F_B (``lower``) and S_B = 1 - F_B (``upper``) on them,
    and ``below`` = F_B(lo - 1), a bound on the difference below the window (vectors of
    the backend in use)."""

    totals: Any
    lower: Any
    upper: Any
    below: float

    def subsampled(self, keep: list[int]) -> _ComparedTotals:
        xp = arrays.namespace()
        return _ComparedTotals(xp.take(self.totals, keep), xp.take(self.lower, keep),
                               xp.take(self.upper, keep), self.below)


def _full_window(trials: int, q: float) -> _ComparedTotals:
    """Every total of the comparison window of Binomial(trials, q), with both tails."""
    xp = arrays.namespace()
    lo, hi = _window_bounds(trials, q)
    lower, upper = xp.binom_tails_range(lo, hi, trials, q)
    return _ComparedTotals(xp.arange(lo, hi + 1), lower, upper,
                           float(xp.binom_cdf(lo - 1, trials, q)))


def _excess_on(totals: _ComparedTotals, nu: float) -> float:
    """A certified upper bound on max_t (F_B(t) - F_P(t))_+ (module docstring)."""
    if nu <= 0.0:
        return 0.0
    xp = arrays.namespace()
    poisson = xp.poisson_tails(totals.totals, nu)
    rho_b, rho_p = BINOMIAL_TAIL_RTOL, poisson.rtol
    via_lower = totals.lower * (1.0 + rho_b) - poisson.lower * (1.0 - rho_p)
    via_upper = poisson.upper * (1.0 + rho_p) - totals.upper * (1.0 - rho_b)
    excess = xp.largest(xp.minimum(via_lower, via_upper))
    above = float(poisson.upper[-1]) * (1.0 + rho_p)  # S_P(hi) bounds every t > hi
    return max(0.0, excess, above, totals.below * (1.0 + rho_b))


def cdf_excess(trials: int, q: float, nu: float) -> float:
    """eta = max_t (F_Binomial(trials, q)(t) - F_Poisson(nu)(t))_+ over all t >= 0,
    widened by the tails' rounding bounds."""
    if trials <= 0 or q <= 0.0:  # F_B = 1 everywhere
        if nu == 0.0:
            return 0.0
        xp = arrays.namespace()
        tails = xp.poisson_tails(xp.arange(0, 1), nu)
        return float(tails.upper[0]) * (1.0 + tails.rtol)
    return _excess_on(_full_window(trials, q), nu)


def _bisection(admissible: Callable[[float], bool], mean: float, q: float,
               precision: float) -> tuple[float, float]:
    """(lo, hi): lo the largest nu in [0, mean] (to ``precision`` times the gap) that is
    ``admissible``, hi the smallest nu it found not to be (inf when ``mean`` is).

    The gap mean - nu is a few times q sqrt(mean); it is bracketed by doubling from that
    unit, then bisected.  This defines the comparison's answer; :func:`_largest_admissible`
    reaches the same one with fewer evaluations.
    """
    if admissible(mean):
        return mean, math.inf
    unit = _unit(mean, q)
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
    return lo, hi


def _unit(mean: float, q: float) -> float:
    """The scale of the gap mean - nu: q sqrt(mean) (at least 1e-9 mean)."""
    return max(q * math.sqrt(mean), 1e-9 * mean)


#: Guided evaluations of :func:`_largest_admissible` before it lets the bisection ask.
_GUIDED_EVALUATIONS = 10

#: The crossing's gap in units and the log excess's slope per unit of nu there, as
#: the last search found them (the next one starts from them: a campaign's comparisons
#: are alike).  Only the cost depends on them, never the answer.
_last_shape = [3.1, 5.0]


class _Knowledge:
    """Evaluations of f(nu) = ln eta(nu) - ln slack so far, and the answers they imply:
    eta grows with nu, so every nu at or below the largest admissible nu seen is
    admissible (f <= 0) and every nu at or above the smallest inadmissible one is not."""

    def __init__(self, excess: Callable[[float], float], slack: float) -> None:
        self._excess = excess
        self._log_slack = math.log(slack)
        self.evaluations = 0
        self.ok, self.ok_f = -math.inf, math.nan  # the largest admissible nu seen
        self.bad, self.bad_f = math.inf, math.nan  # the smallest inadmissible nu seen

    @property
    def bracketed(self) -> bool:
        return self.ok > -math.inf and self.bad < math.inf

    def evaluate(self, nu: float) -> float:
        """f(nu), remembered (an excess of 0 counts as e^-745, below any slack's log)."""
        self.evaluations += 1
        excess = self._excess(nu)
        f = (math.log(excess) if excess > 0.0 else -745.0) - self._log_slack
        if f <= 0.0:
            if nu > self.ok:
                self.ok, self.ok_f = nu, f
        elif nu < self.bad:
            self.bad, self.bad_f = nu, f
        return f

    def decided(self, nu: float) -> bool | None:
        """Whether nu is admissible, where the evaluations so far decide it."""
        if nu <= self.ok:
            return True
        if nu >= self.bad:
            return False
        return None

    def admissible(self, nu: float) -> bool:
        """Whether nu is admissible, evaluating only what is not yet decided."""
        answer = self.decided(nu)
        if answer is None:
            self.evaluate(nu)
            answer = self.decided(nu)
        return bool(answer)

    def cell(self, crossing: float, mean: float, q: float, precision: float
             ) -> tuple[float, float]:
        """The bisection's final (lo, hi) if the crossing were at ``crossing`` (where the
        evaluations do not decide), evaluating nothing."""
        def supposed(nu: float) -> bool:
            answer = self.decided(nu)
            return nu <= crossing if answer is None else answer

        return _bisection(supposed, mean, q, precision)


def _largest_admissible(excess: Callable[[float], float], slack: float, mean: float,
                        q: float, precision: float) -> float:
    """:func:`_bisection`'s answer for the predicate excess(nu) <= ``slack``, in about 5
    evaluations of the excess instead of 13.

    The bisection's questions are answered from what earlier evaluations imply (the
    excess grows with nu: :class:`_Knowledge`), so its answer is the same whichever
    points were evaluated first; the search only chooses those points well.  f = ln eta
    - ln slack is smooth in nu: from the last search's crossing (in units q sqrt(mean))
    and slope, a step along the slope half past the predicted crossing brackets it,
    regula falsi with the Illinois weights narrows the bracket to a few of the
    bisection's cells, and the two ends of the cell the bracket predicts are evaluated,
    which then decide every question the bisection asks.  Where that fails within
    _GUIDED_EVALUATIONS, the bisection evaluates what remains undecided (the worst case
    is both counts).
    """
    if not slack > 0.0:
        return _bisection(lambda nu: excess(nu) <= slack, mean, q, precision)[0]
    known = _Knowledge(excess, slack)
    unit = _unit(mean, q)
    gap_units, slope = _last_shape
    x = min(max(mean - gap_units * unit, 0.0), mean)
    f = known.evaluate(x)
    # One side known: step along the slope, half again past the predicted crossing.
    while not known.bracketed and known.evaluations < _GUIDED_EVALUATIONS:
        following = min(max(x - 1.5 * f / slope * unit, 0.0), mean)
        if following == x:
            break
        f_following = known.evaluate(following)
        if f_following != f:
            slope = max((f_following - f) / ((following - x) / unit), 1e-3)
        x, f = following, f_following
    # Bracketed: regula falsi on its ends (a stale end's f halved, Illinois), then the
    # predicted cell's ends once the bracket spans at most four cells.
    stale_side, weight_ok, weight_bad = 0, 1.0, 1.0
    while known.bracketed and known.evaluations < _GUIDED_EVALUATIONS:
        f_ok, f_bad = known.ok_f * weight_ok, known.bad_f * weight_bad
        crossing = known.ok + (known.bad - known.ok) * -f_ok / (f_bad - f_ok)
        lo, hi = known.cell(crossing, mean, q, precision)
        undecided = [nu for nu in (lo, hi) if math.isfinite(nu) and known.decided(nu) is None]
        if not undecided:
            break
        if 4.0 * (hi - lo) >= known.bad - known.ok:
            for nu in undecided:
                known.evaluate(nu)
            continue
        half = 0.5 * (hi - lo)
        if known.evaluate(min(max(crossing, known.ok + half), known.bad - half)) <= 0.0:
            weight_ok, weight_bad = 1.0, weight_bad * 0.5 if stale_side < 0 else 1.0
            stale_side = -1
        else:
            weight_ok, weight_bad = weight_ok * 0.5 if stale_side > 0 else 1.0, 1.0
            stale_side = 1
    answer = _bisection(known.admissible, mean, q, precision)[0]
    if known.bracketed and known.bad > known.ok:
        _last_shape[:] = [(mean - answer) / unit,
                          max((known.bad_f - known.ok_f) / ((known.bad - known.ok) / unit),
                              1e-3)]
    return answer


_dominated = registered_cache(4096)


def dominated_poisson_mean(trials: int, q: float, slack: float) -> tuple[float, float]:
    """(nu, eta): a nu within about 1e-4 relative of the largest with eta <= ``slack``, and
    eta the excess at that nu, verified on every total of the window (nu = 0 always
    qualifies).

    The bisection compares the CDFs at about 256 totals (the difference is smooth in
    t); its answer is then checked on every total and lowered until it passes, so the
    pair is a certified comparison.  Kept per backend and (trials, q, slack).
    """
    if not slack >= 0.0:  # the verification below lowers nu until eta <= slack
        raise ValueError(f"the Poisson slack must be a number >= 0, got {slack!r}")
    return _dominated.get(key_of(arrays.name(), trials, q, slack),
                          lambda: _dominated_mean(trials, q, slack))


def clear_caches() -> None:
    """Forget every kept comparison (benchmarks measure cold costs)."""
    _dominated.clear()


def _dominated_mean(trials: int, q: float, slack: float) -> tuple[float, float]:
    if trials <= 0 or q <= 0.0:
        return 0.0, 0.0
    full = _full_window(trials, q)
    size = len(full.totals)
    stride = max(1, size // _COARSE_POINTS)
    # Subsample the full window rather than evaluate twice.
    coarse = full.subsampled([*range(0, size, stride), size - 1])
    nu = _largest_admissible(lambda value: _excess_on(coarse, value), slack, trials * q, q,
                             1e-3)
    step = max(q * math.sqrt(trials * q), 1e-9 * trials * q) / 64.0
    while (eta := _excess_on(full, nu)) > slack:
        nu = max(0.0, nu - step)
        step *= 2.0
    return nu, eta


#: Candidate means and totals of one pass of :func:`steering_poisson_mean`.
_STEERING_GRID = 48

#: Candidates :func:`steering_poisson_mean` evaluates together.
_STEERING_BLOCK = 8


def steering_poisson_mean(trials: int, q: float, slack: float) -> tuple[float, float]:
    """(nu, eta) near the largest nu with eta <= ``slack``: for searches that only steer.

    Never certified: the tails are Cephes' ``bdtr``/``pdtr`` family, whose relative
    error is far beyond the accountant's margins in the tails of large means (module
    docstring of :mod:`segshuffle.core.distributions`), and the CDFs are compared at
    48 totals.  In exchange it costs two array scans instead of a bisection: 48
    candidate gaps below the mean on a geometric grid, then 48 inside the cell below the
    first admissible one.  Each scan evaluates its candidates a block of
    _STEERING_BLOCK at a time, in the order it reads them (the first scan from the
    smallest gap, the second from the top), and stops at the first block that answers:
    the candidates' values do not depend on which others share their block, so the
    answer is the one of evaluating all 48 (the Poisson tails are most of this
    function's cost, and the answers sit about halfway in either scan).
    Needs numpy and scipy (the server's optimizer only).
    """
    import numpy as np
    from scipy import special

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
    found = _first_admissible(excess, nus, slack, from_top=False)
    if found is None:
        return 0.0, 0.0
    first, first_excess = found
    if first == 0:
        return mean, first_excess
    finer = np.linspace(nus[first], nus[first - 1], _STEERING_GRID)
    # finer[0] is nus[first], admissible: the scan from the top finds it at the latest.
    best, best_excess = (_first_admissible(excess, finer, slack, from_top=True)
                         or (0, first_excess))
    return float(finer[best]), best_excess


def _first_admissible(excess, candidates, slack: float, *, from_top: bool
                      ) -> tuple[int, float] | None:
    """(i, excess) of the first candidate with excess <= ``slack`` in reading order (from
    the last candidate when ``from_top``), evaluating blocks of _STEERING_BLOCK in that
    order and stopping at the first block holding one; None when none does."""
    import numpy as np  # the steering's own: this module is numpy-free otherwise

    size = len(candidates)
    starts = range(0, size, _STEERING_BLOCK)
    for start in (reversed(starts) if from_top else starts):
        stop = min(size, start + _STEERING_BLOCK)
        values = excess(candidates[start:stop])
        admissible = np.flatnonzero(values <= slack)
        if admissible.size:
            index = int(admissible[-1] if from_top else admissible[0])
            return start + index, float(values[index])
    return None

"""Choosing the blanket rate m and the Poisson rates lambda_k (docs/protocol.md section 5).

Two objectives (:class:`Objective`).  The default is what users measure, the
estimator's variance given the data, summed over items
(:func:`segshuffle.core.estimator.variance_given_data`):

    V(m, lambda) = (n m (1 - p) + s sum_k n_k lambda_k (1 - lambda_k)) / (sum_k n_k lambda_k)^2,

p = gamma / d for the slot blanket and m / d for the independent one.  The
paper's MSE bound (Section "Optimize Protocol Parameters"),

    MSE(m, lambda) <= (n m + s sum_k n_k lambda_k) / (sum_k n_k lambda_k)^2,

charges the data messages s lambda_k instead of s lambda_k (1 - lambda_k), and so
leans to lambda = 1; it is kept as an option.  Both are reported.

For a fixed m the levels decouple: lambda_k(m) is the largest rate meeting level
k's user-level guarantee (:func:`segshuffle.core.accounting.max_lambda`), and the
bound falls as every lambda_k grows.  What remains is a one-dimensional search
over m.  It is bracketed by the full-signal rates m_k
(:func:`segshuffle.core.accounting.full_signal_blanket`): above max_k m_k every
lambda_k = 1 and more blanket only adds noise; below min_k m_k no level sends its
full signal.  The objective jumps where ceil(m) changes and has kinks at the m_k,
so it is not assumed unimodal: a grid over every bucket ceil(m) = c is evaluated
first, then the best cell is refined with a bounded scalar search.  A few points
below min_k m_k are tried too, since nothing forbids the optimum from lying there.

Dropouts and fake users (docs/protocol.md section 2): privacy is accounted with the
h = ceil((1 - f) n_min) honest users of :func:`segshuffle.core.rules.honest_users`, where
n_min = ceil((1 - tau) n) is the release threshold and f the tolerated fraction of fake or
colluding participants (h = n_min at f = 0); the utility with the n expected participants.

Levels may number in the thousands (fully personalised budgets).  The search then
evaluates lambda at up to :data:`ANCHOR_LEVELS` anchor levels and interpolates
between them.  The final lambdas are certified for every level: exact root searches
at the anchors, and between two anchors the largest feasible of
:data:`BETWEEN_ANCHORS` equal steps between their rates (shared by the levels in
between, so the accountant's work per rate is reused).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from itertools import pairwise

import numpy as np

from . import validation
from .accounting import (
    COARSE_STEP,
    LAMBDA_XTOL,
    UnprotectableLevelError,
    full_signal_blanket,
    log_excess,
    max_lambda,
    user_delta,
    user_epsilon,
)
from .blanket import (
    MAX_BLANKET_RATE,
    BlanketMode,
    messages_per_user,
    parse_mode,
    require_blanket_rate,
)
from .correlation import CorrelationGuard, relative_bias_bound
from .estimator import mse_bound, mse_bound_floor, variance_floor, variance_given_data
from .hockey_stick import _largest_feasible, _slope_band, _smallest_feasible
from .privacy_loss import DEFAULT_STEP
from .rules import MAX_MESSAGES_PER_USER, accounting_users, honest_users
from .scalar_search import refined_minimum, remembered


class Objective(StrEnum):
    """What the m search minimises (docs/protocol.md section 5)."""

    #: The estimator's variance given the data, summed over items
    #: (:func:`segshuffle.core.estimator.variance_given_data`): what users measure.
    VARIANCE = "variance"
    #: The paper's bound (:func:`segshuffle.core.estimator.mse_bound`), which leans to lambda = 1.
    PAPER_BOUND = "paper-bound"


def parse_objective(objective: str | Objective) -> Objective:
    """The :class:`Objective` named by ``objective``; ValueError naming the choices otherwise."""
    return validation.parse_choice("objective", Objective, objective)


#: Number of levels whose lambda is computed exactly during the m search when K is large.
ANCHOR_LEVELS = 24

#: Anchor levels of the m search when K is large (the final lambdas use ANCHOR_LEVELS).
STEERING_ANCHORS = 8

#: Levels between two anchors take the largest feasible of this many equal steps between
#: the anchors' rates (a certified rate within 1/BETWEEN_ANCHORS of that gap of the largest).
BETWEEN_ANCHORS = 64

#: Precision of the certified lambdas by which the m search's finalists are ranked: the
#: root searches stop where the certified bound, a staircase at finer scales, would leave
#: them only bisection; the chosen rate's lambdas are then refined to LAMBDA_XTOL from
#: these (a bracket this narrow costs a few evaluations).
RANKING_XTOL = 1e-4

#: Lambda precision during the m search (the final lambdas use LAMBDA_XTOL).
SEARCH_XTOL = 3e-3

#: The rates at which the m search first locates each level's root: 0 and a geometric
#: grid from 1e-4 to 1 (steps of 25%), shared by every level at one m (the accountant
#: caches its loss distributions per rate), so that the root search proper starts
#: from a cell a quarter wide.
STEERING_RATES = np.concatenate(([0.0], np.geomspace(1e-4, 1.0, 42)))


#: Relative precision of the full-signal rates m_k, which only bracket the m search.
SEARCH_RTOL = 1e-2

#: Relative precision of the m search's refinement inside its best grid cell; a grid rate
#: this close to a finalist (in its bucket) is not a further finalist.
REFINE_XTOL = 3e-3

#: The refinement stops where the parabola through its best point and that point's
#: neighbours predicts at most this relative gain of the objective (:func:`refined_minimum`): the
#: finalists are ranked at certified lambdas known to RANKING_XTOL, which cannot tell
#: smaller differences apart.  (From scratch to REFINE_XTOL, the refinement took ten
#: steering evaluations at n = 1e4 to conclude that the grid's best point was the best.)
REFINE_FTOL = 1e-4

#: The m search's finalists (its best rate and the grid rates whose steering objective is
#: within FINALIST_MARGIN of it), ranked by the objective at certified lambdas.
FINALISTS = 3
FINALIST_MARGIN = 0.01

#: Below SMALL_POPULATION users the objective is jagged (every level's root moves in
#: steps) and certified lambdas are cheap: more finalists, from a wider margin.
SMALL_FINALISTS = 6
SMALL_FINALIST_MARGIN = 0.05

#: Below this many users the m search samples the range below the full-signal rates
#: densely (the objective is jagged there).
SMALL_POPULATION = 1000

#: From SMALL_POPULATION users on, the m search samples below the full-signal rates at
#: this many points, down to this share of the smallest: there every level sends a
#: fraction of its items, which many users make costlier than the blanket it saves.
LARGE_BELOW_POINTS = 6
LARGE_BELOW_DEPTH = 1e-2

#: A finalist whose least strict level short of its full signal has a certified lambda
#: of at least this much is joined by that level's certified full-signal rate, searched
#: up to FULL_SIGNAL_REACH above it to FULL_SIGNAL_RTOL (:func:`_full_signal_neighbours`).
#: That rate is searched to the finalists' ranking precision: the ranking tells objectives
#: apart only to about RANKING_XTOL (the lambdas' precision), and a rate 1e-4 above the
#: certified full-signal rate costs at most that much more blanket.  (Finer is not
#: better: at 1e-6 the certified excess is a staircase of its loss grid, not monotone,
#: and the search spent four evaluations of every revealed-send term on it.)
NEAR_FULL_SIGNAL = 0.9
FULL_SIGNAL_REACH = 0.05
FULL_SIGNAL_RTOL = RANKING_XTOL

#: The m search's sweep first evaluates every COARSE_STRIDE-th point of its grid, then
#: fills in the grid around its REFINED_LEADERS best points (:func:`_coarse_to_fine`; in
#: the independent mode, whose objective has no buckets, around its best point only: on
#: 48 campaigns, n 30 to 1e5, d 16 to 1024, s 1 to 8, the same m with a fifth fewer rates).
COARSE_STRIDE = 4
REFINED_LEADERS = 3

#: The strictest level's full-signal rate below a rate where every level sends its full
#: signal is sought at most LOWEST_REACH below it, along the steering slope measured over
#: LOWEST_PROBE, with at most LOWEST_BISECTIONS certified bisection steps after the
#: predicted one (:func:`_lowest_full_signal_blanket`).
LOWEST_REACH = 0.03
LOWEST_PROBE = 0.01
LOWEST_BISECTIONS = 2

#: Certified lambdas grow with the level, each found to its root search's precision: a
#: stricter level's lambda is taken to be at most this much (relative) above a less
#: strict one's when the finalists' ranking bounds the levels it has not certified.
LEVEL_ORDER_SLACK = 1e-3

#: A finalist is dropped from the ranking when its score's floor exceeds the best score
#: by more than this (relative): far above the rounding of either.
FLOOR_MARGIN = 1e-9

#: Levels for which the lower-bound epsilons are reported by default.
LOWER_BOUND_LEVELS = 64


@dataclass(frozen=True)
class OptimizationResult:
    """Published parameters and the accounting behind them.

    ``epsilons`` are the achieved user-level guarantees (upper bounds, at most the
    requested levels), ``epsilons_lower`` the exhibited-dataset lower bounds
    (``None`` entries: not computed or above the cap), ``level_blankets`` the
    full-signal rates m_k.  ``accounting_users`` is n_min, the round-2 release
    threshold; ``honest_users`` is h, the count every epsilon here is accounted with.
    ``alternative`` summarises the optimum of the other blanket mode (its m, MSE
    bound and messages per user) when it was computed.
    """

    m: float
    lambdas: tuple[float, ...]
    mse_bound: float
    epsilons: tuple[float | None, ...]
    epsilons_lower: tuple[float | None, ...]
    delta: float
    users: float
    accounting_users: int
    honest_users: int
    levels: tuple[float, ...]
    level_counts: tuple[float, ...]
    domain_size: int
    set_size: int
    dropout_tolerance: float
    fake_tolerance: float
    level_blankets: tuple[float, ...] | None
    blanket_fixed: bool
    blanket_mode: str = BlanketMode.SLOTS.value
    messages_per_user: int = 0
    alternative: dict[str, object] | None = None
    objective: str = Objective.VARIANCE.value
    variance: float = math.nan
    min_lambda: float = 0.0
    correlation_ratio: float = 1.0
    largest_share: float = 1.0
    bias_bound: float = 0.0
    relative_bias_bound: float = 0.0

    def summary(self) -> dict[str, object]:
        """The figures an operator compares between modes."""
        return {"blanket_mode": self.blanket_mode, "m": self.m, "mse_bound": self.mse_bound,
                "variance": self.variance, "messages_per_user": self.messages_per_user,
                "lambdas": list(self.lambdas), "bias_bound": self.bias_bound}

    @property
    def objective_value(self) -> float:
        """The value of the objective the search minimised (with correlation up to R > 1:
        the variance plus the worst squared bias of one item, docs/protocol.md section 5.1)."""
        if self.objective != Objective.VARIANCE.value:
            return self.mse_bound
        return self.variance + self.bias_bound**2

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dictionary (tuples become lists)."""
        data = asdict(self)
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in data.items()}


class _LambdaSolver:
    """lambda_k(m) for every level; the accountant caches its per-m work across levels."""

    def __init__(self, levels: Sequence[float], set_size: int, delta: float, users: int,
                 domain_size: int, mode: BlanketMode) -> None:
        self.levels = list(levels)
        self.set_size = set_size
        self.delta = delta
        self.users = users
        self.domain_size = domain_size
        self.mode = mode
        self._steering: dict[float, list[float]] = {}
        self._cells: dict[float, int] = {}  # per level: its root's grid cell at the last m
        # Per level: the log excess's rise over that cell (:func:`_largest_holding_index`).
        self._slopes: dict[float, float] = {}
        self._exact: dict[tuple[float, float], list[float]] = {}
        # Per (m, xtol): the certified lambdas found so far, by level index (the ranking
        # of the finalists asks for them one level at a time and may stop early).
        self._levels: dict[tuple[float, float], dict[int, float]] = {}
        # Per level index: certified / steering lambda at the last rate where both were
        # strictly between 0 and 1 (:meth:`_brackets`).
        self._ratios: dict[int, float] = {}

    def solve(self, level: float, m: float, xtol: float,
              bracket: tuple[float, float] = (0.0, 1.0)) -> float:
        """Largest feasible lambda (certified); ``bracket`` is a hint, verified before use."""
        return max_lambda(level, self.set_size, self.delta, self.users, m, self.domain_size,
                          mode=self.mode, xtol=xtol, bracket=bracket)

    def all_exact(self, m: float, xtol: float) -> list[float]:
        """Exact lambdas for every level, bracketed by anchor solutions when K is large.

        The steering solutions at m bracket each level's root (a hint the accountant
        verifies and widens when it does not hold), which saves most evaluations of
        the certified bound.  Kept per (m, xtol): the m search's finalists are ranked
        with them, and the chosen one is published with the same lambdas.
        """
        key = (m, xtol)
        if key not in self._exact:
            self._exact[key] = self._solve_all(m, xtol)
        return self._exact[key]

    def level(self, m: float, xtol: float, index: int) -> float:
        """The certified lambda of level ``index`` at m (kept; at most ANCHOR_LEVELS levels).

        Each level's root search is on its own, from its own hint, so the levels may be
        asked for in any order and any subset (:meth:`all_exact` reads them from here).
        """
        known = self._levels.setdefault((m, xtol), {})
        if index not in known:
            known[index] = self.solve(self.levels[index], m, xtol,
                                      self._brackets(m, xtol)[index])
            steering = self.approximate(m)[index]
            if 0.0 < known[index] < 1.0 and 0.0 < steering < 1.0:
                self._ratios[index] = known[index] / steering
        return known[index]

    def known(self, m: float, xtol: float) -> dict[int, float]:
        """The certified lambdas at m found so far, by level index."""
        return self._levels.get((m, xtol), {})

    def _solve_all(self, m: float, xtol: float) -> list[float]:
        count = len(self.levels)
        if count <= ANCHOR_LEVELS:
            return [self.level(m, xtol, index) for index in range(count)]
        brackets = self._brackets(m, xtol)
        anchors = _anchor_indices(count, ANCHOR_LEVELS)
        values: dict[int, float] = {
            i: self.solve(self.levels[i], m, xtol, brackets[i]) for i in anchors}
        for left, right in pairwise(anchors):
            grid = np.linspace(values[left], values[right], BETWEEN_ANCHORS + 1)
            for i in range(left + 1, right):
                values[i] = self._largest_feasible_on(grid, self.levels[i], m)
        return [values[i] for i in range(count)]

    def _brackets(self, m: float, xtol: float) -> list[tuple[float, float]]:
        """Hints for the certified searches at m: for each level, its finest coarser
        certified solution when one is kept (it is feasible, and within its tolerance of
        the root: a bracket that narrow leaves the root search a few steps), else the
        steering solution, scaled by the level's certified / steering ratio at the last
        rate certified (:func:`_learnt_bracket`)."""
        coarser = sorted((key for key in self._levels if key[0] == m and key[1] > xtol),
                         key=lambda key: key[1], reverse=True)
        hints: dict[int, tuple[float, float]] = {}
        for key in coarser:  # the finest last: it overrides
            width = 2.0 * key[1]
            for index, lam in self._levels[key].items():
                hints[index] = (lam, min(1.0, lam * (1.0 + width) + 1e-12))
        if len(hints) == len(self.levels):
            return [hints[index] for index in range(len(self.levels))]
        steering = self.approximate(m)
        return [hints.get(index, _learnt_bracket(guess, self._ratios.get(index)))
                for index, guess in enumerate(steering)]

    def _largest_feasible_on(self, grid: np.ndarray, level: float, m: float) -> float:
        """The largest rate of ``grid`` (increasing; its first point feasible) meeting level.

        A bisection over the grid's points: the levels between two anchors share the
        points, and the accountant caches its work per rate, so each point is paid for
        once and then read at every level.  The first point is feasible because the
        left anchor's rate meets a stricter level (delta_user falls as E grows); so when
        both anchors have the same rate (both send their full signal, typically), that
        rate is the answer with nothing to evaluate.
        """
        def holds(lam: float) -> bool:
            return user_delta(level, lam, self.set_size, self.users, m, self.domain_size,
                              mode=self.mode, delta=self.delta) <= self.delta

        lo, hi = 0, grid.size - 1
        if grid[hi] <= grid[lo]:
            return float(grid[lo])
        if holds(float(grid[hi])):
            return float(grid[hi])
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if holds(float(grid[mid])):
                lo = mid
            else:
                hi = mid
        return float(grid[lo])

    def approximate(self, m: float) -> list[float]:
        """Lambdas for the m search: exact at the anchors, interpolated in between.

        Each anchor's rate is located on the fixed grid :data:`STEERING_RATES` by
        bisection (:meth:`_steering_rate`); the accountant caches its loss
        distributions per rate, so a grid point is paid for once per m and then
        read at every level.  Levels are solved in increasing order, and lambda grows
        with the level, so each solution bounds the next one from below.  Kept per
        m: the final certified search starts from the m search's own solutions.
        """
        if m in self._steering:
            return self._steering[m]
        count = len(self.levels)
        indices = (list(range(count)) if count <= ANCHOR_LEVELS
                   else _anchor_indices(count, STEERING_ANCHORS))
        solved: list[float] = []
        floor = 0
        for i in indices:
            floor, rate = self._steering_rate(self.levels[i], m, floor)
            solved.append(rate)
        if count > ANCHOR_LEVELS:
            solved = list(np.interp(self.levels, [self.levels[i] for i in indices], solved))
        self._steering[m] = solved
        return solved

    def _steering_rate(self, level: float, m: float, floor: int) -> tuple[int, float]:
        """(j, lambda): STEERING_RATES[j] is the largest feasible grid rate on the coarse
        loss grid (j >= ``floor``, which must be feasible), lambda the root inside the
        grid cell above it to SEARCH_XTOL (a bracketed root search that the grid cell
        has made short).  Below the grid's first positive rate (1e-4) lambda is taken
        as 0: a level sending so little adds nothing the objective can tell from
        nothing, and a root search down there, where the relative tolerance is tiny
        and the logarithmic excess falls without bound towards 0, took a dozen to
        thirty evaluations (two thirds of a small population's m search)."""
        grid = STEERING_RATES

        def value(lam: float) -> float:
            return user_delta(level, lam, self.set_size, self.users, m, self.domain_size,
                              mode=self.mode, delta=self.delta, step=COARSE_STEP)

        # One memory for the grid search and the root search inside the cell it finds:
        # the cell's ends (and lambda = 1) are evaluated once.
        excess = remembered(log_excess(value, self.delta))
        last = grid.size - 1
        previous = self._cells.get(level)
        start = previous if previous is not None and floor <= previous < last else None
        lo, slope = _largest_holding_index(lambda j: excess(float(grid[j])), floor, last,
                                           start, self._slopes.get(level))
        if lo == last:
            return last, 1.0
        hi = lo + 1
        self._cells[level] = lo
        if slope is not None:
            self._slopes[level] = slope
        if lo == 0:
            return lo, 0.0
        low, high = float(grid[lo]), float(grid[hi])
        return lo, _largest_feasible(excess, low, high, rtol=SEARCH_XTOL, logarithmic=True,
                                     close=_slope_band(excess, low, high, SEARCH_XTOL))


def _largest_holding_index(excess_at: Callable[[int], float], floor: int, last: int,
                           start: int | None, slope: float | None = None
                           ) -> tuple[int, float | None]:
    """The largest j in [floor, last] with excess_at(j) <= 0, given that ``floor`` holds
    and that the excess grows with j (the steering grid's rates): an interpolation search.

    The log excess of the steering grid (geometric rates) is close to linear in j, so
    after two evaluations the secant predicts the crossing, and the cell around the
    prediction is probed; a probe that leaves the bracket more than half as wide as it
    was two probes before is followed by a bisection step, so the search takes at most
    about twice bisection's log2(last - floor) evaluations, and typically two or three.
    ``start`` (the cell found at the m search's last rate) is probed first; with
    ``slope``, the log excess's rise per index there at that rate, the crossing is
    predicted from that one value, else the neighbour on the side the probe points to is
    probed for a second.  The top, lambda = 1, is evaluated only once every probe below
    it has held (at a new m it costs every composition of the revealed-send bound).  The
    answer is the one a bisection gives: the excess is monotone, so the largest holding
    index is one index whatever the path.  Returned with the rise over the answer's
    cell (None where an end has no finite log excess), for the next search's ``slope``.
    """
    lo, hi, failed = floor, last, False  # hi fails once ``failed``; lo holds
    seen: dict[int, float] = {}

    def probe(j: int) -> None:
        nonlocal lo, hi, failed
        value = seen[j] = excess_at(j)
        if value <= 0.0:
            lo = max(lo, j)
        elif j <= hi:
            hi, failed = j, True

    if start is not None:
        probe(start)
        if slope is not None and slope > 0.0 and start > 0 and math.isfinite(seen[start]):
            guess = math.floor(start - seen[start] / slope)
            for j in (guess, guess + 1):  # the predicted cell's two ends
                if lo < j < hi or (j == hi and not failed and j < last):
                    probe(j)
        else:
            neighbour = start + 1 if lo == start else start - 1
            if lo < neighbour < hi or (neighbour == hi and not failed and neighbour < last):
                probe(neighbour)
    widths = [hi - lo]
    while lo < last and not (failed and hi - lo == 1):
        top = hi - 1 if failed else last - 1  # the top is probed last of all
        candidate = (lo + hi + (0 if failed else 1)) // 2
        # The secant through the two evaluated points nearest the bracket (its ends, once
        # both are known; index 0, lambda = 0, has no finite log excess).
        near = sorted((max(lo - j, j - hi, 0), j) for j, value in seen.items()
                      if j > 0 and math.isfinite(value))[:2]
        halving = len(widths) < 3 or widths[-1] <= widths[-3] / 2
        if len(near) == 2 and halving:
            (j1, j2) = sorted(j for _, j in near)
            e1, e2 = seen[j1], seen[j2]
            if e2 > e1:
                candidate = math.floor(j1 - e1 * (j2 - j1) / (e2 - e1))
                if candidate in seen:  # the cell's lower end is known: its upper end
                    candidate += 1
        if candidate > top:
            candidate = top if top > lo else last
        candidate = max(candidate, lo + 1)
        probe(candidate)
        widths.append(hi - lo)
    ends = (seen.get(lo), seen.get(lo + 1)) if lo > 0 else (None, None)
    if None in ends or not all(math.isfinite(value) for value in ends):
        return lo, None
    return lo, ends[1] - ends[0]


def _hint_bracket(guess: float) -> tuple[float, float]:
    """A narrow bracket around a steering solution (the certified root sits close to it)."""
    return max(0.0, 0.85 * guess), min(1.0, 1.05 * guess)


#: Half-width (relative) of the bracket around a steering solution scaled by a learnt
#: certified / steering ratio.
LEARNT_BRACKET = 0.02


def _learnt_bracket(guess: float, ratio: float | None) -> tuple[float, float]:
    """A bracket for a level's certified root from its steering solution ``guess``.

    The certified bound sits above the steering estimate by a margin that changes slowly
    with m at one level (certified / steering lambda 0.955 to 0.958 over the finalists at
    n = 1e4, d = 128, s = 8), so once one rate of the level is certified, the steering
    solution times that ratio is a close guess: a bracket LEARNT_BRACKET either side of
    it, which the accountant verifies and widens (along the secant of its ends) where the
    ratio has moved.  Before that, and where the steering solution is 0 or 1, the
    steering solution's own bracket (:func:`_hint_bracket`).
    """
    if ratio is None or not 0.0 < guess < 1.0:
        return _hint_bracket(guess)
    centre = guess * ratio
    return centre * (1.0 - LEARNT_BRACKET), min(1.0, centre * (1.0 + LEARNT_BRACKET))


def _anchor_indices(count: int, anchors: int) -> list[int]:
    return sorted({round(i * (count - 1) / (anchors - 1)) for i in range(anchors)})


def _candidate_blankets(low: float, high: float, below: int, depth: float) -> list[float]:
    """Grid over (0, high]: every bucket between low and high, plus ``below`` points below
    low, geometric down to ``depth`` times low.

    Small populations want many points below low, far down: their objective is jagged
    there.
    """
    candidates = {high, low}
    # Below the smallest full-signal rate every level sends less than its full signal,
    # but the bound can still be lowest there (small populations): a geometric sweep.
    candidates.update(np.geomspace(max(low * depth, 1e-5), low, below).tolist()
                      if low > 0 else [])
    first, last = max(1, math.ceil(low)), max(1, math.ceil(high))
    if last - first <= 16:
        for bucket in range(first, last + 1):
            candidates.update(bucket - 1 + j / 4 for j in range(1, 5))
    else:
        candidates.update(np.geomspace(max(low, 1e-3), high, 48).tolist())
        candidates.update(float(c) for c in range(first, min(last, first + 8) + 1))
    return sorted(m for m in candidates if 0.0 < m <= high)


def optimize(
    level_counts: Sequence[float],
    levels: Sequence[float],
    domain_size: int,
    set_size: int,
    delta: float,
    *,
    dropout_tolerance: float = 0.0,
    fake_tolerance: float = 0.0,
    blanket: float | None = None,
    lower_bounds: bool | None = None,
    blanket_mode: str | BlanketMode = BlanketMode.SLOTS,
    compare_modes: bool = False,
    max_messages_per_user: int | None = None,
    objective: str | Objective = Objective.VARIANCE,
    min_lambda: float = 0.0,
    headroom: float = 0.0,
    correlation_ratio: float = 1.0,
    largest_share: float = 1.0,
) -> OptimizationResult:
    """Choose m (unless ``blanket`` fixes it) and lambda_k for every level.

    ``level_counts`` are n_k (exact, or the debiased estimates n^_k; fractional
    values are fine), ``levels`` the increasing E_k.  ``lower_bounds`` defaults to
    computing the exhibited lower-bound epsilons when there are at most
    :data:`LOWER_BOUND_LEVELS` levels.  ``blanket_mode`` chooses the slot or the
    independent blanket; ``compare_modes`` also optimises the other mode and
    reports it as ``alternative``.  ``max_messages_per_user`` caps the data
    ciphertexts of one submission: the slot blanket's m is searched up to
    budget - s; the independent blanket (s + d messages) is refused above it.
    ``dropout_tolerance`` tau and ``fake_tolerance`` f set the accounted count
    h = ceil((1 - f) ceil((1 - tau) n)).  ``objective`` is what the m search
    minimises (:class:`Objective`; both values are reported).  ``min_lambda`` is a
    floor on every lambda_k: m where a level would send less is not considered
    (a tiny lambda makes that level's estimate lean on the other levels' users).
    ``headroom``: the lambdas and the achieved epsilons are certified at
    delta (1 - headroom), so that a client whose recomputation charges its rounding a
    little differently still verifies every level at delta
    (:data:`segshuffle.core.rules.PUBLICATION_HEADROOM`); lower bounds and the
    reported delta stay at delta.
    ``correlation_ratio`` R guards the variance objective against levels that go with
    items (docs/protocol.md section 5.1, :mod:`segshuffle.core.correlation`): it adds the
    worst squared bias of one item (held by at most ``largest_share`` of the users) when
    the holders' level odds differ from the others' by up to a factor R, and lets the
    lambdas move toward each other (lambda'_k = min(lambda_k, c)).  R = 1 is the
    variance objective itself.
    """
    mode = parse_mode(blanket_mode)
    goal = parse_objective(objective)
    guard = CorrelationGuard(correlation_ratio, largest_share)
    if guard.active and goal is not Objective.VARIANCE:
        raise ValueError("a correlation ratio above 1 needs the variance objective")
    floor = validation.require_unit_interval("min lambda", min_lambda)
    levels = validation.require_levels(levels)
    counts = validation.require_level_counts(level_counts, len(levels))
    d, s = validation.require_domain(domain_size, set_size)
    delta = validation.require_delta(delta)
    if not 0.0 <= headroom < 1.0:
        raise ValueError(f"headroom must be in [0, 1), got {headroom!r}")
    target = delta * (1.0 - headroom)  # what every published upper bound is certified at
    tau = validation.require_tolerance("dropout tolerance", dropout_tolerance)
    f = validation.require_tolerance("fake tolerance", fake_tolerance)
    users = math.fsum(counts)
    if users < 2:
        raise ValueError(f"need at least 2 users, got {users:g}")
    validation.require_users("users", math.ceil(users))
    n_min = accounting_users(users, tau)
    honest = honest_users(users, tau, f)
    solver = _LambdaSolver(levels, s, target, honest, d, mode)
    ceiling = _blanket_ceiling(mode, s, d, max_messages_per_user)

    def signal_blanket(level: float) -> float:
        try:
            m_k = full_signal_blanket(level, s, target, honest, d, mode=mode, rtol=SEARCH_RTOL,
                                      step=COARSE_STEP)
        except UnprotectableLevelError:  # no rate up to the cap gives lambda = 1
            return ceiling
        return min(m_k, ceiling)

    level_blankets: tuple[float, ...] | None = None
    if blanket is not None:
        m = require_blanket_rate(blanket, d, mode)
        if m > ceiling:
            raise ValueError(f"blanket rate m = {m:g} exceeds the limit of "
                             f"{max_messages_per_user or MAX_MESSAGES_PER_USER} messages per user")
    else:
        if len(levels) <= ANCHOR_LEVELS:
            level_blankets = tuple(signal_blanket(e) for e in levels)
            low, high = min(level_blankets), max(level_blankets)
        else:
            high, low = signal_blanket(levels[0]), signal_blanket(levels[-1])
        def score(rate: float, lambdas: Sequence[float]) -> float:
            if min(lambdas) < floor * (1.0 - SEARCH_XTOL):
                return math.inf
            if goal is Objective.PAPER_BOUND:
                return mse_bound(users, rate, s, counts, lambdas)
            if guard.active:
                return guard.best_cap(
                    lambda rates: variance_given_data(users, rate, s, counts, rates, d, mode),
                    counts, lambdas)[0]
            return variance_given_data(users, rate, s, counts, lambdas, d, mode)

        def score_floor(rate: float, known: dict[int, float]) -> float:
            # The smallest score over all lambdas agreeing with ``known``, the other
            # levels at most the ceiling of :func:`_largest_lambdas`.
            if known and min(known.values()) < floor * (1.0 - SEARCH_XTOL):
                return math.inf  # the score's own floor test already fails
            largest = _largest_lambdas(known, len(levels))
            if goal is Objective.PAPER_BOUND:
                return mse_bound_floor(users, rate, s, counts, largest)
            return variance_floor(users, rate, s, counts, known, largest, d, mode,
                                  data=not guard.active)

        finalists = _search_blanket(solver, score, low, high, level_blankets or (), mode,
                                    small=users < SMALL_POPULATION)
        if len(levels) <= ANCHOR_LEVELS:
            finalists += _full_signal_neighbours(solver, finalists, ceiling)
        if len(finalists) == 1:
            m = finalists[0]
        elif len(levels) <= ANCHOR_LEVELS:
            m = _ranked_best(solver, finalists, score, score_floor)
        else:
            # With many levels most lambdas come from grids between anchor solutions,
            # which a refinement would rebuild: the finalists are ranked with the final
            # precision, every level of each.
            m = min((score(rate, solver.all_exact(rate, LAMBDA_XTOL)), i, rate)
                    for i, rate in enumerate(finalists))[2]

    lambdas = solver.all_exact(m, LAMBDA_XTOL)
    if floor > 0.0 and min(lambdas) < floor:
        raise ValueError(f"no blanket rate gives every level lambda >= {floor:g} "
                         f"(at m = {m:g} the strictest level gets {min(lambdas):.4g})")
    if blanket is None and m > 0.0 and all(lam >= 1.0 for lam in lambdas):
        # Every level sends its full signal: the bound only falls with m down to the
        # strictest level's full-signal rate, which the coarse steering grid overstates.
        m = _lowest_full_signal_blanket(solver, levels[0], m)
        lambdas = solver.all_exact(m, LAMBDA_XTOL)
    largest = lambdas
    if guard.active:
        lambdas = list(guard.best_cap(
            lambda rates: variance_given_data(users, m, s, counts, rates, d, mode),
            counts, lambdas)[1])
    epsilons = _achieved_epsilons(levels, lambdas, s, target, honest, m, d, mode)
    if lambdas != largest:
        epsilons = _capped_epsilons(epsilons, lambdas, largest, s, target, honest, m, d, mode)
    if lower_bounds is None:
        lower_bounds = len(levels) <= LOWER_BOUND_LEVELS
    epsilons_lower = tuple(
        user_epsilon(lam, s, delta, honest, m, d, lower=True, hint=upper, mode=mode)
        if lower_bounds else None
        for lam, upper in zip(lambdas, epsilons, strict=True)
    )
    alternative = None
    if compare_modes:
        other = (BlanketMode.INDEPENDENT if mode is BlanketMode.SLOTS else BlanketMode.SLOTS)
        try:
            result = optimize(counts, levels, d, s, delta, dropout_tolerance=tau,
                              fake_tolerance=f,
                              blanket=None if blanket is None else min(blanket, float(d)),
                              lower_bounds=False, blanket_mode=other,
                              max_messages_per_user=max_messages_per_user,
                              objective=goal, min_lambda=floor, headroom=headroom,
                              correlation_ratio=guard.ratio,
                              largest_share=guard.largest_share)
            alternative = result.summary()
        except ValueError as exc:
            alternative = {"blanket_mode": other.value, "unavailable": str(exc)}
    return OptimizationResult(
        m=m,
        lambdas=tuple(lambdas),
        mse_bound=mse_bound(users, m, s, counts, lambdas),
        epsilons=epsilons,
        epsilons_lower=epsilons_lower,
        delta=delta,
        users=users,
        accounting_users=n_min,
        honest_users=honest,
        levels=tuple(levels),
        level_counts=tuple(counts),
        domain_size=d,
        set_size=s,
        dropout_tolerance=tau,
        fake_tolerance=f,
        level_blankets=level_blankets,
        blanket_fixed=blanket is not None,
        blanket_mode=mode.value,
        messages_per_user=messages_per_user(s, m, d, mode),
        alternative=alternative,
        objective=goal.value,
        variance=variance_given_data(users, m, s, counts, lambdas, d, mode),
        min_lambda=floor,
        correlation_ratio=guard.ratio,
        largest_share=guard.largest_share,
        bias_bound=guard.bias_bound(counts, lambdas),
        relative_bias_bound=relative_bias_bound(counts, lambdas, guard.ratio),
    )


def _capped_epsilons(epsilons: Sequence[float], lambdas: Sequence[float],
                     largest: Sequence[float], s: int, delta: float, users: int, m: float,
                     d: int, mode: BlanketMode) -> tuple[float, ...]:
    """The achieved epsilons once the correlation guard lowered some lambdas to a cap c.

    The capped levels send at c, below the largest rate their level allows, so they are
    over-protected: they share the smallest epsilon that c meets (searched once), which
    never exceeds their level (c is feasible there).
    """
    capped = [i for i, (lam, top) in enumerate(zip(lambdas, largest, strict=True))
              if lam < top]
    cap = lambdas[capped[0]]
    shared = user_epsilon(cap, s, delta, users, m, d, hint=min(epsilons[i] for i in capped),
                          mode=mode)
    if shared is None:
        return tuple(epsilons)
    return tuple(min(e, shared) if i in capped else e for i, e in enumerate(epsilons))


def _full_signal_excess(solver: _LambdaSolver, level: float, step: float = DEFAULT_STEP
                        ) -> Callable[[float], float]:
    """m -> log delta_user(level, lambda = 1, m) - log delta: certified at the default
    ``step``, where it is <= 0 exactly where the level keeps its full signal at m (close to
    linear in m within a bucket); the steering estimate at COARSE_STEP."""
    def value(m: float) -> float:
        return user_delta(level, 1.0, solver.set_size, solver.users, m, solver.domain_size,
                          mode=solver.mode, delta=solver.delta, step=step)

    return remembered(log_excess(value, solver.delta))


def _full_signal_neighbours(solver: _LambdaSolver, finalists: Sequence[float],
                            ceiling: float) -> list[float]:
    """Certified full-signal rates just above the finalists, as further finalists.

    The m search locates each level's full-signal rate m_k on the coarse loss grid,
    which puts it a little low (about 1% on the paper's settings).  A finalist at
    such a steering m_k then has that level's certified lambda just short of 1
    (0.98, say), and the objective's s n_k lambda (1 - lambda) term charges the
    shortfall heavily: the certified m_k, slightly higher, is the better rate.  So
    for each finalist whose least strict level short of its full signal has a
    certified lambda of at least NEAR_FULL_SIGNAL, the smallest rate above it (at
    most FULL_SIGNAL_REACH higher, inside its bucket ceil(m) in the slot mode) at
    which that level's certified lambda is 1 joins the finalists.  Every returned
    rate is verified feasible.

    Finalists close together often share that rate: they are taken in increasing order,
    each level's excess is remembered across them, and a rate found for a lower
    finalist is the answer for a higher one that it lies above (the higher finalist
    still short of the full signal), with no new search.
    """
    found: list[float] = []
    excesses: dict[float, Callable[[float], float]] = {}
    last_found: dict[float, float] = {}
    for rate in sorted(finalists):
        if rate <= 0.0:
            continue
        level = _least_strict_short(solver, rate)
        if level is None:
            continue
        excess = excesses.setdefault(level, _full_signal_excess(solver, level))
        top = min(rate * (1.0 + FULL_SIGNAL_REACH), ceiling)
        if solver.mode is BlanketMode.SLOTS:
            top = min(top, float(math.ceil(rate)))
        if top <= rate or excess(rate) <= 0.0:
            continue
        known = last_found.get(level)
        if known is not None and rate < known <= top:
            found.append(known)  # the smallest feasible rate above a lower finalist, too
            continue
        if excess(top) > 0.0:
            continue
        last_found[level] = _smallest_feasible(excess, rate, top, rtol=FULL_SIGNAL_RTOL)
        found.append(last_found[level])
    return [m for m in dict.fromkeys(found) if m not in finalists]


def _least_strict_short(solver: _LambdaSolver, rate: float) -> float | None:
    """The least strict level whose certified lambda at ``rate`` is in [NEAR_FULL_SIGNAL, 1).

    The levels are certified from the least strict down, and the search stops at the
    first such level or once a lambda shows that every stricter level falls short of
    NEAR_FULL_SIGNAL (:func:`_largest_lambdas`): the ranking then need not have
    certified the stricter levels' smaller lambdas, which cost the most evaluations.
    """
    for index in reversed(range(len(solver.levels))):
        lam = solver.level(rate, RANKING_XTOL, index)
        if NEAR_FULL_SIGNAL <= lam < 1.0:
            return solver.levels[index]
        if lam * (1.0 + LEVEL_ORDER_SLACK) < NEAR_FULL_SIGNAL:
            return None
    return None


def _largest_lambdas(known: dict[int, float], count: int) -> list[float]:
    """The largest each level's certified lambda can be, given those found (by index).

    lambda_k grows with the level E_k (delta_user falls as E grows), so an unknown
    level's lambda is at most that of the next known less strict level, widened by
    LEVEL_ORDER_SLACK (each is found only to its root search's precision), and at most 1
    above every known level.
    """
    largest = [1.0] * count
    ceiling = 1.0
    for index in reversed(range(count)):
        if index in known:
            largest[index] = known[index]
            ceiling = min(1.0, known[index] * (1.0 + LEVEL_ORDER_SLACK))
        else:
            largest[index] = ceiling
    return largest


def _ranked_best(solver: _LambdaSolver, candidates: Sequence[float],
                 score: Callable[[float, Sequence[float]], float],
                 score_floor: Callable[[float, dict[int, float]], float]) -> float:
    """The candidate rate with the smallest ``score`` at certified lambdas (RANKING_XTOL;
    ties: the earlier candidate), by branch and bound over the levels.

    A candidate's levels are certified one at a time, from the least strict down (the
    strictest, with the smallest lambdas, take the most evaluations).  ``score_floor(rate,
    known)`` is a value its score cannot be below whatever the levels not yet certified
    hold; the candidate with the smallest floor is advanced a level at a time, and one
    whose floor exceeds the best complete score (by more than FLOOR_MARGIN, against
    rounding) is dropped: it cannot win.  The answer is the one ranking every level of
    every candidate gives; at small populations, whose finalists' strictest levels
    barely send, most of them are dropped before those.
    """
    count = len(solver.levels)
    scored: dict[int, float] = {}
    while True:
        for index, rate in enumerate(candidates):
            if index not in scored and len(solver.known(rate, RANKING_XTOL)) == count:
                scored[index] = score(rate, solver.all_exact(rate, RANKING_XTOL))
        best = min(scored.values(), default=math.inf)
        open_ = [(score_floor(rate, solver.known(rate, RANKING_XTOL)), index, rate)
                 for index, rate in enumerate(candidates) if index not in scored]
        open_ = [entry for entry in open_ if not entry[0] * (1.0 - FLOOR_MARGIN) > best]
        if not open_:
            break
        _, index, rate = min(open_)
        known = solver.known(rate, RANKING_XTOL)
        solver.level(rate, RANKING_XTOL, max(i for i in range(count) if i not in known))
    return candidates[min(scored, key=lambda index: (scored[index], index))]


def _lowest_full_signal_blanket(solver: _LambdaSolver, strictest: float, m: float) -> float:
    """A smaller m' <= m at which the strictest level keeps lambda = 1, near the rate where
    it stops doing so (one to three certified evaluations).

    The certified excess log delta_user(E, lambda = 1) - log delta, negative at m, is
    followed down to its crossing along the slope of the steering estimate's excess (two
    cheap evaluations, at m and 1% below it): the step the slope predicts, nudged 2e-4 to
    the safe side, is evaluated with the certified accountant.  Where it holds it is the
    answer; where it fails, the crossing lies between it and m, and at most two bisection
    steps close in on it.  A regula falsi on the certified excess alone (its values move
    in small steps: the loss grid and the comparisons' means) took four evaluations at a
    new m, each all the revealed-send bound's compositions and comparisons, and its
    bracket's far end stalled it (n = 1e6, d = 128, s = 8: 0.53 of 1.6 CPU-s).  Stays in
    m's bucket ceil(m) in the slot mode (the bound jumps there) and at most 3% below m;
    only verified-feasible rates are returned.
    """
    excess = _full_signal_excess(solver, strictest)
    floor = math.ceil(m) - 1.0 if solver.mode is BlanketMode.SLOTS else 0.0
    f_feasible = excess(m)
    lowest = max(math.nextafter(floor, math.inf), (1.0 - LOWEST_REACH) * m)
    if lowest >= m or f_feasible > 0.0:
        return m
    steering = _full_signal_excess(solver, strictest, COARSE_STEP)
    probe = max(lowest, (1.0 - LOWEST_PROBE) * m)
    slope = (steering(m) - steering(probe)) / (m - probe)  # falls as m grows: < 0
    if not slope < 0.0:
        return m
    guess = max(lowest, m - f_feasible / slope)  # the crossing on the steering slope
    candidate = min(m, guess * (1.0 + 2e-4))  # a hair on the safe side
    if candidate >= m:
        return m
    if excess(candidate) <= 0.0:
        return candidate
    feasible, short = m, candidate
    for _ in range(LOWEST_BISECTIONS):
        middle = 0.5 * (feasible + short)
        if excess(middle) <= 0.0:
            feasible = middle
        else:
            short = middle
    return feasible


def _blanket_ceiling(mode: BlanketMode, set_size: int, domain_size: int,
                     max_messages_per_user: int | None) -> float:
    """The largest m the search may consider: the protocol cap, d, and the message budget."""
    # Past m = d/2 the independent blanket gets more predictable, not less.
    ceiling = MAX_BLANKET_RATE if mode is BlanketMode.SLOTS else domain_size / 2.0
    budget = validation.require_int(
        "messages per user",
        MAX_MESSAGES_PER_USER if max_messages_per_user is None else max_messages_per_user, 1)
    budget = min(budget, MAX_MESSAGES_PER_USER)
    room = budget - set_size
    if mode is BlanketMode.INDEPENDENT:
        if set_size + domain_size > budget:
            raise ValueError(f"the independent blanket sends s + d = {set_size + domain_size} "
                             f"messages per user, above the limit of {budget}")
        return ceiling
    if room < 0:
        raise ValueError(f"a budget of {budget} messages per user is below the set size "
                         f"{set_size}")
    return min(ceiling, float(room))


def optimize_best_mode(
    level_counts: Sequence[float],
    levels: Sequence[float],
    domain_size: int,
    set_size: int,
    delta: float,
    *,
    max_messages_per_user: int | None = None,
    **options: object,
) -> OptimizationResult:
    """The blanket mode with the smaller objective within the message budget.

    Both modes are optimised (the slot blanket with m <= budget - s, the
    independent one only when s + d fits); the winner is returned with the
    other's summary as ``alternative``.  ValueError when neither fits.
    """
    results: list[OptimizationResult] = []
    reasons: list[str] = []
    for mode in BlanketMode:
        try:
            results.append(optimize(level_counts, levels, domain_size, set_size, delta,
                                    blanket_mode=mode,
                                    max_messages_per_user=max_messages_per_user,
                                    **options))  # type: ignore[arg-type]
        except ValueError as exc:
            reasons.append(f"{mode.value}: {exc}")
    if not results:
        raise ValueError("no blanket mode fits: " + "; ".join(reasons))
    results.sort(key=lambda result: result.objective_value)
    best = results[0]
    alternative = (results[1].summary() if len(results) > 1
                   else {"blanket_mode": reasons[0].split(":")[0], "unavailable": reasons[0]})
    return replace(best, alternative=alternative)


def _search_blanket(solver: _LambdaSolver,
                    score: Callable[[float, Sequence[float]], float],
                    low: float, high: float, breakpoints: Sequence[float],
                    mode: BlanketMode, *, small: bool = False) -> list[float]:
    """Grid over the buckets, then a bounded scalar refinement inside the best cell.

    ``score(m, lambdas)`` is the objective (infinite where a constraint fails).  In
    the independent mode the objective has no buckets; the grid is then geometric
    over (0, high] and the refinement spans the neighbouring points.

    Returns the best rate first, then up to FINALISTS - 1 other grid rates whose
    steering objective is within FINALIST_MARGIN of it (the SMALL_ values when
    ``small``): the steering lambdas run a few percent off, which can hide that a
    level's full-signal rate (where its lambda (1 - lambda) term vanishes) is the
    better choice; the caller ranks these finalists with certified lambdas.
    """
    if high == 0.0:
        return [0.0]

    cache: dict[float, float] = {}

    def objective(m: float) -> float:
        if m not in cache:
            cache[m] = score(m, solver.approximate(m))
        return cache[m]

    if mode is BlanketMode.INDEPENDENT:
        grid = sorted({high, low, *np.geomspace(max(min(low, high) * 0.25, 1e-4), high, 24)}
                      | {b for b in breakpoints if 0.0 < b <= high})
    else:
        below, depth = (64, 1e-4) if small else (LARGE_BELOW_POINTS, LARGE_BELOW_DEPTH)
        grid = sorted(set(_candidate_blankets(low, high, below, depth))
                      | {b for b in breakpoints if b > 0.0})
    # The independent blanket's objective has no buckets: around its one best point the
    # grid is filled in, not around runners-up, which a bucket's jump cannot bring back.
    leaders = 1 if mode is BlanketMode.INDEPENDENT else REFINED_LEADERS
    values = _coarse_to_fine(grid, objective, {low, high, *breakpoints}, leaders=leaders)
    best = int(np.argmin(values))
    m_best = grid[best]
    # Refine between the neighbouring grid points, staying inside one bucket.
    left = grid[best - 1] if best > 0 else 0.0
    right = min(grid[best + 1] if best + 1 < len(grid) else high, high)
    if mode is BlanketMode.SLOTS:
        bucket = math.ceil(m_best)
        left = max(left, bucket - 1.0)
        right = min(right, float(bucket))
    resolution = max(REFINE_XTOL * m_best, 1e-9)
    if right - left > 1e-9:
        # From the grid's best point and its neighbours' known values (a bucket's far end,
        # where m - 1 is an integer of the bucket below, lies outside).
        found, value = refined_minimum(objective, math.nextafter(left, math.inf), right,
                                       m_best, known=cache, xatol=resolution,
                                       ftol=REFINE_FTOL, maxiter=16)
        if value < objective(m_best):
            m_best = found
    best_value = objective(m_best)
    margin, finalists = ((SMALL_FINALIST_MARGIN, SMALL_FINALISTS) if small
                         else (FINALIST_MARGIN, FINALISTS))
    close = sorted((value, m) for m, value in zip(grid, values, strict=True)
                   if m != m_best and value <= best_value * (1.0 + margin))  # inf: not swept
    chosen = [m_best]
    for _, m in close:
        if len(chosen) == finalists:
            break
        # A rate the refinement could not tell from a finalist (inside its tolerance of
        # it, in the same bucket) is that finalist again: ranking it would certify every
        # level once more for nothing the search can see.
        if not any(abs(m - kept) <= resolution and _same_bucket(m, kept, mode)
                   for kept in chosen):
            chosen.append(m)
    return chosen


def _same_bucket(a: float, b: float, mode: BlanketMode) -> bool:
    """Whether two rates share the slot blanket's bucket ceil(m) (always, independent)."""
    return mode is not BlanketMode.SLOTS or math.ceil(a) == math.ceil(b)


def _coarse_to_fine(grid: Sequence[float], objective: Callable[[float], float],
                    kept: set[float], *, stride: int = COARSE_STRIDE,
                    leaders: int = REFINED_LEADERS) -> list[float]:
    """The objective on the sweep's grid where it matters; ``inf`` where it was skipped.

    Every ``stride``-th point of the (increasing) grid is evaluated, with its ends and the
    points of ``kept`` (the full-signal rates, where the objective has kinks).  Then, as
    long as one of the ``leaders`` best points evaluated so far has an unevaluated
    neighbour on the grid, every point between that leader and the evaluated points on
    either side of it is evaluated.  So the best point found and the runners-up each end
    with both grid neighbours known, as when the whole grid is swept, at about
    len(grid) / stride + 2 leaders stride evaluations; a minimum narrower than
    ``stride`` grid cells that no coarse point is near can be missed (the finalists are
    then ranked among what was found; the sweep only steers, every published rate is
    certified).  The loop ends: each pass evaluates at least one new point.
    """
    count = len(grid)
    values = [math.inf] * count
    known = [False] * count
    for i, m in enumerate(grid):
        if i % stride == 0 or i == count - 1 or m in kept:
            values[i], known[i] = objective(m), True
    while True:
        ranked = sorted((values[i], i) for i in range(count) if known[i])[:leaders]
        gaps = [i for _, i in ranked
                if (i > 0 and not known[i - 1]) or (i + 1 < count and not known[i + 1])]
        if not gaps:
            return values
        for i in gaps:
            lo, hi = i - 1, i + 1
            while lo > 0 and not known[lo]:
                lo -= 1
            while hi < count - 1 and not known[hi]:
                hi += 1
            for j in range(max(lo, 0), min(hi, count - 1) + 1):
                if not known[j]:
                    values[j], known[j] = objective(grid[j]), True


def _achieved_epsilons(levels: Sequence[float], lambdas: Sequence[float], s: int, delta: float,
                       users: int, m: float, d: int, mode: BlanketMode
                       ) -> tuple[float, ...]:
    """User-level epsilon achieved by each lambda_k: at most its level, by construction.

    A level with lambda_k < 1 sits on its constraint: lambda_k was verified to meet
    delta_user(E) <= delta at exactly E = level and is within LAMBDA_XTOL of the largest rate
    that does, so the level itself is the achieved guarantee (to ~1e-9).  Levels
    with lambda_k = 1 are over-protected; they share one pair, whose smallest
    feasible E is searched once (hinted by the smallest such level).
    """
    full = [level for level, lam in zip(levels, lambdas, strict=True) if lam >= 1.0]
    shared: float | None = None
    if full:
        shared = user_epsilon(1.0, s, delta, users, m, d, hint=min(full), mode=mode)
    achieved = []
    for level, lam in zip(levels, lambdas, strict=True):
        if lam >= 1.0 and shared is not None:
            achieved.append(min(shared, level))
        else:
            achieved.append(level)
    return tuple(achieved)

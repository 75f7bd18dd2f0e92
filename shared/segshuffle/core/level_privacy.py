"""What round 2 reveals about the level a user chose (docs/protocol.md section 4.6).

**Neighbours.**  One user, its set x of s distinct ids (padding included) unchanged, at
level k against level k'.  Its item slots send each item of x with probability
lambda = lambda_k against lambda' = lambda_k'; its blanket does not depend on its level.
Other users' messages do not depend on the victim, so (joint convexity, as in section
4.1) they are fixed and known to the server, and so is x: the worst case.  The server's
view is the histogram of all decoded messages; the null count is the fixed total less
the rest.  Items outside x get the same law in both worlds, independently of the
victim's messages given what is said below, so the view reduces to the counts on x.

**The one-bin pair.**  With f the pmf of a bin's blanket count and V ~ Bernoulli(lambda),

    P(a) = (1 - lambda) f(a) + lambda f(a - 1),     Q(a) = the same with lambda',
    L(a) = log(1 - lambda + lambda rho(a)) - log(1 - lambda' + lambda' rho(a)),

rho(a) = f(a - 1) / f(a) (a / mu for a Poisson, a (1 - p) / ((n - a + 1) p) for a
binomial; +infinity above a binomial's support, where L = log(lambda / lambda')).

**Independent blanket** (exact).  Item t's blanket count is Binomial(h, m / D), h the
honest users (the victim's own blanket included: it does not depend on its level),
independent across items.  The counts on x_1..x_s are independent, each the one-bin pair
with that binomial, and the counts elsewhere do not depend on the victim.  So

    delta_level(E) = D_E(s-fold composition of the one-bin pair),

computed on the loss grid of :mod:`segshuffle.core.privacy_loss` (connect the dots,
mass outside the window at +infinity: an upper bound).

**Slot blanket** (labelled groups).  N = h c slots (c = ceil(m), every honest user's,
the victim's included), each carrying with probability gamma = m / c an item uniform
over the D items, else a null.  Give every slot an independent label J uniform on
1..s, and let a slot labelled j land on x_j with probability s gamma / D, on the other
x_i never, on each item outside x with probability gamma / D, and be null otherwise.
Averaged over J every item still gets gamma / D per slot and slots stay independent,
so this is the protocol's blanket.  Reveal, per label j, the group size N_j (slots
labelled j that are on x_j or null) and the group's count on x_j, and put the victim's
j-th item in group j.  The histogram and the null count are functions of that and of
the slots outside x, whose law does not depend on the level, so the real view's
divergence is at most this one's.  (N_1, ..., N_s) ~ Multinomial(N; p_g, ..., p_g),
p_g = (1 - gamma + s gamma / D) / s, does not depend on the level; given the sizes the
groups are independent and group j is the one-bin pair with f = Binomial(N_j, p_1),
p_1 = (s gamma / D) / (1 - gamma + s gamma / D).  Hence

    delta_level(E) <= E[D_E(pair(N_1) x ... x pair(N_s))] <= E[F(min_j N_j)],
    F(k) = D_E(s-fold composition of pair(Binomial(k, p_1))),

since one more slot in a group adds an independent Bernoulli(p_1) to its count in both
worlds, a post-processing: F does not grow with k.  With M = min_j N_j, a ladder
k_0 < ... < k_L, v_0 = 1 and v_i = F(k_{i-1} + 1) (made non-increasing),

    E[F(M)] <= v_{L+1} + sum_i Pr[M <= k_i] (v_i - v_{i+1}),
    Pr[M <= k] <= min(1, s Pr[N_1 <= k]),   N_1 ~ Binomial(N, p_g)

(Abel summation of the step function above F; the differences are >= 0, so the
probabilities may be replaced by upper bounds).  k_0 is the largest k with
s Pr[N_1 <= k] within LADDER_SLACK delta.  Once a charged probability reaches 1, every
later one is 1 and the sum's terms from there telescope (v_{L+1} + sum_{i >= j}
(v_i - v_{i+1}) = v_j): the bound is the same formula on the ladder cut before that
rung, so F is not evaluated at the rungs from there on (the largest groups; with the
running maximum over fewer values the cut ladder's bound is never larger).  For s = 1
the group is every slot not on another item, N_1 is exactly that count, and the bound is
the exact mixture up to the ladder's steps.  At gamma = 1 every slot sends, the null
count reveals how many items the victim sent, and the bound says so (p_1 = s / D).

**Both directions.**  delta_level is the larger of D(P || Q) and D(Q || P): the second
is the same pair with lambda and lambda' exchanged.

**Lower bound** (an exhibited view).  Slot blanket: coarsen the view to (U, R), U the
messages on x's items and R those on the other items.  Given R = b (law Binomial(N,
gamma (D - s) / D), the same in both worlds), U = Binomial(N - b, p_1) + Binomial(s,
lambda), so the divergence is a mixture over b of one-dimensional pairs, each summed
exactly over a window; b is bucketed, each bucket charged at its smallest b (the most
slots, the smallest divergence), the mass outside dropped.  For s = 1 this is the exact
view.  Independent blanket: the exact composition on a grid rounded down, the mass
outside the window dropped.

**The level message.**  Round 2 also carries the reported level, sealed on its own: the
report of round 1 again.  Without ``level_privacy`` it is the index itself (a server that
knows the other users' levels reads the victim's off either round's histogram); with
eps_p it is K-ary randomized response, a pure eps_p guarantee between any two levels.
Given the level the report and the data slots are independent, so a change of level
is protected over both rounds at (eps_p + eps_2, delta) with (eps_2, delta) this
module's: P1(r) <= e^eps_p Q1(r) and P2(S_r) <= e^eps_2 Q2(S_r) + delta give
sum_r P1(r) P2(S_r) <= e^(eps_p + eps_2) sum_r Q1(r) Q2(S_r) + delta.

**Level and items both changed.**  Chain (k, x) -> (k, x') -> (k', x'): the level's data
guarantee (e_k, delta) and then this one, (eps_2, delta'), give (e_k + eps_2,
delta + e^e_k delta').
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import distributions, validation
from .accounting import log_excess
from .blanket import BlanketMode, parse_mode, require_blanket_rate
from .hockey_stick import EPSILON_CAP
from .memo import memory_bounded_cache
from .privacy_loss import (
    COMPOSED_CACHE_BYTES,
    DEFAULT_STEP,
    LOWER_STEP,
    MAX_BIN_POINTS,
    BinLaw,
    ComposedLoss,
    LossDistribution,
    compose_loss,
    discretise,
)
from .randomizers import blanket_probability, blanket_slots
from .scalar_search import bracketed_root, remembered

#: Share of the target delta that the ladder's k_0 (group sizes charged 1) may take.
LADDER_SLACK = 1e-3

#: Ladder points in standard deviations of one group's size (above k_0).
LADDER_SIGMAS = (-6.0, -4.0, -3.0, -2.0, -1.25, -0.5, 0.25)

#: Up to this many group sizes between k_0 and the ladder's top, every size is a ladder
#: point (small populations, where the sigma-spaced ladder would be coarse).
EVERY_SIZE = 48

#: Most buckets of the lower bound's mixture over the slots outside x.
LOWER_BUCKETS = 64

#: Standard deviations each side of the mean of that mixture's window.
LOWER_WINDOW_SIGMAS = 10.0

#: Relative precision of the epsilon searches.
EPSILON_RTOL = 1e-6

#: Relative precision of the lower bounds' epsilons (figures for a report).
LOWER_RTOL = 1e-4

#: Most distinct lambdas whose every pair a report covers (pairs grow as its square).
MAX_REPORTED_RATES = 16

#: Safety margins on every certified delta (as the data accountant's).
_RELATIVE_MARGIN = 1e-9
_ABSOLUTE_MARGIN = 1e-15


def pair_loss(law: BinLaw, lam: float, other: float, *, upper: bool,
              step: float = DEFAULT_STEP) -> LossDistribution:
    """The loss distribution of the one-bin pair (module docstring) under P (rate ``lam``)
    against Q (rate ``other``), on the grid: connect the dots and the mass outside the
    window at +infinity (``upper``), or rounded down with that mass dropped."""
    lo, hi = law.window()
    hi = hi + 1  # the victim's message may add one
    masses = law.pmf(np.arange(lo - 1, hi + 1, dtype=np.int64))
    f, f_prev = masses[1:], masses[:-1]
    p = (1.0 - lam) * f + lam * f_prev
    q = (1.0 - other) * f + other * f_prev
    # Each of P(a), Q(a) is a sum of two non-negative terms, accurate to a few ulps, so
    # their log ratio is accurate to about 1e-15 (far below the grid's step).
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.log(p) - np.log(q)
    finite_p = p > 0.0
    infinite = finite_p & ((q <= 0.0) | np.isposinf(loss))
    kept = finite_p & ~infinite & np.isfinite(loss)
    infinity = float(np.sum(p[infinite]))
    if upper:
        # Mass of P outside lo..hi: the blanket outside lo..hi, or outside lo-1..hi-1
        # with the message sent.
        infinity += (1.0 - lam) * law.outside(lo, hi) + lam * law.outside(lo - 1, hi - 1)
    if not kept.any():
        return LossDistribution(step=step, offset=0, pmf=np.zeros(1),
                                infinity=min(infinity, 1.0))
    spread = float(loss[kept].max() - loss[kept].min())
    step = max(step, spread / MAX_BIN_POINTS)
    offset, pmf = discretise(loss[kept], p[kept], step, upper)
    return LossDistribution(step=step, offset=offset, pmf=pmf, infinity=min(infinity, 1.0))


@memory_bounded_cache(COMPOSED_CACHE_BYTES, max_entries=512)
def composed_level_pair(law: BinLaw, lam: float, other: float, times: int, *, upper: bool,
                        step: float = DEFAULT_STEP) -> ComposedLoss:
    """The ``times``-fold composition of :func:`pair_loss` (cached)."""
    return compose_loss(pair_loss(law, lam, other, upper=upper, step=step), times, upper)


def _certified(value: float) -> float:
    return min(1.0, value * (1.0 + _RELATIVE_MARGIN) + _ABSOLUTE_MARGIN)


@dataclass(frozen=True)
class LevelSetting:
    """One campaign's round-2 geometry: h honest users, s, D, m and the blanket mode."""

    users: int
    set_size: int
    domain_size: int
    m: float
    mode: BlanketMode = BlanketMode.SLOTS

    def __post_init__(self) -> None:
        validation.require_users("users", self.users)
        validation.require_domain(self.domain_size, self.set_size)
        object.__setattr__(self, "mode", parse_mode(self.mode))
        require_blanket_rate(self.m, self.domain_size, self.mode)

    @property
    def gamma(self) -> float:
        return blanket_probability(self.m)

    @property
    def n_slots(self) -> int:
        """N = h c, every honest user's blanket slots."""
        return self.users * blanket_slots(self.m)

    def group_geometry(self) -> tuple[float, float]:
        """(p_g, p_1): a slot's chance to be in one group, and to land on its item there."""
        s, d, gamma = self.set_size, self.domain_size, self.gamma
        inside = (1.0 - gamma) + s * gamma / d
        if inside <= 0.0:
            return 0.0, 0.0
        return inside / s, min(1.0, (s * gamma / d) / inside)

    def independent_law(self) -> BinLaw:
        p = self.m / self.domain_size
        return BinLaw(mean=self.users * p, trials=self.users)


class _Ladder:
    """The Abel-summed bound E[F(min_j N_j)] of the module docstring for one setting."""

    def __init__(self, setting: LevelSetting, slack: float) -> None:
        self.setting = setting
        self.p_group, self.p_one = setting.group_geometry()
        n, p, s = setting.n_slots, self.p_group, setting.set_size
        if n == 0 or p == 0.0:
            self.ladder, self.cdf = [-1], np.zeros(1)
            return
        mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
        k0 = distributions.binom_ppf(slack / s, n, p)
        while k0 >= 0 and s * distributions.binom_cdf(k0, n, p) > slack:
            k0 -= 1
        ladder = [k0]  # k_0 = -1: no size is charged 1 (Pr[M <= -1] = 0)
        top = min(n, math.floor(mean + LADDER_SIGMAS[-1] * sd))
        if top - k0 <= EVERY_SIZE:  # few sizes: every one is a ladder point
            ladder.extend(range(k0 + 1, min(n, math.ceil(mean + 6.0 * sd)) + 1))
        for z in LADDER_SIGMAS:
            k = min(n, math.floor(mean + z * sd))
            if k > ladder[-1] and (k - ladder[-1]) > 5e-3 * k:
                ladder.append(k)
        cdf = np.array([distributions.binom_cdf(k, n, p) if k >= 0 else 0.0 for k in ladder])
        charged = np.minimum(cdf * s, 1.0)
        # Rungs from the first one charged 1 on weigh nothing (module docstring).
        full = np.flatnonzero(charged >= 1.0)
        live = max(int(full[0]) if full.size else len(ladder), 1)
        self.ladder = ladder[:live]
        self.cdf = charged[:live]

    def _f(self, slots: int, eps: float, lam: float, other: float, step: float) -> float:
        law = BinLaw(mean=slots * self.p_one, trials=slots)
        composed = composed_level_pair(law, lam, other, self.setting.set_size, upper=True,
                                       step=step)
        return composed.delta(eps)

    def delta(self, eps: float, lam: float, other: float, step: float) -> float:
        values = [self._f(k + 1, eps, lam, other, step) for k in self.ladder]
        v = np.maximum.accumulate(np.array([1.0, *values])[::-1])[::-1]
        if self.ladder == [-1]:  # no blanket: F(0) with certainty
            return float(v[-1])
        return min(1.0, float(v[-1] + np.sum(self.cdf * (v[:-1] - v[1:]))))


@lru_cache(maxsize=256)
def _ladder(setting: LevelSetting, slack: float) -> _Ladder:
    return _Ladder(setting, slack)


def level_delta(eps: float, lam: float, other: float, setting: LevelSetting, *,
                delta: float = 1e-9, step: float = DEFAULT_STEP) -> float:
    """An upper bound on delta_level(E) of lambda against lambda' (both directions) on the
    server's full round-2 data view; ``delta`` sets the ladder's slack (module docstring)."""
    eps = _require_eps(eps)
    lam = validation.require_unit_interval("lambda", lam)
    other = validation.require_unit_interval("lambda", other)
    if lam == other or setting.set_size == 0:
        return 0.0
    if setting.mode is BlanketMode.INDEPENDENT:
        law = setting.independent_law()
        value = max(composed_level_pair(law, a, b, setting.set_size, upper=True,
                                        step=step).delta(eps)
                    for a, b in ((lam, other), (other, lam)))
        return _certified(value)
    ladder = _ladder(setting, LADDER_SLACK * delta)
    value = max(ladder.delta(eps, a, b, step) for a, b in ((lam, other), (other, lam)))
    return _certified(value)


def _require_eps(eps: float) -> float:
    value = validation.require_finite("privacy level", eps)
    if not 0.0 <= value <= EPSILON_CAP:
        raise ValueError(f"epsilon must be in [0, {EPSILON_CAP:g}], got {eps!r}")
    return value


# -- the exhibited lower bound -------------------------------------------------------------
def _pair_divergences(f: np.ndarray, w_p: np.ndarray, w_q: np.ndarray,
                      eps: float) -> tuple[float, float]:
    """(sum_u (P(u) - e^E Q(u))_+, the same with P and Q exchanged) for P = f * w_p and
    Q = f * w_q (f the blanket's pmf on a window, w the victim's counts' pmfs on 0..s):
    only what the window holds, a lower bound."""
    p = np.convolve(f, w_p)
    q = np.convolve(f, w_q)
    e = math.exp(eps)
    return (float(np.sum(np.maximum(p - e * q, 0.0))),
            float(np.sum(np.maximum(q - e * p, 0.0))))


def _victim_counts(set_size: int, lam: float) -> np.ndarray:
    return np.array([math.comb(set_size, j) * lam**j * (1.0 - lam) ** (set_size - j)
                     for j in range(set_size + 1)])


def level_delta_lower(eps: float, lam: float, other: float, setting: LevelSetting) -> float:
    """The divergence at E of an exhibited view (module docstring): a lower bound."""
    eps = _require_eps(eps)
    if lam == other:
        return 0.0
    s = setting.set_size
    if setting.mode is BlanketMode.INDEPENDENT:
        law = setting.independent_law()
        return max(composed_level_pair(law, a, b, s, upper=False, step=LOWER_STEP).delta(eps)
                   for a, b in ((lam, other), (other, lam)))
    w_p, w_q = _victim_counts(s, lam), _victim_counts(s, other)
    n = setting.n_slots
    _, p_one = setting.group_geometry()
    if n == 0:
        return max(_pair_divergences(np.ones(1), w_p, w_q, eps))
    p_out = setting.gamma * (setting.domain_size - s) / setting.domain_size
    forward = backward = 0.0  # each direction is its own mixture over b
    for weight, f in _bucket_blankets(n, p_out, p_one):
        one, two = _pair_divergences(f, w_p, w_q, eps)
        forward += weight * one
        backward += weight * two
    return max(forward, backward)


@lru_cache(maxsize=32)
def _bucket_blankets(n: int, p_out: float, p_one: float) -> tuple[tuple[float, np.ndarray], ...]:
    """(Pr[bucket], pmf of Binomial(n - b, p_1) on its window) per bucket of b, b its
    smallest value (kept: an epsilon search asks for them at every E)."""
    out = []
    for start, weight in _outside_buckets(n, p_out):
        slots = n - start
        law = BinLaw(mean=slots * p_one, trials=slots)
        lo, hi = law.window()
        out.append((weight, law.pmf(np.arange(lo, hi + 1, dtype=np.int64))))
    return tuple(out)


@lru_cache(maxsize=256)
def _outside_buckets(n: int, p: float) -> tuple[tuple[int, float], ...]:
    """(smallest b, Pr[b in bucket]) of the slots outside x, Binomial(n, p), over a window
    of LOWER_WINDOW_SIGMAS standard deviations in at most LOWER_BUCKETS buckets."""
    if p <= 0.0:
        return ((0, 1.0),)
    mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
    lo = max(0, math.floor(mean - LOWER_WINDOW_SIGMAS * sd - 1))
    hi = min(n, math.ceil(mean + LOWER_WINDOW_SIGMAS * sd + 1))
    width = max(1, math.ceil((hi - lo + 1) / LOWER_BUCKETS))
    starts = list(range(lo, hi + 1, width))
    ends = [min(b + width - 1, hi) for b in starts]
    upper = np.array([distributions.binom_cdf(e, n, p) for e in ends])
    below = np.array([distributions.binom_cdf(b - 1, n, p) if b > 0 else 0.0 for b in starts])
    return tuple(zip(starts, np.maximum(upper - below, 0.0).tolist(), strict=True))


# -- epsilons -------------------------------------------------------------------------------
def _level_crossing(delta_at, target: float, rtol: float, *, met: bool) -> float | None:
    """Where delta_at(E) (falling with E) crosses ``target`` on [0, cap], to ``rtol`` relative.

    ``met``: the answer has delta_at <= target (an upper bound's epsilon, never below the
    crossing); else it keeps delta_at > target (a lower bound's, never above it).  0 when
    delta_at(0) <= target; None when even the cap is not met.  The root search runs on
    ln delta_at(E) - ln target, close to linear in E where delta_at spans decades (on the
    difference itself Brent's method took 18 to 20 evaluations a crossing, 10 to 15 on this;
    :func:`segshuffle.core.accounting.log_excess`, as the accountant's own searches).
    """
    excess = remembered(log_excess(delta_at, target))
    if excess(0.0) <= 0.0:
        return 0.0
    if excess(EPSILON_CAP) > 0.0:
        return None
    xtol = 1e-12 if met else 1e-9
    root = bracketed_root(excess, 0.0, EPSILON_CAP, xtol=xtol, rtol=rtol / 4.0)
    step = max(root * rtol / 4.0, xtol)
    x = root
    if met:
        while excess(x) > 0.0:
            x, step = min(x + step, EPSILON_CAP), 2.0 * step
    else:
        while x > 0.0 and excess(x) <= 0.0:
            x, step = max(x - step, 0.0), 2.0 * step
    return x


def level_epsilon(lam: float, other: float, setting: LevelSetting, delta: float, *,
                  lower: bool = False) -> float | None:
    """The smallest E with delta_level(E) <= delta (None: above the cap, no guarantee).

    ``lower``: the exhibited view's instead, a lower bound: the server tells the two
    levels apart at delta up to that E.
    """
    delta = validation.require_delta(delta)
    if lower:
        return _level_crossing(lambda e: level_delta_lower(e, lam, other, setting), delta,
                               LOWER_RTOL, met=False)
    return _level_crossing(lambda e: level_delta(e, lam, other, setting, delta=delta), delta,
                           EPSILON_RTOL, met=True)


@dataclass(frozen=True)
class LevelPair:
    """Round 2's guarantee between two levels' rates, the items unchanged."""

    levels: tuple[float, float]
    lambdas: tuple[float, float]
    epsilon_upper: float | None
    epsilon_lower: float | None
    epsilon_both_rounds: float | None
    """Rounds 1 and 2 together: eps_p + the upper bound (None: no guarantee, which is
    the case without level privacy)."""


@dataclass(frozen=True)
class LevelReport:
    """Round 2's guarantee for every pair of levels with distinct rates (at ``delta``)."""

    delta: float
    level_privacy: float | None
    pairs: tuple[LevelPair, ...]
    complete: bool
    """False when the levels have more than MAX_REPORTED_RATES distinct rates: then only
    the pairs of neighbouring rates and of the extreme ones are reported."""

    def worst_per_level(self, lambdas: list[float]) -> list[float | None]:
        """For the level of each rate, the largest round-2 epsilon against any other level
        (0 when every level sends at its rate; None: no guarantee)."""
        out: list[float | None] = []
        for lam in lambdas:
            worst: float | None = 0.0
            for pair in self.pairs:
                if float(lam) not in pair.lambdas:
                    continue
                if pair.epsilon_upper is None:
                    worst = None
                    break
                worst = max(worst, pair.epsilon_upper)
            out.append(worst)
        return out


def level_report(levels: list[float], lambdas: list[float], setting: LevelSetting,
                 delta: float, *, level_privacy: float | None = None,
                 lower: bool = True) -> LevelReport:
    """Round 2's level guarantee between every two levels whose rates differ.

    Levels with the same rate send alike, and round 2 tells them apart not at all; one
    representative level stands for each rate.  Past MAX_REPORTED_RATES distinct rates
    only neighbouring rates and the two extremes are paired (``complete`` False).
    """
    if len(levels) != len(lambdas):
        raise ValueError("one lambda per level")
    by_rate: dict[float, float] = {}
    for level, lam in zip(levels, lambdas, strict=True):
        by_rate.setdefault(float(lam), float(level))
    rates = sorted(by_rate)
    complete = len(rates) <= MAX_REPORTED_RATES
    if complete:
        index_pairs = [(i, j) for i in range(len(rates)) for j in range(i + 1, len(rates))]
    else:
        index_pairs = [(i, i + 1) for i in range(len(rates) - 1)] + [(0, len(rates) - 1)]
    pairs = []
    for i, j in index_pairs:
        a, b = rates[i], rates[j]
        upper = level_epsilon(a, b, setting, delta)
        low = level_epsilon(a, b, setting, delta, lower=True) if lower else None
        both = None if (upper is None or level_privacy is None) else upper + level_privacy
        pairs.append(LevelPair(levels=(by_rate[a], by_rate[b]), lambdas=(a, b),
                               epsilon_upper=upper, epsilon_lower=low,
                               epsilon_both_rounds=both))
    return LevelReport(delta=delta, level_privacy=level_privacy, pairs=tuple(pairs),
                       complete=complete)


def clear_caches() -> None:
    """Forget the kept compositions and ladders (cold benchmarks)."""
    composed_level_pair.cache_clear()
    _ladder.cache_clear()
    _outside_buckets.cache_clear()
    _bucket_blankets.cache_clear()

"""User-level privacy accounting of the segmented protocol (docs/protocol.md, "Accounting").

The server sees the whole histogram of decrypted messages, null messages
included.  Every bound here is a bound on that full view; none goes through
group privacy.  ``users`` is h, the number of honest users whose blanket is
guaranteed, the victim included (:func:`segshuffle.core.rules.honest_users`: n,
or ceil((1 - f) ceil((1 - tau) n)) with a dropout tolerance tau and a fake
tolerance f).  A user at level E with Poisson rate lambda is protected when
delta_user(E) <= delta.

The upper bound itself, the smallest of the slot blanket's bounds or the independent
blanket's composition, is :mod:`segshuffle.core.user_bound` (one implementation, which the
numpy-free client accountant runs too); this module validates the server's arguments, runs
it on numpy, and adds what only the server computes: the lambda and epsilon searches, the
full-signal rates, the audit and the exhibited lower bounds.

**Lower bounds** are divergences of an exhibited dataset's view
(:mod:`segshuffle.core.full_view`): the largest E the server can still
distinguish at delta.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from . import hockey_stick, poisson_comparison, slot_groups, slot_joint, slot_single, validation
from .blanket import BlanketMode, parse_mode, require_blanket_rate
from .full_view import clear_caches as clear_full_view_caches
from .full_view import single_item_full_view_delta, slot_view_lower_delta
from .hockey_stick import (
    EPSILON_CAP,
    CountPair,
    _largest_feasible,
    _slope_band,
    _smallest_feasible,
    delta_for,
    epsilon_for,
    poisson_pair,
)
from .privacy_loss import DEFAULT_STEP, LOWER_STEP, composed_pair
from .privacy_loss import clear_caches as clear_loss_caches
from .randomizers import blanket_probability
from .rules import MAX_BLANKET_RATE, MAX_LEVEL
from .scalar_search import remembered
from .slot_joint import joint_view
from .user_bound import (
    ACCOUNTED_BLANKET_PER_ITEM,
    DEFAULT_DELTA,
    POISSON_SLACK_SHARE,
    SlotAccountant,
    blanket_geometry,
    certified,
    certified_user_delta,
    independent_law,
    independent_pairs,
    refuted_delta,
    slot_bound,
)
from .user_bound import clear_caches as clear_slot_bounds

#: Relative precision of the epsilon searches (the CLI contract asks for 1e-4).
EPSILON_RTOL = 1e-8

#: Relative precision of the certified lambda searches (the root search is run to a
#: quarter of it, then verified feasible, or stops at a feasible rate this close to the
#: crossing along the log excess's slope: :func:`max_lambda`), so that a published level
#: sits on its constraint and its achieved epsilon is the level itself to about 1e-9.
LAMBDA_XTOL = 1e-7

#: Grid step of the loss in searches that only steer (the optimizer's m search):
#: coarser and with an uncertified Poisson comparison, several times faster.  Never
#: used for a published value: the optimizer recomputes every lambda at DEFAULT_STEP.
COARSE_STEP = 4e-3

#: The full-signal search's first top below one slot per user (:func:`full_signal_blanket`):
#: gamma = 0.999, where the rate m = 1 (gamma = 1) costs up to 30 times more to evaluate.
ONE_SLOT_PROBE = 0.999

__all__ = [
    "EPSILON_CAP",
    "AuditResult",
    "SlotAccountant",
    "UnprotectableLevelError",
    "audit",
    "blanket_geometry",
    "clear_caches",
    "full_signal_blanket",
    "independent_pairs",
    "item_pair",
    "max_lambda",
    "user_delta",
    "user_delta_lower",
    "user_epsilon",
    "user_level_holds",
]


class UnprotectableLevelError(ValueError):
    """No blanket rate within the cap gives a level its full signal (lambda = 1)."""


@dataclass(frozen=True)
class AuditResult:
    """Achieved user-level epsilon: upper bound and exhibited lower bound (None: > cap)."""

    epsilon_upper: float | None
    epsilon_lower: float | None


def item_pair(lam: float, users: int, m: float, domain_size: int, *, lower: bool = False
              ) -> CountPair:
    """The two-bin count pair of one item message sent with rate ``lam`` (slot blanket)."""
    n_slots, r = blanket_geometry(users, m, domain_size, every_slot=lower)
    return poisson_pair(lam, n_slots, r)


def _require_epsilon(eps: float) -> float:
    """An epsilon at which a divergence is evaluated: a number in [0, MAX_LEVEL] (not a
    string or a bool, which float() would take)."""
    if isinstance(eps, str | bool):
        raise ValueError(f"privacy level must be a number, got {eps!r}")
    value = validation.require_finite("privacy level", eps)
    if not 0.0 <= value <= MAX_LEVEL:
        raise ValueError(f"privacy level must be in [0, {MAX_LEVEL:g}], got {eps!r}")
    return value


def clear_caches() -> None:
    """Forget every cached per-(N, r) computation (benchmarks measure cold costs)."""
    clear_slot_bounds()
    slot_single.clear_caches()
    slot_groups.clear_caches()
    slot_joint.clear_caches()
    clear_loss_caches()
    poisson_comparison.clear_caches()
    hockey_stick.clear_caches()
    clear_full_view_caches()


def _check(users: int, m: float, domain_size: int, set_size: int, mode: BlanketMode) -> None:
    validation.require_users("users", users)
    validation.require_domain(domain_size, set_size)
    require_blanket_rate(m, domain_size, mode)


def user_delta(level: float, lam: float, set_size: int, users: int, m: float,
               domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
               delta: float | None = None, step: float = DEFAULT_STEP,
               enough: float = 0.0) -> float:
    """An upper bound on the user-level delta at E = ``level`` of the server's full view.

    ``delta``, the target the caller will compare against, sets the Poisson
    slack budget of the slot bound (POISSON_SLACK_SHARE delta; 1e-9 assumed when
    omitted).  ``step`` is the loss grid (coarser: faster and looser, still an
    upper bound).  ``enough``: a check of delta_user <= ``enough`` (a client's) stops at
    the first slot bound that certifies it (:meth:`SlotAccountant.user_delta`), so a
    value at or below ``enough`` may be a larger bound than the smallest one.
    """
    mode = parse_mode(mode)
    level = _require_epsilon(level)
    lam = validation.require_unit_interval("lambda", lam)
    _check(users, m, domain_size, set_size, mode)
    if lam == 0.0:
        return 0.0
    target = (DEFAULT_DELTA if delta is None
              else validation.require_probability_open("delta", delta))
    return certified_user_delta(level, lam, set_size, users, m, domain_size,
                                slots=mode is BlanketMode.SLOTS, delta=target, step=step,
                                enough=enough)


def refuting_delta(level: float, lam: float, set_size: int, users: int, m: float,
                   domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
                   delta: float) -> float | None:
    """A certified lower bound on delta_user(E = ``level``) when it exceeds ``delta``; else None.

    Where it answers, no upper bound can certify ``delta`` (each is at least delta_user), so
    a client refuses without computing one; the proof is
    :func:`segshuffle.core.user_bound.refuted_delta`'s.
    """
    mode = parse_mode(mode)
    level = _require_epsilon(level)
    lam = validation.require_unit_interval("lambda", lam)
    _check(users, m, domain_size, set_size, mode)
    delta = validation.require_probability_open("delta", delta)
    return refuted_delta(level, lam, set_size, users, m, domain_size,
                         slots=mode is BlanketMode.SLOTS, delta=delta)


def user_delta_lower(level: float, lam: float, set_size: int, users: int, m: float,
                     domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
                     full_view: bool = True) -> float:
    """The divergence at E = ``level`` of an exhibited dataset's view: a lower bound.

    Slot blanket: the larger of the two-bin pair of one differing item (any
    gamma) and, when gamma = 1 and 2s <= d, the aggregated view of
    :func:`segshuffle.core.full_view.slot_view_lower_delta` (exact for s = 1);
    for s = 1 and gamma < 1 the exact full view of
    :func:`segshuffle.core.full_view.single_item_full_view_delta` where its grid
    is affordable, and for s >= 2, 2s <= d and gamma < 1 the joint view of two
    disjoint sets (:mod:`segshuffle.core.slot_joint`, charged at the larger slot
    counts) where it is small enough to enumerate (``full_view=False`` skips
    both: a cheaper, smaller lower bound).
    Independent blanket: the exact composition, discretised optimistically.
    """
    mode = parse_mode(mode)
    lam = validation.require_unit_interval("lambda", lam)
    _check(users, m, domain_size, set_size, mode)
    if lam == 0.0 or domain_size < 2:
        return 0.0
    if mode is BlanketMode.INDEPENDENT:
        pairs = independent_pairs(set_size, domain_size)
        if pairs == 0:
            return 0.0
        law = independent_law(users, m, domain_size, lower=True)
        if law.mean > ACCOUNTED_BLANKET_PER_ITEM:
            return 0.0  # too large a blanket to evaluate; 0 is a (trivial) lower bound
        return composed_pair(law, lam, pairs, upper=False, step=LOWER_STEP).delta(level)
    n_slots, r = blanket_geometry(users, m, domain_size, every_slot=True)
    if n_slots * r > ACCOUNTED_BLANKET_PER_ITEM:
        return 0.0  # as above
    value = delta_for(poisson_pair(lam, n_slots, r), level)
    gamma = blanket_probability(m)
    if n_slots > 0 and gamma == 1.0 and 2 * set_size <= domain_size:
        value = max(value, slot_view_lower_delta(level, lam, set_size, n_slots, r))
    elif n_slots > 0 and set_size == 1 and full_view:
        exact = single_item_full_view_delta(level, lam, n_slots, r, gamma)
        if exact is not None:
            value = max(value, exact)
    elif n_slots > 0 and set_size >= 2 and 2 * set_size <= domain_size and full_view:
        # Disjoint sets of s items: the joint view is exactly their full view.
        view = joint_view(n_slots, gamma, domain_size, set_size, lower=True)
        if view.usable:
            value = max(value, view.delta(level, lam))
    return value


def user_level_holds(level: float, lam: float, set_size: int, delta: float, users: int,
                     m: float, domain_size: int, *,
                     mode: str | BlanketMode = BlanketMode.SLOTS) -> bool:
    """Whether a user at level E sending with rate ``lam`` is (E, delta)-DP on the full view."""
    delta = validation.require_delta(delta)
    return user_delta(level, lam, set_size, users, m, domain_size, mode=mode,
                      delta=delta) <= delta


def max_lambda(level: float, set_size: int, delta: float, users: int, m: float,
               domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
               xtol: float = LAMBDA_XTOL, bracket: tuple[float, float] = (0.0, 1.0),
               step: float = DEFAULT_STEP) -> float:
    """lambda_k: the largest rate in [0, 1] with delta_user(E) <= delta.

    delta_user grows with lambda (the tau_j are non-decreasing in j, and a
    larger rate is a stochastically larger Binomial(s, lambda); in the
    independent mode a larger rate is a larger shift), so the feasible set is
    an interval [0, lambda_k].  ``bracket`` is a hint, verified before use.  The
    result is verified feasible and below the threshold by at most ``xtol`` (relative),
    or its divergence is within a factor exp(-xtol) of delta (``step``: the loss grid,
    see :func:`user_delta`).

    The search: the hint's ends, a bracket widened along the secant in (ln lambda, log
    excess) where they miss (:func:`_verified_bracket`), then Brent's method on ln lambda
    (:func:`segshuffle.core.hockey_stick._largest_feasible`, ``logarithmic``), where the
    log excess is close to linear: delta_user is a mixture of terms growing like powers
    lambda^j (j >= 1: the weights Binom(s, lambda)(j) of the revealed-send form, and
    alike for the other bounds).  It stops at the first feasible point whose log excess
    is within xtol times the bracket's slope r (the log excess's rise per unit of ln
    lambda between its ends, at least 1) of 0 (``close``): its divergence is within
    exp(-xtol r) of delta, and along that slope it is within about xtol of the crossing.
    The certified bound is not smooth at finer scales anyway (its loss grid moves its
    value by about 1e-6 relative between rates 1e-7 apart, not monotonically: a
    bisection to xtol chased that staircase for a dozen evaluations).
    """
    mode = parse_mode(mode)
    level = validation.require_level("privacy level", level)
    delta = validation.require_delta(delta)
    _check(users, m, domain_size, set_size, mode)

    if mode is BlanketMode.SLOTS:
        bound = slot_bound(users, m, domain_size, set_size, POISSON_SLACK_SHARE * delta, step)

        def value(lam: float) -> float:
            return certified(bound.user_delta(level, lam))
    else:
        def value(lam: float) -> float:
            return user_delta(level, lam, set_size, users, m, domain_size, mode=mode,
                              delta=delta, step=step)

    excess = remembered(log_excess(value, delta))
    # A hint whose top is infeasible shows that lambda = 1 is too (delta_user grows with
    # lambda), without evaluating it: at lambda = 1 the slot bound's cheaper parts do
    # not apply, and a new m pays for all its compositions there.
    top = min(bracket[1], 1.0)
    if not (top < 1.0 and excess(top) > 0.0) and excess(1.0) <= 0.0:
        return 1.0
    lo, hi = _verified_bracket(excess, *bracket)
    return _largest_feasible(excess, lo, hi, rtol=xtol, logarithmic=True,
                             close=_slope_band(excess, lo, hi, xtol))


def log_excess(value: Callable[[float], float], delta: float) -> Callable[[float], float]:
    """x -> log value(x) - log delta: <= 0 exactly where value(x) <= delta.

    The accountant's searches look for where a divergence crosses delta.  The divergence
    moves by orders of magnitude across a bracket (it decays about exponentially away
    from the crossing), so on its own scale the root search sees a function close to a
    step and falls back to bisection; its logarithm is close to linear there, where the
    interpolating steps of :func:`~segshuffle.core.scalar_search.bracketed_root` land
    within a few evaluations.  The sign, and so every verified-feasible answer, is the
    same.  A value of 0 maps to the logarithm of the smallest normal float.
    """
    floor = sys.float_info.min
    log_delta = math.log(delta)

    def excess(x: float) -> float:
        return math.log(max(value(x), floor)) - log_delta

    return excess


#: Steps of the bracket search around a hint: each widening multiplies the gap by this.
_BRACKET_GROWTH = 1.6

#: A downward bracket step predicted by the secant (below) goes this much farther than the
#: predicted crossing, so that it lands past it (the log-log slope flattens as lambda falls:
#: the secant of two points above the crossing stops short of it).
_SECANT_OVERSHOOT = 1.25

#: The smallest first step of a secant (in ln lambda: 2%), growing by _BRACKET_GROWTH at
#: each step, so that a secant that keeps predicting a crossing just below cannot creep.
_LEAST_DROP = math.log(1.02)

#: Evaluations the bracket search may spend before it takes lambda = 0 (the least step
#: grows geometrically: from 1, 1e-12 is passed within 15 steps whatever the secant says).
_BRACKET_STEPS = 64


def _verified_bracket(excess, lo: float, hi: float) -> tuple[float, float]:
    """(lo, hi) with excess(lo) <= 0 < excess(hi), found by widening a hint.

    excess(1) > 0 is known.  Upwards (the hint's top is feasible): :func:`_upward_bracket`.
    Downwards (its bottom is not feasible either) the next point comes from the secant
    through the last two in (ln lambda, excess): the excess is a log divergence, close to
    linear in ln lambda (the
    divergence behaves like a power of lambda), so the secant predicts the crossing, and
    the step goes _SECANT_OVERSHOOT times as far, to land past it.  A step is at least
    _LEAST_DROP, which grows by _BRACKET_GROWTH at each step, so the search cannot creep;
    where the secant does not fall (flat or rising), the step is the geometric schedule's,
    whose factor grows alike (1.6, 2.56, 4.1, ...).  At most _BRACKET_STEPS evaluations,
    and lambda = 1e-12, below which 0 is taken (excess(0) <= 0 always), ends it sooner.  A
    root five times below a hint is typically bracketed in one or two evaluations (three
    or four geometric steps before), by a point close to it, where the root search's
    interpolation closes in within a few more.
    """
    hi = min(hi, 1.0)
    if hi < 1.0 and excess(hi) <= 0.0:  # the root lies above the hint
        return _upward_bracket(excess, hi)
    if lo <= 0.0 or excess(lo) <= 0.0:
        return max(lo, 0.0), hi
    # The root lies below the hint: excess(lo) > 0 and excess(hi) > 0.
    upper, upper_excess = hi, excess(hi)
    point, point_excess = lo, excess(lo)
    factor, least = _BRACKET_GROWTH, _LEAST_DROP
    for _ in range(_BRACKET_STEPS):
        drop = math.log(factor)  # the geometric schedule's step in ln lambda
        if upper > point and upper_excess > point_excess:  # the secant falls towards 0
            slope = (upper_excess - point_excess) / math.log(upper / point)
            drop = max(least, _SECANT_OVERSHOOT * point_excess / slope)
        candidate = point * math.exp(-drop)
        if candidate < 1e-12:
            return 0.0, point
        candidate_excess = excess(candidate)
        if candidate_excess <= 0.0:
            return candidate, point
        upper, upper_excess = point, point_excess
        point, point_excess = candidate, candidate_excess
        factor *= _BRACKET_GROWTH
        least *= _BRACKET_GROWTH
    return 0.0, point


#: The first rate an upward bracket search from a hint at 0 tries.
_FIRST_UPWARD = 1e-3


def _upward_bracket(excess, point: float) -> tuple[float, float]:
    """(lo, hi) with excess(lo) <= 0 < excess(hi), for a root above ``point`` (feasible, the
    hint's top) and excess(1) > 0 (evaluated).

    Each step goes from the highest feasible point towards the crossing that a line in
    (ln lambda, log excess) predicts, _SECANT_OVERSHOOT times as far: at first the chord
    to lambda = 1 (the concave log excess makes it fall short, hence the overshoot), then
    the secant of the last two feasible points; at least _LEAST_DROP, growing by
    _BRACKET_GROWTH each step, and never as far as the lowest infeasible point known
    (halfway there in ln lambda at most).  A root three times above a hint 4% wide took
    nine additive steps growing by 1.6; along the lines, two or three.
    """
    top, top_excess = 1.0, excess(1.0)
    if not point > 0.0:  # a hint at 0 (which always holds): first a small rate
        if excess(_FIRST_UPWARD) > 0.0:
            return 0.0, _FIRST_UPWARD
        point = _FIRST_UPWARD
    previous: tuple[float, float] | None = None
    point_excess = excess(point)
    least = _LEAST_DROP
    for _ in range(_BRACKET_STEPS):
        span = math.log(top / point)
        if not span > 0.0:  # no rate between them: the bracket is as narrow as it gets
            return point, top
        if previous is not None and point_excess > previous[1]:
            slope = (point_excess - previous[1]) / math.log(point / previous[0])
        else:
            slope = (top_excess - point_excess) / span
        rise = max(least, _SECANT_OVERSHOOT * -point_excess / slope)
        candidate = point * math.exp(min(rise, 0.5 * span))
        if not point < candidate < top:
            return point, top
        candidate_excess = excess(candidate)
        if candidate_excess > 0.0:
            return point, candidate
        previous, point, point_excess = (point, point_excess), candidate, candidate_excess
        least *= _BRACKET_GROWTH
    return point, top


def user_epsilon(lam: float, set_size: int, delta: float, users: int, m: float,
                 domain_size: int, *, lower: bool = False, hint: float | None = None,
                 mode: str | BlanketMode = BlanketMode.SLOTS) -> float | None:
    """The smallest user-level E in [0, EPSILON_CAP] with delta_user(E) <= delta.

    delta_user falls as E grows, so the feasible set is an interval [E*, cap].
    ``None`` when even the cap does not reach delta.  With ``lower=True`` the
    exhibited dataset's divergence is used instead: the result is then a lower
    bound, the largest E (to 1e-5 relative) that the server can still tell apart
    at delta.  ``hint``, a value believed feasible, narrows the search.
    """
    mode = parse_mode(mode)
    lam = validation.require_unit_interval("lambda", lam)
    delta = validation.require_delta(delta)
    _check(users, m, domain_size, set_size, mode)

    if lower:
        return _lower_epsilon(lam, set_size, delta, users, m, domain_size, mode, hint)

    @remembered
    def excess(level: float) -> float:
        return user_delta(level, lam, set_size, users, m, domain_size, mode=mode,
                          delta=delta) - delta

    if hint is None and mode is BlanketMode.SLOTS and lam > 0.0:
        hint = _single_item_hint(lam, set_size, delta, users, m, domain_size)
    return _smallest_feasible_level(excess, hint, EPSILON_RTOL)


#: A hint brackets the epsilon search in [hint / _HINT_SPAN, hint] when it can.
_HINT_SPAN = 1.05


def _single_item_hint(lam: float, set_size: int, delta: float, users: int, m: float,
                      domain_size: int) -> float | None:
    """For one differing item, the epsilon of the mixture's heaviest pair, a little raised.

    The mixture is the accountant's own (cached, the same the search then evaluates).
    The exact mixture is concentrated on pairs with about N - E[b] slots, so their
    epsilon is within a fraction of a percent of the mixture's; only a hint (verified).
    """
    mixture = slot_bound(users, m, domain_size, set_size, POISSON_SLACK_SHARE * delta).single
    if mixture is None:
        return None
    heaviest = max(range(len(mixture.weights)), key=mixture.weights.__getitem__)
    slots = mixture.slots[min(heaviest + 1, len(mixture.slots) - 1)]
    guess = epsilon_for(poisson_pair(lam, slots, mixture.r1), delta) if mixture.r1 else None
    return None if guess is None else guess * 1.01


def _smallest_feasible_level(excess, hint: float | None, rtol: float,
                             floor: float = 0.0) -> float | None:
    """Smallest E in [floor, cap] with excess(E) <= 0 (excess falls with E), or None."""
    if excess(floor) <= 0.0:
        return floor
    if hint is not None and floor < hint < EPSILON_CAP and excess(hint) <= 0.0:
        # A close hint: bracket the root from below within a few percent first.
        below = max(floor, hint / _HINT_SPAN)
        if below > floor and excess(below) > 0.0:
            return _smallest_feasible(excess, below, hint, rtol=rtol)
        return _smallest_feasible(excess, floor, below if below > floor else hint, rtol=rtol)
    if excess(EPSILON_CAP) > 0.0:
        return None
    return _smallest_feasible(excess, floor, EPSILON_CAP, rtol=rtol)


#: Relative precision of the lower-bound search over the exact full view (costlier).
_FULL_VIEW_RTOL = 1e-5


@lru_cache(maxsize=1024)
def _lower_epsilon(lam: float, set_size: int, delta: float, users: int, m: float,
                   domain_size: int, mode: BlanketMode, hint: float | None) -> float | None:
    """The exhibited lower bound on epsilon; levels sharing a lambda share it (cached).

    The cheap lower bound (no exact s = 1 full view) comes first; the exact full
    view, when it applies, can only move the answer up from there.
    """
    def excess(level: float, full_view: bool) -> float:
        return user_delta_lower(level, lam, set_size, users, m, domain_size, mode=mode,
                                full_view=full_view) - delta

    cheap = _smallest_feasible_level(remembered(lambda e: excess(e, False)), hint,
                                     EPSILON_RTOL)
    gamma = blanket_probability(m)
    applies = mode is BlanketMode.SLOTS and 0.0 < gamma < 1.0 and (
        set_size == 1 or (set_size >= 2 and 2 * set_size <= domain_size and joint_view(
            blanket_geometry(users, m, domain_size, every_slot=True)[0], gamma, domain_size,
            set_size, lower=True).usable))
    if not applies or cheap is None:
        return cheap
    return _smallest_feasible_level(remembered(lambda e: excess(e, True)), hint,
                                    _FULL_VIEW_RTOL, floor=cheap)


def audit(users: int, domain_size: int, set_size: int, m: float, lam: float, delta: float,
          *, mode: str | BlanketMode = BlanketMode.SLOTS) -> AuditResult:
    """Upper and exhibited lower user-level epsilon of one (m, lambda) setting (CLI ``audit``)."""
    upper = user_epsilon(lam, set_size, delta, users, m, domain_size, mode=mode)
    lower = user_epsilon(lam, set_size, delta, users, m, domain_size, mode=mode, lower=True,
                         hint=upper)
    return AuditResult(epsilon_upper=upper, epsilon_lower=lower)


def _smallest_feasible_integer(excess: Callable[[int], float], lo: int, hi: int) -> int:
    """The smallest integer c in (lo, hi] with excess(c) <= 0, given excess(hi) <= 0 <
    excess(lo) (or lo = 0, left unevaluated) and excess falling with c.

    The logarithmic excess of the full-signal search is close to linear in c, so the
    root is guessed by linear interpolation between the bracket's ends and the guess's
    neighbour on the other side is probed: when the guess is right, two evaluations
    end the search (bisection takes log2(hi - lo)).  Any round that does not halve the
    bracket is followed by a bisection step, so the search never takes more than about
    three times as many evaluations as bisection would.
    """
    f_lo = excess(lo) if lo > 0 else math.inf
    f_hi = excess(hi)
    bisect = not math.isfinite(f_lo)
    while hi - lo > 1:
        width = hi - lo
        if bisect:
            guess = (lo + hi) // 2
        else:
            guess = min(max(round(lo + width * f_lo / (f_lo - f_hi)), lo + 1), hi - 1)
        probes = [guess]
        while probes:
            c = probes.pop()
            value = excess(c)
            if value <= 0.0:
                hi, f_hi = c, value
            else:
                lo, f_lo = c, value
            neighbour = c - 1 if value <= 0.0 else c + 1
            if not bisect and c == guess and lo < neighbour < hi:
                probes.append(neighbour)
        bisect = not math.isfinite(f_lo) or hi - lo > width // 2
    return hi


#: The integer full-signal search's step along the secant goes this much (relative) past the
#: predicted crossing, and at most this many times the last rate.
_INTEGER_OVERSHOOT = 1.05
_INTEGER_REACH = 4


def _next_integer_rate(excess: Callable[[float], float], previous: int, rate: int) -> int:
    """The next integer rate to try above ``rate`` (infeasible, as is ``previous`` when > 0)
    in the full-signal search.

    The log excess at integer m (gamma = 1) is close to linear in m (it falls by about
    0.6-0.7 per unit at n = 1e4, d = 128, s = 8, from m = 8 to 32), so the secant through
    the last two rates predicts the crossing: the next rate is just past it
    (_INTEGER_OVERSHOOT), at least rate + 1 and at most _INTEGER_REACH times the rate.
    Without a second rate (or where the secant does not fall) the rate doubles, as the
    search did throughout: from m = 1 to 23 it took 1, 2, 4, 8, 16, 32 and two bisection
    steps, along the secant 1, 2, 8, 22, 24 and one.
    """
    if previous <= 0:
        return 2 * rate
    fall = excess(float(previous)) - excess(float(rate))
    if not fall > 0.0:
        return 2 * rate
    crossing = rate + excess(float(rate)) * (rate - previous) / fall
    return min(max(math.ceil(crossing * _INTEGER_OVERSHOOT), rate + 1), _INTEGER_REACH * rate)


#: Below this rate the full-signal search takes the rate itself (nothing smaller matters).
_SMALLEST_RATE = 1e-12


def _smallest_feasible_rate(excess: Callable[[float], float], top: float,
                            rtol: float) -> float:
    """The smallest m in (0, top] with excess(m) <= 0 (to ``rtol``), given excess(top) <= 0,
    excess falling with m and large as m -> 0.

    Such rates span orders of magnitude (m_k is 0.004 at a million users and d = 16), so
    the root is bracketed by decades below ``top`` and then searched in log m, where the
    logarithmic excess is close to linear: a handful of evaluations, where a search on m
    itself first bisects its way down from ``top``.  The answer is verified feasible.
    """
    hi, lo = top, top / 10.0
    while excess(lo) <= 0.0:
        if lo <= _SMALLEST_RATE:
            return lo
        hi, lo = lo, lo / 10.0
    log_lo, log_hi = math.log(lo), math.log(hi)
    # rtol relative in m is rtol absolute in log m: relative to the larger |log| end.
    scale = max(abs(log_lo), abs(log_hi), 1.0)
    ends = {log_lo: lo, log_hi: hi}  # evaluated already: exp(log(x)) need not be x

    def rate(t: float) -> float:
        return ends.get(t, min(math.exp(t), hi))

    return rate(_smallest_feasible(lambda t: excess(rate(t)), log_lo, log_hi,
                                   rtol=rtol / scale))


def full_signal_blanket(level: float, set_size: int, delta: float, users: int,
                        domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
                        rtol: float = 1e-9, step: float = DEFAULT_STEP) -> float:
    """m_k: the smallest blanket rate m at which lambda_k = 1 (paper, "Parameter choices").

    Slot blanket: within one bucket ceil(m) = c the bound falls as gamma = m / c
    grows, and at integer m = c it falls with c; so the smallest bucket whose
    m = c is feasible is found by doubling and bisection, and m_k by a root search
    on gamma inside it.  Independent blanket: the bound falls as m grows up to
    d / 2 (a per-item rate of 1/2), so m_k is a root search on (0, d / 2] (d / 2
    when even that does not suffice: the caller sees lambda_k < 1 there).  Every
    returned m is verified feasible (except that last case).
    """
    mode = parse_mode(mode)
    level = validation.require_level("privacy level", level)
    delta = validation.require_delta(delta)
    _check(users, 0.0, domain_size, set_size, mode)

    def value(m: float) -> float:
        return user_delta(level, 1.0, set_size, users, m, domain_size, mode=mode,
                          delta=delta, step=step)

    # In logarithms the excess is close to linear in m, so the root search is short.
    excess = remembered(log_excess(value, delta))

    if excess(0.0) <= 0.0:
        return 0.0
    if mode is BlanketMode.INDEPENDENT:
        # A Binomial(n, p) blanket is most variable at p = 1/2; past m = d/2 it only
        # gets more predictable (at m = d every user sends every item).
        top = domain_size / 2.0
        if excess(top) > 0.0:
            return top
        return _smallest_feasible_rate(excess, top, rtol)
    # Below one slot per user the rates span orders of magnitude and are searched by
    # decades below a top; m = 1 is the costliest top to evaluate (gamma = 1: every slot
    # sends, the steering estimate does not apply, and a million users' slots make large
    # loss distributions), so a top just below it is tried first.  The bound falls with
    # gamma inside the bucket ceil(m) = 1, so where that top holds, m_k lies below it.
    if excess(ONE_SLOT_PROBE) <= 0.0:
        return _smallest_feasible_rate(excess, ONE_SLOT_PROBE, rtol)
    lo, hi = 0, 1
    while excess(float(hi)) > 0.0:
        if hi >= MAX_BLANKET_RATE:
            raise UnprotectableLevelError(
                f"no blanket rate up to {MAX_BLANKET_RATE:g} protects level {level:g} with "
                "lambda = 1")
        lo, hi = hi, min(_next_integer_rate(excess, lo, hi), int(MAX_BLANKET_RATE))
    hi = _smallest_feasible_integer(lambda c: excess(float(c)), lo, hi)
    if hi == 1:  # gamma = m: the rates below one slot span orders of magnitude
        return _smallest_feasible_rate(excess, 1.0, rtol)
    bucket_start = float(hi - 1)
    low_end = math.nextafter(bucket_start, math.inf)
    if excess(low_end) <= 0.0:
        return low_end
    return _smallest_feasible(excess, low_end, float(hi), rtol=rtol)


"""Privacy accounting of the segmented protocol (SPEC section 3; paper Theorem "Privacy Guarantee").

**Item level.**  One item message of a user at level k is protected by the
blanket of the other messages.  In the worst case the victim's two candidate
items j0 != j1 are held by nobody else, and the pair of counts on (j0, j1) is the
Poisson pair of :mod:`segshuffle.core.hockey_stick` with

    N = n_min * ceil(m) - 1     blanket slots guaranteed to be sent (paper: n' - 1),
    r = gamma / d               chance one slot lands on j0, gamma = m / ceil(m),
    own = lambda_k              the victim's item message is sent.

``users`` below is n_min: the number of users whose blanket slots are guaranteed
(n, or ceil((1 - tau) n) when dropouts are tolerated, SPEC section 5).  The
paper's lower-bound pair (Proposition "Privacy Lower Bound") is the same with N + 1
slots: it is exact for s = 1.

**User level.**  A user sends up to s item messages; group privacy turns an
item-level (eps', delta') into user-level (s eps', s e^{(s-1) eps'} delta').  So a
user at level E is protected when the item-level pair satisfies

    delta'(E / s) <= delta / (s e^{(s-1) E / s})                      (*)

(the paper writes delta / (s e^E), valid but looser; for s = 1 (*) is exactly
(E, delta)).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from scipy import optimize

from . import validation
from .hockey_stick import (
    EPSILON_CAP,
    CountPair,
    _largest_feasible,
    _smallest_feasible,
    delta_for,
    poisson_pair,
)
from .randomizers import blanket_probability, blanket_slots

#: Relative precision of the epsilon searches (the CLI contract asks for 1e-4).
EPSILON_RTOL = 1e-8

#: Absolute precision of the lambda searches.
LAMBDA_XTOL = 1e-10


@dataclass(frozen=True)
class AuditResult:
    """Achieved user-level epsilon, upper bound and the paper's lower bound (None: > cap)."""

    epsilon_upper: float | None
    epsilon_lower: float | None


def blanket_geometry(users: int, m: float, domain_size: int, *, lower: bool = False
                     ) -> tuple[int, float]:
    """(N, r) of the item-level pair: N = users ceil(m) - 1 (+1 for the lower bound), r = gamma/d.

    With m = 0 there is no blanket (N = 0, r = 0).
    """
    slots = blanket_slots(m)
    if slots == 0:
        return 0, 0.0
    n_slots = users * slots - 1 + (1 if lower else 0)
    return max(n_slots, 0), blanket_probability(m) / domain_size


def item_pair(lam: float, users: int, m: float, domain_size: int, *, lower: bool = False
              ) -> CountPair:
    """The item-level count pair of SPEC section 3 for one message sent with rate ``lam``."""
    n_slots, r = blanket_geometry(users, m, domain_size, lower=lower)
    return poisson_pair(lam, n_slots, r)


def item_delta_target(level: float, set_size: int, delta: float) -> float:
    """delta / (s e^{(s-1) E / s}): the item-level delta that yields user-level (E, delta)."""
    return delta / (set_size * math.exp((set_size - 1) * level / set_size))


def _check(users: int, m: float, domain_size: int, set_size: int, delta: float) -> None:
    validation.require_int("users", users, 1)
    validation.require_non_negative("blanket rate m", m)
    validation.require_domain(domain_size, set_size)
    validation.require_probability_open("delta", delta)


def user_level_holds(level: float, lam: float, set_size: int, delta: float, users: int,
                     m: float, domain_size: int) -> bool:
    """Whether a user at level E sending with rate ``lam`` is (E, delta)-DP (condition (*))."""
    pair = item_pair(lam, users, m, domain_size)
    return delta_for(pair, level / set_size) <= item_delta_target(level, set_size, delta)


def max_lambda(level: float, set_size: int, delta: float, users: int, m: float,
               domain_size: int, *, xtol: float = LAMBDA_XTOL) -> float:
    """lambda_k: the largest rate in [0, 1] meeting (*) for level E (SPEC section 3, "Search").

    delta'(eps) increases with lambda, so the feasible set is an interval [0, lambda_k].
    The result is verified feasible; it is below the exact threshold by at most ``xtol``.
    """
    level = validation.require_positive("privacy level", level)
    _check(users, m, domain_size, set_size, delta)
    eps_item = level / set_size
    target = item_delta_target(level, set_size, delta)
    n_slots, r = blanket_geometry(users, m, domain_size)

    def excess(lam: float) -> float:
        return delta_for(poisson_pair(lam, n_slots, r), eps_item) - target

    if excess(1.0) <= 0.0:
        return 1.0
    return _largest_feasible(excess, 0.0, 1.0, rtol=xtol)


def user_epsilon(lam: float, set_size: int, delta: float, users: int, m: float,
                 domain_size: int, *, lower: bool = False, hint: float | None = None
                 ) -> float | None:
    """The smallest user-level E with delta'(E / s) <= delta / (s e^{(s-1) E / s}).

    ``lower=True`` uses the paper's lower-bound pair (N + 1 slots).  ``None`` when no
    E with item-level E / s <= 30 works.  Precision: 1e-8 relative, always on the
    safe side (the returned E satisfies the condition).  ``hint``, a level believed
    to satisfy the condition (the requested level, or the upper bound when computing
    the lower one), narrows the search when it does.
    """
    lam = validation.require_unit_interval("lambda", lam)
    _check(users, m, domain_size, set_size, delta)
    s = set_size
    pair = item_pair(lam, users, m, domain_size, lower=lower)

    def excess(level: float) -> float:
        return delta_for(pair, level / s) - item_delta_target(level, s, delta)

    if excess(0.0) <= 0.0:
        return 0.0
    if hint is not None and 0.0 < hint <= EPSILON_CAP * s and excess(hint) <= 0.0:
        return _smallest_feasible(excess, 0.0, hint, rtol=EPSILON_RTOL)
    return _smallest_feasible_level(excess, EPSILON_CAP * s)


def _smallest_feasible_level(excess: Callable[[float], float], cap: float) -> float | None:
    """Smallest E in (0, cap] with excess(E) <= 0, or None.

    Both sides of (*) fall as E grows, so the feasible set is not an up-set: far
    out, the right side e^{-(s-1) E / s} falls below what the divergence can reach.
    In log form, log delta'(E/s) + (s-1) E / s is convex in practice, so the feasible
    set is an interval.  The search walks E up geometrically until it is feasible
    (then a root search between the last two points finds its left end); if the
    excess starts to grow before that, the minimum in the last cell is checked.
    """
    previous, current = 0.0, 1e-3
    previous_excess = excess(previous)
    while current <= cap:
        current_excess = excess(current)
        if current_excess <= 0.0:
            return _smallest_feasible(excess, previous, current, rtol=EPSILON_RTOL)
        if current_excess > previous_excess and previous > 0.0:
            lowest = optimize.minimize_scalar(
                excess, bounds=(previous / 2.0, current), method="bounded",
                options={"xatol": previous * 1e-6})
            if lowest.success and excess(float(lowest.x)) <= 0.0:
                return _smallest_feasible(excess, previous / 2.0, float(lowest.x),
                                          rtol=EPSILON_RTOL)
            return None
        previous, previous_excess = current, current_excess
        current *= 2.0
    if excess(cap) <= 0.0:
        return _smallest_feasible(excess, previous, cap, rtol=EPSILON_RTOL)
    return None


def audit(users: int, domain_size: int, set_size: int, m: float, lam: float, delta: float
          ) -> AuditResult:
    """Upper and lower user-level epsilon of one (m, lambda) setting (CLI ``segshuffle audit``)."""
    return AuditResult(
        epsilon_upper=user_epsilon(lam, set_size, delta, users, m, domain_size),
        epsilon_lower=user_epsilon(lam, set_size, delta, users, m, domain_size, lower=True),
    )


def full_signal_blanket(level: float, set_size: int, delta: float, users: int,
                        domain_size: int, *, rtol: float = 1e-9) -> float:
    """m_k: the smallest blanket rate m at which lambda_k = 1 (paper, "Parameter choices").

    Within one bucket ceil(m) = c the divergence falls as gamma = m / c grows, and at
    integer m = c it falls with c; so the smallest bucket whose m = c is feasible is
    found by doubling and bisection, and m_k by a root search on gamma inside it.
    Every returned m is verified feasible.
    """
    level = validation.require_positive("privacy level", level)
    _check(users, 0.0, domain_size, set_size, delta)

    def excess(m: float) -> float:
        pair = item_pair(1.0, users, m, domain_size)
        return delta_for(pair, level / set_size) - item_delta_target(level, set_size, delta)

    if excess(0.0) <= 0.0:
        return 0.0
    hi = 1
    while excess(float(hi)) > 0.0:
        hi *= 2
        if hi > 1 << 24:
            raise ValueError(f"no blanket rate up to {hi} protects level {level}")
    lo = hi // 2  # infeasible (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if excess(float(mid)) <= 0.0:
            hi = mid
        else:
            lo = mid
    bucket_start = float(hi - 1)
    # Inside bucket hi, m ranges over (hi - 1, hi]; excess(hi) <= 0.
    low_end = math.nextafter(bucket_start, math.inf)
    if excess(low_end) <= 0.0:
        return low_end
    return _smallest_feasible(excess, low_end, float(hi), rtol=rtol)

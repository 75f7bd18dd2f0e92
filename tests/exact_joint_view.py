"""The exact joint view of k differing items at populations too large for the accountant's table.

:mod:`segshuffle.core.slot_joint` stores, for every blanket bucket, the views' masses as
polynomials in lambda, within a memory budget; past it the accountant falls back on the
labelled groups.  Tests that measure how far that fallback sits from the truth need the
exact value there too.  This module evaluates the same sum for one lambda, one value of
b (the slots on the items outside the pairs) at a time, so it only ever holds two floats
per view: the P- and Q-masses of every view at that lambda.

With ``n_slots`` = users * ceil(m) (every slot, the victim's own included) the masses are
those of the server's full view of two disjoint sets (tests/full_view.py agrees on small
populations); with one slot fewer they are what the accountant's geometry describes.
Mass left out (b in its 1e-13 tail, views past the 1 - 1e-13 quantile) is reported so a
caller can charge it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from segshuffle.core import distributions
from segshuffle.core.slot_joint import _view_total, upper_quantile
from segshuffle.core.slot_joint_lattice import _bucket

#: Every b whose Binomial mass is above this is enumerated (the rest is reported left out).
B_TAIL = 1e-14


@dataclass(frozen=True)
class ExactJointView:
    """P- and Q-masses of every view of k differing items at one lambda, and the mass left out."""

    p: np.ndarray
    q: np.ndarray
    left_out: float

    def delta(self, eps: float) -> float:
        """sum over views of max(0, P - e^E Q) (symmetric: D(P||Q) = D(Q||P))."""
        return float(np.sum(np.maximum(self.p - math.exp(eps) * self.q, 0.0)))


def exact_joint_view(n_slots: int, gamma: float, domain_size: int, pairs: int,
                     lam: float) -> ExactJointView:
    """The joint view of ``pairs`` differing items (docs/protocol.md 4.2.4), every b its own."""
    d, k = domain_size, pairs
    q_out = gamma * (d - 2 * k) / d
    inside = (1.0 - gamma) + 2.0 * k * gamma / d
    rate = (gamma / d) / inside
    sizes = np.arange(k + 1)
    mix = lam ** sizes * (1.0 - lam) ** (k - sizes)
    top = upper_quantile(n_slots, q_out, B_TAIL) if q_out > 0.0 else 0
    left_out = distributions.binom_sf(top, n_slots, q_out) if 0 < top < n_slots else 0.0
    p_parts, q_parts = [], []
    for b in range(top + 1):
        weight = float(distributions.binom_pmf(b, n_slots, q_out)) if q_out > 0.0 else 1.0
        if weight < B_TAIL * 1e-3:
            left_out += weight
            continue
        slots = n_slots - b
        total, truncated = _view_total(slots, rate, k)
        left_out += weight * truncated
        bucket = _bucket(slots, gamma, d, k, total)
        p_parts.append(weight * (mix @ bucket.p_terms))
        q_parts.append(weight * (mix @ bucket.q_terms))
    return ExactJointView(np.concatenate(p_parts), np.concatenate(q_parts), left_out)


def exact_user_views(users: int, m: float, domain_size: int, set_size: int, lam: float,
                     *, accountant_slots: bool = False) -> list[ExactJointView]:
    """The exact views of every number of differing items k = 1..min(s, d - s).

    ``accountant_slots`` counts users * ceil(m) - 1 slots, as the accountant does; the
    server's real view has one more, and is at most as revealing.
    """
    slots = users * math.ceil(m) - (1 if accountant_slots else 0)
    gamma = m / math.ceil(m)
    most = min(set_size, domain_size - set_size)
    return [exact_joint_view(slots, gamma, domain_size, k, lam) for k in range(1, most + 1)]


def exact_delta(views: list[ExactJointView], eps: float) -> float:
    """The user's delta at E: the largest over the numbers of differing items."""
    return max(view.delta(eps) for view in views)


def exact_epsilon(views: list[ExactJointView], delta: float, cap: float = 30.0) -> float:
    """The smallest E with exact delta(E) <= delta, to 1e-9 (inf when even the cap fails)."""
    if exact_delta(views, cap) > delta:
        return math.inf
    lo, hi = 0.0, cap
    if exact_delta(views, lo) <= delta:
        return 0.0
    while hi - lo > 1e-9 * max(hi, 1e-3):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if exact_delta(views, mid) > delta else (lo, mid)
    return hi

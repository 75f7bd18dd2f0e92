"""A lower bound on the views any plan of a joint view enumerates, known before its plan.

The joint view (:mod:`segshuffle.core.slot_joint`, on either array backend; the JavaScript
accountant mirrors this) is used only when its plan's views fit a budget.  Building a plan
takes binomial quantiles and weights per bucket, for every coarser plan tried; where the
population is large, no plan comes near the budget, and the pure-Python and JavaScript
accountants spent seconds finding that out.  This bound says so at once.  It decides
nothing else: a view it does not rule out is planned as before, so every value is
unchanged.

**The bound.**  Every plan has a top bucket that ends at the window's top
hi = the least j with Pr[b > j] <= BUCKET_TAIL, b ~ Binomial(N, q_out), and charges it
M = N - hi slots, whose views reach the total K = k + the least j with
Pr[Binomial(M, s) > j] <= VIEW_TAIL, s = min(1, 2 k rate).  That bucket alone enumerates
C(K + 2k, 2k) views, each 2 (k + 1) values.  Two facts bound K from below:

* Bernstein's inequality, Pr[b >= N q + t] <= exp(-t^2 / (2 (v + t / 3))) with v = N q (1 -
  q), is at most BUCKET_TAIL at t = L / 3 + sqrt(L^2 / 9 + 2 L v), L = ln(1 / BUCKET_TAIL);
  so hi <= ceil(N q + t) (one more for rounding), and M >= N - ceil(N q + t) - 1.
* A binomial's median is at least floor(M s) (Kaas and Buhrman), so Pr[Binomial(M, s) >
  floor(M s) - 1] >= 1/2 > VIEW_TAIL and K >= k + floor(M s), taken one lower again.

The counts of views grow with K and the quantile with M, so the bound holds at the
smallest M.  Plain Python, no numpy.
"""

from __future__ import annotations

import math

#: Enumerated joint views kept in memory (each enumeration is large): one per k = 1..S of an
#: accountant for S <= 3, or an accountant's views and a lower bound's.
JOINT_VIEWS_KEPT = 4


def view_count(parts: int, total: int) -> int:
    """The views of ``parts`` counts with sum at most ``total``: C(total + parts, parts)."""
    return math.comb(total + parts, parts)


def values_floor(n_slots: int, q_out: float, rate: float, pairs: int, *,
                 bucket_tail: float, view_tail: float) -> int:
    """A lower bound on the values (views times 2 (k + 1)) of every plan of the joint view
    with ``n_slots`` slots, ``q_out`` the chance a slot's item is outside the pairs,
    ``rate`` a slot's chance, given inside, to be one given active item, and ``pairs``
    k differing items (module docstring)."""
    if not (0.0 < bucket_tail < 0.5 and 0.0 < view_tail < 0.5):
        raise ValueError("the tails must be in (0, 1/2)")
    log_tail = -math.log(bucket_tail)
    q = min(max(q_out, 0.0), 1.0)
    variance = n_slots * q * (1.0 - q)
    reach = log_tail / 3.0 + math.sqrt(log_tail * log_tail / 9.0 + 2.0 * log_tail * variance)
    top = math.ceil(n_slots * q + reach) + 1
    slots = max(0, n_slots - top)
    spread = min(1.0, 2 * pairs * max(rate, 0.0))
    total = pairs + max(0, math.floor(slots * spread) - 1)
    parts = 2 * pairs
    return view_count(parts, total) * 2 * (pairs + 1)

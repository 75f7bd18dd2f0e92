"""The balls-into-bins multi-message protocol (Luo, Wang, Yi, CCS 2022) for set-valued data.

Balls-into-bins with d bins and s special bins: each user throws one ball into
one of its s special bins, chosen uniformly, and every user adds blanket balls
that land uniformly on the d bins.  For set-valued data the special bins of a user
are the s items of its set, so a user sends **one item of its set, chosen
uniformly** (a "ball") plus the blanket.  In our blanket form (the slot blanket of
the segmented protocol, docs/protocol.md section 2) each user fills ceil(m) slots, each sending
a uniform item with probability gamma = m / ceil(m).

**Privacy of the one-item variant: a single-message bound on the full view.**
Every (E, delta) below is user level, on everything the server sees: the
histogram of the decrypted messages and the number of null ones.  Each user sends
exactly one data message, whose law R(x) puts 1/s on each item of x; a blanket
slot puts gamma / d on each item.  So R has the variation-ratio parameters
p = +inf, beta = 1 and q = d / (s gamma) against the slots (Wang et al., PVLDB
2024, the balls-into-bins entry of their table, with the slot rate gamma), and
their reduction bounds the view of any two inputs x, x' by the pair

    P = (B0 + 1, B1),   Q = (B0, B1 + 1),   (B0, B1) ~ Multinomial(N; r, r),
    N = n ceil(m) - 1,  r = s gamma / d,

i.e. ``variation_ratio_pair(inf, 1, d ceil(m) / (s m), n ceil(m))``.  The null
count adds nothing: the victim always sends its one message, so the number of
null slots is a function of the histogram's total.  For disjoint x, x' the pair
is exact: with A, B the messages on the items of x and of x', the split of A over
x is Multinomial(A; 1/s, ...) under both inputs (one uniform ball plus a uniform
multinomial blanket is a uniform multinomial), likewise for B, and the rest of the
view depends on the victim only through A + B.  The pair is the accountant's
two-bin pair of one item sent with lambda = 1 over a domain of d / s items: when
s divides d it equals ``accounting.user_delta(E, 1, 1, n, m, d // s)``.  The
tests check that identity and the bound against a brute-force enumeration of the
full view (histogram and null count; disjoint and overlapping sets).  The
reduction needs q >= 2, i.e. d >= 2 s.

**The all-items variant.**  Each user sends all s items (s balls) plus the slot
blanket: the segmented protocol with every lambda = 1.  Its user-level delta is
the accountant's bound on the full view
(:func:`segshuffle.core.accounting.user_delta` with lambda = 1: the victim's s
items compose as s disjoint item pairs, no group privacy), and its smallest
blanket is :func:`segshuffle.core.accounting.full_signal_blanket`.

**Estimator.**  C_j = number of balls on item j.  E[C_j] = n w_j / s + n m / d, so

    W^_j = s (C_j - n m / d) / n

is unbiased for w_j (all-items: W^_j = (C_j - n m / d) / n).

:func:`calibrate_blanket` finds the smallest m giving (eps, delta) at the user
level in either variant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..core import accounting
from ..core.blanket import MAX_BLANKET_RATE
from ..core.hockey_stick import CountPair, delta_for, poisson_pair, variation_ratio_pair
from ..core.randomizers import blanket_probability, blanket_slots
from ..core.validation import require_domain, require_int, require_non_negative

Variant = Literal["one-item", "all-items"]
VARIANTS: tuple[Variant, ...] = ("one-item", "all-items")


def pair_for(users: int, domain_size: int, set_size: int, m: float) -> CountPair:
    """The user-level count pair of the one-item variant on the full view (module docstring).

    variation_ratio_pair(p = inf, beta = 1, q = d ceil(m) / (s m), n ceil(m)): the
    n ceil(m) "users" of the reduction are the blanket slots.
    """
    slots = blanket_slots(m)
    if slots == 0:  # no blanket at all: the ball alone identifies the item
        return poisson_pair(1.0, 0, 0.0)
    q = domain_size * slots / (set_size * m)
    return variation_ratio_pair(math.inf, 1.0, q, users * slots)


def one_item_delta(users: int, domain_size: int, set_size: int, m: float, eps: float) -> float:
    """User-level delta(eps) of the one-item variant at blanket rate m."""
    return delta_for(pair_for(users, domain_size, set_size, m), eps)


def calibrate_blanket(users: int, domain_size: int, set_size: int, epsilon: float,
                      delta: float, variant: Variant = "one-item",
                      rtol: float = 1e-6) -> float:
    """Smallest blanket rate m giving user-level (epsilon, delta) on the full view.

    ``one-item``: within a bucket ceil(m) = c the divergence of :func:`pair_for`
    falls as m grows (more mass per slot on the victim's items); at integer m = c
    it falls with c (more trials at the same rate).  So the first feasible integer
    is found by doubling and bisection and m by bisection inside its bucket.  The
    returned m is verified feasible.  ``all-items`` is the segmented protocol with
    lambda = 1: :func:`segshuffle.core.accounting.full_signal_blanket` (slot
    blanket, user-level bound).
    """
    n = require_int("number of users", users, 2)
    d, s = require_domain(domain_size, set_size)
    if variant == "all-items":
        return accounting.full_signal_blanket(epsilon, s, delta, n, d)
    if variant != "one-item":
        raise ValueError(f"unknown balls-into-bins variant {variant!r}")

    def feasible(m: float) -> bool:
        return one_item_delta(n, d, s, m, epsilon) <= delta

    hi = 1
    while not feasible(float(hi)):
        hi *= 2
        if hi > MAX_BLANKET_RATE:
            raise accounting.UnprotectableLevelError(
                f"no blanket rate up to {MAX_BLANKET_RATE:g} protects the one-item "
                f"balls-into-bins protocol at eps = {epsilon:g}")
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if feasible(float(mid)):
            hi = mid
        else:
            lo = mid
    low, high = float(hi - 1), float(hi)  # m in (hi - 1, hi]; high is feasible
    if hi == 1:
        low = 0.0
    while high - low > rtol * high:
        mid = 0.5 * (low + high)
        if mid > low and feasible(mid):
            high = mid
        else:
            low = mid
    return high


@dataclass(frozen=True)
class BallsIntoBins:
    """One run configuration: blanket rate m over a domain of d items, sets of s items."""

    domain_size: int
    set_size: int
    m: float
    variant: Variant = "one-item"

    def __post_init__(self) -> None:
        require_domain(self.domain_size, self.set_size)
        require_non_negative("blanket rate m", self.m)
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown balls-into-bins variant {self.variant!r}")

    def sample_counts(self, items: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """C_j for an (n, s) population: balls plus blanket, drawn as counts.

        One-item: each user's ball is a uniform column of its row.  All-items: every
        held item once.  Blanket: Binomial(n ceil(m), gamma) messages, spread
        multinomially and uniformly over the domain (exact in distribution).
        """
        items = np.asarray(items, dtype=np.int64)
        n, s = items.shape
        d = self.domain_size
        if self.variant == "one-item":
            balls = items[np.arange(n), rng.integers(0, s, size=n)]
        else:
            balls = items.ravel()
        counts = np.bincount(balls, minlength=d).astype(np.int64)
        sent = rng.binomial(n * blanket_slots(self.m), blanket_probability(self.m))
        counts += rng.multinomial(sent, np.full(d, 1.0 / d))
        return counts

    def estimate(self, counts: np.ndarray, n: int) -> np.ndarray:
        """Unbiased W^_j (module docstring; all-items: (C_j - n m / d) / n)."""
        scale = self.set_size if self.variant == "one-item" else 1
        return scale * (np.asarray(counts, dtype=float) - n * self.m / self.domain_size) / n

    def mse_bound(self, n: int) -> float:
        """Upper bound on sum_j E[(W^_j - w_j)^2] (sum_j w_j = s, each Var[C_j] term bounded).

        one-item: s^2 (n m + n) / n^2; all-items: (n m + s n) / n^2 (the paper's bound at
        lambda = 1).
        """
        if self.variant == "one-item":
            return self.set_size**2 * (n * self.m + n) / n**2
        return (n * self.m + self.set_size * n) / n**2

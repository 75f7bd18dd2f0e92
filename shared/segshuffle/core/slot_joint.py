"""Slot blanket, small populations: the exact joint view of k differing items.

**Why.**  The labelled-groups bound (:mod:`segshuffle.core.slot_groups`) shows the
server every group's size.  A group of a few slots that all landed on x_j then
betrays the victim's message; in a population of 15 to 30 users that event has
a probability of the order of the target delta, and the bound can fail to reach
any epsilon where the true one is about 2.  Where the blanket is small, the
divergence of the real view is cheap to compute exactly instead.

**Claim.**  Let the victim's sets differ in k items, x_1..x_k against
x'_1..x'_k (2k <= d distinct items), and let each x_j be sent with probability
lambda (items common to both sets are sent alike in both worlds, independently
of the rest: a post-processing, they drop out).  N blanket slots each carry,
with probability gamma, an item uniform over the d items, else a null.  Let b be
the number of slots on the d - 2k items outside the pairs.  Then

    delta_k(E) = sum_b Binom(N, gamma (d - 2k) / d)(b) Delta_k(N - b)(E),

where Delta_k(M) is the divergence of the counts c = (c_1..c_k, c'_1..c'_k) on
the 2k active items when each of M slots lands on every active item with
probability q = (gamma / d) / (1 - gamma + 2k gamma / d) and is a null
otherwise:

    P(c) = sum_{T subset of 1..k} lambda^|T| (1 - lambda)^(k - |T|) Mult_M(c - e_T),
    Q(c) = the same with the shifts e'_T on the x'_j,
    Delta_k(M)(E) = sum_c max(0, P(c) - e^E Q(c)).

**Proof.**  As for one item (:mod:`segshuffle.core.slot_single`): b has the same
law in both worlds and the server reads it off the histogram; its split over
the outside items is uniform in both worlds and cancels from every likelihood
ratio.  Given b, the other N - b slots are independently on each active item
with probability q or a null, and the null count is the fixed total minus the
rest, a function of (b, c).  An observed label with the same law in both worlds
averages the divergence, with equality.  Exchanging x_j with x'_j maps P to Q,
so D(P || Q) = D(Q || P).  Sets that differ in fewer than k items are the
k' < k case, so the user's bound is the largest delta_k' over the k' that the
set size and domain allow.

**Bucketing and truncation.**  Delta_k(M) is non-increasing in M (one more
independent slot with the same law in both worlds is a randomised map applied
to both views).  An upper bound charges every b of a bucket [b_lo, b_hi] the
view at M = N - b_hi and the mass of b above the window 1; a lower bound (an
exhibited view) charges the bucket at M = N - b_lo and drops that mass.  Any
partition of b into buckets is therefore sound; the plan is a bucket per b where the
window is narrow, and an upper bound whose plan would exceed MAX_VALUES takes wider
buckets at low b (COARSE_BUCKET_EDGES), where M is largest and the views are most
numerous, keeping fine cuts at high b, where a wide bucket would be charged at a much
smaller M.  Within one M the views with more than K active messages
are left out: an upper bound charges their P-mass, at most
Pr[Binomial(M, 2kq) > K - k], as 1.

**Storage.**  On numpy the views of a bucket are a prefix of one lattice per k, and one
view per orbit of the k pairs is stored, weighted by the orbit's size
(:mod:`segshuffle.core.slot_joint_lattice`); on the Python backend every view is listed,
lexicographically, as in the web client's JavaScript accountant (:func:`_list_bucket`).
The sums over views are the same up to rounding, and the plans and their MAX_VALUES budget
count every view, so which plan applies does not depend on the backend.

**Numerics.**  Every Mult_M value is a float64 product of exact integer
log-factorials (a table) and two logarithms, relatively accurate to far better
than ROUNDING; a value that underflows to 0 costs at most the tiny
UNDERFLOW per atom, added to upper bounds.  A term P - e^E Q is only counted
where it is positive, so its rounding error is at most ROUNDING (P + e^E Q) <=
2 ROUNDING P; terms that rounding could have dropped are charged the same way.
Upper bounds add ROUNDING * 2 * (P-mass counted or near the threshold);
lower bounds subtract it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import add
from typing import Any

from . import arrays
from .arrays.python_distributions import ln_factorial
from .bounded_cache import key_of, on_clear_all, registered_cache
from .errors import AccountantError
from .joint_budget import JOINT_VIEWS_KEPT, values_floor, view_count

__all__ = ["MAX_VALUES", "JointView", "clear_caches", "joint_view", "upper_quantile"]

#: The most float64 values (views times 2 (k + 1) polynomial terms, over every bucket) one
#: joint view may store: at most about 48 MB, of which at most JOINT_VIEWS_KEPT are kept.
MAX_VALUES = 6_000_000

#: P-mass a bucket's truncation at K may leave out (charged 1 in upper bounds).
VIEW_TAIL = 1e-13

#: Mass of b above the summed window (charged 1 in upper bounds).
BUCKET_TAIL = 1e-13

#: Where the window of b is at most this wide, every b is a bucket of its own.
EXACT_WIDTH = 48

#: Bucket edges, in standard deviations of b from its mean, for wider windows.
BUCKET_EDGES = (-7.0, -4.0, -3.0, -2.4, -2.0, -1.6, -1.3, -1.0, -0.8, -0.6, -0.4, -0.2,
                0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.4, 3.0, 3.6, 4.3, 5.0,
                6.0, 7.0, 8.5)

#: Bucket edges of the coarser plans, tried in turn by an upper bound whose finer plan
#: exceeds MAX_VALUES: wider buckets at low b, where M and the views are many (the last
#: plan merges every b up to half a standard deviation above the mean), and fine cuts
#: above, where a wide bucket would be charged at a small M (each bucket is still
#: charged at its largest b, "Bucketing").
COARSE_BUCKET_EDGES = (
    (-3.0, -2.0, -1.5, -1.0, -0.6, -0.3, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.4, 3.0,
     3.6, 4.3, 5.0, 6.0, 7.0, 8.5),
    (-2.0, -1.0, -0.5, 0.0, 0.3, 0.6, 1.0, 1.4, 1.8, 2.2, 2.6, 3.0, 3.6, 4.3, 5.0, 6.0, 7.0, 8.5),
    (0.5, 1.0, 1.5, 2.0, 2.6, 3.2, 4.0, 5.0, 6.0, 7.0, 8.5),
)

#: Relative rounding error charged per counted term (module docstring, "Numerics").
ROUNDING = 1e-11

#: Mass an underflowed multinomial value may have lost, per atom and shift.
UNDERFLOW = 1e-300


def upper_quantile(trials: int, p: float, tail: float) -> int:
    """The smallest j in [0, trials] with Pr[Binomial(trials, p) > j] <= ``tail``."""
    xp = arrays.namespace()
    lo, hi = 0, trials  # Pr[> trials] = 0 <= tail
    while lo < hi:
        mid = (lo + hi) // 2
        if xp.binom_sf(mid, trials, p) <= tail:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _window(n_slots: int, q_out: float, lower: bool, coarse: int = 0
            ) -> tuple[list[tuple[int, int]], float]:
    """Buckets [(b_lo, b_hi)] covering b ~ Binomial(N, q_out) up to the window's top.

    Also returns the mass above the window that an upper bound charges 1.  ``coarse``
    = i >= 1 cuts at COARSE_BUCKET_EDGES[i - 1] however narrow the window (the first
    bucket starts at 0).
    """
    if q_out <= 0.0 or n_slots == 0:
        return [(0, 0)], 0.0
    mean = n_slots * q_out
    sd = math.sqrt(n_slots * q_out * (1.0 - q_out))
    hi = upper_quantile(n_slots, q_out, BUCKET_TAIL)
    above = arrays.namespace().binom_sf(hi, n_slots, q_out) if hi < n_slots else 0.0
    edges = COARSE_BUCKET_EDGES[coarse - 1] if coarse else BUCKET_EDGES
    lo = max(0, math.floor(mean + edges[0] * sd))
    if hi - lo + 1 <= EXACT_WIDTH and not coarse:
        tops = list(range(lo, hi + 1))
    else:
        tops = sorted({min(hi, max(lo, math.floor(mean + z * sd))) for z in edges} | {hi})
    buckets, start = [], 0
    for top in tops:
        if top >= start:
            buckets.append((start, top))
            start = top + 1
    return buckets, (0.0 if lower else above)


def _view_total(slots: int, rate: float, pairs: int) -> tuple[int, float]:
    """K: the most active messages enumerated, and the P-mass left out above it."""
    if slots == 0 or rate <= 0.0:
        return pairs, 0.0
    spread = min(1.0, 2 * pairs * rate)
    blanket = upper_quantile(slots, spread, VIEW_TAIL)
    left = arrays.namespace().binom_sf(blanket, slots, spread) if blanket < slots else 0.0
    return blanket + pairs, left


@dataclass
class JointView:
    """delta_k of the module docstring for one (N, gamma, d, k): upper or lower bound.

    The object holds only the plan (buckets, their weights, slot counts and view
    totals); the enumerated views live in small module caches, so accountants that
    keep many joint views keep little memory.  An upper bound whose plan with a bucket
    per b (or BUCKET_EDGES) exceeds MAX_VALUES takes the first coarser plan that fits
    (``coarse``: its index, 1-based, in COARSE_BUCKET_EDGES): fewer, wider buckets, each
    charged at its largest b, as sound and a little looser.  Its views are enumerated on
    the backend it was planned on.
    """

    n_slots: int
    gamma: float
    domain_size: int
    pairs: int
    lower: bool = False
    coarse: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        n, d, k = self.n_slots, self.domain_size, self.pairs
        if not (k >= 1 and 2 * k <= d and 0.0 < self.gamma <= 1.0 and n >= 0):
            raise AccountantError(f"no joint view for N={n}, gamma={self.gamma}, d={d}, k={k}")
        self.backend = arrays.name()
        q_out = self.gamma * (d - 2 * k) / d
        inside = (1.0 - self.gamma) + 2.0 * k * self.gamma / d
        rate = (self.gamma / d) / inside
        floor = values_floor(n, q_out, rate, k, bucket_tail=BUCKET_TAIL, view_tail=VIEW_TAIL)
        if floor > MAX_VALUES:  # no plan fits: not planned (joint_budget's docstring)
            self.coarse = 0 if self.lower else len(COARSE_BUCKET_EDGES)
            self.above = self.left_out = 0.0 if self.lower else 1.0
            self.atoms, self.values, self.plan = floor // (2 * (k + 1)), floor, ()
            return
        for coarse in range(len(COARSE_BUCKET_EDGES) + 1):
            buckets, self.above = _window(n, q_out, self.lower, coarse)
            plan, atoms = self._plan(buckets, q_out, rate)
            self.coarse = coarse
            if self.lower or atoms * 2 * (k + 1) <= MAX_VALUES:
                break
        self.atoms = atoms
        self.values = atoms * 2 * (k + 1)
        #: What an upper bound charges beyond the enumerated views: b above the window,
        #: each bucket's views above K, and any underflowed multinomial value.
        self.left_out = 0.0 if self.lower else (self.above + sum(
            weight * (truncated + UNDERFLOW * view_count(2 * k, total) * (1 << k))
            for weight, _, total, truncated in plan))
        self.plan = tuple(plan)

    def _plan(self, buckets: list[tuple[int, int]], q_out: float, rate: float
              ) -> tuple[list[tuple[float, int, int, float]], int]:
        """(weight, charged slot count M, view total K, left-out mass) per bucket, and the
        number of views they enumerate."""
        xp = arrays.namespace()
        n, k = self.n_slots, self.pairs
        plan, atoms = [], 0
        for b_lo, b_hi in buckets:
            if q_out > 0.0:
                weight = xp.binom_cdf(b_hi, n, q_out) - (
                    xp.binom_cdf(b_lo - 1, n, q_out) if b_lo > 0 else 0.0)
            else:
                weight = 1.0
            slots = n - (b_lo if self.lower else b_hi)
            total, truncated = _view_total(slots, rate, k)
            plan.append((max(weight, 0.0), slots, total, truncated))
            atoms += view_count(2 * k, total)
        return plan, atoms

    @property
    def usable(self) -> bool:
        """Whether the enumeration fits the MAX_VALUES budget."""
        return self.values <= MAX_VALUES

    def delta(self, eps: float, lam: float) -> float:
        """delta_k(E) at rate ``lam``: an upper bound, or with ``lower`` a lower bound."""
        if lam == 0.0:
            return 0.0
        if not self.usable:
            raise AccountantError(
                f"{self.values} stored values exceed the budget of {MAX_VALUES}")
        with arrays.use(self.backend) as xp:
            p, q = _masses(self, lam)
            scale = math.exp(eps)
            # Only terms with P > e^E Q (1 - 2 ROUNDING) / (1 + 2 ROUNDING), i.e. P - e^E Q >
            # -2 ROUNDING (P + e^E Q), can be positive or have been moved across zero by
            # rounding ("Numerics"): the sum and its error are taken over them alone.
            near = p > q * (scale * (1.0 - 2.0 * ROUNDING) / (1.0 + 2.0 * ROUNDING))
            p_near, q_near = xp.compress(near, p), xp.compress(near, q)
            value = xp.total(xp.maximum(p_near - q_near * scale, 0.0))
            error = 2.0 * ROUNDING * xp.total(p_near)
        if self.lower:
            return max(0.0, value - error)
        return min(1.0, value + error + self.left_out)


def _masses(view: JointView, lam: float) -> tuple[Any, Any]:
    """(P, Q) of the stored views at rate ``lam``: numpy's orbit lattice, or every view."""
    if arrays.name() == arrays.NUMPY:
        from . import slot_joint_lattice  # numpy's: imported where numpy runs

        return slot_joint_lattice.masses(view.n_slots, view.gamma, view.domain_size,
                                         view.pairs, view.lower, view.plan, lam)
    return _list_masses(view, lam)


@dataclass(frozen=True)
class _ListBucket:
    """The views of one bucket on the Python backend (:func:`_list_bucket`) and its weight."""

    weight: float
    p_terms: list[list[float]]
    q_terms: list[list[float]]


def _list_bucket(weight: float, slots: int, gamma: float, domain_size: int, pairs: int,
                 total: int) -> _ListBucket:
    """The views of one bucket on the Python backend, every one in lexicographic order (first
    coordinate slowest), as polynomials in lambda: ``p_terms[j][i]`` is the sum over the
    j-subsets T of Mult_M(view i - e_T), ``q_terms`` the same on the x'_j."""
    inside = (1.0 - gamma) + 2.0 * pairs * gamma / domain_size
    rate = (gamma / domain_size) / inside
    null_rate = (1.0 - gamma) / inside
    parts = 2 * pairs
    # ln c! for the counts of a view (at most K) and ln(M - sum)! for its nulls.
    log_factorials = [ln_factorial(k) for k in range(total + 1)]
    log_slots = ln_factorial(slots)
    log_nulls = [ln_factorial(slots - used) for used in range(min(total, slots) + 1)]
    # The views in lexicographic order (first coordinate slowest), each as its code
    # sum_j c_j base^j, the room total - sum_j c_j left, and sum_j ln c_j! (summed in j order).
    base = total + 1
    rows: list[tuple[int, int, float]] = [(0, total, 0.0)]
    for position in range(parts):
        unit = base**position
        rows = [(code + value * unit, room - value, logs + log_factorials[value])
                for code, room, logs in rows for value in range(room + 1)]
    count = len(rows)
    log_rate = arrays.log_or_minus_inf(rate)
    log_null_rate = arrays.log_or_minus_inf(null_rate)
    exp = math.exp
    # Mult_M of every view (the views are valid: non-negative, total <= K; those above M
    # have probability 0), and 0 at index `count` for shifted views outside the set.
    blanket = [0.0] * (count + 1)
    for i, (_, room, logs) in enumerate(rows):
        used = total - room
        if used > slots:
            continue
        nulls = slots - used
        log_value = (log_slots - logs - log_nulls[used]
                     + (0.0 if used == 0 else used * log_rate)
                     + (0.0 if nulls == 0 else nulls * log_null_rate))
        blanket[i] = exp(log_value)
    # down[j][i]: the index of view i less one message on active item j (`count` where the
    # view has none there, and at index `count` itself).
    codes = [code for code, _, _ in rows]
    del rows
    get = {code: i for i, code in enumerate(codes)}.get
    down: list[list[int]] = []
    for j in range(parts):
        unit = base**j
        column = [get(code - unit, count) if (code // unit) % base else count
                  for code in codes]
        column.append(count)
        down.append(column)
    identity = list(range(count))
    p_terms: list[list[float] | None] = [None] * (pairs + 1)
    q_terms: list[list[float] | None] = [None] * (pairs + 1)
    shifted: list[list[list[int]]] = [[identity], [identity]]  # per side, per mask
    for mask in range(1 << pairs):
        size = mask.bit_count()
        for side in (0, 1):
            if mask:
                low = (mask & -mask).bit_length() - 1
                column = down[side * pairs + low]
                shifted[side].append([column[i] for i in shifted[side][mask & (mask - 1)]])
            values = map(blanket.__getitem__, shifted[side][mask])
            terms = p_terms if side == 0 else q_terms
            current = terms[size]
            # terms[size][i] = 0 + the values of the masks of that size, in increasing order.
            terms[size] = list(values) if current is None else list(map(add, current, values))
    return _ListBucket(weight, p_terms, q_terms)  # type: ignore[arg-type]


_list_buckets_cache = registered_cache(JOINT_VIEWS_KEPT)
_list_masses_cache = registered_cache(2 * JOINT_VIEWS_KEPT)


def _list_masses(view: JointView, lam: float) -> tuple[Any, Any]:
    """(P, Q) of every view at rate ``lam`` on the Python backend, each bucket's weighted by
    its probability (buckets and masses kept for the last few views)."""
    key = key_of(view.n_slots, view.gamma, view.domain_size, view.pairs, view.lower)

    def buckets() -> list[_ListBucket]:
        return [_list_bucket(weight, slots, view.gamma, view.domain_size, view.pairs, total)
                for weight, slots, total, _ in view.plan if weight > 0.0]

    def make() -> tuple[Any, Any]:
        k = view.pairs
        mix = [lam**j * (1.0 - lam) ** (k - j) for j in range(k + 1)]
        p: list[float] = []
        q: list[float] = []
        for bucket in _list_buckets_cache.get(key, buckets):
            for terms, out in ((bucket.p_terms, p), (bucket.q_terms, q)):
                # sum_j mix_j terms_j, in the order j = 0..k, then the bucket's weight.
                sums = [0.0 + mix[0] * t for t in terms[0]]
                for j in range(1, k + 1):
                    weight_j = mix[j]
                    sums = [s + weight_j * t for s, t in zip(sums, terms[j], strict=True)]
                out.extend([bucket.weight * s for s in sums])
        xp = arrays.namespace()
        return xp.vector(p), xp.vector(q)

    return _list_masses_cache.get(key_of(key, lam), make)


_joint_cache = registered_cache(256)


def joint_view(n_slots: int, gamma: float, domain_size: int, pairs: int,
               lower: bool = False) -> JointView:
    """The (cached) plan of the joint view of ``pairs`` differing items, N slots, rate gamma,
    on the backend in use."""
    return _joint_cache.get(key_of(arrays.name(), n_slots, gamma, domain_size, pairs, lower),
                            lambda: JointView(n_slots, gamma, domain_size, pairs, lower))


def clear_caches() -> None:
    """Forget the cached plans, enumerations and masses (cold benchmarks)."""
    _joint_cache.clear()
    _list_buckets_cache.clear()
    _list_masses_cache.clear()
    if arrays.default_name() == arrays.NUMPY:
        from . import slot_joint_lattice

        slot_joint_lattice.clear_caches()


on_clear_all(clear_caches)  # numpy's lattice keeps its masses outside the registered caches

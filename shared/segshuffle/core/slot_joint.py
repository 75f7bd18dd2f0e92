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

**Storage.**  The views of a bucket are a prefix of one lattice per k, listed by
total, whose parts that do not depend on M or gamma (log-factorial sums, the rows of
the shifted views) are computed once; and since permuting the k pairs changes neither
P nor Q, one view per orbit is stored, weighted by the orbit's size (k! / prod r!,
r the runs of equal pairs; :class:`_Lattice`).  The sum over views is unchanged, up to
rounding.  The plans and their MAX_VALUES budget count every view, so which plan
applies does not depend on this.

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
from functools import lru_cache

import numpy as np
from scipy import special

from . import distributions
from .joint_budget import values_floor

#: The most float64 values (views times 2 (k + 1) polynomial terms, over every bucket) one
#: joint view may store: at most about 48 MB, of which at most JOINT_VIEWS_KEPT are kept.
MAX_VALUES = 6_000_000

#: Enumerated joint views kept in memory: one per k = 1..S of an accountant for S <= 3,
#: or an accountant's views and a lower bound's.
JOINT_VIEWS_KEPT = 4

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


def compositions_up_to(parts: int, total: int) -> np.ndarray:
    """Every vector of ``parts`` non-negative integers with sum at most ``total`` (rows)."""
    rows = np.zeros((1, 0), dtype=np.int64)
    for _ in range(parts):
        used = rows.sum(axis=1)
        room = total - used + 1  # each row may take 0..room-1 in the next coordinate
        starts = np.repeat(np.cumsum(room) - room, room)
        nxt = np.arange(int(room.sum()), dtype=np.int64) - starts
        rows = np.concatenate((np.repeat(rows, room, axis=0), nxt[:, None]), axis=1)
    return rows


def composition_rank(rows: np.ndarray, total: int) -> np.ndarray:
    """The index of every row in :func:`compositions_up_to` (lexicographic order).

    Vectors of length p with sum at most t number C(t + p, p), so the vectors that
    agree with v before coordinate i and are smaller there number
    sum_{a < v_i} C(R_i - a + p_i, p_i) = C(R_i + p_i + 1, p_i + 1) - C(R_i - v_i + p_i + 1,
    p_i + 1), with p_i = n - i - 1 coordinates after it and R_i = total minus the prefix sum.
    """
    parts = rows.shape[1]
    top = total + parts + 1
    table = np.zeros((top + 1, parts + 1), dtype=np.int64)
    for a in range(top + 1):
        for b in range(min(a, parts) + 1):
            table[a, b] = math.comb(a, b)
    rank = np.zeros(rows.shape[0], dtype=np.int64)
    room = np.full(rows.shape[0], total, dtype=np.int64)
    for i in range(parts):
        after = parts - i - 1
        rank += table[room + after + 1, after + 1] - table[room - rows[:, i] + after + 1,
                                                          after + 1]
        room -= rows[:, i]
    return rank


def atom_count(parts: int, total: int) -> int:
    """len(compositions_up_to(parts, total)) = C(total + parts, parts)."""
    return math.comb(total + parts, parts)


@dataclass(frozen=True)
class _Bucket:
    """One charged slot count M: the views' masses as polynomials in lambda.

    ``p_terms[j][i]`` = sum over the j-subsets T of the x_j of Mult_M(view i - e_T),
    ``q_terms`` the same on the x'_j, so that
    P(view i) = sum_j lambda^j (1 - lambda)^(k - j) p_terms[j][i], and Q alike; view i
    is the i-th stored view, which stands for its orbit (:class:`_Lattice`), and both
    terms are multiplied by the orbit's size.
    """

    p_terms: np.ndarray
    q_terms: np.ndarray


def upper_quantile(trials: int, p: float, tail: float) -> int:
    """The smallest j in [0, trials] with Pr[Binomial(trials, p) > j] <= ``tail``."""
    lo, hi = 0, trials  # Pr[> trials] = 0 <= tail
    while lo < hi:
        mid = (lo + hi) // 2
        if distributions.binom_sf(mid, trials, p) <= tail:
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
    above = distributions.binom_sf(hi, n_slots, q_out) if hi < n_slots else 0.0
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
    left = distributions.binom_sf(blanket, slots, spread) if blanket < slots else 0.0
    return blanket + pairs, left


@lru_cache(maxsize=64)
def _log_factorials(top: int) -> np.ndarray:
    return special.gammaln(np.arange(top + 2, dtype=np.float64) + 1.0)


@dataclass(frozen=True)
class _Lattice:
    """The views of k differing items up to a total, in graded order, with everything
    about them that does not depend on the slots or gamma.

    Graded order lists the views by total, then lexicographically; every bucket's views
    (total at most K <= ``top``) are then the first C(K + 2k, 2k) rows, and a shifted
    view, whose total is smaller, lies among them too.

    P and Q are unchanged when the k pairs (x_j, x'_j) are permuted (both worlds treat
    them alike), so a view's masses equal those of every view its pairs' permutations
    reach.  One view per such orbit is *stored*: the one whose pairs (c_j, c'_j) are in
    non-increasing order; its terms are multiplied by the orbit's size k! / prod r!
    (r: the lengths of runs of equal pairs), which max(0, P - e^E Q) commutes with.
    ``stored_up_to[K]`` counts the stored views of total at most K (a prefix again);
    ``p_shifts`` holds, per subset T of the x_j, |T| and the row of every stored view
    minus e_T (-1 where a count would be negative); ``q_shifts`` the same on the x'_j.
    """

    top: int
    totals: np.ndarray
    log_factorial_sums: np.ndarray  # sum_i ln c_i! of every view
    orbit_sizes: np.ndarray  # per stored view
    stored_up_to: np.ndarray
    p_shifts: tuple[tuple[int, np.ndarray], ...]
    q_shifts: tuple[tuple[int, np.ndarray], ...]


def _graded_lattice(pairs: int, top: int) -> _Lattice:
    parts = 2 * pairs
    lexicographic = compositions_up_to(parts, top)
    order = np.argsort(lexicographic.sum(axis=1), kind="stable")
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    views = lexicographic[order]
    del lexicographic
    totals = views.sum(axis=1)
    keys = views[:, :pairs] * (top + 1) + views[:, pairs:]  # pair j, lexicographically
    stored = np.ones(len(views), dtype=bool)
    run = np.ones(len(views), dtype=np.int64)
    repeats = np.ones(len(views), dtype=np.int64)  # prod over runs of r!
    for j in range(1, pairs):
        stored &= keys[:, j - 1] >= keys[:, j]
        run = np.where(keys[:, j - 1] == keys[:, j], run + 1, 1)
        repeats *= run
    representatives = views[stored]
    table = _log_factorials(top)
    masks = np.arange(1 << pairs)
    bits = (masks[:, None] >> np.arange(pairs)[None, :]) & 1  # (2^k, k)

    def positions(shift: np.ndarray) -> np.ndarray:
        moved = representatives - shift
        valid = (moved >= 0).all(axis=1)
        rank = composition_rank(np.where(valid[:, None], moved, 0), top)
        return np.where(valid, position[rank], -1).astype(np.int32)

    zero = np.zeros(pairs, dtype=np.int64)
    return _Lattice(
        top=top,
        totals=totals,
        log_factorial_sums=table[views].sum(axis=1),
        orbit_sizes=(math.factorial(pairs) // repeats[stored]).astype(np.float64),
        stored_up_to=np.cumsum(np.bincount(totals[stored], minlength=top + 1)),
        p_shifts=tuple((int(bit.sum()), positions(np.concatenate((bit, zero)))) for bit in bits),
        q_shifts=tuple((int(bit.sum()), positions(np.concatenate((zero, bit)))) for bit in bits),
    )


#: The largest lattice built per number of differing items (grown on demand).
_lattices: dict[int, _Lattice] = {}


def _lattice(pairs: int, top: int) -> _Lattice:
    """A lattice of ``pairs`` differing items whose first rows are every view up to ``top``.

    One lattice per k is kept, the largest asked for: a bucket's views are a prefix of it.
    Its size is that of the largest single bucket, which MAX_VALUES bounds."""
    kept = _lattices.get(pairs)
    if kept is None or kept.top < top:
        _lattices.pop(pairs, None)
        kept = _lattices[pairs] = _graded_lattice(pairs, top)
    return kept


def _multinomial(totals: np.ndarray, log_factorial_sums: np.ndarray, slots: int, rate: float,
                 null_rate: float) -> np.ndarray:
    """Mult_M of views with these totals and sums of ln c_i!, M = ``slots`` over the active
    items (rate each) and the nulls."""
    valid = totals <= slots
    nulls = np.where(valid, slots - totals, 0)
    table = _log_factorials(slots)
    log_value = (table[slots] - np.where(valid, log_factorial_sums, 0.0) - table[nulls]
                 + special.xlogy(totals, rate) + special.xlogy(nulls, null_rate))
    with np.errstate(under="ignore"):
        return np.where(valid, np.exp(log_value), 0.0)


def _bucket(slots: int, gamma: float, domain_size: int, pairs: int, total: int) -> _Bucket:
    """One bucket's stored views (one per orbit, times its size: :class:`_Lattice`)."""
    inside = (1.0 - gamma) + 2.0 * pairs * gamma / domain_size
    rate = (gamma / domain_size) / inside
    null_rate = (1.0 - gamma) / inside
    lattice = _lattice(pairs, total)
    count = atom_count(2 * pairs, total)
    blanket = np.append(_multinomial(lattice.totals[:count], lattice.log_factorial_sums[:count],
                                     slots, rate, null_rate), 0.0)
    stored = int(lattice.stored_up_to[total])
    p_terms = np.zeros((pairs + 1, stored))
    q_terms = np.zeros((pairs + 1, stored))
    for (size, p_index), (_, q_index) in zip(lattice.p_shifts, lattice.q_shifts, strict=True):
        p_terms[size] += blanket[p_index[:stored]]
        q_terms[size] += blanket[q_index[:stored]]
    p_terms *= lattice.orbit_sizes[:stored]
    q_terms *= lattice.orbit_sizes[:stored]
    return _Bucket(p_terms, q_terms)


@dataclass(frozen=True)
class _Enumeration:
    """Every bucket's views end to end, each bucket's terms times its probability:
    P(view i) = sum_j lambda^j (1 - lambda)^(k - j) p_terms[j][i], and Q alike."""

    p_terms: np.ndarray
    q_terms: np.ndarray


@lru_cache(maxsize=JOINT_VIEWS_KEPT)
def _enumeration(n_slots: int, gamma: float, domain_size: int, pairs: int, lower: bool
                 ) -> _Enumeration:
    """The enumerated buckets of one joint view (large: few are kept)."""
    plan = joint_view(n_slots, gamma, domain_size, pairs, lower)
    if not plan.usable:
        raise ValueError(f"{plan.values} stored values exceed the budget of {MAX_VALUES}")
    kept = [row for row in plan.plan if row[0] > 0.0]
    lattice = _lattice(pairs, max(total for _, _, total, _ in kept))  # grown once
    width = sum(int(lattice.stored_up_to[total]) for _, _, total, _ in kept)
    p_terms, q_terms = np.empty((pairs + 1, width)), np.empty((pairs + 1, width))
    start = 0
    for weight, slots, total, _ in kept:
        bucket = _bucket(slots, gamma, domain_size, pairs, total)
        stop = start + bucket.p_terms.shape[1]
        np.multiply(bucket.p_terms, weight, out=p_terms[:, start:stop])
        np.multiply(bucket.q_terms, weight, out=q_terms[:, start:stop])
        start = stop
    return _Enumeration(p_terms, q_terms)


@lru_cache(maxsize=2 * JOINT_VIEWS_KEPT)
def _masses(n_slots: int, gamma: float, domain_size: int, pairs: int, lower: bool,
            lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q) of every view at rate ``lam``, each bucket's weighted by its probability."""
    sizes = np.arange(pairs + 1)
    mix = lam ** sizes * (1.0 - lam) ** (pairs - sizes)
    views = _enumeration(n_slots, gamma, domain_size, pairs, lower)
    return _mixed(mix, views.p_terms), _mixed(mix, views.q_terms)


def _mixed(mix: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """sum_j mix[j] terms[j], one row at a time (a matrix product would take threads a
    busy host does not have, for no gain on k + 1 <= 4 rows)."""
    total = mix[0] * terms[0]
    for weight, row in zip(mix[1:], terms[1:], strict=True):
        total += weight * row
    return total


@dataclass
class JointView:
    """delta_k of the module docstring for one (N, gamma, d, k): upper or lower bound.

    The object holds only the plan (buckets, their weights, slot counts and view
    totals); the enumerated views live in small module caches, so accountants that
    keep many joint views keep little memory.  An upper bound whose plan with a bucket
    per b (or BUCKET_EDGES) exceeds MAX_VALUES takes the first coarser plan that fits
    (``coarse``: its index, 1-based, in COARSE_BUCKET_EDGES): fewer, wider buckets, each
    charged at its largest b, as sound and a little looser.
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
            raise ValueError(f"no joint view for N={n}, gamma={self.gamma}, d={d}, k={k}")
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
            weight * (truncated + UNDERFLOW * atom_count(2 * k, total) * (1 << k))
            for weight, _, total, truncated in plan))
        self.plan = tuple(plan)

    def _plan(self, buckets: list[tuple[int, int]], q_out: float, rate: float
              ) -> tuple[list[tuple[float, int, int, float]], int]:
        """(weight, charged slot count M, view total K, left-out mass) per bucket, and the
        number of views they enumerate."""
        n, k = self.n_slots, self.pairs
        plan, atoms = [], 0
        for b_lo, b_hi in buckets:
            if q_out > 0.0:
                weight = (distributions.binom_cdf(b_hi, n, q_out)
                          - distributions.binom_cdf(b_lo - 1, n, q_out))
            else:
                weight = 1.0
            slots = n - (b_lo if self.lower else b_hi)
            total, truncated = _view_total(slots, rate, k)
            plan.append((max(weight, 0.0), slots, total, truncated))
            atoms += atom_count(2 * k, total)
        return plan, atoms

    @property
    def usable(self) -> bool:
        """Whether the enumeration fits the MAX_VALUES budget."""
        return self.values <= MAX_VALUES

    def delta(self, eps: float, lam: float) -> float:
        """delta_k(E) at rate ``lam``: an upper bound, or with ``lower`` a lower bound."""
        if lam == 0.0:
            return 0.0
        p, q = _masses(self.n_slots, self.gamma, self.domain_size, self.pairs, self.lower,
                       lam)
        scale = math.exp(eps)
        # Only terms with P > e^E Q (1 - 2 ROUNDING) / (1 + 2 ROUNDING), i.e. P - e^E Q >
        # -2 ROUNDING (P + e^E Q), can be positive or have been moved across zero by
        # rounding ("Numerics"): the sum and its error are taken over them alone.
        near = p > (scale * (1.0 - 2.0 * ROUNDING) / (1.0 + 2.0 * ROUNDING)) * q
        p_near, q_near = p[near], q[near]
        value = float(np.sum(np.maximum(p_near - scale * q_near, 0.0)))
        error = 2.0 * ROUNDING * float(np.sum(p_near))
        if self.lower:
            return max(0.0, value - error)
        return min(1.0, value + error + self.left_out)


@lru_cache(maxsize=256)
def joint_view(n_slots: int, gamma: float, domain_size: int, pairs: int,
               lower: bool = False) -> JointView:
    """The (cached) plan of the joint view of ``pairs`` differing items, N slots, rate gamma."""
    return JointView(n_slots, gamma, domain_size, pairs, lower)


def clear_caches() -> None:
    """Forget the cached plans, enumerations and masses (cold benchmarks)."""
    joint_view.cache_clear()
    _enumeration.cache_clear()
    _masses.cache_clear()
    _lattices.clear()

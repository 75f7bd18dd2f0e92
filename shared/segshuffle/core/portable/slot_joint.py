"""Slot blanket, small populations: the exact joint view of k differing items.

This module belongs to the numpy-free port of the client's privacy accountant, used by light
client installs (no numpy, no scipy) to verify a server's privacy parameters;
``tests/test_portable_accountant*.py`` keep it equal to the JavaScript and numpy accountants.

**Why.**  The labelled-groups bound (:mod:`.slot_groups`) shows the server every group's size;
in a population of a few dozen users, a small group that landed entirely on x_j betrays the
victim with a probability of the order of the target delta.  Where the blanket is small, the
divergence of the real view is cheap to compute exactly instead.

**Claim.**  Let the victim's sets differ in k items, x_1..x_k against x'_1..x'_k (2k <= d
distinct items; common items are sent alike in both worlds and drop out), each sent with
probability lambda.  N blanket slots each carry, with probability gamma, an item uniform over
the d items, and a null otherwise.  With b the slots on the d - 2k items outside the pairs,

    delta_k(E) = sum_b Binom(N, gamma (d - 2k) / d)(b) Delta_k(N - b)(E),

where Delta_k(M) is the divergence of the counts c on the 2k active items when each of M slots
lands on every active item with probability q = (gamma / d) / (1 - gamma + 2k gamma / d) and is
a null otherwise:

    P(c) = sum_{T subset of 1..k} lambda^|T| (1 - lambda)^(k - |T|) Mult_M(c - e_T),
    Q(c) = the same with the shifts e'_T on the x'_j,
    Delta_k(M)(E) = sum_c max(0, P(c) - e^E Q(c)).

As for one item (:mod:`.slot_single`), b has the same law in both worlds and is read off the
histogram, its split over the outside items cancels, and an observed label with the same law in
both worlds averages the divergence with equality.  Sets differing in fewer items are the
k' < k case, so the user's bound is the largest delta_k'.

**Bucketing and truncation.**  Delta_k(M) does not grow with M (one more independent slot is a
randomised map applied to both views): every b of a bucket is charged the view at
M = N - b_hi, and the mass of b above the window is charged 1.  Within one M, the views with
more than K active messages are left out and charged their P-mass, at most
Pr[Binomial(M, 2kq) > K - k].

**Numerics.**  Every Mult_M value is a product of log-factorials and two logarithms, relatively
accurate to far better than ROUNDING; a value that underflows costs at most UNDERFLOW per atom.
A term P - e^E Q is counted only where positive, so its rounding is at most
ROUNDING (P + e^E Q) <= 2 ROUNDING P; terms that rounding could have dropped are charged the
same way.

The enumerated views are those of the JavaScript accountant, in the same (lexicographic)
order, and every sum is taken in the same order; the shifted views c - e_T are found through
an index of the views instead of the JavaScript's ranking formula (the same positions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import add

from ..arrays.python_distributions import binom_cdf, binom_sf, fsum, ln_factorial, upper_quantile
from ..bounded_cache import key_of, registered_cache
from ..errors import AccountantError
from ..joint_budget import values_floor

__all__ = [
    "MAX_VALUES",
    "Bucket",
    "JointView",
    "atom_count",
    "compositions_up_to",
    "joint_view",
]

#: The most float64 values (views times 2 (k + 1) polynomial terms) one joint view may store.
MAX_VALUES = 6_000_000

#: Enumerated joint views kept in memory.
JOINT_VIEWS_KEPT = 4

#: P-mass that a bucket's truncation at K may leave out (charged 1).
VIEW_TAIL = 1e-13

#: Mass of b above the summed window (charged 1).
BUCKET_TAIL = 1e-13

#: Where the window of b is at most this wide, every b is a bucket of its own.
EXACT_WIDTH = 48

#: Bucket edges, in standard deviations of b from its mean, for wider windows.
BUCKET_EDGES = (-7.0, -4.0, -3.0, -2.4, -2.0, -1.6, -1.3, -1.0, -0.8, -0.6, -0.4, -0.2,
                0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.4, 3.0, 3.6, 4.3, 5.0, 6.0, 7.0,
                8.5)

#: Bucket edges of the coarser plans, tried in turn where the finer plan exceeds MAX_VALUES:
#: wider buckets at low b (where the views are many), fine ones at high b (where a wide
#: bucket would be charged at a small slot count); each is charged at its largest b.
COARSE_BUCKET_EDGES = (
    (-3.0, -2.0, -1.5, -1.0, -0.6, -0.3, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.4, 3.0,
     3.6, 4.3, 5.0, 6.0, 7.0, 8.5),
    (-2.0, -1.0, -0.5, 0.0, 0.3, 0.6, 1.0, 1.4, 1.8, 2.2, 2.6, 3.0, 3.6, 4.3, 5.0, 6.0, 7.0, 8.5),
    (0.5, 1.0, 1.5, 2.0, 2.6, 3.2, 4.0, 5.0, 6.0, 7.0, 8.5),
)

#: Relative rounding error charged per counted term.
ROUNDING = 1e-11

#: Mass an underflowed multinomial value may have lost, per atom and shift.
UNDERFLOW = 1e-300


def _binomial_coefficient(n: int, k: int) -> float:
    """C(n, k) as a double, correctly rounded (infinity beyond the double range)."""
    try:
        return float(math.comb(n, k))
    except OverflowError:
        return math.inf


def atom_count(parts: int, total: int) -> float:
    """The number of vectors of ``parts`` non-negative integers with sum at most ``total``."""
    return _binomial_coefficient(total + parts, parts)


def _compositions(parts: int, total: int) -> list[tuple[int, ...]]:
    """Every vector of ``parts`` non-negative integers with sum at most ``total``, as tuples,
    in lexicographic order (first coordinate slowest)."""
    rows: list[tuple[tuple[int, ...], int]] = [((), total)]
    for _ in range(parts):
        rows = [((*prefix, value), room - value)
                for prefix, room in rows for value in range(room + 1)]
    return [prefix for prefix, _ in rows]


def compositions_up_to(parts: int, total: int) -> list[int]:
    """Every vector of ``parts`` non-negative integers with sum at most ``total``, in
    lexicographic order (first coordinate slowest), as the rows of one flat list."""
    return [value for row in _compositions(parts, total) for value in row]


@dataclass(frozen=True, slots=True)
class Bucket:
    """The enumerated views of one bucket of b, as polynomials in lambda.

    ``p_terms[j][i]`` is the sum over j-subsets T of Mult_M(view i - e_T); ``q_terms`` the
    same with the shifts on the x'_j.
    """

    weight: float
    slots: int
    p_terms: list[list[float]]
    q_terms: list[list[float]]


def _bucket_window(n_slots: int, q_out: float, coarse: int = 0
                   ) -> tuple[list[tuple[int, int]], float]:
    """Buckets [b_lo, b_hi] covering b ~ Binomial(N, q_out) up to the window's top, and the
    mass above it; ``coarse`` = i >= 1 cuts at COARSE_BUCKET_EDGES[i - 1] however narrow
    the window."""
    if q_out <= 0.0 or n_slots == 0:
        return [(0, 0)], 0.0
    mean = n_slots * q_out
    sd = math.sqrt(n_slots * q_out * (1.0 - q_out))
    hi = upper_quantile(n_slots, q_out, BUCKET_TAIL)
    above = binom_sf(hi, n_slots, q_out) if hi < n_slots else 0.0
    cuts = COARSE_BUCKET_EDGES[coarse - 1] if coarse else BUCKET_EDGES
    lo = max(0, math.floor(mean + cuts[0] * sd))
    if hi - lo + 1 <= EXACT_WIDTH and not coarse:
        tops = list(range(lo, hi + 1))
    else:
        edges = {min(hi, max(lo, math.floor(mean + z * sd))) for z in cuts}
        edges.add(hi)
        tops = sorted(edges)
    buckets: list[tuple[int, int]] = []
    start = 0
    for top in tops:
        if top >= start:
            buckets.append((start, top))
            start = top + 1
    return buckets, above


def _view_total(slots: int, rate: float, pairs: int) -> tuple[int, float]:
    """K, the most active messages enumerated, and the P-mass left out above it."""
    if slots == 0 or rate <= 0.0:
        return pairs, 0.0
    spread = min(1.0, 2 * pairs * rate)
    blanket = upper_quantile(slots, spread, VIEW_TAIL)
    left = binom_sf(blanket, slots, spread) if blanket < slots else 0.0
    return blanket + pairs, left


def _log(x: float) -> float:
    """ln x, -inf at 0 (as JavaScript's Math.log)."""
    return math.log(x) if x > 0.0 else -math.inf


def _make_bucket(weight: float, slots: int, gamma: float, domain_size: int, pairs: int,
                 total: int) -> Bucket:
    """The enumerated views of one bucket, as polynomials in lambda."""
    inside = (1.0 - gamma) + (2.0 * pairs * gamma) / domain_size
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
    log_rate = _log(rate)
    log_null_rate = _log(null_rate)
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
    return Bucket(weight, slots, p_terms, q_terms)  # type: ignore[arg-type]


def _plan(buckets: list[tuple[int, int]], n: int, q_out: float, rate: float, k: int
          ) -> tuple[list[tuple[float, int, int, float]], float]:
    """(weight, charged slot count M, view total K, left-out mass) per bucket, and the number
    of views they enumerate."""
    plan: list[tuple[float, int, int, float]] = []
    atoms = 0.0
    for b_lo, b_hi in buckets:
        if q_out > 0.0:
            weight = binom_cdf(b_hi, n, q_out) - (
                binom_cdf(b_lo - 1, n, q_out) if b_lo > 0 else 0.0)
        else:
            weight = 1.0
        slots = n - b_hi
        total, truncated = _view_total(slots, rate, k)
        plan.append((max(weight, 0.0), slots, total, truncated))
        atoms += atom_count(2 * k, total)
    return plan, atoms


class JointView:
    """delta_k of the module docstring for one (N, gamma, d, k): an upper bound (the plan of
    its buckets here, their enumerated views cached).  Where the plan with a bucket per b
    (or BUCKET_EDGES) exceeds MAX_VALUES, the first coarser plan that fits is taken
    (``coarse``: its 1-based index in COARSE_BUCKET_EDGES), each bucket still charged at
    its largest b."""

    __slots__ = ("above", "atoms", "coarse", "domain_size", "gamma", "key", "left_out",
                 "n_slots", "pairs", "plan", "values")

    def __init__(self, n_slots: int, gamma: float, domain_size: int, pairs: int) -> None:
        n = n_slots
        d = domain_size
        k = pairs
        if not (k >= 1 and 2 * k <= d and 0.0 < gamma <= 1.0 and n >= 0):
            raise AccountantError(f"no joint view for N={n}, gamma={gamma}, d={d}, k={k}")
        self.n_slots = n_slots
        self.gamma = gamma
        self.domain_size = domain_size
        self.pairs = pairs
        self.key = key_of(n_slots, gamma, domain_size, pairs)
        q_out = (gamma * (d - 2 * k)) / d
        inside = (1.0 - gamma) + (2.0 * k * gamma) / d
        rate = (gamma / d) / inside
        floor = values_floor(n, q_out, rate, k, bucket_tail=BUCKET_TAIL, view_tail=VIEW_TAIL)
        if floor > MAX_VALUES:  # no plan fits: not planned (joint_budget's docstring)
            self.coarse = len(COARSE_BUCKET_EDGES)
            self.above = self.left_out = 1.0
            self.atoms, self.values, self.plan = floor // (2 * (k + 1)), floor, []
            return
        for coarse in range(len(COARSE_BUCKET_EDGES) + 1):
            buckets, above = _bucket_window(n, q_out, coarse)
            plan, atoms = _plan(buckets, n, q_out, rate, k)
            if atoms * 2 * (k + 1) <= MAX_VALUES:
                break
        self.coarse = coarse
        self.above = above
        self.atoms = atoms
        self.values = atoms * 2 * (k + 1)
        left_out = 0.0
        for weight, _, total, truncated in plan:
            left_out += weight * (truncated + UNDERFLOW * atom_count(2 * k, total) * (1 << k))
        #: What an upper bound charges beyond the enumerated views.
        self.left_out = self.above + left_out
        self.plan = plan

    @property
    def usable(self) -> bool:
        """Whether the enumeration fits the MAX_VALUES budget."""
        return self.values <= MAX_VALUES

    def delta(self, eps: float, lam: float) -> float:
        """delta_k(E) at rate ``lam``: an upper bound."""
        if lam == 0.0:
            return 0.0
        p, q = _joint_masses(self, lam)
        e = math.exp(eps)
        # Only terms with P > e^E Q (1 - 2 ROUNDING) / (1 + 2 ROUNDING), i.e. P - e^E Q >
        # -2 ROUNDING (P + e^E Q), can be positive or have been moved across zero by
        # rounding: the sum and its error are taken over them alone (as in numpy).
        ratio = e * (1.0 - 2.0 * ROUNDING) / (1.0 + 2.0 * ROUNDING)
        near = [(pi, qi) for pi, qi in zip(p, q, strict=True) if pi > ratio * qi]
        value = fsum([gap for pi, qi in near if (gap := pi - e * qi) > 0.0])
        error = 2.0 * ROUNDING * fsum([pi for pi, _ in near])
        return min(1.0, value + error + self.left_out)


_buckets_cache = registered_cache(JOINT_VIEWS_KEPT)
_masses_cache = registered_cache(2 * JOINT_VIEWS_KEPT)
_joint_cache = registered_cache(256)


def _joint_buckets(view: JointView) -> list[Bucket]:
    """The enumerated buckets of one joint view (large: few are kept)."""
    def make() -> list[Bucket]:
        if not view.usable:
            raise AccountantError(
                f"{view.values} stored values exceed the budget of {MAX_VALUES}")
        return [_make_bucket(weight, slots, view.gamma, view.domain_size, view.pairs, total)
                for weight, slots, total, _ in view.plan if weight > 0.0]

    return _buckets_cache.get(view.key, make)


def _joint_masses(view: JointView, lam: float) -> tuple[list[float], list[float]]:
    """(P, Q) of every view at rate ``lam``, each bucket's weighted by its probability."""
    def make() -> tuple[list[float], list[float]]:
        k = view.pairs
        mix = [lam**j * (1.0 - lam) ** (k - j) for j in range(k + 1)]
        p: list[float] = []
        q: list[float] = []
        for bucket in _joint_buckets(view):
            for terms, out in ((bucket.p_terms, p), (bucket.q_terms, q)):
                # sum_j mix_j terms_j, in the order j = 0..k, then the bucket's weight.
                weight_0 = mix[0]
                sums = [0.0 + weight_0 * t for t in terms[0]]
                for j in range(1, k + 1):
                    weight_j = mix[j]
                    sums = [s + weight_j * t for s, t in zip(sums, terms[j], strict=True)]
                weight = bucket.weight
                out.extend([weight * s for s in sums])
        return p, q

    return _masses_cache.get(key_of(view.key, lam), make)


def joint_view(n_slots: int, gamma: float, domain_size: int, pairs: int) -> JointView:
    """The (cached) plan of the joint view of ``pairs`` differing items, N slots, rate gamma."""
    return _joint_cache.get(key_of(n_slots, gamma, domain_size, pairs),
                            lambda: JointView(n_slots, gamma, domain_size, pairs))

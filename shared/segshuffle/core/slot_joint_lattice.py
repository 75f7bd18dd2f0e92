"""The joint view's enumeration on numpy: one stored view per orbit of the k pairs.

The bound, its plan of buckets and what it charges are :mod:`segshuffle.core.slot_joint`'s;
this module lists a bucket's views and their masses as polynomials in lambda with numpy
(the Python backend lists every view, :func:`segshuffle.core.slot_joint._list_masses`).

**Storage.**  The views of a bucket are a prefix of one lattice per k, listed by
total, whose parts that do not depend on M or gamma (log-factorial sums, the rows of
the shifted views) are computed once; and since permuting the k pairs changes neither
P nor Q, one view per orbit is stored, weighted by the orbit's size (k! / prod r!,
r the runs of equal pairs; :class:`_Lattice`).  The sum over views is unchanged, up to
rounding.  The plans and their MAX_VALUES budget count every view, so which plan
applies does not depend on this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from .joint_budget import JOINT_VIEWS_KEPT, view_count

__all__ = ["clear_caches", "composition_rank", "compositions_up_to", "masses"]


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
    count = view_count(2 * pairs, total)
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
def _enumeration(n_slots: int, gamma: float, domain_size: int, pairs: int, lower: bool,
                 plan: tuple[tuple[float, int, int, float], ...]) -> _Enumeration:
    """The enumerated buckets of one joint view's ``plan`` (large: few are kept)."""
    kept = [row for row in plan if row[0] > 0.0]
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


def masses(n_slots: int, gamma: float, domain_size: int, pairs: int, lower: bool,
           plan: tuple[tuple[float, int, int, float], ...], lam: float
           ) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q) of every stored view of a joint view's ``plan`` (of
    :class:`segshuffle.core.slot_joint.JointView`) at rate ``lam``, each bucket's weighted
    by its probability (kept for the last few)."""
    return _masses(n_slots, gamma, domain_size, pairs, lower, plan, lam)


@lru_cache(maxsize=2 * JOINT_VIEWS_KEPT)
def _masses(n_slots: int, gamma: float, domain_size: int, pairs: int, lower: bool,
            plan: tuple[tuple[float, int, int, float], ...], lam: float
            ) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.arange(pairs + 1)
    mix = lam ** sizes * (1.0 - lam) ** (pairs - sizes)
    views = _enumeration(n_slots, gamma, domain_size, pairs, lower, plan)
    return _mixed(mix, views.p_terms), _mixed(mix, views.q_terms)


def _mixed(mix: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """sum_j mix[j] terms[j], one row at a time (a matrix product would take threads a
    busy host does not have, for no gain on k + 1 <= 4 rows)."""
    total = mix[0] * terms[0]
    for weight, row in zip(mix[1:], terms[1:], strict=True):
        total += weight * row
    return total




def clear_caches() -> None:
    """Forget the enumerations, masses and lattices (cold benchmarks)."""
    _enumeration.cache_clear()
    _masses.cache_clear()
    _lattices.clear()

"""The subset exponential mechanism of PrivSet (Wang et al., INFOCOM 2018) for set-valued data.

A user holding a set x of s items from a domain of d items reports one k-subset
z of the domain, with

    Pr[z] = e^eps / Omega   if z intersects x,        Pr[z] = 1 / Omega   otherwise,
    Omega = e^eps (C(d, k) - C(d - s, k)) + C(d - s, k),

which is eps-LDP (two inputs change the weight of any output by at most e^eps).
The server counts h_j, the reports containing item j.  For one user,

    p_t = Pr[j in z | j in x]     = e^eps C(d-1, k-1) / Omega,
    p_f = Pr[j in z | j not in x] = (e^eps (C(d-1, k-1) - C(d-1-s, k-1)) + C(d-1-s, k-1)) / Omega,

(every k-subset containing j meets x when j is in x; otherwise it misses x exactly
when its other k - 1 items avoid the s items of x), so

    W^_j = (h_j / n - p_f) / (p_t - p_f)

is unbiased for w_j, with

    Var[W^_j] = (w_j p_t (1 - p_t) + (1 - w_j) p_f (1 - p_f)) / (n (p_t - p_f)^2).

**Subset size.**  Summing the variance over the domain with sum_j w_j = s (every
user holds s items) gives the data-independent total

    V(k) = (s p_t (1 - p_t) + (d - s) p_f (1 - p_f)) / (n (p_t - p_f)^2);

the mechanism's subset size is the k in 1..d-s minimising V(k) (k > d - s would
make every report meet x and carry no information).

**Shuffle amplification parameters** (variation-ratio reduction, Wang et al.
PVLDB 2024, table of LDP randomizers): p = q = e^eps and

    beta = (e^eps - 1) (C(d-s, k) - C(d-2s, k)) / Omega,

the total variation between the report distributions of two disjoint sets.

**Numerics.**  Every probability above is a ratio of binomial coefficients over
C(d, k), and each ratio is a product of at most 2s factors, never a binomial
itself.  With u(a) = C(d - a, k) / C(d, k), the chance that a uniform k-subset
misses a given a items,

    u(a) = prod_{i=0..a-1} (d - k - i) / (d - i)          (0 once k > d - a),
    C(d-1, k-1) / C(d, k) = k / d,
    C(d-1-s, k-1) / C(d, k) = (k / d) prod_{i=0..s-1} (d - k - i) / (d - 1 - i),
    (C(d-s, k) - C(d-2s, k)) / C(d, k) = u(s) (1 - prod_{i=0..s-1} (1 - k / (d - s - i))),

the last bracket evaluated as -expm1(sum log1p(-k / (d - s - i))) so that it keeps
its relative precision when k is small against d.  The whole curve V(k),
k = 1..d-s, is then O(s d) array operations: the optimal subset size of a domain
of 16,000 items takes milliseconds (big-integer binomials for every k took
hours).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import special, stats

from ..core.validation import require_domain, require_int, require_positive


def _miss_fraction(d: int, k: np.ndarray, avoided: int, offset: int = 0) -> np.ndarray:
    """prod_{i=0..avoided-1} (d - k - i) / (d - offset - i), clipped at 0 (per entry of k).

    With offset 0 this is u(avoided) = C(d - avoided, k) / C(d, k) (module
    docstring): 0 as soon as a factor is not positive, i.e. k > d - avoided.
    """
    i = np.arange(avoided, dtype=float)
    factors = (d - k[:, None] - i[None, :]) / (d - offset - i[None, :])
    return np.prod(np.clip(factors, 0.0, None), axis=1)


def _subset_rates(d: int, s: int, k: np.ndarray) -> dict[str, np.ndarray]:
    """The mechanism's binomial ratios over C(d, k), for every subset size in ``k``.

    ``miss``: C(d-s, k)/C(d, k); ``with_j``: C(d-1, k-1)/C(d, k); ``with_j_miss``:
    C(d-1-s, k-1)/C(d, k); ``gap``: (C(d-s, k) - C(d-2s, k))/C(d, k), with
    C(d-2s, k) = 0 when d < 2s (formulas in the module docstring).
    """
    k = np.asarray(k, dtype=float)
    miss = _miss_fraction(d, k, s)
    with_j = k / d
    with_j_miss = with_j * _miss_fraction(d, k, s, offset=1)
    if d >= 2 * s:
        i = np.arange(s, dtype=float)
        share = k[:, None] / (d - s - i[None, :])  # 1 - share is the i-th factor
        with np.errstate(divide="ignore"):
            log_keep = np.sum(np.log1p(-np.minimum(share, 1.0)), axis=1)
        gap = miss * -np.expm1(log_keep)
    else:
        gap = miss.copy()
    return {"miss": miss, "with_j": with_j, "with_j_miss": with_j_miss, "gap": gap}


def _variance_curve(d: int, s: int, epsilon: float, k: np.ndarray) -> np.ndarray:
    """n V(k) for every subset size in ``k`` (module docstring), as one array."""
    rates = _subset_rates(d, s, k)
    e = math.exp(epsilon)
    normalizer = e * (1.0 - rates["miss"]) + rates["miss"]
    pt = e * rates["with_j"] / normalizer
    pf = (e * (rates["with_j"] - rates["with_j_miss"]) + rates["with_j_miss"]) / normalizer
    with np.errstate(divide="ignore", invalid="ignore"):
        curve = (s * pt * (1 - pt) + (d - s) * pf * (1 - pf)) / (pt - pf) ** 2
    return np.where(pt > pf, curve, np.inf)


@dataclass(frozen=True)
class SubsetExponential:
    """The k-subset exponential mechanism on sets of ``set_size`` items out of ``domain_size``."""

    domain_size: int
    set_size: int
    epsilon: float
    subset_size: int

    def __post_init__(self) -> None:
        d, s = require_domain(self.domain_size, self.set_size)
        require_positive("epsilon", self.epsilon)
        k = require_int("subset size", self.subset_size, 1)
        if s >= d:
            raise ValueError("the subset exponential mechanism needs set size < domain size")
        if k > d - s:
            raise ValueError(f"subset size must be in 1..{d - s}, got {k}")

    # Probabilities, all relative to C(d, k) so that they stay in floating-point range.
    @cached_property
    def _scaled(self) -> dict[str, float]:
        rates = _subset_rates(self.domain_size, self.set_size,
                              np.array([self.subset_size]))
        return {name: float(value[0]) for name, value in rates.items()}

    @property
    def normalizer(self) -> float:
        """Omega / C(d, k)."""
        e = math.exp(self.epsilon)
        return e * (1.0 - self._scaled["miss"]) + self._scaled["miss"]

    @property
    def hit_probability(self) -> float:
        """Pr[the report meets x] = e^eps (C(d,k) - C(d-s,k)) / Omega."""
        return math.exp(self.epsilon) * (1.0 - self._scaled["miss"]) / self.normalizer

    @property
    def p_true(self) -> float:
        return math.exp(self.epsilon) * self._scaled["with_j"] / self.normalizer

    @property
    def p_false(self) -> float:
        e = math.exp(self.epsilon)
        sc = self._scaled
        return (e * (sc["with_j"] - sc["with_j_miss"]) + sc["with_j_miss"]) / self.normalizer

    def output_probability(self, meets: bool) -> float:
        """Pr[z] for one particular k-subset z (meeting x or not)."""
        d, k = self.domain_size, self.subset_size
        log_weight = self.epsilon if meets else 0.0
        log_subsets = special.gammaln(d + 1) - special.gammaln(k + 1) - special.gammaln(d - k + 1)
        return math.exp(log_weight - math.log(self.normalizer) - float(log_subsets))

    def total_variance(self, n: int) -> float:
        """V(k): the summed variance of W^ over the domain (module docstring)."""
        pt, pf = self.p_true, self.p_false
        s, d = self.set_size, self.domain_size
        return (s * pt * (1 - pt) + (d - s) * pf * (1 - pf)) / (n * (pt - pf) ** 2)

    def variation_ratio_parameters(self) -> tuple[float, float, float]:
        """(p, beta, q) of the variation-ratio reduction for this randomizer."""
        e = math.exp(self.epsilon)
        beta = (e - 1.0) * self._scaled["gap"] / self.normalizer
        return e, beta, e

    def sample_counts(self, items: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Run the mechanism for every user of an (n, s) item array; return h_j per item.

        Per user: with probability ``hit_probability`` the report is a uniform
        k-subset meeting x, otherwise a uniform k-subset of the d - s other items.
        A uniform meeting subset has intersection size i >= 1 with probability
        C(s, i) C(d-s, k-i) / (C(d, k) - C(d-s, k)); given i, its items are i uniform
        items of x and k - i uniform items outside x.  Users are processed in blocks
        with random keys per item (no per-user Python loop).
        """
        items = np.asarray(items, dtype=np.int64)
        n, s = items.shape
        if s != self.set_size:
            raise ValueError(f"users must hold {self.set_size} items, got {s}")
        d, k = self.domain_size, self.subset_size
        sizes = np.arange(0, min(s, k) + 1)
        # Intersection size of a uniform k-subset with x: hypergeometric.
        weights = stats.hypergeom(d, s, k).pmf(sizes)
        meeting = float(weights[1:].sum())
        probs = np.zeros(sizes.size)
        probs[0] = 1.0 - self.hit_probability
        if meeting > 0.0:
            probs[1:] = self.hit_probability * weights[1:] / meeting
        probs = probs / probs.sum()
        inside = rng.choice(sizes, size=n, p=probs)
        counts = np.zeros(d, dtype=np.int64)
        # Rows per block: about 4 million array cells whichever way the outside is drawn.
        block = max(1, 4_000_000 // min(d, _distinct_draws(k, d - s)))
        for lo in range(0, n, block):
            hi = min(n, lo + block)
            counts += _subset_counts(items[lo:hi], inside[lo:hi], d, k, rng)
        return counts

    def estimate(self, counts: np.ndarray, n: int) -> np.ndarray:
        """Unbiased W^_j = (h_j / n - p_f) / (p_t - p_f)."""
        return (np.asarray(counts, dtype=float) / n - self.p_false) / (self.p_true - self.p_false)


def _subset_counts(items: np.ndarray, inside: np.ndarray, d: int, k: int,
                   rng: np.random.Generator) -> np.ndarray:
    """Item counts of reports with ``inside[u]`` items from x_u and k - inside[u] from outside."""
    n, s = items.shape
    # Items of x: a uniform order of each user's s items; the first inside[u] are reported.
    own_order = np.argsort(rng.random((n, s)), axis=1)
    own_pick = np.arange(s)[None, :] < inside[:, None]
    reported_own = np.take_along_axis(items, own_order, axis=1)[own_pick]
    ranked = _ordered_outside(items, k, d, rng)
    outside_pick = np.arange(ranked.shape[1])[None, :] < (k - inside)[:, None]
    reported_out = ranked[outside_pick]
    return np.bincount(np.concatenate([reported_own, reported_out]), minlength=d)


#: Up to this subset size, outside items are drawn by rank arithmetic (O(k (k + s)) vector
#: operations); above it, by first appearances among uniform draws when the subset is a
#: small part of the free ranks, otherwise by partial sorting of random keys (O(d)).
_RANK_SAMPLING_MAX = 24


def _distinct_draws(k: int, free: int) -> int:
    """Uniform draws per row for k distinct ranks out of ``free``, with a wide margin.

    Among t uniform draws the expected number of repeats is about t^2 / (2 free); the
    margin 2 k^2 / free + 16 leaves several standard deviations of room, so a redraw is
    rare (and harmless: it is a rejection step, see :func:`_first_distinct`).
    """
    return k + math.ceil(2 * k * k / max(free, 1)) + 16


def _first_distinct(rows: int, k: int, free: int, rng: np.random.Generator) -> np.ndarray:
    """(rows, k) ranks in [0, free): in each row, the first k distinct values of uniform draws.

    The values of an i.i.d. uniform sequence, in order of first appearance, are a
    uniformly random ordering of a uniformly random set (the law is invariant under
    any permutation of the values), and so are its first k once there are at least k
    distinct values; rows with fewer are drawn again, an event that is also invariant
    under value permutations, so the rejection keeps the law uniform.
    """
    draws = _distinct_draws(k, free)
    out = np.empty((rows, k), dtype=np.int64)
    pending = np.arange(rows)
    while pending.size:
        values = rng.integers(0, free, size=(pending.size, draws), dtype=np.int64)
        order = np.argsort(values, axis=1, kind="stable")  # ties keep draw order
        ordered = np.take_along_axis(values, order, axis=1)
        first = np.ones_like(ordered, dtype=bool)
        first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
        fresh = np.zeros_like(first)
        np.put_along_axis(fresh, order, first, axis=1)  # first appearances, in draw order
        keep = fresh & (np.cumsum(fresh, axis=1) <= k)
        full = keep.sum(axis=1) == k
        out[pending[full]] = values[full][keep[full]].reshape(-1, k)
        pending = pending[~full]
    return out


def _ordered_outside(items: np.ndarray, k: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """For every row x of ``items`` (sorted), k distinct items outside x in uniform random order.

    Any prefix of a uniformly ordered sample without replacement is itself a uniform
    sample without replacement, so the caller keeps the first k - i columns.
    Small k: draw the j-th pick as a uniform rank u among the d - s - j ranks left,
    turn it into the u-th rank not yet taken (walking the taken ranks in increasing
    order, each one at or below the candidate pushes it up by one), then turn ranks
    into items the same way, walking the sorted items of x.  Larger k, small against
    the d - s free ranks (a 16,000-item domain with k in the hundreds): the first k
    distinct values of a few more than k uniform draws (:func:`_first_distinct`),
    O(k log k) per user instead of O(d).  Otherwise: random keys over the domain,
    partially sorted.
    """
    items = np.sort(items, axis=1)
    n, s = items.shape
    free = d - s
    if k > _RANK_SAMPLING_MAX and 4 * _distinct_draws(k, free) <= free:
        # The r-th free rank is the item r + #{c : x_c - c <= r} (x sorted increasingly).
        ranks = _first_distinct(n, k, free, rng)
        shifted = items - np.arange(s)[None, :]
        return ranks + (shifted[:, None, :] <= ranks[:, :, None]).sum(axis=2)
    if k > _RANK_SAMPLING_MAX:
        keys = rng.random((n, d))
        keys[np.arange(n)[:, None], items] = np.inf
        smallest = np.argpartition(keys, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1)
        return np.take_along_axis(smallest, order, axis=1)
    picked = np.empty((n, k), dtype=np.int64)
    taken = np.empty((n, 0), dtype=np.int64)  # sorted ranks picked so far
    for j in range(k):
        rank = rng.integers(0, free - j, size=n)
        for c in range(j):
            rank += taken[:, c] <= rank
        picked[:, j] = rank
        taken = np.sort(np.concatenate([taken, rank[:, None]], axis=1), axis=1)
    result = picked.copy()
    for c in range(s):
        for j in range(k):
            result[:, j] += items[:, c] <= result[:, j]
    return result


def optimal_subset(domain_size: int, set_size: int, epsilon: float) -> SubsetExponential:
    """The mechanism at its variance-minimising subset size k (module docstring).

    V(k) is evaluated for every k in 1..d-s at once (:func:`_variance_curve`), so
    the search is exhaustive and takes O(s d) operations.
    """
    d, s = require_domain(domain_size, set_size)
    require_positive("epsilon", epsilon)
    if s >= d:
        raise ValueError("the subset exponential mechanism needs set size < domain size")
    sizes = np.arange(1, d - s + 1)
    curve = _variance_curve(d, s, epsilon, sizes)
    return SubsetExponential(d, s, epsilon, int(sizes[int(np.argmin(curve))]))

"""Slot blanket, several differing items: the labelled-groups bound.

**Setting.**  N blanket slots each carry, with probability gamma, an item
uniform over the d items, else a null.  The victim holds x = (x_1..x_S) or
x' = (x'_1..x'_S), 2S <= d distinct items (overlapping sets: below), and sends
its j-th item with probability lambda, else a null.

**Labelled slots.**  Give every slot an independent label J uniform on 1..S, and
let a slot labelled J land on x_J and on x'_J with probability S gamma / d each,
on x_i, x'_i (i != J) never, on each of the other d - 2S items with probability
gamma / d, and be null otherwise.  Averaged over J a slot still lands on every
item with probability gamma / d, and slots stay independent, so the blanket has
exactly the protocol's law.  Reveal to the server, for every label j, the group
size N_j (slots labelled j that are on x_j, x'_j or null) and that group's counts
on x_j and x'_j, and put the victim's j-th message in group j.  The real view
(histogram and null count) is a function of this one, so its divergence is at
most this one's.

(N_1, ..., N_S) ~ Multinomial(N; p_g, ..., p_g), p_g = (1 - gamma + 2 S gamma / d) / S,
does not depend on the victim's data.  Given the sizes, the groups are
independent, and group j is the two-bin count pair of
:mod:`segshuffle.core.multinomial_pair` with N_j slots at rate

    r_S = (S gamma / d) / (1 - gamma + 2 S gamma / d)

and the victim's Bernoulli(lambda) message.  A revealed label with the same law
in both worlds averages the divergence, so

    delta_user(E) <= E[ D_E( pair(N_1) x ... x pair(N_S) ) ] <= E[ F(min_j N_j) ],
    F(k) = D_E( S-fold composition of pair(k, r_S, lambda) ),

as adding a slot to one group is a post-processing (the pair's divergence does
not grow with its slots).  Every pair keeps its own lambda: amplification by
subsampling survives the composition.

**Overlapping sets.**  If x and x' share items, the groups of common items can
use a common item c_j and one item e_j outside x union x' as their pair (2S <= d
items in all); the victim's message in such a group is on c_j in both worlds, so
that group's pair is the same in both and only lowers the divergence, which is
therefore at most the disjoint bound.  With S = min(s, d // 2), the bound
covers every pair of sets.

**The expectation.**  F is non-increasing, so for any k_0 < ... < k_L and
v_0 = 1, v_i = F(k_{i-1} + 1) (non-increasing, enforced by a running maximum on
computed upper bounds),

    E[F(M)] <= v_{L+1} + sum_i Pr[M <= k_i] (v_i - v_{i+1}),   M = min_j N_j,

(Abel summation of the step function that dominates F), and
Pr[M <= k] <= min(1, S Pr[N_1 <= k]) with N_1 ~ Binomial(N, p_g).  The ladder
k_i is spaced in standard deviations of N_1; k_0 is where S Pr[N_1 <= k_0] fits
the slack budget.

**Rungs past a certain minimum carry no weight.**  Write c_i for the charged
min(1, S Pr[N_1 <= k_i]).  Once c_j = 1, every later c_i is 1 too, and the sum's
terms from j on telescope: v_{L+1} + sum_{i >= j} (v_i - v_{i+1}) = v_j.  So the
bound equals the same formula on the ladder k_0 < ... < k_{j-1}, which is itself a
ladder (the inequality holds for any), and F is not evaluated at the rungs k_j, ...,
k_L: they are the largest groups, and so the costliest compositions.  (With the
running maximum the shortened ladder's value can only be smaller, never larger: its
v_i are maxima over fewer computed values.)  For S = 8 the union bound reaches 1
about half a standard deviation below the mean group size, so the top two of the
eight rungs are dropped.  For S = 2 and small groups the expectation over (N_1, N_2) is
taken exactly as well (each term an exact product of two pairs by sorted
losses, no grid), and the smaller bound is kept.

At gamma = 1 and 2S = d the pair degenerates (r_S = 1/2); the accountant then
falls back on the revealed-send bound, which holds at every gamma.

**Where it loses.**  The revealed sizes N_j tell the server each group's own number of
null slots.  A group whose slots all carry items (probability (1 - z_g)^N_j, z_g =
(1 - gamma) / (1 - gamma + 2 S gamma / d) the group's null share) shows a count total
above its size exactly when the victim sent its message there; the real view, with its
nulls pooled over the whole blanket, is that sure only when no slot at all is null
(probability gamma^N).  At 40 users, d = 8, m = 0.9, S = 2 the groups hold about 10.7
slots and a given group has no null with probability (1 - p_g z_g)^N = 0.13, against
gamma^N = 0.016 for the pool.  At lambda = 0.1, delta = 1e-3 this bound's epsilon is
1.081 with the exact expectation over (N_1, N_2) (the ladder's union bound on the
minimum gives none), while the exact view needs 0.316: the expectation steps lose
nothing there, the labelled view itself does (its per-group null counts are what makes
the groups independent).  The accountant therefore uses the joint
view of :mod:`segshuffle.core.slot_joint`, which reveals nothing beyond the real view,
wherever it fits its budget (with coarser buckets of b where needed: up to 85 users at
d = 8, m = 0.9 for S = 2), and this bound beyond, where groups are larger and a group
without nulls is rarer.

Written once against :mod:`segshuffle.core.arrays` (numpy's vectors on the server, lists
in a light client install; the JavaScript accountant is its port).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

from . import arrays
from .bounded_cache import key_of, on_clear_all, registered_cache
from .memo import memory_bounded_cache
from .multinomial_pair import PairAtoms, pair_atoms, pair_loss, pair_losses
from .multinomial_pair import clear_caches as clear_pair_atoms
from .pair_windows import enumerable
from .privacy_loss import COMPOSED_CACHE_BYTES, DEFAULT_STEP, ComposedLoss, compose_loss

__all__ = ["GroupsBound", "clear_caches", "group_geometry", "product_delta"]

#: Ladder points in standard deviations of one group's size (above k_0).
LADDER_SIGMAS = (-6.0, -4.0, -3.0, -2.0, -1.25, -0.5, 0.25)

#: The ladder of searches that only steer (a coarse loss grid): fewer F evaluations.
COARSE_LADDER_SIGMAS = (-4.0, -2.0, -0.5)

#: Ladder points closer than this share of the group size are merged.
LADDER_MERGE = 5e-3

#: The exact two-group expectation is taken while the mean group size is at most this.
EXACT_PAIR_GROUPS = 32.0


def group_geometry(gamma: float, domain_size: int, pairs: int) -> tuple[float, float]:
    """(p_g, r_S): a slot's chance to be in one given group, and the group's pair rate."""
    inside = (1.0 - gamma) + 2.0 * pairs * gamma / domain_size
    return inside / pairs, min(0.5, (pairs * gamma / domain_size) / inside)


def _composed_groups(slots: int, r: float, lam: float, pairs: int, step: float
                     ) -> ComposedLoss | None:
    """The ``pairs``-fold composition of the group pair with ``slots`` slots at rate ``lam``
    (None: too many atoms), on the backend in use (kept per backend)."""
    return _kept_composition(arrays.name(), slots, r, lam, pairs, step)


@memory_bounded_cache(COMPOSED_CACHE_BYTES, max_entries=512)
def _kept_composition(backend: str, slots: int, r: float, lam: float, pairs: int,
                      step: float) -> ComposedLoss | None:
    atoms = pair_atoms(slots, r)
    if atoms is None:
        return None
    return compose_loss(pair_loss(atoms, lam, upper=True, step=step), pairs, True)


@dataclass(frozen=True)
class SortedLosses:
    """A pair's atoms sorted by loss, with suffix sums of their masses (plain lists).

    ``loss``: the atoms' losses, increasing; ``p_mass``: their P-mass; ``tail_p``,
    ``tail_q``: suffix sums of the P- and Q-mass (one more entry: 0); ``tail``: the
    window's outside mass.
    """

    loss: list[float]
    p_mass: list[float]
    tail_p: list[float]
    tail_q: list[float]
    tail: float


_sorted_cache = registered_cache(4096)


def _sorted_losses(slots: int, r: float, lam: float) -> SortedLosses | None:
    """A pair's atoms sorted by loss, with suffix sums (None: too many atoms)."""
    def make() -> SortedLosses | None:
        atoms = pair_atoms(slots, r)
        return None if atoms is None else _sorted_from(atoms, lam)
    return _sorted_cache.get(key_of(arrays.name(), slots, r, lam), make)


def _sorted_from(atoms: PairAtoms, lam: float) -> SortedLosses:
    all_loss, all_mass = (list(vector) for vector in pair_losses(atoms, lam))
    # The atoms world P can produce, by increasing loss, ties (infinite losses among them)
    # by index: a stable sort.
    order = [i for i, (loss, mass) in enumerate(zip(all_loss, all_mass, strict=True))
             if mass > 0.0 and loss == loss and loss != -math.inf]
    order.sort(key=all_loss.__getitem__)
    loss = [all_loss[i] for i in order]
    p_mass = [all_mass[i] for i in order]
    exp = math.exp
    q_mass = [0.0 if x == math.inf else m * exp(-min(x, 700.0))
              for x, m in zip(loss, p_mass, strict=True)]
    xp = arrays.namespace()
    tail_p = [*xp.suffix_sums(xp.vector(p_mass)).tolist(), 0.0]
    tail_q = [*xp.suffix_sums(xp.vector(q_mass)).tolist(), 0.0]
    return SortedLosses(loss, p_mass, tail_p, tail_q, atoms.tail)


def _shifted_losses(first: SortedLosses, eps: float) -> tuple[list[float], list[float]]:
    """E - l_i of the first pair's atoms and e^{min(E - l_i, 700)} (0 at E - l_i = -inf)."""
    exp = math.exp
    shifted = [eps - x for x in first.loss]
    scales = [0.0 if v == -math.inf else exp(min(v, 700.0)) for v in shifted]
    return shifted, scales


def product_delta(first: SortedLosses, second: SortedLosses, eps: float,
                  shifted: tuple[list[float], list[float]] | None = None) -> float:
    """D_{e^E} of the product of two pairs, summed atom by atom (no grid), plus their tails.

    D = sum_i p_i sum_{l_j > E - l_i} p_j (1 - e^{E - l_i - l_j})
      = sum_i p_i [ TP(E - l_i) - e^{E - l_i} TQ(E - l_i) ],
    with TP, TQ the second pair's P- and Q-mass above a loss; the outer sum is correctly
    rounded.  ``shifted``: :func:`_shifted_losses` of the first pair at E, when kept.
    """
    losses, scales = _shifted_losses(first, eps) if shifted is None else shifted
    starts = [bisect_right(second.loss, x) for x in losses]
    tail_p, tail_q = second.tail_p, second.tail_q
    terms = [mass * max(tail_p[j] - scale * tail_q[j], 0.0)
             for mass, j, scale in zip(first.p_mass, starts, scales, strict=True)]
    return math.fsum(terms) + first.tail + second.tail


def clear_caches() -> None:
    """Forget the cached pairs, their compositions and sorted losses (cold benchmarks)."""
    _kept_composition.cache_clear()
    _sorted_cache.clear()
    clear_pair_atoms()


# The compositions are kept by a memory-bounded table, not a registered cache: forgetting
# every cached computation of the accountant must forget them too.
on_clear_all(clear_caches)


class GroupsBound:
    """E[F(min_j N_j)] of the module docstring for one (N, gamma, d, S) and slack budget."""

    def __init__(self, n_slots: int, gamma: float, domain_size: int, pairs: int,
                 slack: float, step: float = DEFAULT_STEP) -> None:
        self.backend = arrays.name()  # its compositions run where it was built
        xp = arrays.namespace()
        self.n_slots = n_slots
        self.pairs = pairs
        self.slack = slack
        self.step = step
        self.p_group, self.r = group_geometry(gamma, domain_size, pairs)
        n, p = n_slots, self.p_group
        mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
        # k_0: the largest k with S Pr[N_1 <= k] within the slack.
        k0 = xp.binom_ppf(slack / pairs, n, p)
        while k0 >= 0 and pairs * xp.binom_cdf(k0, n, p) > slack:
            k0 -= 1
        ladder = [k0]
        for z in LADDER_SIGMAS if step <= DEFAULT_STEP else COARSE_LADDER_SIGMAS:
            k = min(n, math.floor(mean + z * sd))
            if k > ladder[-1] and (k - ladder[-1]) > LADDER_MERGE * k:
                ladder.append(k)
        if ladder[0] < 0:  # nothing to charge 1: Pr[N_1 <= -1] = 0
            ladder = ladder[1:] or [0]
        charged = [0.0 if k < 0 else min(xp.binom_cdf(k, n, p) * pairs, 1.0) for k in ladder]
        # Rungs from the first one charged 1 on weigh nothing (module docstring).
        live = next((i for i, cdf in enumerate(charged) if cdf >= 1.0), len(ladder))
        self.ladder: list[int] = ladder[:max(live, 1)]
        self.ladder_cdf: list[float] = charged[:max(live, 1)]

    @property
    def usable(self) -> bool:
        """Whether the pairs are non-degenerate (r_S < 1/2) and small enough to enumerate
        (counted at the largest rung, not built: a check may need only the first)."""
        return 0.0 < self.r < 0.5 and enumerable(max(self.ladder[-1] + 1, 1), self.r)

    def _f(self, slots: int, eps: float, lam: float) -> float:
        with arrays.use(self.backend):
            composed = _composed_groups(slots, self.r, lam, self.pairs, self.step)
        return 1.0 if composed is None else composed.delta(eps)

    def first_rung_delta(self, eps: float, lam: float) -> float:
        """The ladder bound with its first rung alone, F(k_0 + 1) + Pr[M <= k_0] (1 -
        F(k_0 + 1)): the Abel summation holds for any ladder, this one included.  One pair
        composition instead of one per rung, and the first that :meth:`ladder_delta`
        computes: a check that it already certifies stops there."""
        first = self._f(self.ladder[0] + 1, eps, lam)
        return min(first + self.ladder_cdf[0] * (1.0 - first), 1.0)

    def floor_delta(self, eps: float, lam: float) -> float | None:
        """A value :meth:`delta` is never below, from the last rung alone (one pair
        composition): the ladder bound is F(k_L + 1) plus non-negative terms (its v_i do
        not increase and every charged probability is >= 0).  None where the exact
        two-group expectation may be the smaller (S = 2, small groups, default grid)."""
        if self._exact_pair_applies:
            return None
        return min(self._f(self.ladder[-1] + 1, eps, lam), 1.0)

    def ladder_delta(self, eps: float, lam: float) -> float:
        """The Abel-summed ladder bound with the union bound on the minimum."""
        values = [1.0, *(self._f(k + 1, eps, lam) for k in self.ladder)]
        # v_0 = 1, v_{i+1} = F(k_i + 1), made non-increasing from the right.
        for i in range(len(values) - 2, -1, -1):
            values[i] = max(values[i], values[i + 1])
        total = 0.0
        for i, cdf in enumerate(self.ladder_cdf):
            total += cdf * (values[i] - values[i + 1])
        return min(values[-1] + total, 1.0)

    def exact_pair_delta(self, eps: float, lam: float) -> float | None:
        """S = 2, small groups: sum over (N_1, N_2) of the exact product divergence.

        Sizes outside the central quantiles (mass at most the slack) are charged 1.
        None where it does not apply: more pairs, larger groups, or a coarse grid
        (a steering search).
        """
        if not self._exact_pair_applies:
            return None
        with arrays.use(self.backend):
            return self._exact_pair_delta(eps, lam)

    @property
    def _exact_pair_applies(self) -> bool:
        """S = 2, groups of at most EXACT_PAIR_GROUPS slots on average, the default grid."""
        return (self.pairs == 2 and self.n_slots * self.p_group <= EXACT_PAIR_GROUPS
                and self.step <= DEFAULT_STEP)

    def _exact_pair_delta(self, eps: float, lam: float) -> float | None:
        n, p = self.n_slots, self.p_group
        xp = arrays.namespace()
        lo = max(0, xp.binom_ppf(self.slack / 4.0, n, p) - 1)
        hi = min(n, xp.binom_isf(self.slack / 4.0, n, p) + 1)
        sizes = list(range(lo, hi + 1))
        pairs: dict[int, SortedLosses] = {}
        for size in sizes:
            losses = _sorted_losses(size, self.r, lam)
            if losses is None:
                return None
            pairs[size] = losses
        size_vector = xp.indices(sizes)
        first_weights = xp.binom_pmf(size_vector, n, p).tolist()
        total = covered = 0.0
        for n1, w1 in zip(sizes, first_weights, strict=True):
            rest = n - n1
            second = (xp.binom_pmf(size_vector, rest, p / (1.0 - p)) * w1).tolist()
            shifted: tuple[list[float], list[float]] | None = None
            for n2, weight in zip(sizes, second, strict=True):
                if weight < 1e-300 or n2 > rest:
                    continue
                if shifted is None:
                    shifted = _shifted_losses(pairs[n1], eps)
                total += weight * min(1.0, product_delta(pairs[n1], pairs[n2], eps, shifted))
                covered += weight
        return min(1.0, total + max(0.0, 1.0 - covered) + 1e-15)

    def delta(self, eps: float, lam: float) -> float:
        """The smaller of the ladder bound and (S = 2, small groups) the exact expectation."""
        if lam == 0.0:
            return 0.0
        value = self.ladder_delta(eps, lam)
        exact = self.exact_pair_delta(eps, lam)
        return value if exact is None else min(value, exact)

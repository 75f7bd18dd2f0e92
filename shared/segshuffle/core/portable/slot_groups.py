"""Slot blanket, several differing items: the labelled-groups bound.

This module belongs to the numpy-free port of the client's privacy accountant, used by light
client installs (no numpy, no scipy) to verify a server's privacy parameters;
``tests/test_portable_accountant*.py`` keep it equal to the JavaScript and numpy accountants.

**Setting.**  N blanket slots each carry, with probability gamma, an item uniform over the d
items, and a null otherwise.  The victim holds x = (x_1..x_S) or x' = (x'_1..x'_S), 2S <= d
distinct items, and sends its j-th item with probability lambda.

**Labelled slots.**  Give every slot an independent label J uniform on 1..S, and let a slot
labelled J land on x_J and on x'_J with probability S gamma / d each, never on the other pairs'
items, on each of the d - 2S other items with probability gamma / d, and be null otherwise.
Averaged over J, every slot still lands on each item with probability gamma / d,
independently: the blanket has exactly the protocol's law.  Reveal to the server each group's
size N_j (the slots labelled j on x_j, on x'_j or null) and its counts on x_j and x'_j, with
the victim's j-th message in group j: the real view is a function of this one, so its
divergence is at most this one's.

(N_1, ..., N_S) ~ Multinomial(N; p_g, ..., p_g), p_g = (1 - gamma + 2 S gamma / d) / S, does
not depend on the victim's data; given the sizes the groups are independent, and group j is
the two-bin pair of :mod:`segshuffle.core.multinomial_pair` with N_j slots at rate
r_S = (S gamma / d) / (1 - gamma + 2 S gamma / d).  Averaging over the revealed sizes,

    delta_user(E) <= E[D_E(pair(N_1) x ... x pair(N_S))] <= E[F(min_j N_j)],
    F(k) = D_E(S-fold composition of pair(k, r_S, lambda)),

as one more slot in a group is a post-processing.  Overlapping sets use a common item and an
outside item as a pair whose two worlds agree, which only lowers the divergence; with
S = min(s, d // 2) the bound covers every pair of sets.

**The expectation.**  F does not increase, so for any ladder k_0 < ... < k_L, with v_0 = 1 and
v_i = F(k_{i-1} + 1) (made non-increasing by a running maximum from the right),

    E[F(M)] <= v_{L+1} + sum_i Pr[M <= k_i] (v_i - v_{i+1}),   M = min_j N_j,

by Abel summation, with Pr[M <= k] <= min(1, S Pr[N_1 <= k]).  k_0 is where
S Pr[N_1 <= k_0] fits the slack budget; the rest of the ladder is spaced in standard
deviations of N_1.  For S = 2 and small groups the expectation over (N_1, N_2) is also taken
exactly (each term an exact product of two pairs by sorted losses, no grid) and the smaller
bound is kept.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from functools import partial
from itertools import accumulate
from operator import mul

from .. import arrays
from ..arrays.python_distributions import binom_cdf, binom_isf, binom_pmf, binom_ppf, fsum
from ..bounded_cache import key_of, registered_cache
from ..multinomial_pair import pair_atoms, pair_loss, pair_losses
from ..pair_windows import enumerable
from ..privacy_loss import DEFAULT_STEP, ComposedLoss, compose_loss

__all__ = ["GroupsBound", "SortedLosses", "group_geometry"]

#: Ladder points in standard deviations of one group's size (above k_0).
LADDER_SIGMAS = (-6.0, -4.0, -3.0, -2.0, -1.25, -0.5, 0.25)

#: Ladder points closer than this share of the group size are merged.
LADDER_MERGE = 5e-3

#: The exact two-group expectation is taken while the mean group size is at most this.
EXACT_PAIR_GROUPS = 32.0


def group_geometry(gamma: float, domain_size: int, pairs: int) -> tuple[float, float]:
    """(p_g, r_S): a slot's chance to be in one given group, and the group's pair rate."""
    inside = (1.0 - gamma) + (2.0 * pairs * gamma) / domain_size
    return inside / pairs, min(0.5, ((pairs * gamma) / domain_size) / inside)


_composed_groups_cache = registered_cache(512)


@arrays.on_python
def _composed_groups(slots: int, r: float, lam: float, pairs: int,
                     step: float) -> ComposedLoss | None:
    """The ``pairs``-fold composition of the group pair with ``slots`` slots (None: too many
    atoms)."""
    def make() -> ComposedLoss | None:
        atoms = pair_atoms(slots, r)
        if atoms is None:
            return None
        return compose_loss(pair_loss(atoms, lam, upper=True, step=step), pairs,
                            True)

    return _composed_groups_cache.get(key_of(slots, r, lam, pairs, step), make)


@dataclass(frozen=True, slots=True)
class SortedLosses:
    """A pair's atoms sorted by loss, with suffix sums of their masses.

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
        if atoms is None:
            return None
        all_loss, all_mass = map(list, pair_losses(atoms, lam))
        order = [i for i, (loss, mass) in enumerate(zip(all_loss, all_mass, strict=True))
                 if mass > 0.0 and loss == loss and loss != -math.inf]
        # Increasing loss, ties (infinite losses included) by index: a stable sort.
        order.sort(key=all_loss.__getitem__)
        loss = [all_loss[i] for i in order]
        p_mass = [all_mass[i] for i in order]
        exp = math.exp
        inf = math.inf
        q_mass = [0.0 if x == inf else m * exp(-min(x, 700.0))
                  for x, m in zip(loss, p_mass, strict=True)]
        # Suffix sums, accumulated from the last atom down.
        tail_p = list(accumulate(reversed(p_mass)))
        tail_p.reverse()
        tail_p.append(0.0)
        tail_q = list(accumulate(reversed(q_mass)))
        tail_q.reverse()
        tail_q.append(0.0)
        return SortedLosses(loss, p_mass, tail_p, tail_q, atoms.tail)

    return _sorted_cache.get(key_of(slots, r, lam), make)


def _shifted_losses(first: SortedLosses, eps: float) -> tuple[list[float], list[float]]:
    """E - l_i of the first pair's atoms and e^{min(E - l_i, 700)} (0 at E - l_i = -inf)."""
    exp = math.exp
    shifted = [eps - x for x in first.loss]
    scales = [0.0 if s == -math.inf else exp(min(s, 700.0)) for s in shifted]
    return shifted, scales


def _product_delta(first: SortedLosses, second: SortedLosses, shifted: list[float],
                   scales: list[float]) -> float:
    """D_{e^E} of the product of two pairs, summed atom by atom (no grid), plus their tails.

    D = sum_i p_i [TP(E - l_i) - e^{E - l_i} TQ(E - l_i)], with TP, TQ the second pair's P-
    and Q-mass above a loss (``shifted`` and ``scales`` from :func:`_shifted_losses` of the
    first pair at E).  The outer sum is correctly rounded.
    """
    starts = list(map(partial(bisect_right, second.loss), shifted))
    tail_p = second.tail_p
    tail_q = second.tail_q
    inner = [tail_p[j] - scale * tail_q[j] for j, scale in zip(starts, scales, strict=True)]
    terms = map(mul, first.p_mass, [x if x > 0.0 else 0.0 for x in inner])
    return fsum(list(terms)) + first.tail + second.tail


class GroupsBound:
    """E[F(min_j N_j)] of the module docstring for one (N, gamma, d, S) and slack budget."""

    def __init__(self, n_slots: int, gamma: float, domain_size: int, pairs: int,
                 slack: float, step: float = DEFAULT_STEP) -> None:
        self.n_slots = n_slots
        self.pairs = pairs
        self.slack = slack
        self.step = step
        self.p_group, self.r = group_geometry(gamma, domain_size, pairs)
        n = n_slots
        p = self.p_group
        mean = n * p
        sd = math.sqrt(n * p * (1.0 - p))
        # k_0: the largest k with S Pr[N_1 <= k] within the slack.
        k0 = binom_ppf(slack / pairs, n, p)
        while k0 >= 0 and pairs * binom_cdf(k0, n, p) > slack:
            k0 -= 1
        ladder = [k0]
        for z in LADDER_SIGMAS:
            k = min(n, math.floor(mean + z * sd))
            last = ladder[-1]
            if k > last and (k - last) > LADDER_MERGE * k:
                ladder.append(k)
        if ladder[0] < 0:  # nothing to charge 1: Pr[N_1 <= -1] = 0
            ladder = ladder[1:] if len(ladder) > 1 else [0]
        self.ladder = ladder
        self.ladder_cdf = [0.0 if k < 0 else min(binom_cdf(k, n, p) * pairs, 1.0)
                           for k in ladder]

    @property
    def usable(self) -> bool:
        """Whether the pairs are non-degenerate (r_S < 1/2) and small enough to enumerate
        (counted at the largest rung, not built: a check may need only the first)."""
        return 0.0 < self.r < 0.5 and enumerable(max(self.ladder[-1] + 1, 1), self.r)

    def f(self, slots: int, eps: float, lam: float) -> float:
        """F(slots) at (E, lambda)."""
        composed = _composed_groups(slots, self.r, lam, self.pairs, self.step)
        return 1.0 if composed is None else composed.delta(eps)

    def first_rung_delta(self, eps: float, lam: float) -> float:
        """The ladder bound with its first rung alone, F(k_0 + 1) + Pr[M <= k_0] (1 -
        F(k_0 + 1)) (the Abel summation holds for any ladder): one composition, the first
        that :meth:`ladder_delta` computes."""
        first = self.f(self.ladder[0] + 1, eps, lam)
        return min(first + self.ladder_cdf[0] * (1.0 - first), 1.0)

    def ladder_delta(self, eps: float, lam: float) -> float:
        """The Abel-summed ladder bound with the union bound on the minimum."""
        values = [1.0, *(self.f(k + 1, eps, lam) for k in self.ladder)]
        # v_0 = 1, v_{i+1} = F(k_i + 1), made non-increasing from the right.
        for i in range(len(values) - 2, -1, -1):
            values[i] = max(values[i], values[i + 1])
        total = 0.0
        for i, cdf in enumerate(self.ladder_cdf):
            total += cdf * (values[i] - values[i + 1])
        return min(values[-1] + total, 1.0)

    def exact_pair_delta(self, eps: float, lam: float) -> float | None:
        """S = 2, small groups: the sum over (N_1, N_2) of the exact product divergence, the
        sizes outside the central quantiles (mass at most the slack) charged 1.  None where
        it does not apply."""
        n = self.n_slots
        p = self.p_group
        if self.pairs != 2 or n * p > EXACT_PAIR_GROUPS or self.step > DEFAULT_STEP:
            return None
        lo = max(0, binom_ppf(self.slack / 4.0, n, p) - 1)
        hi = min(n, binom_isf(self.slack / 4.0, n, p) + 1)
        pairs: dict[int, SortedLosses] = {}
        for size in range(lo, hi + 1):
            losses = _sorted_losses(size, self.r, lam)
            if losses is None:
                return None
            pairs[size] = losses
        total = 0.0
        covered = 0.0
        second_rate = p / (1.0 - p)
        for n1 in range(lo, hi + 1):
            w1 = binom_pmf(n1, n, p)
            rest = n - n1
            first = pairs[n1]
            shifted: tuple[list[float], list[float]] | None = None
            for n2 in range(lo, hi + 1):
                if n2 > rest:  # Binomial(rest, .)(n2) = 0: skipped
                    continue
                weight = binom_pmf(n2, rest, second_rate) * w1
                if weight < 1e-300:
                    continue
                if shifted is None:
                    shifted = _shifted_losses(first, eps)
                product = _product_delta(first, pairs[n2], *shifted)
                total += weight * min(1.0, product)
                covered += weight
        return min(1.0, total + max(0.0, 1.0 - covered) + 1e-15)

    def delta(self, eps: float, lam: float) -> float:
        """The smaller of the ladder bound and (S = 2, small groups) the exact expectation."""
        if lam == 0.0:
            return 0.0
        value = self.ladder_delta(eps, lam)
        exact = self.exact_pair_delta(eps, lam)
        return value if exact is None else min(value, exact)

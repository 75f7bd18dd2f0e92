"""Slot blanket, one differing item: the exact full view as a mixture of count pairs.

**Claim.**  Let the victim's sets differ in one item, x against x' (items common
to both are sent alike in both worlds, independently of everything else, so they
are a post-processing and drop out).  N blanket slots each carry, with
probability gamma, an item uniform over the d items, else a null.  Let b be the
number of slots landing on the d - 2 items outside {x, x'}.  Then

    delta_full(E) = sum_b Binom(N, gamma (d - 2) / d)(b) delta_pair(N - b, r1, lambda)(E),
    r1 = (gamma / d) / (1 - gamma + 2 gamma / d),

with delta_pair the two-bin count pair of :mod:`segshuffle.core.hockey_stick`.

**Proof.**  b has the same law in both worlds (the victim's message lands on x,
x' or is a null) and the server reads it off the histogram; its split over the
d - 2 outside items is uniform in both worlds, so it cancels from every
likelihood ratio.  Given b, each of the other N - b slots is, independently, on
x or on x' with probability r1 each and a null otherwise.  The rest of the view
is the counts (A, A') on x and x' and the null count, which is the fixed total
minus everything else, so a function of (b, A, A').  That is the count pair with
N - b slots, rate r1 and the victim's Bernoulli(lambda) message.  A mixture over
an observed label whose law is the same in both worlds has the label-weighted
average divergence, with equality.

**Which slots.**  N is every blanket slot of the h accounted honest users, the
victim's own ceil(m) included: N = h ceil(m).  The proof above needs the N slots to
be independent, alike and independent of the victim's set, in both worlds.  The
victim's client draws its slots exactly as every honest client does (each a uniform
item with probability gamma, never looking at x), and its data message is a separate
ciphertext, the pair's Bernoulli(lambda) message; so its slots are part of the
blanket in both worlds, and the mixture over h ceil(m) slots is the full view's
divergence itself.  Counting h ceil(m) - 1 slots, as the other slot bounds do (one
more slot is a post-processing, so fewer slots bound from above), gives a larger
delta: at gamma = 1 and lambda = 1 its mass at infinite loss is (1 - 1/d)^(hc - 1)
against the view's (1 - 1/d)^(hc), which at small h left no epsilon at all where
the view's is finite (h = 3, d = 3, m = 2, lambda = 0.1, delta = 0.01: exact 1.376).

**Rounding.**  With every b its own bucket (small populations) the value is exact
but for rounding: the bucket weights are binomial tail differences, each within a
few ulps, and every pair's per-total sum loses at most about 1e-11 relative; the
accountant's certified margins (relative 1e-9, absolute 1e-15) cover both, so the
published delta is never below the view's.  Brute-force enumeration of the view
confirms it over a grid of small populations (``tests/test_single_item_exact.py``).

**Bucketing.**  delta_pair is non-increasing in its slot count: one more slot,
independent and landing on x, x' or nowhere with the same probabilities in both
worlds, is a randomised map applied to both views.  So charging every b of a
bucket [b_lo, b_hi] the pair at N - b_hi is an upper bound, and the mass of b
above the summed window is charged 1.  Buckets are single values where the
window is narrow and widen towards the tails elsewhere; the charge at the
bucket's top costs at most a relative 1e-3 or so of the slot count near the
mean, where the mass is.

**One implementation.**  The mixture is written once against :mod:`segshuffle.core.arrays`:
the server's accountant runs it on numpy, the numpy-free accountant of
:mod:`segshuffle.core.portable` on Python lists (its entry points choose the backend), with
the same buckets, weights and per-total terms; the summation order differs (numpy's pairwise
sums, Neumaier's compensated ones), by a few ulps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from . import arrays
from .bounded_cache import key_of, registered_cache
from .hockey_stick import SummationWindow, summation_window, window_terms

__all__ = ["SingleItemMixture", "clear_caches", "mixture_geometry", "pair_at_mean",
           "single_item_mixture"]

#: Standard deviations of b summed above its mean (above: charged 1) and below it.
UPPER_SIGMAS = 10.0
LOWER_SIGMAS = 6.0

#: Where the window of b is at most this wide, every b is a bucket of its own.
EXACT_WIDTH = 160

#: Bucket edges, in standard deviations from the mean, for wider windows.
BUCKET_EDGES = (-6.0, -3.0, -2.0, -1.5, -1.0, -0.6, -0.3, 0.0, 0.3, 0.6, 1.0, 1.5, 2.0,
                2.5, 3.0, 4.0, 5.0, 6.5, 8.0, 10.0)

#: Bucket edges where one standard deviation of b is below COARSE_BELOW of the slots.
COARSE_EDGES = (-6.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.5, 5.0, 7.0, 10.0)
COARSE_BELOW = 2e-3

#: Totals the buckets' summation windows put in one pass (larger runs fall out of numpy's
#: cache and cost more than the calls they save).
RUN_TOTALS = 4096


@dataclass(frozen=True)
class SingleItemMixture:
    """The buckets of the claim: their weights, the slots charged to each (plain lists), the
    mass charged 1 (``tail``), and the backend whose vectors its windows hold."""

    r1: float
    weights: list[float]
    slots: list[int]
    tail: float
    backend: str

    def delta(self, eps: float, lam: float) -> float:
        """An upper bound on delta_full(E) at rate ``lam`` (exact but for the buckets).

        Every bucket's pair is :func:`~segshuffle.core.hockey_stick.delta_for` at N - b_hi
        slots: the buckets' summation windows are laid end to end, a few thousand totals at
        a time, their per-total terms computed in one pass and summed per bucket.
        """
        if lam == 0.0:
            return 0.0
        with arrays.use(self.backend) as xp:
            total = self.tail
            for run in self._runs:
                terms = window_terms(run.t, run.w0, run.w1, run.rho_slack, lam, 0.0, eps)
                per_bucket = xp.segment_totals(terms, run.starts)
                omitted = run.omitted0 * (1.0 - lam) + run.omitted1 * lam
                total += xp.total(run.weights * (per_bucket + omitted))
        return min(float(total), 1.0)

    @cached_property
    def _runs(self) -> list[_StackedWindows]:
        """The summation windows of the buckets with weight, end to end in runs of at most
        RUN_TOTALS totals (or one window)."""
        runs: list[_StackedWindows] = []
        pending: list[tuple[float, SummationWindow]] = []
        size = 0
        with arrays.use(self.backend) as xp:
            for weight, slots in zip(self.weights, self.slots, strict=True):
                if weight <= 0.0:
                    continue
                window = summation_window(int(slots), self.r1)
                if pending and size + len(window.t) > RUN_TOTALS:
                    runs.append(_StackedWindows.of(pending, xp))
                    pending, size = [], 0
                pending.append((weight, window))
                size += len(window.t)
            if pending:
                runs.append(_StackedWindows.of(pending, xp))
        return runs


@dataclass(frozen=True)
class _StackedWindows:
    """Several pairs' summation windows laid end to end (``starts``: where each begins)."""

    weights: Any
    starts: list[int]
    t: Any
    w0: Any
    w1: Any
    rho_slack: Any
    omitted0: Any
    omitted1: Any

    @classmethod
    def of(cls, windows: list[tuple[float, SummationWindow]], xp: Any) -> _StackedWindows:
        """(weight, window) pairs laid end to end, in vectors of the backend ``xp``."""
        starts, at = [], 0
        for _, window in windows:
            starts.append(at)
            at += len(window.t)
        return cls(weights=xp.vector([weight for weight, _ in windows]),
                   starts=starts,
                   t=xp.concatenate([window.t for _, window in windows]),
                   w0=xp.concatenate([window.w0 for _, window in windows]),
                   w1=xp.concatenate([window.w1 for _, window in windows]),
                   rho_slack=xp.concatenate([window.rho_slack for _, window in windows]),
                   omitted0=xp.vector([window.omitted0 for _, window in windows]),
                   omitted1=xp.vector([window.omitted1 for _, window in windows]))


def _edges(n_slots: int, q_out: float) -> list[int]:
    """Increasing bucket tops b_0 < b_1 < ... (the last one: the summed window's top)."""
    mean = n_slots * q_out
    sd = math.sqrt(n_slots * q_out * (1.0 - q_out))
    lo = max(0, math.floor(mean - LOWER_SIGMAS * sd - 2))
    hi = min(n_slots, math.ceil(mean + UPPER_SIGMAS * sd + 2))
    if hi - lo + 1 <= EXACT_WIDTH:
        return list(range(lo, hi + 1))
    # Where one standard deviation of b is a small share of the pair's slots, the
    # pair barely changes across it: fewer, wider buckets cost a relative ~1e-4 there.
    edges = COARSE_EDGES if sd < COARSE_BELOW * (n_slots - mean) else BUCKET_EDGES
    tops = {min(hi, max(lo, math.floor(mean + z * sd))) for z in edges}
    tops.add(hi)
    return sorted(tops)


_mixtures = registered_cache(256)


def single_item_mixture(n_slots: int, gamma: float, domain_size: int) -> SingleItemMixture:
    """The mixture of the claim for N = ``n_slots`` slots at rate gamma over d items, on
    the backend in use (kept per backend and (N, gamma, d))."""
    backend = arrays.name()
    return _mixtures.get(key_of(backend, n_slots, gamma, domain_size),
                         lambda: _mixture(n_slots, gamma, domain_size, backend))


def clear_caches() -> None:
    """Forget every kept mixture (benchmarks measure cold costs)."""
    _mixtures.clear()


def mixture_geometry(gamma: float, domain_size: int) -> tuple[float, float]:
    """(q_out, r1) of the claim: a slot's chance to land outside {x, x'}, and the pair's
    rate per bin given that it does not (d >= 2)."""
    d = domain_size
    q_out = (gamma * (d - 2)) / d
    # 1 - q_out written without the cancellation; r1 <= 1/2 exactly (1/2 at gamma = 1).
    r1 = min(0.5, (gamma / d) / ((1.0 - gamma) + (2.0 * gamma) / d))
    return q_out, r1


def pair_at_mean(n_slots: int, gamma: float, domain_size: int) -> tuple[int, float]:
    """(slots, r1) of the mixture's pair at the mean of b, N - round(N q_out) slots: its
    heaviest buckets, for searches that only steer (not a bound: the mixture averages
    the pairs around it)."""
    q_out, r1 = mixture_geometry(gamma, domain_size)
    return n_slots - round(n_slots * q_out), r1


def _mixture(n_slots: int, gamma: float, domain_size: int, backend: str) -> SingleItemMixture:
    if domain_size < 2 or n_slots == 0 or gamma == 0.0:
        return SingleItemMixture(0.0, [1.0], [0], 0.0, backend)
    q_out, r1 = mixture_geometry(gamma, domain_size)
    if q_out == 0.0:
        return SingleItemMixture(r1, [1.0], [n_slots], 0.0, backend)
    tops = _edges(n_slots, q_out)
    mean = n_slots * q_out
    xp = arrays.namespace()
    # Pr[b <= top] differences below the mean, Pr[b > top] differences above it: each
    # side from the small tail, so no weight is a difference of numbers close to 1.
    top_vector = xp.floor_int(xp.vector(tops))
    cdf = xp.binom_cdf(top_vector, n_slots, q_out).tolist()
    sf = xp.binom_sf(top_vector, n_slots, q_out).tolist()
    weights = []
    for i in range(len(tops)):
        start = -1 if i == 0 else tops[i - 1]
        if start >= mean:
            weight = (1.0 if i == 0 else sf[i - 1]) - sf[i]
        else:
            weight = cdf[i] - (0.0 if i == 0 else cdf[i - 1])
        weights.append(max(weight, 0.0))
    tail = sf[-1] if tops[-1] < n_slots else 0.0
    return SingleItemMixture(r1, weights, [n_slots - top for top in tops], tail, backend)

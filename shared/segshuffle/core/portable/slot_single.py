"""Slot blanket, one differing item: the exact full view as a mixture of count pairs.

This is the numpy-free port of the accountant that light client installs use to verify a
server's privacy parameters; ``tests/test_portable_accountant*.py`` keep it equal to the
JavaScript and numpy accountants.

**Claim.**  Let the victim's sets differ in one item, x against x' (items common to both
are sent alike in both worlds, independently of everything else, and drop out).  N blanket
slots each carry, with probability gamma, an item uniform over the d items, else a null.
Let b be the number of slots landing on the d - 2 items outside {x, x'}.  Then

    delta_full(E) = sum_b Binom(N, gamma (d - 2) / d)(b) delta_pair(N - b, r1, lambda)(E),
    r1 = (gamma / d) / (1 - gamma + 2 gamma / d),

with delta_pair the two-bin count pair of :mod:`.hockey_stick`.  Why: b has the same law
in both worlds and the server reads it off the histogram; its split over the outside items
is uniform in both worlds and cancels from every likelihood ratio.  Given b, each of the
other N - b slots is on x or on x' with probability r1 each, else a null, and the null
count is a function of b and the counts on x and x'.  An observed label with the same law
in both worlds averages the divergence, with equality.

**Which slots.**  N = h ceil(m), every blanket slot of the accounted honest users, the
victim's own included: the victim's client draws its slots as every honest client does,
independently of x, and its data message is a separate ciphertext (the pair's
Bernoulli(lambda) message), so its slots belong to the blanket in both worlds and the
mixture is the view's divergence itself.  Rounding (binomial tail differences, the pairs'
per-total sums: about 1e-11 relative) is covered by the certified margins of
:mod:`.accounting`.

**Bucketing.**  delta_pair does not grow with its slot count (one more independent slot
is a randomised map applied to both views), so charging every b of a bucket [b_lo, b_hi]
the pair at N - b_hi is an upper bound, and the mass of b above the summed window is
charged 1.  Buckets are single values where the window is narrow and widen towards the
tails elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import arrays
from ..bounded_cache import key_of, registered_cache
from ..hockey_stick import delta_for, poisson_pair
from .distributions import binom_cdf, binom_sf

__all__ = ["SingleItemMixture", "single_item_mixture"]

#: Standard deviations of b summed above its mean (above: charged 1) and below it.
_UPPER_SIGMAS = 10.0
_LOWER_SIGMAS = 6.0

#: Where the window of b is at most this wide, every b is a bucket of its own.
_EXACT_WIDTH = 160

#: Bucket edges, in standard deviations from the mean, for wider windows.
_BUCKET_EDGES = (-6.0, -3.0, -2.0, -1.5, -1.0, -0.6, -0.3, 0.0, 0.3, 0.6, 1.0, 1.5, 2.0,
                 2.5, 3.0, 4.0, 5.0, 6.5, 8.0, 10.0)

#: Bucket edges where one standard deviation of b is below _COARSE_BELOW of the slots.
_COARSE_EDGES = (-6.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.5, 5.0, 7.0, 10.0)
_COARSE_BELOW = 2e-3


@dataclass(frozen=True, slots=True)
class SingleItemMixture:
    """The buckets of the claim: their weights, the slots charged to each, and the mass
    charged 1 (``tail``)."""

    r1: float
    weights: list[float]
    slots: list[int]
    tail: float

    @arrays.on_python
    def delta(self, eps: float, lam: float) -> float:
        """An upper bound on delta_full(E) at rate ``lam`` (exact but for the buckets)."""
        if lam == 0.0:
            return 0.0
        total = self.tail
        for weight, slots in zip(self.weights, self.slots, strict=True):
            if weight > 0.0:
                total += weight * delta_for(poisson_pair(lam, slots, self.r1), eps)
        return min(total, 1.0)


def _edges(n_slots: int, q_out: float) -> list[int]:
    """Increasing bucket tops b_0 < b_1 < ... (the last one: the summed window's top)."""
    mean = n_slots * q_out
    sd = math.sqrt(n_slots * q_out * (1.0 - q_out))
    lo = max(0, math.floor(mean - _LOWER_SIGMAS * sd - 2))
    hi = min(n_slots, math.ceil(mean + _UPPER_SIGMAS * sd + 2))
    if hi - lo + 1 <= _EXACT_WIDTH:
        return list(range(lo, hi + 1))
    # Where one standard deviation of b is a small share of the pair's slots, the pair
    # barely changes across it: fewer, wider buckets cost a relative ~1e-4 there.
    zs = _COARSE_EDGES if sd < _COARSE_BELOW * (n_slots - mean) else _BUCKET_EDGES
    tops = {min(hi, max(lo, math.floor(mean + z * sd))) for z in zs}
    tops.add(hi)
    return sorted(tops)


_mixture_cache = registered_cache(256)


def single_item_mixture(n_slots: int, gamma: float, domain_size: int) -> SingleItemMixture:
    """The mixture of the claim for N = ``n_slots`` slots at rate gamma over d items
    (cached)."""
    return _mixture_cache.get(key_of(n_slots, gamma, domain_size),
                              lambda: _mixture(n_slots, gamma, domain_size))


def _mixture(n_slots: int, gamma: float, domain_size: int) -> SingleItemMixture:
    d = domain_size
    if d < 2 or n_slots == 0 or gamma == 0.0:
        return SingleItemMixture(0.0, [1.0], [0], 0.0)
    q_out = (gamma * (d - 2)) / d
    # 1 - q_out written without the cancellation; r1 <= 1/2 exactly (1/2 at gamma = 1).
    r1 = min(0.5, (gamma / d) / ((1.0 - gamma) + (2.0 * gamma) / d))
    if q_out == 0.0:
        return SingleItemMixture(r1, [1.0], [n_slots], 0.0)
    tops = _edges(n_slots, q_out)
    mean = n_slots * q_out
    # Each weight is a difference of the small tail on its side of the mean, so no weight
    # is a difference of numbers close to 1.
    weights = []
    previous_cdf = 0.0
    previous_sf = 1.0  # Pr[b > -1]
    for i, top in enumerate(tops):
        cdf = binom_cdf(top, n_slots, q_out)
        sf = binom_sf(top, n_slots, q_out)
        start = -1 if i == 0 else tops[i - 1]
        weight = previous_sf - sf if start >= mean else cdf - previous_cdf
        weights.append(max(weight, 0.0))
        previous_cdf = cdf
        previous_sf = sf
    last = tops[-1]
    tail = binom_sf(last, n_slots, q_out) if last < n_slots else 0.0
    slots = [n_slots - top for top in tops]
    return SingleItemMixture(r1, weights, slots, tail)

"""Which totals and splits of the multinomial two-bin pair are enumerated, and in which blocks.

One definition for both Python accountants (:mod:`segshuffle.core.multinomial_pair` and
its numpy-free port; the JavaScript accountant mirrors it), since a client that enumerates
other atoms than the server computes other bounds.  Plain Python, no numpy.

The pair (proof in :mod:`segshuffle.core.multinomial_pair`): k slots put a blanket total
T ~ Binomial(k, 2r) on the two items; the observed totals t_lo .. t_hi + 1 cover T
within WINDOW_SIGMAS standard deviations of its mean, and are cut into blocks that share
one representative split; each block's splits a on x cover WINDOW_SIGMAS standard
deviations of Binomial(t_0, 1/2) around t_0 / 2.  The mass outside is a tail bound.
"""

from __future__ import annotations

import math

#: Standard deviations each side of the means enumerated (the rest is tail mass).
WINDOW_SIGMAS = 9.0

#: Relative width of a block of observed totals: a block starting at total t_0 spans
#: max(1, floor(BLOCK_SHARE min(t_0, k + 1 - t_0))) totals.  The victim's posterior
#: probability of being among the t messages grows like t / (k - t + 1), so a block's
#: relative width in both t and k + 1 - t bounds what sharing its representative costs.
BLOCK_SHARE = 1e-3

#: The most atoms one pair may enumerate; a pair with more is not used.
MAX_ATOMS = 6_000_000


def total_window(slots: int, q: float) -> tuple[int, int]:
    """(t_lo, t_hi): the blanket totals T ~ Binomial(``slots``, ``q``) enumerated."""
    mean = slots * q
    sigma = math.sqrt(max(mean * (1.0 - q), 0.0))
    margin = WINDOW_SIGMAS * sigma + 2.0 * WINDOW_SIGMAS + 2.0
    return max(0, math.floor(mean - margin)), min(slots, math.ceil(mean + margin))


def split_window(total: int) -> tuple[int, int]:
    """(a_lo, a_hi): the splits a of ``total`` messages enumerated, around total / 2."""
    half_sd = 0.5 * math.sqrt(max(total, 1))
    margin = WINDOW_SIGMAS * half_sd + WINDOW_SIGMAS + 2.0
    return max(0, math.floor(total / 2.0 - margin)), min(total, math.ceil(total / 2.0 + margin))


def block_starts(slots: int, t_lo: int, t_end: int) -> list[int]:
    """The lowest total of every block covering the observed totals ``t_lo`` .. ``t_end``
    of a pair with ``slots`` slots (the last block is cut at ``t_end``)."""
    starts = []
    t = t_lo
    while t <= t_end:
        starts.append(t)
        t += max(1, math.floor(BLOCK_SHARE * min(t, slots + 1 - t)))
    return starts


def atom_count(slots: int, q: float) -> int:
    """How many atoms the pair with ``slots`` slots and total rate ``q`` = 2r enumerates:
    the splits of every block's first total, summed over the blocks (no atom is built)."""
    t_lo, t_hi = total_window(slots, q)
    count = 0
    for start in block_starts(slots, t_lo, t_hi + 1):
        a_lo, a_hi = split_window(start)
        count += a_hi - a_lo + 1
    return count


def enumerable(slots: int, r: float) -> bool:
    """Whether the pair with ``slots`` slots at rate ``r`` has at most MAX_ATOMS atoms
    (what a bound asks before it relies on the pair, without building it)."""
    return atom_count(slots, 2.0 * r) <= MAX_ATOMS

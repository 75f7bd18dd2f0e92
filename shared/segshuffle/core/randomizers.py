"""Client-side randomizers of round 2 (paper Algorithm 2, lines 9-16; SPEC sections 2 and 6).

Items are integer ids in ``range(domain_size)``.  Nothing here touches the
network or a clock; randomness comes from the caller's
:class:`numpy.random.Generator`, so simulations are reproducible and a client
can pass a generator seeded from the operating system's CSPRNG.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from .validation import require_int, require_non_negative, require_unit_interval


def blanket_slots(m: float) -> int:
    """Number of blanket slots a user fills: ceil(m) (0 when m = 0)."""
    return math.ceil(require_non_negative("blanket rate m", m))


def blanket_probability(m: float) -> float:
    """gamma = m / ceil(m): the chance that one blanket slot carries a message (0 when m = 0)."""
    slots = blanket_slots(m)
    return 0.0 if slots == 0 else m / slots


def fit_set(
    items: Iterable[int], set_size: int, domain_size: int, rng: np.random.Generator
) -> np.ndarray:
    """Make a user's item set exactly ``set_size`` items long (SPEC section 6).

    Duplicates are removed first.  A larger set is reduced to ``set_size`` items
    sampled uniformly without replacement.  A smaller set is padded with distinct
    padding items drawn uniformly from the ``set_size`` reserved ids
    ``domain_size, ..., domain_size + set_size - 1`` appended to the domain; the
    protocol then runs over a domain of ``domain_size + set_size`` items.

    Returns the items as a sorted int64 array of length ``set_size``.
    """
    s = require_int("set size", set_size, 1)
    d = require_int("domain size", domain_size, 1)
    unique = np.unique(np.fromiter((int(i) for i in items), dtype=np.int64))
    if unique.size and (unique[0] < 0 or unique[-1] >= d):
        raise ValueError(f"items must be ids in [0, {d}), got {unique.tolist()}")
    if unique.size > s:
        unique = rng.choice(unique, size=s, replace=False)
    elif unique.size < s:
        padding = d + rng.choice(s, size=s - unique.size, replace=False)
        unique = np.concatenate([unique, padding])
    return np.sort(unique.astype(np.int64))


def poisson_sample(items: np.ndarray, lam: float, rng: np.random.Generator) -> np.ndarray:
    """The Poisson randomizer (paper eq. (1)): keep each item independently with probability lam."""
    lam = require_unit_interval("lambda", lam)
    items = np.asarray(items, dtype=np.int64)
    return items[rng.random(items.size) < lam]


def blanket_items(m: float, domain_size: int, rng: np.random.Generator) -> np.ndarray:
    """Blanket messages: each of ceil(m) slots sends, with probability gamma = m / ceil(m),
    one item drawn uniformly from the domain."""
    slots = blanket_slots(m)
    sent = int(np.count_nonzero(rng.random(slots) < blanket_probability(m)))
    return rng.integers(0, domain_size, size=sent, dtype=np.int64)


def fixed_size_slots(
    items: np.ndarray, lam: float, m: float, domain_size: int, rng: np.random.Generator
) -> list[int | None]:
    """All round-2 slots of one user, ``len(items) + ceil(m)`` of them (SPEC section 7).

    Slot i < s carries item i with probability lam, otherwise ``None`` (a null
    message the server discards); each blanket slot carries a uniform item with
    probability gamma, otherwise ``None``.  Sending every slot, null or not, keeps
    the number of ciphertexts per user independent of the user's level.
    """
    lam = require_unit_interval("lambda", lam)
    items = np.asarray(items, dtype=np.int64)
    keep = rng.random(items.size) < lam
    data: list[int | None] = [int(i) if k else None for i, k in zip(items, keep, strict=True)]
    slots = blanket_slots(m)
    gamma = blanket_probability(m)
    send = rng.random(slots) < gamma
    draws = rng.integers(0, domain_size, size=slots, dtype=np.int64)
    blanket: list[int | None] = [
        int(j) if s else None for j, s in zip(draws, send, strict=True)
    ]
    return data + blanket

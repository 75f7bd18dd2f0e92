"""Client-side randomizers of round 2 (paper Algorithm 2, lines 9-16; docs/protocol.md section 2).

Items are integer ids in ``range(domain_size)``.  Nothing here touches the
network or a clock; randomness comes from the caller's
:class:`numpy.random.Generator`, so simulations are reproducible and a client
can pass a generator seeded from the operating system's CSPRNG.

The blanket follows the campaign's :class:`~segshuffle.core.blanket.BlanketMode`
(geometry in :mod:`segshuffle.core.blanket`): in the ``slots`` mode c = ceil(m)
slots each carry, with probability gamma = m / c, an item uniform over the d
items of the privacy domain; in the ``independent`` mode slot t (t = 0..d-1)
carries item t with probability m / d.  Either way every item receives m / d
blanket messages per user in expectation.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from . import blanket as _blanket
from .blanket import BlanketMode
from .validation import require_int, require_unit_interval


def blanket_slots(m: float) -> int:
    """Number of blanket slots a user fills in the ``slots`` mode: ceil(m) (0 when m = 0).

    Shorthand for :func:`segshuffle.core.blanket.blanket_slots` in the slots mode,
    where the count does not depend on the domain.
    """
    return _blanket.blanket_slots(m, 1, BlanketMode.SLOTS)


def blanket_probability(m: float) -> float:
    """gamma = m / ceil(m): the chance that one slot carries a message in the ``slots`` mode.

    0 when m = 0.  Shorthand for :func:`segshuffle.core.blanket.slot_probability`.
    """
    return _blanket.slot_probability(m, 1, BlanketMode.SLOTS)


def fit_set(
    items: Iterable[int], set_size: int, domain_size: int, rng: np.random.Generator
) -> np.ndarray:
    """Make a user's item set exactly ``set_size`` items long (docs/protocol.md section 2).

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


def _blanket_slot_values(m: float, domain_size: int, rng: np.random.Generator,
                         mode: BlanketMode) -> tuple[np.ndarray, np.ndarray]:
    """(item each blanket slot would carry, whether it is sent) for one user.

    Slots mode: c = ceil(m) slots, slot i sent with probability gamma = m / c and
    carrying an item uniform over the domain (the sent flags are drawn first, the
    items second).  Independent mode: d slots, slot t carrying item t and sent
    with probability m / d.
    """
    slots = _blanket.blanket_slots(m, domain_size, mode)
    probability = _blanket.slot_probability(m, domain_size, mode)
    send = rng.random(slots) < probability
    if mode is BlanketMode.SLOTS:
        values = rng.integers(0, domain_size, size=slots, dtype=np.int64)
    else:
        values = np.arange(slots, dtype=np.int64)
    return values, send


def blanket_items(m: float, domain_size: int, rng: np.random.Generator, *,
                  mode: str | BlanketMode = BlanketMode.SLOTS) -> np.ndarray:
    """The blanket messages one user sends (only the sent ones), as item ids.

    ``slots``: each of ceil(m) slots sends, with probability gamma = m / ceil(m),
    one item drawn uniformly from the domain.  ``independent``: item t is sent
    with probability m / d, independently for every t of the d items (m <= d).
    """
    d = require_int("domain size", domain_size, 1)
    mode = _blanket.parse_mode(mode)
    if mode is BlanketMode.SLOTS:  # only the sent slots need an item
        slots = _blanket.blanket_slots(m, d, mode)
        sent = int(np.count_nonzero(rng.random(slots) < _blanket.slot_probability(m, d, mode)))
        return rng.integers(0, d, size=sent, dtype=np.int64)
    values, send = _blanket_slot_values(m, d, rng, mode)
    return values[send]


def fixed_size_slots(
    items: np.ndarray, lam: float, m: float, domain_size: int, rng: np.random.Generator, *,
    mode: str | BlanketMode = BlanketMode.SLOTS,
) -> list[int | None]:
    """All round-2 slots of one user, ``len(items) + blanket_slots`` of them (docs/wire.md).

    Slot i < s carries item i with probability lam, otherwise ``None`` (a null
    message the server discards).  The blanket slots follow ``mode``
    (:func:`segshuffle.core.blanket.blanket_slots`): ceil(m) slots each carrying a
    uniform item with probability gamma = m / ceil(m), or d slots where slot t
    carries item t with probability m / d; an unsent blanket slot is ``None``.
    Sending every slot, null or not, keeps the number of ciphertexts per user
    independent of the user's level.
    """
    lam = require_unit_interval("lambda", lam)
    d = require_int("domain size", domain_size, 1)
    items = np.asarray(items, dtype=np.int64)
    keep = rng.random(items.size) < lam
    data: list[int | None] = [int(i) if k else None for i, k in zip(items, keep, strict=True)]
    values, send = _blanket_slot_values(m, d, rng, _blanket.parse_mode(mode))
    blanket: list[int | None] = [
        int(j) if s else None for j, s in zip(values, send, strict=True)
    ]
    return data + blanket

"""Client-side randomizers of both rounds (paper Algorithm 2; docs/protocol.md section 2).

Items are integer ids in ``range(domain_size)``.  Nothing here touches the network or
a clock, and nothing needs numpy: randomness comes from the caller's
:class:`~segshuffle.core.randomness.RandomSource` (the operating system's CSPRNG when
a caller passes ``None``; a seeded :class:`random.Random` or numpy ``Generator`` for
reproducible simulations), through :func:`~segshuffle.core.randomness.as_source`.

Round 1 (level privacy eps_p): K-ary randomized response keeps the true level index
with probability p = e^eps_p / (e^eps_p + K - 1) and reports each other index with
probability q = 1 / (e^eps_p + K - 1); this is eps_p-LDP for the level.

Round 2: the blanket follows the campaign's
:class:`~segshuffle.core.blanket.BlanketMode` (geometry in :mod:`segshuffle.core.blanket`):
in the ``slots`` mode c = ceil(m) slots each carry, with probability gamma = m / c, an
item uniform over the d items of the privacy domain; in the ``independent`` mode slot
t (t = 0..d-1) carries item t with probability m / d.  Either way every item receives
m / d blanket messages per user in expectation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from . import blanket as _blanket
from .blanket import BlanketMode
from .randomness import RandomSource, as_source
from .validation import require_int, require_positive, require_unit_interval


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


def keep_probability(eps_p: float, level_count: int) -> float:
    """p = e^eps_p / (e^eps_p + K - 1): probability that randomized response keeps the level."""
    e = math.exp(require_positive("level privacy eps_p", eps_p))
    return e / (e + level_count - 1)


def randomize_level(level_index: int, level_count: int, eps_p: float, rng: object = None) -> int:
    """K-ary randomized response on one level index (eps_p-LDP for the level)."""
    k = require_int("level count", level_count, 1)
    if not 0 <= level_index < k:
        raise ValueError(f"level index must be in [0, {k}), got {level_index}")
    source = as_source(rng)
    if k == 1 or source.random() < keep_probability(eps_p, k):
        return level_index
    other = source.below(k - 1)
    return other if other < level_index else other + 1


def sample_without_replacement(values: Sequence[int], count: int,
                               source: RandomSource) -> list[int]:
    """``count`` of ``values`` drawn uniformly without replacement (a partial Fisher-Yates)."""
    pool = list(values)
    if not 0 <= count <= len(pool):
        raise ValueError(f"cannot draw {count} of {len(pool)} values")
    for i in range(count):
        j = i + source.below(len(pool) - i)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:count]


def _item_ids(items: Iterable[int], domain_size: int) -> list[int]:
    """The distinct ids of ``items``, sorted; each must be an integer in [0, domain_size)."""
    distinct: set[int] = set()
    for item in items:
        if isinstance(item, bool) or int(item) != item:
            raise ValueError(f"items must be integer ids, got {item!r}")
        distinct.add(int(item))
    ids = sorted(distinct)
    if ids and (ids[0] < 0 or ids[-1] >= domain_size):
        raise ValueError(f"items must be ids in [0, {domain_size}), got {ids}")
    return ids


def fit_set(items: Iterable[int], set_size: int, domain_size: int,
            rng: object = None) -> tuple[int, ...]:
    """Make a user's item set exactly ``set_size`` items long (docs/protocol.md section 2).

    Duplicates are removed first.  A larger set is reduced to ``set_size`` items
    sampled uniformly without replacement.  A smaller set is padded with distinct
    padding items drawn uniformly from the ``set_size`` reserved ids
    ``domain_size, ..., domain_size + set_size - 1`` appended to the domain; the
    protocol then runs over a domain of ``domain_size + set_size`` items.

    Returns the items sorted, ``set_size`` of them.
    """
    s = require_int("set size", set_size, 1)
    d = require_int("domain size", domain_size, 1)
    source = as_source(rng)
    ids = _item_ids(items, d)
    if len(ids) > s:
        ids = sample_without_replacement(ids, s, source)
    elif len(ids) < s:
        ids += [d + j for j in sample_without_replacement(range(s), s - len(ids), source)]
    return tuple(sorted(ids))


def poisson_sample(items: Iterable[int], lam: float, rng: object = None) -> list[int]:
    """The Poisson randomizer (paper eq. (1)): keep each item independently with probability lam."""
    lam = require_unit_interval("lambda", lam)
    source = as_source(rng)
    return [int(i) for i in items if source.random() < lam]


def _blanket_slot_values(m: float, domain_size: int, source: RandomSource,
                         mode: BlanketMode) -> list[int | None]:
    """One user's blanket slots: the item each carries, ``None`` for an unsent slot.

    Slots mode: c = ceil(m) slots, slot i sent with probability gamma = m / c and
    carrying an item uniform over the domain.  Independent mode: d slots, slot t
    carrying item t and sent with probability m / d.
    """
    slots = _blanket.blanket_slots(m, domain_size, mode)
    probability = _blanket.slot_probability(m, domain_size, mode)
    sent = [source.random() < probability for _ in range(slots)]
    if mode is BlanketMode.SLOTS:
        return [source.below(domain_size) if s else None for s in sent]
    return [t if s else None for t, s in enumerate(sent)]


def blanket_items(m: float, domain_size: int, rng: object = None, *,
                  mode: str | BlanketMode = BlanketMode.SLOTS) -> list[int]:
    """The blanket messages one user sends (only the sent ones), as item ids.

    ``slots``: each of ceil(m) slots sends, with probability gamma = m / ceil(m),
    one item drawn uniformly from the domain.  ``independent``: item t is sent
    with probability m / d, independently for every t of the d items (m <= d).
    """
    d = require_int("domain size", domain_size, 1)
    values = _blanket_slot_values(m, d, as_source(rng), _blanket.parse_mode(mode))
    return [j for j in values if j is not None]


def fixed_size_slots(
    items: Iterable[int], lam: float, m: float, domain_size: int, rng: object = None, *,
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
    source = as_source(rng)
    data: list[int | None] = [int(i) if source.random() < lam else None for i in items]
    return data + _blanket_slot_values(m, d, source, _blanket.parse_mode(mode))

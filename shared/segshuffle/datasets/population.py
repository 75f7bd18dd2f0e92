"""Populations of users holding exactly s items, ready for a protocol run.

docs/protocol.md section 2: every user holds exactly s items.  A larger set is reduced to
s items sampled uniformly without replacement; a smaller one is padded with
distinct dummy items drawn uniformly from s reserved padding items appended to
the domain, ids ``d .. d + s - 1``.  The privacy domain then has d + s items
(21 for MSNBC with s = 4).  :func:`fit_population` does this for a whole sample
of users at once, with the same distribution as applying
:func:`segshuffle.core.randomizers.fit_set` to every user.

Sources (:class:`DatasetSource`) produce populations of n users:

- :class:`CollectionSource`: n users sampled without replacement from a
  :class:`~segshuffle.datasets.transactions.SetCollection` (MSNBC or a user's
  transaction file), then fitted (padded domain, d + s items);
- :class:`SyntheticSource`: the paper's synthetic data, every user holding s items
  drawn uniformly without replacement from T items.  Sets already have exactly s
  items, so no padding item is ever needed and the privacy domain is T itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..core.validation import require_int
from .transactions import SetCollection


@dataclass(frozen=True)
class Population:
    """n users, each holding exactly s distinct items.

    ``items`` is an (n, s) int64 array, each row sorted.  Real items are
    ``0 .. item_count - 1``; ids from ``item_count`` up to ``domain_size - 1``
    are padding items.  ``domain_size`` is the privacy domain every mechanism runs
    over (blanket messages are uniform on it).
    """

    items: np.ndarray
    item_count: int
    domain_size: int

    @property
    def n(self) -> int:
        return int(self.items.shape[0])

    @property
    def set_size(self) -> int:
        return int(self.items.shape[1])

    def holders(self) -> np.ndarray:
        """Users holding each item of the privacy domain (length ``domain_size``)."""
        return np.bincount(self.items.ravel(), minlength=self.domain_size).astype(np.int64)

    def frequencies(self) -> np.ndarray:
        """w_j: the share of users holding item j, over the privacy domain."""
        return self.holders() / self.n

    def level_holders(self, levels: np.ndarray, level_count: int) -> np.ndarray:
        """holders[k, j]: users at level index k holding item j, shape (K, domain_size)."""
        levels = np.asarray(levels, dtype=np.int64)
        if levels.shape != (self.n,):
            raise ValueError("one level index per user is required")
        keys = levels[:, None] * self.domain_size + self.items
        counts = np.bincount(keys.ravel(), minlength=level_count * self.domain_size)
        return counts.reshape(level_count, self.domain_size).astype(np.int64)

    def subset(self, users: np.ndarray) -> Population:
        return Population(items=self.items[users], item_count=self.item_count,
                          domain_size=self.domain_size)


def fit_population(
    collection: SetCollection, users: np.ndarray, set_size: int, rng: np.random.Generator
) -> np.ndarray:
    """Fit the sets of ``users`` (indices into ``collection``) to exactly ``set_size`` items.

    Vectorised form of docs/protocol.md section 2 (see the module docstring): returns an
    (len(users), set_size) int64 array of sorted rows over a domain of
    ``collection.item_count + set_size`` items.
    """
    s = require_int("set size", set_size, 1)
    d = collection.item_count
    users = np.asarray(users, dtype=np.int64)
    n = users.size
    starts = collection.indptr[users]
    lengths = collection.indptr[users + 1] - starts
    total = int(lengths.sum())
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if n else np.zeros(0, np.int64)
    owner = np.repeat(np.arange(n, dtype=np.int64), lengths)
    within = np.arange(total, dtype=np.int64) - np.repeat(offsets, lengths)
    gathered = collection.items[np.repeat(starts, lengths) + within]

    # Uniform s-subset of a larger set: order each user's items by random keys, keep s.
    order = np.lexsort((rng.random(total), owner))
    rank = within  # after sorting by owner, the position inside the owner's block
    keep = rank < s
    out = np.empty((n, s), dtype=np.int64)
    out[owner[keep], rank[keep]] = gathered[order][keep]

    # Padding: a uniformly random ordering of the s padding ids per user fills the rest.
    kept = np.minimum(lengths, s)
    pad_order = np.argsort(rng.random((n, s)), axis=1)
    columns = np.arange(s)[None, :]
    source = columns - kept[:, None]
    needs = source >= 0
    padding = d + np.take_along_axis(pad_order, np.clip(source, 0, None), axis=1)
    out[needs] = padding[needs]
    out.sort(axis=1)
    return out


class DatasetSource(Protocol):
    """Something that draws a population of n users holding s items each."""

    name: str

    def draw(self, n: int, set_size: int, rng: np.random.Generator) -> Population: ...


@dataclass(frozen=True)
class CollectionSource:
    """n users sampled without replacement from a collection, fitted to s items (padded)."""

    name: str
    collection: SetCollection

    def draw(self, n: int, set_size: int, rng: np.random.Generator) -> Population:
        n = require_int("number of users", n, 1)
        if n > self.collection.n_users:
            raise ValueError(f"{self.name} has {self.collection.n_users} users, cannot sample "
                             f"{n} without replacement")
        users = np.sort(rng.choice(self.collection.n_users, size=n, replace=False))
        items = fit_population(self.collection, users, set_size, rng)
        d = self.collection.item_count
        return Population(items=items, item_count=d, domain_size=d + set_size)


@dataclass(frozen=True)
class SyntheticSource:
    """The paper's synthetic data: s distinct items uniform over T items per user."""

    name: str
    item_count: int = 128

    def draw(self, n: int, set_size: int, rng: np.random.Generator) -> Population:
        n = require_int("number of users", n, 1)
        s = require_int("set size", set_size, 1)
        t = self.item_count
        if s > t:
            raise ValueError(f"set size ({s}) must not exceed the number of items ({t})")
        items = np.empty((n, s), dtype=np.int64)
        chunk = max(1, 2_000_000 // t)  # bounded memory for the (users, T) key matrix
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            keys = rng.random((hi - lo, t))
            items[lo:hi] = np.argpartition(keys, s - 1, axis=1)[:, :s]
        items.sort(axis=1)
        return Population(items=items, item_count=t, domain_size=t)


def synthetic_source(item_count: int = 128) -> SyntheticSource:
    return SyntheticSource(name=f"synthetic-T{item_count}", item_count=item_count)

"""The shuffle itself: the release order of a round, decided by a secret key, never stored.

docs/protocol.md section 1 requires the shuffler to release each round as one uniformly
random permutation of its messages.  Each stored message has a row key r_i, 128 bits from
the CSPRNG drawn when it arrives and independent of everything else.  The release order
sorts the messages by

    t_i = AES-128(K_order, r_i)

with K_order the round's order key (:mod:`.vault`).  Distinct row keys give distinct
tags (AES is a permutation of 128-bit blocks), so the order is a total order.  If the
tags were independent uniform draws, sorting by them would give every one of the n!
orderings with the same probability; AES under a secret key is a pseudorandom
permutation, so the released order is computationally indistinguishable from a
uniform one, exactly as a permutation drawn from the operating system's CSPRNG is.

What this buys over a stored permutation: the order exists only in memory and can be
recomputed after a crash (so forwarding resumes with byte-identical chunks), yet
nothing on disk ties a row, or the moment a user submitted it, to its position in the
batch; once the round key is destroyed nobody can recompute it.

:func:`release_order` is the definition; a release applies it to a stream in bounded
memory through :mod:`.shuffled_stream`, which sorts by the same tags.
"""

from __future__ import annotations

import numpy as np

from .vault import RoundKey


def tag_order(tags: bytes) -> np.ndarray:
    """Indices of the concatenated 16-byte ``tags`` in ascending order (as 128-bit
    big-endian numbers).

    Tags are pseudorandom, so their high 64 bits almost surely differ (two of a round
    share them with probability about n^2 / 2^65) and decide the order alone: one sort
    of those, half the work of sorting by both halves, which is done only when two
    high halves are equal."""
    pairs = np.frombuffer(tags, dtype=">u8").reshape(-1, 2)
    high = pairs[:, 0].astype(np.uint64)
    order = np.argsort(high)
    ordered = high[order]
    if np.all(ordered[1:] != ordered[:-1]):
        return order
    return np.lexsort((pairs[:, 1], pairs[:, 0]))


def release_order(key: RoundKey, row_keys: bytes) -> np.ndarray:
    """Indices of the concatenated 16-byte ``row_keys`` in release order (ascending tag)."""
    return tag_order(key.order_tags(row_keys))

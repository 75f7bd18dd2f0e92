"""The shuffle itself: a uniformly random permutation from the operating system's CSPRNG.

docs/protocol.md section 1 requires the shuffler to release each round "as one uniformly
random permutation".  We use the Fisher-Yates (Durstenfeld) shuffle:
for i = n-1 down to 1, swap element i with element j drawn uniformly from
{0, ..., i}.  Each of the n! orderings arises from exactly one sequence of
draws, so with exactly uniform draws the permutation is exactly uniform.

The draws come from :func:`secrets.randbelow` (``os.urandom`` underneath, with
rejection sampling, so no modulo bias).  A seeded generator such as numpy's
PCG64 must never be used here: anyone who learns or guesses the seed could undo
the shuffle and re-link messages to the arrival order.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

RandBelow = Callable[[int], int]


def random_permutation(n: int, randbelow: RandBelow = secrets.randbelow) -> list[int]:
    """A uniformly random permutation of ``range(n)`` (Fisher-Yates).

    ``randbelow(k)`` must return an integer uniform on ``{0, ..., k-1}``; the
    default is the CSPRNG.  Injecting it is for tests only.
    """
    if n < 0:
        raise ValueError(f"permutation size must be >= 0, got {n}")
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = randbelow(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def shuffled(items: Sequence[T], randbelow: RandBelow = secrets.randbelow) -> list[T]:
    """A new list holding ``items`` in a uniformly random order."""
    return [items[i] for i in random_permutation(len(items), randbelow)]

"""Where a client's randomizers get their randomness: one small interface, no numpy.

The randomizers of :mod:`segshuffle.core.randomizers` draw only two things: a uniform
real in [0, 1) (a Bernoulli trial is ``random() < p``) and a uniform integer below a
bound (an item, a padding id, a randomized-response answer).  :class:`RandomSource`
names those two draws, so the same randomizers run

- in a deployed client on the operating system's CSPRNG (:func:`system_source`, the
  default everywhere a caller passes nothing): a server that saw one user's draws
  learns nothing about the next ones;
- in simulations and tests on a seeded :class:`random.Random` or a seeded numpy
  ``Generator`` (reproducible); numpy is never imported here, a generator is used
  through its own ``random()`` and ``integers()`` methods.

:func:`as_source` turns any of those into a :class:`RandomSource`.
"""

from __future__ import annotations

import random as _random
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class RandomSource(Protocol):
    """The two draws the randomizers need."""

    def random(self) -> float:
        """A uniform real in [0, 1)."""
        ...

    def below(self, bound: int) -> int:
        """A uniform integer in [0, bound), bound >= 1."""
        ...


class StdlibSource:
    """A :class:`RandomSource` over a :class:`random.Random` (or ``random.SystemRandom``)."""

    __slots__ = ("_generator",)

    def __init__(self, generator: _random.Random) -> None:
        self._generator = generator

    def random(self) -> float:
        return self._generator.random()

    def below(self, bound: int) -> int:
        return self._generator.randrange(bound)


class GeneratorSource:
    """A :class:`RandomSource` over a numpy ``Generator`` (duck-typed: numpy is not imported)."""

    __slots__ = ("_generator",)

    def __init__(self, generator: Any) -> None:
        self._generator = generator

    def random(self) -> float:
        return float(self._generator.random())

    def below(self, bound: int) -> int:
        return int(self._generator.integers(0, bound))


def system_source() -> RandomSource:
    """The operating system's CSPRNG (``os.urandom`` through :class:`random.SystemRandom`)."""
    return StdlibSource(_random.SystemRandom())


def as_source(rng: object = None) -> RandomSource:
    """``rng`` as a :class:`RandomSource`.

    ``None`` is the operating system's CSPRNG; a :class:`RandomSource` is used as it is;
    a :class:`random.Random` and a numpy ``Generator`` (anything with ``random()`` and
    ``integers()``) are wrapped.  Anything else is a :class:`TypeError`.
    """
    if rng is None:
        return system_source()
    if isinstance(rng, StdlibSource | GeneratorSource):
        return rng
    if isinstance(rng, _random.Random):
        return StdlibSource(rng)
    if callable(getattr(rng, "integers", None)) and callable(getattr(rng, "random", None)):
        return GeneratorSource(rng)
    if isinstance(rng, RandomSource):
        return rng
    raise TypeError(
        "rng must be None (the system CSPRNG), a random.Random, a numpy Generator or an "
        f"object with random() and below(bound); got {type(rng).__name__}")

"""Argument checks shared by the library and the command line.

Every check raises :class:`ValueError` with a message that names the offending
argument, so the CLI can print it unchanged as its one error line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from itertools import pairwise
from typing import TypeVar

from . import rules

Choice = TypeVar("Choice", bound=StrEnum)


def parse_choice(name: str, choices: type[Choice], value: str | Choice) -> Choice:
    """The member of ``choices`` named by ``value``; ValueError naming the choices otherwise."""
    try:
        return choices(value)
    except ValueError:
        names = ", ".join(member.value for member in choices)
        raise ValueError(f"{name} must be one of {names}, got {value!r}") from None


def require_finite(name: str, value: float) -> float:
    """Return ``value`` as a float, or raise if it is not a finite real number."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return number


def require_probability_open(name: str, value: float) -> float:
    """A number strictly between 0 and 1 (a DP failure probability delta)."""
    number = require_finite(name, value)
    if not 0.0 < number < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return number


def require_unit_interval(name: str, value: float) -> float:
    """A number in the closed interval [0, 1]."""
    number = require_finite(name, value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return number


def require_tolerance(name: str, value: float) -> float:
    """A dropout tolerance: a number in [0, 1)."""
    number = require_finite(name, value)
    if not 0.0 <= number < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return number


def require_positive(name: str, value: float) -> float:
    number = require_finite(name, value)
    if number <= 0.0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return number


def require_non_negative(name: str, value: float) -> float:
    number = require_finite(name, value)
    if number < 0.0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return number


def require_int(name: str, value: object, minimum: int) -> int:
    """An integer (bools and non-integral floats are refused) of at least ``minimum``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{name} must be an integer, got {value!r}")
        value = int(value)
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return number


def require_level(name: str, level: float) -> float:
    """One privacy level: a finite epsilon in [MIN_LEVEL, MAX_LEVEL]."""
    value = require_finite(name, level)
    if not rules.MIN_LEVEL <= value <= rules.MAX_LEVEL:
        raise ValueError(f"{name} must be in [{rules.MIN_LEVEL:g}, {rules.MAX_LEVEL:g}], "
                         f"got {level!r}")
    return value


def require_levels(levels: Sequence[float]) -> list[float]:
    """Privacy levels E_1 < ... < E_K, each in [MIN_LEVEL, MAX_LEVEL], K <= MAX_LEVELS."""
    values = [require_level("every privacy level", e) for e in levels]
    if not values:
        raise ValueError("levels must list at least one privacy level")
    if len(values) > rules.MAX_LEVELS:
        raise ValueError(f"at most {rules.MAX_LEVELS} privacy levels, got {len(values)}")
    for previous, current in pairwise(values):
        if current <= previous:
            raise ValueError(
                f"levels must be strictly increasing, got {previous!r} before {current!r}"
            )
    return values


def require_shares(shares: Sequence[float], count: int) -> list[float]:
    """Level shares: ``count`` non-negative numbers summing to 1 (to within 1e-6)."""
    values = [require_non_negative("every share", f) for f in shares]
    if len(values) != count:
        raise ValueError(f"shares must have one entry per level ({count}), got {len(values)}")
    total = math.fsum(values)
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"shares must sum to 1, got {total:.6g}")
    return values


def require_level_counts(counts: Sequence[float], count: int) -> list[float]:
    """Per-level user counts (possibly fractional estimates), non-negative, one per level."""
    values = [require_non_negative("every level count", c) for c in counts]
    if len(values) != count:
        raise ValueError(
            f"level counts must have one entry per level ({count}), got {len(values)}"
        )
    return values


def require_users(name: str, users: object, minimum: int = 1) -> int:
    """A user count: an integer in [minimum, MAX_USERS]."""
    if isinstance(users, float) and math.isfinite(users) and users > rules.MAX_USERS:
        raise ValueError(f"{name} must be at most {rules.MAX_USERS:.0e}, got {users!r}")
    n = require_int(name, users, minimum)
    if n > rules.MAX_USERS:
        raise ValueError(f"{name} must be at most {rules.MAX_USERS:.0e}, got {users!r}")
    return n


def require_delta(delta: float) -> float:
    """A target delta in [ACCOUNTANT_MIN_DELTA, 1) (a campaign's MIN_DELTA, less the
    publication headroom the server's optimizer certifies below it)."""
    value = require_probability_open("delta", delta)
    if value < rules.ACCOUNTANT_MIN_DELTA:
        raise ValueError(f"delta must be at least {rules.MIN_DELTA:g}, got {delta!r}")
    return value


def require_domain(domain_size: object, set_size: object) -> tuple[int, int]:
    """Domain size 2 <= d <= MAX_DOMAIN_SIZE and set size 1 <= s <= min(d, MAX_SET_SIZE)."""
    d = require_int("domain size", domain_size, 2)
    s = require_int("set size", set_size, 1)
    if d > rules.MAX_DOMAIN_SIZE:
        raise ValueError(f"domain size must be at most {rules.MAX_DOMAIN_SIZE}, got {d}")
    if s > rules.MAX_SET_SIZE:
        raise ValueError(f"set size must be at most {rules.MAX_SET_SIZE}, got {s}")
    if s > d:
        raise ValueError(f"set size ({s}) must not exceed the domain size ({d})")
    return d, s

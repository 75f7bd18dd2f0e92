"""Argument checks of the numpy-free accountant: each raises an AccountantError naming the argument.

This package is the numpy-free port of the client's privacy accountant, used by light client
installs (no numpy, no scipy) to verify a server's privacy parameters;
``tests/test_portable_accountant*.py`` keep it equal to the JavaScript and numpy accountants.

The checks are those of the JavaScript accountant (``clients/web/src/accountant/validation.js``):
a number must be a real number, not a string and not a bool (``segshuffle.core.validation``
converts strings, the JavaScript accountant refuses them, and so does this one).  The messages
are those of :mod:`segshuffle.core.validation`, and :class:`AccountantError` is a
:class:`ValueError`, so a caller that catches the numpy accountant's errors catches these too.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from ..errors import AccountantError
from ..rules import MAX_DOMAIN_SIZE, MAX_SET_SIZE, MAX_USERS

__all__ = [
    "require_domain",
    "require_finite",
    "require_int",
    "require_non_negative",
    "require_unit_interval",
    "require_users",
]


def _is_number(value: object) -> bool:
    """A real number: int, float (numpy scalars included), never a bool or a string."""
    return isinstance(value, Real) and not isinstance(value, bool)


def _as_float(value: Real) -> float:
    """``value`` as a float, +-inf beyond the float range (as a JavaScript number)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def require_finite(name: str, value: object) -> float:
    """A finite number, as a float (anything else, strings included, is refused)."""
    if not _is_number(value):
        raise AccountantError(f"{name} must be a number, got {value!r}")
    number = _as_float(value)  # type: ignore[arg-type]
    if not math.isfinite(number):
        raise AccountantError(f"{name} must be finite, got {value!r}")
    return number


def require_unit_interval(name: str, value: object) -> float:
    """A number in the closed interval [0, 1]."""
    number = require_finite(name, value)
    if not 0.0 <= number <= 1.0:
        raise AccountantError(f"{name} must be in [0, 1], got {value!r}")
    return number


def require_non_negative(name: str, value: object) -> float:
    """A finite number >= 0."""
    number = require_finite(name, value)
    if number < 0.0:
        raise AccountantError(f"{name} must be >= 0, got {value!r}")
    return number


def require_int(name: str, value: object, minimum: int) -> int:
    """An integer of at least ``minimum``: an int, or a float with no fractional part.

    Bools, strings and non-integral or non-finite floats are refused.
    """
    if isinstance(value, Integral) and not isinstance(value, bool):
        number = int(value)
    elif _is_number(value) and _as_float(value).is_integer():  # type: ignore[arg-type]
        number = int(_as_float(value))  # type: ignore[arg-type]
    else:
        raise AccountantError(f"{name} must be an integer, got {value!r}")
    if number < minimum:
        raise AccountantError(f"{name} must be >= {minimum}, got {value!r}")
    return number


def require_users(name: str, users: object, minimum: int = 1) -> int:
    """A user count: an integer in [minimum, MAX_USERS]."""
    if (_is_number(users) and math.isfinite(_as_float(users))  # type: ignore[arg-type]
            and users > MAX_USERS):  # type: ignore[operator]
        raise AccountantError(f"{name} must be at most {MAX_USERS:.0e}, got {users!r}")
    n = require_int(name, users, minimum)
    if n > MAX_USERS:
        raise AccountantError(f"{name} must be at most {MAX_USERS:.0e}, got {users!r}")
    return n


def require_domain(domain_size: object, set_size: object) -> tuple[int, int]:
    """Domain size 2 <= d <= MAX_DOMAIN_SIZE and set size 1 <= s <= min(d, MAX_SET_SIZE)."""
    d = require_int("domain size", domain_size, 2)
    s = require_int("set size", set_size, 1)
    if d > MAX_DOMAIN_SIZE:
        raise AccountantError(f"domain size must be at most {MAX_DOMAIN_SIZE}, got {d}")
    if s > MAX_SET_SIZE:
        raise AccountantError(f"set size must be at most {MAX_SET_SIZE}, got {s}")
    if s > d:
        raise AccountantError(f"set size ({s}) must not exceed the domain size ({d})")
    return d, s

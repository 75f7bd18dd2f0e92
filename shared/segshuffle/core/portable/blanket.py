"""The two blanket modes and the slot geometry the numpy-free accountant needs.

This module belongs to the numpy-free port of the client's privacy accountant, used by light
client installs (no numpy, no scipy) to verify a server's privacy parameters;
``tests/test_portable_accountant*.py`` keep it equal to the JavaScript and numpy accountants.

``slots`` (the paper's random-number blanket): each user fills c = ceil(m) slots, each
carrying, with probability gamma = m / c, an item uniform over the d items of the privacy
domain, and a null otherwise.  ``independent``: each user sends, for each of the d items
independently, one blanket message with probability m / d (so m <= d).

The modes and the slot geometry are those of :mod:`segshuffle.core.blanket` (numpy-free); the
checks here raise :class:`AccountantError` (a ValueError) instead of a bare ValueError.
"""

from __future__ import annotations

from .. import blanket as _blanket
from ..blanket import BlanketMode
from ..errors import AccountantError
from ..rules import MAX_BLANKET_RATE
from .validation import require_non_negative

__all__ = [
    "BlanketMode",
    "blanket_probability",
    "blanket_slots",
    "parse_mode",
    "require_blanket_rate",
]


def parse_mode(mode: object) -> BlanketMode:
    """The :class:`BlanketMode` named by ``mode``; an AccountantError naming the choices else."""
    try:
        return _blanket.parse_mode(mode)  # type: ignore[arg-type]
    except ValueError as error:
        raise AccountantError(str(error)) from None


def require_blanket_rate(m: object, domain_size: int, mode: object) -> float:
    """0 <= m <= MAX_BLANKET_RATE, and m <= d in the independent mode (a rate per item <= 1)."""
    rate = require_non_negative("blanket rate m", m)
    if rate > MAX_BLANKET_RATE:
        raise AccountantError(
            f"blanket rate m must be at most {MAX_BLANKET_RATE:g}, got {rate!r}")
    if parse_mode(mode) is BlanketMode.INDEPENDENT and rate > domain_size:
        raise AccountantError(
            f"blanket rate m must be at most the privacy domain size {domain_size} in the "
            f"independent mode, got {rate!r}")
    return rate


def blanket_slots(m: float) -> int:
    """Slots a user fills in the slots mode: ceil(m), 0 when m = 0."""
    try:
        return _blanket.blanket_slots(m, 1, BlanketMode.SLOTS)
    except ValueError as error:
        raise AccountantError(str(error)) from None


def blanket_probability(m: float) -> float:
    """gamma = m / ceil(m): the chance that one slot carries a message (0 when m = 0)."""
    try:
        return _blanket.slot_probability(m, 1, BlanketMode.SLOTS)
    except ValueError as error:
        raise AccountantError(str(error)) from None

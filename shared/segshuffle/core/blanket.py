"""The two blanket modes and the message geometry every party must agree on.

A campaign fixes one of two ways for users to send blanket (noise) messages at
rate m (the expected number of blanket messages per user):

``slots`` (the paper's random-number blanket)
    Each user fills c = ceil(m) slots; each slot independently carries, with
    probability gamma = m / c, an item drawn uniformly from the d items of the
    privacy domain, and is null otherwise.  One slot lands on a given item with
    probability r = gamma / d.  Fixed-size submissions carry s + c ciphertexts.

``independent`` (per-item Bernoulli blanket, exact accounting)
    For each of the d items independently, each user sends one blanket message
    for that item with probability m / d (so m <= d).  Blanket counts are then
    independent Binomial(users, m / d) across items, which is what makes the
    user-level accounting an exact composition of item pairs (see
    :mod:`segshuffle.core.accounting`).  Fixed-size submissions carry s + d
    ciphertexts.

Both modes put m / d blanket messages per user on every item in expectation, so
the estimator's blanket correction n m / d is the same; the variances differ
(:func:`blanket_item_variance`).
"""

from __future__ import annotations

import math
from enum import StrEnum

from .rules import MAX_BLANKET_RATE, MAX_MESSAGES_PER_USER
from .validation import parse_choice, require_int, require_non_negative


class BlanketMode(StrEnum):
    """How users send their blanket messages (module docstring)."""

    SLOTS = "slots"
    INDEPENDENT = "independent"


def parse_mode(mode: str | BlanketMode) -> BlanketMode:
    """The :class:`BlanketMode` named by ``mode``; ValueError naming the choices otherwise."""
    return parse_choice("blanket mode", BlanketMode, mode)


def require_blanket_rate(m: float, domain_size: int, mode: str | BlanketMode) -> float:
    """0 <= m <= MAX_BLANKET_RATE, and m <= d in the independent mode (a rate per item <= 1)."""
    mode = parse_mode(mode)
    m = require_non_negative("blanket rate m", m)
    if m > MAX_BLANKET_RATE:
        raise ValueError(f"blanket rate m must be at most {MAX_BLANKET_RATE:g}, got {m!r}")
    if mode is BlanketMode.INDEPENDENT and m > domain_size:
        raise ValueError(
            f"blanket rate m must be at most the privacy domain size {domain_size} in the "
            f"independent mode, got {m!r}")
    return m


def blanket_slots(m: float, domain_size: int, mode: str | BlanketMode) -> int:
    """Blanket ciphertexts per fixed-size submission: ceil(m) slots, or d in the independent mode.

    In the independent mode a user with m = 0 sends no blanket at all (0 slots).
    """
    mode = parse_mode(mode)
    m = require_blanket_rate(m, domain_size, mode)
    if m == 0.0:
        return 0
    if mode is BlanketMode.SLOTS:
        return math.ceil(m)
    return require_int("domain size", domain_size, 1)


def messages_per_user(set_size: int, m: float, domain_size: int,
                      mode: str | BlanketMode) -> int:
    """Data ciphertexts in one fixed-size round-2 submission: s + blanket slots.

    Refused (ValueError) above MAX_MESSAGES_PER_USER.
    """
    count = require_int("set size", set_size, 1) + blanket_slots(m, domain_size, mode)
    if count > MAX_MESSAGES_PER_USER:
        raise ValueError(f"{count} messages per user exceed the cap of {MAX_MESSAGES_PER_USER} "
                         f"({parse_mode(mode).value} blanket, m = {m:g}, d = {domain_size})")
    return count


def slot_probability(m: float, domain_size: int, mode: str | BlanketMode) -> float:
    """The chance that one blanket slot carries a message: m / ceil(m), or m / d."""
    slots = blanket_slots(m, domain_size, mode)
    return 0.0 if slots == 0 else m / slots


def blanket_item_variance(users: float, m: float, domain_size: int,
                          mode: str | BlanketMode) -> float:
    """Variance of the blanket count on one item over ``users`` users.

    Slots mode: users c (gamma / d)(1 - gamma / d); independent mode:
    users (m / d)(1 - m / d).
    """
    mode = parse_mode(mode)
    slots = blanket_slots(m, domain_size, mode)
    if slots == 0:
        return 0.0
    if mode is BlanketMode.SLOTS:
        per_slot = (m / slots) / domain_size
        return users * slots * per_slot * (1.0 - per_slot)
    per_item = m / domain_size
    return users * per_item * (1.0 - per_item)

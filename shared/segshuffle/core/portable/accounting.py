"""The numpy-free client accountant's entry points: the server's bound, checked on lists.

A light client install (no numpy, no scipy) verifies a server's privacy parameters with
:func:`user_delta`, an upper bound on its user-level delta over the server's full view, and
refuses them early with :func:`refuting_delta`.  Both validate their arguments as the web
client's JavaScript accountant does (:class:`~segshuffle.core.errors.AccountantError`, a
ValueError, naming the argument) and then run the one implementation of the bound,
:mod:`segshuffle.core.user_bound` (the smallest of the slot blanket's bounds, or the
independent blanket's composition; its docstring has the proofs), on the standard-library
array backend.  ``tests/test_portable_accountant*.py`` hold it equal to the numpy run and to
the JavaScript accountant on the test vectors.
"""

from __future__ import annotations

from .. import arrays
from ..errors import AccountantError
from ..privacy_loss import DEFAULT_STEP
from ..rules import MAX_LEVEL
from ..slot_joint import joint_view
from ..user_bound import (
    ACCOUNTED_BLANKET_PER_ITEM,
    CERTIFIED_ABSOLUTE_MARGIN,
    CERTIFIED_RELATIVE_MARGIN,
    DEFAULT_DELTA,
    POISSON_SLACK_SHARE,
    blanket_geometry,
    certified_user_delta,
    refuted_delta,
    slot_bound,
)
from .blanket import BlanketMode, parse_mode, require_blanket_rate
from .validation import require_domain, require_finite, require_unit_interval, require_users

__all__ = [
    "ACCOUNTED_BLANKET_PER_ITEM",
    "CERTIFIED_ABSOLUTE_MARGIN",
    "CERTIFIED_RELATIVE_MARGIN",
    "POISSON_SLACK_SHARE",
    "blanket_geometry",
    "joint_view",
    "refuting_delta",
    "slot_bound",
    "user_delta",
]


def _arguments(level: float, lam: float, set_size: int, users: int, m: float,
               domain_size: int, mode: str | BlanketMode, delta: float | None
               ) -> tuple[BlanketMode, float, float, int, int, int, float, float]:
    """The validated (mode, E, lambda, h, d, s, m, delta) of a call (:func:`user_delta`)."""
    blanket_mode = parse_mode(mode)
    eps = require_finite("privacy level", level)
    if not 0.0 <= eps <= MAX_LEVEL:
        raise AccountantError(f"privacy level must be in [0, {MAX_LEVEL:g}], got {level!r}")
    lam = require_unit_interval("lambda", lam)
    h = require_users("users", users)
    d, s = require_domain(domain_size, set_size)
    rate = require_blanket_rate(m, d, blanket_mode)
    target = DEFAULT_DELTA
    if delta is not None:
        target = require_finite("delta", delta)
        # A budget of zero or less admits no Poisson comparison at all.
        if not target > 0.0:
            raise AccountantError(f"delta must be > 0, got {delta!r}")
    return blanket_mode, eps, lam, h, d, s, rate, target


@arrays.on_python
def refuting_delta(level: float, lam: float, set_size: int, users: int, m: float,
                   domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
                   delta: float) -> float | None:
    """A certified lower bound on delta_user(E = ``level``) when it exceeds ``delta``; else None.

    The exhibited pair of datasets of :func:`segshuffle.core.user_bound.refuted_delta` (its
    docstring has the proof).  None in the independent mode, where s > d - 2, or for a
    blanket too large to sum.
    """
    blanket_mode, eps, lam, h, d, s, rate, target = _arguments(
        level, lam, set_size, users, m, domain_size, mode, delta)
    return refuted_delta(eps, lam, s, h, rate, d, slots=blanket_mode is BlanketMode.SLOTS,
                         delta=target)


@arrays.on_python
def user_delta(level: float, lam: float, set_size: int, users: int, m: float,
               domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
               delta: float | None = None, enough: float = 0.0) -> float:
    """An upper bound on the user-level delta at E = ``level`` of the server's full view.

    For a user sending each of its ``set_size`` items with rate ``lam`` among ``users``
    honest users with blanket rate ``m`` over a privacy domain of ``domain_size`` items:
    level E in [0, 30], lam in [0, 1], s in 1..min(d, 64), h in 1..1e12, m in 0..1024 (at
    most d in the independent mode), d in 2..1e6.  ``mode`` is the campaign's blanket mode;
    ``delta``, the target the caller compares against, sets the Poisson slack budget of the
    slot bound (POISSON_SLACK_SHARE delta; 1e-9 assumed when omitted).  ``enough``: a check
    of delta_user <= ``enough`` stops at the first slot bound that certifies it, so a value
    at or below ``enough`` may be a larger bound than the smallest one.

    Raises AccountantError (a ValueError) on an argument out of range.
    """
    blanket_mode, eps, lam, h, d, s, rate, target = _arguments(
        level, lam, set_size, users, m, domain_size, mode, delta)
    return certified_user_delta(eps, lam, s, h, rate, d,
                                slots=blanket_mode is BlanketMode.SLOTS, delta=target,
                                step=DEFAULT_STEP, enough=enough)

"""Protocol rules that the server, the shuffler and every client compute identically.

Each quantity here is decided by one party and checked by another, so each has
exactly one definition:

- **n_min**, the users below which the shuffler never releases round 2 (and whose
  blanket the accounting counts on when no fake users are tolerated):
  ceil((1 - tau) n), evaluated in exact rational arithmetic on tau's shortest
  round-trip decimal, the text it has in every JSON document (so tau = 0.45 of 100
  users is 55 and tau = 0.7 of 10 users is 3 everywhere, with no floating-point
  fudge that two implementations could choose differently);
- **h**, the honest users whose blanket the accounting counts on when a campaign
  tolerates a fraction f of fake or colluding participants (:func:`honest_users`):
  ceil((1 - f) n_min), exact in the same way on f's shortest decimal.  It is the
  count every accountant call receives; n_min stays the release threshold;
- the **default delta** of a campaign that leaves it unset: 0.01 / n for the round-1
  participant count n;
- what a client accepts by default, whatever the server chooses: a delta of at most
  CLIENT_DELTA_CEILING = 1e-3 and a campaign ``min_users`` of at least the shuffler's
  default floor, SHUFFLER_MIN_USERS = 10 (:data:`CLIENT_DELTA_CEILING`);
- the **default dropout tolerance**, 0.1, of campaigns and of every command that
  accounts for one;
- the **caps** on everything a campaign can make a client or a service compute or send.
  Inputs beyond them are refused with a ValueError naming the cap; below them every
  accounting call finishes in seconds.

Message geometry (blanket slots, messages per user) is in :mod:`segshuffle.core.blanket`.
This module imports nothing from the package, so every other module may import it.
"""

from __future__ import annotations

import math
from fractions import Fraction

#: Largest privacy level (user-level epsilon).  Beyond ~36 e^eps loses the precision the
#: divergence needs, and nobody needs more.
MAX_LEVEL = 30.0

#: Smallest privacy level: below it no deployable blanket protects a user at all.
MIN_LEVEL = 0.01

#: Most privacy levels in one campaign (fully personalised budgets are in scope).
MAX_LEVELS = 10_000

#: Most users one campaign accounts for.
MAX_USERS = 10**12

#: Largest privacy domain (items, padding included) and set size.
MAX_DOMAIN_SIZE = 1_000_000
MAX_SET_SIZE = 64

#: Largest blanket rate m: a level that needs more cannot be protected by this protocol.
MAX_BLANKET_RATE = 1024.0

#: Most data ciphertexts one user sends in round 2 (s + blanket slots).
MAX_MESSAGES_PER_USER = 4096

#: Smallest delta a campaign may target; the accountant's absolute rounding allowances
#: (FFT, ~1e-13 at the worst) must stay negligible against it.
MIN_DELTA = 1e-12

#: The server certifies every published lambda_k and epsilon_k at delta (1 -
#: PUBLICATION_HEADROOM), not at delta, and clients verify them at delta.  A client's
#: recomputation charges its rounding (the FFT's, measured from the transform it
#: computed) a little differently in another language: the JavaScript accountant's
#: values sit within 1e-6 relative of Python's at a million users (8.2e-7 at s = 8),
#: while the optimizer puts a level's delta_user within about 1e-7 of its target.
#: Without the headroom such a client would refuse honest parameters.  It costs a level
#: a relative 1e-5 of delta, nothing it could measure.
PUBLICATION_HEADROOM = 1e-5

#: Smallest delta the accountant computes with: a campaign's MIN_DELTA less the
#: publication headroom.
ACCOUNTANT_MIN_DELTA = MIN_DELTA * (1.0 - PUBLICATION_HEADROOM)

#: A campaign's default delta is DEFAULT_DELTA_FACTOR / n.
DEFAULT_DELTA_FACTOR = 0.01

#: The shuffler's default floor on participants per release (its ``min_users`` setting,
#: ``SEGSHUFFLE_SHUFFLER_MIN_USERS``), and the smallest campaign ``min_users`` a client
#: accepts unless its app sets another (``ClientPolicy.min_users``): a campaign below it
#: was not created against a shuffler with the default floor.
SHUFFLER_MIN_USERS = 10

#: The largest delta a client accepts unless its app sets another ceiling.  A fixed
#: number, so that nothing the server chooses moves it: neither the campaign's
#: ``min_users`` (a ceiling of 1 / min_users accepted delta = 0.4 from a campaign with
#: min_users = 2) nor the round-1 count it later claims.  It is the default delta rule,
#: 0.01 / n, at the shuffler's default floor of 10 users: every campaign that leaves
#: delta to the rule and meets that floor is accepted, and no campaign can ask a user
#: to accept more than a one-in-a-thousand chance that its (epsilon, delta) guarantee
#: fails.  Apps that expect more users should set a smaller ceiling.
CLIENT_DELTA_CEILING = DEFAULT_DELTA_FACTOR / SHUFFLER_MIN_USERS

#: The dropout tolerance tau of a campaign, and of ``optimize``, ``demo`` and the load
#: test, unless one is given: one default everywhere, so figures carry over.
DEFAULT_DROPOUT_TOLERANCE = 0.1

__all__ = [
    "ACCOUNTANT_MIN_DELTA",
    "CLIENT_DELTA_CEILING",
    "DEFAULT_DELTA_FACTOR",
    "DEFAULT_DROPOUT_TOLERANCE",
    "MAX_BLANKET_RATE",
    "MAX_DOMAIN_SIZE",
    "MAX_LEVEL",
    "MAX_LEVELS",
    "MAX_MESSAGES_PER_USER",
    "MAX_SET_SIZE",
    "MAX_USERS",
    "MIN_DELTA",
    "MIN_LEVEL",
    "PUBLICATION_HEADROOM",
    "SHUFFLER_MIN_USERS",
    "accounting_users",
    "default_delta",
    "honest_users",
]


def accounting_users(users: float, dropout_tolerance: float) -> int:
    """n_min = max(1, ceil((1 - tau) n)), exact in rational arithmetic (module docstring).

    ``users`` may be fractional (debiased level estimates).  Both numbers are taken
    at their shortest round-trip decimal (``repr``), as a JSON document writes them.
    """
    if not (math.isfinite(users) and users >= 0):
        raise ValueError(f"users must be a finite number >= 0, got {users!r}")
    if not (math.isfinite(dropout_tolerance) and 0.0 <= dropout_tolerance < 1.0):
        raise ValueError(f"dropout tolerance must be in [0, 1), got {dropout_tolerance!r}")
    exact = (1 - Fraction(repr(float(dropout_tolerance)))) * Fraction(repr(float(users)))
    return max(1, math.ceil(exact))


def honest_users(users: float, dropout_tolerance: float, fake_tolerance: float) -> int:
    """h = ceil((1 - f) n_min): the honest round-2 participants the accounting counts on.

    Round 2 is released only with n2 >= n_min = ceil((1 - tau) n) participants, and
    the campaign tolerates that at most floor(f n2) of them are fake or collude with
    the server (they send no blanket, or blanket the server can subtract).  The
    honest ones, the target user among them, number at least n2 - floor(f n2) =
    ceil((1 - f) n2), which never decreases as n2 grows (floor(f n2) rises by at
    most 1 per user since f < 1), so at least ceil((1 - f) n_min) >= 1 honest users
    contribute blanket.  That count enters the accountant exactly where n_min
    does without fakes: h = n_min at f = 0.  Evaluated in rational arithmetic on
    f's shortest round-trip decimal, like n_min (:func:`accounting_users`).
    """
    if not (math.isfinite(fake_tolerance) and 0.0 <= fake_tolerance < 1.0):
        raise ValueError(f"fake tolerance must be in [0, 1), got {fake_tolerance!r}")
    n_min = accounting_users(users, dropout_tolerance)
    exact = (1 - Fraction(repr(float(fake_tolerance)))) * n_min
    return max(1, math.ceil(exact))


def default_delta(users: float) -> float:
    """The delta of a campaign that leaves it unset: 0.01 / n (n round-1 participants)."""
    if not (math.isfinite(users) and users >= 1):
        raise ValueError(f"users must be at least 1, got {users!r}")
    return DEFAULT_DELTA_FACTOR / users


#: The largest correlation ratio R a campaign may guard against (odds a thousand times
#: higher among an item's holders); here, numpy-free, because the wire models check it.
MAX_CORRELATION_RATIO = 1000.0

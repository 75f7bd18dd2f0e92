"""The numpy-free privacy accountant: what a light client install verifies parameters with.

A client checks, before it sends anything, that the privacy parameters a server publishes
protect it: for its privacy level E and Poisson rate lambda, the upper bound
:func:`user_delta` on its user-level delta over the server's full view must not exceed the
campaign's delta.  The bound has one implementation, :mod:`segshuffle.core.user_bound` and
the modules of its bounds, written against the array backends of
:mod:`segshuffle.core.arrays`; the server runs it on numpy, and this package runs it on the
standard-library backend (lists, with that backend's special functions and FFT), so that
an install without numpy or scipy verifies the same bound.

Here are only the entry points: :mod:`.accounting` validates a client's arguments as the web
client's JavaScript accountant (``clients/web/src/accountant``) does, with :mod:`.validation`
and :mod:`.blanket` (their messages are the JavaScript's), then runs the bound on lists.
``tests/test_portable_accountant*.py`` keep it equal to the numpy run and to the JavaScript
accountant: within 1e-9 relative and 1e-13 absolute on every test vector of
``docs/test-vectors.json``.

Nothing here imports numpy or scipy, not even lazily, and neither does the bound on the
standard-library backend (the joint view's numpy lattice is imported only where numpy runs).
"""

from __future__ import annotations

from ..bounded_cache import clear_all_caches as clear_accountant_caches
from ..errors import AccountantError
from .accounting import (
    ACCOUNTED_BLANKET_PER_ITEM,
    CERTIFIED_ABSOLUTE_MARGIN,
    CERTIFIED_RELATIVE_MARGIN,
    POISSON_SLACK_SHARE,
    refuting_delta,
    user_delta,
)
from .blanket import BlanketMode

__all__ = [
    "ACCOUNTED_BLANKET_PER_ITEM",
    "CERTIFIED_ABSOLUTE_MARGIN",
    "CERTIFIED_RELATIVE_MARGIN",
    "POISSON_SLACK_SHARE",
    "AccountantError",
    "BlanketMode",
    "clear_accountant_caches",
    "refuting_delta",
    "user_delta",
]

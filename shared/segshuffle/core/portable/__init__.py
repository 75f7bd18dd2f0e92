"""The numpy-free privacy accountant: what a light client install verifies parameters with.

A client checks, before it sends anything, that the privacy parameters a server publishes
protect it: for its privacy level E and Poisson rate lambda, the upper bound
:func:`user_delta` on its user-level delta over the server's full view must not exceed the
campaign's delta.  :mod:`segshuffle.core.accounting` computes that bound with numpy and scipy;
this package computes the same bound in pure Python (the standard library, plus the numpy-free
:mod:`segshuffle.core.rules`, :mod:`segshuffle.core.validation` and
:mod:`segshuffle.core.blanket`), so that an install without numpy or scipy can verify it too.

It follows the web client's JavaScript accountant (``clients/web/src/accountant``), one
module per JavaScript module: :mod:`.accounting` (the bound and its branches),
:mod:`.slot_joint`, :mod:`.slot_groups` (the slot blanket's bounds),
:mod:`.multinomial_pair` (the group pair's loss distribution), :mod:`.validation` and
:mod:`.blanket`; its special functions and transforms are those of the standard-library
array backend (:mod:`segshuffle.core.arrays.python_distributions`,
:mod:`segshuffle.core.arrays.python_fft`).
The count pair, the one-item mixture, the Poisson comparison and the item pairs' loss
distributions are not here: their one implementations, :mod:`segshuffle.core.hockey_stick`,
:mod:`segshuffle.core.slot_single`, :mod:`segshuffle.core.poisson_comparison` and
:mod:`segshuffle.core.privacy_loss`, run on the standard-library backend of
:mod:`segshuffle.core.arrays` (:func:`user_delta` and :func:`refuting_delta` choose it), and
the memo tables and the error class are :mod:`segshuffle.core.bounded_cache` and
:mod:`segshuffle.core.errors`.  ``tests/test_portable_accountant*.py``
keep it equal to :mod:`segshuffle.core.accounting` and to the JavaScript accountant: within
1e-9 relative and 1e-13 absolute on every test vector of ``docs/test-vectors.json``.

Nothing here imports numpy or scipy, not even lazily, and neither does the count pair on
the standard-library backend.
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

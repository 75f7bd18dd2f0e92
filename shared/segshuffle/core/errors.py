"""The one error class of the privacy accountant's bounds.

Raised by the bounds that work with or without numpy (:mod:`segshuffle.core.arrays`) and by
the numpy-free accountant of :mod:`segshuffle.core.portable`; a :class:`ValueError`, so a
caller that catches the numpy accountant's errors catches these too.  Imports nothing.
"""

from __future__ import annotations

__all__ = ["AccountantError"]


class AccountantError(ValueError):
    """An argument outside what the accountant accepts, or a computation it cannot do faithfully.

    Raised where an argument is out of range (a privacy level, a rate outside [0, 1], a
    domain smaller than the set size, ...) and where a computation cannot be carried out
    faithfully.  The message names the offending argument and is fit to show as it is.
    """

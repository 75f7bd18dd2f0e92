"""The one error class of the numpy-free accountant.

This package is the numpy-free, scipy-free port of the JavaScript accountant
(``clients/web/src/accountant``), used by light client installs to verify a server's
privacy parameters; ``tests/test_portable_accountant*.py`` keep it equal to the
JavaScript and numpy accountants.
"""

from __future__ import annotations

__all__ = ["AccountantError"]


class AccountantError(ValueError):
    """An argument outside what the accountant accepts, or a computation it cannot do faithfully.

    Raised where an argument is out of range (a privacy level, a rate outside [0, 1], a
    domain smaller than the set size, ...) and where a computation cannot be carried out
    faithfully.  The message names the offending argument and is fit to show as it is.
    """

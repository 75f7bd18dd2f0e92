"""The CLI's own exception (its own module, so ``python -m segshuffle.cli.main`` and the
``segshuffle`` script catch the same class)."""

from __future__ import annotations


class CommandError(Exception):
    """A failure the user can act on; printed as one line, exit status 2."""

"""How a service's start ends when it is refused: one line on standard error and an exit
status, never a traceback.

- 2, bad input: settings that cannot be used, a directory that cannot hold the service's
  state (:mod:`.state_paths`), a port that cannot be bound, a database that is not the
  service's (:class:`.identity.DatabaseIdentityError`); every one a ``ValueError`` or
  that, naming what the operator gave.
- 1, a store or key the service was right to look at but cannot use: a damaged or newer
  database, one in use by another process (:class:`.database.UnusableDatabaseError`), and
  whatever else the caller names (the server's unreadable signing key).

``segshuffle serve`` and ``python -m segshuffle.services.server|shuffler`` all start
through :func:`run_or_refuse`, so they answer alike.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from .database import UnusableDatabaseError
from .identity import DatabaseIdentityError

BAD_INPUT = 2
UNUSABLE_STATE = 1


def run_or_refuse(program: str, start: Callable[[], int | None], *,
                  unusable: tuple[type[Exception], ...] = ()) -> int:
    """Run ``start`` (read the settings, serve until stopped) and return its exit status;
    a refusal (module docstring) is ``PROGRAM: error: MESSAGE`` on standard error and its
    status. ``unusable`` adds exception types that mean a store or key cannot be used."""
    try:
        return int(start() or 0)
    except (DatabaseIdentityError, ValueError) as exc:
        return _refused(program, exc, BAD_INPUT)
    except (UnusableDatabaseError, *unusable) as exc:
        return _refused(program, exc, UNUSABLE_STATE)


def _refused(program: str, exc: Exception, status: int) -> int:
    sys.stderr.write(f"{program}: error: {exc}\n")
    sys.stderr.flush()
    return status

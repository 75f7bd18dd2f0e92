"""Verdicts on public documents, shared by the users of one process.

A campaign's view and key config are the same bytes for every user, and a user's checks
of them (:func:`~segshuffle.client.verify.verify_campaign`, and
:func:`~segshuffle.client.verify.verify_parameters` for its level) are pure functions
of those bytes and of the user's own settings: the configuration hash alone is a
canonical-JSON serialisation of the whole configuration, and thousands of simulated
users of one process (:mod:`segshuffle.testing.population`) would recompute it each.

:class:`Verdicts` remembers the *successful* outcome of such a check under a key that
holds the SHA-256 of the exact bytes checked (:class:`~segshuffle.client.session.Received`)
and every other input of the check (campaign id, level, pins, policy).  Different
bytes or different settings are a different key, hence a full check; a refusal is
never remembered, so a refused document is checked again (and refused again) each
time.  Signatures, pins against the user's own round-1 state and everything else that
differs between users are still checked per user by the session.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

MAX_VERDICTS = 256
"""Entries kept (the oldest out first): a few per campaign, level and policy."""

_MISSING = object()


class Verdicts:
    """A bounded memo of successful checks (module docstring); safe across threads."""

    def __init__(self, maxsize: int = MAX_VERDICTS) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._entries: dict[Hashable, object] = {}
        self._lock = threading.Lock()

    def settle(self, key: Hashable, check: Callable[[], T]) -> T:
        """What ``check()`` returned for ``key`` before, else ``check()``, remembered if
        it returns (an exception propagates and nothing is stored).

        ``key`` must determine the outcome of ``check``: a digest of the exact bytes
        checked and every other argument the check reads.
        """
        outcome = self._entries.get(key, _MISSING)  # one dict read: atomic, no lock
        if outcome is not _MISSING:
            return outcome  # type: ignore[return-value]
        outcome = check()  # outside the lock: a check may be slow, a race only repeats it
        with self._lock:
            while len(self._entries) >= self.maxsize:
                del self._entries[next(iter(self._entries))]  # the oldest
            self._entries[key] = outcome
        return outcome  # type: ignore[return-value]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


VERDICTS = Verdicts()
"""The process's memo, used by every :class:`~segshuffle.client.session.UserSession`."""

"""How the SDK and the operator tools retry a request that failed transiently.

Standard library only, so that light tools (``segshuffle admin``) can use it without the
protocol's numerical stack.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

MAX_RETRY_AFTER_SECONDS = 3600
"""The longest ``Retry-After`` taken from a service (a larger value is cut to this)."""


def retry_after_seconds(value: str | None) -> float | None:
    """The delay of a ``Retry-After`` header in delay-seconds form (RFC 9110, section
    10.2.3: one to a few digits), at most :data:`MAX_RETRY_AFTER_SECONDS`; ``None`` for no
    header or another form (an HTTP date is not trusted across two clocks)."""
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 10):
        return None
    return float(min(int(text), MAX_RETRY_AFTER_SECONDS))


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of transient failures: ``attempts`` tries, exponential backoff with jitter.

    The wait before try k + 1 (k counting from 0) is uniform in [d_k / 2, d_k] with
    d_k = min(maximum, initial * 2^k), or the service's ``Retry-After`` where that is
    longer (a rate limit says when a token is free again), at most ``max_retry_after``.
    No wait is begun that would take the waits of one request past ``budget`` seconds:
    a request then fails with the last answer instead.
    """

    attempts: int = 6
    initial: float = 0.2
    maximum: float = 5.0
    max_retry_after: float = 60.0
    budget: float = 120.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial < 0 or self.maximum < self.initial:
            raise ValueError("retry policy needs attempts >= 1 and 0 <= initial <= maximum")
        if self.max_retry_after < 0 or self.budget < 0:
            raise ValueError("retry policy needs max_retry_after >= 0 and budget >= 0")

    def delay(self, attempt: int) -> float:
        """Wait before try ``attempt + 1`` (attempt counts from 0): full jitter in [d/2, d]."""
        ceiling = min(self.maximum, self.initial * 2.0**attempt)
        return ceiling * (0.5 + 0.5 * random.random())

    def wait(self, attempt: int, retry_after: float | None, waited: float) -> float | None:
        """The wait before try ``attempt + 1``, or None when no further try is due.

        ``retry_after`` is the failed answer's ``Retry-After`` (None: none), ``waited``
        what this request has waited so far.
        """
        if attempt + 1 >= self.attempts:
            return None
        wait = self.delay(attempt)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_retry_after))
        if waited + wait > self.budget:
            return None
        return wait


DEFAULT_WAIT_BUDGET = 120.0
"""Seconds a client keeps at a step that only takes time (``wait_budget``): a submission
whose answer was lost (it resends it with the same token until the shuffler's answer tells
whether it is stored), and the wait for the round-2 parameters (not published yet, round 1
not acknowledged as released yet, a service answering 5xx or not at all).  A service
restarted on a busy two-core host took 40 to 70 s to answer again; 120 s covers that with
room to spare."""

_MAX_DOUBLINGS = 30
"""Backoff exponents stop growing here (2^30 times the first delay is past any ceiling)."""


class Tries:
    """The retries of one request or wait, without I/O: how long to wait before the next
    try, or ``None`` to give up.

    Without ``until`` they are the :class:`RetryPolicy`'s (``attempts`` tries within its
    ``budget``).  With ``until`` (a time on ``clock``, :func:`time.monotonic` by default)
    they are bounded by that time alone: tries go on, with the policy's backoff, until
    the next wait would end past ``until`` (the last wait is shortened to end at
    ``until``), or the service's ``Retry-After`` asks for a wait longer than the time
    left.
    """

    def __init__(self, retry: RetryPolicy, *, until: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.retry = retry
        self.until = until
        self.clock = clock
        self.tries = 0
        self.waited = 0.0

    def wait(self, retry_after: float | None = None) -> float | None:
        """The wait before the next try, after a try that failed transiently (or found
        nothing yet); ``retry_after`` is that answer's ``Retry-After`` (None: none)."""
        attempt, self.tries = self.tries, self.tries + 1
        if self.until is None:
            wait = self.retry.wait(attempt, retry_after, self.waited)
        else:
            left = self.until - self.clock()
            wait = self.retry.delay(min(attempt, _MAX_DOUBLINGS))
            asked = None if retry_after is None else min(retry_after, self.retry.max_retry_after)
            if left <= 0 or (asked is not None and asked > left):
                return None
            wait = min(max(wait, asked or 0.0), left)
        if wait is not None:
            self.waited += wait
        return wait

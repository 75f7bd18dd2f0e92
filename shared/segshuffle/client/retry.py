"""How the SDK and the operator tools retry a request that failed transiently.

Standard library only, so that light tools (``segshuffle admin``) can use it without the
protocol's numerical stack.
"""

from __future__ import annotations

import random
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

"""How the SDK and the operator tools retry a request that failed transiently.

Standard library only, so that light tools (``segshuffle admin``) can use it without the
protocol's numerical stack.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of transient failures: ``attempts`` tries, exponential backoff with jitter.

    The wait before try k + 1 (k counting from 0) is uniform in [d_k / 2, d_k] with
    d_k = min(maximum, initial * 2^k).
    """

    attempts: int = 6
    initial: float = 0.2
    maximum: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial < 0 or self.maximum < self.initial:
            raise ValueError("retry policy needs attempts >= 1 and 0 <= initial <= maximum")

    def delay(self, attempt: int) -> float:
        """Wait before try ``attempt + 1`` (attempt counts from 0): full jitter in [d/2, d]."""
        ceiling = min(self.maximum, self.initial * 2.0**attempt)
        return ceiling * (0.5 + 0.5 * random.random())

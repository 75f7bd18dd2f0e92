"""Rate limits of the shuffler's public routes (enrollment, submissions, public reads).

One :class:`~segshuffle.services.rate_limit.TokenBucketLimiter` per route class, keyed by
the request's source (:class:`~segshuffle.services.rate_limit.SourceResolver`), applied as
FastAPI dependencies before the body is read.  A refusal is ``rate-limited`` (429) with
``Retry-After`` in whole seconds.  Settings: ``ENROLL_RATE``, ``ENROLL_BURST``,
``SUBMIT_RATE``, ``SUBMIT_BURST``, ``READ_RATE``, ``READ_BURST``, ``RATE_LIMIT_SOURCES``,
``TRUSTED_PROXIES``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fastapi import Request

from segshuffle.services import errors
from segshuffle.services.rate_limit import SourceResolver, TokenBucketLimiter, parse_networks

from .settings import Settings


@dataclass(frozen=True)
class RouteLimits:
    """The limiters of the shuffler (``None``: that limit is off)."""

    enroll: TokenBucketLimiter | None
    submit: TokenBucketLimiter | None
    read: TokenBucketLimiter | None
    resolver: SourceResolver

    @classmethod
    def from_settings(cls, settings: Settings) -> RouteLimits:
        def limiter(rate: float, burst: int) -> TokenBucketLimiter | None:
            return TokenBucketLimiter(rate, burst, settings.rate_limit_sources) if rate > 0 \
                else None

        return cls(limiter(settings.enroll_rate, settings.enroll_burst),
                   limiter(settings.submit_rate, settings.submit_burst),
                   limiter(settings.read_rate, settings.read_burst),
                   SourceResolver(parse_networks(settings.trusted_proxies)))

    def check(self, limiter: TokenBucketLimiter | None, request: Request, what: str) -> None:
        """Take a token for the request's source or raise :class:`errors.RateLimitedError`."""
        if limiter is None:
            return
        peer = request.client.host if request.client is not None else None
        source = self.resolver.source(peer, request.headers.get("x-forwarded-for"))
        wait = limiter.acquire(source)
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            raise errors.RateLimitedError(
                f"too many {what} from this address; retry in {seconds} s",
                headers={"Retry-After": str(seconds)})


def _limits(request: Request) -> RouteLimits:
    limits: RouteLimits = request.app.state.limits
    return limits


async def enrollment_limit(request: Request) -> None:
    """Dependency of ``POST .../enrollments``."""
    limits = _limits(request)
    limits.check(limits.enroll, request, "enrollments")


async def submission_limit(request: Request) -> None:
    """Dependency of ``POST .../submissions``."""
    limits = _limits(request)
    limits.check(limits.submit, request, "submissions")


async def read_limit(request: Request) -> None:
    """Dependency of the public GETs (campaign view, key config, round status)."""
    limits = _limits(request)
    limits.check(limits.read, request, "requests")

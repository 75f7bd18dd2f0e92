"""The per-source token bucket limiter and the source of a request behind proxies."""

from __future__ import annotations

import sys

import pytest

from segshuffle.services.rate_limit import (
    SourceResolver,
    TokenBucketLimiter,
    WindowCap,
    parse_networks,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_the_burst_then_the_rate() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(rate=2.0, burst=3, max_sources=10, clock=clock)
    assert [limiter.acquire("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("a") == pytest.approx(0.5)  # one token at 2/s
    assert limiter.acquire("b") == 0.0  # another source has its own bucket
    clock.now += 0.5
    assert limiter.acquire("a") == 0.0
    assert limiter.acquire("a") > 0
    clock.now += 1000
    assert [limiter.acquire("a") for _ in range(4)][-1] > 0  # refills only up to the burst


def test_refused_requests_do_not_pile_up_debt() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(rate=1.0, burst=1, max_sources=10, clock=clock)
    assert limiter.acquire("a") == 0.0
    waits = [limiter.acquire("a") for _ in range(50)]
    assert max(waits) == pytest.approx(1.0)
    clock.now += 1.0
    assert limiter.acquire("a") == 0.0


def test_table_stays_bounded_under_many_sources() -> None:
    clock = Clock()
    limiter = TokenBucketLimiter(rate=1.0, burst=1, max_sources=1000, clock=clock)
    limiter.acquire("victim")
    assert limiter.acquire("victim") > 0
    for i in range(100_000):
        limiter.acquire(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}")
        assert len(limiter) <= 1000
    assert len(limiter) == 1000
    assert sys.getsizeof(limiter._buckets) < 200_000
    # the least recently seen source was evicted and starts over with a full bucket
    assert limiter.acquire("victim") == 0.0


def test_recently_seen_sources_stay() -> None:
    limiter = TokenBucketLimiter(rate=1.0, burst=1, max_sources=3, clock=Clock())
    limiter.acquire("a")
    for source in ("b", "c", "a", "d"):  # touching "a" makes "b" the oldest
        limiter.acquire(source)
    assert limiter.acquire("a") > 0
    assert limiter.acquire("b") == 0.0


def test_sources_are_not_kept_as_addresses() -> None:
    limiter = TokenBucketLimiter(rate=1.0, burst=1, max_sources=3)
    limiter.acquire("192.0.2.7")
    assert all(b"192.0.2.7" not in key for key in limiter._buckets)


def test_bad_limits_are_refused() -> None:
    for rate, burst, size in ((0, 1, 1), (float("inf"), 1, 1), (1, 0, 1), (1, 1, 0)):
        with pytest.raises(ValueError):
            TokenBucketLimiter(rate, burst, size)
    with pytest.raises(ValueError, match="not an IP"):
        parse_networks("10.0.0.0/8, proxy.example")


def test_forwarded_for_is_trusted_only_from_configured_proxies() -> None:
    plain = SourceResolver()
    assert plain.source("198.51.100.1", "203.0.113.9") == "198.51.100.1"
    behind = SourceResolver(parse_networks("10.0.0.0/8 ::1"))
    assert behind.source("10.1.2.3", "203.0.113.9") == "203.0.113.9"
    # a client-written entry on the left proves nothing; the proxy's own entry counts
    assert behind.source("10.1.2.3", "1.2.3.4, 203.0.113.9") == "203.0.113.9"
    assert behind.source("10.1.2.3", "203.0.113.9, 10.9.9.9") == "203.0.113.9"
    assert behind.source("198.51.100.1", "203.0.113.9") == "198.51.100.1"  # not a proxy
    assert behind.source("::1", None) == "::1"
    assert behind.source("10.1.2.3", "10.0.0.1, 10.0.0.2") == "10.1.2.3"
    assert behind.source(None, None) == "unknown"


def test_window_cap_admits_at_most_its_limit_in_any_window() -> None:
    clock = Clock()
    cap = WindowCap(3, 60.0, clock=clock)
    for _ in range(3):  # at 0, 5 and 10 s
        assert cap.acquire() == 0.0
        clock.now += 5.0
    assert cap.acquire() == pytest.approx(45.0)  # at 15 s; the first leaves at 60 s
    clock.now += 44.0
    assert cap.acquire() == pytest.approx(1.0)  # refusals postpone nothing
    clock.now += 1.0
    assert cap.acquire() == 0.0  # 60 s after the first: one place again
    assert cap.acquire() == pytest.approx(5.0)  # the next leaves at 65 s


def test_window_cap_is_a_ceiling_not_a_rate() -> None:
    """A request every 0.1 s for 10 minutes: exactly the limit in every minute, where a
    token bucket of the same nominal figure admits its burst and its refill in one."""
    clock = Clock()
    cap = WindowCap(50, 60.0, clock=clock)
    admitted = []
    for _ in range(6000):
        clock.now += 0.1
        if cap.acquire() == 0.0:
            admitted.append(clock.now)
    assert len(admitted) == 50 * 10
    assert all(later - earlier >= 60.0 - 1e-9
               for earlier, later in zip(admitted, admitted[50:], strict=False))


@pytest.mark.parametrize(("limit", "window"), [(0, 60.0), (1, 0.0), (1, float("nan"))])
def test_window_cap_refuses_a_meaningless_configuration(limit: int, window: float) -> None:
    with pytest.raises(ValueError):
        WindowCap(limit, window)

"""The shuffler's document cache: single flight, bounded, TTL for mutable values only."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from segshuffle.services.shuffler.cache import Fetched, SingleFlightCache
from segshuffle.services.shuffler.upstream import ServerLink, UpstreamError

from .test_client_messages import _view


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_concurrent_misses_share_one_fetch() -> None:
    cache: SingleFlightCache[int] = SingleFlightCache(max_entries=8, ttl=1.0)
    calls = 0

    async def fetch() -> Fetched[int]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return Fetched(42)

    async def main() -> list[int]:
        answers = await asyncio.gather(*(cache.get("k", fetch) for _ in range(100)))
        return [a.value for a in answers]

    assert asyncio.run(main()) == [42] * 100
    assert calls == 1 and cache.fetches == 1 and cache.inflight == 0


def test_cache_stays_bounded_lru() -> None:
    cache: SingleFlightCache[int] = SingleFlightCache(max_entries=16, ttl=60.0)

    async def main() -> None:
        for i in range(1000):
            await cache.get(i, lambda i=i: _value(i))
            await cache.get(0, lambda: _value(-1))  # key 0 stays recently used
            assert len(cache) <= 16

    asyncio.run(main())
    assert len(cache) == 16
    assert cache.fetches == 1000  # key 0 was never fetched again


async def _value(v: int, immutable: bool = False) -> Fetched[int]:
    return Fetched(v, immutable)


def test_ttl_applies_to_mutable_values_only() -> None:
    clock = Clock()
    cache: SingleFlightCache[int] = SingleFlightCache(ttl=1.0, min_refresh=0.25, clock=clock)

    async def main() -> None:
        assert (await cache.get("m", lambda: _value(1))).value == 1
        assert (await cache.get("i", lambda: _value(1, True))).value == 1
        clock.now = 0.5
        assert (await cache.get("m", lambda: _value(2))).value == 1  # within the TTL
        assert (await cache.get("m", lambda: _value(3), fresh=True)).value == 3
        clock.now = 0.6
        assert (await cache.get("m", lambda: _value(4), fresh=True)).value == 3  # rate-limited
        clock.now = 100.0
        assert (await cache.get("m", lambda: _value(5))).value == 5
        assert (await cache.get("i", lambda: _value(6), fresh=True)).value == 1  # immutable

    asyncio.run(main())


def test_failures_reach_every_waiter_and_stale_values_cover_them() -> None:
    clock = Clock()
    cache: SingleFlightCache[int] = SingleFlightCache(ttl=1.0, clock=clock)
    calls = 0

    async def failing() -> Fetched[int]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        raise UpstreamError("down")

    async def main() -> None:
        results = await asyncio.gather(*(cache.get("k", failing) for _ in range(10)),
                                       return_exceptions=True)
        assert all(isinstance(r, UpstreamError) for r in results) and calls == 1
        await cache.get("k", lambda: _value(7))
        clock.now = 5.0
        stale = await cache.get("k", failing, stale_on_error=lambda e: True)
        assert stale.value == 7
        with pytest.raises(UpstreamError):
            await cache.get("k", failing, stale_on_error=lambda e: False)

    asyncio.run(main())


def test_a_cancelled_waiter_does_not_cancel_the_fetch() -> None:
    cache: SingleFlightCache[int] = SingleFlightCache()

    async def slow() -> Fetched[int]:
        await asyncio.sleep(0.05)
        return Fetched(9)

    async def main() -> None:
        first = asyncio.create_task(cache.get("k", slow))
        second = asyncio.create_task(cache.get("k", slow))
        await asyncio.sleep(0.01)
        first.cancel()
        assert (await second).value == 9
        assert cache.fetches == 1

    asyncio.run(main())


def test_discard_during_a_fetch_keeps_the_outdated_value_out() -> None:
    cache: SingleFlightCache[int] = SingleFlightCache(ttl=60.0)

    async def old() -> Fetched[int]:
        await asyncio.sleep(0.05)
        return Fetched(1)

    async def main() -> None:
        pending = asyncio.create_task(cache.get("k", old))
        await asyncio.sleep(0.01)
        cache.discard("k")
        assert (await pending).value == 1  # its waiter still gets an answer
        assert (await cache.get("k", lambda: _value(2))).value == 2

    asyncio.run(main())


@pytest.mark.slow  # 2-4 s on a 2-core machine: the fast tier stays within 3 minutes
def test_link_fetches_a_view_once_for_a_burst() -> None:
    view, _ = _view()
    body = view.model_dump_json().encode()
    seen: list[str | None] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        await asyncio.sleep(0.05)
        return httpx.Response(200, content=body)

    async def main() -> None:
        link = ServerLink("http://server", "cred", transport=httpx.MockTransport(handler),
                          cache_entries=4)
        documents = await asyncio.gather(*(link.document("view", "c1") for _ in range(100)))
        assert {d.body for d in documents if d is not None} == {body}
        for i in range(50):  # unknown ids are bounded by the same cache
            await link.document("view", f"other{i}")
        assert len(link.documents) <= 4
        await link.aclose()

    asyncio.run(main())
    assert seen[0] == "Bearer cred" and len(seen) == 51


def test_client_refuses_a_relayed_key_other_than_the_expected_one() -> None:
    from segshuffle.client import Client, VerificationError

    view, _ = _view()
    documents = {"/v1/campaigns/c1": view.model_dump_json(),
                 "/v1/campaigns/c1/hpke-config": view.hpke_config.model_dump_json()}

    def relay(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=documents[request.url.path])

    def client(key_id: str | None) -> Client:
        return Client("http://shuffler", "c1", key_id=key_id,
                      http=httpx.Client(transport=httpx.MockTransport(relay)))

    with client(view.key_id) as honest:
        assert honest.campaign().key_id == view.key_id
    with client("0" * 16) as pinned, pytest.raises(VerificationError, match="expected key"):
        pinned.campaign()

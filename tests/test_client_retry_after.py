"""The SDK waits as long as a rate limit asks, within a bounded budget.

Regression tests: an enrollment answered 429 with ``Retry-After`` used to be retried after
the policy's own short backoff (0.1-0.4 s), so an app that met the shuffler's enrollment
limit on first contact spent its six tries inside the limit's window and failed.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from segshuffle.client import errors as client_errors
from segshuffle.client import sync as sync_client
from segshuffle.client.aio import AsyncClient
from segshuffle.client.retry import RetryPolicy
from segshuffle.client.sync import Client

CID = "retry-after"
URL = "http://shuffler.test"


def _limited(refusals: int, retry_after: str) -> tuple[list[float], httpx.MockTransport]:
    """A shuffler that refuses the first ``refusals`` enrollments with 429 and then enrols."""
    seen: list[float] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(1.0)
        if len(seen) <= refusals:
            return httpx.Response(
                429, headers={"Retry-After": retry_after,
                              "Content-Type": "application/problem+json"},
                json={"type": "urn:segshuffle:error:rate-limited", "status": 429,
                      "title": "Too Many Requests", "detail": "too many enrollments"})
        body = json.loads(request.content)
        return httpx.Response(201, json={"campaign_id": CID, "token": body["token"]})

    return seen, httpx.MockTransport(handle)


def test_an_enrollment_waits_out_the_rate_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(sync_client.time, "sleep", waits.append)
    seen, transport = _limited(2, "3")
    with Client(URL, CID, http=httpx.Client(transport=transport)) as client:
        token = client.enroll()
    assert token and len(seen) == 3
    assert len(waits) == 2 and all(3.0 <= wait <= 3.5 for wait in waits), waits


def test_an_async_enrollment_waits_out_the_rate_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    seen, transport = _limited(2, "3")

    async def enroll() -> str:
        async with AsyncClient(URL, CID, http=httpx.AsyncClient(transport=transport)) as client:
            return await client.enroll()

    assert asyncio.run(enroll()) and len(seen) == 3
    assert len(waits) == 2 and all(3.0 <= wait <= 3.5 for wait in waits), waits


def test_waits_stay_within_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(sync_client.time, "sleep", waits.append)
    _, transport = _limited(100, "3000")  # a limit that never lifts, asking for 50 min
    policy = RetryPolicy(attempts=10, max_retry_after=30.0, budget=70.0)
    with (Client(URL, CID, http=httpx.Client(transport=transport), retry=policy) as client,
          pytest.raises(client_errors.ServiceError) as refused):
        client.enroll()
    assert refused.value.status == 429 and refused.value.retry_after == 3000.0
    assert waits == [30.0, 30.0]  # each wait capped; a third would pass the budget
    assert "rate-limited" in str(refused.value)


def test_the_policy_waits_its_own_backoff_without_a_retry_after() -> None:
    policy = RetryPolicy()
    assert policy.wait(0, None, 0.0) is not None
    assert policy.wait(0, None, 0.0) <= policy.initial  # the policy's own backoff
    assert policy.wait(5, 1.0, 0.0) is None  # the last of six tries
    assert policy.wait(0, 10.0, 115.0) is None  # past the 120 s budget

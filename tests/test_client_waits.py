"""The SDK waits where waiting is right, for a time, and refuses only on a failed check.

The campaign's view can say round 2 while the shuffler's round-1 status still says
``released: false`` (the shuffler is still recording the server's acknowledgement).  A
client that called ``wait_for_phase("round2")`` and then ``fetch_parameters()`` used to
fetch the status once more and refuse (check ``round1_participants``), and the user sent
nothing; the same call 3.5 s later was accepted.  Now "not released yet", "parameters not
published yet" and a transient failure during the check are waits bounded by the client's
``wait_budget`` (a time, with backoff), and only a real verification failure refuses, at
once.
"""

from __future__ import annotations

import asyncio
import math
import time

import httpx
import pytest

from segshuffle.client import (
    AsyncClient,
    Client,
    RetryPolicy,
    ServiceError,
    VerificationError,
    WaitTimeoutError,
)
from segshuffle.client.retry import DEFAULT_WAIT_BUDGET, Tries

from .fake_shuffler_support import CID, URL, FakeClock, FakeShuffler, _problem

ITEMS = ["café", "plain"]
FAST = RetryPolicy(initial=0.05, maximum=0.5)


def _client(shuffler: FakeShuffler, clock: FakeClock | None = None, **kwargs: object) -> Client:
    client = Client(URL, CID, server_key=shuffler.server_key,
                    http=httpx.Client(transport=shuffler.transport()), **kwargs)  # type: ignore[arg-type]
    if clock is not None:
        client._clock, client._sleep = clock, clock.sleep
    return client


def _in_round2(shuffler: FakeShuffler, client: Client, **release: float) -> None:
    """Enroll and send round 1, then release round 1 at the fake shuffler."""
    client.enroll()
    client.submit_level(1)
    shuffler.release1(**release)


# -- the race, with real time ---------------------------------------------------------------

@pytest.mark.slow  # 2-3 s on a 2-core machine: the fast tier stays within 3 minutes
def test_the_round1_status_lagging_the_view_by_3_s_is_waited_for() -> None:
    shuffler = FakeShuffler()
    with Client(URL, CID, server_key=shuffler.server_key, retry=FAST,
                http=httpx.Client(transport=shuffler.transport())) as user:
        user.enroll()
        user.submit_level(1)
        shuffler.release1(status_lag=3.0)
        started = time.monotonic()
        assert user.wait_for_phase("round2", timeout=10).phase == "round2"  # at once
        parameters = user.fetch_parameters()
        waited = time.monotonic() - started
        sent = user.submit_data(ITEMS)
    assert parameters.users == 1000 and 3.0 <= waited < 10.0
    assert sent.items == (0, 7) and len(shuffler.submissions[2]) == 1


@pytest.mark.slow  # 2-3 s on a 2-core machine: the fast tier stays within 3 minutes
def test_the_async_client_waits_for_the_lagging_status_too() -> None:
    shuffler = FakeShuffler()

    async def run() -> float:
        async with AsyncClient(URL, CID, server_key=shuffler.server_key, retry=FAST,
                               http=httpx.AsyncClient(transport=shuffler.transport())) as user:
            await user.enroll()
            await user.submit_level(0)
            shuffler.release1(status_lag=3.0)
            started = time.monotonic()
            await user.wait_for_phase("round2", timeout=10)
            await user.fetch_parameters()
            waited = time.monotonic() - started
            await user.submit_data([3])
            return waited

    waited = asyncio.run(run())
    assert 3.0 <= waited < 10.0 and len(shuffler.submissions[2]) == 1


# -- the budget is a time, on a fake clock ------------------------------------------------

def test_the_wait_is_bounded_by_time_not_by_a_count_of_tries() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock, wait_budget=30.0) as user:
        _in_round2(shuffler, user, status_lag=math.inf)  # never says released
        with pytest.raises(WaitTimeoutError) as timed_out:
            user.fetch_parameters()
        assert user.session.parameters is None  # nothing half-checked for submit_data
        with pytest.raises(WaitTimeoutError):
            user.submit_data(ITEMS)
    assert timed_out.value.waiting_for == "round1-release"
    assert "does not say released" in str(timed_out.value)
    assert clock.now == pytest.approx(2 * 30.0)  # each wait ended at its budget
    tries = sum(1 for _, path, _ in shuffler.requests if path.endswith("/rounds/1"))
    assert tries > 2 * RetryPolicy().attempts  # backoff up to 5 s: many more than 6 tries
    assert max(clock.sleeps) <= RetryPolicy().maximum
    assert shuffler.posts(2) == []


def test_parameters_not_published_yet_are_waited_for() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        user.enroll()
        user.submit_level(2)
        shuffler.release1(after=40.0, status_lag=20.0)
        parameters = user.fetch_parameters()
        user.submit_data(ITEMS)
    assert parameters.messages_per_user == 3
    assert 60.0 <= clock.now < 60.0 + RetryPolicy().maximum
    assert len(shuffler.submissions[2]) == 1


def test_a_5xx_during_the_check_is_a_wait() -> None:
    """The shuffler restarting for 70 s while a user checks the parameters: its status
    route answers 503; the client keeps at it (many more tries than the policy's six) and
    is accepted once it answers again."""
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        _in_round2(shuffler, user)
        shuffler.outage("status1", clock.now + 70.0)
        user.fetch_parameters()
        user.submit_data(ITEMS)
    assert 70.0 <= clock.now < 70.0 + RetryPolicy().maximum
    failed = sum(1 for _, path, _ in shuffler.requests if path.endswith("/rounds/1"))
    assert failed > RetryPolicy().attempts
    assert len(shuffler.submissions[2]) == 1


def test_a_resumed_client_rides_out_a_restart_while_it_fetches_the_campaign_again() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        _in_round2(shuffler, user)
        state = user.state()
    shuffler.outage("view", clock.now + 50.0)
    with Client.resume(URL, state, http=httpx.Client(transport=shuffler.transport())) as again:
        again._clock, again._sleep = clock, clock.sleep
        again.fetch_parameters()  # the campaign's view and key, then the parameters
        again.submit_data(ITEMS)
    assert clock.now >= 50.0 and len(shuffler.submissions[2]) == 1


def test_retry_after_is_respected_and_one_beyond_the_budget_ends_the_wait() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    busy = _problem(503, "unavailable", "busy", {"retry-after": "7"})
    with _client(shuffler, clock) as user:
        _in_round2(shuffler, user)
        shuffler.fault("status1", busy, busy)
        user.fetch_parameters()
        assert clock.sleeps[-2:] == [7.0, 7.0]
        clock.sleeps.clear()
        user.session.parameters = None
        shuffler.fault("view", _problem(503, "unavailable", "", {"retry-after": "600"}))
        with _client(shuffler, clock, wait_budget=30.0) as hurried:
            hurried.session = user.session
            with pytest.raises(WaitTimeoutError) as timed_out:
                hurried.fetch_parameters()
    assert timed_out.value.waiting_for == "service" and timed_out.value.status == 503
    assert clock.sleeps == []  # 600 s asked, 30 s left: no try before the service's time


def test_a_released_status_with_too_few_participants_refuses_at_once() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        _in_round2(shuffler, user)
        shuffler.round1_participants = 999  # the parameters claim n = 1000
        with pytest.raises(VerificationError) as refused:
            user.fetch_parameters()
        assert refused.value.check == "round1_participants"
        shuffler.round1_participants = None
        user.fetch_parameters()
    assert clock.sleeps == []


def test_failed_checks_refuse_at_once_even_while_round1_is_not_released() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        _in_round2(shuffler, user, status_lag=math.inf)
        honest = dict(shuffler.parameters)
        shuffler.parameters = {**honest, "lambdas": [1.0, 1.0, 1.0]}  # hash no longer matches
        with pytest.raises(VerificationError) as refused:
            user.submit_data(ITEMS)
        assert refused.value.check == "parameters_hash"
        shuffler.parameters = honest
        shuffler.round1_released_at = clock.now
        original = shuffler._answer

        def low_threshold(route: str, request: httpx.Request, body: object) -> httpx.Response:
            answer = original(route, request, body)
            if route == "status2":
                return httpx.Response(200, json={**answer.json(), "required": 899})
            return answer

        shuffler._answer = low_threshold  # type: ignore[method-assign]
        with pytest.raises(VerificationError) as refused:
            user.fetch_parameters()
        assert refused.value.check == "release_threshold"
    assert clock.sleeps == [] and shuffler.posts(2) == []


def test_a_phase_wait_rides_out_a_restart_within_its_timeout() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        _in_round2(shuffler, user, after=10.0)
        shuffler.outage("view", clock.now + 20.0)
        assert user.wait_for_phase("round2", timeout=60).phase == "round2"
        shuffler.outage("view", clock.now + 100.0)
        with pytest.raises(WaitTimeoutError) as timed_out:
            user.wait_for_phase("done", timeout=60)
    assert isinstance(timed_out.value, ServiceError) and timed_out.value.waiting_for == "service"


# -- Tries ----------------------------------------------------------------------------------

def test_tries_until_a_time_back_off_and_end_at_it() -> None:
    clock = FakeClock()
    tries = Tries(RetryPolicy(), until=60.0, clock=clock)
    while (wait := tries.wait()) is not None:
        clock.sleep(wait)
    assert clock.now == pytest.approx(60.0)
    assert tries.tries > RetryPolicy().attempts
    assert clock.sleeps[0] <= 0.2 and max(clock.sleeps) <= 5.0
    # a Retry-After is waited in full, and one longer than the time left ends the tries
    tries = Tries(RetryPolicy(), until=10.0, clock=FakeClock())
    assert tries.wait(8.0) == 8.0
    assert tries.wait(11.0) is None
    # without a time, the policy's count and budget, as before
    counted = Tries(RetryPolicy(attempts=3), clock=FakeClock())
    assert [counted.wait() is not None for _ in range(3)] == [True, True, False]
    assert DEFAULT_WAIT_BUDGET == 120.0

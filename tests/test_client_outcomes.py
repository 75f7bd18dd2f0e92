"""The SDK knows what it sent: a submission returns only once it is stored, and otherwise
says whether it certainly is not stored or whether that is not known yet.

When a service took 40-70 s to come back after a kill, users whose submission had been
stored before the kill still ran out of retries (six tries, about 6 s of backoff) and got
an error, while the server's totals included them.  Now a submission is retried with the
same token and the same sealed body within the client's ``wait_budget`` (a time), and
``already-submitted`` after a try that may have arrived is "stored".  The session records
each round's outcome, in the saved state too, before anything leaves: a resumed session
sends again, as it was, a submission of unknown outcome and never sends a stored one
again.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from segshuffle.client import (
    AsyncClient,
    Client,
    ClientError,
    SubmissionError,
    SubmissionRefusedError,
    SubmissionUnknownError,
)
from segshuffle.client.session import STATE_VERSION, UserSession, _checksum

from .fake_shuffler_support import CID, URL, FakeClock, FakeShuffler, _problem

ITEMS = ["café", "plain"]


def _client(shuffler: FakeShuffler, clock: FakeClock, **kwargs: Any) -> Client:
    client = Client(URL, CID, server_key=shuffler.server_key,
                    http=httpx.Client(transport=shuffler.transport()), **kwargs)
    client._clock, client._sleep = clock, clock.sleep
    return client


def _resumed(shuffler: FakeShuffler, clock: FakeClock, state: Any, **kwargs: Any) -> Client:
    client = Client.resume(URL, state, campaign_id=CID,
                           http=httpx.Client(transport=shuffler.transport()), **kwargs)
    client._clock, client._sleep = clock, clock.sleep
    return client


def _ready_for_round2(shuffler: FakeShuffler, client: Client) -> None:
    client.enroll()
    client.submit_level(1)
    shuffler.release1()
    client.fetch_parameters()


def _resealed(state: dict[str, Any], **changes: Any) -> dict[str, Any]:
    edited = {**state, **changes}
    edited["checksum"] = _checksum(edited)
    return edited


# -- a lost answer through a restart ----------------------------------------------------------

def test_a_stored_submission_whose_answer_was_lost_in_a_restart_is_stored() -> None:
    """The shuffler stores round 2, the connection drops before the answer, and the
    shuffler answers 503 for the next 60 s (a restart on a busy host): the client keeps
    resending the same body with the same token and, once the shuffler answers
    ``already-submitted``, reports it stored.  The shuffler counts the user once."""
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        _ready_for_round2(shuffler, user)
        shuffler.fault("submit2", "lost")
        shuffler.outage("submit2", clock.now + 60.0)
        sent = user.submit_data(ITEMS)
        assert user.outcome(2) == "stored" and user.state()["round2"] == "stored"
    assert len(shuffler.submissions[2]) == 1
    posts = shuffler.posts(2)
    assert len(posts) > 6 and all(body == posts[0] for body in posts)  # one body, resent
    assert clock.now >= 60.0
    assert len(sent.slots) == 3 and sent.level_index == 1


def test_an_async_submission_answered_503_after_it_was_stored_is_stored() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    told: list[dict[str, Any]] = []

    async def remember(state: dict[str, Any]) -> None:
        told.append(state)

    async def run() -> None:
        async with AsyncClient(URL, CID, server_key=shuffler.server_key,
                               http=httpx.AsyncClient(transport=shuffler.transport()),
                               on_state_change=remember) as user:
            user._clock, user._sleep = clock, clock.asleep
            await user.enroll()
            shuffler.fault("submit1", "stored-503")
            shuffler.outage("submit1", clock.now + 45.0)
            await user.submit_level(2)
            assert user.outcome(1) == "stored"

    asyncio.run(run())
    assert len(shuffler.submissions[1]) == 1 and clock.now >= 45.0
    # the app was told round 1 was on its way before it left, then that it is stored
    # (before: the enrollment, then the campaign's pins)
    assert [state["round1"] for state in told] == [None, None, "unknown", "stored"]
    assert told[2]["round1_body"] == shuffler.posts(1)[0]
    assert told[2]["reported_level"] == 2 and told[3]["round1_body"] is None


# -- the budget runs out: unknown, and resuming finds out ---------------------------------------

def test_an_unknown_outcome_is_settled_by_resuming_with_the_same_submission() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    saved: list[str] = []
    with _client(shuffler, clock, wait_budget=30.0,
                 on_state_change=lambda state: saved.append(json.dumps(state))) as user:
        _ready_for_round2(shuffler, user)
        shuffler.fault("submit2", "lost")
        shuffler.outage("submit2", clock.now + 300.0)
        with pytest.raises(SubmissionUnknownError) as unknown:
            user.submit_data(ITEMS)
        assert user.outcome(2) == "unknown"
    assert unknown.value.stored is None and isinstance(unknown.value, SubmissionError)
    assert "submit again" in str(unknown.value)
    state = json.loads(saved[-1])
    assert state["round2"] == "unknown" and state["round2_body"] == shuffler.posts(2)[0]
    record = state["round2_sent"]

    clock.now += 300.0  # the shuffler is back; the app starts again from its saved state
    with _resumed(shuffler, clock, saved[-1]) as again:
        assert again.outcome(2) == "unknown"
        sent = again.submit_data(["naïve"])  # the recorded submission, not a new draw
        assert again.outcome(2) == "stored"
        posts = len(shuffler.posts(2))
        assert again.submit_data(ITEMS) == sent  # stored: returned, not sent again
        assert len(shuffler.posts(2)) == posts
        final = again.state()
    assert [list(sent.items), list(sent.slots)] == [record["items"], record["slots"]]
    assert shuffler.posts(2)[-1] == state["round2_body"]
    assert len(shuffler.submissions[2]) == 1
    assert final["round2"] == "stored" and final["round2_body"] is None


def test_a_submission_that_never_arrived_is_stored_when_resent() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock, wait_budget=10.0) as user:
        user.enroll()
        shuffler.fault("submit1", *["reset"] * 100)  # dropped before the shuffler read it
        with pytest.raises(SubmissionUnknownError):
            user.submit_level(0)
        state = user.state()
    assert shuffler.submissions[1] == {} and state["round1"] == "unknown"
    shuffler.faults.clear()
    with _resumed(shuffler, clock, state) as again:
        with pytest.raises(ClientError, match="sent with level index 0"):
            again.submit_level(1)
        sent = again.submit_level(0)
        assert again.outcome(1) == "stored"
    assert sent.level_ciphertext == state["round1_body"]["level"]
    assert list(shuffler.submissions[1].values()) == [state["round1_body"]]


# -- definite refusals, and refusals that cannot tell -------------------------------------------

def test_a_refusal_is_not_stored_and_the_round_may_be_sent_anew() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        _ready_for_round2(shuffler, user)
        shuffler.fault("submit2", _problem(422, "wrong-submission-size", "4 messages"))
        with pytest.raises(SubmissionRefusedError) as refused:
            user.submit_data(ITEMS)
        assert refused.value.stored is False and refused.value.problem == "wrong-submission-size"
        assert user.outcome(2) is None and user.state()["round2_sent"] is None
        user.submit_data(ITEMS)
        assert user.outcome(2) == "stored"
    assert len(shuffler.submissions[2]) == 1


def test_no_try_reaching_the_shuffler_is_not_stored() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock, wait_budget=20.0) as user:
        user.enroll()
        shuffler.fault("submit1", *["refused"] * 1000)
        with pytest.raises(SubmissionRefusedError, match="no try reached") as refused:
            user.submit_level(1)
        assert user.outcome(1) is None and user.state()["reported_level"] is None
    assert refused.value.stored is False and clock.now == pytest.approx(20.0)


def test_already_submitted_without_a_try_that_may_have_arrived_is_not_this_one() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        user.enroll()
        shuffler.fault("submit1", _problem(409, "already-submitted", ""))
        with pytest.raises(SubmissionRefusedError) as refused:
            user.submit_level(1)
    assert refused.value.problem == "already-submitted"


def test_the_round_ending_after_a_lost_answer_leaves_it_unknown() -> None:
    """Round 1's answer is lost and the round is released before the retry: the
    shuffler's ``wrong-phase`` cannot tell whether the submission was in the round."""
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        user.enroll()
        shuffler.fault("submit1", "lost", _problem(409, "wrong-phase", "round 1 released"))
        with pytest.raises(SubmissionUnknownError) as unknown:
            user.submit_level(2)
        assert unknown.value.problem == "wrong-phase" and user.outcome(1) == "unknown"
        shuffler.release1()
        sent = user.submit_data(ITEMS)  # round 2 repeats the recorded level report
    assert sent.reported_level == 2 and len(shuffler.submissions[2]) == 1
    assert len(shuffler.submissions[1]) == 1


# -- the saved document ----------------------------------------------------------------------

def test_the_saved_document_records_each_round() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        user.enroll()
        assert user.state()["round1"] is None
        user.submit_level(1)
        state = user.state()
    assert state["version"] == STATE_VERSION == 2
    assert (state["round1"], state["round1_body"], state["round2"]) == ("stored", None, None)
    with _resumed(shuffler, clock, json.dumps(state)) as again:
        assert again.submit_level(1).reported_level == 1  # stored: not sent again
        shuffler.release1()
        again.submit_data(ITEMS)
        final = again.state()
    assert len(shuffler.posts(1)) == 1 and len(shuffler.submissions[2]) == 1
    assert final["round2"] == "stored" and len(final["round2_sent"]["slots"]) == 3
    restored = UserSession.from_state(final)
    assert restored.outcome(2) == "stored" and restored.sent2 is not None


def test_version_1_documents_still_load() -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        user.enroll()
        user.submit_level(2)
        state = user.state()
    old = {key: value for key, value in state.items() if not key.startswith("round")}
    old = _resealed({**old, "version": 1})
    restored = UserSession.from_state(json.dumps(old))
    assert restored.outcome(1) == "stored" and restored.outcome(2) is None
    assert restored.state()["version"] == 2 and restored.state()["round1"] == "stored"
    enrolled = _resealed({**old, "level_index": None, "reported_level": None})
    assert UserSession.from_state(enrolled).outcome(1) is None


@pytest.mark.parametrize(("changes", "message"), [
    ({"round1": "sent"}, "round1 must be null"),
    ({"round1": "unknown"}, "round1_body goes with an unknown outcome"),
    ({"round1_body": {"level": "AAAA"}}, "round1_body goes with an unknown outcome"),
    ({"round1": "unknown", "round1_body": {"level": "not base64!"}}, "not a ciphertext"),
    ({"round1": "unknown", "round1_body": {"level": "AA", "data": []}}, "not a round-1"),
    ({"round2": "stored"}, "round2_sent goes with a sent round 2"),
    ({"round2_sent": {"items": [], "slots": []}}, "round2_sent goes with a sent round 2"),
    ({"round2": "stored", "round2_sent": {"items": [-1], "slots": []}}, "item ids"),
    ({"level_index": None, "reported_level": None}, "needs the level_index"),
])
def test_inconsistent_round_records_are_refused(changes: dict[str, Any], message: str) -> None:
    clock = FakeClock()
    shuffler = FakeShuffler(clock)
    with _client(shuffler, clock) as user:
        user.enroll()
        user.submit_level(2)
        state = user.state()
    with pytest.raises(ClientError, match=message):
        UserSession.from_state(_resealed(state, **changes))

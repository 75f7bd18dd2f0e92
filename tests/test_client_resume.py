"""Saving a user's session and resuming it in a new client, and items given by name.

The slow test runs a real campaign (both services as processes): every user sends round 1
in one :class:`Client`, its state goes through JSON, and a new client built with
:meth:`Client.resume` sends round 2.  The fast tests check the saved document itself:
version, checksum, campaign, key and trust settings.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from segshuffle.client import AsyncClient, Client, ClientError, VerificationError
from segshuffle.client.session import STATE_VERSION, UserSession, _checksum
from segshuffle.crypto import generate_private_key, key_config
from segshuffle.testing.localstack import LocalStack

ITEMS = ["apple", "banana", "cherry", "date", "elderberry", "fig", "grape", "kiwi"]
USERS = 12
CID = "resumed"


def _resealed(state: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``state`` with ``changes`` and a checksum that matches them again (what someone who
    edits the document on purpose would write)."""
    edited = {**state, **changes}
    edited["checksum"] = _checksum(edited)
    return edited


def _saved_session(**settings: Any) -> dict[str, Any]:
    """A saved document of an enrolled session whose key is pinned, built offline."""
    config = key_config(generate_private_key())
    session = UserSession(CID, **settings)
    session.token = "token-1"
    session.level_index, session.reported_level = 1, 1
    document = session.state()  # no key pinned yet
    return _resealed(document, hpke_config=config.model_dump(mode="json"),
                     config_hash="ab" * 32)


# -- fast: the document ---------------------------------------------------------------------------

def test_state_needs_an_enrolled_session() -> None:
    with pytest.raises(ClientError, match="not enrolled"):
        Client("http://127.0.0.1:9", CID).state()


def test_state_round_trips_through_json() -> None:
    saved = _saved_session(min_fake_tolerance=0.1)
    assert saved["version"] == STATE_VERSION == 2
    restored = UserSession.from_state(json.dumps(saved), campaign_id=CID)
    assert restored.token == "token-1"
    assert (restored.level_index, restored.reported_level) == (1, 1)
    assert restored.key is not None and restored.key.key_id == saved["hpke_config"]["key_id"]
    assert restored.config_hash == "ab" * 32 and restored.min_fake_tolerance == 0.1
    assert restored.view is None  # everything published is fetched and verified again
    # the stricter tolerance wins; a weaker one cannot lower the saved one
    assert UserSession.from_state(saved, min_fake_tolerance=0.0).min_fake_tolerance == 0.1
    assert UserSession.from_state(saved, min_fake_tolerance=0.3).min_fake_tolerance == 0.3


def test_a_whole_number_written_without_its_fraction_is_the_same_document() -> None:
    # JavaScript's JSON.stringify writes the tolerance 0.0 as 0 (the web client's saved
    # documents, stored by a web app); Python reads that as the int 0.
    saved = _saved_session()
    assert saved["min_fake_tolerance"] == 0.0
    text = json.dumps(saved).replace('"min_fake_tolerance": 0.0', '"min_fake_tolerance": 0')
    assert '"min_fake_tolerance": 0,' in text or '"min_fake_tolerance": 0}' in text
    assert UserSession.from_state(text, campaign_id=CID).min_fake_tolerance == 0.0


@pytest.mark.parametrize(("change", "message"), [
    ({"level_index": 0}, "checksum"),
    ({"token": "someone-else"}, "checksum"),
    ({"version": 3}, "version 3 is not supported"),
    ({"format": "other"}, "not a segshuffle-client-state"),
    ({"extra": 1}, "unexpected or missing fields extra"),
])
def test_an_altered_document_is_refused(change: dict[str, Any], message: str) -> None:
    saved = _saved_session()
    with pytest.raises(ClientError, match=message):
        UserSession.from_state({**saved, **change})


def test_a_consistent_but_wrong_document_is_refused() -> None:
    saved = _saved_session()
    other_key = key_config(generate_private_key()).model_dump(mode="json")
    with pytest.raises(ClientError, match="key_id does not match"):
        UserSession.from_state(_resealed(
            saved, hpke_config={**other_key, "key_id": saved["hpke_config"]["key_id"]}))
    with pytest.raises(ClientError, match="reported_level needs a level_index"):
        UserSession.from_state(_resealed(saved, level_index=None))
    with pytest.raises(ClientError, match="go together"):
        UserSession.from_state(_resealed(saved, config_hash=None))
    with pytest.raises(ClientError, match="token"):
        UserSession.from_state(_resealed(saved, token="two words"))
    for bad in ("not json", b"[1, 2]", 7):
        with pytest.raises(ClientError, match="saved state"):
            UserSession.from_state(bad)  # type: ignore[arg-type]


def test_another_campaign_or_pin_is_refused() -> None:
    saved = _saved_session()
    with pytest.raises(ClientError, match="for campaign 'resumed', not 'other'"):
        Client.resume("http://127.0.0.1:9", saved, campaign_id="other")
    with pytest.raises(ClientError, match="pins key id"):
        UserSession.from_state(_resealed(saved, key_id_pin="0" * 16), key_id="1" * 16)
    with pytest.raises(ClientError, match="is not the expected key"):
        UserSession.from_state(saved, key_id="0" * 16)
    with pytest.raises(ClientError, match="another server_key"):
        UserSession.from_state(_resealed(saved, server_key="A" * 43), server_key="B" * 43)


# -- slow: a real campaign, round 2 from resumed clients ------------------------------------------

@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(tmp_path_factory.mktemp("resume"), min_users=2) as running:
        running.create_campaign({"id": CID, "items": ITEMS, "set_size": 2,
                                 "levels": [1.0, 2.0], "min_users": USERS - 2,
                                 "dropout_tolerance": 0.0})
        yield running


@pytest.mark.slow
def test_async_client_resumes_too(stack: LocalStack) -> None:
    """The same document resumes an :class:`AsyncClient` (a campaign of its own, so the
    test does not depend on running before the campaign test below)."""
    campaign_id = "resumed-async"
    stack.create_campaign({"id": campaign_id, "items": ITEMS, "set_size": 2,
                           "levels": [1.0, 2.0], "min_users": USERS - 2})
    (invitation,) = stack.invitations(campaign_id, 1)

    async def run() -> None:
        async with AsyncClient(stack.shuffler_url, campaign_id,
                               server_key=stack.server_key) as user:
            await user.enroll(invitation)
            state = json.dumps(user.state())
        async with AsyncClient.resume(stack.shuffler_url, state,
                                      campaign_id=campaign_id) as again:
            assert again.session.token is not None
            assert await again.item_ids(["grape"]) == [6]
            view = await again.campaign()  # verified against the saved (unpinned) state
            assert view.id == campaign_id and again.session.key is not None

    asyncio.run(run())


@pytest.mark.slow
def test_round_two_from_resumed_clients(stack: LocalStack) -> None:
    rng = np.random.default_rng(5)
    saved: list[str] = []
    invitations = stack.invitations(CID, USERS)
    for number, invitation in enumerate(invitations):
        with Client(stack.shuffler_url, CID, server_key=stack.server_key, rng=rng) as user:
            user.enroll(invitation)
            if number == 0:  # saved between enrollment and round 1: round 1 resumes too
                saved.append(json.dumps(user.state()))
                continue
            user.submit_level(number % 2)
            saved.append(json.dumps(user.state()))  # the app stops here
    with Client.resume(stack.shuffler_url, json.loads(saved[0]), campaign_id=CID) as user:
        user.submit_level(0)
        saved[0] = json.dumps(user.state())
    stack.release(CID, 1)

    # An edited state with a consistent checksum is resumed, then refused by what the
    # server published, before anything is sent.
    state = json.loads(saved[1])
    other_key = key_config(generate_private_key()).model_dump(mode="json")
    for edit in ({"hpke_config": other_key}, {"config_hash": "cd" * 32}):
        with Client.resume(stack.shuffler_url, _resealed(state, **edit)) as user:
            assert user.session.server_key is not None  # the saved server key is kept
            with pytest.raises(VerificationError, match="changed since it was first"):
                user.submit_data(["apple"])

    sent = []
    for number, text in enumerate(saved):
        state = json.loads(text)
        with Client.resume(stack.shuffler_url, state, campaign_id=CID, rng=rng) as user:
            user.wait_for_phase("round2", timeout=60)
            if number == 1:  # bad items are refused by name, and nothing is sent
                with pytest.raises(ClientError, match=r"unknown item 'mango'.*'apple', "
                                                      r"'banana'.*'kiwi'"):
                    user.submit_data(["mango"])
                with pytest.raises(ClientError, match=r"item id 8 is outside .* ids 0\.\.7"):
                    user.submit_data([1, 8])
                with pytest.raises(ClientError, match="not the single string"):
                    user.submit_data("apple")
                assert user.item_ids(["kiwi", 0, np.int64(3)]) == [7, 0, 3]
            record = user.submit_data(["apple", "fig"] if number % 3 else [0, "cherry"])
            assert record.reported_level == state["reported_level"]
            assert record.level_index == state["level_index"]
            sent.append(record)
    assert len(sent) == USERS
    stack.release(CID, 2)
    results = stack.results(CID)
    assert [item.name for item in results.items] == ITEMS
    assert all(item.estimate is not None for item in results.items)
    assert results.privacy is not None

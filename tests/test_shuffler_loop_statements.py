"""On PostgreSQL the shuffler runs a submission's statements on the event loop:
no worker-thread hand-off per submission or enrollment once the application has started,
one statement for a plain submission, and the same answers as before."""

# ruff: noqa: F811  (the imported ``postgres_url`` fixture is a parameter of each test)

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from segshuffle.crypto.invitations import (
    generate_issuer_key,
    new_invitation,
    public_key_text,
    sign_invitation,
)
from segshuffle.services import storage_calls
from segshuffle.services.shuffler.app import create_app
from segshuffle.services.shuffler.settings import Settings
from segshuffle.services.shuffler.storage_postgres import PostgresStorage
from segshuffle.services.shuffler.upstream import ServerLink

from .postgres_support import postgres_url  # noqa: F401  (the fixture)
from .submit_as_support import check_plain_submissions, ciphertext
from .vector_documents import VECTORS, vector_key_config, vector_view

CAMPAIGN_ID = VECTORS["parameters"][0]["config"]["id"]


def _app(postgres_url: str, tmp_path: Path, phase: dict[str, str],
         **settings: object) -> FastAPI:
    """The shuffler on PostgreSQL, without rate limits, against a server that serves the
    vectors' first campaign in ``phase["now"]`` (a test may change it)."""
    keys = vector_key_config().model_dump_json().encode()

    def upstream(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/hpke-config"):
            body = keys
        else:
            body = vector_view(VECTORS["parameters"][0],
                               phase=phase["now"]).model_dump_json().encode()
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    configured = Settings(database=postgres_url, key_directory=str(tmp_path / "keys"),
                          server_url="http://x", server_token="s" * 32,
                          operator_token="o" * 32, enroll_rate=0, submit_rate=0,
                          read_rate=0, **settings)  # type: ignore[arg-type]
    link = ServerLink("http://x", "s" * 32, transport=httpx.MockTransport(upstream))
    return create_app(configured, link=link)


def _hand_offs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions handed to a worker thread from now on."""
    handed_off: list[str] = []
    in_thread = storage_calls.in_thread

    async def counted(function, *args, **kwargs):  # type: ignore[no-untyped-def]
        handed_off.append(getattr(function, "__name__", repr(function)))
        return await in_thread(function, *args, **kwargs)

    monkeypatch.setattr(storage_calls, "in_thread", counted)
    return handed_off


def test_submissions_run_on_the_event_loop_with_the_same_answers(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    campaign_id = CAMPAIGN_ID
    app = _app(postgres_url, tmp_path, {"now": "round1"}, enrollment="open")
    handed_off = _hand_offs(monkeypatch)
    with TestClient(app, raise_server_exceptions=False) as client:
        path = f"/v1/campaigns/{campaign_id}/rounds/1/submissions"
        tokens = [client.post(f"/v1/campaigns/{campaign_id}/enrollments").json()["token"]
                  for _ in range(3)]
        first = client.post(path, json={"level": ciphertext()},
                            headers={"authorization": f"Bearer {tokens[0]}"})
        assert first.status_code == 201, first.text  # the round's key is made: a storage call
        handed_off.clear()
        level = ciphertext()
        answers = [client.post(path, json={"level": level},
                               headers={"authorization": f"Bearer {tokens[1]}"}),
                   client.post(path, json={"level": ciphertext()},
                               headers={"authorization": f"Bearer {tokens[1]}"}),
                   client.post(path, json={"level": level},
                               headers={"authorization": f"Bearer {tokens[2]}"}),
                   client.post(path, json={"level": ciphertext()},
                               headers={"authorization": "Bearer " + "x" * 43})]
        assert [a.status_code for a in answers] == [201, 409, 409, 401]
        assert answers[1].json()["type"].endswith(":already-submitted")
        assert answers[2].json()["type"].endswith(":replay")
        assert handed_off == []
        status = client.get(f"/v1/campaigns/{campaign_id}/rounds/1").json()
        assert status["participants"] == 2


def test_a_plain_submission_is_authenticated_and_stored_in_one_round_trip(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the round's key exists, a plain submission with a good token costs one
    statement (the token check inside the submission's own), and every refusal answers as
    in the usual order: a bad token ``unauthorized`` before any problem of the body, and
    ``wrong-phase`` once the campaign has ended."""
    phase = {"now": "round1"}
    campaign_id = CAMPAIGN_ID
    statements: list[str] = []
    fetch_one = PostgresStorage._fetch_one_async

    async def counted(self, query, parameters=()):  # type: ignore[no-untyped-def]
        statements.append(str(query).split("(")[0])
        return await fetch_one(self, query, parameters)

    monkeypatch.setattr(PostgresStorage, "_fetch_one_async", counted)
    app = _app(postgres_url, tmp_path, phase, enrollment="open")
    with TestClient(app, raise_server_exceptions=False) as client:
        check_plain_submissions(client, campaign_id, phase, statements,
                                ["SELECT shuffler_submit_as"])


def test_enrollments_run_on_the_event_loop_with_the_same_answers(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With invitations, after startup an enrollment makes no worker-thread hand-off (the
    purge of expired invitations, the token recorded and a repeated request recognised
    all run on the loop), and every answer is the thread path's."""
    campaign_id = CAMPAIGN_ID
    issuer = generate_issuer_key()
    app = _app(postgres_url, tmp_path, {"now": "round1"},
               invitation_keys=public_key_text(issuer))
    handed_off = _hand_offs(monkeypatch)
    expires = int(time.time()) + 3600

    def invitation(campaign: str = campaign_id) -> str:
        return sign_invitation(new_invitation(campaign, expires), issuer)

    with TestClient(app, raise_server_exceptions=False) as client:
        path = f"/v1/campaigns/{campaign_id}/enrollments"
        handed_off.clear()
        first, proposed = invitation(), ciphertext()[:43]
        answers = [client.post(path, json={"invitation": first, "token": proposed}),
                   client.post(path, json={"invitation": first, "token": proposed}),
                   client.post(path, json={"invitation": first}),
                   client.post(path, json={"invitation": invitation("another-campaign")}),
                   client.post(path, json={}),
                   client.post(path, json={"invitation": invitation(), "token": proposed})]
        assert [a.status_code for a in answers] == [201, 201, 403, 403, 401, 409], \
            [a.text for a in answers]
        assert answers[0].json()["token"] == answers[1].json()["token"] == proposed
        assert answers[2].json()["type"].endswith(":invitation-used")
        assert answers[3].json()["type"].endswith(":invitation-wrong-campaign")
        assert answers[4].json()["type"].endswith(":invitation-required")
        assert answers[5].json()["type"].endswith(":conflict")
        assert handed_off == []
        submitted = client.post(f"/v1/campaigns/{campaign_id}/rounds/1/submissions",
                                json={"level": ciphertext()},
                                headers={"authorization": f"Bearer {proposed}"})
        assert submitted.status_code == 201, submitted.text

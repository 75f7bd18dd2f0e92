"""The shuffler's enrollment over HTTP, in process (the server is a scripted transport):
invitation refusals as problem documents, per-source rate limits, open mode only when
set and loudly, and a shuffler that does not start without an issuer key."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from segshuffle.crypto.invitations import (
    generate_issuer_key,
    new_invitation,
    public_key_text,
    sign_invitation,
)
from segshuffle.services.shuffler.app import OPEN_WARNING, create_app
from segshuffle.services.shuffler.settings import Settings
from segshuffle.services.shuffler.upstream import ServerLink
from segshuffle.wire.models import b64url_decode, b64url_encode

from .test_client_messages import _view

CID = "c1"  # the campaign of _view()
PROBLEM = "application/problem+json"
ISSUER = generate_issuer_key()


def _server(request: httpx.Request) -> httpx.Response:
    view, _ = _view()
    if request.url.path == f"/v1/campaigns/{CID}":
        return httpx.Response(200, json=view.model_dump(mode="json"))
    if request.url.path == "/livez":
        return httpx.Response(200, json={"status": "ok"})
    return httpx.Response(404, json={"type": "urn:segshuffle:error:unknown-campaign"})


def _settings(tmp_path: Path, **changes: Any) -> Settings:
    values: dict[str, Any] = {
        "database": str(tmp_path / "shuffler.sqlite3"), "server_url": "http://server",
        "server_token": "s", "operator_token": "o",
        "invitation_keys": public_key_text(ISSUER),
    }
    values.update(changes)
    return Settings(**values)


def _client(settings: Settings) -> TestClient:
    link = ServerLink("http://server", "s", transport=httpx.MockTransport(_server))
    return TestClient(create_app(settings, link=link))


@pytest.fixture
def shuffler(tmp_path: Path) -> Iterator[TestClient]:
    """A shuffler with default settings but no rate limit (every request is one source)."""
    with _client(_settings(tmp_path, enroll_rate=0)) as client:
        yield client


def _enroll(client: TestClient, body: dict[str, Any], cid: str = CID) -> httpx.Response:
    return client.post(f"/v1/campaigns/{cid}/enrollments", json=body)


def _problem(response: httpx.Response, status: int, name: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = dict(response.json())
    assert body["type"] == f"urn:segshuffle:error:{name}" and body["detail"]
    return body


def _invitation(cid: str = CID, expires: int | None = None, key: Any = ISSUER) -> str:
    expires = int(time.time()) + 600 if expires is None else expires
    return sign_invitation(new_invitation(cid, expires), key)


def test_a_valid_invitation_enrolls_once(shuffler: TestClient) -> None:
    invitation = _invitation()
    answer = _enroll(shuffler, {"invitation": invitation})
    assert answer.status_code == 201 and answer.json()["campaign_id"] == CID
    assert len(answer.json()["token"]) >= 40
    _problem(_enroll(shuffler, {"invitation": invitation}), 403, "invitation-used")
    status = shuffler.get(f"/v1/campaigns/{CID}/rounds/1").json()
    assert status["enrollment"] == "invitations"


def test_every_refusal_has_its_problem_type(shuffler: TestClient) -> None:
    refused = _enroll(shuffler, {})
    _problem(refused, 401, "invitation-required")
    assert refused.headers["www-authenticate"].startswith("Invitation")
    _problem(shuffler.post(f"/v1/campaigns/{CID}/enrollments"), 401, "invitation-required")
    _problem(_enroll(shuffler, {"invitation": _invitation(expires=int(time.time()) - 61)}),
             403, "invitation-expired")
    _problem(_enroll(shuffler, {"invitation": _invitation(cid="other")}), 403,
             "invitation-wrong-campaign")
    _problem(_enroll(shuffler, {"invitation": _invitation(key=generate_issuer_key())}), 403,
             "invalid-invitation")
    raw = bytearray(b64url_decode(_invitation()))
    raw[-70] ^= 1  # a later expiry than the issuer signed
    _problem(_enroll(shuffler, {"invitation": b64url_encode(bytes(raw))}), 403,
             "invalid-invitation")
    _problem(_enroll(shuffler, {"invitation": "not-an-invitation"}), 403,
             "invalid-invitation")
    _problem(_enroll(shuffler, {"invitation": _invitation()}, cid="nope"), 404,
             "unknown-campaign")
    for odd in ("%00", "a%20b", "%C3%A9", "x" * 65):  # ids no campaign has: no server request
        _problem(_enroll(shuffler, {}, cid=odd), 404, "unknown-campaign")


def test_enrollment_bursts_get_429_with_retry_after(tmp_path: Path) -> None:
    settings = _settings(tmp_path, enroll_rate=0.01, enroll_burst=3, submit_rate=0.01,
                         submit_burst=2)
    with _client(settings) as client:
        for _ in range(3):
            _problem(_enroll(client, {}), 401, "invitation-required")
        limited = _enroll(client, {"invitation": _invitation()})
        body = _problem(limited, 429, "rate-limited")
        assert body["status"] == 429
        assert 90 <= int(limited.headers["retry-after"]) <= 100  # 1 token at 0.01/s
        submit = f"/v1/campaigns/{CID}/rounds/2/submissions"
        for _ in range(2):
            _problem(client.post(submit, json={}), 401, "unauthorized")
        limited = client.post(submit, json={})
        _problem(limited, 429, "rate-limited")
        assert int(limited.headers["retry-after"]) >= 1
        # reads have their own, larger budget
        assert client.get(f"/v1/campaigns/{CID}/rounds/1").status_code == 200


def test_public_reads_are_limited_per_source(tmp_path: Path) -> None:
    with _client(_settings(tmp_path, read_rate=0.01, read_burst=3)) as client:
        paths = [f"/v1/campaigns/{CID}", f"/v1/campaigns/{CID}/rounds/1",
                 f"/v1/campaigns/{CID}/rounds/2"]
        for path in paths:
            assert client.get(path).status_code == 200, path
        for path in paths:
            limited = client.get(path)
            _problem(limited, 429, "rate-limited")
            assert int(limited.headers["retry-after"]) >= 1
        assert client.get("/livez").status_code == 200  # health is never limited


def test_a_rate_of_zero_switches_the_limit_off(tmp_path: Path) -> None:
    with _client(_settings(tmp_path, enroll_rate=0, enroll_burst=1)) as client:
        for _ in range(5):
            _problem(_enroll(client, {}), 401, "invitation-required")


def test_open_enrollment_only_when_set_and_loudly(tmp_path: Path) -> None:
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("segshuffle.shuffler")
    logger.addHandler(handler)
    try:
        with _client(_settings(tmp_path / "default")) as client:
            _problem(_enroll(client, {}), 401, "invitation-required")
        assert not records
        settings = _settings(tmp_path, enrollment="open", invitation_keys="")
        with _client(settings) as client:
            tokens = {_enroll(client, {}).json()["token"] for _ in range(3)}
            assert len(tokens) == 3  # anyone, any number of times
            status = client.get(f"/v1/campaigns/{CID}/rounds/1").json()
            assert status["enrollment"] == "open"
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records if r.levelno == logging.WARNING] == [OPEN_WARNING]


def test_invitations_mode_needs_an_issuer_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="INVITATION_KEYS"):
        _settings(tmp_path, invitation_keys="")
    with pytest.raises(ValueError, match="should be 'invitations' or 'open'"):
        _settings(tmp_path, enrollment="secret")
    with pytest.raises(ValueError, match="not an Ed25519 public key"):
        create_app(_settings(tmp_path, invitation_keys="AAAA"))
    keys = tmp_path / "issuers.txt"
    keys.write_text(f"# issuer\n{public_key_text(ISSUER)}\n")
    settings = _settings(tmp_path, invitation_keys="", invitation_keys_file=str(keys))
    with _client(settings) as client:
        assert _enroll(client, {"invitation": _invitation()}).status_code == 201
    with pytest.raises(ValueError, match="cannot read"):
        _settings(tmp_path, invitation_keys_file=str(tmp_path / "missing")).issuer_keys()


def test_serve_refuses_to_start_without_an_issuer_key(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from segshuffle.cli.main import main

    for name in ("INVITATION_KEYS", "INVITATION_KEYS_FILE", "ENROLLMENT"):
        monkeypatch.delenv(f"SEGSHUFFLE_SHUFFLER_{name}", raising=False)
    monkeypatch.setenv("SEGSHUFFLE_SHUFFLER_SERVER_TOKEN", "s")
    monkeypatch.setenv("SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN", "o")
    database = str(tmp_path / "s.sqlite3")
    assert main(["serve", "shuffler", "--database", database]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "INVITATION_KEYS" in error
    monkeypatch.setenv("SEGSHUFFLE_SHUFFLER_INVITATION_KEYS", "not-a-key")
    assert main(["serve", "shuffler", "--database", database]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "not an Ed25519 public key" in error

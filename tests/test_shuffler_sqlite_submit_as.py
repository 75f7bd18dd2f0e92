"""On SQLite a plain submission checks its token inside its own transaction (issue 24):
one storage call where the token's lookup was a call of its own, and every answer as in
the usual order (the PostgreSQL twin: tests/test_shuffler_loop_statements.py)."""

from __future__ import annotations

import base64
import secrets
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from segshuffle.services.shuffler.app import create_app
from segshuffle.services.shuffler.settings import Settings
from segshuffle.services.shuffler.storage import Storage
from segshuffle.services.shuffler.upstream import ServerLink
from segshuffle.wire.models import CIPHERTEXT_LENGTH

from .vector_documents import VECTORS, vector_key_config, vector_view

CAMPAIGN_ID = VECTORS["parameters"][0]["config"]["id"]


def _ciphertext() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(CIPHERTEXT_LENGTH)).decode().rstrip("=")


def test_a_plain_submission_checks_its_token_in_its_own_transaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phase = {"now": "round1"}
    keys = vector_key_config().model_dump_json().encode()

    def upstream(request: httpx.Request) -> httpx.Response:
        body = keys if request.url.path.endswith("/hpke-config") else vector_view(
            VECTORS["parameters"][0], phase=phase["now"]).model_dump_json().encode()
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    calls: list[str] = []
    for name in ("token_campaign", "submit", "submit_as"):
        original = getattr(Storage, name)

        def counted(self, *args, _name=name, _original=original):  # type: ignore[no-untyped-def]
            calls.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(Storage, name, counted)
    settings = Settings(database=str(tmp_path / "shuffler.db"),
                        key_directory=str(tmp_path / "keys"), server_url="http://x",
                        server_token="s" * 32, operator_token="o" * 32, enrollment="open",
                        enroll_rate=0, submit_rate=0, read_rate=0)
    link = ServerLink("http://x", "s" * 32, transport=httpx.MockTransport(upstream))
    with TestClient(create_app(settings, link=link), raise_server_exceptions=False) as client:
        path = f"/v1/campaigns/{CAMPAIGN_ID}/rounds/1/submissions"
        tokens = [client.post(f"/v1/campaigns/{CAMPAIGN_ID}/enrollments").json()["token"]
                  for _ in range(3)]
        bearer = [{"authorization": f"Bearer {token}"} for token in tokens]
        stranger = {"authorization": "Bearer " + "x" * 43}
        first = client.post(path, json={"level": _ciphertext()}, headers=bearer[0])
        assert first.status_code == 201, first.text  # the round's key is made: usual order

        calls.clear()
        second = client.post(path, json={"level": _ciphertext()}, headers=bearer[1])
        assert second.status_code == 201, second.text
        assert calls == ["submit_as"]

        calls.clear()
        again = client.post(path, json={"level": _ciphertext()}, headers=bearer[1])
        assert again.status_code == 409 and again.json()["type"].endswith(":already-submitted")
        assert calls == ["submit_as"]

        unknown = client.post(path, json={"level": _ciphertext()}, headers=stranger)
        assert unknown.status_code == 401, unknown.text
        assert unknown.headers["www-authenticate"] == 'Bearer realm="shuffler"'
        for body, media in ((b"{not json", "application/json"),
                            (b'{"level": "short"}', "application/json"),
                            (b'{"level": "x"}', "text/plain")):
            answer = client.post(path, content=body, headers={**stranger, "content-type": media})
            assert answer.status_code == 401, (body, media, answer.text)
        bad = client.post(path, content=b"{not json", headers=bearer[2])
        assert bad.status_code == 400 and bad.json()["type"].endswith(":malformed-body")

        status = client.get(f"/v1/campaigns/{CAMPAIGN_ID}/rounds/1").json()
        assert status["participants"] == 2

        phase["now"] = "aborted"  # the cached view still says round 1
        time.sleep(0.3)  # a refused token refreshes the view at most every 0.25 s
        late = client.post(path, json={"level": _ciphertext()}, headers=stranger)
        assert late.status_code == 409 and late.json()["type"].endswith(":wrong-phase")

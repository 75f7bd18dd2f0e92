"""On PostgreSQL the shuffler runs a submission's statements on the event loop (issue 24):
no worker-thread hand-off per request once the application has started, and the same
answers as before."""

# ruff: noqa: F811  (the imported ``postgres_url`` fixture is a parameter of each test)

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from segshuffle.services import storage_calls
from segshuffle.services.shuffler.app import create_app
from segshuffle.services.shuffler.settings import Settings
from segshuffle.services.shuffler.upstream import ServerLink
from segshuffle.wire.models import CIPHERTEXT_LENGTH

from .postgres_support import postgres_url  # noqa: F401  (the fixture)
from .vector_documents import VECTORS, vector_key_config, vector_view


def _view_documents() -> tuple[str, bytes, bytes]:
    """A round-1 view of the vectors' first campaign and its key config, as the server
    sends them."""
    view = vector_view(VECTORS["parameters"][0], phase="round1")
    return view.id, view.model_dump_json().encode(), vector_key_config().model_dump_json().encode()


def _ciphertext() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(CIPHERTEXT_LENGTH)).decode().rstrip("=")


def test_submissions_run_on_the_event_loop_with_the_same_answers(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    campaign_id, view, keys = _view_documents()

    def upstream(request: httpx.Request) -> httpx.Response:
        body = keys if request.url.path.endswith("/hpke-config") else view
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    settings = Settings(database=postgres_url, key_directory=str(tmp_path / "keys"),
                        server_url="http://x", server_token="s" * 32, operator_token="o" * 32,
                        enrollment="open", enroll_rate=0, submit_rate=0, read_rate=0)
    link = ServerLink("http://x", "s" * 32, transport=httpx.MockTransport(upstream))
    handed_off: list[str] = []
    in_thread = storage_calls.in_thread

    async def counted(function, *args, **kwargs):  # type: ignore[no-untyped-def]
        handed_off.append(getattr(function, "__name__", repr(function)))
        return await in_thread(function, *args, **kwargs)

    monkeypatch.setattr(storage_calls, "in_thread", counted)
    with TestClient(create_app(settings, link=link), raise_server_exceptions=False) as client:
        path = f"/v1/campaigns/{campaign_id}/rounds/1/submissions"
        tokens = [client.post(f"/v1/campaigns/{campaign_id}/enrollments").json()["token"]
                  for _ in range(3)]
        first = client.post(path, json={"level": _ciphertext()},
                            headers={"authorization": f"Bearer {tokens[0]}"})
        assert first.status_code == 201, first.text  # the round's key is made: a storage call
        handed_off.clear()
        level = _ciphertext()
        answers = [client.post(path, json={"level": level},
                               headers={"authorization": f"Bearer {tokens[1]}"}),
                   client.post(path, json={"level": _ciphertext()},
                               headers={"authorization": f"Bearer {tokens[1]}"}),
                   client.post(path, json={"level": level},
                               headers={"authorization": f"Bearer {tokens[2]}"}),
                   client.post(path, json={"level": _ciphertext()},
                               headers={"authorization": "Bearer " + "x" * 43})]
        assert [a.status_code for a in answers] == [201, 409, 409, 401]
        assert answers[1].json()["type"].endswith(":already-submitted")
        assert answers[2].json()["type"].endswith(":replay")
        assert handed_off == []
        status = client.get(f"/v1/campaigns/{campaign_id}/rounds/1").json()
        assert status["participants"] == 2

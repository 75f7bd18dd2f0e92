"""On SQLite a plain submission checks its token inside its own transaction:
one storage call where the token's lookup was a call of its own, and every answer as in
the usual order (tests/submit_as_support.py; the PostgreSQL twin is in
tests/test_shuffler_loop_statements.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from segshuffle.services.shuffler.app import create_app
from segshuffle.services.shuffler.settings import Settings
from segshuffle.services.shuffler.storage import Storage
from segshuffle.services.shuffler.upstream import ServerLink

from .submit_as_support import check_plain_submissions
from .vector_documents import VECTORS, vector_key_config, vector_view

CAMPAIGN_ID = VECTORS["parameters"][0]["config"]["id"]


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
        check_plain_submissions(client, CAMPAIGN_ID, phase, calls, ["submit_as"])

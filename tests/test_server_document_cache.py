"""Immutable documents (a campaign's key config, an ended campaign's view) are answered
from memory, without a storage read, and the memory they take is bounded."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from segshuffle.services.server import create_app
from segshuffle.services.server import service as server_service

from .test_server_support import ADMIN, make_settings

BODY = {"domain_size": 8, "set_size": 2, "levels": [0.5, 1.0, 2.0], "delta": 1e-6,
        "min_users": 2}


def _create(client: TestClient, campaign_id: str) -> None:
    response = client.post("/v1/campaigns", json={"id": campaign_id, **BODY}, headers=ADMIN)
    assert response.status_code == 201, response.text


def _storage_fails(repository: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object, **__: object) -> None:
        raise AssertionError("storage was read")

    for name in ("phase", "campaign"):
        monkeypatch.setattr(repository, name, broken)


def test_immutable_documents_need_no_storage_read(tmp_path, monkeypatch) -> None:
    app = create_app(make_settings(tmp_path))
    with TestClient(app) as client:
        _create(client, "c1")
        key_config = client.get("/v1/campaigns/c1/hpke-config")
        view = client.get("/v1/campaigns/c1")
        assert "immutable" not in view.headers["cache-control"]  # still collecting
        aborted = client.post("/v1/campaigns/c1/abort", json={"reason": "test"},
                              headers=ADMIN)
        assert aborted.status_code == 200, aborted.text
        final = client.get("/v1/campaigns/c1")
        assert final.json()["phase"] == "aborted"
        _storage_fails(app.state.service.repository, monkeypatch)
        again = client.get("/v1/campaigns/c1/hpke-config")
        assert (again.status_code, again.content) == (200, key_config.content)
        assert "immutable" in again.headers["cache-control"]
        ended = client.get("/v1/campaigns/c1")
        assert (ended.status_code, ended.content) == (200, final.content)
        assert "immutable" in ended.headers["cache-control"]
        conditional = client.get("/v1/campaigns/c1", headers={"If-None-Match":
                                                             ended.headers["etag"]})
        assert conditional.status_code == 304


def test_the_document_memory_is_bounded(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(server_service, "DOCUMENT_CACHE_ENTRIES", 3)
    app = create_app(make_settings(tmp_path))
    with TestClient(app) as client:
        for index in range(6):
            _create(client, f"c{index}")
            assert client.get(f"/v1/campaigns/c{index}/hpke-config").status_code == 200
            assert client.get(f"/v1/campaigns/c{index}").status_code == 200
        service = app.state.service
        assert len(service._key_configs) == 3 and len(service._views) == 3
        assert list(service._key_configs) == ["c3", "c4", "c5"]

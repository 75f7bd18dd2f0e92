"""The shuffler serves the server's public documents: byte for byte, with ETag and
Cache-Control, through one bounded single-flight cache, and only for strict campaign ids.

In process: the server application answers the shuffler's upstream requests through an
ASGI transport that records them, so every request the server receives is visible.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from segshuffle.services.server import create_app as create_server
from segshuffle.services.shuffler.app import create_app as create_shuffler
from segshuffle.services.shuffler.settings import Settings as ShufflerSettings
from segshuffle.services.shuffler.upstream import ServerLink

from .test_server_support import ADMIN, SHUFFLER_TOKEN, make_settings

PROBLEM = "application/problem+json"
OPERATOR = "operator-token-0123456789"
CAMPAIGNS = ("c1", "h1", "d1")


class RecordingUpstream(httpx.AsyncBaseTransport):
    """An ASGI transport to the server app that records (method, raw path, authorization)."""

    def __init__(self, app: Any) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.requests: list[tuple[str, str, str | None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.raw_path.decode("ascii"),
                              request.headers.get("authorization")))
        return await self.inner.handle_async_request(request)


@dataclass
class Services:
    server: TestClient
    shuffler: TestClient
    upstream: RecordingUpstream
    link: ServerLink
    shuffler_database: Path
    server_database: Path


OPEN: dict[str, Any] = {"enrollment": "open", "enroll_rate": 0.0, "submit_rate": 0.0}
"""These tests are about documents and ids: open enrollment, no rate limits."""

@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    server_settings = make_settings(tmp_path)
    server_app = create_server(server_settings)
    upstream = RecordingUpstream(server_app)
    settings = ShufflerSettings(database=str(tmp_path / "shuffler.sqlite3"),
                                server_url="http://server", server_token=SHUFFLER_TOKEN,
                                operator_token=OPERATOR, min_users=2, **OPEN)
    link = ServerLink(settings.server_url, settings.server_token, transport=upstream)
    with TestClient(server_app, raise_server_exceptions=False) as server, \
            TestClient(create_shuffler(settings, link=link),
                       raise_server_exceptions=False) as shuffler:
        for cid in CAMPAIGNS:
            response = server.post("/v1/campaigns", headers=ADMIN, json={
                "id": cid, "domain_size": 4, "set_size": 1, "levels": [1, 2],
                "min_users": 3})
            assert response.status_code == 201, response.text
        yield Services(server, shuffler, upstream, link, Path(settings.database),
                       Path(server_settings.database))


def _problem(response: httpx.Response, status: int, name: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["type"] == f"urn:segshuffle:error:{name}"


# -- documents through the shuffler ----------------------------------------------------

@pytest.mark.parametrize("suffix", ["", "/hpke-config"])
def test_shuffler_relays_the_servers_bytes(services: Services, suffix: str) -> None:
    direct = services.server.get(f"/v1/campaigns/c1{suffix}")
    relayed = services.shuffler.get(f"/v1/campaigns/c1{suffix}")
    assert relayed.status_code == direct.status_code == 200
    assert relayed.content == direct.content
    assert relayed.headers["etag"] == direct.headers["etag"]
    assert relayed.headers["content-type"] == "application/json"
    for response in (direct, relayed):
        expected = ("public, max-age=31536000, immutable" if suffix
                    else "public, max-age=1")
        assert response.headers["cache-control"] == expected
    # every request the server received came from the shuffler, with its credential
    assert services.upstream.requests
    assert all(auth == f"Bearer {SHUFFLER_TOKEN}" for _, _, auth in services.upstream.requests)


@pytest.mark.parametrize("suffix", ["", "/hpke-config"])
@pytest.mark.parametrize("service", ["server", "shuffler"])
def test_if_none_match_gives_304(services: Services, service: str, suffix: str) -> None:
    client: TestClient = getattr(services, service)
    first = client.get(f"/v1/campaigns/c1{suffix}")
    etag = first.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) == 34
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = client.get(f"/v1/campaigns/c1{suffix}", headers={"If-None-Match": header})
        assert again.status_code == 304, header
        assert again.content == b""
        assert again.headers["etag"] == etag
        assert again.headers["cache-control"] == first.headers["cache-control"]
    changed = client.get(f"/v1/campaigns/c1{suffix}", headers={"If-None-Match": '"other"'})
    assert changed.status_code == 200 and changed.content == first.content


def test_finished_campaign_view_is_immutable(services: Services) -> None:
    with sqlite3.connect(services.server_database) as db:
        db.execute("UPDATE campaigns SET phase = 'done' WHERE id = 'c1'")
    services.link.forget("c1")
    for client in (services.server, services.shuffler):
        response = client.get("/v1/campaigns/c1")
        assert response.json()["phase"] == "done"
        assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
    before = len(services.upstream.requests)
    for _ in range(5):  # kept until evicted: no further upstream request
        assert services.shuffler.get("/v1/campaigns/c1").status_code == 200
    assert len(services.upstream.requests) == before


def test_unknown_campaign_document(services: Services) -> None:
    for suffix in ("", "/hpke-config"):
        _problem(services.shuffler.get(f"/v1/campaigns/nope{suffix}"), 404, "unknown-campaign")


def test_dead_server_fails_fast_with_503(tmp_path: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    settings = ShufflerSettings(database=str(tmp_path / "s.sqlite3"), server_url="http://x",
                                server_token=SHUFFLER_TOKEN, operator_token=OPERATOR, **OPEN)
    link = ServerLink("http://x", SHUFFLER_TOKEN, transport=httpx.MockTransport(refuse))
    with TestClient(create_shuffler(settings, link=link),
                    raise_server_exceptions=False) as shuffler:
        for path in ("/v1/campaigns/c1", "/v1/campaigns/c1/hpke-config",
                     "/v1/campaigns/c1/rounds/1"):
            response = shuffler.get(path)
            _problem(response, 503, "unavailable")
            assert response.headers["retry-after"] == "1"
        assert shuffler.get("/livez").status_code == 200


# -- a burst costs one upstream request per document and TTL ---------------------------

def test_burst_of_document_and_status_requests_shares_upstream_fetches(
        services: Services) -> None:
    app = services.shuffler.app
    before = len(services.upstream.requests)

    async def burst() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://shuffler") as http:
            paths = ["/v1/campaigns/c1", "/v1/campaigns/c1/hpke-config",
                     "/v1/campaigns/c1/rounds/1"] * 100
            answers = await asyncio.gather(*(http.get(p) for p in paths))
        return [a.status_code for a in answers]

    statuses = asyncio.run(burst())
    assert statuses == [200] * 300
    # one view and one key config, plus at most a refresh of the view per elapsed TTL
    fetched = [r for r in services.upstream.requests[before:]]
    assert 2 <= len(fetched) <= 4, fetched


# -- strict identifiers (R3) -----------------------------------------------------------

BAD_IDS = ["h1%0Ax", "d1%23x", "d1%3Fa%3Db", "c" * 65, "-c1", ".%2E", "c1%00", "c%20d"]


def _routes(cid: str) -> list[tuple[str, str, dict[str, Any]]]:
    base = f"/v1/campaigns/{cid}"
    operator = {"Authorization": f"Bearer {OPERATOR}"}
    return [
        ("GET", base, {}),
        ("GET", base + "/hpke-config", {}),
        ("POST", base + "/enrollments", {"json": {}}),
        ("POST", base + "/rounds/1/submissions",
         {"json": {"level": "x"}, "headers": {"Authorization": "Bearer t"}}),
        ("GET", base + "/rounds/1", {}),
        ("GET", base + "/rounds/2", {}),
        ("POST", base + "/rounds/1/release", {"headers": operator}),
    ]


def _snapshot(path: Path) -> dict[str, list[Any]]:
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall()) for t in tables}


@pytest.mark.parametrize("cid", BAD_IDS)
def test_invalid_campaign_ids_are_refused_on_every_route(services: Services, cid: str) -> None:
    before = _snapshot(services.shuffler_database)
    upstream_before = len(services.upstream.requests)
    for method, path, kwargs in _routes(cid):
        response = services.shuffler.request(method, path, **kwargs)
        assert 400 <= response.status_code < 500, (method, path, response.status_code)
        assert response.headers["content-type"].startswith(PROBLEM), (method, path)
        if response.status_code == 404:
            assert response.json()["type"] in ("urn:segshuffle:error:unknown-campaign",
                                               "urn:segshuffle:error:not-found")
    assert _snapshot(services.shuffler_database) == before, "a phantom campaign was created"
    assert len(services.upstream.requests) == upstream_before


def test_empty_campaign_id_is_not_found(services: Services) -> None:
    for method, path, kwargs in _routes(""):
        response = services.shuffler.request(method, path, **kwargs)
        assert response.status_code in (404, 405), (method, path)
        assert response.headers["content-type"].startswith(PROBLEM)


def test_valid_id_still_enrolls(services: Services) -> None:
    response = services.shuffler.post("/v1/campaigns/d1/enrollments", json={})
    assert response.status_code == 201
    assert response.json()["campaign_id"] == "d1"


def test_upstream_paths_are_escaped() -> None:
    from segshuffle.services.shuffler.upstream import server_path

    assert server_path("c1") == "/v1/campaigns/c1"
    assert server_path("d1#x", "rounds", 1) == "/v1/campaigns/d1%23x/rounds/1"
    assert server_path("a/b?c=d\n") == "/v1/campaigns/a%2Fb%3Fc%3Dd%0A"


@pytest.mark.parametrize("change", [{"upstream_connections": 0}, {"document_cache_entries": 0},
                                    {"campaign_cache_seconds": 0.0},
                                    {"upstream_pool_timeout": -1.0}])
def test_cache_and_pool_settings_are_checked(tmp_path: Path, change: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ShufflerSettings(database=str(tmp_path / "s.sqlite3"), server_token=SHUFFLER_TOKEN,
                         operator_token=OPERATOR, **OPEN, **change)

"""Observability in process, through HTTP only: /metrics on both services moves with
submissions and chunks and labels only route templates, the request id is echoed, /readyz
has the version, /docs uses local assets only."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from segshuffle import __version__
from segshuffle.services.server import create_app as create_server
from segshuffle.services.shuffler.app import create_app as create_shuffler
from segshuffle.services.shuffler.settings import Settings as ShufflerSettings
from segshuffle.services.shuffler.upstream import ServerLink

from .observability_support import (
    CID,
    OPEN,
    OPERATOR,
    USERS,
    Services,
    running_services,
    samples,
    submit_levels,
    value,
)
from .test_server_support import ADMIN, SHUFFLER_TOKEN, make_settings


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    with running_services(tmp_path) as running:
        yield running


@pytest.mark.slow  # about 7 s: the fast tier stays within 3 minutes
def test_metrics_move_with_submissions_and_chunks(services: Services) -> None:
    before = samples(services.shuffler)
    assert value(before, "segshuffle_shuffler_submissions_total", round="1") == 0
    users, sent = submit_levels(services)
    assert all(sent)
    middle = samples(services.shuffler)
    assert value(middle, "segshuffle_shuffler_submissions_total", round="1") == USERS
    assert value(middle, "segshuffle_shuffler_enrollments_total") == USERS
    submissions = "/v1/campaigns/{campaign_id}/rounds/{round_number}/submissions"
    assert value(middle, "segshuffle_http_requests_total", route=submissions, method="POST",
                 status="201") == USERS
    assert value(middle, "segshuffle_http_request_duration_seconds_count", route=submissions,
                 method="POST") == USERS
    assert value(middle, "segshuffle_shuffler_chunks_acknowledged_total", round="1") == 0
    released = services.shuffler.post(f"/v1/campaigns/{CID}/rounds/1/release?wait=true",
                                      headers={"Authorization": f"Bearer {OPERATOR}"})
    assert released.status_code == 200, released.text
    after = samples(services.shuffler)
    forwarded = value(after, "segshuffle_shuffler_chunks_forwarded_total")
    assert forwarded >= 1
    assert value(after, "segshuffle_shuffler_chunks_acknowledged_total", round="1") == forwarded
    assert value(after, "segshuffle_shuffler_releases_total", round="1") == 1
    server = samples(services.server)
    assert value(server, "segshuffle_server_chunks_stored_total", round="1",
                 stream="levels") == forwarded
    assert value(server, "segshuffle_server_messages_accepted_total", round="1",
                 stream="levels") == USERS
    assert value(server, "segshuffle_server_batches_completed_total", round="1") == 1
    batch = "/v1/campaigns/{campaign_id}/rounds/{round_number}/batches/{batch_id}"
    assert value(server, "segshuffle_http_requests_total", route=batch, method="PUT",
                 status="202") == forwarded  # accepted into the decode queue
    assert value(server, "segshuffle_server_chunks_queued_total", round="1",
                 stream="levels") == forwarded
    # Neither exposition names a campaign id, a token or a ciphertext.
    for client in (services.server, services.shuffler):
        text = client.get("/metrics").text
        for secret in (CID, OPERATOR, SHUFFLER_TOKEN, ADMIN["Authorization"].split()[1],
                       *(user.session.token for user in users), *sent):
            assert secret not in text


def test_unmatched_paths_share_one_label(services: Services) -> None:
    for path in ("/nothing/here", "/v1/secret-token-abc", "/v1/x/y/z"):
        assert services.shuffler.get(path).status_code == 404
    text = services.shuffler.get("/metrics").text
    assert "secret-token-abc" not in text and "/nothing" not in text
    assert value(samples(services.shuffler), "segshuffle_http_requests_total",
                 route="<unmatched>", method="GET", status="404") == 3


def test_request_id_is_echoed(services: Services) -> None:
    given = "req-1234.abc_DEF"
    response = services.server.get(f"/v1/campaigns/{CID}", headers={"X-Request-ID": given})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == given
    for bad in ("has space", "x" * 65, "semi;colon", ""):
        answered = services.shuffler.get("/livez", headers={"X-Request-ID": bad})
        assert re.fullmatch(r"[0-9a-f]{32}", answered.headers["x-request-id"])
    first = services.shuffler.get("/livez").headers["x-request-id"]
    assert first != services.shuffler.get("/livez").headers["x-request-id"]


def test_problem_answers_carry_the_request_id(services: Services) -> None:
    response = services.server.post("/v1/campaigns", json={}, headers={"X-Request-ID": "p-1"})
    assert response.status_code == 401
    assert response.headers["x-request-id"] == "p-1"
    assert value(samples(services.server), "segshuffle_http_requests_total",
                 route="/v1/campaigns", method="POST", status="401") == 1


def test_rate_limited_requests_are_counted(tmp_path: Path) -> None:
    settings = ShufflerSettings(database=str(tmp_path / "s.sqlite3"), server_url="http://x",
                                server_token=SHUFFLER_TOKEN, operator_token=OPERATOR,
                                enrollment="open", enroll_rate=0.001, enroll_burst=1)
    link = ServerLink("http://x", SHUFFLER_TOKEN,
                      transport=httpx.MockTransport(lambda _: httpx.Response(404)))
    with TestClient(create_shuffler(settings, link=link)) as shuffler:
        codes = [shuffler.post(f"/v1/campaigns/{CID}/enrollments").status_code
                 for _ in range(3)]
        assert codes.count(429) == 2
        found = samples(shuffler)
    assert value(found, "segshuffle_http_rate_limited_total",
                 route="/v1/campaigns/{campaign_id}/enrollments") == 2


@pytest.mark.parametrize(("answer", "status", "problem"), [
    (None, "unreachable", "none"),
    (httpx.Response(409, json={"type": "urn:segshuffle:error:wrong-phase"}), "409",
     "wrong-phase"),
    (httpx.Response(500, json={"type": "urn:segshuffle:error:made-up-1234"}), "500", "other"),
])
def test_upstream_errors_by_problem_type(tmp_path: Path, answer: httpx.Response | None,
                                         status: str, problem: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if answer is None:
            raise httpx.ConnectError("connection refused")
        return answer

    settings = ShufflerSettings(database=str(tmp_path / "s.sqlite3"), server_url="http://x",
                                server_token=SHUFFLER_TOKEN, operator_token=OPERATOR, **OPEN)
    link = ServerLink("http://x", SHUFFLER_TOKEN, transport=httpx.MockTransport(handler))
    with TestClient(create_shuffler(settings, link=link),
                    raise_server_exceptions=False) as shuffler:
        assert shuffler.get(f"/v1/campaigns/{CID}").status_code >= 400
        found = samples(shuffler)
    assert value(found, "segshuffle_shuffler_upstream_errors_total", status=status,
                 problem=problem) >= 1
    assert "made-up-1234" not in str(found)


def test_readyz_has_the_version_on_both(services: Services) -> None:
    for client in (services.server, services.shuffler):
        body = client.get("/readyz").json()
        assert body == {"status": "ready", "version": __version__}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href") and v is not None]


@pytest.mark.parametrize(("page", "assets"), [("/docs", 3), ("/redoc", 2)])
def test_docs_reference_no_external_host(services: Services, page: str, assets: int) -> None:
    for client in (services.server, services.shuffler):
        response = client.get(page)
        assert response.status_code == 200
        links = _Links()
        links.feed(response.text)
        assert len(links.urls) >= assets  # script, icon (and Swagger UI's stylesheet)
        assert "://" not in response.text and "cdn" not in response.text.lower()
        for url in links.urls:
            assert url.startswith("/") and not url.startswith("//"), url
            asset = client.get(url)
            assert asset.status_code == 200 and len(asset.content) > 100, url
        assert "/metrics" not in client.get("/openapi.json").json()["paths"]


def test_apps_have_their_own_registries(tmp_path: Path) -> None:
    first, second = (create_server(make_settings(tmp_path / name)) for name in ("a", "b"))
    with TestClient(first) as one, TestClient(second) as two:
        one.get("/livez")
        one.get("/livez")
        two.get("/livez")
        assert value(samples(one), "segshuffle_http_requests_total", route="/livez",
                     method="GET", status="200") == 2
        assert value(samples(two), "segshuffle_http_requests_total", route="/livez",
                     method="GET", status="200") == 1

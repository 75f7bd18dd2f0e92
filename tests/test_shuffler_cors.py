"""Web pages of listed origins may call the shuffler's client routes (services/cors.py);
nothing else gets a browser's consent, and by default nobody does."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from segshuffle.services.cors import parse_origins, route_matcher
from segshuffle.services.shuffler.app import CLIENT_ROUTES, create_app
from segshuffle.services.shuffler.settings import Settings

PAGE = "https://survey.example.org"
PREFLIGHT = {"origin": PAGE, "access-control-request-method": "POST",
             "access-control-request-headers": "authorization, content-type"}
CLIENT_PATHS = ["/v1/campaigns/c1", "/v1/campaigns/c1/hpke-config", "/v1/campaigns/c1/rounds/1",
                "/v1/campaigns/c1/enrollments", "/v1/campaigns/c1/rounds/2/submissions"]
OTHER_PATHS = ["/v1/campaigns/c1/rounds/1/release", "/metrics", "/openapi.json", "/livez"]


def _settings(tmp: Path, origins: str) -> Settings:
    return Settings(database=str(tmp / "shuffler.db"), key_directory=str(tmp / "keys"),
                    server_url="http://127.0.0.1:9", server_token="s" * 32,
                    operator_token="o" * 32, enrollment="open", forward_timeout=1.0,
                    cors_origins=origins)


@pytest.fixture
def shuffler(tmp_path: Path, environment: Callable[[Mapping[str, str]], None]
             ) -> Iterator[Callable[[str], TestClient]]:
    environment({})
    made: list[TestClient] = []

    def start(origins: str) -> TestClient:
        client = TestClient(create_app(_settings(tmp_path / str(len(made)), origins)),
                            raise_server_exceptions=False)
        made.append(client.__enter__())
        return client

    yield start
    for client in made:
        client.__exit__(None, None, None)


@pytest.mark.parametrize("path", CLIENT_PATHS)
def test_a_listed_page_may_call_the_client_routes(shuffler, path: str) -> None:
    client = shuffler(f"{PAGE}, http://127.0.0.1:8000")
    preflight = client.options(path, headers=PREFLIGHT)
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == PAGE
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "authorization" in preflight.headers["access-control-allow-headers"]
    assert "access-control-allow-credentials" not in preflight.headers
    # The request itself: refused here (no server behind), but the page may read why.
    answer = client.post(path, headers={"origin": PAGE}) if "/v1/" in path and (
        path.endswith(("enrollments", "submissions"))) else client.get(
        path, headers={"origin": PAGE})
    assert answer.headers["access-control-allow-origin"] == PAGE
    assert "etag" in answer.headers["access-control-expose-headers"]
    assert "Origin" in answer.headers["vary"]


@pytest.mark.parametrize("path", OTHER_PATHS)
def test_no_page_may_call_anything_else(shuffler, path: str) -> None:
    client = shuffler(PAGE)
    preflight = client.options(path, headers=PREFLIGHT)
    assert "access-control-allow-origin" not in preflight.headers
    assert "access-control-allow-origin" not in client.get(path, headers={"origin": PAGE}).headers


def test_an_unlisted_page_gets_no_consent_and_a_problem_document(shuffler) -> None:
    client = shuffler(PAGE)
    path = "/v1/campaigns/c1/enrollments"
    preflight = client.options(path, headers={**PREFLIGHT, "origin": "https://evil.example"})
    assert preflight.status_code == 405
    assert preflight.headers["content-type"].startswith("application/problem+json")
    assert "access-control-allow-origin" not in preflight.headers
    answer = client.post(path, headers={"origin": "https://evil.example"})
    assert "access-control-allow-origin" not in answer.headers
    assert "Origin" in answer.headers["vary"]  # a cache keeps the two apart


def test_by_default_nobody_is_listed(shuffler) -> None:
    client = shuffler("")
    for path in CLIENT_PATHS:
        preflight = client.options(path, headers=PREFLIGHT)
        assert preflight.status_code == 405
        assert "access-control-allow-origin" not in preflight.headers
        assert "vary" not in client.get(path, headers={"origin": PAGE}).headers or \
            "Origin" not in client.get(path, headers={"origin": PAGE}).headers["vary"]


@pytest.mark.parametrize("bad", ["*", "https://a.example/", "https://a.example/app",
                                 "ftp://a.example", "a.example", "https://user@a.example"])
def test_the_setting_takes_origins_only(tmp_path: Path, bad: str,
                                        environment: Callable[[Mapping[str, str]], None]
                                        ) -> None:
    environment({})
    with pytest.raises(ValidationError, match="not an origin"):
        _settings(tmp_path, f"https://ok.example, {bad}")
    with pytest.raises(ValueError, match="not an origin"):
        parse_origins(bad)


def test_origins_compare_case_insensitively_and_templates_match_one_segment() -> None:
    assert parse_origins(" HTTPS://Survey.Example.org ,http://127.0.0.1:8000,") == {
        "https://survey.example.org", "http://127.0.0.1:8000"}
    matches = route_matcher(CLIENT_ROUTES)
    assert matches("/v1/campaigns/c1/rounds/2/submissions")
    assert not matches("/v1/campaigns/c1/rounds/2/release")
    assert not matches("/v1/campaigns/c1/x/rounds/2/submissions")

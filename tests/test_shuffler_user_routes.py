"""The shuffler's user routes served directly (services/shuffler/app.py, ``UserRoutes``):
every answer is the one the FastAPI routes give, refusals in the same order, and the
request metrics name the same route templates.

Two copies of the application, one without the ``UserRoutes`` middleware (so its
FastAPI routes answer), get the same requests; the server is unreachable, so a request
that passes every check of the route ends at the campaign view (``unavailable``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from segshuffle.services.shuffler.app import ENROLL_PATH, SUBMIT_PATH, UserRoutes, create_app
from segshuffle.services.shuffler.service import ShufflerService
from segshuffle.services.shuffler.settings import Settings

TOKEN = "a" * 43
Request = tuple[str, str, dict[str, str], bytes]


def _app(tmp: Path, *, direct: bool, rates: bool) -> FastAPI:
    settings = Settings(
        database=str(tmp / "shuffler.db"), key_directory=str(tmp / "keys"),
        server_url="http://127.0.0.1:9", server_token="s" * 32, operator_token="o" * 32,
        enrollment="open", forward_timeout=1.0,
        **({"enroll_rate": 1.0, "enroll_burst": 2, "submit_rate": 1.0, "submit_burst": 2}
           if rates else {"enroll_rate": 0, "submit_rate": 0}))
    app = create_app(settings)
    if not direct:
        app.user_middleware = [m for m in app.user_middleware if m.cls is not UserRoutes]
    return app


@pytest.fixture
def clients(tmp_path: Path, environment: Callable[[Mapping[str, str]], None]
            ) -> Iterator[Callable[[bool], tuple[TestClient, TestClient]]]:
    environment({})
    made: list[TestClient] = []

    def pair(rates: bool) -> tuple[TestClient, TestClient]:
        both = []
        for direct in (True, False):
            where = tmp_path / f"{'direct' if direct else 'routed'}-{rates}"
            client = TestClient(_app(where, direct=direct, rates=rates),
                                raise_server_exceptions=False)
            made.append(client)
            both.append(client)
        return both[0], both[1]

    yield pair
    for client in made:
        client.close()


def _submission(campaign: str, round_number: str, **headers: str) -> Request:
    return ("POST", f"/v1/campaigns/{campaign}/rounds/{round_number}/submissions",
            {"x-request-id": "r1", **headers}, b'{"level": "x"}')


def _enrollment(campaign: str, body: bytes = b"", **headers: str) -> Request:
    return ("POST", f"/v1/campaigns/{campaign}/enrollments", {"x-request-id": "r1", **headers},
            body)


REQUESTS: list[Request] = [
    _submission("-bad", "7"),  # the campaign id first
    _submission("c1", "3"),  # then the round
    _submission("c1", "1"),  # then the token
    _submission("c1", "1", authorization="Basic abc"),
    _submission("c1", "2", authorization=f"Bearer {TOKEN}"),  # the campaign view: 503
    _submission("c1", "1", authorization=f"Bearer {TOKEN}", **{"content-type": "text/plain"}),
    ("GET", "/v1/campaigns/c1/rounds/1/submissions", {"x-request-id": "r1"}, b""),  # 405
    ("POST", "/v1/campaigns/c1/rounds/1/submissions/", {"x-request-id": "r1"}, b""),
    _enrollment("-bad"),
    _enrollment("c1"),
    _enrollment("c1", b'{"invitation": 5}', **{"content-type": "application/json"}),
    ("PUT", "/v1/campaigns/c1/enrollments", {"x-request-id": "r1"}, b""),
]


def _answer(client: TestClient, request: Request) -> tuple[int, list[tuple[str, str]], bytes]:
    method, path, headers, body = request
    response = client.request(method, path, headers=headers, content=body)
    return response.status_code, sorted(response.headers.items()), response.content


def _serves_directly(client: TestClient) -> bool:
    """Whether the client's application has a ``UserRoutes`` in its middleware stack."""
    layer = getattr(client.app, "middleware_stack", None)
    while layer is not None:
        if isinstance(layer, UserRoutes):
            return True
        layer = getattr(layer, "app", None)
    return False


def test_the_direct_routes_answer_as_the_fastapi_routes(
        clients: Callable[[bool], tuple[TestClient, TestClient]]) -> None:
    direct, routed = clients(False)
    for request in REQUESTS:
        assert _answer(direct, request) == _answer(routed, request), request
    assert _serves_directly(direct) and not _serves_directly(routed)
    metrics = [client.get("/metrics").text for client in (direct, routed)]
    requests = [sorted(line for line in text.splitlines()
                       if line.startswith("segshuffle_http_requests_total"))
                for text in metrics]
    assert requests[0] == requests[1]
    assert any(SUBMIT_PATH in line for line in requests[0])
    assert any(ENROLL_PATH in line for line in requests[0])


def test_rate_limits_come_after_the_campaign_id_and_before_the_round(
        clients: Callable[[bool], tuple[TestClient, TestClient]]) -> None:
    direct, routed = clients(True)
    sequence = [_submission("-bad", "1"), _submission("c1", "9"), _submission("c1", "9"),
                _submission("c1", "9"), _enrollment("c1"), _enrollment("c1"), _enrollment("c1")]
    answers = [[_answer(client, request) for request in sequence]
               for client in (direct, routed)]
    assert answers[0] == answers[1]
    assert [status for status, _, _ in answers[0]] == [404, 404, 404, 429, 503, 503, 429]


def test_an_error_without_a_handler_of_its_own_is_answered_as_by_the_routes(
        clients: Callable[[bool], tuple[TestClient, TestClient]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception the user routes have no handler for goes on to the outer layers (the
    catch-all ``internal`` problem), as out of FastAPI's routes."""
    async def broken(*_: object, **__: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ShufflerService, "authenticate_with_view", broken)
    direct, routed = clients(False)
    request = _submission("c1", "1", authorization=f"Bearer {TOKEN}")
    answers = [_answer(client, request) for client in (direct, routed)]
    assert answers[0] == answers[1]
    assert answers[0][0] == 500 and b"error:internal" in answers[0][2]


def test_the_user_routes_refuse_a_handler_they_could_not_await(tmp_path: Path) -> None:
    app = _app(tmp_path, direct=True, rates=False)

    def blocking(_: object, exc: Exception) -> None:
        return None

    app.add_exception_handler(KeyError, blocking)
    with pytest.raises(TypeError, match="coroutine handlers"):
        TestClient(app).__enter__()

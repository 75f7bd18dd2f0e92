"""Problem handlers: every error of an app is an RFC 9457 problem body."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict

from segshuffle.services.http_edge import BodySizeLimit, install_problem_handlers
from segshuffle.wire.problems import (
    PROBLEM_MEDIA_TYPE,
    PROBLEM_TYPES,
    Problem,
    ProblemType,
    problem_uri,
)


class Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    n: int
    secret: str


@pytest.fixture(scope="module")
def client():
    app = FastAPI()
    install_problem_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=1000)

    @app.post("/echo")
    def echo(body: Body) -> dict:
        return {"n": body.n}

    @app.get("/conflict")
    def conflict() -> dict:
        raise Problem("wrong-phase", "not now", extra={"phase": "round2"})

    @app.get("/boom")
    def boom() -> dict:
        raise RuntimeError("unexpected")

    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def assert_problem(response, name, status):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    body = response.json()
    assert body["type"] == problem_uri(name)
    assert body["status"] == status
    assert body["title"] and body["detail"]
    return body


def test_every_type_is_a_urn():
    assert all(p.uri == f"urn:segshuffle:error:{n}" for n, p in PROBLEM_TYPES.items())
    with pytest.raises(KeyError):
        Problem("no-such-type", "x")


def test_problem_types_are_an_enum_of_distinct_names():
    assert len(PROBLEM_TYPES) == len(ProblemType)
    assert Problem(ProblemType.WRONG_PHASE, "x").body() == Problem("wrong-phase", "x").body()
    assert ProblemType.WRONG_PHASE.status == 409 and ProblemType.WRONG_PHASE.title


def test_raised_problem(client):
    body = assert_problem(client.get("/conflict"), "wrong-phase", 409)
    assert body["phase"] == "round2"


def test_malformed_json(client):
    response = client.post("/echo", content=b"{not json",
                           headers={"content-type": "application/json"})
    assert_problem(response, "malformed-body", 400)


def test_wrong_types_never_echo_the_input(client):
    body = assert_problem(client.post("/echo", json={"n": "1", "secret": 5}),
                          "invalid-field", 422)
    assert "errors" in body
    response = client.post("/echo", json={"n": 1, "secret": ["TOPSECRETVALUE"]})
    assert "TOPSECRETVALUE" not in response.text
    assert_problem(client.post("/echo", json=[1, 2]), "invalid-field", 422)


def test_not_found_and_method_not_allowed(client):
    assert_problem(client.get("/nowhere"), "not-found", 404)
    assert_problem(client.get("/echo"), "method-not-allowed", 405)


def test_unexpected_error_is_still_a_problem(client):
    assert_problem(client.get("/boom"), "internal", 500)


def test_body_too_large(client):
    big = {"n": 1, "secret": "x" * 2000}
    assert_problem(client.post("/echo", json=big), "body-too-large", 413)

    def chunks():
        for _ in range(5):
            yield b"x" * 400

    response = client.post("/echo", content=chunks(), headers={"content-type": "application/json"})
    assert_problem(response, "body-too-large", 413)


def test_every_domain_error_has_one_problem_type():
    from segshuffle.services import errors
    from segshuffle.services.http_edge import DOMAIN_PROBLEMS, domain_problem

    classes = {cls for cls in vars(errors).values()
               if isinstance(cls, type) and issubclass(cls, errors.DomainError)
               and cls is not errors.DomainError}
    assert classes == set(DOMAIN_PROBLEMS)
    body = domain_problem(errors.WrongPhaseError("not now", extra={"phase": "done"})).body()
    assert body["type"] == problem_uri("wrong-phase") and body["phase"] == "done"
    assert body["status"] == 409 and body["detail"] == "not now"

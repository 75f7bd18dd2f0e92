"""Schemathesis against both services' own OpenAPI documents, over real HTTP.

A few thousand generated requests (valid and invalid bodies, odd path segments, every
documented operation, with the token each route needs): no answer is a 5xx, every
error is an RFC 9457 problem document, and every answer conforms to the document
(its status and media type are documented for the operation).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi import checks

from segshuffle.services.server.app import SECURITY as SERVER_SECURITY
from segshuffle.services.shuffler.app import SECURITY as SHUFFLER_SECURITY
from segshuffle.testing.localstack import LocalStack

pytestmark = pytest.mark.slow  # both services as real processes, thousands of requests

EXAMPLES = 150
CONFORMANCE = [not_a_server_error, checks.status_code_conformance,
               checks.content_type_conformance, checks.response_schema_conformance]
"""Every answer documented (status, media type, schema).  Schema-valid requests may still be
refused: the models check rules JSON Schema cannot say (items or domain_size, the caps)."""
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(tmp_path_factory.mktemp("fuzz"), min_users=2) as running:
        running.create_campaign({"id": "c", "domain_size": 4, "set_size": 1,
                                 "levels": [1.0, 2.0], "min_users": 3})
        yield running


@pytest.fixture(scope="module")
def server_schema(stack: LocalStack) -> schemathesis.schemas.BaseSchema:
    return schemathesis.openapi.from_url(f"{stack.server_url}/openapi.json")


@pytest.fixture(scope="module")
def shuffler_schema(stack: LocalStack) -> schemathesis.schemas.BaseSchema:
    return schemathesis.openapi.from_url(f"{stack.shuffler_url}/openapi.json")


@pytest.fixture(scope="module")
def user_token(stack: LocalStack) -> str:
    answer = httpx.post(f"{stack.shuffler_url}/v1/campaigns/c/enrollments",
                        json={"invitation": stack.invitations("c", 1)[0]}, timeout=30)
    return str(answer.json()["token"])


def _check(case: schemathesis.Case, response: object) -> None:
    status = response.status_code  # type: ignore[attr-defined]
    assert status < 500, (case.operation.label, status, response.text)  # type: ignore[attr-defined]
    if status >= 400:
        media = response.headers.get("content-type", [""])[0]  # type: ignore[attr-defined]
        assert media.startswith("application/problem+json"), (case.operation.label, media)
        body = response.json()  # type: ignore[attr-defined]
        assert body["type"].startswith("urn:segshuffle:error:") and body["status"] == status
    case.validate_response(response, checks=CONFORMANCE)


def _fuzz(schema: schemathesis.schemas.BaseSchema, security: dict[tuple[str, str], str],
          tokens: dict[str, str]) -> int:
    """Run every operation of ``schema`` with generated cases; returns the request count."""
    sent = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        role = security.get((operation.method.upper(), operation.path))
        headers = {"Authorization": f"Bearer {tokens[role]}"} if role else {}

        @given(case=operation.as_strategy())
        @FUZZ
        def run(case: schemathesis.Case) -> None:
            nonlocal sent
            sent += 1
            _check(case, case.call(headers=headers))  # noqa: B023 (run() is called at once)

        run()
    return sent


def test_server_api(server_schema: schemathesis.schemas.BaseSchema, stack: LocalStack) -> None:
    sent = _fuzz(server_schema, SERVER_SECURITY, {"adminToken": stack.admin_token,
                                                  "shufflerToken": stack.shuffler_token})
    assert sent >= 5 * EXAMPLES


def test_shuffler_api(shuffler_schema: schemathesis.schemas.BaseSchema, stack: LocalStack,
                      user_token: str) -> None:
    sent = _fuzz(shuffler_schema, SHUFFLER_SECURITY, {"operatorToken": stack.operator_token,
                                                      "userToken": user_token})
    assert sent >= 4 * EXAMPLES

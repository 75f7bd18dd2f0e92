"""Request bodies must be I-JSON: a duplicate member, an integer
beyond 2^53 - 1, an overflowing number or NaN is a 400 problem, not a silent choice."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from segshuffle.services.server import create_app

from .test_server_support import ADMIN, make_settings

GOOD = ('"domain_size":4,"set_size":1,"levels":[1.0,2.0],"min_users":10')


@pytest.fixture
def client(tmp_path: Path):
    with TestClient(create_app(make_settings(tmp_path))) as test_client:
        yield test_client


def _post(client: TestClient, body: str):
    return client.post("/v1/campaigns", headers={**ADMIN, "content-type": "application/json"},
                       content=body.encode())


@pytest.mark.parametrize(("body", "named"), [
    ('{"id":"a","id":"b",' + GOOD + '}', "'id' appears twice"),
    ('{"id":"c",' + GOOD + ',"min_users":12}', "'min_users' appears twice"),
    ('{"id":"d","domain_size":4,"set_size":1,"levels":[1.0,2.0],"min_users":9007199254740993}',
     "beyond 2^53 - 1"),
    ('{"id":"e","domain_size":4,"set_size":1,"levels":[1.0,1e400],"min_users":10}',
     "beyond the range of a double"),
    ('{"id":"f","domain_size":4,"set_size":1,"levels":[1.0,NaN],"min_users":10}',
     "NaN is not JSON"),
])
def test_a_body_that_is_not_strict_json_is_refused(client: TestClient, body: str,
                                                    named: str) -> None:
    answer = _post(client, body)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["type"].endswith("malformed-body") and named in answer.json()["detail"]
    assert client.get("/v1/campaigns/b", headers=ADMIN).status_code == 404  # nothing created


def test_strict_json_passes(client: TestClient) -> None:
    assert _post(client, '{"id":"ok",' + GOOD + '}').status_code == 201
    assert _post(client, '{"id":"bad"').status_code == 400  # not JSON: still malformed

"""Arbitrary request bodies never get a 500 or a non-problem error body."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segshuffle.services.server import create_app

from .test_server_support import ADMIN, SHUFFLER, make_settings

FIXTURE = [HealthCheck.function_scoped_fixture]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=12,
)
campaign_fields = st.fixed_dictionaries({}, optional={
    "id": st.sampled_from(["a", "b-1", "", " ", "x" * 70]) | st.text(max_size=5),
    "items": st.lists(st.text(max_size=4), max_size=5) | json_values,
    "domain_size": st.integers(-3, 10) | json_values,
    "set_size": st.integers(-1, 12) | json_values,
    "levels": st.lists(st.floats(-1, 40), max_size=4) | json_values,
    "delta": st.floats(-1, 2) | json_values,
    "min_users": st.integers(-1, 5) | json_values,
    "dropout_tolerance": st.floats(-1, 2) | json_values,
    "level_privacy": st.none() | st.floats(-1, 40),
    "insecure_parameters": json_values,
})
chunk_fields = st.fixed_dictionaries({}, optional={
    "chunk_index": st.integers(-2, 3) | json_values,
    "chunk_count": st.integers(-1, 3) | json_values,
    "stream": st.sampled_from(["levels", "data", "x"]) | json_values,
    "ciphertexts": st.lists(st.text(alphabet="AB_-=", min_size=100, max_size=110),
                            max_size=3) | json_values,
})


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app(make_settings(tmp_path_factory.mktemp("fuzz")))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        test_client.post("/v1/campaigns", headers=ADMIN, json={
            "id": "f", "domain_size": 3, "set_size": 1, "levels": [1], "min_users": 2})
        yield test_client


def check(response):
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["type"].startswith("urn:segshuffle:error:")


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE)
@given(body=campaign_fields | json_values)
def test_campaign_bodies(client, body):
    check(client.post("/v1/campaigns", headers=ADMIN, json=body))


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE)
@given(body=chunk_fields | json_values, round_=st.sampled_from(["1", "2", "0", "x"]),
       batch=st.sampled_from(["b", "b.2", "-", "%20"]))
def test_chunk_bodies(client, body, round_, batch):
    check(client.put(f"/v1/campaigns/f/rounds/{round_}/batches/{batch}", headers=SHUFFLER,
                     json=body))


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE)
@given(raw=st.binary(max_size=200))
def test_raw_bytes(client, raw):
    check(client.post("/v1/campaigns", headers={**ADMIN, "content-type": "application/json"},
                      content=raw))

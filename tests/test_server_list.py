"""``GET /v1/campaigns`` (admin): campaign ids with their phase, keyset-paginated."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from segshuffle.services.server import create_app

from .test_server_errors import assert_problem
from .test_server_support import ADMIN, SHUFFLER, make_settings


def _campaign(cid: str) -> dict[str, object]:
    return {"id": cid, "domain_size": 4, "set_size": 1, "levels": [1, 2], "min_users": 3,
            "dropout_tolerance": 0.0}


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(make_settings(tmp_path)), raise_server_exceptions=False) as c:
        yield c


def test_lists_created_campaigns_with_phase_and_pages(client: TestClient) -> None:
    assert client.get("/v1/campaigns", headers=ADMIN).json() == {"campaigns": [],
                                                                 "next": None}
    for cid in ("c2", "a1", "b3"):
        assert client.post("/v1/campaigns", json=_campaign(cid), headers=ADMIN).status_code \
            == 201
    assert client.post("/v1/campaigns/b3/abort", headers=ADMIN).status_code == 200
    listed = client.get("/v1/campaigns", headers=ADMIN).json()
    assert listed == {"campaigns": [{"id": "a1", "phase": "round1"},
                                    {"id": "b3", "phase": "aborted"},
                                    {"id": "c2", "phase": "round1"}], "next": None}
    first = client.get("/v1/campaigns", params={"limit": 2}, headers=ADMIN).json()
    assert [c["id"] for c in first["campaigns"]] == ["a1", "b3"] and first["next"] == "b3"
    second = client.get("/v1/campaigns", params={"limit": 2, "after": first["next"]},
                        headers=ADMIN).json()
    assert second == {"campaigns": [{"id": "c2", "phase": "round1"}], "next": None}


@pytest.mark.parametrize("headers, name, status", [
    ({}, "unauthorized", 401),
    ({"Authorization": "Bearer wrong-token-xxxxxxxx"}, "unauthorized", 401),
    (SHUFFLER, "forbidden", 403),
])
def test_needs_the_admin_token(client: TestClient, headers, name, status) -> None:
    client.post("/v1/campaigns", json=_campaign("c1"), headers=ADMIN)
    body = assert_problem(client.get("/v1/campaigns", headers=headers), name, status)
    assert "c1" not in str(body)


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"limit": "x"},
                                    {"limit": "-1"}, {"limit": "1e3"}, {"limit": "٣"},
                                    {"after": "bad id"}, {"after": "x" * 65}])
def test_bad_paging_is_a_problem(client: TestClient, params) -> None:
    assert_problem(client.get("/v1/campaigns", params=params, headers=ADMIN),
                   "invalid-field", 422)
    # validated only after authentication
    assert_problem(client.get("/v1/campaigns", params=params), "unauthorized", 401)


def test_documented_as_admin_only(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/campaigns"]["get"]
    assert operation["security"] == [{"adminToken": []}]

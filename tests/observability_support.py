"""In-process server and shuffler for the observability tests, and /metrics parsing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from segshuffle.client import Client
from segshuffle.client.policy import ClientPolicy
from segshuffle.core.rules import default_delta
from segshuffle.services.server import create_app as create_server
from segshuffle.services.shuffler.app import create_app as create_shuffler
from segshuffle.services.shuffler.settings import Settings as ShufflerSettings
from segshuffle.services.shuffler.upstream import ServerLink

from .test_server_support import ADMIN, SHUFFLER_TOKEN, make_settings

OPERATOR = "operator-token-0123456789"
CID = "metrics-cid-7f3a"
USERS = 3
#: The SDK users' policy: a campaign of USERS users (below the SDK's default floor), with
#: the default delta rule's 0.01 / USERS.
POLICY = ClientPolicy(min_users=USERS, delta_ceiling=default_delta(USERS))
OPEN: dict[str, Any] = {"enrollment": "open", "enroll_rate": 0.0, "submit_rate": 0.0}


def samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``GET /metrics`` parsed: (sample name, sorted labels) -> value."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


@dataclass
class Services:
    server: TestClient
    shuffler: TestClient


@contextmanager
def running_services(tmp_path: Path) -> Iterator[Services]:
    """Both apps in process, the shuffler reaching the server through an ASGI transport,
    with campaign :data:`CID` created (open enrollment, no rate limits)."""
    server_app = create_server(make_settings(tmp_path))
    settings = ShufflerSettings(database=str(tmp_path / "shuffler.sqlite3"),
                                server_url="http://server", server_token=SHUFFLER_TOKEN,
                                operator_token=OPERATOR, min_users=2, **OPEN)
    link = ServerLink(settings.server_url, settings.server_token,
                      transport=httpx.ASGITransport(app=server_app))
    with TestClient(server_app) as server, \
            TestClient(create_shuffler(settings, link=link)) as shuffler:
        response = server.post("/v1/campaigns", headers=ADMIN, json={
            "id": CID, "domain_size": 4, "set_size": 1, "levels": [1, 2],
            "min_users": USERS})
        assert response.status_code == 201, response.text
        yield Services(server, shuffler)


def submit_levels(services: Services) -> tuple[list[Client], list[str]]:
    """USERS SDK clients through the in-process shuffler: each enrolls and sends round 1;
    returns the clients and their level ciphertexts (base64url)."""
    users = [Client("http://testserver", CID, http=services.shuffler, policy=POLICY)
             for _ in range(USERS)]
    sent = []
    for index, user in enumerate(users):
        user.campaign()
        user.enroll()
        sent.append(user.submit_level(index % 2).level_ciphertext)
    return users, sent

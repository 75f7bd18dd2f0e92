"""Automatic release: with SEGSHUFFLE_SHUFFLER_AUTO_RELEASE=N the shuffler releases a round
by itself once it has N participants and the campaign's threshold is met.  Users enroll with
invitations; enrollment without one, or with a bad one, is refused."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.population import Population

from .test_e2e_support import run_rounds

pytestmark = pytest.mark.slow  # real service processes end to end


def _state(stack: LocalStack, round_number: int) -> dict[str, object]:
    url = f"{stack.shuffler_url}/v1/campaigns/auto/rounds/{round_number}"
    return dict(httpx.get(url, timeout=10).json())


def _wait_released(stack: LocalStack, round_number: int) -> None:
    deadline = time.monotonic() + 60
    while _state(stack, round_number)["state"] != "released":
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_rounds_release_themselves_at_the_target(tmp_path: Path) -> None:
    users = 30
    env = {"SEGSHUFFLE_SHUFFLER_AUTO_RELEASE": str(users)}
    with LocalStack(tmp_path, min_users=2, shuffler_env=env) as stack:
        stack.create_campaign({"id": "auto", "domain_size": 6, "set_size": 2,
                               "levels": [1.0, 2.0], "min_users": 10})
        enroll = f"{stack.shuffler_url}/v1/campaigns/auto/enrollments"
        for body, status, problem in (({}, 401, "invitation-required"),
                                      ({"invitation": "wrong"}, 403, "invalid-invitation")):
            refused = httpx.post(enroll, json=body, timeout=10)
            assert refused.status_code == status
            assert refused.json()["type"] == f"urn:segshuffle:error:{problem}"
        sets = [[i % 6, (i + 1) % 6] for i in range(users)]
        population = Population(stack.shuffler_url, "auto", sets,
                                [i % 2 for i in range(users)], seed=1,
                                server_key=stack.server_key,
                                invitations=stack.invitations("auto", users))
        run_rounds(population, 1, indices=range(users - 1))
        assert _state(stack, 1)["state"] == "open"  # one short of the target
        run_rounds(population, 1, indices=[users - 1])
        _wait_released(stack, 1)
        assert stack.campaign("auto").phase == "round2"
        run_rounds(population, 2)
        _wait_released(stack, 2)
        results = stack.results("auto")
        assert results.privacy.round2_users == users

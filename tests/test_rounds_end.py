"""Every round ends (live services): too few valid messages, or an admin's abort, end the
campaign without results, and the shuffler stops forwarding and forgets the round."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from segshuffle.client import CampaignEndedError, Client, ServiceError
from segshuffle.testing.localstack import LocalStack
from segshuffle.wire.models import b64url_encode

from .sqlite_backend import pending_messages

pytestmark = pytest.mark.slow  # both services as real processes


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(tmp_path_factory.mktemp("ends"), min_users=2) as running:
        yield running


def _users(stack: LocalStack, cid: str, count: int) -> list[Client]:
    users = []
    for index, invitation in enumerate(stack.invitations(cid, count)):
        user = Client(stack.shuffler_url, cid, server_key=stack.server_key,
                      policy=stack.client_policy())
        user.campaign()
        user.enroll(invitation)
        user.submit_level(index % 2)
        users.append(user)
    return users


def _status(stack: LocalStack, cid: str, round_number: int) -> dict[str, object]:
    return dict(httpx.get(f"{stack.shuffler_url}/v1/campaigns/{cid}/rounds/{round_number}",
                          timeout=30).json())


def _stored(stack: LocalStack, cid: str) -> int:
    """Ciphertexts waiting in the running shuffler's file for the campaign."""
    return pending_messages(stack.database_path("shuffler"), cid)


def _keys(stack: LocalStack) -> list[Path]:
    return list(Path(f"{stack.database_path('shuffler')}.keys").glob("round-*.key"))


def test_garbage_below_the_threshold_fails_the_campaign_instead_of_wedging(
        stack: LocalStack) -> None:
    """R2: 14 participants, 4 of them garbage: 10 valid levels < 11 required."""
    cid = "wedge"
    stack.create_campaign({"id": cid, "domain_size": 8, "set_size": 1, "levels": [1.0, 2.0],
                           "min_users": 11})
    users = _users(stack, cid, 10)
    for number, invitation in enumerate(stack.invitations(cid, 4)):
        token = httpx.post(f"{stack.shuffler_url}/v1/campaigns/{cid}/enrollments",
                           json={"invitation": invitation}, timeout=30).json()["token"]
        answer = httpx.post(
            f"{stack.shuffler_url}/v1/campaigns/{cid}/rounds/1/submissions",
            json={"level": b64url_encode(bytes([number]) * 80)},  # distinct: no replay
            headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert answer.status_code == 201
    with pytest.raises(ServiceError, match="ended without results") as refused:
        stack.release(cid, 1)
    assert refused.value.problem == "wrong-phase"
    status = _status(stack, cid, 1)
    assert status["state"] == "failed" and "10 valid level messages" in str(status["reason"])
    view = stack.campaign(cid)
    assert view.phase == "failed" and "at least 11" in str(view.end_reason)
    assert _stored(stack, cid) == 0
    with pytest.raises(CampaignEndedError, match="failed"):
        users[0].wait_for_phase("round2", timeout=10)
    for user in users:
        user.close()


def test_an_aborted_campaign_is_forgotten_by_the_shuffler(stack: LocalStack) -> None:
    cid = "abort"
    stack.create_campaign({"id": cid, "domain_size": 8, "set_size": 1, "levels": [1.0, 2.0],
                           "min_users": 3})
    users = _users(stack, cid, 4)
    assert _stored(stack, cid) == 4 and _keys(stack)
    stack.abort(cid, "the item list was wrong")
    deadline = time.monotonic() + 20  # the shuffler's view of the campaign may be cached
    while (status := _status(stack, cid, 1))["state"] != "failed":
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    assert status["reason"] == "the campaign aborted: the item list was wrong"
    assert _stored(stack, cid) == 0
    assert _keys(stack) == []
    late = Client(stack.shuffler_url, cid, server_key=stack.server_key,
                  policy=stack.client_policy())
    with pytest.raises(ServiceError) as refused:
        late.enroll(stack.invitations(cid, 1)[0])
    assert refused.value.problem == "wrong-phase"
    with pytest.raises(ServiceError) as refused:
        stack.release(cid, 1)
    assert refused.value.problem == "wrong-phase"
    for user in [*users, late]:
        user.close()

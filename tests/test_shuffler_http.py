"""Bad input on the live shuffler: each refusal has the right problem type and leaves the
state unchanged (the participant count and the stored ciphertexts stay as they were)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from segshuffle.client import Client
from segshuffle.testing.localstack import LocalStack
from segshuffle.wire.models import CIPHERTEXT_B64_LENGTH, b64url_encode

from .sqlite_backend import pending_messages

pytestmark = pytest.mark.slow  # both services as real processes

CID = "bad"
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(tmp_path_factory.mktemp("bad"), min_users=2) as running:
        running.create_campaign({"id": CID, "domain_size": 8, "set_size": 2,
                                 "levels": [1.0, 2.0], "min_users": 3})
        yield running


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


def _status(stack: LocalStack, http: httpx.Client, round_number: int = 1) -> dict[str, Any]:
    return dict(http.get(f"{stack.shuffler_url}/v1/campaigns/{CID}/rounds/{round_number}")
                .json())


def _stored(stack: LocalStack, cid: str = CID) -> int:
    """Ciphertexts waiting in the running shuffler's file for the campaign."""
    return pending_messages(stack.database_path("shuffler"), cid)


def _problem(response: httpx.Response, status: int, name: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["type"] == f"urn:segshuffle:error:{name}", body
    assert body["status"] == status and body["title"] and body["detail"]


def _submit(stack: LocalStack, http: httpx.Client, token: str | None, round_number: int = 1,
            cid: str = CID, **kwargs: Any) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    headers.update(kwargs.pop("headers", {}))
    return http.post(f"{stack.shuffler_url}/v1/campaigns/{cid}/rounds/{round_number}/submissions",
                     headers=headers, **kwargs)


@pytest.fixture(scope="module")
def user(stack: LocalStack) -> Iterator[Client]:
    """One real user who enrolled and submitted round 1 (state to protect)."""
    with Client(stack.shuffler_url, CID, server_key=stack.server_key,
                policy=stack.client_policy()) as client:
        client.campaign()
        client.enroll(stack.invitations(CID, 1)[0])
        client.submit_level(1)
        yield client


def test_refusals_leave_the_state_unchanged(stack: LocalStack, http: httpx.Client,
                                            user: Client) -> None:
    token = user.session.token
    assert token is not None
    before = (_status(stack, http)["participants"], _stored(stack))
    assert before == (1, 1)
    other = http.post(f"{stack.shuffler_url}/v1/campaigns/{CID}/enrollments",
                      json={"invitation": stack.invitations(CID, 1)[0]}).json()
    fresh = other["token"]
    valid = {"level": b64url_encode(bytes(80))}

    _problem(_submit(stack, http, fresh, content=b"{not json"), 400, "malformed-body")
    _problem(_submit(stack, http, fresh, json={"level": 5}), 422, "invalid-field")
    _problem(_submit(stack, http, fresh, json=["level"]), 422, "invalid-field")
    _problem(_submit(stack, http, fresh, json={"level": "A" * CIPHERTEXT_B64_LENGTH,
                                               "extra": 1}), 422, "invalid-field")
    _problem(_submit(stack, http, fresh, json={"level": b64url_encode(bytes(79))}), 422,
             "invalid-field")  # ciphertexts of another length are refused
    _problem(_submit(stack, http, fresh, json={}), 422, "invalid-field")
    _problem(_submit(stack, http, fresh, content=b"x" * (2 << 20),
                     headers={"Content-Type": "application/json"}), 413, "body-too-large")
    _problem(_submit(stack, http, fresh, json=valid, headers={"Content-Type": "text/plain"}),
             415, "unsupported-media-type")
    _problem(_submit(stack, http, fresh, cid="nope", json=valid), 404, "unknown-campaign")
    _problem(_submit(stack, http, fresh, round_number=3, json=valid), 404, "unknown-round")
    _problem(_submit(stack, http, fresh, round_number=2,
                     json={"level": valid["level"], "data": [valid["level"]]}), 409,
             "wrong-phase")
    _problem(_submit(stack, http, token, json=valid), 409, "already-submitted")
    _problem(_submit(stack, http, "not-a-token", json=valid), 401, "unauthorized")
    _problem(_submit(stack, http, None, json=valid), 401, "unauthorized")
    _problem(_submit(stack, http, fresh, json=valid, headers={"Authorization": "Basic abc"}),
             401, "unauthorized")
    _problem(http.post(f"{stack.shuffler_url}/v1/campaigns/nope/enrollments", json={}), 404,
             "unknown-campaign")
    _problem(http.post(f"{stack.shuffler_url}/v1/campaigns/{CID}/enrollments",
                       json={"invitation": 7}), 422, "invalid-field")
    _problem(http.get(f"{stack.shuffler_url}/v1/nowhere"), 404, "not-found")
    _problem(http.delete(f"{stack.shuffler_url}/v1/campaigns/{CID}/enrollments"), 405,
             "method-not-allowed")

    release = f"{stack.shuffler_url}/v1/campaigns/{CID}/rounds/1/release"
    _problem(http.post(release), 401, "unauthorized")
    _problem(http.post(release, headers={"Authorization": "Bearer wrong"}), 403, "forbidden")
    operator = {"Authorization": f"Bearer {stack.operator_token}"}
    response = http.post(release, headers=operator)
    _problem(response, 409, "not-enough-participants")
    assert response.json()["participants"] == 1 and response.json()["required"] == 3

    assert (_status(stack, http)["participants"], _stored(stack)) == before
    assert _status(stack, http)["state"] == "open"
    # a token of this campaign is still good for its first submission
    assert _submit(stack, http, fresh, json=valid).status_code == 201
    assert (_status(stack, http)["participants"], _stored(stack)) == (2, 2)


def test_round_two_checks_the_submission_size(stack: LocalStack, http: httpx.Client) -> None:
    """Round 2 on a campaign of its own: one garbage level and three valid ones."""
    cid = "size"
    stack.create_campaign({"id": cid, "domain_size": 8, "set_size": 2,
                           "levels": [1.0, 2.0], "min_users": 3})
    users = [Client(stack.shuffler_url, cid, server_key=stack.server_key,
                    policy=stack.client_policy()) for _ in range(3)]
    try:
        invitations = stack.invitations(cid, len(users) + 1)
        for index, member in enumerate(users):
            member.campaign()
            member.enroll(invitations[index])
            member.submit_level((index + 1) % 2)
        garbage = http.post(f"{stack.shuffler_url}/v1/campaigns/{cid}/enrollments",
                            json={"invitation": invitations[-1]}).json()["token"]
        ct = b64url_encode(bytes(80))
        assert _submit(stack, http, garbage, cid=cid, json={"level": ct}).status_code == 201
        stack.release(cid, 1)
        user = users[0]
        parameters = user.fetch_parameters()
        expected = parameters.messages_per_user
        token = user.session.token
        _problem(_submit(stack, http, token, round_number=2, cid=cid,
                         json={"level": ct, "data": [ct] * (expected + 1)}), 422,
                 "wrong-submission-size")
        _problem(_submit(stack, http, token, round_number=1, cid=cid, json={"level": ct}),
                 409, "wrong-phase")
        # the server counts only valid level messages: 3 of the 4 participants
        assert stack.campaign(cid).parameters.users == 3  # type: ignore[union-attr]
        assert _status_of(stack, http, cid)["participants"] == 0
        sent = user.submit_data([1, 2, 3])
        assert len(sent.slots) == expected
        assert _status_of(stack, http, cid)["participants"] == 1
        _problem(_submit(stack, http, token, round_number=2, cid=cid,
                         json={"level": ct, "data": [ct] * expected}), 409,
                 "already-submitted")
        assert _status_of(stack, http, cid)["participants"] == 1
        # dropouts: round 2 is never released below n_min = ceil((1 - tau) n1), n1 = 4 here
        assert _status_of(stack, http, cid)["required"] == 4
        response = http.post(f"{stack.shuffler_url}/v1/campaigns/{cid}/rounds/2/release",
                             headers={"Authorization": f"Bearer {stack.operator_token}"})
        _problem(response, 409, "not-enough-participants")
        assert _status_of(stack, http, cid)["state"] == "open"
    finally:
        for member in users:
            member.close()


def test_health_and_openapi(stack: LocalStack, http: httpx.Client) -> None:
    assert http.get(f"{stack.shuffler_url}/livez").json()["status"] == "ok"
    assert http.get(f"{stack.shuffler_url}/readyz").json()["status"] == "ready"
    schema = http.get(f"{stack.shuffler_url}/openapi.json").json()
    assert "/v1/campaigns/{campaign_id}/rounds/{round_number}/submissions" in schema["paths"]
    assert http.get(f"{stack.shuffler_url}/docs").status_code == 200


def test_log_has_no_tokens_or_addresses(stack: LocalStack, user: Client) -> None:
    text = Path(stack.log_path("shuffler")).read_text()
    assert user.session.token and user.session.token not in text
    assert "127.0.0.1:" not in text.replace(f"127.0.0.1:{stack.ports['shuffler']}", "")
    assert stack.operator_token not in text and stack.shuffler_token not in text
    metrics = httpx.get(f"{stack.shuffler_url}/metrics", timeout=30).text
    assert "segshuffle_shuffler_submissions_total" in metrics
    for secret in (user.session.token, stack.operator_token, stack.shuffler_token, CID,
                   "127.0.0.1"):
        assert secret not in metrics


def test_independent_campaign_takes_s_plus_d_messages(stack: LocalStack,
                                                     http: httpx.Client) -> None:
    """A campaign in the independent blanket mode: the published messages_per_user is
    s + D, the SDK sends exactly that many, and the shuffler refuses other sizes."""
    cid = "independent"
    stack.create_campaign({"id": cid, "domain_size": 8, "set_size": 2, "levels": [1.0, 2.0],
                           "min_users": 3, "blanket_mode": "independent"})
    users = [Client(stack.shuffler_url, cid, server_key=stack.server_key,
                    policy=stack.client_policy()) for _ in range(3)]
    try:
        invitations = stack.invitations(cid, len(users))
        for index, user in enumerate(users):
            user.campaign()
            user.enroll(invitations[index])
            user.submit_level(index % 2)
        stack.release(cid, 1)
        parameters = users[0].fetch_parameters()
        assert parameters.blanket_mode == "independent"
        assert parameters.blanket_slots == parameters.privacy_domain_size == 10
        assert parameters.messages_per_user == 2 + 10
        ct = b64url_encode(bytes(80))
        slots_size = 2 + math.ceil(parameters.m)  # what a slots-mode client would send
        _problem(_submit(stack, http, users[0].session.token, round_number=2, cid=cid,
                         json={"level": ct, "data": [ct] * slots_size}), 422,
                 "wrong-submission-size")
        sent = users[0].submit_data([1, 5])
        assert len(sent.slots) == 12
        assert all(j is None or j == t for t, j in enumerate(sent.slots[2:]))
        assert _status_of(stack, http, cid)["participants"] == 1
    finally:
        for user in users:
            user.close()


def _status_of(stack: LocalStack, http: httpx.Client, cid: str) -> dict[str, Any]:
    return dict(http.get(f"{stack.shuffler_url}/v1/campaigns/{cid}/rounds/2").json())

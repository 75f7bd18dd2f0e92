"""The n-1 attack against a default deployment: nine fake users next to one real user.

With open enrollment the attacker enrolls nine fakes, which fill the round's threshold
and, sending only nulls, leave the real user's items alone in the server's counts.  On a
default shuffler (invitation enrollment, rate limits on) the fakes cannot enroll: without
an invitation, with one the attacker signed itself, or with the real user's used one.
The real user, invited by the operator, enrolls and submits; the round then lacks the
participants the campaign requires and cannot be released.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from segshuffle.client import Client
from segshuffle.client.errors import ServiceError
from segshuffle.testing.localstack import LocalStack

pytestmark = pytest.mark.slow  # both services as real processes

CID = "target"
CAMPAIGN = {"id": CID, "domain_size": 8, "set_size": 2, "levels": [1.0, 2.0], "min_users": 10}
FAKES = 9


def _enroll(http: httpx.Client, stack: LocalStack, body: dict[str, str]) -> httpx.Response:
    return http.post(f"{stack.shuffler_url}/v1/campaigns/{CID}/enrollments", json=body)


def _problem(response: httpx.Response) -> str:
    return str(response.json().get("type", "")).removeprefix("urn:segshuffle:error:")


def test_fakes_cannot_enroll_on_a_default_deployment(tmp_path: Path) -> None:
    with LocalStack(tmp_path, rate_limits=True) as stack, \
            httpx.Client(timeout=30) as http, \
            httpx.Client(timeout=30, transport=httpx.HTTPTransport(
                local_address="127.0.0.2")) as attacker:
        stack.create_campaign(CAMPAIGN)
        refused = [_enroll(http, stack, {}) for _ in range(FAKES)]
        assert [(r.status_code, _problem(r)) for r in refused] == \
            [(401, "invitation-required")] * FAKES

        invitation = stack.invitations(CID, 1)[0]
        with Client(stack.shuffler_url, CID, server_key=stack.server_key) as user:
            user.campaign()
            user.enroll(invitation)
            user.submit_level(1)

        from segshuffle.crypto.invitations import (  # the attacker's own issuer key
            generate_issuer_key,
            new_invitation,
            sign_invitation,
        )

        forged = sign_invitation(new_invitation(CID, 2**40), generate_issuer_key())
        attempts = [_enroll(attacker, stack, {"invitation": forged}) for _ in range(FAKES - 1)]
        attempts.append(_enroll(attacker, stack, {"invitation": invitation}))
        assert [(r.status_code, _problem(r)) for r in attempts] == \
            [(403, "invalid-invitation")] * (FAKES - 1) + [(403, "invitation-used")]

        status = http.get(f"{stack.shuffler_url}/v1/campaigns/{CID}/rounds/1").json()
        assert status["participants"] == 1 and status["enrollment"] == "invitations"
        with pytest.raises(ServiceError) as caught:
            stack.release(CID, 1)
        assert caught.value.problem == "not-enough-participants"


def test_open_enrollment_lets_the_fakes_in(tmp_path: Path) -> None:
    """The same attack where the operator opted in to open enrollment: it goes through."""
    env = {"SEGSHUFFLE_SHUFFLER_ENROLLMENT": "open"}
    with LocalStack(tmp_path, shuffler_env=env) as stack:
        stack.create_campaign(CAMPAIGN)
        for level in [0] * FAKES + [1]:
            with Client(stack.shuffler_url, CID, server_key=stack.server_key) as member:
                member.campaign()
                member.enroll()
                member.submit_level(level)
        stack.release(CID, 1)
        assert stack.campaign(CID).phase == "round2"
        assert "OPEN ENROLLMENT" in stack.log_path("shuffler").read_text()


def test_one_source_cannot_enroll_in_bulk(tmp_path: Path) -> None:
    """A burst of enrollments from one address meets the rate limit (429, Retry-After);
    refused attempts count too, so invitations cannot be guessed at speed either."""
    env = {"SEGSHUFFLE_SHUFFLER_ENROLL_RATE": "0.1", "SEGSHUFFLE_SHUFFLER_ENROLL_BURST": "10"}
    with LocalStack(tmp_path, shuffler_env=env) as stack, httpx.Client(timeout=30) as http:
        stack.create_campaign(CAMPAIGN)
        answers = [_enroll(http, stack, {}) for _ in range(25)]
        assert [a.status_code for a in answers] == [401] * 10 + [429] * 15
        limited = answers[-1]
        assert _problem(limited) == "rate-limited"
        assert limited.headers["content-type"].startswith("application/problem+json")
        assert 1 <= int(limited.headers["retry-after"]) <= 10

"""A user who comes back after the campaign ended is told so: its token was
forgotten with the campaign, and the answer used to be "401 token is not valid".  Both
ends count: a campaign aborted, and one that finished normally (phase ``done``)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from .observability_support import CID, OPERATOR, running_services, submit_levels
from .test_server_support import ADMIN


def _submit(client, token: str, round_number: int = 1):
    return client.post(f"/v1/campaigns/{CID}/rounds/{round_number}/submissions",
                       headers={"Authorization": f"Bearer {token}"},
                       json={"level": "A" * 107})


def test_a_late_submission_hears_that_the_campaign_ended(tmp_path: Path) -> None:
    with running_services(tmp_path) as services:
        stranger = secrets.token_urlsafe(32)
        assert _submit(services.shuffler, stranger).status_code == 401  # still running
        assert services.server.post(f"/v1/campaigns/{CID}/abort", headers=ADMIN,
                                    json={"reason": "test"}).status_code == 200
        time.sleep(0.3)  # a view the shuffler fetched fresh may be this old (min_refresh)
        answer = _submit(services.shuffler, stranger)
        assert answer.status_code == 409, answer.text
        problem = answer.json()
        assert problem["type"].endswith("wrong-phase") and problem["phase"] == "aborted"
        assert "has ended (aborted)" in problem["detail"]


def _ended(answer, phase: str) -> None:
    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert problem["type"].endswith("wrong-phase") and problem["phase"] == phase, problem
    assert f"has ended ({phase})" in problem["detail"], problem


@pytest.mark.slow  # a whole campaign, about 8 s (round 1 chooses its parameters)
def test_a_late_submission_to_a_finished_campaign_hears_that_it_ended(tmp_path: Path) -> None:
    """The campaign runs to ``done``; then a user who took part (with the token it was
    issued in round 1) and a stranger each try again, in either round."""
    operator = {"Authorization": f"Bearer {OPERATOR}"}
    with running_services(tmp_path) as services:
        users, _ = submit_levels(services)
        released = services.shuffler.post(f"/v1/campaigns/{CID}/rounds/1/release?wait=true",
                                          headers=operator)
        assert released.status_code == 200, released.text
        for user in users:
            user.submit_data([0])
        released = services.shuffler.post(f"/v1/campaigns/{CID}/rounds/2/release?wait=true",
                                          headers=operator)
        assert released.status_code == 200, released.text
        deadline = time.monotonic() + 30
        while services.server.get(f"/v1/campaigns/{CID}").json()["phase"] != "done":
            assert time.monotonic() < deadline, "the campaign did not finish"
            time.sleep(0.05)
        time.sleep(0.3)  # a view the shuffler fetched fresh may be this old (min_refresh)
        token = users[0].session.token
        assert token is not None
        for who in (token, secrets.token_urlsafe(32)):
            for round_number in (1, 2):
                _ended(_submit(services.shuffler, who, round_number), "done")

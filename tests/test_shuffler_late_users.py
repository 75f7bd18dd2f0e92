"""A user who comes back after the campaign ended is told so (issue 25): its token was
forgotten with the campaign, and the answer used to be "401 token is not valid"."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

from .observability_support import CID, running_services
from .test_server_support import ADMIN


def _submit(client, token: str):
    return client.post(f"/v1/campaigns/{CID}/rounds/1/submissions",
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

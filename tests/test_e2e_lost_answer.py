"""A submission stored by the shuffler whose answer never reached the user, over real
processes: the shuffler is killed (SIGKILL) after storing it and before answering, and
restarted 20 s later; the client sends it again with the same token, hears ``already-submitted``
and tells the app "stored"; the round counts that user once."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from segshuffle.client import Client
from segshuffle.testing.localstack import LocalStack

from .test_e2e_support import Recorded, RecordingProxy

pytestmark = pytest.mark.slow  # real service processes

CID = "lost"
USERS = 12
OUTAGE_SECONDS = 20.0
"""How long the shuffler stays down: longer than a count of quick retries lasts (it took
40-70 s to come back in the measured incident), well within the client's time budget."""


def _lose_the_first_stored_round1(stack: LocalStack, lost: list[str]
                                  ) -> Callable[[Recorded, httpx.Response], bool]:
    """A proxy's ``deliver``: the first round-1 submission the shuffler stored loses its
    answer with the shuffler (killed, and restarted OUTAGE_SECONDS later)."""
    def deliver(request: Recorded, response: httpx.Response) -> bool:
        if (lost or request.method != "POST" or response.status_code != 201
                or not request.path.endswith("/rounds/1/submissions")):
            return True
        lost.append(request.path)
        stack.kill("shuffler")
        threading.Timer(OUTAGE_SECONDS, stack.start_service, ("shuffler",)).start()
        return False

    return deliver


def test_a_submission_stored_before_a_shuffler_restart_is_reported_stored_once(
        tmp_path) -> None:
    with LocalStack(tmp_path, min_users=2) as stack:
        stack.create_campaign({"id": CID, "domain_size": 8, "set_size": 2,
                               "levels": [1.0, 2.0], "min_users": 10})
        invitations = stack.invitations(CID, USERS)
        lost: list[str] = []
        proxy = RecordingProxy(stack.shuffler_url,
                               deliver=_lose_the_first_stored_round1(stack, lost))
        try:
            with Client(proxy.url, CID, server_key=stack.server_key) as user:
                user.enroll(invitations[0])
                sent = user.submit_level(1)  # returns only once the round is stored
                assert user.outcome(1) == "stored"
                assert sent.reported_level == 1
        finally:
            proxy.close()
        assert len(lost) == 1
        for invitation in invitations[1:]:
            with Client(stack.shuffler_url, CID, server_key=stack.server_key) as user:
                user.enroll(invitation)
                user.submit_level(0)
        status = httpx.get(f"{stack.shuffler_url}/v1/campaigns/{CID}/rounds/1",
                           timeout=30).json()
        assert status["participants"] == USERS  # the first user once, not twice
        stack.release(CID, 1)
        parameters = stack.campaign(CID).parameters
        assert parameters is not None and parameters.users == USERS

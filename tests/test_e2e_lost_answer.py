"""A submission stored by the shuffler whose answer never reached the user, over real
processes: the shuffler is killed (SIGKILL) after storing it and before answering, and
restarted 20 s later; the client sends it again with the same token, hears ``already-submitted``
and tells the app "stored"; the round counts that user once."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from segshuffle.client import Client
from segshuffle.testing.localstack import LocalStack

pytestmark = pytest.mark.slow  # real service processes

CID = "lost"
USERS = 12
OUTAGE_SECONDS = 20.0
"""How long the shuffler stays down: longer than a count of quick retries lasts (it took
40-70 s to come back in the measured incident), well within the client's time budget."""


class AnswerLosingProxy:
    """Forwards to the shuffler; the first round-1 submission is forwarded (and stored), then
    the shuffler is killed and restarted, and the user's connection closed unanswered."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.lost = 0
        proxy = self
        client = httpx.Client(timeout=120.0)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection", "content-length")}
                try:
                    response = client.request(self.command, proxy.stack.shuffler_url + self.path,
                                              headers=headers, content=body)
                except httpx.HTTPError:
                    self.close_connection = True
                    return
                if (self.command == "POST" and self.path.endswith("/rounds/1/submissions")
                        and response.status_code == 201 and proxy.lost == 0):
                    proxy.lost += 1  # stored; the answer is lost with the shuffler
                    proxy.stack.kill("shuffler")
                    threading.Timer(OUTAGE_SECONDS, proxy.stack.start_service,
                                    ("shuffler",)).start()
                    self.close_connection = True
                    return
                self.send_response(response.status_code)
                for key, value in response.headers.items():
                    if key.lower() not in ("connection", "content-length",
                                           "transfer-encoding"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

            do_GET = do_PUT = do_POST = _forward  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_a_submission_stored_before_a_shuffler_restart_is_reported_stored_once(
        tmp_path) -> None:
    with LocalStack(tmp_path, min_users=2) as stack:
        stack.create_campaign({"id": CID, "domain_size": 8, "set_size": 2,
                               "levels": [1.0, 2.0], "min_users": 10})
        invitations = stack.invitations(CID, USERS)
        proxy = AnswerLosingProxy(stack)
        try:
            with Client(proxy.url, CID, server_key=stack.server_key) as user:
                user.enroll(invitations[0])
                sent = user.submit_level(1)  # returns only once the round is stored
                assert user.outcome(1) == "stored"
                assert sent.reported_level == 1
        finally:
            proxy.close()
        assert proxy.lost == 1
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

"""A shuffler in the middle, against real services (slow): with the server's signing key a
client refuses a substituted key before it sends anything; without it (trust on first use)
the relay reads the client's level."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from segshuffle.cli.main import main
from segshuffle.client import Client
from segshuffle.client.errors import VerificationError
from segshuffle.crypto import build_info, generate_private_key, key_config, open_
from segshuffle.crypto.documents import sign_view
from segshuffle.testing.localstack import LocalStack
from segshuffle.wire.models import CampaignView, b64url_decode
from segshuffle.wire.plaintext import decode_plaintext

pytestmark = pytest.mark.slow
CID = "relayed"


class ShufflerInTheMiddle(httpx.BaseTransport):
    """What a malicious shuffler answers: the real view with its own HPKE key under a
    consistent key id, re-signed with a key of its own, and that key's config; it keeps
    every request the client sends."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.private_key = generate_private_key()
        self.config = key_config(self.private_key)
        self.signing_key = Ed25519PrivateKey.generate()
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method != "GET":
            request.read()
            self.sent.append(request)
            return self.inner.handle_request(request)
        if path.endswith(f"/campaigns/{CID}/hpke-config"):
            return httpx.Response(200, json=self.config.model_dump(mode="json"))
        response = self.inner.handle_request(request)
        if path.endswith(f"/campaigns/{CID}"):
            response.read()
            view = CampaignView.model_validate_json(response.content)
            swapped = view.model_copy(update={"key_id": self.config.key_id,
                                              "hpke_config": self.config})
            swapped = swapped.model_copy(
                update={"signatures": sign_view(self.signing_key, swapped)})
            return httpx.Response(200, json=json.loads(swapped.model_dump_json()))
        return response

    def close(self) -> None:
        self.inner.close()

    def read_level(self, config_hash: str) -> int:
        """The level in the round-1 submission the client sent, opened with the relay's key."""
        (submission,) = [r for r in self.sent if r.url.path.endswith("/rounds/1/submissions")]
        ciphertext = b64url_decode(json.loads(submission.content)["level"])
        info = build_info(CID, 1, self.config.key_id, bytes.fromhex(config_hash))
        return decode_plaintext(open_(self.private_key, info, ciphertext)).value


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(tmp_path_factory.mktemp("relay"), min_users=2) as running:
        running.create_campaign({"id": CID, "domain_size": 8, "set_size": 1,
                                 "levels": [1.0, 2.0], "min_users": 2})
        yield running


def test_a_client_with_the_server_key_refuses_a_swapped_key(stack: LocalStack) -> None:
    relay = ShufflerInTheMiddle()
    (invitation,) = stack.invitations(CID, 1)
    with Client(stack.shuffler_url, CID, server_key=stack.server_key, policy=stack.client_policy(),
                http=httpx.Client(transport=relay)) as user:
        with pytest.raises(VerificationError, match=r"server signature \(campaign\)"):
            user.campaign()
        user.enroll(invitation)  # an invitation reveals nothing about the user's data
        with pytest.raises(VerificationError, match=r"server signature \(campaign\)"):
            user.submit_level(1)
    assert [r.url.path for r in relay.sent] == [f"/v1/campaigns/{CID}/enrollments"]
    # The same client through the honest shuffler goes through.
    with Client(stack.shuffler_url, CID, server_key=stack.server_key,
                policy=stack.client_policy()) as user:
        assert user.campaign().signatures is not None
        user.enroll(stack.invitations(CID, 1)[0])
        user.submit_level(0)


def test_without_the_server_key_the_relay_reads_the_level(stack: LocalStack) -> None:
    """The limit of trust on first use, stated in README "Threat model"."""
    relay = ShufflerInTheMiddle()
    (invitation,) = stack.invitations(CID, 1)
    with Client(stack.shuffler_url, CID, http=httpx.Client(transport=relay),
                policy=stack.client_policy()) as user:
        view = user.campaign()
        assert view.key_id == relay.config.key_id
        user.enroll(invitation)
        user.submit_level(1)
    assert relay.read_level(view.config_hash) == 1


def test_the_admin_command_prints_the_stack_key(stack: LocalStack, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "admin-token"
    token.write_text(stack.admin_token + "\n")
    assert main(["admin", "signing-key", "--server", stack.server_url,
                 "--token-file", str(token)]) == 0
    assert capsys.readouterr().out.strip() == stack.server_key
    # Through the shuffler there is no such document.
    assert main(["admin", "signing-key", "--server", stack.shuffler_url,
                 "--token-file", str(token)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_key_survives_a_server_restart(stack: LocalStack) -> None:
    before = stack.server_key
    stack.kill("server")
    stack.start_service("server")
    assert stack.server_key == before
    with Client(stack.shuffler_url, CID, server_key=before,
                policy=stack.client_policy()) as user:
        user.campaign()


def test_serve_refuses_an_unusable_key_file(tmp_path: Path) -> None:
    bad = tmp_path / "signing.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    env = {"PATH": "/usr/bin:/bin", "SEGSHUFFLE_SERVER_ADMIN_TOKEN": "a" * 24,
           "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": "s" * 24,
           "SEGSHUFFLE_SERVER_SIGNING_KEY_FILE": str(bad)}
    done = subprocess.run(
        [sys.executable, "-m", "segshuffle.cli.main", "serve", "server", "--port", "0",
         "--database", str(tmp_path / "server.sqlite3")],
        env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"segshuffle: error: the document-signing key {bad} is not an unencrypted PEM "
        "private key"]

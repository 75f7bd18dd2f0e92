"""A token a client proposes at enrollment must look random: one made by hand or by a
broken generator (all bytes equal, a repeated pattern, few byte values, a counter) is
refused as ``invalid-field`` naming the check, before any invitation is used, while the
tokens of a CSPRNG, as both clients draw them, always pass."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from segshuffle.client.session import UserSession
from segshuffle.services.shuffler import enrollment
from segshuffle.wire.models import b64url_encode

from .node_support import node
from .test_shuffler_enrollment import CID, _client, _enroll, _invitation, _problem, _settings

WEB = Path(__file__).resolve().parents[1] / "clients" / "web"

AUDIT_TOKEN = "A" * 43
"""32 zero bytes."""

WEAK: dict[str, str] = {
    "repeated-byte": b64url_encode(b"\xff" * 32),
    "repeating-pattern": b64url_encode(bytes.fromhex("9c0e4f71d2a83b56e1f07a4c93d25b68") * 2),
    "few-byte-values": b64url_encode(b"aaaabbbbccccdddd1111222233334444"),
    "text": b64url_encode(b"correct horse battery staple 123"),
    "few-steps": b64url_encode(bytes(range(100, 132))),
}
"""A token failing each check (the 16 bytes repeated have 15 distinct values and 16 distinct
steps, so only the pattern check catches them)."""


@pytest.fixture
def shuffler(tmp_path: Path) -> Iterator[TestClient]:
    with _client(_settings(tmp_path, enroll_rate=0)) as client:
        yield client


def _weakness(token: str) -> str | None:
    found = enrollment.token_weakness(token)
    return None if found is None else found[0]


def test_the_audit_token_is_refused_and_the_invitation_kept(shuffler: TestClient) -> None:
    invitation = _invitation()
    refused = _enroll(shuffler, {"invitation": invitation, "token": AUDIT_TOKEN})
    body = _problem(refused, 422, "invalid-field")
    assert body["check"] == "repeated-byte"
    assert body["errors"] == [{"loc": ["body", "token"],
                               "msg": "all the bytes of the proposed token are equal"}]
    assert AUDIT_TOKEN not in refused.text  # the problem does not echo the token
    token = secrets.token_urlsafe(32)
    accepted = _enroll(shuffler, {"invitation": invitation, "token": token})
    assert accepted.status_code == 201 and accepted.json()["token"] == token


@pytest.mark.parametrize("check", sorted(WEAK))
def test_each_check_refuses_its_token_over_http(shuffler: TestClient, check: str) -> None:
    body = _problem(_enroll(shuffler, {"invitation": _invitation(), "token": WEAK[check]}),
                    422, "invalid-field")
    assert body["check"] == check


def test_open_enrollment_refuses_a_weak_proposal_too(tmp_path: Path) -> None:
    settings = _settings(tmp_path, enrollment="open", invitation_keys="", enroll_rate=0)
    with _client(settings) as client:
        body = _problem(_enroll(client, {"token": WEAK["repeating-pattern"]}), 422,
                        "invalid-field")
        assert body["check"] == "repeating-pattern"
        assert _enroll(client, {}).status_code == 201  # the shuffler's own token


def test_a_weak_proposal_is_refused_before_the_campaign_is_looked_up(
        shuffler: TestClient) -> None:
    body = _problem(_enroll(shuffler, {"token": AUDIT_TOKEN}, cid="no-such-campaign"), 422,
                    "invalid-field")
    assert body["check"] == "repeated-byte"


@pytest.mark.parametrize(("token", "check"), [
    (AUDIT_TOKEN, "repeated-byte"),
    ("_" * 42 + "8", "repeated-byte"),  # 32 bytes of 0xff
    (b64url_encode(b"ab" * 16), "repeating-pattern"),
    (b64url_encode(bytes(range(16)) * 2), "repeating-pattern"),
    (b64url_encode(bytes.fromhex("9c0e4f71d2a83b56e1f07a4c93d25b68") * 2), "repeating-pattern"),
    (b64url_encode(bytes([0, 1, 2, 3, 250, 251, 252, 253]) * 3 + bytes(range(8))),
     "few-byte-values"),
    (b64url_encode(b"passwordpassword" + b"Password1234!!!!"), "text"),
    (b64url_encode(bytes(range(32))), "few-steps"),  # a sequential run
    (b64url_encode(bytes(range(255, 127, -4))), "few-steps"),  # an arithmetic sequence
    (b64url_encode(b"abcdefghijklmnopqrstuvwxyzABCDEF"), "few-steps"),
    ("A" * 42, "encoding"),
])
def test_token_weakness_names_the_check(token: str, check: str) -> None:
    assert _weakness(token) == check


def test_ten_thousand_random_tokens_pass() -> None:
    """Tokens drawn as the Python client draws its proposal (``secrets.token_urlsafe(32)``);
    a false refusal has probability under 2^-71 per token."""
    session = UserSession(CID)
    tokens = [session.enrollment_body(None)["token"] for _ in range(10_000)]
    assert len(set(tokens)) == 10_000
    assert [t for t in tokens if _weakness(t) is not None] == []


def test_ten_thousand_web_client_tokens_pass() -> None:
    """Tokens drawn as the web client draws its proposal (clients/web/src/session.js: 32
    bytes of ``crypto.getRandomValues``, encoded by its ``toBase64url``), under Node."""
    script = ("import { toBase64url } from './src/bytes.js';\n"
              "const out = [];\n"
              "for (let i = 0; i < 10000; i++) "
              "out.push(toBase64url(crypto.getRandomValues(new Uint8Array(32))));\n"
              "console.log(out.join('\\n'));\n")
    result = subprocess.run([node(), "--input-type=module", "-e", script], cwd=WEB,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    tokens = result.stdout.split()
    assert len(set(tokens)) == 10_000
    assert [t for t in tokens if _weakness(t) is not None] == []
    assert "toBase64url(crypto.getRandomValues(new Uint8Array(32)))" in \
        (WEB / "src" / "session.js").read_text()  # what the session proposes


def test_random_tokens_with_odd_spare_bits_pass() -> None:
    """The last character's 2 spare bits are ignored (a token need not be the canonical
    encoding of its bytes, as before)."""
    token = secrets.token_urlsafe(32)
    odd = token[:-1] + ("B" if token[-1] == "A" else "A")
    assert _weakness(odd) is None

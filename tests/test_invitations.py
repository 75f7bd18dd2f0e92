"""Invitations: the encoding, its fixed test vector (docs/wire.md), verification, and the
shuffler's single-use invitation policy over real storage (the last test reads the SQLite
files through tests/sqlite_backend.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from segshuffle.crypto.invitations import (
    Invitation,
    InvitationError,
    decode_invitation,
    generate_issuer_key,
    invitation_digest,
    issuer_key_from_seed,
    new_invitation,
    parse_public_keys,
    public_key_text,
    sign_invitation,
    verify_invitation,
)
from segshuffle.services.shuffler.enrollment import (
    EnrollmentRefusedError,
    InvitationEnrollment,
    token_hash,
)
from segshuffle.services.shuffler.storage import Storage
from segshuffle.wire.models import b64url_decode, b64url_encode

from .sqlite_backend import rows as sqlite_rows

DOCS = Path(__file__).resolve().parents[1] / "docs" / "wire.md"

# The vector of docs/wire.md, "Invitations" (checked independently with `openssl pkeyutl`).
SEED = bytes(range(32))
PUBLIC = "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"
FIELDS = Invitation("campaign-1", bytes(range(16)), 1767225600)
BODY = "010a63616d706169676e2d31000102030405060708090a0b0c0d0e0f000000006955b900"
SIGNATURE = ("e6560a1fbb2cb7ac3cd796ca82160ffd75c31e0de2d6bea4893c9ecb4c9ee9da"
             "db9f20cb09e181667acf80631fb94da10a2aec8219ddec0ba80ae4ffc911b301")
STRING = ("AQpjYW1wYWlnbi0xAAECAwQFBgcICQoLDA0ODwAAAABpVbkA5lYKH7sst6w815bKghYP_XXDHg3i1r6k"
          "iTyey0ye6drbnyDLCeGBZnrPgGMfuU2hCirsghnd7AuoCuT_yRGzAQ")
DIGEST = "311c99ae72425f7b12bb4457e2f682d0c35f34911b641231e0b1a787aff66cd1"
NOW = 1767225600 - 3600


def test_fixed_vector_matches_the_documentation() -> None:
    key = issuer_key_from_seed(SEED)
    assert public_key_text(key) == PUBLIC
    assert FIELDS.body().hex() == BODY
    assert sign_invitation(FIELDS, key) == STRING
    assert b64url_decode(STRING)[-64:].hex() == SIGNATURE
    assert invitation_digest(FIELDS).hex() == DIGEST
    documented = DOCS.read_text()
    for value in (PUBLIC, BODY, SIGNATURE[:64], SIGNATURE[64:], STRING[:80], STRING[80:],
                  DIGEST, "1767225600"):
        assert value in documented
    assert verify_invitation(STRING, parse_public_keys(PUBLIC), "campaign-1", NOW) == FIELDS


def test_round_trip_and_longest_campaign_id() -> None:
    key = generate_issuer_key()
    for campaign in ("c", "x" * 64, "a.b_c-9"):
        invitation = new_invitation(campaign, 2**64 - 1)
        text = sign_invitation(invitation, key)
        assert decode_invitation(text)[0] == invitation
        assert len(text) <= 206
        assert verify_invitation(text, [key.public_key()], campaign, NOW) == invitation
    assert new_invitation("c", 5).invitation_id != new_invitation("c", 5).invitation_id
    for bad in ("", "x" * 65, "a b", "-x"):
        with pytest.raises(ValueError):
            Invitation(bad, bytes(16), 0)


def _reason(text: str, campaign: str = "campaign-1", now: float = NOW,
            public: str = PUBLIC) -> str:
    with pytest.raises(InvitationError) as caught:
        verify_invitation(text, parse_public_keys(public), campaign, now)
    return caught.value.reason


def test_every_refusal_has_its_reason() -> None:
    raw = bytearray(b64url_decode(STRING))
    assert _reason(STRING, campaign="campaign-2") == "campaign"
    assert _reason(STRING, now=1767225600 + 61) == "expired"
    assert verify_invitation(STRING, parse_public_keys(PUBLIC), "campaign-1",
                             1767225600 + 60) == FIELDS  # within the skew
    other = public_key_text(generate_issuer_key())
    assert _reason(STRING, public=other) == "signature"
    for position in (3, 20, len(raw) - 70, len(raw) - 1):  # campaign, id, expiry, signature
        tampered = bytearray(raw)
        tampered[position] ^= 1
        assert _reason(b64url_encode(bytes(tampered))) in {"signature", "malformed"}
    extended = bytearray(raw)
    extended[-65] ^= 0xFF  # a later expiry is a different signed body
    assert _reason(b64url_encode(bytes(extended))) == "signature"
    for garbage in ("", "!!!", STRING + "A", STRING[:-4], b64url_encode(b"\x02" + raw[1:]),
                    "x" * 600):
        assert _reason(garbage) == "malformed"


def test_public_key_lists() -> None:
    keys = parse_public_keys(f"# issuer keys\n{PUBLIC}, {public_key_text(generate_issuer_key())}"
                             "\n\n")
    assert len(keys) == 2
    with pytest.raises(ValueError, match="not an Ed25519 public key"):
        parse_public_keys("abc")


@pytest.fixture
def storage(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = Storage(tmp_path / "shuffler.sqlite3")
    yield store
    store.close()


def test_policy_accepts_each_invitation_once(storage: Storage) -> None:
    key = generate_issuer_key()
    clock = [1000.0]
    policy = InvitationEnrollment(storage, [generate_issuer_key().public_key(), key.public_key()],
                                  clock=lambda: clock[0])
    invitation = sign_invitation(new_invitation("c", 10_000), key)
    token = policy.enroll("c", invitation)
    assert policy.authenticate("c", token) == token_hash(token)

    def refused(campaign: str, credential: str | None) -> str:
        with pytest.raises(EnrollmentRefusedError) as caught:
            policy.enroll(campaign, credential)
        return caught.value.reason

    assert refused("c", invitation) == "used"
    assert refused("c", None) == "required"
    assert refused("c", "") == "required"
    assert refused("d", sign_invitation(new_invitation("c", 2000), key)) == "campaign"
    assert refused("c", sign_invitation(new_invitation("c", 2000),
                                        generate_issuer_key())) == "signature"
    late = sign_invitation(new_invitation("c", 1100), key)
    clock[0] = 1161.0
    assert refused("c", late) == "expired"
    clock[0] = 1000.0
    assert policy.enroll("c", late)  # a refusal does not use the invitation up
    clock[0] = 1000.0 + 3600  # an hour later: the expired hash is purged, reuse still refused
    assert refused("c", late) == "expired"
    assert sqlite_rows(storage.path, "SELECT COUNT(*) FROM used_invitations") == [(1,)]
    assert refused("c", invitation) == "used"
    with pytest.raises(ValueError):
        InvitationEnrollment(storage, [])


def test_concurrent_enrollments_with_one_invitation_get_one_token(storage: Storage) -> None:
    key = generate_issuer_key()
    policy = InvitationEnrollment(storage, [key.public_key()])
    invitation = sign_invitation(new_invitation("c", 2**40), key)
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def attempt() -> None:
        start.wait()
        try:
            policy.enroll("c", invitation)
            outcomes.append("token")
        except EnrollmentRefusedError as exc:
            outcomes.append(exc.reason)

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["token"] + ["used"] * 7


def test_used_invitations_are_stored_hashed_apart_from_tokens(storage: Storage) -> None:
    key = generate_issuer_key()
    policy = InvitationEnrollment(storage, [key.public_key()])
    fields = new_invitation("c", 2**40)
    token = policy.enroll("c", sign_invitation(fields, key))
    assert [bytes(r[0]) for r in sqlite_rows(storage.path,
                                             "SELECT invitation_hash FROM used_invitations")] \
        == [invitation_digest(fields)]
    columns = {r[1] for r in sqlite_rows(storage.path, "PRAGMA table_info(used_invitations)")}
    assert columns == {"invitation_hash", "expires"}  # nothing that names the token
    raw = Path(storage.path).read_bytes() + Path(storage.path + "-wal").read_bytes()
    assert fields.invitation_id not in raw and token.encode() not in raw

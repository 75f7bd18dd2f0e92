"""Enrollment invitations: single-use, per-user, expiring, signed with Ed25519 (docs/wire.md).

The app operator holds the issuer's Ed25519 private key and signs invitations offline
(``segshuffle admin invitations``); the shuffler holds only the issuer public key(s), so it
can check invitations but cannot mint them.  An invitation is the unpadded base64url
encoding of ``body || signature``::

    body      = version (1 byte, 0x01)
                || len(campaign_id) (1 byte, 1..64) || campaign_id (ASCII)
                || invitation_id (16 random bytes)
                || expires (8 bytes, unsigned big-endian unix seconds)
    signature = Ed25519(issuer key, "segshuffle/v1/invitation" 0x00 || body)   (64 bytes)

The domain prefix keeps the signature from being valid for any other message the key
might sign.  Verification (:func:`verify_invitation`) checks, in this order, the encoding,
the signature against each configured issuer key, the campaign and the expiry (with a
clock-skew allowance); single use is the verifier's storage's job, keyed on
:func:`invitation_digest`.  Pure: no I/O except the explicit key and file helpers.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import struct
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from segshuffle.wire.models import ID_PATTERN, b64url_decode, b64url_encode

VERSION = 1
SIGNATURE_DOMAIN = b"segshuffle/v1/invitation\x00"
DIGEST_DOMAIN = b"segshuffle/v1/invitation-id\x00"
INVITATION_ID_BYTES = 16
SIGNATURE_BYTES = 64
PUBLIC_KEY_BYTES = 32
MAX_CAMPAIGN_ID_BYTES = 64
MAX_INVITATION_LENGTH = 512
"""Characters; the longest invitation (64-byte campaign id) has 206."""
_ID = re.compile(ID_PATTERN)
_EXPIRES = struct.Struct(">Q")


class InvitationError(ValueError):
    """An invitation is refused; ``reason`` is ``malformed``, ``signature``, ``campaign``
    or ``expired``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Invitation:
    """The signed fields of an invitation."""

    campaign_id: str
    invitation_id: bytes
    expires: int
    """Unix seconds after which the invitation is refused."""

    def __post_init__(self) -> None:
        if not _ID.match(self.campaign_id):
            raise ValueError(f"campaign id must match {ID_PATTERN}, got {self.campaign_id!r}")
        if len(self.invitation_id) != INVITATION_ID_BYTES:
            raise ValueError(f"invitation id must be {INVITATION_ID_BYTES} bytes")
        if not 0 <= self.expires < 2**64:
            raise ValueError("expiry must be an unsigned 64-bit number of seconds")

    def body(self) -> bytes:
        """The signed encoding (module docstring): version, campaign, id, expiry."""
        campaign = self.campaign_id.encode("ascii")
        return (bytes([VERSION, len(campaign)]) + campaign + self.invitation_id
                + _EXPIRES.pack(self.expires))


def new_invitation(campaign_id: str, expires: int) -> Invitation:
    """An invitation with a fresh random 128-bit id."""
    return Invitation(campaign_id, secrets.token_bytes(INVITATION_ID_BYTES), expires)


def sign_invitation(invitation: Invitation, key: Ed25519PrivateKey) -> str:
    """The invitation string: base64url(body || Ed25519(key, domain || body))."""
    body = invitation.body()
    return b64url_encode(body + key.sign(SIGNATURE_DOMAIN + body))


def decode_invitation(text: str) -> tuple[Invitation, bytes, bytes]:
    """Parse an invitation string into (fields, signed body, signature), unverified."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_INVITATION_LENGTH:
        raise InvitationError("malformed", "the invitation is not a valid invitation string")
    try:
        raw = b64url_decode(text)
    except ValueError:
        raise InvitationError("malformed", "the invitation is not unpadded base64url") from None
    if len(raw) < 2 or raw[0] != VERSION:
        raise InvitationError("malformed", "unknown invitation version")
    n = raw[1]
    expected = 2 + n + INVITATION_ID_BYTES + _EXPIRES.size + SIGNATURE_BYTES
    if not 1 <= n <= MAX_CAMPAIGN_ID_BYTES or len(raw) != expected:
        raise InvitationError("malformed", "the invitation has the wrong length")
    body, signature = raw[:-SIGNATURE_BYTES], raw[-SIGNATURE_BYTES:]
    try:
        campaign = body[2:2 + n].decode("ascii")
        (expires,) = _EXPIRES.unpack(body[-_EXPIRES.size:])
        invitation = Invitation(campaign, body[2 + n:2 + n + INVITATION_ID_BYTES], expires)
    except ValueError:
        raise InvitationError("malformed", "the invitation's campaign id is invalid") from None
    return invitation, body, signature


def verify_invitation(text: str, issuers: Sequence[Ed25519PublicKey], campaign_id: str,
                      now: float, skew: float = 60.0) -> Invitation:
    """The invitation's fields if ``text`` is valid for ``campaign_id`` at time ``now``.

    Valid means: well formed, signed by one of ``issuers`` (at most a handful, tried in
    order), issued for ``campaign_id``, and ``now <= expires + skew``.  Raises
    :class:`InvitationError` otherwise.  Single use is not checked here.
    """
    invitation, body, signature = decode_invitation(text)
    for issuer in issuers:
        try:
            issuer.verify(signature, SIGNATURE_DOMAIN + body)
            break
        except InvalidSignature:
            continue
    else:
        raise InvitationError("signature", "the invitation's signature does not verify "
                                           "under the configured issuer key(s)")
    if invitation.campaign_id != campaign_id:
        raise InvitationError("campaign", "the invitation was issued for another campaign")
    if now > invitation.expires + skew:
        raise InvitationError("expired", "the invitation has expired")
    return invitation


def invitation_digest(invitation: Invitation) -> bytes:
    """What a verifier stores to refuse reuse: SHA-256(domain || campaign_id 0x00 || id)."""
    return hashlib.sha256(DIGEST_DOMAIN + invitation.campaign_id.encode("ascii") + b"\x00"
                          + invitation.invitation_id).digest()


# -- keys -----------------------------------------------------------------------------------
def generate_issuer_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def issuer_key_from_seed(seed: bytes) -> Ed25519PrivateKey:
    """The issuer key of a 32-byte seed (RFC 8032 private key); used by test vectors."""
    return Ed25519PrivateKey.from_private_bytes(seed)


def issuer_key_from_text(text: str) -> Ed25519PrivateKey:
    """The issuer key of its 32-byte seed as unpadded base64url (how deploy/.env holds it)."""
    try:
        return issuer_key_from_seed(b64url_decode(text.strip(), 32))
    except ValueError:
        raise ValueError("the issuer private key must be 32 bytes, unpadded base64url") from None


def public_key_text(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """An issuer public key as configured on the shuffler: base64url of its 32 raw bytes."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return b64url_encode(public.public_bytes(serialization.Encoding.Raw,
                                             serialization.PublicFormat.Raw))


def parse_public_keys(text: str) -> list[Ed25519PublicKey]:
    """Issuer public keys from a comma-, space- or newline-separated list of base64url
    strings (``#`` starts a comment line)."""
    keys: list[Ed25519PublicKey] = []
    for line in text.splitlines():
        if line.strip().startswith("#"):
            continue
        for part in re.split(r"[,\s]+", line.strip()):
            if not part:
                continue
            try:
                keys.append(Ed25519PublicKey.from_public_bytes(
                    b64url_decode(part, PUBLIC_KEY_BYTES)))
            except ValueError:
                raise ValueError(f"not an Ed25519 public key (32 bytes, unpadded base64url): "
                                 f"{part[:16]!r}...") from None
    return keys


def issuer_key_pem(key: Ed25519PrivateKey) -> bytes:
    """PKCS#8 PEM, the format ``openssl genpkey -algorithm ed25519`` writes."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_issuer_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """The issuer private key of a PKCS#8 PEM file; :class:`ValueError` if it is not one."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read issuer key {path}: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise ValueError(f"{path} is not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    return key


def write_private_file(path: str | os.PathLike[str], lines: Iterable[bytes], *,
                       overwrite: bool = False) -> None:
    """Write ``lines`` to ``path`` with mode 0600, atomically (temp file, fsync, rename).

    Without ``overwrite`` an existing file is kept and :class:`FileExistsError` raised.
    """
    target = Path(path)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} exists")
    directory = target.parent if str(target.parent) else Path(".")
    fd, temp = tempfile.mkstemp(prefix=".segshuffle-", dir=directory)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            for line in lines:
                handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(temp, target)
        else:
            os.link(temp, target)  # fails if the target appeared meanwhile
            os.unlink(temp)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise

"""HPKE (RFC 9180) base mode for protocol messages (docs/wire.md).

Suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM (the suite DAP
mandates), through :mod:`cryptography.hazmat.primitives.hpke`.  Every message is
sealed by its own ``Suite.encrypt`` call, which draws a fresh ephemeral key: two
messages of one user share nothing, and no encryption context is ever reused.

A ciphertext is ``enc || ct``: the 32-byte encapsulated key followed by the AEAD
output (plaintext length + 16-byte tag), 80 bytes for the 32-byte plaintexts.

The ``info`` string binds a message to its context (docs/architecture.md)::

    b"segshuffle/v1" 0x00 campaign_id 0x00 round 0x00 key_id 0x00 context_hash

so a ciphertext opens only in the campaign, round, key and published parameters it
was sealed for.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite

from segshuffle.private_files import make_private_folder
from segshuffle.wire.models import (
    AEAD_ID_AES_128_GCM,
    CIPHERTEXT_LENGTH,
    ENC_LENGTH,
    ID_PATTERN,
    KDF_ID_HKDF_SHA256,
    KEM_ID_X25519,
    HpkeConfig,
    b64url_decode,
    b64url_encode,
)

SUITE = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.AES_128_GCM)
INFO_LABEL = b"segshuffle/v1"
KEY_ID_BYTES = 8
"""A key id is the first 8 bytes of SHA-256(public key), as 16 hex characters."""
PRIVATE_KEY_LENGTH = 32
_ID = re.compile(ID_PATTERN)


class DecryptError(Exception):
    """A ciphertext that does not open under this key and ``info`` (tampered, wrong context,
    wrong key or wrong length).  Deliberately carries no detail."""


def build_info(campaign_id: str, round_: int, key_id: str, context_hash: bytes) -> bytes:
    """The HPKE ``info`` of a message of ``round_`` (1 or 2) in ``campaign_id``.

    ``context_hash`` is the 32-byte SHA-256 of the canonical campaign configuration
    (round 1) or of the published round-2 parameters (round 2).
    """
    if not _ID.match(campaign_id):
        raise ValueError(f"invalid campaign id {campaign_id!r}")
    if round_ not in (1, 2):
        raise ValueError(f"round must be 1 or 2, got {round_!r}")
    if not re.fullmatch(r"[0-9a-f]{16}", key_id):
        raise ValueError(f"invalid key id {key_id!r}")
    if len(context_hash) != 32:
        raise ValueError(f"context hash must be 32 bytes, got {len(context_hash)}")
    return b"\x00".join(
        (INFO_LABEL, campaign_id.encode("ascii"), str(round_).encode("ascii"),
         key_id.encode("ascii"), bytes(context_hash))
    )


def seal(public_key: X25519PublicKey, info: bytes, plaintext: bytes) -> bytes:
    """Encrypt one message to ``public_key``: a fresh ephemeral key per call."""
    return SUITE.encrypt(plaintext, public_key, info)


def open_(private_key: X25519PrivateKey, info: bytes, ciphertext: bytes) -> bytes:
    """Decrypt one ``enc || ct``; raises :class:`DecryptError` on any failure."""
    if len(ciphertext) != CIPHERTEXT_LENGTH:
        raise DecryptError("wrong ciphertext length")
    try:
        return SUITE.decrypt(ciphertext, private_key, info)
    except (InvalidTag, ValueError) as exc:
        raise DecryptError("ciphertext does not decrypt") from exc


def generate_private_key() -> X25519PrivateKey:
    return X25519PrivateKey.generate()


def public_key_bytes(key: X25519PublicKey | X25519PrivateKey) -> bytes:
    """The 32 raw bytes of a public key (of a private key's public half)."""
    if isinstance(key, X25519PrivateKey):
        key = key.public_key()
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def private_key_bytes(key: X25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )


def private_key_from_bytes(data: bytes) -> X25519PrivateKey:
    if len(data) != PRIVATE_KEY_LENGTH:
        raise ValueError(f"an X25519 private key is {PRIVATE_KEY_LENGTH} bytes, got {len(data)}")
    return X25519PrivateKey.from_private_bytes(data)


def public_key_from_bytes(data: bytes) -> X25519PublicKey:
    if len(data) != ENC_LENGTH:
        raise ValueError(f"an X25519 public key is {ENC_LENGTH} bytes, got {len(data)}")
    return X25519PublicKey.from_public_bytes(data)


def key_id_for(public_key: X25519PublicKey | X25519PrivateKey | bytes) -> str:
    """First 8 bytes of SHA-256 of the raw public key, in hex (16 characters)."""
    raw = public_key if isinstance(public_key, bytes) else public_key_bytes(public_key)
    return hashlib.sha256(raw).digest()[:KEY_ID_BYTES].hex()


def key_config(public_key: X25519PublicKey | X25519PrivateKey) -> HpkeConfig:
    """The public key configuration a server publishes (RFC 9180 algorithm ids)."""
    raw = public_key_bytes(public_key)
    return HpkeConfig(
        key_id=key_id_for(raw),
        kem_id=KEM_ID_X25519,
        kdf_id=KDF_ID_HKDF_SHA256,
        aead_id=AEAD_ID_AES_128_GCM,
        public_key=b64url_encode(raw),
    )


@dataclass(frozen=True)
class PinnedKey:
    """A verified public key from an :class:`HpkeConfig`."""

    key_id: str
    public_key: X25519PublicKey


def public_key_from_config(config: HpkeConfig) -> PinnedKey:
    """Check the suite and that ``key_id`` is the hash of the key; return the key.

    A client calls this on the key config it fetched and compares ``key_id`` with
    the one pinned in the campaign view, so a key swap is detected.
    """
    if (config.kem_id, config.kdf_id, config.aead_id) != (
        KEM_ID_X25519, KDF_ID_HKDF_SHA256, AEAD_ID_AES_128_GCM,
    ):
        raise ValueError("unsupported HPKE suite")
    raw = b64url_decode(config.public_key, ENC_LENGTH)
    if key_id_for(raw) != config.key_id:
        raise ValueError("key_id does not match the public key")
    return PinnedKey(key_id=config.key_id, public_key=public_key_from_bytes(raw))


def save_private_key(path: str | os.PathLike[str], key: X25519PrivateKey) -> None:
    """Write ``key`` as PKCS#8 PEM, file mode 0600, atomically (temp file, fsync, rename).

    Refuses to overwrite an existing file (a campaign's key never changes).
    """
    target = Path(path)
    if target.exists():
        raise FileExistsError(f"refusing to overwrite key file {target}")
    make_private_folder(target.parent)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd, temp = tempfile.mkstemp(prefix=".key-", dir=target.parent)  # created with mode 0600
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, target)  # fails if target appeared meanwhile: never overwrite
    finally:
        os.unlink(temp)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def load_private_key(path: str | os.PathLike[str]) -> X25519PrivateKey:
    """Read a key written by :func:`save_private_key`."""
    key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    if not isinstance(key, X25519PrivateKey):
        raise ValueError(f"{path} does not hold an X25519 private key")
    return key


__all__ = [
    "SUITE",
    "DecryptError",
    "PinnedKey",
    "build_info",
    "generate_private_key",
    "key_config",
    "key_id_for",
    "load_private_key",
    "open_",
    "private_key_bytes",
    "private_key_from_bytes",
    "public_key_bytes",
    "public_key_from_bytes",
    "public_key_from_config",
    "save_private_key",
    "seal",
]

"""Server signatures over the relayed campaign documents (docs/wire.md section 9).

The server holds one long-term Ed25519 document-signing key.  Clients reach only the
shuffler, which relays the server's campaign view; an app that ships the server's public
key checks these signatures so that a relay cannot hand it a view and an HPKE key of its
own.  Three statements are signed, each a domain-separated message::

    campaign   = "segshuffle/v1/campaign-document" 0x00
                 || F(campaign_id) || F(config_hash) || F(key_id) || F(public_key)
    parameters = "segshuffle/v1/parameters-document" 0x00
                 || F(campaign_id) || F(parameters_hash)
    end        = "segshuffle/v1/campaign-end" 0x00
                 || F(campaign_id) || F(phase) || R(end_reason)

    F(x) = len(x) (2 bytes, unsigned big-endian) || x
    R(r) = 0x00 when there is no reason, else 0x01 || F(UTF-8 of r)

``campaign_id`` and ``phase`` are ASCII; ``config_hash``, ``parameters_hash`` (32 bytes)
and ``key_id`` (8 bytes) are the raw bytes of their lower-case hex form; ``public_key``
is the 32 raw bytes of the campaign's X25519 key.  The configuration and the
parameters are hashed (SHA-256 of canonical JSON), so signing their hashes covers their
contents; the phase ``round1``/``round2`` is not signed (a relay can always show an old
view, clients then only wait), the terminal phases are.  Signatures are the 64 raw bytes
of Ed25519 (RFC 8032), unpadded base64url in the view's ``signatures`` member.

Pure: no I/O.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from segshuffle.wire.models import (
    TERMINAL_PHASES,
    CampaignView,
    DocumentSignatures,
    b64url_decode,
    b64url_encode,
)

CAMPAIGN_DOMAIN = b"segshuffle/v1/campaign-document\x00"
PARAMETERS_DOMAIN = b"segshuffle/v1/parameters-document\x00"
END_DOMAIN = b"segshuffle/v1/campaign-end\x00"
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
_LENGTH = struct.Struct(">H")


class SignatureError(ValueError):
    """A document signature is missing or does not verify; ``check`` names which one
    (``campaign``, ``parameters`` or ``end``)."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check


def _field(data: bytes) -> bytes:
    """F(x): a 2-byte big-endian length, then the bytes."""
    if len(data) > 0xFFFF:
        raise ValueError("a signed field is at most 65535 bytes")
    return _LENGTH.pack(len(data)) + data


def _hex(text: str, size: int, name: str) -> bytes:
    raw = bytes.fromhex(text)
    if len(raw) != size or raw.hex() != text:
        raise ValueError(f"{name} must be {2 * size} lower-case hex digits")
    return raw


def campaign_message(campaign_id: str, config_hash: str, key_id: str,
                     public_key: bytes) -> bytes:
    """The campaign statement: this configuration (by hash) is sealed to this key."""
    if len(public_key) != PUBLIC_KEY_BYTES:
        raise ValueError(f"the public key must be {PUBLIC_KEY_BYTES} bytes")
    return (CAMPAIGN_DOMAIN + _field(campaign_id.encode("ascii"))
            + _field(_hex(config_hash, 32, "config_hash")) + _field(_hex(key_id, 8, "key_id"))
            + _field(public_key))


def parameters_message(campaign_id: str, parameters_hash: str) -> bytes:
    """The parameters statement: these round-2 parameters (by hash) are the campaign's."""
    return (PARAMETERS_DOMAIN + _field(campaign_id.encode("ascii"))
            + _field(_hex(parameters_hash, 32, "parameters_hash")))


def end_message(campaign_id: str, phase: str, end_reason: str | None) -> bytes:
    """The end statement: the campaign ended in ``phase`` (terminal) for ``end_reason``."""
    if phase not in TERMINAL_PHASES:
        raise ValueError(f"{phase!r} is not a terminal phase")
    reason = b"\x00" if end_reason is None else b"\x01" + _field(end_reason.encode("utf-8"))
    return END_DOMAIN + _field(campaign_id.encode("ascii")) + _field(phase.encode("ascii")) \
        + reason


def _view_campaign_message(view: CampaignView) -> bytes:
    return campaign_message(view.id, view.config_hash, view.key_id,
                            b64url_decode(view.hpke_config.public_key, PUBLIC_KEY_BYTES))


def sign_view(key: Ed25519PrivateKey, view: CampaignView) -> DocumentSignatures:
    """The signatures a server attaches to ``view``: always the campaign statement, the
    parameters statement once they are published, the end statement in a terminal phase."""
    parameters = end = None
    if view.parameters_hash is not None:
        parameters = b64url_encode(key.sign(parameters_message(view.id, view.parameters_hash)))
    if view.phase in TERMINAL_PHASES:
        end = b64url_encode(key.sign(end_message(view.id, view.phase, view.end_reason)))
    return DocumentSignatures(campaign=b64url_encode(key.sign(_view_campaign_message(view))),
                              parameters=parameters, end=end)


def _verify(key: Ed25519PublicKey, signature: str | None, message: bytes, check: str) -> None:
    if signature is None:
        raise SignatureError(check, f"the view carries no {check} signature")
    try:
        key.verify(b64url_decode(signature, SIGNATURE_BYTES), message)
    except (InvalidSignature, ValueError):
        raise SignatureError(check, f"the {check} signature does not verify under the "
                                    "server's document-signing key") from None


def _signatures(view: CampaignView) -> DocumentSignatures:
    return view.signatures if view.signatures is not None else DocumentSignatures()


def verify_campaign_signature(key: Ed25519PublicKey, view: CampaignView) -> None:
    """Raise :class:`SignatureError` unless the server signed the view's id, config hash,
    key id and public key."""
    try:
        message = _view_campaign_message(view)
    except ValueError as exc:
        raise SignatureError("campaign", f"the campaign statement cannot be encoded: {exc}") \
            from None
    _verify(key, _signatures(view).campaign, message, "campaign")


def verify_parameters_signature(key: Ed25519PublicKey, view: CampaignView) -> None:
    """Raise :class:`SignatureError` unless the server signed the view's parameters hash."""
    if view.parameters_hash is None:
        raise SignatureError("parameters", "the view has no parameters to verify")
    try:
        message = parameters_message(view.id, view.parameters_hash)
    except ValueError as exc:
        raise SignatureError("parameters", f"the parameters statement cannot be encoded: "
                                           f"{exc}") from None
    _verify(key, _signatures(view).parameters, message, "parameters")


def verify_end_signature(key: Ed25519PublicKey, view: CampaignView) -> None:
    """Raise :class:`SignatureError` unless the server signed the view's terminal phase and
    end reason (nothing to check in a non-terminal phase)."""
    if view.phase not in TERMINAL_PHASES:
        return
    try:
        message = end_message(view.id, view.phase, view.end_reason)
    except ValueError as exc:
        raise SignatureError("end", f"the end statement cannot be encoded: {exc}") from None
    _verify(key, _signatures(view).end, message, "end")


def parse_server_key(text: str) -> Ed25519PublicKey:
    """The server's document-signing public key from unpadded base64url of its 32 raw
    bytes (what ``GET /v1/signing-key`` and ``segshuffle admin signing-key`` print)."""
    try:
        return Ed25519PublicKey.from_public_bytes(b64url_decode(text.strip(),
                                                                PUBLIC_KEY_BYTES))
    except (ValueError, AttributeError):
        raise ValueError("the server key must be an Ed25519 public key: 32 bytes, unpadded "
                         "base64url") from None

"""The fixed-length protocol plaintext (docs/wire.md; docs/architecture.md, "Plaintext").

Every message of every kind is exactly :data:`PLAINTEXT_LENGTH` = 32 bytes, so the
ciphertext length carries nothing about what a message is:

==========  ==================================================================
bytes       field
==========  ==================================================================
0           format version, ``1``
1           kind: ``0`` null (discarded), ``1`` level, ``2`` item
2..5        value, unsigned 32-bit big endian (level index, item id, 0 for null)
6..21       16 random bytes from :mod:`secrets` (nonce: exact replays are dropped)
22..31      zero
==========  ==================================================================

Blanket items and data items are both kind ``2`` (the server cannot tell them
apart); padding items are ordinary item ids ``d .. d+s-1``.

Decoding is strict: any deviation (length, version, kind, a non-zero value in a
null message, non-zero trailing bytes) raises :class:`PlaintextError`.
"""

from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass
from enum import IntEnum

PLAINTEXT_LENGTH = 32
"""Length in bytes of every plaintext."""

FORMAT_VERSION = 1
NONCE_LENGTH = 16
MAX_VALUE = 2**32 - 1
"""Largest value the 32-bit field can carry."""

_HEADER = struct.Struct(">BBI")  # version, kind, value: bytes 0..5
_NONCE_START = _HEADER.size  # 6
_NONCE_END = _NONCE_START + NONCE_LENGTH  # 22
_TRAILER = bytes(PLAINTEXT_LENGTH - _NONCE_END)  # 10 zero bytes


class PlaintextError(ValueError):
    """A byte string that is not a well-formed protocol plaintext."""


class Kind(IntEnum):
    """Message kinds (byte 1)."""

    NULL = 0
    LEVEL = 1
    ITEM = 2


@dataclass(frozen=True, slots=True)
class Plaintext:
    """A decoded plaintext: its kind, its value and its 16-byte nonce."""

    kind: Kind
    value: int
    nonce: bytes


def encode_plaintext(kind: Kind | int, value: int, nonce: bytes | None = None) -> bytes:
    """The 32-byte encoding of one message; a fresh random nonce unless one is given.

    Passing ``nonce`` is for tests and test vectors only: real messages must use a
    fresh nonce, otherwise the server drops them as replays.
    """
    try:
        kind = Kind(kind)
    except ValueError:
        raise PlaintextError(f"unknown message kind {kind!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlaintextError(f"value must be an integer, got {value!r}")
    if not 0 <= value <= MAX_VALUE:
        raise PlaintextError(f"value must be in [0, 2^32), got {value}")
    if kind is Kind.NULL and value != 0:
        raise PlaintextError("a null message carries value 0")
    if nonce is None:
        nonce = secrets.token_bytes(NONCE_LENGTH)
    elif len(nonce) != NONCE_LENGTH:
        raise PlaintextError(f"nonce must be {NONCE_LENGTH} bytes, got {len(nonce)}")
    return _HEADER.pack(FORMAT_VERSION, int(kind), value) + bytes(nonce) + _TRAILER


def null_plaintext() -> bytes:
    """A null message (an unsent slot of a fixed-size submission)."""
    return encode_plaintext(Kind.NULL, 0)


def level_plaintext(level_index: int) -> bytes:
    """A level message carrying the (possibly randomized) level index."""
    return encode_plaintext(Kind.LEVEL, level_index)


def item_plaintext(item_id: int) -> bytes:
    """An item message (data, blanket or padding item: all look the same)."""
    return encode_plaintext(Kind.ITEM, item_id)


def decode_plaintext(data: bytes) -> Plaintext:
    """Strictly decode 32 bytes; raises :class:`PlaintextError` with the reason."""
    if len(data) != PLAINTEXT_LENGTH:
        raise PlaintextError(f"plaintext must be {PLAINTEXT_LENGTH} bytes, got {len(data)}")
    version, kind_byte, value = _HEADER.unpack_from(data)
    if version != FORMAT_VERSION:
        raise PlaintextError(f"unsupported plaintext version {version}")
    try:
        kind = Kind(kind_byte)
    except ValueError:
        raise PlaintextError(f"unknown message kind {kind_byte}") from None
    if kind is Kind.NULL and value != 0:
        raise PlaintextError("a null message must carry value 0")
    if data[_NONCE_END:] != _TRAILER:
        raise PlaintextError("trailing bytes of a plaintext must be zero")
    return Plaintext(kind=kind, value=value, nonce=bytes(data[_NONCE_START:_NONCE_END]))

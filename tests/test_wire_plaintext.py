"""The 32-byte plaintext: layout, round trip and strict decoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from segshuffle.wire.plaintext import (
    MAX_VALUE,
    PLAINTEXT_LENGTH,
    Kind,
    PlaintextError,
    decode_plaintext,
    encode_plaintext,
    item_plaintext,
    level_plaintext,
    null_plaintext,
)


def test_layout_matches_the_architecture_document():
    nonce = bytes(range(16))
    data = encode_plaintext(Kind.ITEM, 0x01020304, nonce)
    assert data == b"\x01\x02" + b"\x01\x02\x03\x04" + nonce + bytes(10)
    assert len(data) == PLAINTEXT_LENGTH


@given(kind=st.sampled_from([Kind.LEVEL, Kind.ITEM]), value=st.integers(0, MAX_VALUE),
       nonce=st.binary(min_size=16, max_size=16))
def test_round_trip(kind, value, nonce):
    decoded = decode_plaintext(encode_plaintext(kind, value, nonce))
    assert (decoded.kind, decoded.value, decoded.nonce) == (kind, value, nonce)


def test_every_kind_has_the_same_length_and_a_fresh_nonce():
    messages = [null_plaintext(), level_plaintext(3), item_plaintext(12345)]
    assert {len(m) for m in messages} == {PLAINTEXT_LENGTH}
    nonces = {decode_plaintext(item_plaintext(1)).nonce for _ in range(50)}
    assert len(nonces) == 50
    assert decode_plaintext(messages[0]).kind is Kind.NULL


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b[:-1], "32 bytes"),
        (lambda b: b + b"\x00", "32 bytes"),
        (lambda b: b"\x02" + b[1:], "version"),
        (lambda b: b[:1] + b"\x07" + b[2:], "kind"),
        (lambda b: b[:-1] + b"\x01", "trailing"),
    ],
)
def test_strict_decoding_rejects(mutate, reason):
    with pytest.raises(PlaintextError, match=reason):
        decode_plaintext(mutate(item_plaintext(5)))


def test_null_with_value_is_rejected():
    forged = bytearray(null_plaintext())
    forged[5] = 1
    with pytest.raises(PlaintextError, match="null"):
        decode_plaintext(bytes(forged))
    with pytest.raises(PlaintextError):
        encode_plaintext(Kind.NULL, 1)


@pytest.mark.parametrize("value", [-1, MAX_VALUE + 1, True, 1.0])
def test_encoding_rejects_bad_values(value):
    with pytest.raises(PlaintextError):
        encode_plaintext(Kind.ITEM, value)


def test_encoding_rejects_bad_nonce_and_kind():
    with pytest.raises(PlaintextError, match="nonce"):
        encode_plaintext(Kind.ITEM, 1, b"short")
    with pytest.raises(PlaintextError, match="kind"):
        encode_plaintext(9, 1)

"""The shuffler's one-pass submission decoder accepts only what the models accept, and
decodes it to the same bytes (segshuffle.wire.submissions)."""

from __future__ import annotations

import base64
import json
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from segshuffle.services import errors
from segshuffle.services.http_edge import require_strict_json
from segshuffle.wire.models import (
    CIPHERTEXT_B64_LENGTH,
    CIPHERTEXT_LENGTH,
    MAX_MESSAGES_PER_SUBMISSION,
    Round1Submission,
    Round2Submission,
    b64url_decode,
)
from segshuffle.wire.submissions import decode_ciphertext, decode_submission, decoded

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def ciphertext() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(CIPHERTEXT_LENGTH)).decode().rstrip("=")


def general_path(raw: bytes, round_number: int) -> tuple[bytes, tuple[bytes, ...] | None] | None:
    """What the shuffler's general path makes of a body: the decoded ciphertexts, or
    ``None`` where it refuses the body (strict JSON, then the model)."""
    model = Round1Submission if round_number == 1 else Round2Submission
    try:
        require_strict_json(raw)
        body = model.model_validate_json(raw)
    except (errors.DomainError, ValidationError):
        return None
    return tuple(decoded(body))  # type: ignore[return-value]


def agrees(raw: bytes, round_number: int) -> bool:
    """The fast path gives up (``None``) or gives what the general path gives."""
    fast = decode_submission(raw, round_number)
    return fast is None or tuple(fast) == general_path(raw, round_number)


def test_the_plain_form_every_client_sends_is_decoded_at_once() -> None:
    level, data = ciphertext(), [ciphertext() for _ in range(5)]
    for raw, round_number in (
            (json.dumps({"level": level}).encode(), 1),
            (json.dumps({"level": level}, separators=(",", ":")).encode(), 1),
            (json.dumps({"data": data, "level": level}).encode(), 2),
            (json.dumps({"level": level, "data": data}, indent=2).encode(), 2)):
        fast = decode_submission(raw, round_number)
        assert fast is not None
        assert tuple(fast) == general_path(raw, round_number)
    assert decode_submission(json.dumps({"level": level, "data": data}).encode(), 2) == (
        b64url_decode(level), tuple(b64url_decode(text) for text in data))


@pytest.mark.parametrize("text", [
    "A" * CIPHERTEXT_B64_LENGTH,
    "A" * (CIPHERTEXT_B64_LENGTH - 1) + "B",  # a trailing bit set: not canonical
    "A" * (CIPHERTEXT_B64_LENGTH - 1) + "E",  # the lowest data bit: canonical
    "A" * (CIPHERTEXT_B64_LENGTH - 1),
    "A" * (CIPHERTEXT_B64_LENGTH + 1),
    "A" * (CIPHERTEXT_B64_LENGTH - 1) + "=",
    "A" * (CIPHERTEXT_B64_LENGTH - 1) + "+",  # the standard alphabet
    "A" * (CIPHERTEXT_B64_LENGTH - 1) + "\n",
    "A" * (CIPHERTEXT_B64_LENGTH - 2) + "\u00e9A",
    "",
])
def test_a_ciphertext_decodes_exactly_when_the_model_accepts_it(text: str) -> None:
    try:
        expected: bytes | None = b64url_decode(text, CIPHERTEXT_LENGTH)
    except ValueError:
        expected = None
    assert decode_ciphertext(text) == expected


@pytest.mark.parametrize("last", list(ALPHABET))
def test_every_last_character_is_judged_as_the_model_judges_it(last: str) -> None:
    text = ciphertext()[:-1] + last
    try:
        expected: bytes | None = b64url_decode(text, CIPHERTEXT_LENGTH)
    except ValueError:
        expected = None
    assert decode_ciphertext(text) == expected


@pytest.mark.parametrize("value", [None, 3, 3.5, [], {}, b"x", True])
def test_a_ciphertext_that_is_not_a_string_is_not_decoded(value: object) -> None:
    assert decode_ciphertext(value) is None


LEVEL, DATA, OTHER = ciphertext(), [ciphertext(), ciphertext()], ciphertext()


def body(template: str) -> str:
    """``template`` with <L>, <D0>, <D1> and <X> replaced by ciphertexts."""
    for name, value in (("<L>", LEVEL), ("<D0>", DATA[0]), ("<D1>", DATA[1]), ("<X>", OTHER)):
        template = template.replace(name, value)
    return template


UNUSUAL = [
    # valid, but not the plain form: the general path accepts them
    ('{"\\u006cevel": "<L>"}', 1, True),
    ('{"level": "<L>", "data": ["<D0>", "<D1>"]}', 2, True),
    ('\ufeff{"level": "<L>"}', 1, False),
    # invalid: both refuse
    ('{"level": "<L>", "level": "<X>"}', 1, False),
    ('{"level": "<L>", "\\u006cevel": "<X>"}', 1, False),
    ('{"level": "<L>", "data": ["<D0>"], "data": ["<D1>"]}', 2, False),
    ('{"level": "<L>", "data": ["<D0>"]}', 1, False),
    ('{"level": "<L>"}', 2, False),
    ('{"level": "<L>", "data": []}', 2, False),
    ('{"level": "<L>", "data": "<D0>"}', 2, False),
    ('{"level": "<L>", "data": ["<D0>"], "extra": 1}', 2, False),
    ('{"level": "<L>", "extra": "level"}', 1, False),
    ('{"level": "level"}', 1, False),
    ('{"level": NaN}', 1, False),
    ('{"level": 1e999}', 1, False),
    ('["level"]', 1, False),
    ('"level"', 1, False),
    ('{"level": "<L>"', 1, False),
    ('{"level": "' + LEVEL[:-1] + 'B"}', 1, False),
]


@pytest.mark.parametrize(("template", "round_number", "valid"), UNUSUAL)
def test_unusual_and_invalid_bodies_are_left_to_the_models(template: str, round_number: int,
                                                           valid: bool) -> None:
    text = body(template)
    for raw in (text.encode(), text.encode("utf-16")):
        assert (general_path(raw, round_number) is not None) is (valid and raw == text.encode())
        assert agrees(raw, round_number)
    if text.isascii() and "\\" in text:
        assert decode_submission(text.encode(), round_number) is None


def test_the_data_list_is_bounded_as_the_model_bounds_it() -> None:
    for count in (MAX_MESSAGES_PER_SUBMISSION, MAX_MESSAGES_PER_SUBMISSION + 1):
        raw = json.dumps({"level": LEVEL, "data": [DATA[0]] * count}).encode()
        assert (decode_submission(raw, 2) is not None) is (count <= MAX_MESSAGES_PER_SUBMISSION)
        assert agrees(raw, 2)


PLAIN = json.dumps({"level": LEVEL, "data": DATA}).encode()


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_no_mutation_of_a_valid_body_is_accepted_by_the_fast_path_alone(
        data: st.DataObject) -> None:
    raw = bytearray(PLAIN)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(raw)))
        action = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        byte = data.draw(st.sampled_from(list(b'"\\{}[],: \x00\xffAB=+-_lvd0')))
        if action == "insert":
            raw.insert(position, byte)
        elif position < len(raw):
            if action == "flip":
                raw[position] = byte
            else:
                del raw[position]
    for round_number in (1, 2):
        assert agrees(bytes(raw), round_number)

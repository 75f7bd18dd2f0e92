"""Canonical JSON is RFC 8785 (JCS), checked against the independent ``rfc8785`` package."""

from __future__ import annotations

import hashlib
import math

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from segshuffle.wire.models import (
    MAX_SAFE_INTEGER,
    CampaignCreate,
    canonical_json,
    context_hash,
)

finite_floats = st.floats(allow_nan=False, allow_infinity=False)
json_scalars = (st.none() | st.booleans() | finite_floats
                | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
                | st.text(st.characters(blacklist_categories=("Cs",))))
json_values = st.recursive(
    json_scalars,
    lambda children: (st.lists(children, max_size=5)
                      | st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",)),
                                                max_size=6), children, max_size=5)),
    max_leaves=25,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, "1"), (-0.0, "0"), (0.0, "0"), (2e-06, "0.000002"), (1e-6, "0.000001"),
        (1e-7, "1e-7"), (1.5e-7, "1.5e-7"), (1e21, "1e+21"), (1e20, "100000000000000000000"),
        (123456789012345680000.0, "123456789012345680000"), (0.1 + 0.2, "0.30000000000000004"),
        (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"),
        (-2.5, "-2.5"), (333333333.33333329, "333333333.3333333"),
        (9.999e20, "999900000000000000000"),
        (2**53 - 1, "9007199254740991"), (True, "true"), (None, "null"),
    ],
)
def test_numbers_and_literals_are_written_as_ecmascript_does(value, expected):
    assert canonical_json(value) == expected.encode()
    assert rfc8785.dumps(value) == expected.encode()


def test_strings_are_utf8_with_only_the_mandatory_escapes():
    text = 'é東京😀 " \\ / \b\f\n\r\t\x00\x1f\x7f\u2028'
    expected = '"é東京😀 \\" \\\\ / \\b\\f\\n\\r\\t\\u0000\\u001f\x7f\u2028"'
    assert canonical_json(text) == expected.encode("utf-8")


def test_members_are_sorted_by_utf16_code_units_not_code_points():
    # U+FB01 sorts after U+1F600 in UTF-16 (0xFB01 > 0xD83D), before it in code points.
    obj = {"ﬁ": 1, "😀": 2, "€": 3, "é": 4, "a": 5, "": 6}
    assert canonical_json(obj).decode() == '{"":6,"a":5,"é":4,"€":3,"😀":2,"ﬁ":1}'


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (math.nan, ValueError), (math.inf, ValueError), (-math.inf, ValueError),
        (2**53, ValueError), (-(2**53), ValueError), ("\ud800", ValueError),
        ({"\udfff": 1}, ValueError), ({1: "a"}, TypeError), ({"a": {1, 2}}, TypeError),
        (b"bytes", TypeError),
    ],
)
def test_values_json_cannot_carry_exactly_are_refused(value, error):
    with pytest.raises(error):
        canonical_json(value)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_agrees_with_the_rfc8785_package(value):
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=1000, deadline=None)
@given(finite_floats)
def test_every_double_agrees_with_the_rfc8785_package(value):
    assert canonical_json(value) == rfc8785.dumps(value)


def test_a_model_hashes_like_its_dump_and_like_integers_written_as_floats():
    body = {"id": "c-1", "items": ["café", "東京", "x"], "set_size": 1, "levels": [1, 2.5],
            "min_users": 5, "delta": 2e-06}
    config = CampaignCreate.model_validate(body).to_config()
    dumped = config.model_dump(mode="json")
    assert canonical_json(config) == rfc8785.dumps(dumped)
    assert b'"levels":[1,2.5]' in canonical_json(config)
    assert b'"delta":0.000002' in canonical_json(config)
    assert "café".encode() in canonical_json(config)
    as_floats = {**dumped, "levels": [1.0, 2.5], "min_users": 5.0}
    assert canonical_json(as_floats) == canonical_json(config)
    assert context_hash(config) == hashlib.sha256(rfc8785.dumps(dumped)).digest()

"""HTTP body models: strict validation, canonical JSON and context hashes."""

from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import ValidationError

from segshuffle.core.rules import MAX_MESSAGES_PER_USER
from segshuffle.wire.models import (
    CIPHERTEXT_B64_LENGTH,
    CIPHERTEXT_LENGTH,
    MAX_CHUNK_CIPHERTEXTS,
    MAX_MESSAGES_PER_SUBMISSION,
    BatchChunk,
    CampaignConfig,
    CampaignCreate,
    CampaignView,
    PublishedParameters,
    Round2Submission,
    b64url_decode,
    b64url_encode,
    canonical_json,
    context_hash,
    context_hash_hex,
)

BASE = {"id": "c-1", "domain_size": 10, "set_size": 2, "levels": [1, 2.5], "min_users": 5}


def ciphertext(fill: int = 7) -> str:
    return b64url_encode(bytes([fill]) * CIPHERTEXT_LENGTH)


def test_ciphertext_length_constant():
    assert CIPHERTEXT_LENGTH == 80
    assert len(ciphertext()) == CIPHERTEXT_B64_LENGTH == 107


def test_defaults_and_normalisation():
    config = CampaignCreate.model_validate(BASE).to_config()
    assert config.delta is None
    assert config.dropout_tolerance == 0.1
    assert config.fixed_size and config.padding
    assert config.level_privacy is None
    assert config.levels == [1.0, 2.5]
    assert config.privacy_domain_size == 12
    names = CampaignCreate.model_validate(
        {**{k: v for k, v in BASE.items() if k != "domain_size"}, "items": list("abcdef")}
    ).to_config()
    assert names.domain_size == 6


@pytest.mark.parametrize(
    "change",
    [
        {"domain_size": "10"},  # no coercion
        {"domain_size": 1},
        {"set_size": 11},
        {"set_size": 0},
        {"levels": []},
        {"levels": [2, 1]},
        {"levels": [1, 1]},
        {"levels": [0.0]},
        {"levels": [31.0]},
        {"delta": 0.0},
        {"delta": 1.0},
        {"dropout_tolerance": 1.0},
        {"min_users": True},
        {"min_users": 1},
        {"id": "has space"},
        {"id": "x" * 65},
        {"id": "a\x00b"},
        {"level_privacy": -1.0},
        {"unknown": 1},
        {"items": ["a", "a", "b"], "domain_size": None},
        {"items": ["a", "b", "c"], "domain_size": 10},
        {"domain_size": None},
        {"insecure_parameters": {"m": 0.0, "lambdas": [1.0]}},  # one rate for two levels
        {"insecure_parameters": {"m": 0.0, "lambdas": [1.0, 1.5]}},
    ],
)
def test_campaign_create_rejects(change):
    body = {**BASE, **change}
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(ValidationError):
        CampaignCreate.model_validate(body)


def test_canonical_json_and_hash_are_stable_across_a_json_round_trip():
    config = CampaignCreate.model_validate(BASE).to_config()
    text = canonical_json(config)
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")).encode()
    again = CampaignConfig.model_validate_json(config.model_dump_json())
    assert context_hash(again) == context_hash(config) == hashlib.sha256(text).digest()
    assert context_hash_hex(config) == config.hash_hex()
    assert len(context_hash(config)) == 32
    other = CampaignCreate.model_validate({**BASE, "set_size": 3}).to_config()
    assert context_hash(other) != context_hash(config)


def test_base64url_is_strict():
    assert b64url_decode(ciphertext(), CIPHERTEXT_LENGTH) == bytes([7]) * 80
    for bad in ["AAA=", "A", "+/+/", ciphertext()[:-1] + "B"]:
        with pytest.raises(ValueError):
            b64url_decode(bad)
    with pytest.raises(ValueError, match="80 bytes"):
        b64url_decode(b64url_encode(bytes(79)), CIPHERTEXT_LENGTH)


def test_batch_chunk_validation():
    good = {"chunk_index": 0, "chunk_count": 2, "stream": "data", "ciphertexts": [ciphertext()]}
    assert BatchChunk.model_validate(good).ciphertexts == [ciphertext()]
    for change in [
        {"chunk_index": 2},
        {"chunk_index": -1},
        {"chunk_count": 0},
        {"stream": "other"},
        {"ciphertexts": [ciphertext()[:-1]]},
        {"ciphertexts": [ciphertext() + "A"]},
        {"ciphertexts": ["!" * CIPHERTEXT_B64_LENGTH]},
        {"ciphertexts": [ciphertext()] * (MAX_CHUNK_CIPHERTEXTS + 1)},
        {"ciphertexts": "notalist"},
    ]:
        with pytest.raises(ValidationError):
            BatchChunk.model_validate({**good, **change})


def test_round2_submission_needs_data():
    with pytest.raises(ValidationError):
        Round2Submission.model_validate({"level": ciphertext(), "data": []})
    assert len(Round2Submission.model_validate(
        {"level": ciphertext(), "data": [ciphertext(1), ciphertext(2)]}).data) == 2


def _parameters(**changes):
    base = {
        "campaign_id": "c", "key_id": "0123456789abcdef", "config_hash": "ab" * 32,
        "levels": [1.0, 2.0], "m": 0.1 + 0.2, "blanket_slots": 1,
        "lambdas": [1 / 3, 1.0], "domain_size": 5, "privacy_domain_size": 7,
        "padding_items": 2, "set_size": 2, "messages_per_user": 3, "fixed_size": True,
        "level_privacy": None, "delta": 1e-5, "users": 100, "accounting_users": 90,
        "honest_users": 81, "dropout_tolerance": 0.1, "fake_tolerance": 0.1,
        "epsilons": [1.0, None], "epsilons_lower": [0.99, None],
        "mse_bound": 0.5, "insecure": False,
    }
    base.update(changes)
    return PublishedParameters.model_validate(base)


def test_parameters_hash_survives_json_and_ignores_nothing_it_binds():
    parameters = _parameters()
    text = parameters.model_dump_json()
    again = PublishedParameters.model_validate(json.loads(text))
    assert again.hash_hex() == parameters.hash_hex()
    assert _parameters(m=0.3).hash_hex() != parameters.hash_hex()
    # Integers given for float fields hash the same (the model dump normalises them).
    assert _parameters(levels=[1, 2]).hash_hex() == parameters.hash_hex()


def test_response_models_ignore_unknown_members_and_view_context_hashes():
    config = CampaignCreate.model_validate(BASE).to_config()
    hpke = {"key_id": "0123456789abcdef", "public_key": b64url_encode(bytes(32))}
    view = CampaignView.model_validate({
        "id": "c-1", "phase": "round1", "config": config.model_dump(mode="json"),
        "config_hash": config.hash_hex(), "key_id": "0123456789abcdef", "hpke_config": hpke,
        "future_member": 1})
    assert view.context_hash_for(1) == context_hash(config)
    with pytest.raises(ValueError, match="not published"):
        view.context_hash_for(2)
    with pytest.raises(ValueError):
        view.context_hash_for(3)
    parameters = _parameters()
    published = view.model_copy(update={"parameters": parameters,
                                        "parameters_hash": parameters.hash_hex()})
    assert published.context_hash_for(2) == context_hash(parameters)


# --- blanket mode -------------------------------------------------------------------------

# Hashes (RFC 8785 canonical JSON) of the default (slots) configuration and parameters,
# which carry no ``blanket_mode`` member: naming the default must not change them.
BASE_CONFIG_HASH = "46d2a9b424d041ce4edfb7dc1297fa0140a8405f5bfa17aa874ae69b829c41a3"
BASE_PARAMETERS_HASH = "03d6b0c083cd4bf655119eca999aaf3eb1129524663462cace1fffd8389e793f"


def test_default_blanket_mode_keeps_the_hashes_and_is_omitted_from_dumps():
    config = CampaignCreate.model_validate(BASE).to_config()
    assert config.blanket_mode == "slots"
    assert "blanket_mode" not in config.model_dump(mode="json")
    assert "blanket_mode" not in json.loads(config.model_dump_json())
    assert config.hash_hex() == BASE_CONFIG_HASH
    explicit = CampaignCreate.model_validate({**BASE, "blanket_mode": "slots"}).to_config()
    assert explicit.hash_hex() == BASE_CONFIG_HASH
    parameters = _parameters()
    assert parameters.blanket_mode == "slots"
    assert parameters.hash_hex() == BASE_PARAMETERS_HASH
    assert _parameters(blanket_mode="slots").hash_hex() == BASE_PARAMETERS_HASH


def test_independent_mode_round_trips_and_is_bound_by_the_hashes():
    config = CampaignCreate.model_validate({**BASE, "blanket_mode": "independent"}).to_config()
    assert config.blanket_mode == "independent"
    assert json.loads(canonical_json(config))["blanket_mode"] == "independent"
    again = CampaignConfig.model_validate_json(config.model_dump_json())
    assert again == config and again.hash_hex() == config.hash_hex() != BASE_CONFIG_HASH
    parameters = _parameters(blanket_mode="independent", blanket_slots=7,
                             messages_per_user=9)
    again_parameters = PublishedParameters.model_validate_json(parameters.model_dump_json())
    assert again_parameters.blanket_mode == "independent"
    assert again_parameters.hash_hex() == parameters.hash_hex() != BASE_PARAMETERS_HASH
    # nested in the public view, as clients receive it
    hpke = {"key_id": "0123456789abcdef", "public_key": b64url_encode(bytes(32))}
    view = CampaignView.model_validate_json(CampaignView.model_validate({
        "id": "c-1", "phase": "round2", "config": config.model_dump(mode="json"),
        "config_hash": config.hash_hex(), "key_id": "0123456789abcdef", "hpke_config": hpke,
        "parameters": parameters.model_dump(mode="json"),
        "parameters_hash": parameters.hash_hex()}).model_dump_json())
    assert view.config.blanket_mode == view.parameters.blanket_mode == "independent"
    assert view.config.hash_hex() == config.hash_hex()
    assert view.parameters.hash_hex() == parameters.hash_hex()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"blanket_mode": "uniform"}, "'slots' or 'independent'"),
        ({"blanket_mode": None}, "'slots' or 'independent'"),
        # s + D = 2 + 8192 + 2 data messages per user exceed the protocol's cap
        ({"blanket_mode": "independent", "domain_size": 8192},
         "one data message per item of the privacy domain"),
        ({"blanket_mode": "independent",
          "insecure_parameters": {"m": 12.5, "lambdas": [1.0, 1.0]}},
         "at most the privacy domain size 12"),
    ],
)
def test_bad_blanket_modes_are_refused(change, message):
    with pytest.raises(ValidationError, match=message):
        CampaignCreate.model_validate({**BASE, **change})


def test_independent_mode_accepts_its_largest_domain_and_rate():
    cap = min(MAX_MESSAGES_PER_USER, MAX_MESSAGES_PER_SUBMISSION)
    largest = cap - 2 - 2  # s + D = cap with D = d + s
    config = CampaignCreate.model_validate(
        {**BASE, "blanket_mode": "independent", "domain_size": largest,
         "insecure_parameters": {"m": 12.0, "lambdas": [1.0, 1.0]}}).to_config()
    assert config.privacy_domain_size + config.set_size == cap
    with pytest.raises(ValidationError, match="smaller domain"):
        CampaignCreate.model_validate(
            {**BASE, "blanket_mode": "independent", "domain_size": largest + 1})
    slots = CampaignCreate.model_validate(
        {**BASE, "insecure_parameters": {"m": 12.5, "lambdas": [1.0, 1.0]}}).to_config()
    assert slots.blanket_mode == "slots"

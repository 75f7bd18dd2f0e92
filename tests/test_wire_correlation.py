"""The correlation ratio on the wire (docs/wire.md): campaigns ask for R, parameters repeat
it, documents without it (R = 1) hash as before, and a client refuses parameters whose R
is not the configuration's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from segshuffle.client import vectors
from segshuffle.client.policy import ClientPolicy
from segshuffle.client.verify import configuration_problems
from segshuffle.wire.models import (
    CampaignConfig,
    CampaignCreate,
    PublishedParameters,
    canonical_json,
)

ROOT = Path(__file__).resolve().parents[1]
HONEST = json.loads((ROOT / "docs" / "test-vectors.json").read_text("utf-8"))["parameters"][0]
KEY_ID = HONEST["parameters"]["key_id"]
REQUEST = {"id": "c", "domain_size": 8, "set_size": 2, "levels": [0.5, 1.0, 2.0],
           "min_users": 100}


def test_a_campaign_may_ask_for_a_correlation_ratio():
    assert CampaignCreate.model_validate({**REQUEST, "correlation_ratio": 3}).to_config() \
        .correlation_ratio == 3.0
    assert CampaignCreate.model_validate(REQUEST).to_config().correlation_ratio == 1.0
    for bad in (0.5, 1001, float("nan"), "3"):
        with pytest.raises(ValidationError):
            CampaignCreate.model_validate({**REQUEST, "correlation_ratio": bad})


def test_documents_without_a_guard_hash_as_before():
    """R = 1 is left out of the canonical JSON, so the vectors' stored hashes still hold."""
    config = CampaignConfig.model_validate(HONEST["config"])
    parameters = PublishedParameters.model_validate(HONEST["parameters"])
    assert config.correlation_ratio == 1.0 and parameters.correlation_ratio == 1.0
    assert config.hash_hex() == HONEST["config_hash"]
    assert parameters.hash_hex() == HONEST["parameters_hash"]
    assert b"correlation_ratio" not in canonical_json(config)
    guarded = config.model_copy(update={"correlation_ratio": 3.0})
    assert b'"correlation_ratio":3' in canonical_json(guarded)
    assert guarded.hash_hex() != config.hash_hex()
    assert CampaignConfig.model_validate(guarded.model_dump(mode="json")) == guarded


def _case(config_ratio: float, parameters_ratio: float) -> list[str]:
    config = CampaignConfig.model_validate(HONEST["config"]).model_copy(
        update={"correlation_ratio": config_ratio})
    parameters = PublishedParameters.model_validate(HONEST["parameters"]).model_copy(
        update={"correlation_ratio": parameters_ratio, "config_hash": config.hash_hex()})
    return vectors.client_checks(config, parameters, KEY_ID)


def test_the_client_refuses_parameters_with_another_ratio():
    assert _case(1.0, 1.0) == []
    assert _case(3.0, 3.0) == []
    assert _case(3.0, 1.0) == ["correlation_ratio"]
    assert _case(1.0, 2.0) == ["correlation_ratio"]


def test_the_configuration_check_takes_the_creation_rules():
    config = CampaignConfig.model_validate(HONEST["config"])
    policy = ClientPolicy()
    assert configuration_problems(config.model_copy(update={"correlation_ratio": 3.0}),
                                  policy) == []
    problems = configuration_problems(config.model_copy(update={"correlation_ratio": 0.5}),
                                      policy)
    assert [name for name, _ in problems] == ["correlation_ratio"]


def test_the_vectors_carry_a_guarded_campaign_and_its_refusal():
    config = vectors.campaign_config(vectors.BlanketMode.SLOTS, vectors.GUARDED_RATIO)
    assert config.correlation_ratio == 3.0 and config.id == "vectors-slots-r3"
    honest = PublishedParameters.model_validate(HONEST["parameters"]).model_copy(
        update={"correlation_ratio": 3.0})
    assert vectors.correlation_ignored(honest).correlation_ratio == 1.0


@pytest.mark.slow
def test_the_server_publishes_the_guarded_optimum():
    from segshuffle.services.server.aggregation import publish_parameters

    config = vectors.campaign_config(vectors.BlanketMode.SLOTS, vectors.GUARDED_RATIO)
    published, _ = publish_parameters(config, config.hash_hex(), KEY_ID, vectors.LEVEL_COUNTS)
    assert published.correlation_ratio == 3.0
    plain, _ = publish_parameters(CampaignConfig.model_validate(HONEST["config"]),
                                  HONEST["config_hash"], KEY_ID, vectors.LEVEL_COUNTS)
    assert plain.correlation_ratio == 1.0
    # The guard moves the lambdas toward each other at a larger blanket.
    assert published.m > plain.m and published.lambdas[0] > plain.lambdas[0]
    assert vectors.client_checks(config, published, KEY_ID) == []

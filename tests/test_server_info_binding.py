"""The server opens a message only under the ``info`` of its campaign, round, key and context.

Each test seals one message with real HPKE to the campaign's real key under an
``info`` that differs from the right one in exactly one field, and sends it in a
chunk next to a correctly sealed message: the server keeps the good one and
drops the other as ``decrypt-failed``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from fastapi.testclient import TestClient

from segshuffle.crypto import build_info, key_id_for, public_key_from_config, seal
from segshuffle.services.server import create_app
from segshuffle.wire.models import CampaignView, HpkeConfig, b64url_encode
from segshuffle.wire.plaintext import item_plaintext, level_plaintext

from .test_server_support import ADMIN, SHUFFLER, Sealer, decoded, deliver, make_settings

USERS = 6
FIELDS = ["campaign_id", "round", "key_id", "context_hash"]


def _wrong(field: str, right: dict[str, Any]) -> dict[str, Any]:
    """The right ``build_info`` arguments with one field changed (to a well-formed value)."""
    changed = dict(right)
    if field == "campaign_id":
        changed["campaign_id"] = right["campaign_id"] + "x"
    elif field == "round":
        changed["round_"] = 3 - right["round_"]
    elif field == "key_id":
        changed["key_id"] = key_id_for(bytes(32))
    else:
        changed["context_hash"] = hashlib.sha256(right["context_hash"]).digest()
    assert changed != right
    return changed


def _put(client: TestClient, round_: int, batch: str, stream: str,
         ciphertexts: list[str]) -> dict[str, Any]:
    response = client.put(f"/v1/campaigns/bind/rounds/{round_}/batches/{batch}",
                          json={"chunk_index": 0, "chunk_count": 1, "stream": stream,
                                "ciphertexts": ciphertexts}, headers=SHUFFLER)
    assert response.status_code == 202, response.text
    return decoded(client, "bind", round_, batch, stream, 0)


def _start(client: TestClient) -> dict[str, Any]:
    response = client.post("/v1/campaigns", headers=ADMIN, json={
        "id": "bind", "domain_size": 4, "set_size": 1, "levels": [1.0, 2.0],
        "min_users": 2, "dropout_tolerance": 0.0,
        "insecure_parameters": {"m": 0, "lambdas": [1.0, 1.0]}})
    assert response.status_code == 201, response.text
    return response.json()


def _seal_with(view: dict[str, Any], arguments: dict[str, Any], plaintext: bytes) -> str:
    pinned = public_key_from_config(HpkeConfig.model_validate(view["hpke_config"]))
    return b64url_encode(seal(pinned.public_key, build_info(**arguments), plaintext))


def _right(view: dict[str, Any], round_: int) -> dict[str, Any]:
    campaign = CampaignView.model_validate(view)
    return {"campaign_id": campaign.id, "round_": round_, "key_id": campaign.key_id,
            "context_hash": campaign.context_hash_for(round_)}


def _assert_only_the_wrong_one_dropped(receipt: dict[str, Any], stream: str) -> None:
    assert receipt["received"] == 2 and receipt["accepted"] == 1
    (failure,) = receipt["failures"]
    assert (failure["stream"], failure["chunk_index"], failure["index"]) == (stream, 0, 1)
    assert failure["type"].rsplit(":", 1)[-1] == "decrypt-failed"  # the problem type's name
    counts = receipt["failure_counts"]
    assert counts["decrypt-failed"] == 1 and sum(counts.values()) == 1


@pytest.mark.parametrize("field", FIELDS)
def test_round1_refuses_a_level_message_sealed_under_another_info(tmp_path, field):
    with TestClient(create_app(make_settings(tmp_path, allow_insecure_parameters=True))) as client:
        view = _start(client)
        right = _right(view, 1)
        good = _seal_with(view, right, level_plaintext(0))
        bad = _seal_with(view, _wrong(field, right), level_plaintext(1))
        _assert_only_the_wrong_one_dropped(_put(client, 1, "b1", "levels", [good, bad]),
                                           "levels")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("stream", ["levels", "data"])
def test_round2_refuses_a_message_sealed_under_another_info(tmp_path, field, stream):
    with TestClient(create_app(make_settings(tmp_path, allow_insecure_parameters=True))) as client:
        view = _start(client)
        deliver(client, "bind", 1, "b1", {"levels": Sealer(view, 1).levels([0] * USERS)})
        view = client.get("/v1/campaigns/bind").json()
        assert view["phase"] == "round2"
        right = _right(view, 2)
        plaintext = level_plaintext(1) if stream == "levels" else item_plaintext(2)
        good = _seal_with(view, right, plaintext)
        bad = _seal_with(view, _wrong(field, right), plaintext)
        _assert_only_the_wrong_one_dropped(_put(client, 2, "b2", stream, [good, bad]), stream)

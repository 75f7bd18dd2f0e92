"""Campaign documents built from docs/test-vectors.json, for tests that need a view the
client accepts (or a vector's refused one) without running a server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from segshuffle.crypto import key_config, private_key_from_bytes
from segshuffle.wire.models import CampaignView, HpkeConfig

VECTORS_PATH = Path(__file__).resolve().parent.parent / "docs" / "test-vectors.json"
VECTORS: dict[str, Any] = json.loads(VECTORS_PATH.read_text("utf-8"))


def vector_key_config() -> HpkeConfig:
    """The key config of the vectors' first HPKE key."""
    return key_config(private_key_from_bytes(bytes.fromhex(VECTORS["hpke"][0]["private_key"])))


def vector_view(case: dict[str, Any], phase: str = "round2") -> CampaignView:
    """The campaign view of a parameter document of the vectors, in ``phase`` (its
    parameters published from round 2 on)."""
    hpke = vector_key_config()
    published = phase != "round1"
    return CampaignView.model_validate({
        "id": case["config"]["id"], "phase": phase, "config": case["config"],
        "config_hash": case["config_hash"], "key_id": hpke.key_id,
        "hpke_config": hpke.model_dump(mode="json"),
        "parameters": case["parameters"] if published else None,
        "parameters_hash": case["parameters_hash"] if published else None})

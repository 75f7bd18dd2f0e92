"""Helpers of the server tests: settings, and sealing messages the way clients do.

Holds no tests; the shuffler's part (permuting, chunking, forwarding) is played by
:func:`deliver`, which sends real HPKE ciphertexts over the server's HTTP API.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from segshuffle.crypto import build_info, public_key_from_config, seal
from segshuffle.services.server import Settings
from segshuffle.wire.models import CampaignView, HpkeConfig, b64url_encode
from segshuffle.wire.plaintext import item_plaintext, level_plaintext, null_plaintext

ADMIN_TOKEN = "admin-token-0123456789abcdef"
SHUFFLER_TOKEN = "shuffler-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SHUFFLER = {"Authorization": f"Bearer {SHUFFLER_TOKEN}"}


def make_settings(directory: Any, **changes: Any) -> Settings:
    values: dict[str, Any] = {
        "database": str(directory / "server.sqlite3"),
        "admin_token": ADMIN_TOKEN,
        "shuffler_token": SHUFFLER_TOKEN,
        "decrypt_workers": 1,
        "synchronous": "NORMAL",
    }
    values.update(changes)
    return Settings(**values)


class Sealer:
    """Seals plaintexts for one round of a campaign, as a client would after fetching the view."""

    def __init__(self, view: dict[str, Any], round_: int) -> None:
        campaign = CampaignView.model_validate(view)
        pinned = public_key_from_config(HpkeConfig.model_validate(campaign.hpke_config))
        assert pinned.key_id == campaign.key_id
        self.public_key = pinned.public_key
        self.info = build_info(campaign.id, round_, campaign.key_id,
                               campaign.context_hash_for(round_))

    def raw(self, plaintext: bytes) -> str:
        return b64url_encode(seal(self.public_key, self.info, plaintext))

    def levels(self, indices: Sequence[int]) -> list[str]:
        return [self.raw(level_plaintext(i)) for i in indices]

    def slots(self, values: Sequence[int | None]) -> list[str]:
        return [self.raw(null_plaintext() if v is None else item_plaintext(v)) for v in values]


def deliver(client: Any, campaign_id: str, round_: int, batch_id: str,
            streams: dict[str, list[str]], chunk_size: int = 50, *,
            shuffle: bool = True, complete: bool = True) -> list[dict[str, Any]]:
    """Permute each stream, PUT it in chunks and (optionally) complete the batch."""
    receipts = []
    for stream, ciphertexts in streams.items():
        messages = list(ciphertexts)
        if shuffle:
            random.Random(7).shuffle(messages)
        parts = [messages[i:i + chunk_size] for i in range(0, len(messages), chunk_size)] or [[]]
        for index, part in enumerate(parts):
            response = client.put(
                f"/v1/campaigns/{campaign_id}/rounds/{round_}/batches/{batch_id}",
                json={"chunk_index": index, "chunk_count": len(parts), "stream": stream,
                      "ciphertexts": part},
                headers=SHUFFLER,
            )
            assert response.status_code == 200, response.text
            receipts.append(response.json())
    if complete:
        response = client.post(
            f"/v1/campaigns/{campaign_id}/rounds/{round_}/batches/{batch_id}/complete",
            headers=SHUFFLER)
        assert response.status_code == 200, response.text
        receipts.append(response.json())
    return receipts

"""Helpers of the server tests: settings, and sealing messages the way clients do.

Holds no tests; the shuffler's part (permuting, chunking, forwarding) is played by
:func:`deliver`, which sends real HPKE ciphertexts over the server's HTTP API.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from segshuffle.crypto import build_info, public_key_from_config, seal
from segshuffle.services.server import Settings
from segshuffle.wire.models import CampaignView, HpkeConfig, b64url_encode
from segshuffle.wire.plaintext import item_plaintext, level_plaintext, null_plaintext

ADMIN_TOKEN = "admin-token-0123456789abcdef"
SHUFFLER_TOKEN = "shuffler-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SHUFFLER = {"Authorization": f"Bearer {SHUFFLER_TOKEN}"}


def run_serve_server(directory: Path, *flags: str, cwd: Path | None = None
                     ) -> subprocess.CompletedProcess[str]:
    """``segshuffle serve server FLAGS`` in a subprocess with valid tokens and its key
    directory in ``directory``/keys (and no other SEGSHUFFLE_ setting), to its end."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    environment.update(SEGSHUFFLE_SERVER_ADMIN_TOKEN="a" * 32,
                       SEGSHUFFLE_SERVER_SHUFFLER_TOKEN="s" * 32,
                       SEGSHUFFLE_SERVER_KEY_DIR=str(directory / "keys"))
    return subprocess.run([sys.executable, "-m", "segshuffle.cli.main", "serve", "server",
                           *flags], capture_output=True, text=True, timeout=60,
                          env=environment, cwd=cwd)


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


WAIT_SECONDS = 60.0
"""Longest wait of :func:`decoded` for the server's decode workers."""

COMPLETION_WAIT_SECONDS = 600.0
"""Longest wait of :func:`complete_round`: round 1's completion job runs the optimizer,
which at a hundred users of s = 2 takes seconds alone and a minute or more on a busy
2-core host running the rest of the test suite beside it."""


def decoded(client: Any, campaign_id: str, round_: int, batch_id: str, stream: str,
            chunk_index: int, *, timeout: float = WAIT_SECONDS) -> dict[str, Any]:
    """The chunk's receipt once the server has decoded it (polls ``GET`` of the chunk)."""
    url = (f"/v1/campaigns/{campaign_id}/rounds/{round_}/batches/{batch_id}/chunks/"
           f"{stream}/{chunk_index}")
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(url, headers=SHUFFLER)
        assert response.status_code == 200, response.text
        receipt: dict[str, Any] = response.json()
        if receipt["state"] == "decoded":
            return receipt
        assert time.monotonic() < deadline, f"chunk {stream}/{chunk_index} was not decoded"
        time.sleep(0.01)


def complete_round(client: Any, campaign_id: str, round_: int, batch_id: str, *,
                   timeout: float = COMPLETION_WAIT_SECONDS) -> Any:
    """``POST .../complete`` as the shuffler does: again after each ``unavailable`` answer
    (chunks still being decoded) and each ``202`` (the round's completion job is waiting or
    being computed), both with ``Retry-After``, until another answer or ``timeout``.  The
    pause doubles from 10 ms to 250 ms, so a long optimizer is not slowed by the polls."""
    url = f"/v1/campaigns/{campaign_id}/rounds/{round_}/batches/{batch_id}/complete"
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        response = client.post(url, headers=SHUFFLER)
        if response.status_code not in (202, 503) or time.monotonic() > deadline:
            return response
        assert response.headers["retry-after"], response.text
        time.sleep(pause)
        pause = min(2.0 * pause, 0.25)


def deliver(client: Any, campaign_id: str, round_: int, batch_id: str,
            streams: dict[str, list[str]], chunk_size: int = 50, *,
            shuffle: bool = True, complete: bool = True) -> list[dict[str, Any]]:
    """Permute each stream, PUT it in chunks and (optionally) complete the batch.

    Returns the receipts once decoded (each chunk is accepted with ``202`` and a queued
    receipt, or ``200`` when it was decoded before), then the completion."""
    receipts = []
    sent = []
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
            assert response.status_code in (200, 202), response.text
            answer = response.json()
            assert (response.status_code == 202) == (answer["state"] == "queued"), answer
            sent.append((stream, index, answer["duplicate"]))
    for stream, index, duplicate in sent:
        receipt = decoded(client, campaign_id, round_, batch_id, stream, index)
        receipts.append({**receipt, "duplicate": duplicate})
    if complete:
        response = complete_round(client, campaign_id, round_, batch_id)
        assert response.status_code == 200, response.text
        receipts.append(response.json())
    return receipts

"""The shuffler's submission path stays cheap without changing its answers:
FastAPI's own telemetry is off, the receipt is the model's serialization, and SQLite
checkpoints its WAL in large steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from segshuffle.services.observability import framework_telemetry_off
from segshuffle.services.shuffler.app import _receipt, create_app
from segshuffle.services.shuffler.settings import Settings
from segshuffle.services.shuffler.storage import Storage
from segshuffle.services.sqlite_base import WAL_AUTOCHECKPOINT_PAGES
from segshuffle.wire.models import SubmissionReceipt


def _settings(tmp: Path) -> Settings:
    return Settings(database=str(tmp / "shuffler.db"), key_directory=str(tmp / "keys"),
                    server_url="http://127.0.0.1:9", server_token="s" * 32,
                    operator_token="o" * 32, enrollment="open")


def test_framework_telemetry_is_off(tmp_path: Path) -> None:
    pytest.importorskip("fastapi.telemetry")
    assert framework_telemetry_off() == {
        "telemetry": {"tracing": False, "metrics": False, "logs": False}}
    app = create_app(_settings(tmp_path))
    assert not app._native_telemetry.enabled()


@pytest.mark.parametrize("round_number", [1, 2])
def test_the_cached_receipt_is_the_models_serialization(round_number: int) -> None:
    expected = SubmissionReceipt(campaign_id="c-1", round=round_number, accepted=True)
    assert _receipt("c-1", round_number) == expected.model_dump_json().encode()
    assert _receipt("c-1", round_number) is _receipt("c-1", round_number)


def test_the_wal_is_checkpointed_in_large_steps(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "shuffler.db")
    try:
        (pages,) = storage._db.execute("PRAGMA wal_autocheckpoint").fetchone()
        (mode,) = storage._db.execute("PRAGMA journal_mode").fetchone()
    finally:
        storage.close()
    assert pages == WAL_AUTOCHECKPOINT_PAGES
    assert mode == "wal"

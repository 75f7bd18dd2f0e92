"""Versioned schema migrations of both services' SQLite storage."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from segshuffle.services import sqlite_base
from segshuffle.services.server import storage as server_storage
from segshuffle.services.server.storage_api import pack_ciphertexts
from segshuffle.services.shuffler import storage as shuffler_storage
from segshuffle.services.sqlite_base import Migration, SchemaVersionError

BACKENDS: dict[str, tuple[Callable[[Path], Any], tuple[Migration, ...]]] = {
    "server": (server_storage.Repository, server_storage.MIGRATIONS),
    "shuffler": (shuffler_storage.Storage, shuffler_storage.MIGRATIONS),
}


def _versions(path: Path) -> list[int]:
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute("SELECT version FROM schema_version ORDER BY version")]


@pytest.mark.parametrize("service", sorted(BACKENDS))
def test_fresh_database_ends_at_latest_version(tmp_path: Path, service: str) -> None:
    factory, migrations = BACKENDS[service]
    path = tmp_path / "db.sqlite3"
    factory(path).close()
    latest = sqlite_base.latest_version(migrations)
    assert latest >= 1
    assert _versions(path) == list(range(1, latest + 1))


@pytest.mark.parametrize("service", sorted(BACKENDS))
def test_reopening_is_idempotent(tmp_path: Path, service: str) -> None:
    factory, _ = BACKENDS[service]
    path = tmp_path / "db.sqlite3"
    factory(path).close()
    first = _versions(path)
    factory(path).close()
    factory(path).close()
    assert _versions(path) == first


@pytest.mark.parametrize("service", sorted(BACKENDS))
def test_database_created_before_versioning_is_adopted(tmp_path: Path, service: str) -> None:
    factory, migrations = BACKENDS[service]
    path = tmp_path / "db.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(migrations[0].script)
    factory(path).close()
    assert _versions(path)[-1] == sqlite_base.latest_version(migrations)


@pytest.mark.parametrize("service", sorted(BACKENDS))
def test_newer_version_is_refused(tmp_path: Path, service: str) -> None:
    factory, migrations = BACKENDS[service]
    path = tmp_path / "db.sqlite3"
    factory(path).close()
    newer = sqlite_base.latest_version(migrations) + 1
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, 0)", (newer,))
    with pytest.raises(SchemaVersionError, match=f"schema version {newer}"):
        factory(path)


def test_migrations_apply_in_order_and_failed_step_rolls_back(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    steps = (Migration(1, "a", "CREATE TABLE a (x INTEGER);"),
             Migration(2, "b", "CREATE TABLE b (x INTEGER);\nINSERT INTO missing VALUES (1);"))
    with pytest.raises(sqlite3.OperationalError):
        sqlite_base.open_database(path, steps, service="test")
    assert _versions(path) == [1]
    with sqlite3.connect(path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "a" in tables and "b" not in tables
    fixed = (steps[0], Migration(2, "b", "CREATE TABLE b (x INTEGER);"))
    sqlite_base.open_database(path, fixed, service="test").close()
    assert _versions(path) == [1, 2]


def test_misnumbered_migrations_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="numbered"):
        sqlite_base.open_database(tmp_path / "db.sqlite3",
                                  (Migration(2, "b", "CREATE TABLE b (x);"),), service="test")


def test_server_queue_upgrade_keeps_rows_sequence_and_blob_last(tmp_path: Path) -> None:
    """Version 4 rebuilds the decode queue with a ``failures`` column before the blob
    (a column after it is read by walking the blob's overflow pages): queued rows, their
    claims and the ``seq`` sequence (never reused) survive the upgrade."""
    path = tmp_path / "server.sqlite3"
    version_3 = server_storage.MIGRATIONS[:3]
    with sqlite3.connect(path, isolation_level=None) as db:
        sqlite_base.migrate(db, version_3, service="server")
        for index in range(3):
            db.execute("INSERT INTO decode_queue (campaign_id, round, stream, chunk_index,"
                       " batch_id, chunk_count, digest, received, owner, lease_until,"
                       " attempts, ciphertexts) VALUES ('c', 1, 'levels', ?, 'b', 3, x'00',"
                       " 1, ?, 5.0, ?, ?)",
                       (index, "w" if index == 1 else None, index,
                        pack_ciphertexts([bytes([index]) * 1000] * 9)))
        db.execute("DELETE FROM decode_queue WHERE chunk_index = 2")  # seq 3 used once
    repository = server_storage.Repository(path)
    try:
        first = repository.queued_chunk("c", 1, "levels", 0)
        second = repository.queued_chunk("c", 1, "levels", 1)
        assert first is not None and second is not None
        assert (first.seq, first.owner, first.attempts, first.failures) == (1, None, 0, 0)
        assert (second.seq, second.owner, second.attempts, second.failures) == (2, "w", 1, 0)
        with repository.transaction() as tx:
            tx.enqueue_chunk("c", 1, "levels", 2, server_storage.QueueEntry(
                "b", 3, b"\x01", (b"x",)))
        third = repository.queued_chunk("c", 1, "levels", 2)
        assert third is not None and third.seq == 4  # not 3 again
        claimed = repository.claim_chunk("w2", 60.0)
        assert claimed is not None and claimed.ciphertexts == (bytes(1000),) * 9
    finally:
        repository.close()
    with sqlite3.connect(path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(decode_queue)")]
    assert columns[-2:] == ["failures", "ciphertexts"]
    assert _versions(path)[-1] == server_storage.MIGRATIONS[-1].version


def test_server_batches_upgrade_to_completion_jobs(tmp_path: Path) -> None:
    """Version 5 adds the completion job's columns to the batches: a round pinned before the
    upgrade can be completed as a job, a completed one stays completed."""
    path = tmp_path / "server.sqlite3"
    with sqlite3.connect(path, isolation_level=None) as db:
        sqlite_base.migrate(db, server_storage.MIGRATIONS[:4], service="server")
        for campaign, completion in (("open", None), ("done", '{"phase":"round2"}')):
            db.execute("INSERT INTO campaigns (id, config_json, config_hash, key_id,"
                       " public_key, phase, created_at) VALUES (?, '{}', 'h', 'k', x'00',"
                       " 'round1', 0)", (campaign,))
            db.execute("INSERT INTO batches (campaign_id, round, batch_id, completion_json)"
                       " VALUES (?, 1, 'b', ?)", (campaign, completion))
    repository = server_storage.Repository(path)
    try:
        assert repository.completion_jobs() == []
        job = repository.request_completion("open", 1, "b")
        assert job is not None and job.attempts == 0 and job.state == "waiting"
        assert repository.request_completion("done", 1, "b") is None
        batch = repository.batch("done", 1)
        assert batch is not None and batch.completion == {"phase": "round2"}
    finally:
        repository.close()
    assert _versions(path)[-1] == 5

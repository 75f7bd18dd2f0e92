"""SQLite storage of the server (analyzer): campaigns, batches, chunks, counts, nonces,
and the decode queue.

One database file in WAL mode, one connection guarded by a lock, and every state
change is one ``BEGIN IMMEDIATE`` transaction (the shared
:class:`~segshuffle.services.sqlite_base.SQLiteStore`), so a ``kill -9`` leaves either the
state before or the state after it.  The HTTP layer never touches SQL.

What is stored is only what decoding needs, never anything about a user, and a
ciphertext only while its chunk waits in the decode queue:

- ``campaigns``: the normalized configuration and its hash, the key id and public
  key (the private key lives in its own 0600 file, :mod:`.keys`), the phase, the
  published round-2 parameters and the decoded results (JSON), or why the campaign
  ended without results.
- ``batches``: the one batch id pinned per (campaign, round) and, once complete, the
  stored completion answer (so a repeated ``complete`` is idempotent).
- ``chunks``: one row per (campaign, round, stream, chunk index) with a digest of
  its content and the receipt returned for it (idempotent retries, conflicts).
- ``counts``: per (campaign, round, stream, value) the number of accepted messages.
- ``nonces``: the nonces of accepted messages per (campaign, round): an exact replay
  of a message carries the same nonce and is dropped.
- ``decode_queue``: the chunks accepted but not yet decoded, with their ciphertexts
  (one blob, :func:`~.storage_api.pack_ciphertexts`) and their claim (owner, lease
  expiry on this process's clock, attempts). A row lives from the chunk's arrival
  until the transaction that counts it, or until its campaign ends; nothing else
  about a chunk's messages is ever stored. A claim is one ``BEGIN IMMEDIATE``
  transaction (SQLite has one writer at a time, so no ``SKIP LOCKED`` is needed), and
  an idle worker's poll is a plain read that takes no write lock.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..sqlite_base import Migration, SQLiteStore
from .storage_api import (
    JOB_COLUMNS,
    NULL_VALUE,
    OPEN_JOB,
    QUEUE_COLUMNS,
    AcceptedMessage,
    BatchRecord,
    CampaignRecord,
    ChunkRecord,
    ClaimedChunk,
    CompletionJob,
    ConflictError,
    DecodeBacklog,
    QueuedChunk,
    QueueEntry,
    StoredChunk,
    job_from_row,
    pack_ciphertexts,
    queued_from_row,
    unpack_ciphertexts,
)

__all__ = [
    "MIGRATIONS", "NULL_VALUE", "AcceptedMessage", "BatchRecord", "CampaignRecord",
    "ChunkRecord", "ConflictError", "Repository", "SQLiteTransaction", "StoredChunk",
]

_SCHEMA_1 = """
CREATE TABLE IF NOT EXISTS campaigns (
    id TEXT PRIMARY KEY,
    config_json TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    key_id TEXT NOT NULL,
    public_key BLOB NOT NULL,
    phase TEXT NOT NULL,
    parameters_json TEXT,
    parameters_hash TEXT,
    round1_json TEXT,
    results_json TEXT,
    created_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    batch_id TEXT NOT NULL,
    completion_json TEXT,
    PRIMARY KEY (campaign_id, round)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    stream TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    batch_id TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    digest BLOB NOT NULL,
    receipt_json TEXT NOT NULL,
    PRIMARY KEY (campaign_id, round, stream, chunk_index)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counts (
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    stream TEXT NOT NULL,
    value INTEGER NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, round, stream, value)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS nonces (
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    nonce BLOB NOT NULL,
    PRIMARY KEY (campaign_id, round, nonce)
) WITHOUT ROWID;
"""

_SCHEMA_2 = """
ALTER TABLE campaigns ADD COLUMN end_reason TEXT;
"""

_SCHEMA_3 = """
CREATE TABLE IF NOT EXISTS decode_queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    stream TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    batch_id TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    digest BLOB NOT NULL,
    received INTEGER NOT NULL,
    owner TEXT,
    lease_until REAL NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    ciphertexts BLOB NOT NULL,
    UNIQUE (campaign_id, round, stream, chunk_index)
);
"""
# The blob is the last column: scanning for a claimable row reads the small columns only.

_QUEUE_SMALL_COLUMNS = ("seq, campaign_id, round, stream, chunk_index, batch_id, chunk_count,"
                        " digest, received, owner, lease_until, attempts")
_SCHEMA_4 = f"""
CREATE TABLE decode_queue_4 (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    stream TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    batch_id TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    digest BLOB NOT NULL,
    received INTEGER NOT NULL,
    owner TEXT,
    lease_until REAL NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    ciphertexts BLOB NOT NULL,
    UNIQUE (campaign_id, round, stream, chunk_index)
);
INSERT INTO decode_queue_4 ({_QUEUE_SMALL_COLUMNS}, ciphertexts)
    SELECT {_QUEUE_SMALL_COLUMNS}, ciphertexts FROM decode_queue;
DELETE FROM sqlite_sequence WHERE name = 'decode_queue_4';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'decode_queue_4', seq FROM sqlite_sequence WHERE name = 'decode_queue';
DROP TABLE decode_queue;
ALTER TABLE decode_queue_4 RENAME TO decode_queue;
"""
# The queue again with a ``failures`` column, before the blob (a column after it would be
# read by walking the blob's overflow pages). Rows and the sequence are kept, so no
# ``seq`` is ever used twice.

_SCHEMA_5 = """
ALTER TABLE batches ADD COLUMN completion_requested REAL;
ALTER TABLE batches ADD COLUMN job_owner TEXT;
ALTER TABLE batches ADD COLUMN job_lease_until REAL NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN job_started REAL;
ALTER TABLE batches ADD COLUMN job_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN job_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN job_error TEXT;
"""
# A round's completion job lives on its pinned batch's row: requested when the shuffler
# first asks to complete it, done when its completion is stored (storage_api.CompletionJob).

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "campaigns, batches, chunks, counts, nonces", _SCHEMA_1),
    Migration(2, "why a failed or aborted campaign ended", _SCHEMA_2),
    Migration(3, "the decode queue", _SCHEMA_3),
    Migration(4, "failed decoding attempts of a queued chunk", _SCHEMA_4),
    Migration(5, "durable completion jobs on the batches", _SCHEMA_5),
)
"""The server's schema, in order (:mod:`segshuffle.services.sqlite_base`); append only."""




def _loads(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


class Repository(SQLiteStore):
    """The SQLite implementation of :class:`.storage_api.ServerStorage`."""

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        super().__init__(path, MIGRATIONS, service="server", synchronous=synchronous)

    # -- campaigns ---------------------------------------------------------------------------

    def create_campaign(self, campaign_id: str, config: Mapping[str, Any], config_hash: str,
                        key_id: str, public_key: bytes) -> CampaignRecord:
        """Insert a new campaign in phase ``round1``; :class:`ConflictError` if the id exists."""
        try:
            with self._transaction() as db:
                db.execute(
                    "INSERT INTO campaigns (id, config_json, config_hash, key_id, public_key,"
                    " phase, created_at) VALUES (?, ?, ?, ?, ?, 'round1', ?)",
                    (campaign_id, _dumps(config), config_hash, key_id, public_key, time.time()),
                )
        except sqlite3.IntegrityError:
            raise ConflictError(f"campaign {campaign_id!r} already exists") from None
        record = self.campaign(campaign_id)
        assert record is not None
        return record

    def campaign(self, campaign_id: str) -> CampaignRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, config_json, config_hash, key_id, public_key, phase, parameters_json,"
                " parameters_hash, round1_json, results_json, end_reason FROM campaigns"
                " WHERE id = ?",
                (campaign_id,),
            ).fetchone()
        if row is None:
            return None
        return CampaignRecord(
            id=row[0], config=json.loads(row[1]), config_hash=row[2], key_id=row[3],
            public_key=bytes(row[4]), phase=row[5], parameters=_loads(row[6]),
            parameters_hash=row[7], round1=_loads(row[8]), results=_loads(row[9]),
            end_reason=row[10],
        )

    def phase(self, campaign_id: str) -> str | None:
        """The campaign's phase (a cheap read), ``None`` if unknown."""
        with self._lock:
            row = self._db.execute("SELECT phase FROM campaigns WHERE id = ?",
                                   (campaign_id,)).fetchone()
        return None if row is None else str(row[0])

    def collecting_campaign_ids(self) -> list[str]:
        """The campaigns in round 1 or round 2, sorted."""
        with self._lock:
            return [r[0] for r in self._db.execute(
                "SELECT id FROM campaigns WHERE phase IN ('round1', 'round2') ORDER BY id")]

    def campaign_ids(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT id FROM campaigns ORDER BY id")]

    def campaign_phases(self, after: str | None, limit: int) -> list[tuple[str, str]]:
        with self._lock:
            return [(str(r[0]), str(r[1])) for r in self._db.execute(
                "SELECT id, phase FROM campaigns WHERE id > ? ORDER BY id LIMIT ?",
                (after or "", limit))]

    # -- batches and chunks ------------------------------------------------------------------

    def batch(self, campaign_id: str, round_: int) -> BatchRecord | None:
        """The pinned batch id of a round and its stored completion (None until complete)."""
        with self._lock:
            row = self._db.execute(
                "SELECT batch_id, completion_json FROM batches WHERE campaign_id = ? AND round = ?",
                (campaign_id, round_),
            ).fetchone()
        return None if row is None else BatchRecord(batch_id=row[0], completion=_loads(row[1]))

    def chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
              ) -> ChunkRecord | None:
        with self._lock:
            return _chunk(self._db, campaign_id, round_, stream, chunk_index)

    def stream_chunks(self, campaign_id: str, round_: int, stream: str) -> list[StoredChunk]:
        """Every stored chunk of a stream (index, count, receipt), by index."""
        with self._lock:
            rows = self._db.execute(
                "SELECT chunk_index, chunk_count, receipt_json FROM chunks WHERE"
                " campaign_id = ? AND round = ? AND stream = ? ORDER BY chunk_index",
                (campaign_id, round_, stream),
            ).fetchall()
        return [StoredChunk(chunk_index=r[0], chunk_count=r[1], receipt=json.loads(r[2]))
                for r in rows]

    def counts(self, campaign_id: str, round_: int, stream: str) -> dict[int, int]:
        """Accepted messages per value of one stream of a round (nulls under NULL_VALUE)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT value, count FROM counts WHERE campaign_id = ? AND round = ?"
                " AND stream = ?", (campaign_id, round_, stream)).fetchall()
        return {int(v): int(c) for v, c in rows}

    @contextmanager
    def transaction(self) -> Iterator[SQLiteTransaction]:
        """A ``BEGIN IMMEDIATE`` transaction: writers are serialised, readers are not."""
        with self._transaction() as db:
            yield SQLiteTransaction(db)

    # -- the decode queue --------------------------------------------------------------------

    def queued_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
                     ) -> QueuedChunk | None:
        with self._lock:
            return _queued_chunk(self._db, campaign_id, round_, stream, chunk_index)

    def decode_backlog(self, campaign_id: str, round_: int) -> DecodeBacklog:
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(failures > 0), 0) FROM decode_queue"
                " WHERE campaign_id = ? AND round = ?", (campaign_id, round_)).fetchone()
        return DecodeBacklog(queued=int(row[0]), failing=int(row[1]))

    def claim_chunk(self, owner: str, lease_seconds: float) -> ClaimedChunk | None:
        """Claim the oldest claimable row (see the Protocol). An empty queue costs one
        read and no write lock; otherwise the row is found again and claimed inside one
        ``BEGIN IMMEDIATE`` transaction, which no other claimer can interleave."""
        with self._lock:
            if self._db.execute("SELECT 1 FROM decode_queue WHERE lease_until <= ? LIMIT 1",
                                (time.time(),)).fetchone() is None:
                return None
            with self._transaction() as db:
                now = time.time()
                row = db.execute(
                    f"SELECT {QUEUE_COLUMNS}, ciphertexts FROM decode_queue"
                    " WHERE lease_until <= ? ORDER BY seq LIMIT 1", (now,)).fetchone()
                if row is None:
                    return None
                db.execute("UPDATE decode_queue SET owner = ?, lease_until = ?,"
                           " attempts = attempts + 1 WHERE seq = ?",
                           (owner, now + lease_seconds, row[0]))
        queued = queued_from_row(row)
        return ClaimedChunk(**{**queued.__dict__, "owner": owner,
                               "attempts": queued.attempts + 1},
                            ciphertexts=unpack_ciphertexts(bytes(row[-1])))

    def listen_for_queued_chunks(self, on_queued: Callable[[], None], stop: threading.Event,
                                 on_failure: Callable[[Exception, float], None] | None = None
                                 ) -> None:
        """Returns at once: one process owns a SQLite file, and it wakes its own workers
        when it queues a chunk."""
        return None

    def renew_claim(self, seq: int, owner: str, lease_seconds: float) -> bool:
        with self._transaction() as db:
            return db.execute(
                "UPDATE decode_queue SET lease_until = ? WHERE seq = ? AND owner = ?",
                (time.time() + lease_seconds, seq, owner)).rowcount == 1

    def release_claim(self, seq: int, owner: str, delay_seconds: float = 0.0, *,
                      failed: bool = False) -> bool:
        with self._transaction() as db:
            return db.execute(
                "UPDATE decode_queue SET owner = NULL, lease_until = ?,"
                " failures = failures + ? WHERE seq = ? AND owner = ?",
                (time.time() + max(0.0, delay_seconds), int(failed), seq, owner)
            ).rowcount == 1


    # -- completion jobs ---------------------------------------------------------------------

    def _job(self, db: sqlite3.Connection, where: str, parameters: tuple[Any, ...]
             ) -> CompletionJob | None:
        row = db.execute(f"SELECT {JOB_COLUMNS} FROM batches WHERE {where} AND {OPEN_JOB}",
                         parameters).fetchone()
        return None if row is None else job_from_row((*row, time.time()))

    def request_completion(self, campaign_id: str, round_: int, batch_id: str
                           ) -> CompletionJob | None:
        with self._transaction() as db:
            db.execute("UPDATE batches SET completion_requested = ? WHERE campaign_id = ?"
                       " AND round = ? AND batch_id = ? AND completion_json IS NULL"
                       " AND completion_requested IS NULL",
                       (time.time(), campaign_id, round_, batch_id))
            return self._job(db, "campaign_id = ? AND round = ? AND batch_id = ?",
                             (campaign_id, round_, batch_id))

    def completion_job(self, campaign_id: str, round_: int) -> CompletionJob | None:
        with self._lock:
            return self._job(self._db, "campaign_id = ? AND round = ?", (campaign_id, round_))

    def completion_jobs(self) -> list[CompletionJob]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {JOB_COLUMNS} FROM batches WHERE {OPEN_JOB}"
                " ORDER BY completion_requested").fetchall()
        now = time.time()
        return [job_from_row((*row, now)) for row in rows]

    def claim_completion(self, owner: str, lease_seconds: float) -> CompletionJob | None:
        with self._transaction() as db:
            now = time.time()
            row = db.execute(
                f"SELECT campaign_id, round FROM batches WHERE {OPEN_JOB}"
                " AND job_lease_until <= ? ORDER BY completion_requested LIMIT 1", (now,)
            ).fetchone()
            if row is None:
                return None
            db.execute("UPDATE batches SET job_owner = ?, job_lease_until = ?, job_started = ?,"
                       " job_attempts = job_attempts + 1 WHERE campaign_id = ? AND round = ?",
                       (owner, now + lease_seconds, now, row[0], row[1]))
            return self._job(db, "campaign_id = ? AND round = ?", (row[0], row[1]))

    def renew_completion(self, campaign_id: str, round_: int, owner: str,
                         lease_seconds: float) -> bool:
        with self._transaction() as db:
            return db.execute(
                "UPDATE batches SET job_lease_until = ? WHERE campaign_id = ? AND round = ?"
                " AND job_owner = ? AND completion_json IS NULL",
                (time.time() + lease_seconds, campaign_id, round_, owner)).rowcount == 1

    def release_completion(self, campaign_id: str, round_: int, owner: str,
                           delay_seconds: float = 0.0, *, error: str | None = None) -> bool:
        with self._transaction() as db:
            return db.execute(
                "UPDATE batches SET job_owner = NULL, job_started = NULL, job_lease_until = ?,"
                " job_failures = job_failures + ?, job_error = COALESCE(?, job_error)"
                " WHERE campaign_id = ? AND round = ? AND job_owner = ?",
                (time.time() + max(0.0, delay_seconds), int(error is not None), error,
                 campaign_id, round_, owner)).rowcount == 1


class SQLiteTransaction:
    """The SQLite implementation of :class:`.storage_api.ServerTransaction`."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def phase(self, campaign_id: str) -> str | None:
        row = self._db.execute("SELECT phase FROM campaigns WHERE id = ?",
                               (campaign_id,)).fetchone()
        return None if row is None else str(row[0])

    def batch(self, campaign_id: str, round_: int) -> BatchRecord | None:
        row = self._db.execute(
            "SELECT batch_id, completion_json FROM batches WHERE campaign_id = ? AND round = ?",
            (campaign_id, round_)).fetchone()
        return None if row is None else BatchRecord(batch_id=row[0], completion=_loads(row[1]))

    def chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
              ) -> ChunkRecord | None:
        return _chunk(self._db, campaign_id, round_, stream, chunk_index)

    def pin_batch(self, campaign_id: str, round_: int, batch_id: str) -> None:
        self._db.execute("INSERT INTO batches (campaign_id, round, batch_id) VALUES (?, ?, ?)",
                         (campaign_id, round_, batch_id))

    def insert_nonces(self, campaign_id: str, round_: int, nonces: Sequence[bytes]
                      ) -> list[bool]:
        fresh = []
        for nonce in nonces:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO nonces (campaign_id, round, nonce) VALUES (?, ?, ?)",
                (campaign_id, round_, nonce))
            fresh.append(cursor.rowcount == 1)
        return fresh

    def add_counts(self, campaign_id: str, round_: int, stream: str,
                   counts: Mapping[int, int]) -> None:
        self._db.executemany(
            "INSERT INTO counts (campaign_id, round, stream, value, count)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (campaign_id, round, stream, value)"
            " DO UPDATE SET count = count + excluded.count",
            [(campaign_id, round_, stream, value, count) for value, count in counts.items()])

    def put_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int,
                  chunk: ChunkRecord) -> None:
        self._db.execute(
            "INSERT INTO chunks (campaign_id, round, stream, chunk_index, batch_id,"
            " chunk_count, digest, receipt_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (campaign_id, round_, stream, chunk_index, chunk.batch_id, chunk.chunk_count,
             chunk.digest, _dumps(chunk.receipt)))

    def complete_batch(self, campaign_id: str, round_: int,
                       completion: Mapping[str, Any]) -> None:
        self._db.execute(
            "UPDATE batches SET completion_json = ? WHERE campaign_id = ? AND round = ?",
            (_dumps(completion), campaign_id, round_))

    def publish_parameters(self, campaign_id: str, parameters: Mapping[str, Any],
                           parameters_hash: str, round1: Mapping[str, Any]) -> None:
        self._db.execute(
            "UPDATE campaigns SET phase = 'round2', parameters_json = ?, parameters_hash = ?,"
            " round1_json = ? WHERE id = ?",
            (_dumps(parameters), parameters_hash, _dumps(round1), campaign_id))

    def store_results(self, campaign_id: str, results: Mapping[str, Any]) -> None:
        self._db.execute("UPDATE campaigns SET phase = 'done', results_json = ? WHERE id = ?",
                         (_dumps(results), campaign_id))

    def end_campaign(self, campaign_id: str, phase: str, reason: str) -> None:
        self._db.execute("UPDATE campaigns SET phase = ?, end_reason = ? WHERE id = ?",
                         (phase, reason, campaign_id))

    def delete_nonces(self, campaign_id: str, round_: int) -> None:
        self._db.execute("DELETE FROM nonces WHERE campaign_id = ? AND round = ?",
                         (campaign_id, round_))

    def stream_chunk_count(self, campaign_id: str, round_: int, stream: str) -> int | None:
        row = self._db.execute(
            "SELECT chunk_count FROM chunks WHERE campaign_id = ? AND round = ? AND stream = ?"
            " UNION ALL SELECT chunk_count FROM decode_queue WHERE campaign_id = ?"
            " AND round = ? AND stream = ? LIMIT 1",
            (campaign_id, round_, stream) * 2).fetchone()
        return None if row is None else int(row[0])

    def queued_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
                     ) -> QueuedChunk | None:
        return _queued_chunk(self._db, campaign_id, round_, stream, chunk_index)

    def enqueue_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int,
                      entry: QueueEntry) -> None:
        try:
            self._db.execute(
                "INSERT INTO decode_queue (campaign_id, round, stream, chunk_index, batch_id,"
                " chunk_count, digest, received, ciphertexts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (campaign_id, round_, stream, chunk_index, entry.batch_id, entry.chunk_count,
                 entry.digest, len(entry.ciphertexts), pack_ciphertexts(entry.ciphertexts)))
        except sqlite3.IntegrityError:
            raise ConflictError(f"chunk {chunk_index} of stream {stream!r} in round {round_} "
                                f"of campaign {campaign_id!r} is queued already") from None

    def dequeue_chunk(self, campaign_id: str, seq: int) -> bool:
        return self._db.execute("DELETE FROM decode_queue WHERE campaign_id = ? AND seq = ?",
                                (campaign_id, seq)).rowcount == 1

    def queued_count(self, campaign_id: str, round_: int) -> int:
        return _queued_count(self._db, campaign_id, round_)

    def drop_queue(self, campaign_id: str) -> int:
        return self._db.execute("DELETE FROM decode_queue WHERE campaign_id = ?",
                                (campaign_id,)).rowcount


def _chunk(db: sqlite3.Connection, campaign_id: str, round_: int, stream: str,
           chunk_index: int) -> ChunkRecord | None:
    row = db.execute(
        "SELECT batch_id, chunk_count, digest, receipt_json FROM chunks WHERE"
        " campaign_id = ? AND round = ? AND stream = ? AND chunk_index = ?",
        (campaign_id, round_, stream, chunk_index)).fetchone()
    if row is None:
        return None
    return ChunkRecord(batch_id=row[0], chunk_count=row[1], digest=bytes(row[2]),
                       receipt=json.loads(row[3]))


def _queued_chunk(db: sqlite3.Connection, campaign_id: str, round_: int, stream: str,
                  chunk_index: int) -> QueuedChunk | None:
    row = db.execute(
        f"SELECT {QUEUE_COLUMNS} FROM decode_queue WHERE campaign_id = ? AND round = ?"
        " AND stream = ? AND chunk_index = ?",
        (campaign_id, round_, stream, chunk_index)).fetchone()
    return None if row is None else queued_from_row(row)


def _queued_count(db: sqlite3.Connection, campaign_id: str, round_: int) -> int:
    row = db.execute("SELECT COUNT(*) FROM decode_queue WHERE campaign_id = ? AND round = ?",
                     (campaign_id, round_)).fetchone()
    return int(row[0])

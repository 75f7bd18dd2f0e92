"""PostgreSQL storage of the server (analyzer): the same records as the SQLite
:class:`~.storage.Repository`, for several replicas sharing one database.

The tables and what they hold are those of :mod:`.storage` (campaigns, batches,
chunks, counts, nonces, the decode queue); only what the server needs to decode is
stored, never anything about a user, and a ciphertext only while its chunk waits in
the decode queue. What differs is how atomicity is obtained:

- SQLite serialises every writer with ``BEGIN IMMEDIATE`` on one file owned by one
  process. Here several processes write at once, so each :class:`PostgresTransaction`
  takes an exclusive transaction-scoped advisory lock per campaign
  (``server:campaign:<id>``, :func:`~segshuffle.services.postgres_base.lock`) the first
  time one of its methods names that campaign, before any read or write of it. Two
  transactions on the same campaign therefore run one after the other, and since the
  connection is ``READ COMMITTED`` every statement after the lock sees what the previous
  holder committed: the service's read-check-write (is the chunk stored, is the round
  still open, which batch is pinned) holds across replicas, and two replicas taking the
  same chunk never count it twice. Transactions on different campaigns do not wait for
  each other. A transaction that touches several campaigns must name them in the same
  order as every other such transaction, or PostgreSQL may end one with a
  ``DeadlockDetected`` error (the service touches one campaign per transaction).
- Every lock wait (the advisory lock, a row a concurrent insert holds) is bounded by
  ``lock_timeout`` seconds, a setting of each pooled connection made once when it is
  opened (:class:`~segshuffle.services.postgres_base.PostgresStore`), so no
  transaction pays a round trip for it; past it the statement fails with
  :class:`psycopg.errors.LockNotAvailable` and its transaction is rolled back.
- Writes whose SQLite version relies on a unique key are ``ON CONFLICT`` statements:
  nonces (``DO NOTHING``, the returned rows say which were new), counts (``DO UPDATE``
  adding to the stored count), and campaign creation (``DO NOTHING``; no row back means
  the id exists, :class:`~.storage_api.ConflictError`, even when two replicas race).
  :meth:`PostgresTransaction.pin_batch` and :meth:`PostgresTransaction.put_chunk` raise
  :class:`~.storage_api.ConflictError` when their row exists already (the service checks
  before, inside the same locked transaction, so this only catches a misuse).
- Nonces and counts of a chunk are one statement each, whatever the chunk's size
  (arrays passed as parameters and expanded with ``unnest``).
- The decode queue (``decode_queue``, :mod:`.storage_api`) is written inside campaign
  transactions (enqueue, dequeue, drop), but claimed outside them, one statement per
  claim: ``UPDATE ... WHERE seq = (SELECT seq ... WHERE lease_until <= now ORDER BY seq
  LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING ...``. A row another claimer is taking at
  that instant is skipped, not waited for, and a row claimed a moment ago fails the
  lease test when PostgreSQL re-checks it after the other claimer's commit, so two
  claimers never get the same row while its lease holds. Leases are on the database's
  clock (``clock_timestamp()``), so replicas with skewed clocks agree on expiry. The
  ciphertexts are one ``bytea`` stored out of line uncompressed (``STORAGE
  EXTERNAL``: random bytes do not compress), so scanning for a claimable row does not
  read them.

JSON columns are ``TEXT`` holding exactly what SQLite stores (sorted keys, compact
separators, no NaN), so records decode identically on both backends, key order
included. Campaign ids use the ``"C"`` collation, so ``ORDER BY id`` and the keyset
pagination of :meth:`PostgresRepository.campaign_phases` follow code-point order, as
SQLite's binary comparison and Python's ``sorted`` do, whatever the database's locale.

Connection problems surface as :class:`psycopg.Error` (a full pool as
:class:`psycopg_pool.PoolTimeout`, which is one); the service decides what they mean.
Nothing here logs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from ..postgres_base import PostgresMigration, PostgresStore, lock
from .storage_api import (
    JOB_COLUMNS,
    NULL_VALUE,
    OPEN_JOB,
    QUEUE_COLUMNS,
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

__all__ = ["MIGRATIONS", "NULL_VALUE", "PostgresRepository", "PostgresTransaction"]

_SCHEMA_1 = """
CREATE TABLE campaigns (
    id TEXT COLLATE "C" PRIMARY KEY,
    config_json TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    key_id TEXT NOT NULL,
    public_key BYTEA NOT NULL,
    phase TEXT NOT NULL,
    parameters_json TEXT,
    parameters_hash TEXT,
    round1_json TEXT,
    results_json TEXT,
    end_reason TEXT,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE batches (
    campaign_id TEXT COLLATE "C" NOT NULL,
    round INTEGER NOT NULL,
    batch_id TEXT NOT NULL,
    completion_json TEXT,
    PRIMARY KEY (campaign_id, round)
);
CREATE TABLE chunks (
    campaign_id TEXT COLLATE "C" NOT NULL,
    round INTEGER NOT NULL,
    stream TEXT COLLATE "C" NOT NULL,
    chunk_index INTEGER NOT NULL,
    batch_id TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    digest BYTEA NOT NULL,
    receipt_json TEXT NOT NULL,
    PRIMARY KEY (campaign_id, round, stream, chunk_index)
);
CREATE TABLE counts (
    campaign_id TEXT COLLATE "C" NOT NULL,
    round INTEGER NOT NULL,
    stream TEXT COLLATE "C" NOT NULL,
    value BIGINT NOT NULL,
    count BIGINT NOT NULL,
    PRIMARY KEY (campaign_id, round, stream, value)
);
CREATE TABLE nonces (
    campaign_id TEXT COLLATE "C" NOT NULL,
    round INTEGER NOT NULL,
    nonce BYTEA NOT NULL,
    PRIMARY KEY (campaign_id, round, nonce)
);
"""

_SCHEMA_2 = """
CREATE TABLE decode_queue (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    campaign_id TEXT COLLATE "C" NOT NULL,
    round INTEGER NOT NULL,
    stream TEXT COLLATE "C" NOT NULL,
    chunk_index INTEGER NOT NULL,
    batch_id TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    digest BYTEA NOT NULL,
    received INTEGER NOT NULL,
    owner TEXT,
    lease_until DOUBLE PRECISION NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    ciphertexts BYTEA NOT NULL,
    UNIQUE (campaign_id, round, stream, chunk_index)
);
ALTER TABLE decode_queue ALTER COLUMN ciphertexts SET STORAGE EXTERNAL;
"""

_SCHEMA_3 = """
ALTER TABLE decode_queue ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
"""

_SCHEMA_4 = """
ALTER TABLE batches ADD COLUMN completion_requested DOUBLE PRECISION;
ALTER TABLE batches ADD COLUMN job_owner TEXT;
ALTER TABLE batches ADD COLUMN job_lease_until DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN job_started DOUBLE PRECISION;
ALTER TABLE batches ADD COLUMN job_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN job_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN job_error TEXT;
"""

MIGRATIONS: tuple[PostgresMigration, ...] = (
    PostgresMigration(1, "campaigns, batches, chunks, counts, nonces", _SCHEMA_1),
    PostgresMigration(2, "the decode queue", _SCHEMA_2),
    PostgresMigration(3, "failed decoding attempts of a queued chunk", _SCHEMA_3),
    PostgresMigration(4, "durable completion jobs on the batches", _SCHEMA_4),
)
"""The server's PostgreSQL schema, in order (:mod:`segshuffle.services.postgres_base`);
append only. Version 1 is SQLite's versions 1 and 2 together (``end_reason`` included):
a PostgreSQL database never held the schema before it. Versions 2, 3 and 4 are SQLite's
3, 4 and 5."""

QUEUE_CHANNEL = "segshuffle_decode_queue"
"""The ``LISTEN``/``NOTIFY`` channel on which a queued chunk is announced (at commit, to
every server process, :meth:`PostgresRepository.listen_for_queued_chunks`)."""
LISTEN_POLL_SECONDS = 0.5
"""How often a listener looks up from waiting for notifications (to see it should stop)."""
LISTEN_RETRY_SECONDS = (0.5, 30.0)
"""The first and the longest wait before a lost listening connection is opened again."""

_NOW = "extract(epoch FROM clock_timestamp())"
"""The database's clock in seconds, the one every lease is measured on."""
_CLAIM = f"""
UPDATE decode_queue SET owner = %(owner)s, lease_until = {_NOW} + %(lease)s,
    attempts = attempts + 1
WHERE seq = (SELECT seq FROM decode_queue WHERE lease_until <= {_NOW}
             ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING {QUEUE_COLUMNS}, ciphertexts
"""

_CLAIM_COMPLETION = f"""
UPDATE batches SET job_owner = %(owner)s, job_lease_until = {_NOW} + %(lease)s,
    job_started = {_NOW}, job_attempts = job_attempts + 1
WHERE (campaign_id, round) = (
    SELECT campaign_id, round FROM batches WHERE {OPEN_JOB} AND job_lease_until <= {_NOW}
    ORDER BY completion_requested LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING {JOB_COLUMNS}, {_NOW}
"""

_CAMPAIGN_COLUMNS = ("id, config_json, config_hash, key_id, public_key, phase, parameters_json,"
                     " parameters_hash, round1_json, results_json, end_reason")

_INSERT_NONCES = """
INSERT INTO nonces (campaign_id, round, nonce)
SELECT %(campaign)s, %(round)s, given.nonce
FROM unnest(%(nonces)b::bytea[]) AS given(nonce)
ON CONFLICT (campaign_id, round, nonce) DO NOTHING
RETURNING nonce
"""
# A nonce given twice is inserted once and skipped the other time (DO NOTHING, unlike
# DO UPDATE, accepts a key twice in one statement); the returned rows are the nonces
# that were not stored before the statement, and insert_nonces marks the first
# occurrence of each as the new one. The array is sent in binary (%b): half the bytes
# of the hex text form, and no escaping to parse.

_ADD_COUNTS = """
INSERT INTO counts (campaign_id, round, stream, value, count)
SELECT %(campaign)s, %(round)s, %(stream)s, given.value, given.count
FROM unnest(%(values)s::bigint[], %(counts)s::bigint[]) AS given(value, count)
ON CONFLICT (campaign_id, round, stream, value) DO UPDATE SET count = counts.count + EXCLUDED.count
"""


def _loads(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)


def _dumps(obj: Any) -> str:
    """The JSON text SQLite's :mod:`.storage` stores for ``obj`` (same options)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _campaign_record(row: Sequence[Any]) -> CampaignRecord:
    """A :class:`CampaignRecord` from a row of ``_CAMPAIGN_COLUMNS``."""
    return CampaignRecord(
        id=row[0], config=json.loads(row[1]), config_hash=row[2], key_id=row[3],
        public_key=bytes(row[4]), phase=row[5], parameters=_loads(row[6]),
        parameters_hash=row[7], round1=_loads(row[8]), results=_loads(row[9]),
        end_reason=row[10],
    )


class PostgresRepository(PostgresStore):
    """The PostgreSQL implementation of :class:`.storage_api.ServerStorage`.

    ``pool_size`` connections at most per process; a transaction waits at most
    ``lock_timeout`` seconds for a lock (another replica's transaction on the same
    campaign) before failing with :class:`psycopg.errors.LockNotAvailable`. Opening
    migrates the schema (:func:`~segshuffle.services.postgres_base.migrate`) and raises
    :class:`~segshuffle.services.sqlite_base.UnusableDatabaseError` (or its
    :class:`~segshuffle.services.sqlite_base.SchemaVersionError`) when the database
    cannot be used.
    """

    def __init__(self, url: str, *, pool_size: int = 8, connect_timeout: float = 10.0,
                 lock_timeout: float = 30.0) -> None:
        if lock_timeout <= 0:
            raise ValueError(f"lock_timeout must be positive, got {lock_timeout}")
        super().__init__(url, MIGRATIONS, service="server", pool_size=pool_size,
                         connect_timeout=connect_timeout, lock_timeout=lock_timeout)
        self.lock_timeout = lock_timeout

    # -- campaigns ---------------------------------------------------------------------------

    def create_campaign(self, campaign_id: str, config: Mapping[str, Any], config_hash: str,
                        key_id: str, public_key: bytes) -> CampaignRecord:
        """Insert a new campaign in phase ``round1``; :class:`ConflictError` if the id exists.

        When two replicas insert the same id at once, the second waits on the first's
        uncommitted row, then finds it and inserts nothing: exactly one succeeds.
        """
        with self._transaction() as db:
            row = db.execute(
                "INSERT INTO campaigns (id, config_json, config_hash, key_id, public_key, phase,"
                " created_at) VALUES (%s, %s, %s, %s, %s, 'round1', %s)"
                f" ON CONFLICT (id) DO NOTHING RETURNING {_CAMPAIGN_COLUMNS}",
                (campaign_id, _dumps(config), config_hash, key_id, public_key, time.time()),
            ).fetchone()
        if row is None:
            raise ConflictError(f"campaign {campaign_id!r} already exists")
        return _campaign_record(row)

    def campaign(self, campaign_id: str) -> CampaignRecord | None:
        with self._connection() as db:
            row = db.execute(f"SELECT {_CAMPAIGN_COLUMNS} FROM campaigns WHERE id = %s",
                             (campaign_id,)).fetchone()
        return None if row is None else _campaign_record(row)

    def phase(self, campaign_id: str) -> str | None:
        """The campaign's phase (a cheap read), ``None`` if unknown."""
        with self._connection() as db:
            return _phase(db, campaign_id)

    def collecting_campaign_ids(self) -> list[str]:
        """The campaigns in round 1 or round 2, sorted."""
        with self._connection() as db:
            return [str(r[0]) for r in db.execute(
                "SELECT id FROM campaigns WHERE phase IN ('round1', 'round2') ORDER BY id")]

    def campaign_ids(self) -> list[str]:
        with self._connection() as db:
            return [str(r[0]) for r in db.execute("SELECT id FROM campaigns ORDER BY id")]

    def campaign_phases(self, after: str | None, limit: int) -> list[tuple[str, str]]:
        with self._connection() as db:
            return [(str(r[0]), str(r[1])) for r in db.execute(
                "SELECT id, phase FROM campaigns WHERE id > %s ORDER BY id LIMIT %s",
                (after or "", limit))]

    # -- batches and chunks ------------------------------------------------------------------

    def batch(self, campaign_id: str, round_: int) -> BatchRecord | None:
        """The pinned batch id of a round and its stored completion (None until complete)."""
        with self._connection() as db:
            return _batch(db, campaign_id, round_)

    def chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
              ) -> ChunkRecord | None:
        with self._connection() as db:
            return _chunk(db, campaign_id, round_, stream, chunk_index)

    def stream_chunks(self, campaign_id: str, round_: int, stream: str) -> list[StoredChunk]:
        """Every stored chunk of a stream (index, count, receipt), by index."""
        with self._connection() as db:
            rows = db.execute(
                "SELECT chunk_index, chunk_count, receipt_json FROM chunks WHERE"
                " campaign_id = %s AND round = %s AND stream = %s ORDER BY chunk_index",
                (campaign_id, round_, stream)).fetchall()
        return [StoredChunk(chunk_index=r[0], chunk_count=r[1], receipt=json.loads(r[2]))
                for r in rows]

    def counts(self, campaign_id: str, round_: int, stream: str) -> dict[int, int]:
        """Accepted messages per value of one stream of a round (nulls under NULL_VALUE)."""
        with self._connection() as db:
            rows = db.execute(
                "SELECT value, count FROM counts WHERE campaign_id = %s AND round = %s"
                " AND stream = %s", (campaign_id, round_, stream)).fetchall()
        return {int(v): int(c) for v, c in rows}

    @contextmanager
    def transaction(self) -> Iterator[PostgresTransaction]:
        """One database transaction on a pooled connection, committed when the block ends
        and rolled back if it raises; it locks each campaign it names (see the module)."""
        with self._transaction() as db:
            yield PostgresTransaction(db)

    # -- the decode queue --------------------------------------------------------------------

    def queued_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
                     ) -> QueuedChunk | None:
        with self._connection() as db:
            return _queued_chunk(db, campaign_id, round_, stream, chunk_index)

    def decode_backlog(self, campaign_id: str, round_: int) -> DecodeBacklog:
        with self._connection() as db:
            row = db.execute(
                "SELECT COUNT(*), COUNT(*) FILTER (WHERE failures > 0) FROM decode_queue"
                " WHERE campaign_id = %s AND round = %s", (campaign_id, round_)).fetchone()
        assert row is not None
        return DecodeBacklog(queued=int(row[0]), failing=int(row[1]))

    def claim_chunk(self, owner: str, lease_seconds: float) -> ClaimedChunk | None:
        """Claim the oldest claimable row in one statement (see the module docstring);
        a row lock wait is bounded by ``lock_timeout``, though ``SKIP LOCKED`` takes none."""
        with self._transaction() as db:
            row = db.execute(_CLAIM, {"owner": owner, "lease": lease_seconds}).fetchone()
        if row is None:
            return None
        queued = queued_from_row(row)
        return ClaimedChunk(**queued.__dict__, ciphertexts=unpack_ciphertexts(bytes(row[-1])))

    def listen_for_queued_chunks(self, on_queued: Callable[[], None], stop: threading.Event,
                                 on_failure: Callable[[Exception, float], None] | None = None
                                 ) -> None:
        """Call ``on_queued`` each time any process commits a queued chunk, until ``stop``
        is set (blocking: run it in a thread of its own).

        Queueing a chunk sends a notification on :data:`QUEUE_CHANNEL` in the same
        statement, delivered when its transaction commits; this listens on a connection of
        its own (not the pool's), looking up every :data:`LISTEN_POLL_SECONDS` to see
        whether to stop. A lost connection is opened again after a wait that doubles
        within :data:`LISTEN_RETRY_SECONDS` (``on_failure`` is told the error and the
        wait); meanwhile the workers' own polling finds the chunks, only later.
        Notifications are a hint: nothing is lost without them.
        """
        first, longest = LISTEN_RETRY_SECONDS
        delay = first
        while not stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as db:
                    db.execute(f"LISTEN {QUEUE_CHANNEL}")
                    delay = first
                    while not stop.is_set():
                        if any(True for _ in db.notifies(timeout=LISTEN_POLL_SECONDS)):
                            on_queued()
            except psycopg.Error as exc:
                if on_failure is not None:
                    on_failure(exc, delay)
                stop.wait(delay)
                delay = min(delay * 2, longest)

    def renew_claim(self, seq: int, owner: str, lease_seconds: float) -> bool:
        with self._transaction() as db:
            return db.execute(
                f"UPDATE decode_queue SET lease_until = {_NOW} + %s WHERE seq = %s"
                " AND owner = %s RETURNING seq", (lease_seconds, seq, owner)).fetchone() is not None

    def release_claim(self, seq: int, owner: str, delay_seconds: float = 0.0, *,
                      failed: bool = False) -> bool:
        with self._transaction() as db:
            return db.execute(
                f"UPDATE decode_queue SET owner = NULL, lease_until = {_NOW} + %s,"
                " failures = failures + %s WHERE seq = %s AND owner = %s RETURNING seq",
                (max(0.0, delay_seconds), int(failed), seq, owner)).fetchone() is not None


    # -- completion jobs (claims as the decode queue's: SKIP LOCKED, the database's clock) --

    def request_completion(self, campaign_id: str, round_: int, batch_id: str
                           ) -> CompletionJob | None:
        with self._transaction() as db:
            db.execute(f"UPDATE batches SET completion_requested = {_NOW} WHERE campaign_id = %s"
                       " AND round = %s AND batch_id = %s AND completion_json IS NULL"
                       " AND completion_requested IS NULL", (campaign_id, round_, batch_id))
            row = db.execute(f"SELECT {JOB_COLUMNS}, {_NOW} FROM batches WHERE campaign_id = %s"
                             f" AND round = %s AND batch_id = %s AND {OPEN_JOB}",
                             (campaign_id, round_, batch_id)).fetchone()
        return None if row is None else job_from_row(row)

    def completion_job(self, campaign_id: str, round_: int) -> CompletionJob | None:
        with self._connection() as db:
            row = db.execute(f"SELECT {JOB_COLUMNS}, {_NOW} FROM batches WHERE campaign_id = %s"
                             f" AND round = %s AND {OPEN_JOB}", (campaign_id, round_)
                             ).fetchone()
        return None if row is None else job_from_row(row)

    def completion_jobs(self) -> list[CompletionJob]:
        with self._connection() as db:
            rows = db.execute(f"SELECT {JOB_COLUMNS}, {_NOW} FROM batches WHERE {OPEN_JOB}"
                              " ORDER BY completion_requested").fetchall()
        return [job_from_row(row) for row in rows]

    def claim_completion(self, owner: str, lease_seconds: float) -> CompletionJob | None:
        with self._transaction() as db:
            row = db.execute(_CLAIM_COMPLETION, {"owner": owner, "lease": lease_seconds}
                             ).fetchone()
        return None if row is None else job_from_row(row)

    def renew_completion(self, campaign_id: str, round_: int, owner: str,
                         lease_seconds: float) -> bool:
        with self._transaction() as db:
            return db.execute(
                f"UPDATE batches SET job_lease_until = {_NOW} + %s WHERE campaign_id = %s"
                " AND round = %s AND job_owner = %s AND completion_json IS NULL"
                " RETURNING round", (lease_seconds, campaign_id, round_, owner)
            ).fetchone() is not None

    def release_completion(self, campaign_id: str, round_: int, owner: str,
                           delay_seconds: float = 0.0, *, error: str | None = None) -> bool:
        with self._transaction() as db:
            return db.execute(
                f"UPDATE batches SET job_owner = NULL, job_started = NULL,"
                f" job_lease_until = {_NOW} + %s, job_failures = job_failures + %s,"
                " job_error = COALESCE(%s, job_error) WHERE campaign_id = %s AND round = %s"
                " AND job_owner = %s RETURNING round",
                (max(0.0, delay_seconds), int(error is not None), error, campaign_id, round_,
                 owner)).fetchone() is not None


class PostgresTransaction:
    """The PostgreSQL implementation of :class:`.storage_api.ServerTransaction`.

    Every method first takes the campaign's advisory lock unless this transaction holds
    it already (:meth:`_locked`), so each read and write below happens while no other
    replica's transaction on that campaign is running.
    """

    def __init__(self, db: psycopg.Connection) -> None:
        self._db = db
        self._campaigns: set[str] = set()

    def _locked(self, campaign_id: str) -> psycopg.Connection:
        """The connection, once this transaction holds ``campaign_id``'s exclusive lock
        (taken on first use, held until commit or rollback)."""
        if campaign_id not in self._campaigns:
            lock(self._db, f"server:campaign:{campaign_id}")
            self._campaigns.add(campaign_id)
        return self._db

    def phase(self, campaign_id: str) -> str | None:
        return _phase(self._locked(campaign_id), campaign_id)

    def batch(self, campaign_id: str, round_: int) -> BatchRecord | None:
        return _batch(self._locked(campaign_id), campaign_id, round_)

    def chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
              ) -> ChunkRecord | None:
        return _chunk(self._locked(campaign_id), campaign_id, round_, stream, chunk_index)

    def pin_batch(self, campaign_id: str, round_: int, batch_id: str) -> None:
        """Pin the round to ``batch_id``; :class:`ConflictError` if it has a batch already."""
        row = self._locked(campaign_id).execute(
            "INSERT INTO batches (campaign_id, round, batch_id) VALUES (%s, %s, %s)"
            " ON CONFLICT (campaign_id, round) DO NOTHING RETURNING batch_id",
            (campaign_id, round_, batch_id)).fetchone()
        if row is None:
            raise ConflictError(f"round {round_} of campaign {campaign_id!r} has a batch already")

    def insert_nonces(self, campaign_id: str, round_: int, nonces: Sequence[bytes]
                      ) -> list[bool]:
        """Record the nonces in the round (one statement); per nonce, whether it was new."""
        db = self._locked(campaign_id)
        if not nonces:
            return []
        inserted = {bytes(r[0]) for r in db.execute(
            _INSERT_NONCES,
            {"campaign": campaign_id, "round": round_, "nonces": [bytes(n) for n in nonces]})}
        fresh = []
        for nonce in nonces:
            new = nonce in inserted
            if new:
                inserted.discard(nonce)  # a later occurrence in the list is not new
            fresh.append(new)
        return fresh

    def add_counts(self, campaign_id: str, round_: int, stream: str,
                   counts: Mapping[int, int]) -> None:
        """Add to the per-value counts of a stream (one statement; nulls under NULL_VALUE)."""
        db = self._locked(campaign_id)
        if not counts:
            return
        values = list(counts)
        db.execute(_ADD_COUNTS, {"campaign": campaign_id, "round": round_, "stream": stream,
                                 "values": values, "counts": [counts[v] for v in values]})

    def put_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int,
                  chunk: ChunkRecord) -> None:
        """Store a chunk record; :class:`ConflictError` if that chunk is stored already."""
        row = self._locked(campaign_id).execute(
            "INSERT INTO chunks (campaign_id, round, stream, chunk_index, batch_id,"
            " chunk_count, digest, receipt_json) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (campaign_id, round, stream, chunk_index) DO NOTHING"
            " RETURNING chunk_index",
            (campaign_id, round_, stream, chunk_index, chunk.batch_id, chunk.chunk_count,
             chunk.digest, _dumps(chunk.receipt))).fetchone()
        if row is None:
            raise ConflictError(f"chunk {chunk_index} of stream {stream!r} in round {round_} "
                                f"of campaign {campaign_id!r} is stored already")

    def complete_batch(self, campaign_id: str, round_: int,
                       completion: Mapping[str, Any]) -> None:
        self._locked(campaign_id).execute(
            "UPDATE batches SET completion_json = %s WHERE campaign_id = %s AND round = %s",
            (_dumps(completion), campaign_id, round_))

    def publish_parameters(self, campaign_id: str, parameters: Mapping[str, Any],
                           parameters_hash: str, round1: Mapping[str, Any]) -> None:
        self._locked(campaign_id).execute(
            "UPDATE campaigns SET phase = 'round2', parameters_json = %s, parameters_hash = %s,"
            " round1_json = %s WHERE id = %s",
            (_dumps(parameters), parameters_hash, _dumps(round1), campaign_id))

    def store_results(self, campaign_id: str, results: Mapping[str, Any]) -> None:
        self._locked(campaign_id).execute(
            "UPDATE campaigns SET phase = 'done', results_json = %s WHERE id = %s",
            (_dumps(results), campaign_id))

    def end_campaign(self, campaign_id: str, phase: str, reason: str) -> None:
        self._locked(campaign_id).execute(
            "UPDATE campaigns SET phase = %s, end_reason = %s WHERE id = %s",
            (phase, reason, campaign_id))

    def delete_nonces(self, campaign_id: str, round_: int) -> None:
        self._locked(campaign_id).execute(
            "DELETE FROM nonces WHERE campaign_id = %s AND round = %s", (campaign_id, round_))

    def stream_chunk_count(self, campaign_id: str, round_: int, stream: str) -> int | None:
        row = self._locked(campaign_id).execute(
            "(SELECT chunk_count FROM chunks WHERE campaign_id = %s AND round = %s"
            " AND stream = %s LIMIT 1) UNION ALL (SELECT chunk_count FROM decode_queue"
            " WHERE campaign_id = %s AND round = %s AND stream = %s LIMIT 1) LIMIT 1",
            (campaign_id, round_, stream) * 2).fetchone()
        return None if row is None else int(row[0])

    def queued_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
                     ) -> QueuedChunk | None:
        return _queued_chunk(self._locked(campaign_id), campaign_id, round_, stream,
                             chunk_index)

    def enqueue_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int,
                      entry: QueueEntry) -> None:
        """Queue a chunk, unclaimed; :class:`ConflictError` if it is queued already."""
        row = self._locked(campaign_id).execute(
            "WITH queued AS (INSERT INTO decode_queue (campaign_id, round, stream,"
            " chunk_index, batch_id, chunk_count, digest, received, ciphertexts)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %b)"
            " ON CONFLICT (campaign_id, round, stream, chunk_index) DO NOTHING RETURNING seq)"
            f" SELECT seq, pg_notify('{QUEUE_CHANNEL}', '') FROM queued",
            (campaign_id, round_, stream, chunk_index, entry.batch_id, entry.chunk_count,
             entry.digest, len(entry.ciphertexts),
             pack_ciphertexts(entry.ciphertexts))).fetchone()
        if row is None:
            raise ConflictError(f"chunk {chunk_index} of stream {stream!r} in round {round_} "
                                f"of campaign {campaign_id!r} is queued already")

    def dequeue_chunk(self, campaign_id: str, seq: int) -> bool:
        return self._locked(campaign_id).execute(
            "DELETE FROM decode_queue WHERE campaign_id = %s AND seq = %s RETURNING seq",
            (campaign_id, seq)).fetchone() is not None

    def queued_count(self, campaign_id: str, round_: int) -> int:
        return _queued_count(self._locked(campaign_id), campaign_id, round_)

    def drop_queue(self, campaign_id: str) -> int:
        cursor = self._locked(campaign_id).execute(
            "DELETE FROM decode_queue WHERE campaign_id = %s", (campaign_id,))
        return max(0, cursor.rowcount)


def _phase(db: psycopg.Connection, campaign_id: str) -> str | None:
    row = db.execute("SELECT phase FROM campaigns WHERE id = %s", (campaign_id,)).fetchone()
    return None if row is None else str(row[0])


def _batch(db: psycopg.Connection, campaign_id: str, round_: int) -> BatchRecord | None:
    row = db.execute(
        "SELECT batch_id, completion_json FROM batches WHERE campaign_id = %s AND round = %s",
        (campaign_id, round_)).fetchone()
    return None if row is None else BatchRecord(batch_id=row[0], completion=_loads(row[1]))


def _chunk(db: psycopg.Connection, campaign_id: str, round_: int, stream: str,
           chunk_index: int) -> ChunkRecord | None:
    row = db.execute(
        "SELECT batch_id, chunk_count, digest, receipt_json FROM chunks WHERE"
        " campaign_id = %s AND round = %s AND stream = %s AND chunk_index = %s",
        (campaign_id, round_, stream, chunk_index)).fetchone()
    if row is None:
        return None
    return ChunkRecord(batch_id=row[0], chunk_count=row[1], digest=bytes(row[2]),
                       receipt=json.loads(row[3]))


def _queued_chunk(db: psycopg.Connection, campaign_id: str, round_: int, stream: str,
                  chunk_index: int) -> QueuedChunk | None:
    row = db.execute(
        f"SELECT {QUEUE_COLUMNS} FROM decode_queue WHERE campaign_id = %s AND round = %s"
        " AND stream = %s AND chunk_index = %s",
        (campaign_id, round_, stream, chunk_index)).fetchone()
    return None if row is None else queued_from_row(row)


def _queued_count(db: psycopg.Connection, campaign_id: str, round_: int) -> int:
    row = db.execute("SELECT COUNT(*) FROM decode_queue WHERE campaign_id = %s AND round = %s",
                     (campaign_id, round_)).fetchone()
    return 0 if row is None else int(row[0])

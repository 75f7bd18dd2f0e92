"""PostgreSQL storage of the shuffler: the :class:`.storage_api.ShufflerStorage` of a
deployment whose replicas share one database.

The tables and their meaning are those of the SQLite :mod:`.storage`: ``tokens`` (hashes
of user tokens), ``used_invitations`` (hashes of used invitations, nothing linking them to
a token), ``participations`` ("token hash X has submitted round r", no reference to any
message) and ``participant_counts``, ``pending`` (the sealed messages of open and
releasing rounds, keyed by the 16 random bytes the service drew for each, with no user
column and no timestamp), ``rounds`` (closed rounds, their batch id and stream sizes) and
``acknowledged`` (the chunks the server confirmed).  The release order is never stored.

Correct with several replicas (processes) on one database; no process-local lock is
involved.  Every state change is one ``READ COMMITTED`` transaction, and:

- ``submit`` holds the *shared* advisory lock of its (campaign, round) and
  ``close_round``, ``discard_round`` and ``finish_release`` the *exclusive* one.  A
  closing replica therefore waits for the submissions in flight to commit, counts the
  streams with a snapshot taken after they did, and inserts the round's row before it
  lets go; a submission that gets its lock afterwards sees that row and is refused with
  :class:`RoundClosedError`.  Nothing is added to or lost from a counted stream.
  (PostgreSQL queues new shared requests behind a waiting exclusive one, so a stream of
  submissions cannot starve a release.)
- A second submission of a token, or a second use of an invitation, is caught by a
  primary key with ``INSERT ... ON CONFLICT DO NOTHING``: of two racing transactions
  the second waits for the first and inserts nothing if it committed.  An enrollment
  is one statement (the invitation's insert and the token's, chained by a ``WITH``
  clause): the token is stored only if the invitation's row was inserted.
- ``participant_counts`` is incremented with ``INSERT ... ON CONFLICT DO UPDATE`` in the
  submission's transaction, in one of a round's shards (:data:`_SCHEMA_5`), so that
  concurrent submissions do not queue on one row lock; a count read outside a
  submission sums the committed shards and is exact.
- Every lock wait is bounded by ``lock_timeout`` seconds
  (:class:`psycopg.errors.LockNotAvailable` past it, and a rollback): a setting of each
  pooled connection's session, made once when it connects
  (:class:`~segshuffle.services.postgres_base.PostgresStore`), not per transaction.
- The calls of the request path (``add_token_for_invitation``, ``token_campaign``,
  ``submit``) are one statement each, sent on its own (autocommit: no ``BEGIN`` and
  ``COMMIT`` round trips), so each costs one round trip.

Text key columns use the ``"C"`` collation: comparisons are byte comparisons whatever the
database's locale, and ``rounds_with_messages`` sorts in code-point order.

What differs from SQLite (whose ``WITHOUT ROWID`` tables keep rows in key order and
whose ``secure_delete`` overwrites deleted rows):

- ``pending`` is a heap table: rows sit in arrival order, the rows of one submission
  carry the same transaction id (the ``xmin`` system column, which its
  ``participations`` row carries too), and PostgreSQL's write-ahead log holds them
  together with the commit time.  So whoever reads the data files can group a round's
  sealed messages by submission and tie each group to a token hash, as SQLite's WAL
  file groups a transaction's pages until a checkpoint.  That is what the shuffler sees
  anyway while it accepts a submission; the participations go when the round is
  forgotten, and the sealed bytes are unreadable once the round key is destroyed.  This
  module's reads never expose the arrival order (:meth:`PostgresStorage.sealed_rows`
  reads in key order).
- Deleted tuples stay in the data files (and in the WAL and any base backup) until
  ``VACUUM`` makes their space reusable, and even then PostgreSQL does not overwrite
  them.  What they hold is sealed under the round key, which the service destroys after
  the release (:mod:`.vault`), so nothing readable is exposed; after forgetting a
  round's messages this module runs a best-effort ``VACUUM (SKIP_LOCKED)`` of
  ``pending`` in autocommit (it reads the pages that changed since the last vacuum and
  the primary key index, about 0.1 s after a 100 000-message round on a small machine)
  and skips it while another vacuum of the table is running.

Refusals are the :mod:`.storage_api` errors, as in SQLite; a broken connection or
database surfaces as a :class:`psycopg.Error` (mapped by the service).  Nothing here logs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, LiteralString

import psycopg
from psycopg import errors as pg_errors

from ..postgres_base import PostgresMigration, PostgresStore, lock
from .storage_api import (
    FAILED,
    RELEASED,
    RELEASING,
    STOPPED_OWNER,
    AlreadySubmittedError,
    InvitationUsedError,
    NotEnoughParticipantsError,
    ReplayedCiphertextError,
    RoundClosedError,
    RoundRecord,
    StoredMessage,
    TokenTakenError,
    UnknownTokenError,
)

__all__ = ["MIGRATIONS", "PostgresStorage"]

_SCHEMA_1 = """
CREATE TABLE tokens (
    token_hash BYTEA PRIMARY KEY,
    campaign_id TEXT COLLATE "C" NOT NULL
);
CREATE INDEX tokens_by_campaign ON tokens (campaign_id);
CREATE TABLE used_invitations (
    invitation_hash BYTEA PRIMARY KEY,
    expires BIGINT NOT NULL
);
CREATE INDEX used_invitations_by_expiry ON used_invitations (expires);
CREATE TABLE participations (
    campaign_id TEXT COLLATE "C" NOT NULL,
    round BIGINT NOT NULL,
    token_hash BYTEA NOT NULL,
    PRIMARY KEY (campaign_id, round, token_hash)
);
CREATE TABLE participant_counts (
    campaign_id TEXT COLLATE "C" NOT NULL,
    round BIGINT NOT NULL,
    participants BIGINT NOT NULL,
    PRIMARY KEY (campaign_id, round)
);
CREATE TABLE pending (
    campaign_id TEXT COLLATE "C" NOT NULL,
    round BIGINT NOT NULL,
    stream TEXT COLLATE "C" NOT NULL,
    row_key BYTEA NOT NULL,
    ciphertext BYTEA NOT NULL,
    PRIMARY KEY (campaign_id, round, stream, row_key)
);
CREATE TABLE rounds (
    campaign_id TEXT COLLATE "C" NOT NULL,
    round BIGINT NOT NULL,
    state TEXT NOT NULL,
    batch_id TEXT COLLATE "C" NOT NULL,
    participants BIGINT NOT NULL,
    chunk_size BIGINT NOT NULL,
    stream_sizes TEXT NOT NULL,
    reason TEXT,
    PRIMARY KEY (campaign_id, round)
);
CREATE INDEX rounds_releasing ON rounds (campaign_id, round) WHERE state = 'releasing';
CREATE TABLE acknowledged (
    batch_id TEXT COLLATE "C" NOT NULL,
    stream TEXT COLLATE "C" NOT NULL,
    chunk_index BIGINT NOT NULL,
    PRIMARY KEY (batch_id, stream, chunk_index)
);
"""

_SCHEMA_2 = """
CREATE TABLE release_leases (
    campaign_id TEXT COLLATE "C" NOT NULL,
    round BIGINT NOT NULL,
    owner TEXT COLLATE "C" NOT NULL,
    expires DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (campaign_id, round)
);
"""

_SUBMIT_CLOSED = -1
_SUBMIT_DUPLICATE = -2
_SUBMIT_UNKNOWN_TOKEN = -3


def _submit_function(count: str, *, create: str = "CREATE OR REPLACE") -> str:
    """The ``shuffler_submit`` function with ``count``, the statements that add the
    submission to the round's participants and set ``counted`` (migrations 3 and 5);
    ``create`` is the statement's verb."""
    return f"""
{create} FUNCTION shuffler_submit(p_campaign TEXT, p_round BIGINT, p_token BYTEA,
                                p_lock TEXT, p_lock_timeout TEXT, p_streams TEXT[],
                                p_row_keys BYTEA[], p_ciphertexts BYTEA[])
RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    counted BIGINT;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    PERFORM pg_advisory_xact_lock_shared(hashtextextended(p_lock, 0));
    IF EXISTS (SELECT 1 FROM rounds WHERE campaign_id = p_campaign AND round = p_round) THEN
        RETURN {_SUBMIT_CLOSED};
    END IF;
    INSERT INTO participations (campaign_id, round, token_hash)
        VALUES (p_campaign, p_round, p_token) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN {_SUBMIT_DUPLICATE};
    END IF;
    INSERT INTO pending (campaign_id, round, stream, row_key, ciphertext)
        SELECT p_campaign, p_round, m.stream, m.row_key, m.ciphertext
        FROM unnest(p_streams, p_row_keys, p_ciphertexts) AS m(stream, row_key, ciphertext);
{count}
    RETURN counted;
END
$$;
"""


_SCHEMA_3 = _submit_function("""\
    INSERT INTO participant_counts AS c (campaign_id, round, participants)
        VALUES (p_campaign, p_round, 1) ON CONFLICT (campaign_id, round)
        DO UPDATE SET participants = c.participants + 1
        RETURNING c.participants INTO counted;""", create="CREATE")
"""A submission as one statement (:meth:`PostgresStorage.submit`): the steps and locks of
the transaction it replaces, in that order, in one round trip.  A PL/pgSQL function's
statements each take a new snapshot (``READ COMMITTED``), so the closed check sees every
``close_round`` that committed before the shared lock was granted.  It answers the new
participant count, or ``-1`` (the round is closed) or ``-2`` (the token has submitted),
having stored nothing."""

_SCHEMA_4 = f"""
CREATE FUNCTION shuffler_submit_as(p_campaign TEXT, p_round BIGINT, p_token BYTEA,
                                   p_lock TEXT, p_lock_timeout TEXT, p_streams TEXT[],
                                   p_row_keys BYTEA[], p_ciphertexts BYTEA[])
RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tokens
                   WHERE token_hash = p_token AND campaign_id = p_campaign) THEN
        RETURN {_SUBMIT_UNKNOWN_TOKEN};
    END IF;
    RETURN shuffler_submit(p_campaign, p_round, p_token, p_lock, p_lock_timeout,
                           p_streams, p_row_keys, p_ciphertexts);
END
$$;
"""
"""The token check and the submission in one statement
(:meth:`PostgresStorage.submit_as_async`): ``-3`` and nothing stored unless the token
hash was issued for the campaign, else whatever ``shuffler_submit`` answers.  The check
is the one :data:`_TOKEN_CAMPAIGN` makes as a statement of its own, made before the
round's lock as that one is; a token forgotten in between (round 2 released) meets the
closed round's refusal under the lock, as it would after a separate check."""

COUNT_SHARDS = 64
"""Rows a round's participant count is spread over (:data:`_SCHEMA_5`)."""

_SHARDED_COUNT = f"""\
    INSERT INTO participant_counts AS c (campaign_id, round, shard, participants)
        VALUES (p_campaign, p_round, pg_backend_pid() % {COUNT_SHARDS}, 1)
        ON CONFLICT (campaign_id, round, shard)
        DO UPDATE SET participants = c.participants + 1;
    SELECT sum(participants)::bigint INTO counted FROM participant_counts
        WHERE campaign_id = p_campaign AND round = p_round;"""

_SCHEMA_5 = """
ALTER TABLE participant_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE participant_counts DROP CONSTRAINT participant_counts_pkey;
ALTER TABLE participant_counts ADD PRIMARY KEY (campaign_id, round, shard);
""" + _submit_function(_SHARDED_COUNT)
"""A round's participant count in shards, one per server process (backend) modulo
:data:`COUNT_SHARDS`: the count is the sum of the round's rows.

With one row per round, every submission's transaction updated the same row, and a
row lock is held until commit: each submission waited for the one before it to commit,
its write-ahead log flushed, so the commits of concurrent submissions could never share
a flush, and the waiting cost CPU (measured with 64 concurrent submissions on 8
connections: 0.35 CPU-ms of PostgreSQL per submission with the single row, 0.25 with
shards, 0.22 with no count at all).  A backend runs one transaction at a time, so two
submissions in flight only meet on a row when their backends' ids are equal modulo
:data:`COUNT_SHARDS`.

The sum a submission answers is taken in its own transaction after its increment: its
own and every committed submission, but not those still in flight, so it may fall short
of the count once they commit, by fewer than the number of connections the server
accepts (:attr:`PostgresStorage.count_lag`).  Every other read of the count
(:meth:`PostgresStorage.participants`, the close of a round under its exclusive lock)
sums committed rows only, as before.  A replica still running the code before this
migration would read one shard as the count (too few): upgrade every replica before a
round is closed."""

MIGRATIONS: tuple[PostgresMigration, ...] = (
    PostgresMigration(1, "tokens, used_invitations, participations, pending, rounds, "
                         "acknowledged", _SCHEMA_1),
    PostgresMigration(2, "release_leases: which replica forwards a releasing round",
                      _SCHEMA_2),
    PostgresMigration(3, "shuffler_submit(): a submission in one statement", _SCHEMA_3),
    PostgresMigration(4, "shuffler_submit_as(): the token check and a submission in one "
                         "statement", _SCHEMA_4),
    PostgresMigration(5, "participant_counts in shards: submissions no longer queue on one "
                         "row", _SCHEMA_5),
)
"""The shuffler's PostgreSQL schema, in order (:mod:`segshuffle.services.postgres_base`);
append only.  Version 1 is the SQLite schema at its version 4."""

_ROUND_COLUMNS = ("campaign_id, round, state, batch_id, participants, chunk_size, "
                  "stream_sizes, reason")

_ENROLL = """
WITH used AS (
    INSERT INTO used_invitations (invitation_hash, expires) VALUES (%s, %s)
    ON CONFLICT (invitation_hash) DO NOTHING RETURNING 1
)
INSERT INTO tokens (token_hash, campaign_id) SELECT %s, %s FROM used RETURNING 1
"""
"""An enrollment in one statement: the invitation marked used and, only if this statement
inserted its row, the token recorded.  No row back: the invitation was used (by a
transaction that committed; a racing one is waited for).  A token hash already recorded
fails the whole statement, so the invitation stays unused."""

_SUBMIT = ("SELECT shuffler_submit(%s, %s, %s, %s, %s, %b::text[], %b::bytea[], %b::bytea[])")
_SUBMIT_AS = ("SELECT shuffler_submit_as(%s, %s, %s, %s, %s, %b::text[], %b::bytea[], "
              "%b::bytea[])")

_TOKEN_CAMPAIGN = "SELECT campaign_id FROM tokens WHERE token_hash = %s"

_FORGET_EXPIRED = """
WITH forgotten AS (DELETE FROM used_invitations WHERE expires < %s RETURNING 1)
SELECT count(*) FROM forgotten
"""


def _token_taken() -> TokenTakenError:
    """A unique violation of ``tokens``: the token's hash is recorded already."""
    return TokenTakenError("this token is already enrolled")


def _enrolled(inserted: tuple[Any, ...] | None) -> None:
    """The outcome of :data:`_ENROLL`: no row when the invitation was used before."""
    if inserted is None:
        raise InvitationUsedError("the invitation has already been used")


def _forgotten(row: tuple[Any, ...] | None) -> int:
    """How many used invitations :data:`_FORGET_EXPIRED` deleted."""
    return 0 if row is None else int(row[0])


def _replayed(round_number: int) -> ReplayedCiphertextError:
    """A unique violation of ``pending``: one row key twice, so one ciphertext twice."""
    return ReplayedCiphertextError(f"a ciphertext of this submission was already submitted "
                                   f"in round {round_number}")


def _submitted(row: tuple[Any, ...] | None, round_number: int) -> int:
    """The participant count :data:`_SUBMIT` returned, or the refusal its code stands for."""
    assert row is not None
    count = int(row[0])
    if count == _SUBMIT_CLOSED:
        raise RoundClosedError(f"round {round_number} has already been released")
    if count == _SUBMIT_DUPLICATE:
        raise AlreadySubmittedError(f"this token has already submitted round {round_number}")
    if count == _SUBMIT_UNKNOWN_TOKEN:
        raise UnknownTokenError("the user token is not valid for this campaign")
    return count


def _round_lock(campaign_id: str, round_number: int) -> str:
    """The advisory lock name of one round (shared by submissions, exclusive to closing)."""
    return f"shuffler:round:{campaign_id}:{round_number}"


_HOLDING_MESSAGES = """
SELECT DISTINCT c.campaign_id, c.round FROM participant_counts c
LEFT JOIN rounds r ON r.campaign_id = c.campaign_id AND r.round = c.round
WHERE c.participants > 0 AND (r.state IS NULL OR r.state = 'releasing')
ORDER BY c.campaign_id, c.round
"""


class PostgresStorage(PostgresStore):
    """The PostgreSQL implementation of :class:`.storage_api.ShufflerStorage`.

    ``url`` is a libpq connection URL; ``pool_size`` bounds the connections this process
    opens (each blocking call holds one for its duration).  A transaction that waits for
    a lock (a round's advisory lock, a row another replica is inserting) waits at most
    ``lock_timeout`` seconds, then fails with :class:`psycopg.errors.LockNotAvailable`
    and is rolled back.  The schema is created or upgraded on opening, once even when
    several replicas start together.
    """

    def __init__(self, url: str, *, pool_size: int = 8, lock_timeout: float = 30.0) -> None:
        super().__init__(url, MIGRATIONS, service="shuffler", pool_size=pool_size,
                         lock_timeout=lock_timeout)
        self.lock_timeout = lock_timeout
        with self._connection() as db:
            row = db.execute("SELECT current_setting('max_connections')::int").fetchone()
        self.count_lag = int(row[0]) if row is not None else 0
        """Fewer than this many submissions may be missing from a count :meth:`submit`
        returns (:data:`_SCHEMA_5`): each one in flight holds a connection."""

    @property
    def call_threads(self) -> int:
        """Threads worth running this store's calls in (:mod:`..storage_calls`): one per
        pooled connection."""
        return int(self._pool.max_size)

    # -- enrollment --------------------------------------------------------------------
    def add_token(self, campaign_id: str, token_hash: bytes) -> None:
        """Record an issued token's hash (StorageError if the hash is already recorded)."""
        try:
            self._fetch_one("INSERT INTO tokens (token_hash, campaign_id) VALUES (%s, %s) "
                            "RETURNING 1", (token_hash, campaign_id))
        except pg_errors.UniqueViolation:
            raise _token_taken() from None

    def add_token_for_invitation(self, campaign_id: str, token_hash: bytes,
                                 invitation_hash: bytes, expires: int) -> None:
        """Mark an invitation used and record the token it buys, in one transaction.

        Raises :class:`InvitationUsedError` (and records nothing) if the invitation was
        used before, also when two replicas race with it: the second insert waits for the
        first transaction and, once it has committed, inserts nothing.  The two rows share
        no key: nothing links an invitation to a token.  One statement, :data:`_ENROLL`.
        """
        try:
            inserted = self._fetch_one(_ENROLL, (invitation_hash, expires, token_hash,
                                                 campaign_id))
        except pg_errors.UniqueViolation:  # the token's hash
            raise _token_taken() from None
        _enrolled(inserted)

    async def add_token_for_invitation_async(self, campaign_id: str, token_hash: bytes,
                                             invitation_hash: bytes, expires: int) -> None:
        """:meth:`add_token_for_invitation` on the event loop (:meth:`open_async`)."""
        try:
            inserted = await self._fetch_one_async(_ENROLL, (invitation_hash, expires,
                                                             token_hash, campaign_id))
        except pg_errors.UniqueViolation:  # the token's hash
            raise _token_taken() from None
        _enrolled(inserted)

    def forget_expired_invitations(self, before: float) -> int:
        """Drop the hashes of used invitations that expired before ``before``; how many."""
        return _forgotten(self._fetch_one(_FORGET_EXPIRED, (before,)))

    async def forget_expired_invitations_async(self, before: float) -> int:
        """:meth:`forget_expired_invitations` on the event loop (:meth:`open_async`)."""
        return _forgotten(await self._fetch_one_async(_FORGET_EXPIRED, (before,)))

    def token_campaign(self, token_hash: bytes) -> str | None:
        """The campaign a token hash was issued for, or ``None`` if unknown."""
        row = self._fetch_one(_TOKEN_CAMPAIGN, (token_hash,))
        return None if row is None else str(row[0])

    async def token_campaign_async(self, token_hash: bytes) -> str | None:
        """:meth:`token_campaign` on the event loop (:meth:`open_async`)."""
        row = await self._fetch_one_async(_TOKEN_CAMPAIGN, (token_hash,))
        return None if row is None else str(row[0])

    # -- submissions -------------------------------------------------------------------
    def submit(self, campaign_id: str, round_number: int, token_hash: bytes,
               messages: Sequence[StoredMessage]) -> int:
        """Store one user's submission atomically; returns the participant count then
        (short by at most :attr:`count_lag`: see :data:`_SCHEMA_5`).

        One statement, ``shuffler_submit`` (:data:`_SCHEMA_3`, its count in shards since
        :data:`_SCHEMA_5`; one round trip, its own transaction): under the round's shared
        lock, refused with :class:`RoundClosedError` if the round has a record, with
        :class:`AlreadySubmittedError` if the token's participation exists (committed by
        any replica); the messages go in with one ``INSERT ... SELECT FROM unnest(...)``,
        whatever their number, and the count is incremented last.
        """
        return self._submit_with(_SUBMIT, campaign_id, round_number, token_hash, messages)

    async def submit_async(self, campaign_id: str, round_number: int, token_hash: bytes,
                           messages: Sequence[StoredMessage]) -> int:
        """:meth:`submit` on the event loop (:meth:`open_async`)."""
        return await self._submit_with_async(_SUBMIT, campaign_id, round_number, token_hash,
                                             messages)

    def submit_as(self, campaign_id: str, round_number: int, token_hash: bytes,
                  messages: Sequence[StoredMessage]) -> int:
        """:meth:`submit` for a token not checked yet, in one statement
        (:data:`_SCHEMA_4`, as :meth:`submit_as_async` runs it on the event loop)."""
        return self._submit_with(_SUBMIT_AS, campaign_id, round_number, token_hash, messages)

    async def submit_as_async(self, campaign_id: str, round_number: int, token_hash: bytes,
                              messages: Sequence[StoredMessage]) -> int:
        """:meth:`submit_async` for a token not checked yet: one round trip
        (:data:`_SCHEMA_4`) that first requires ``token_hash`` to be issued for the
        campaign (:class:`UnknownTokenError`, nothing stored, if it is not), then
        submits as :meth:`submit` does."""
        return await self._submit_with_async(_SUBMIT_AS, campaign_id, round_number,
                                             token_hash, messages)

    def _submit_with(self, statement: LiteralString, campaign_id: str, round_number: int,
                     token_hash: bytes, messages: Sequence[StoredMessage]) -> int:
        """Run a submission's ``statement`` (:data:`_SUBMIT` or :data:`_SUBMIT_AS`); its
        count, or the refusal it stands for."""
        try:
            row = self._fetch_one(statement, self._submit_parameters(
                campaign_id, round_number, token_hash, messages))
        except pg_errors.UniqueViolation:
            raise _replayed(round_number) from None
        return _submitted(row, round_number)

    async def _submit_with_async(self, statement: LiteralString, campaign_id: str,
                                 round_number: int, token_hash: bytes,
                                 messages: Sequence[StoredMessage]) -> int:
        """:meth:`_submit_with` on the event loop."""
        try:
            row = await self._fetch_one_async(statement, self._submit_parameters(
                campaign_id, round_number, token_hash, messages))
        except pg_errors.UniqueViolation:
            raise _replayed(round_number) from None
        return _submitted(row, round_number)

    def _submit_parameters(self, campaign_id: str, round_number: int, token_hash: bytes,
                           messages: Sequence[StoredMessage]) -> tuple[Any, ...]:
        """The arguments of :data:`_SUBMIT` for one submission."""
        return (campaign_id, round_number, token_hash, _round_lock(campaign_id, round_number),
                self._lock_timeout_setting, [m.stream for m in messages],
                [m.row_key for m in messages], [m.sealed for m in messages])

    @staticmethod
    def _participants(db: psycopg.Connection[Any], campaign_id: str,
                      round_number: int) -> int:
        """Kept as counters updated with each submission (a COUNT(*) would be O(n)): the
        sum of the round's shards (:data:`_SCHEMA_5`), committed submissions only."""
        row = db.execute(
            "SELECT sum(participants) FROM participant_counts WHERE campaign_id = %s "
            "AND round = %s", (campaign_id, round_number)).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def participants(self, campaign_id: str, round_number: int) -> int:
        """Distinct users who have submitted this round."""
        with self._connection() as db:
            return self._participants(db, campaign_id, round_number)

    def has_submitted(self, campaign_id: str, round_number: int, token_hash: bytes) -> bool:
        """Whether this token hash has submitted this round."""
        with self._connection() as db:
            row = db.execute(
                "SELECT 1 FROM participations WHERE campaign_id = %s AND round = %s "
                "AND token_hash = %s", (campaign_id, round_number, token_hash)).fetchone()
        return row is not None

    def pending_count(self, campaign_id: str, round_number: int, stream: str) -> int:
        """Ciphertexts of a stream waiting for the release of an open round."""
        with self._connection() as db:
            row = db.execute(
                "SELECT COUNT(*) FROM pending WHERE campaign_id = %s AND round = %s "
                "AND stream = %s", (campaign_id, round_number, stream)).fetchone()
        assert row is not None
        return int(row[0])

    def rounds_with_messages(self) -> list[tuple[str, int]]:
        """The (campaign, round) pairs that have stored messages (open or releasing),
        in order; found by a skip scan of the primary key (one index probe per round,
        however many messages each holds)."""
        with self._connection() as db:
            rows = db.execute(
                "WITH RECURSIVE found (campaign_id, round) AS ("
                " (SELECT campaign_id, round FROM pending ORDER BY campaign_id, round LIMIT 1)"
                " UNION ALL"
                " SELECT later.campaign_id, later.round FROM found, LATERAL ("
                "  SELECT p.campaign_id, p.round FROM pending p"
                "  WHERE (p.campaign_id, p.round) > (found.campaign_id, found.round)"
                "  ORDER BY p.campaign_id, p.round LIMIT 1) AS later"
                ") SELECT campaign_id, round FROM found").fetchall()
        return [(str(campaign), int(number)) for campaign, number in rows]

    # -- release -----------------------------------------------------------------------
    @staticmethod
    def _round_row(db: psycopg.Connection[Any], campaign_id: str,
                   round_number: int) -> RoundRecord | None:
        row = db.execute(f"SELECT {_ROUND_COLUMNS} FROM rounds "
                         "WHERE campaign_id = %s AND round = %s",
                         (campaign_id, round_number)).fetchone()
        return None if row is None else RoundRecord.from_row(row)

    def round_record(self, campaign_id: str, round_number: int) -> RoundRecord | None:
        """The release record of a round, ``None`` while it is open."""
        with self._connection() as db:
            return self._round_row(db, campaign_id, round_number)

    def close_round(self, campaign_id: str, round_number: int, *, minimum: int,
                    batch_id: str, chunk_size: int, streams: Sequence[str]) -> RoundRecord:
        """Close the round for release, atomically; the existing record if already closed.

        Under the round's exclusive lock, so the stream sizes count every submission
        that committed and no later one can add to them (see the module docstring).
        """
        if chunk_size < 1:
            raise ValueError(f"chunk size must be >= 1, got {chunk_size}")
        with self._transaction() as db:
            lock(db, _round_lock(campaign_id, round_number))
            existing = self._round_row(db, campaign_id, round_number)
            if existing is not None:
                return existing
            participants = self._participants(db, campaign_id, round_number)
            if participants < minimum:
                raise NotEnoughParticipantsError(participants, minimum)
            counted = db.execute(
                "SELECT stream, COUNT(*) FROM pending WHERE campaign_id = %s AND round = %s "
                "AND stream = ANY(%s::text[]) GROUP BY stream",
                (campaign_id, round_number, list(streams))).fetchall()
            sizes = dict.fromkeys(streams, 0) | {str(s): int(n) for s, n in counted}
            row = db.execute(
                "INSERT INTO rounds (campaign_id, round, state, batch_id, participants, "
                "chunk_size, stream_sizes) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                f"RETURNING {_ROUND_COLUMNS}",
                (campaign_id, round_number, RELEASING, batch_id, participants, chunk_size,
                 json.dumps(sizes, sort_keys=True))).fetchone()
        assert row is not None
        return RoundRecord.from_row(row)

    def sealed_rows(self, campaign_id: str, round_number: int, stream: str, *,
                    after: bytes = b"", limit: int) -> list[tuple[bytes, bytes]]:
        """At most ``limit`` (row key, sealed message) pairs with row keys above ``after``,
        in key order: one range scan of the primary key index per page (never the arrival
        order of the heap), with no transaction held between pages."""
        with self._connection() as db:
            rows = db.execute(
                "SELECT row_key, ciphertext FROM pending WHERE campaign_id = %s "
                "AND round = %s AND stream = %s AND row_key > %s ORDER BY row_key LIMIT %s",
                (campaign_id, round_number, stream, after, limit), binary=True).fetchall()
        return [(bytes(key), bytes(sealed)) for key, sealed in rows]

    def acknowledge(self, record: RoundRecord, stream: str, index: int) -> None:
        """Record that the server acknowledged a chunk (idempotent)."""
        with self._connection() as db:
            db.execute("INSERT INTO acknowledged (batch_id, stream, chunk_index) "
                       "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                       (record.batch_id, stream, index))

    def acknowledged(self, record: RoundRecord) -> set[tuple[str, int]]:
        """The (stream, chunk index) pairs acknowledged so far."""
        with self._connection() as db:
            rows = db.execute("SELECT stream, chunk_index FROM acknowledged "
                              "WHERE batch_id = %s", (record.batch_id,)).fetchall()
        return {(str(stream), int(index)) for stream, index in rows}

    def clear_acknowledgements(self, record: RoundRecord) -> None:
        """Forget which chunks were acknowledged, so that all are sent again."""
        with self._connection() as db:
            db.execute("DELETE FROM acknowledged WHERE batch_id = %s", (record.batch_id,))

    def finish_release(self, record: RoundRecord, *, state: str = RELEASED,
                       reason: str | None = None) -> RoundRecord:
        """The round is over: mark it ``state`` (and why) and forget it, then vacuum the
        message table (best effort; see the module docstring)."""
        if state not in (RELEASED, FAILED):
            raise ValueError(f"a finished round is {RELEASED} or {FAILED}, not {state!r}")
        with self._transaction() as db:
            lock(db, _round_lock(record.campaign_id, record.round))
            db.execute("UPDATE rounds SET state = %s, reason = %s WHERE campaign_id = %s "
                       "AND round = %s", (state, reason, record.campaign_id, record.round))
            deleted = self._forget(db, record.campaign_id, record.round, record.batch_id,
                                   tokens=record.round == 2 or state == FAILED)
            updated = self._round_row(db, record.campaign_id, record.round)
        if deleted:
            self._vacuum_messages()
        assert updated is not None
        return updated

    def discard_round(self, campaign_id: str, round_number: int, reason: str) -> RoundRecord:
        """Close an open round of an ended campaign as failed and forget it (idempotent:
        a closed round's record is returned unchanged).  Under the round's exclusive lock,
        so no submission can commit into the forgotten round."""
        with self._transaction() as db:
            lock(db, _round_lock(campaign_id, round_number))
            existing = self._round_row(db, campaign_id, round_number)
            if existing is not None:
                return existing
            db.execute(
                "INSERT INTO rounds (campaign_id, round, state, batch_id, participants, "
                "chunk_size, stream_sizes, reason) VALUES (%s, %s, %s, '', %s, 1, '{}', %s)",
                (campaign_id, round_number, FAILED,
                 self._participants(db, campaign_id, round_number), reason))
            deleted = self._forget(db, campaign_id, round_number, None, tokens=True)
            record = self._round_row(db, campaign_id, round_number)
        if deleted:
            self._vacuum_messages()
        assert record is not None
        return record

    @staticmethod
    def _forget(db: psycopg.Connection[Any], campaign_id: str, round_number: int,
                batch_id: str | None, *, tokens: bool) -> int:
        """Delete a round's messages, participations and acknowledgements (and the
        campaign's tokens); returns how many messages were deleted."""
        key = (campaign_id, round_number)
        deleted = db.execute("DELETE FROM pending WHERE campaign_id = %s AND round = %s",
                             key).rowcount
        db.execute("DELETE FROM participations WHERE campaign_id = %s AND round = %s", key)
        if batch_id is not None:
            db.execute("DELETE FROM acknowledged WHERE batch_id = %s", (batch_id,))
        if tokens:
            db.execute("DELETE FROM tokens WHERE campaign_id = %s", (campaign_id,))
        db.execute("DELETE FROM release_leases WHERE campaign_id = %s AND round = %s", key)
        return max(0, deleted)

    def _vacuum_messages(self) -> None:
        """Best effort: let PostgreSQL reclaim the dead tuples of forgotten messages.

        ``VACUUM`` cannot run in a transaction block; the pool's connections are in
        autocommit.  ``SKIP_LOCKED`` skips it while another vacuum of the table (an
        autovacuum, another replica's) runs.  A failure changes nothing that was
        committed, so it is ignored: the round is already forgotten.
        """
        try:
            with self._connection() as db:
                db.execute("VACUUM (SKIP_LOCKED) pending")
        except psycopg.Error:
            pass

    def releasing(self) -> list[RoundRecord]:
        """Rounds whose forwarding has not been acknowledged yet (to resume after a restart)."""
        with self._connection() as db:
            # The state is a literal, so that the partial index rounds_releasing applies.
            rows = db.execute(f"SELECT {_ROUND_COLUMNS} FROM rounds "
                              f"WHERE state = '{RELEASING}' ORDER BY campaign_id, round"
                              ).fetchall()
        return [RoundRecord.from_row(row) for row in rows]

    def finished_rounds(self) -> list[tuple[str, int]]:
        """The (campaign, round) pairs that are over (released or failed), sorted."""
        with self._connection() as db:
            rows = db.execute("SELECT campaign_id, round FROM rounds WHERE state IN (%s, %s) "
                              "ORDER BY campaign_id, round", (RELEASED, FAILED)).fetchall()
        return [(str(campaign), int(number)) for campaign, number in rows]

    def rounds_holding_messages(self) -> list[tuple[str, int]]:
        """See the Protocol (one row per round: participant_counts, not pending)."""
        with self._connection() as db:
            rows = db.execute(_HOLDING_MESSAGES).fetchall()
        return [(str(campaign), int(number)) for campaign, number in rows]

    # -- the release lease -------------------------------------------------------------
    def take_release_lease(self, campaign_id: str, round_number: int, owner: str,
                           seconds: float, *, force: bool = False) -> bool:
        """Take or renew the lease to forward a round (see the Protocol); one statement,
        the expiry on the database's clock, so replicas' clocks need not agree.  Only a
        ``releasing`` round has a lease to take."""
        if owner == STOPPED_OWNER:
            raise ValueError("a lease owner is a non-empty name")
        with self._connection() as db:
            row = db.execute(
                "INSERT INTO release_leases AS held (campaign_id, round, owner, expires) "
                "SELECT campaign_id, round, %s, extract(epoch FROM clock_timestamp()) + %s "
                f"FROM rounds WHERE campaign_id = %s AND round = %s AND state = '{RELEASING}' "
                "ON CONFLICT (campaign_id, round) DO UPDATE "
                "SET owner = EXCLUDED.owner, expires = EXCLUDED.expires "
                "WHERE held.owner = EXCLUDED.owner "
                "OR (held.owner <> %s AND held.expires < extract(epoch FROM clock_timestamp())) "
                "OR (%s AND held.owner = %s) RETURNING owner",
                (owner, float(seconds), campaign_id, round_number, STOPPED_OWNER, force,
                 STOPPED_OWNER)).fetchone()
        return row is not None

    def stop_release_lease(self, campaign_id: str, round_number: int, owner: str) -> None:
        with self._connection() as db:
            db.execute("UPDATE release_leases SET owner = %s WHERE campaign_id = %s "
                       "AND round = %s AND owner = %s",
                       (STOPPED_OWNER, campaign_id, round_number, owner))

    def drop_release_lease(self, campaign_id: str, round_number: int, owner: str) -> None:
        with self._connection() as db:
            db.execute("DELETE FROM release_leases WHERE campaign_id = %s AND round = %s "
                       "AND owner = %s", (campaign_id, round_number, owner))

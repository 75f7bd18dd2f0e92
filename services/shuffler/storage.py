"""SQLite storage of the shuffler: tokens, participation, sealed messages, releases.

One database file in WAL mode; every state change is one transaction, so a
``kill -9`` at any point leaves either the state before or the state after it
(WAL with ``synchronous=NORMAL`` survives process crashes; ``FULL`` also
survives power loss).  ``secure_delete`` is on: deleted rows are overwritten.

Unlinkability by construction (docs/protocol.md section 1; docs/architecture.md,
"What the shuffler keeps"):

- ``tokens`` holds only SHA-256 hashes of user tokens, never a token.
- ``participations`` records only "token hash X has submitted round r" (the
  one-submission rule needs it); it has no reference to any message.
  An open round's count of them is kept in memory; ``participant_counts`` marks the
  rounds that hold messages and keeps each closed round's final count.
- ``pending`` holds the messages of open and releasing rounds, sealed under the
  round's key by the service (:mod:`.vault`), with no user column and no timestamp,
  keyed by the 16 random bytes the service drew for each (a ``WITHOUT ROWID``
  table, so rows sit in key order, not in arrival order).
- ``rounds`` marks a round closed (releasing, then released) with its batch id and
  stream sizes; ``acknowledged`` lists the chunks the server has confirmed.  The
  release order itself is never stored (:mod:`.permutation`).
- When the server has acknowledged a round, its messages, acknowledgements and
  participations are deleted (and the campaign's tokens after round 2); only
  counts remain, and the service destroys the round key.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from ..sqlite_base import Migration, SQLiteStore
from .storage_api import (
    FAILED,
    OPEN,
    RELEASED,
    RELEASING,
    STOPPED_OWNER,
    AlreadySubmittedError,
    InvitationUsedError,
    NotEnoughParticipantsError,
    ReplayedCiphertextError,
    RoundClosedError,
    RoundRecord,
    StorageError,
    StoredMessage,
    TokenTakenError,
    UnknownTokenError,
)

__all__ = [
    "FAILED", "MIGRATIONS", "OPEN", "RELEASED", "RELEASING", "AlreadySubmittedError",
    "InvitationUsedError", "NotEnoughParticipantsError", "RoundClosedError", "RoundRecord",
    "Storage", "StorageError", "StoredMessage",
]

_SCHEMA_1 = """
CREATE TABLE IF NOT EXISTS tokens (
    token_hash BLOB PRIMARY KEY,
    campaign_id TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS participations (
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    token_hash BLOB NOT NULL,
    PRIMARY KEY (campaign_id, round, token_hash)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS participant_counts (
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    participants INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, round)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    stream TEXT NOT NULL,
    row_key BLOB NOT NULL,
    ciphertext BLOB NOT NULL,
    PRIMARY KEY (campaign_id, round, stream, row_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rounds (
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    state TEXT NOT NULL,
    batch_id TEXT NOT NULL,
    participants INTEGER NOT NULL,
    chunk_size INTEGER NOT NULL,
    stream_sizes TEXT NOT NULL,
    PRIMARY KEY (campaign_id, round)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS released (
    batch_id TEXT NOT NULL,
    stream TEXT NOT NULL,
    position INTEGER NOT NULL,
    ciphertext BLOB NOT NULL,
    PRIMARY KEY (batch_id, stream, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS acknowledged (
    batch_id TEXT NOT NULL,
    stream TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    PRIMARY KEY (batch_id, stream, chunk_index)
) WITHOUT ROWID;
"""

_SCHEMA_2 = """
DROP TABLE IF EXISTS released;
"""

_SCHEMA_3 = """
ALTER TABLE rounds ADD COLUMN reason TEXT;
"""

_SCHEMA_4 = """
CREATE TABLE IF NOT EXISTS used_invitations (
    invitation_hash BLOB PRIMARY KEY,
    expires INTEGER NOT NULL
) WITHOUT ROWID;
"""

_SCHEMA_5 = """
CREATE TABLE IF NOT EXISTS release_leases (
    campaign_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    owner TEXT NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (campaign_id, round)
) WITHOUT ROWID;
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "tokens, participations, pending, rounds, released, acknowledged", _SCHEMA_1),
    Migration(2, "sealed pending rows are released in a computed order: no released table",
              _SCHEMA_2),
    Migration(3, "why a round failed", _SCHEMA_3),
    Migration(4, "used_invitations", _SCHEMA_4),
    Migration(5, "release_leases: which replica forwards a releasing round", _SCHEMA_5),
)
"""The shuffler's schema, in order (:mod:`segshuffle.services.sqlite_base`); append only."""

_HOLDING_MESSAGES = """
SELECT c.campaign_id, c.round FROM participant_counts c
LEFT JOIN rounds r ON r.campaign_id = c.campaign_id AND r.round = c.round
WHERE c.participants > 0 AND (r.state IS NULL OR r.state = 'releasing')
ORDER BY c.campaign_id, c.round
"""


class Storage(SQLiteStore):
    """The SQLite implementation of :class:`.storage_api.ShufflerStorage`."""

    count_lag = 0
    """Submissions are stored one at a time under the store's lock: counts are exact."""

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        super().__init__(path, MIGRATIONS, service="shuffler", synchronous=synchronous,
                         single_process=True)
        self._open_counts: dict[tuple[str, int], int] = {}
        """Participants of rounds this process has seen open (:meth:`_participants`)."""

    # -- enrollment --------------------------------------------------------------------
    @staticmethod
    def _insert_token(db: sqlite3.Connection, campaign_id: str, token_hash: bytes) -> None:
        try:
            db.execute("INSERT INTO tokens (token_hash, campaign_id) VALUES (?, ?)",
                       (token_hash, campaign_id))
        except sqlite3.IntegrityError:
            raise TokenTakenError("this token is already enrolled") from None

    def add_token(self, campaign_id: str, token_hash: bytes) -> None:
        with self._transaction() as db:
            self._insert_token(db, campaign_id, token_hash)

    def add_token_for_invitation(self, campaign_id: str, token_hash: bytes,
                                 invitation_hash: bytes, expires: int) -> None:
        """Mark an invitation used and record the token it buys, in one transaction.

        Raises :class:`InvitationUsedError` (and records nothing) if the invitation was
        used before.  The two rows share no key: nothing links an invitation to a token.
        """
        with self._transaction() as db:
            try:
                db.execute("INSERT INTO used_invitations (invitation_hash, expires) "
                           "VALUES (?, ?)", (invitation_hash, expires))
            except sqlite3.IntegrityError:
                raise InvitationUsedError("the invitation has already been used") from None
            self._insert_token(db, campaign_id, token_hash)

    def forget_expired_invitations(self, before: float) -> int:
        """Drop the hashes of used invitations that expired before ``before``; how many."""
        with self._transaction() as db:
            return int(db.execute("DELETE FROM used_invitations WHERE expires < ?",
                                  (before,)).rowcount)

    def token_campaign(self, token_hash: bytes) -> str | None:
        """The campaign a token hash was issued for, or ``None`` if unknown."""
        with self._lock:
            row = self._db.execute(
                "SELECT campaign_id FROM tokens WHERE token_hash = ?", (token_hash,)
            ).fetchone()
        return None if row is None else str(row[0])

    # -- submissions -------------------------------------------------------------------
    def submit(self, campaign_id: str, round_number: int, token_hash: bytes,
               messages: Sequence[StoredMessage]) -> int:
        """Store one user's submission atomically; returns the new participant count.

        Three writes: the participation, the sealed messages and, at a round's first
        submission only, its ``participant_counts`` row (:meth:`_participants`).  A round
        this process counts as open (it holds the file alone: the rounds it closed left
        :attr:`_open_counts`) needs no look at ``rounds``.
        """
        return self._submit(campaign_id, round_number, token_hash, messages, False)

    def submit_as(self, campaign_id: str, round_number: int, token_hash: bytes,
                  messages: Sequence[StoredMessage]) -> int:
        """:meth:`submit` for a token not checked yet: the same transaction first requires
        ``token_hash`` to be issued for ``campaign_id`` (the check :meth:`token_campaign`
        serves), raising :class:`UnknownTokenError` having stored nothing if it is not.
        One call and one transaction where the token's lookup was a call of its own."""
        return self._submit(campaign_id, round_number, token_hash, messages, True)

    def _submit(self, campaign_id: str, round_number: int, token_hash: bytes,
                messages: Sequence[StoredMessage], check_token: bool) -> int:
        """:meth:`submit`, and with ``check_token`` :meth:`submit_as`."""
        key = (campaign_id, round_number)
        rows = [(campaign_id, round_number, m.stream, m.row_key, m.sealed) for m in messages]
        with self._lock:
            with self._transaction() as db:
                if check_token and db.execute(
                        "SELECT 1 FROM tokens WHERE token_hash = ? AND campaign_id = ?",
                        (token_hash, campaign_id)).fetchone() is None:
                    raise UnknownTokenError("the user token is not valid for this campaign")
                before = self._open_counts.get(key)
                if before is None:
                    if self._round_row(campaign_id, round_number) is not None:
                        raise RoundClosedError(
                            f"round {round_number} has already been released")
                    before = self._participants(campaign_id, round_number)
                try:
                    db.execute("INSERT INTO participations (campaign_id, round, token_hash) "
                               "VALUES (?, ?, ?)", (campaign_id, round_number, token_hash))
                except sqlite3.IntegrityError:
                    raise AlreadySubmittedError(
                        f"this token has already submitted round {round_number}") from None
                if before == 0:
                    db.execute("INSERT OR IGNORE INTO participant_counts "
                               "(campaign_id, round, participants) VALUES (?, ?, 1)",
                               (campaign_id, round_number))
                try:
                    db.executemany(
                        "INSERT INTO pending (campaign_id, round, stream, row_key, ciphertext) "
                        "VALUES (?, ?, ?, ?, ?)", rows)
                except sqlite3.IntegrityError:  # one row key twice: one ciphertext twice
                    raise ReplayedCiphertextError(
                        f"a ciphertext of this submission was already submitted in round "
                        f"{round_number}") from None
            self._open_counts[key] = before + 1  # committed
            return before + 1

    def _participants(self, campaign_id: str, round_number: int) -> int:
        """The participants of a round: an open round's count is kept in memory.

        A per-round counter row rewritten by every submission cost each submission one
        more page in the WAL (a tenth of a round-2 submission's storage cost), so an
        open round's count is the number of its ``participations`` rows, counted once
        per process (O(n), at the round's first use) and then kept up to date by
        :meth:`submit` after each commit, under the store's lock (the store holds its
        file alone: :func:`~..sqlite_base.hold_single_process`).  A closed round's count
        is the one its ``rounds`` row recorded at the close (its participations are
        deleted once it is acknowledged); closing a round takes it out of the counts.  The
        ``participant_counts`` row of a round is written at its first submission: it
        marks a round that holds messages (:meth:`rounds_holding_messages`), and is
        brought to the final count when the round closes.
        """
        key = (campaign_id, round_number)
        count = self._open_counts.get(key)
        if count is not None:
            return count
        record = self._round_row(campaign_id, round_number)
        if record is not None:
            return record.participants
        (count,) = self._db.execute(
            "SELECT COUNT(*) FROM participations WHERE campaign_id = ? AND round = ?",
            key).fetchone()
        self._open_counts[key] = int(count)
        return int(count)

    def participants(self, campaign_id: str, round_number: int) -> int:
        """Distinct users who have submitted this round."""
        with self._lock:
            return self._participants(campaign_id, round_number)

    def has_submitted(self, campaign_id: str, round_number: int, token_hash: bytes) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM participations WHERE campaign_id = ? AND round = ? "
                "AND token_hash = ?",
                (campaign_id, round_number, token_hash),
            ).fetchone()
        return row is not None

    def pending_count(self, campaign_id: str, round_number: int, stream: str) -> int:
        with self._lock:
            return self._pending_count(campaign_id, round_number, stream)

    def _pending_count(self, campaign_id: str, round_number: int, stream: str) -> int:
        (count,) = self._db.execute(
            "SELECT COUNT(*) FROM pending WHERE campaign_id = ? AND round = ? AND stream = ?",
            (campaign_id, round_number, stream),
        ).fetchone()
        return int(count)

    def rounds_with_messages(self) -> list[tuple[str, int]]:
        """The (campaign, round) pairs that have stored messages (open or releasing)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT campaign_id, round FROM pending").fetchall()
        return [(str(c), int(r)) for c, r in rows]

    # -- release -----------------------------------------------------------------------
    def _round_row(self, campaign_id: str, round_number: int) -> RoundRecord | None:
        row = self._db.execute(
            "SELECT campaign_id, round, state, batch_id, participants, chunk_size, stream_sizes, "
            "reason FROM rounds WHERE campaign_id = ? AND round = ?",
            (campaign_id, round_number),
        ).fetchone()
        return None if row is None else RoundRecord.from_row(row)

    def round_record(self, campaign_id: str, round_number: int) -> RoundRecord | None:
        """The release record of a round, ``None`` while it is open."""
        with self._lock:
            return self._round_row(campaign_id, round_number)

    def close_round(self, campaign_id: str, round_number: int, *, minimum: int,
                    batch_id: str, chunk_size: int, streams: Sequence[str]) -> RoundRecord:
        """Close the round for release, atomically; the existing record if already closed."""
        if chunk_size < 1:
            raise ValueError(f"chunk size must be >= 1, got {chunk_size}")
        with self._transaction() as db:
            existing = self._round_row(campaign_id, round_number)
            if existing is not None:
                return existing
            participants = self._participants(campaign_id, round_number)
            if participants < minimum:
                raise NotEnoughParticipantsError(participants, minimum)
            sizes = {stream: self._pending_count(campaign_id, round_number, stream)
                     for stream in streams}
            db.execute(
                "INSERT INTO rounds (campaign_id, round, state, batch_id, participants, "
                "chunk_size, stream_sizes) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (campaign_id, round_number, RELEASING, batch_id, participants, chunk_size,
                 json.dumps(sizes, sort_keys=True)),
            )
            self._record_final_count(db, campaign_id, round_number, participants)
            record = self._round_row(campaign_id, round_number)
        assert record is not None
        return record

    def sealed_rows(self, campaign_id: str, round_number: int, stream: str, *,
                    after: bytes = b"", limit: int) -> list[tuple[bytes, bytes]]:
        """At most ``limit`` (row key, sealed message) pairs with row keys above ``after``,
        in key order: a range of the primary key, read leaf by leaf in the order the
        ``WITHOUT ROWID`` table stores it (no per-row lookup); the lock is held for one
        page only, so submissions to other rounds go on between pages."""
        with self._lock:
            return self._db.execute(
                "SELECT row_key, ciphertext FROM pending WHERE campaign_id = ? AND round = ? "
                "AND stream = ? AND row_key > ? ORDER BY row_key LIMIT ?",
                (campaign_id, round_number, stream, after, limit)).fetchall()

    def acknowledge(self, record: RoundRecord, stream: str, index: int) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO acknowledged (batch_id, stream, chunk_index) "
                "VALUES (?, ?, ?)",
                (record.batch_id, stream, index),
            )

    def acknowledged(self, record: RoundRecord) -> set[tuple[str, int]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT stream, chunk_index FROM acknowledged WHERE batch_id = ?",
                (record.batch_id,),
            ).fetchall()
        return {(str(stream), int(index)) for stream, index in rows}

    def clear_acknowledgements(self, record: RoundRecord) -> None:
        """Forget which chunks were acknowledged, so that all are sent again."""
        with self._transaction() as db:
            db.execute("DELETE FROM acknowledged WHERE batch_id = ?", (record.batch_id,))

    def finish_release(self, record: RoundRecord, *, state: str = RELEASED,
                       reason: str | None = None) -> RoundRecord:
        """The round is over: mark it ``state`` (and why) and forget it."""
        if state not in (RELEASED, FAILED):
            raise ValueError(f"a finished round is {RELEASED} or {FAILED}, not {state!r}")
        key = (record.campaign_id, record.round)
        with self._transaction() as db:
            db.execute("UPDATE rounds SET state = ?, reason = ? WHERE campaign_id = ? "
                       "AND round = ?", (state, reason, *key))
            self._forget(db, record.campaign_id, record.round, record.batch_id,
                         tokens=record.round == 2 or state == FAILED)
            updated = self._round_row(*key)
        self._checkpoint()
        assert updated is not None
        return updated

    def discard_round(self, campaign_id: str, round_number: int, reason: str) -> RoundRecord:
        """Close an open round of an ended campaign as failed and forget it (idempotent)."""
        with self._transaction() as db:
            existing = self._round_row(campaign_id, round_number)
            if existing is not None:
                return existing
            participants = self._participants(campaign_id, round_number)
            db.execute(
                "INSERT INTO rounds (campaign_id, round, state, batch_id, participants, "
                "chunk_size, stream_sizes, reason) VALUES (?, ?, ?, '', ?, 1, '{}', ?)",
                (campaign_id, round_number, FAILED, participants, reason))
            self._record_final_count(db, campaign_id, round_number, participants)
            self._forget(db, campaign_id, round_number, None, tokens=True)
            record = self._round_row(campaign_id, round_number)
        self._checkpoint()
        assert record is not None
        return record

    def _record_final_count(self, db: sqlite3.Connection, campaign_id: str,
                            round_number: int, participants: int) -> None:
        """A closing round's ``participant_counts`` row brought to its final count (while
        the round was open it only marked that the round holds messages), and the round
        no longer counted as open in memory."""
        self._open_counts.pop((campaign_id, round_number), None)
        db.execute("UPDATE participant_counts SET participants = ? "
                   "WHERE campaign_id = ? AND round = ?",
                   (participants, campaign_id, round_number))

    @staticmethod
    def _forget(db: sqlite3.Connection, campaign_id: str, round_number: int,
                batch_id: str | None, *, tokens: bool) -> None:
        key = (campaign_id, round_number)
        db.execute("DELETE FROM pending WHERE campaign_id = ? AND round = ?", key)
        db.execute("DELETE FROM participations WHERE campaign_id = ? AND round = ?", key)
        if batch_id is not None:
            db.execute("DELETE FROM acknowledged WHERE batch_id = ?", (batch_id,))
        if tokens:
            db.execute("DELETE FROM tokens WHERE campaign_id = ?", (campaign_id,))
        db.execute("DELETE FROM release_leases WHERE campaign_id = ? AND round = ?", key)

    def releasing(self) -> list[RoundRecord]:
        """Rounds whose forwarding has not been acknowledged yet (to resume after a restart)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT campaign_id, round, state, batch_id, participants, chunk_size, "
                "stream_sizes, reason FROM rounds WHERE state = ?",
                (RELEASING,),
            ).fetchall()
        return [RoundRecord.from_row(row) for row in rows]

    def finished_rounds(self) -> list[tuple[str, int]]:
        """The (campaign, round) pairs that are over (released or failed), sorted."""
        with self._lock:
            rows = self._db.execute(
                "SELECT campaign_id, round FROM rounds WHERE state IN (?, ?) "
                "ORDER BY campaign_id, round", (RELEASED, FAILED)).fetchall()
        return [(str(c), int(r)) for c, r in rows]

    def rounds_holding_messages(self) -> list[tuple[str, int]]:
        """See the Protocol (one row per round: participant_counts, not pending)."""
        with self._lock:
            rows = self._db.execute(_HOLDING_MESSAGES).fetchall()
        return [(str(c), int(r)) for c, r in rows]

    # -- the release lease -------------------------------------------------------------
    def take_release_lease(self, campaign_id: str, round_number: int, owner: str,
                           seconds: float, *, force: bool = False) -> bool:
        """Take or renew the lease to forward a round (see the Protocol)."""
        if owner == STOPPED_OWNER:
            raise ValueError("a lease owner is a non-empty name")
        now = time.time()
        with self._transaction() as db:
            record = self._round_row(campaign_id, round_number)
            if record is None or record.state != RELEASING:
                return False
            row = db.execute("SELECT owner, expires FROM release_leases WHERE campaign_id = ? "
                             "AND round = ?", (campaign_id, round_number)).fetchone()
            if row is not None:
                holder, expires = str(row[0]), float(row[1])
                free = (holder == owner or (holder != STOPPED_OWNER and expires < now)
                        or (force and holder == STOPPED_OWNER))
                if not free:
                    return False
            db.execute("INSERT OR REPLACE INTO release_leases (campaign_id, round, owner, "
                       "expires) VALUES (?, ?, ?, ?)",
                       (campaign_id, round_number, owner, now + seconds))
        return True

    def stop_release_lease(self, campaign_id: str, round_number: int, owner: str) -> None:
        with self._transaction() as db:
            db.execute("UPDATE release_leases SET owner = ? WHERE campaign_id = ? "
                       "AND round = ? AND owner = ?",
                       (STOPPED_OWNER, campaign_id, round_number, owner))

    def drop_release_lease(self, campaign_id: str, round_number: int, owner: str) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM release_leases WHERE campaign_id = ? AND round = ? "
                       "AND owner = ?", (campaign_id, round_number, owner))

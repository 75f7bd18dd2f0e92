"""SQLite storage of the shuffler: tokens, participation, ciphertexts, releases.

One database file in WAL mode; every state change is one transaction, so a
``kill -9`` at any point leaves either the state before or the state after it
(WAL with ``synchronous=NORMAL`` survives process crashes; ``FULL`` also
survives power loss).

Unlinkability by construction (docs/protocol.md section 1: the shuffler "strips identities and
metadata"):

- ``tokens`` holds only SHA-256 hashes of user tokens, never a token.
- ``participations`` records only "token hash X has submitted round r" (the
  one-submission rule needs it); it has no reference to any ciphertext.
  ``participant_counts`` keeps the number of such rows per round.
- ``pending`` holds accepted ciphertexts with no user column and no timestamp.
  It is a ``WITHOUT ROWID`` table keyed by 16 random bytes, so rows are stored
  in key order, which is random, not in arrival order; the messages of one
  submission get independent keys.
- At release the ciphertexts of each stream are copied to ``released`` in the
  order of a fresh CSPRNG permutation (:mod:`.permutation`) and deleted from
  ``pending`` in the same transaction; the permutation is persisted, so
  forwarding resumed after a crash sends the very same batch (idempotent
  chunks).  Once the server has acknowledged the whole batch the ciphertexts are
  deleted; only counts remain.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..sqlite_base import Migration, open_database
from .permutation import random_permutation
from .storage_api import (
    OPEN,
    RELEASED,
    RELEASING,
    AlreadySubmittedError,
    InvitationUsedError,
    NotEnoughParticipantsError,
    Permutation,
    RoundClosedError,
    RoundRecord,
    StorageError,
)

__all__ = [
    "MIGRATIONS", "OPEN", "RELEASED", "RELEASING", "AlreadySubmittedError",
    "InvitationUsedError", "NotEnoughParticipantsError", "Permutation", "RoundClosedError",
    "RoundRecord", "Storage", "StorageError",
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
CREATE TABLE IF NOT EXISTS used_invitations (
    invitation_hash BLOB PRIMARY KEY,
    expires INTEGER NOT NULL
) WITHOUT ROWID;
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "tokens, participations, pending, rounds, released, acknowledged", _SCHEMA_1),
    Migration(2, "used_invitations", _SCHEMA_2),
)
"""The shuffler's schema, in order (:mod:`segshuffle.services.sqlite_base`); append only."""

class Storage:
    """Thread-safe access to the shuffler's database (one connection, one lock).

    The SQLite implementation of :class:`.storage_api.ShufflerStorage`.
    """

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        if synchronous.upper() not in {"NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"synchronous must be NORMAL, FULL or EXTRA, got {synchronous!r}")
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = open_database(self.path, MIGRATIONS, service="shuffler",
                                 synchronous=synchronous.upper())

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- transactions ----------------------------------------------------------------
    def _begin(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        self._db.execute("COMMIT")

    def _rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def ping(self) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1").fetchone() == (1,)

    # -- enrollment --------------------------------------------------------------------
    def add_token(self, campaign_id: str, token_hash: bytes) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO tokens (token_hash, campaign_id) VALUES (?, ?)",
                (token_hash, campaign_id),
            )

    def add_token_for_invitation(self, campaign_id: str, token_hash: bytes,
                                 invitation_hash: bytes, expires: int) -> None:
        """Mark an invitation used and record the token it buys, in one transaction.

        Raises :class:`InvitationUsedError` (and records nothing) if the invitation was
        used before.  The two rows share no key: nothing links an invitation to a token.
        """
        with self._lock:
            self._begin()
            try:
                try:
                    self._db.execute(
                        "INSERT INTO used_invitations (invitation_hash, expires) VALUES (?, ?)",
                        (invitation_hash, expires),
                    )
                except sqlite3.IntegrityError:
                    raise InvitationUsedError("the invitation has already been used") from None
                self._db.execute(
                    "INSERT INTO tokens (token_hash, campaign_id) VALUES (?, ?)",
                    (token_hash, campaign_id),
                )
                self._commit()
            except BaseException:
                self._rollback()
                raise

    def token_campaign(self, token_hash: bytes) -> str | None:
        """The campaign a token hash was issued for, or ``None`` if unknown."""
        with self._lock:
            row = self._db.execute(
                "SELECT campaign_id FROM tokens WHERE token_hash = ?", (token_hash,)
            ).fetchone()
        return None if row is None else str(row[0])

    # -- submissions -------------------------------------------------------------------
    def submit(
        self,
        campaign_id: str,
        round_number: int,
        token_hash: bytes,
        streams: Mapping[str, Sequence[bytes]],
    ) -> int:
        """Store one user's submission atomically; returns the new participant count.

        Raises :class:`RoundClosedError` once the round is released and
        :class:`AlreadySubmittedError` on a second submission of the same token.
        """
        rows = [
            (campaign_id, round_number, stream, secrets.token_bytes(16), bytes(ct))
            for stream, cts in streams.items()
            for ct in cts
        ]
        with self._lock:
            self._begin()
            try:
                if self._round_row(campaign_id, round_number) is not None:
                    raise RoundClosedError(f"round {round_number} has already been released")
                try:
                    self._db.execute(
                        "INSERT INTO participations (campaign_id, round, token_hash) "
                        "VALUES (?, ?, ?)",
                        (campaign_id, round_number, token_hash),
                    )
                except sqlite3.IntegrityError:
                    raise AlreadySubmittedError(
                        f"this token has already submitted round {round_number}"
                    ) from None
                self._db.execute(
                    "INSERT INTO participant_counts (campaign_id, round, participants) "
                    "VALUES (?, ?, 1) ON CONFLICT (campaign_id, round) "
                    "DO UPDATE SET participants = participants + 1",
                    (campaign_id, round_number),
                )
                self._db.executemany(
                    "INSERT INTO pending (campaign_id, round, stream, row_key, ciphertext) "
                    "VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
                count = self._participants(campaign_id, round_number)
                self._commit()
            except BaseException:
                self._rollback()
                raise
        return count

    def _participants(self, campaign_id: str, round_number: int) -> int:
        """Kept as a counter updated with each submission (a COUNT(*) would be O(n))."""
        row = self._db.execute(
            "SELECT participants FROM participant_counts WHERE campaign_id = ? AND round = ?",
            (campaign_id, round_number),
        ).fetchone()
        return 0 if row is None else int(row[0])

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
            (count,) = self._db.execute(
                "SELECT COUNT(*) FROM pending WHERE campaign_id = ? AND round = ? AND stream = ?",
                (campaign_id, round_number, stream),
            ).fetchone()
        return int(count)

    # -- release -----------------------------------------------------------------------
    def _round_row(self, campaign_id: str, round_number: int) -> RoundRecord | None:
        row = self._db.execute(
            "SELECT campaign_id, round, state, batch_id, participants, chunk_size, stream_sizes "
            "FROM rounds WHERE campaign_id = ? AND round = ?",
            (campaign_id, round_number),
        ).fetchone()
        return None if row is None else _record(row)

    def round_record(self, campaign_id: str, round_number: int) -> RoundRecord | None:
        """The release record of a round, ``None`` while it is open."""
        with self._lock:
            return self._round_row(campaign_id, round_number)

    def start_release(
        self,
        campaign_id: str,
        round_number: int,
        *,
        minimum: int,
        chunk_size: int,
        streams: Sequence[str],
        permutation: Permutation = random_permutation,
    ) -> RoundRecord:
        """Close the round and fix its release order, atomically.

        Requires at least ``minimum`` distinct participants (else
        :class:`NotEnoughParticipantsError`, and the round stays open).  Each stream is
        permuted independently.  Calling it again for a released round returns
        the existing record (the release is idempotent).
        """
        if chunk_size < 1:
            raise ValueError(f"chunk size must be >= 1, got {chunk_size}")
        with self._lock:
            self._begin()
            try:
                existing = self._round_row(campaign_id, round_number)
                if existing is not None:
                    self._commit()
                    return existing
                participants = self._participants(campaign_id, round_number)
                if participants < minimum:
                    raise NotEnoughParticipantsError(participants, minimum)
                batch_id = secrets.token_hex(16)
                sizes: dict[str, int] = {}
                for stream in streams:
                    ciphertexts = [
                        row[0]
                        for row in self._db.execute(
                            "SELECT ciphertext FROM pending "
                            "WHERE campaign_id = ? AND round = ? AND stream = ?",
                            (campaign_id, round_number, stream),
                        )
                    ]
                    order = permutation(len(ciphertexts))
                    self._db.executemany(
                        "INSERT INTO released (batch_id, stream, position, ciphertext) "
                        "VALUES (?, ?, ?, ?)",
                        (
                            (batch_id, stream, position, ciphertexts[index])
                            for position, index in enumerate(order)
                        ),
                    )
                    sizes[stream] = len(ciphertexts)
                self._db.execute(
                    "DELETE FROM pending WHERE campaign_id = ? AND round = ?",
                    (campaign_id, round_number),
                )
                self._db.execute(
                    "INSERT INTO rounds (campaign_id, round, state, batch_id, participants, "
                    "chunk_size, stream_sizes) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (campaign_id, round_number, RELEASING, batch_id, participants, chunk_size,
                     json.dumps(sizes, sort_keys=True)),
                )
                record = self._round_row(campaign_id, round_number)
                self._commit()
            except BaseException:
                self._rollback()
                raise
        assert record is not None
        return record

    def chunk(self, record: RoundRecord, stream: str, index: int) -> list[bytes]:
        """Ciphertexts of chunk ``index`` of ``stream``, in released order."""
        start = index * record.chunk_size
        with self._lock:
            rows = self._db.execute(
                "SELECT ciphertext FROM released WHERE batch_id = ? AND stream = ? "
                "AND position >= ? AND position < ? ORDER BY position",
                (record.batch_id, stream, start, start + record.chunk_size),
            ).fetchall()
        return [bytes(row[0]) for row in rows]

    def acknowledge(self, record: RoundRecord, stream: str, index: int) -> None:
        with self._lock:
            self._db.execute(
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
        with self._lock:
            self._db.execute("DELETE FROM acknowledged WHERE batch_id = ?", (record.batch_id,))

    def finish_release(self, record: RoundRecord) -> RoundRecord:
        """The server acknowledged the whole batch: mark released, drop the ciphertexts."""
        with self._lock:
            self._begin()
            try:
                self._db.execute(
                    "UPDATE rounds SET state = ? WHERE campaign_id = ? AND round = ?",
                    (RELEASED, record.campaign_id, record.round),
                )
                self._db.execute("DELETE FROM released WHERE batch_id = ?", (record.batch_id,))
                self._db.execute(
                    "DELETE FROM acknowledged WHERE batch_id = ?", (record.batch_id,)
                )
                updated = self._round_row(record.campaign_id, record.round)
                self._commit()
            except BaseException:
                self._rollback()
                raise
        assert updated is not None
        return updated

    def releasing(self) -> list[RoundRecord]:
        """Rounds whose forwarding has not been acknowledged yet (to resume after a restart)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT campaign_id, round, state, batch_id, participants, chunk_size, "
                "stream_sizes FROM rounds WHERE state = ?",
                (RELEASING,),
            ).fetchall()
        return [_record(row) for row in rows]


def _record(row: Sequence[object]) -> RoundRecord:
    campaign_id, round_number, state, batch_id, participants, chunk_size, sizes = row
    return RoundRecord(
        campaign_id=str(campaign_id),
        round=int(round_number),  # type: ignore[call-overload]
        state=str(state),
        batch_id=str(batch_id),
        participants=int(participants),  # type: ignore[call-overload]
        chunk_size=int(chunk_size),  # type: ignore[call-overload]
        stream_sizes={str(k): int(v) for k, v in json.loads(str(sizes)).items()},
    )

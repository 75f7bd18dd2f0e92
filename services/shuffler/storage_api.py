"""The shuffler's storage interface: records, refusals and the :class:`ShufflerStorage` Protocol.

The service layer (:mod:`.service`, :mod:`.enrollment`, :mod:`.release`) types
against :class:`ShufflerStorage` only; the implementations are SQLite's
:class:`.storage.Storage` (one process) and PostgreSQL's
:class:`.storage_postgres.PostgresStorage` (replicas sharing a database).  Each implements
the same methods with the same atomicity and the same unlinkability (no user column next
to a stored message, rows keyed by the random row keys the service draws); the contract
all must satisfy is ``tests/test_storage_contract.py``.

Storage only persists.  What is privacy-critical is decided in service code: the row
keys and the sealing of every message under its round key (:mod:`.vault`), the batch id,
and the release order, which is computed from the round key and never stored
(:mod:`.permutation`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

OPEN = "open"
RELEASING = "releasing"
RELEASED = "released"
FAILED = "failed"
"""A round that ended without delivering results: the campaign failed or was aborted."""
STOPPED_OWNER = ""
"""The owner of a stopped release lease (forwarding gave up; see ``take_release_lease``)."""


class StoredMessage(NamedTuple):
    """One submitted message as stored: its stream, random row key and sealed bytes.

    A named tuple rather than a frozen dataclass: one is made per message on every
    submission's path, and a tuple is built in a fraction of a frozen dataclass's time
    (whose ``__init__`` sets each field through ``object.__setattr__``)."""

    stream: str
    row_key: bytes
    sealed: bytes


class StorageError(Exception):
    """Base class of the refusals below (each maps to one problem type)."""


class AlreadySubmittedError(StorageError):
    """This token has already submitted this round."""


class ReplayedCiphertextError(StorageError):
    """A ciphertext of the submission is already stored in the same stream of the round."""


class TokenTakenError(StorageError):
    """The proposed token's hash is already recorded (for another enrollment)."""


class InvitationUsedError(StorageError):
    """This invitation has already bought a token."""


class UnknownTokenError(StorageError):
    """The token hash is not recorded for the campaign (a store that checks a token inside
    its submission's transaction: :meth:`ShufflerStorage.submit_as`,
    :meth:`LoopStatements.submit_as_async`)."""


class RoundClosedError(StorageError):
    """The round has been released: no further submissions."""


class NotEnoughParticipantsError(StorageError):
    """Fewer distinct participants than the release threshold."""

    def __init__(self, participants: int, required: int) -> None:
        super().__init__(
            f"round has {participants} participants, at least {required} are required"
        )
        self.participants = participants
        self.required = required


@dataclass(frozen=True)
class RoundRecord:
    """A round that has been released (or is being forwarded)."""

    campaign_id: str
    round: int
    state: str
    batch_id: str
    participants: int
    chunk_size: int
    stream_sizes: Mapping[str, int]
    reason: str | None = None
    """Why a ``failed`` round ended."""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> RoundRecord:
        """A stored ``rounds`` row of either backend: (campaign id, round, state, batch id,
        participants, chunk size, stream sizes as JSON text, reason)."""
        campaign_id, round_number, state, batch_id, participants, chunk_size, sizes, reason = row
        return cls(
            campaign_id=str(campaign_id),
            round=int(round_number),
            state=str(state),
            batch_id=str(batch_id),
            participants=int(participants),
            chunk_size=int(chunk_size),
            stream_sizes={str(k): int(v) for k, v in json.loads(str(sizes)).items()},
            reason=None if reason is None else str(reason),
        )

    def chunk_count(self, stream: str) -> int:
        """Chunks of ``stream``; an empty stream is still sent as one empty chunk."""
        return max(1, math.ceil(self.stream_sizes[stream] / self.chunk_size))


class ShufflerStorage(Protocol):
    """What the shuffler's service layer needs from its storage."""

    count_lag: int
    """How many submissions of a round, in flight while another one is stored, the count
    :meth:`submit` returns may leave out (0: it is exact).  A store whose submissions do
    not wait for each other (PostgreSQL's shards) counts the committed ones and its own."""

    def close(self) -> None:
        """Release the storage's resources."""
        ...

    def ping(self) -> bool:
        """Whether the storage answers a trivial query."""
        ...

    def add_token(self, campaign_id: str, token_hash: bytes) -> None:
        """Record an issued token's hash for a campaign."""
        ...

    def add_token_for_invitation(self, campaign_id: str, token_hash: bytes,
                                 invitation_hash: bytes, expires: int) -> None:
        """Mark an invitation used and record the token's hash, atomically; raises
        :class:`InvitationUsedError` (recording nothing) if the invitation was used before."""
        ...

    def forget_expired_invitations(self, before: float) -> int:
        """Drop the hashes of used invitations with ``expires < before``; returns how many."""
        ...

    def token_campaign(self, token_hash: bytes) -> str | None:
        """The campaign a token hash was issued for, or ``None`` if unknown."""
        ...

    def submit(self, campaign_id: str, round_number: int, token_hash: bytes,
               messages: Sequence[StoredMessage]) -> int:
        """Store one user's submission atomically; returns the new participant count
        (all but at most :attr:`count_lag` of the submissions in flight meanwhile).

        Raises :class:`RoundClosedError` once the round is closed and
        :class:`AlreadySubmittedError` on a second submission of the same token.
        """
        ...

    def submit_as(self, campaign_id: str, round_number: int, token_hash: bytes,
                  messages: Sequence[StoredMessage]) -> int:
        """:meth:`submit` for a token not checked yet: the same transaction first requires
        ``token_hash`` to be issued for ``campaign_id`` (:meth:`token_campaign`'s check),
        raising :class:`UnknownTokenError` having stored nothing if it is not."""
        ...

    def participants(self, campaign_id: str, round_number: int) -> int:
        """Distinct users who have submitted this round."""
        ...

    def has_submitted(self, campaign_id: str, round_number: int, token_hash: bytes) -> bool:
        """Whether this token hash has submitted this round."""
        ...

    def pending_count(self, campaign_id: str, round_number: int, stream: str) -> int:
        """Ciphertexts of a stream waiting for the release of an open round."""
        ...

    def rounds_with_messages(self) -> list[tuple[str, int]]:
        """The (campaign, round) pairs that have stored messages (open or releasing)."""
        ...

    def round_record(self, campaign_id: str, round_number: int) -> RoundRecord | None:
        """The release record of a round, ``None`` while it is open."""
        ...

    def close_round(self, campaign_id: str, round_number: int, *, minimum: int,
                    batch_id: str, chunk_size: int, streams: Sequence[str]) -> RoundRecord:
        """Close the round for release, atomically; returns the existing record if closed.

        Raises :class:`NotEnoughParticipantsError` (the round stays open) with fewer than
        ``minimum`` participants.  The record counts each stream's stored messages.
        """
        ...

    def sealed_rows(self, campaign_id: str, round_number: int, stream: str, *,
                    after: bytes = b"", limit: int) -> list[tuple[bytes, bytes]]:
        """At most ``limit`` (row key, sealed message) pairs of a stream whose row keys are
        above ``after``, in ascending key order: a keyset page (the release reads a
        closed stream with these, :mod:`.shuffled_stream`)."""
        ...

    def acknowledge(self, record: RoundRecord, stream: str, index: int) -> None:
        """Record that the server acknowledged a chunk."""
        ...

    def acknowledged(self, record: RoundRecord) -> set[tuple[str, int]]:
        """The (stream, chunk index) pairs acknowledged so far."""
        ...

    def clear_acknowledgements(self, record: RoundRecord) -> None:
        """Forget which chunks were acknowledged, so that all are sent again."""
        ...

    def finish_release(self, record: RoundRecord, *, state: str = RELEASED,
                       reason: str | None = None) -> RoundRecord:
        """The round is over: mark it ``state`` (released or failed, and why) and forget it.

        Deletes the round's stored messages, acknowledgements and participations (only
        the count stays) and, after round 2 or a failure, the campaign's tokens.  SQLite
        overwrites deleted content; PostgreSQL leaves dead tuples in its files (vacuumed,
        not overwritten), where the sealed messages stay unreadable once the service has
        destroyed the round key.
        """
        ...

    def discard_round(self, campaign_id: str, round_number: int, reason: str) -> RoundRecord:
        """Close an open round of an ended campaign as failed and forget it (idempotent:
        a closed round's record is returned unchanged)."""
        ...

    def releasing(self) -> list[RoundRecord]:
        """Rounds whose forwarding has not been acknowledged yet."""
        ...

    def finished_rounds(self) -> list[tuple[str, int]]:
        """The (campaign, round) pairs that are over (released or failed), sorted."""
        ...

    def rounds_holding_messages(self) -> list[tuple[str, int]]:
        """The (campaign, round) pairs with stored messages not yet forwarded (open with
        participants, or releasing), sorted: each needs its round key (readiness)."""
        ...

    # -- the release lease (docs/architecture.md, "Replicas") --------------------------
    def take_release_lease(self, campaign_id: str, round_number: int, owner: str,
                           seconds: float, *, force: bool = False) -> bool:
        """Take or renew the lease to forward a round for ``seconds``; whether ``owner``
        holds it now.

        Only a ``releasing`` round has a lease (``False`` for any other).  Taken when
        nobody holds it, when ``owner`` holds it (renewed), or when its holder let it
        expire (the database's clock decides).  A lease its holder stopped
        (:meth:`stop_release_lease`) is taken only with ``force``: an operator's release
        request, never a replica's periodic scan.
        """
        ...

    def stop_release_lease(self, campaign_id: str, round_number: int, owner: str) -> None:
        """``owner`` gave up forwarding (refused or out of retries): the lease stays
        stopped until forced; nothing if ``owner`` does not hold it."""
        ...

    def drop_release_lease(self, campaign_id: str, round_number: int, owner: str) -> None:
        """``owner`` lets go of the lease (shutting down): anyone may take it at once."""
        ...


@runtime_checkable
class LoopStatements(Protocol):
    """A store whose per-request statements can also run on the event loop (PostgreSQL:
    :meth:`.storage_postgres.PostgresStorage.open_async`); SQLite's run inline already.

    The service uses them once :attr:`async_ready`, else the synchronous methods of
    :class:`ShufflerStorage` in worker threads; both give the same answers.
    """

    @property
    def async_ready(self) -> bool:
        """Whether the loop's connections are open."""
        ...

    async def open_async(self) -> None:
        """Open the loop's connections (the application's startup)."""
        ...

    async def close_async(self) -> None:
        """Close them (the application's shutdown)."""
        ...

    async def token_campaign_async(self, token_hash: bytes) -> str | None:
        """:meth:`ShufflerStorage.token_campaign` on the loop."""
        ...

    async def add_token_for_invitation_async(self, campaign_id: str, token_hash: bytes,
                                             invitation_hash: bytes, expires: int) -> None:
        """:meth:`ShufflerStorage.add_token_for_invitation` on the loop."""
        ...

    async def forget_expired_invitations_async(self, before: float) -> int:
        """:meth:`ShufflerStorage.forget_expired_invitations` on the loop."""
        ...

    async def submit_async(self, campaign_id: str, round_number: int, token_hash: bytes,
                           messages: Sequence[StoredMessage]) -> int:
        """:meth:`ShufflerStorage.submit` on the loop."""
        ...

    async def submit_as_async(self, campaign_id: str, round_number: int, token_hash: bytes,
                              messages: Sequence[StoredMessage]) -> int:
        """:meth:`submit_async` whose statement first requires ``token_hash`` to be issued
        for ``campaign_id`` (:meth:`token_campaign_async`'s check), raising
        :class:`UnknownTokenError` having stored nothing if it is not: the token check
        and the submission in one round trip."""
        ...

"""The server's storage interface: the records it returns and the :class:`ServerStorage` Protocol.

The service layer (:mod:`.service`) types against :class:`ServerStorage` only; the
SQLite implementation is :class:`.storage.Repository`, the PostgreSQL one (several
replicas on one database) :class:`.storage_postgres.PostgresRepository`.  Storage only
persists: what a chunk means (which messages are replays, what is counted, what the
receipt says) and when a round may finish are decided in service code, which reads and
writes through one :class:`ServerTransaction` at a time.  Another backend implements
the same methods with the same atomicity (a transaction is all or nothing, and
serialised against every other writer of the same campaign, in every process sharing
the storage); the contract every backend must satisfy is
``tests/test_storage_contract.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

NULL_VALUE = -1
"""The ``counts`` row of a stream's null messages (they count for the results only)."""


class ConflictError(Exception):
    """The write conflicts with stored state (another batch, changed chunk, moved phase)."""


@dataclass(frozen=True)
class CampaignRecord:
    """One stored campaign with its JSON columns decoded."""

    id: str
    config: dict[str, Any]
    config_hash: str
    key_id: str
    public_key: bytes
    phase: str
    parameters: dict[str, Any] | None
    parameters_hash: str | None
    round1: dict[str, Any] | None
    results: dict[str, Any] | None
    end_reason: str | None = None


@dataclass(frozen=True)
class ChunkRecord:
    """One stored chunk: its batch, the stream's chunk count, content digest and receipt."""

    batch_id: str
    chunk_count: int
    digest: bytes
    receipt: dict[str, Any]


@dataclass(frozen=True)
class BatchRecord:
    """The batch pinned to a round and its stored completion (``None`` until complete)."""

    batch_id: str
    completion: dict[str, Any] | None


@dataclass(frozen=True)
class StoredChunk:
    """A chunk of a stream as listed by :meth:`ServerStorage.stream_chunks`."""

    chunk_index: int
    chunk_count: int
    receipt: dict[str, Any]


@dataclass(frozen=True)
class AcceptedMessage:
    """A message that decrypted and decoded: its value (None for a null) and nonce."""

    value: int | None
    nonce: bytes


class ServerTransaction(Protocol):
    """Reads and writes inside one transaction (:meth:`ServerStorage.transaction`)."""

    def phase(self, campaign_id: str) -> str | None:
        """The campaign's phase, ``None`` if unknown."""
        ...

    def batch(self, campaign_id: str, round_: int) -> BatchRecord | None:
        """The batch pinned to a round, ``None`` before its first chunk."""
        ...

    def chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
              ) -> ChunkRecord | None:
        """One stored chunk, ``None`` if not stored."""
        ...

    def pin_batch(self, campaign_id: str, round_: int, batch_id: str) -> None:
        """Pin the round to ``batch_id`` (the round has no batch yet)."""
        ...

    def insert_nonces(self, campaign_id: str, round_: int, nonces: Sequence[bytes]
                      ) -> list[bool]:
        """Record the nonces in the round; per nonce, whether it was new.

        A nonce repeated within ``nonces`` is new only at its first occurrence.
        """
        ...

    def add_counts(self, campaign_id: str, round_: int, stream: str,
                   counts: Mapping[int, int]) -> None:
        """Add to the per-value message counts of a stream (nulls under NULL_VALUE)."""
        ...

    def put_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int,
                  chunk: ChunkRecord) -> None:
        """Store a chunk record (the chunk is not stored yet)."""
        ...

    def complete_batch(self, campaign_id: str, round_: int,
                       completion: Mapping[str, Any]) -> None:
        """Store the completion answer of the round's pinned batch."""
        ...

    def publish_parameters(self, campaign_id: str, parameters: Mapping[str, Any],
                           parameters_hash: str, round1: Mapping[str, Any]) -> None:
        """Store the round-2 parameters and the round-1 summary; phase ``round2``."""
        ...

    def store_results(self, campaign_id: str, results: Mapping[str, Any]) -> None:
        """Store the decoded results; phase ``done``."""
        ...

    def end_campaign(self, campaign_id: str, phase: str, reason: str) -> None:
        """End the campaign without results: phase ``failed`` or ``aborted``, and why."""
        ...

    def delete_nonces(self, campaign_id: str, round_: int) -> None:
        """Forget a finished round's nonces (they only served replay detection)."""
        ...


class ServerStorage(Protocol):
    """What the server's service layer needs from its storage."""

    def close(self) -> None:
        """Release the storage's resources."""
        ...

    def ping(self) -> bool:
        """Whether the storage answers a trivial query."""
        ...

    def create_campaign(self, campaign_id: str, config: Mapping[str, Any], config_hash: str,
                        key_id: str, public_key: bytes) -> CampaignRecord:
        """Insert a new campaign in phase ``round1``; :class:`ConflictError` if the id exists."""
        ...

    def campaign(self, campaign_id: str) -> CampaignRecord | None:
        """The stored campaign, ``None`` if unknown."""
        ...

    def phase(self, campaign_id: str) -> str | None:
        """The campaign's phase, ``None`` if unknown."""
        ...

    def collecting_campaign_ids(self) -> list[str]:
        """The campaigns in round 1 or round 2 (they need their keys), sorted."""
        ...

    def campaign_ids(self) -> list[str]:
        """Every stored campaign id, sorted."""
        ...

    def campaign_phases(self, after: str | None, limit: int) -> list[tuple[str, str]]:
        """(id, phase) of at most ``limit`` campaigns with id > ``after``, sorted by id."""
        ...

    def batch(self, campaign_id: str, round_: int) -> BatchRecord | None:
        """The batch pinned to a round, ``None`` before its first chunk."""
        ...

    def chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
              ) -> ChunkRecord | None:
        """One stored chunk, ``None`` if not stored."""
        ...

    def stream_chunks(self, campaign_id: str, round_: int, stream: str) -> list[StoredChunk]:
        """Every stored chunk of a stream, by index."""
        ...

    def counts(self, campaign_id: str, round_: int, stream: str) -> dict[int, int]:
        """Accepted messages per value of one stream of a round (nulls under NULL_VALUE)."""
        ...

    def transaction(self) -> AbstractContextManager[ServerTransaction]:
        """A transaction: committed when the block ends, rolled back if it raises."""
        ...

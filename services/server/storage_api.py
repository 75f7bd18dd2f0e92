"""The server's storage interface: the records it returns and the :class:`ServerStorage` Protocol.

The service layer (:mod:`.service`) types against :class:`ServerStorage` only; the
SQLite implementation is :class:`.storage.Repository`.  Another backend implements
the same methods with the same atomicity: every state-changing method is one
transaction, and the refusals are :class:`ConflictError`.  The contract both must
satisfy is ``tests/test_storage_contract.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

NULL_VALUE = -1
"""The ``counts`` row of a stream's null messages (they count for the results only)."""

MakeReceipt = Callable[[list[int], int], dict[str, Any]]
"""``make_receipt(replay_positions, accepted_count)``: the receipt of a stored chunk."""


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

    def campaign_ids(self) -> list[str]:
        """Every stored campaign id, sorted."""
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

    def store_chunk(self, campaign_id: str, round_: int, batch_id: str, stream: str,
                    chunk_index: int, chunk_count: int, digest: bytes,
                    accepted: Iterable[tuple[int, AcceptedMessage]],
                    make_receipt: MakeReceipt) -> dict[str, Any]:
        """Store one chunk atomically (pin batch, drop replays, count); return its receipt."""
        ...

    def counts(self, campaign_id: str, round_: int, stream: str) -> dict[int, int]:
        """Accepted messages per value of one stream of a round (nulls under NULL_VALUE)."""
        ...

    def finish_round1(self, campaign_id: str, batch_id: str, completion: Mapping[str, Any],
                      parameters: Mapping[str, Any], parameters_hash: str,
                      round1: Mapping[str, Any]) -> None:
        """Publish the round-2 parameters and close round 1, atomically."""
        ...

    def finish_round2(self, campaign_id: str, batch_id: str, completion: Mapping[str, Any],
                      results: Mapping[str, Any]) -> None:
        """Store the decoded results and close round 2, atomically."""
        ...

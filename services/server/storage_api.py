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

The *decode queue* holds the chunks that have been accepted but not yet decrypted and
counted (docs/architecture.md, "Replicas"). A chunk enters it in a campaign transaction
(:meth:`ServerTransaction.enqueue_chunk`), is *claimed* by one decode worker at a time
for a lease (:meth:`ServerStorage.claim_chunk`: the oldest row whose lease has expired,
taken atomically, so two claimers never get the same row while a lease holds; on
PostgreSQL with ``FOR UPDATE SKIP LOCKED``, so claimers on several replicas do not wait
for each other), and leaves it in the campaign transaction that counts it
(:meth:`ServerTransaction.dequeue_chunk`). Claims are not campaign transactions: they
touch one queue row and no campaign lock, so a claim never waits for intake or for the
end of a round. A worker that dies holding a claim leaves the row until its lease
expires; then any worker, in any process, claims it again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

NULL_VALUE = -1
"""The ``counts`` row of a stream's null messages (they count for the results only)."""
MAX_CIPHERTEXT_BYTES = 0xFFFF
"""The largest ciphertext a queue row holds (its length is a 2-byte prefix)."""


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
class QueueEntry:
    """A chunk to be decoded, as :meth:`ServerTransaction.enqueue_chunk` stores it."""

    batch_id: str
    chunk_count: int
    digest: bytes
    ciphertexts: tuple[bytes, ...]


@dataclass(frozen=True)
class QueuedChunk:
    """A chunk in the decode queue, without its ciphertexts.

    ``seq`` numbers rows in the order they were queued (never reused, so a stale claim
    of a row that left the queue cannot touch another); ``owner`` is the worker holding
    the claim (``None`` when unclaimed); ``attempts`` counts the claims so far and
    ``failures`` the attempts whose decoding failed (a claim given back after a cancel, or
    left to expire by a stopped worker, is an attempt but not a failure).
    """

    seq: int
    campaign_id: str
    round: int
    stream: str
    chunk_index: int
    batch_id: str
    chunk_count: int
    digest: bytes
    received: int
    owner: str | None
    attempts: int
    failures: int


@dataclass(frozen=True)
class CompletionJob:
    """A round whose completion was requested and is not yet computed: the durable job of
    :mod:`..completion` (one per pinned batch; it is done when the batch's completion is
    stored, in the transaction that stores it).

    ``requested_at`` and ``started_at`` are seconds on the storage's clock (the first
    request; the current claim, ``None`` while unclaimed); ``age`` and ``running`` are the
    seconds since each, measured on that same clock when the job was read.  ``attempts``
    counts claims (a claim of a process that died is an attempt), ``failures`` the attempts
    that raised, ``last_error`` the latest failure's message.
    """

    campaign_id: str
    round: int
    batch_id: str
    owner: str | None
    attempts: int
    failures: int
    last_error: str | None
    age: float
    running: float | None

    @property
    def state(self) -> str:
        """``computing`` while a claim holds, else ``waiting`` (for a worker, or for the
        retry delay after a failure)."""
        return "computing" if self.owner is not None and self.running is not None else "waiting"


JOB_COLUMNS = ("campaign_id, round, batch_id, job_owner, job_attempts, job_failures,"
               " job_error, completion_requested, job_started")
"""The columns of a batch row a :class:`CompletionJob` is read from, in order (both
backends), followed by the storage's clock."""


OPEN_JOB = ("batches.completion_json IS NULL AND batches.completion_requested IS NOT NULL"
            " AND EXISTS (SELECT 1 FROM campaigns WHERE campaigns.id = batches.campaign_id"
            " AND campaigns.phase = CASE batches.round WHEN 1 THEN 'round1' ELSE 'round2' END)")
"""The condition (SQL common to both backends) on a ``batches`` row that holds a job not
yet done: requested, its completion not stored, and its campaign still in that round (a
campaign aborted meanwhile leaves nothing to compute)."""


def job_from_row(row: Sequence[Any]) -> CompletionJob:
    """A :class:`CompletionJob` from a row of :data:`JOB_COLUMNS` and the clock's reading."""
    now = float(row[9])
    started = None if row[8] is None else float(row[8])
    return CompletionJob(campaign_id=row[0], round=int(row[1]), batch_id=row[2],
                         owner=row[3], attempts=int(row[4]), failures=int(row[5]),
                         last_error=row[6], age=max(0.0, now - float(row[7])),
                         running=None if started is None else max(0.0, now - started))


@dataclass(frozen=True)
class DecodeBacklog:
    """A round's chunks in the decode queue: ``queued`` (waiting or being decoded) and,
    of those, ``failing``: the ones whose last decoding failed at least once."""

    queued: int
    failing: int


QUEUE_COLUMNS = ("seq, campaign_id, round, stream, chunk_index, batch_id, chunk_count, digest,"
                 " received, owner, attempts, failures")
"""The columns of a decode-queue row a :class:`QueuedChunk` is read from, in order (the
same in both backends; the ciphertext blob is selected apart, after them)."""


def queued_from_row(row: Sequence[Any]) -> QueuedChunk:
    """A :class:`QueuedChunk` from a row that starts with :data:`QUEUE_COLUMNS`."""
    return QueuedChunk(seq=int(row[0]), campaign_id=row[1], round=int(row[2]), stream=row[3],
                       chunk_index=int(row[4]), batch_id=row[5], chunk_count=int(row[6]),
                       digest=bytes(row[7]), received=int(row[8]), owner=row[9],
                       attempts=int(row[10]), failures=int(row[11]))


@dataclass(frozen=True)
class ClaimedChunk(QueuedChunk):
    """A chunk a worker has claimed (:meth:`ServerStorage.claim_chunk`), with its
    ciphertexts in their order in the chunk."""

    ciphertexts: tuple[bytes, ...]


def pack_ciphertexts(ciphertexts: Sequence[bytes]) -> bytes:
    """One blob of a queue row: each ciphertext after its 2-byte big-endian length."""
    parts = []
    for ciphertext in ciphertexts:
        if len(ciphertext) > MAX_CIPHERTEXT_BYTES:
            raise ValueError(f"a ciphertext of {len(ciphertext)} bytes is too long to queue")
        parts.append(len(ciphertext).to_bytes(2, "big"))
        parts.append(bytes(ciphertext))
    return b"".join(parts)


def unpack_ciphertexts(blob: bytes) -> tuple[bytes, ...]:
    """The ciphertexts of :func:`pack_ciphertexts`; ``ValueError`` if the blob is cut short."""
    view = memoryview(blob)
    ciphertexts = []
    position = 0
    while position < len(view):
        if position + 2 > len(view):
            raise ValueError("a queued chunk ends inside a length prefix")
        length = int.from_bytes(view[position:position + 2], "big")
        position += 2
        if position + length > len(view):
            raise ValueError("a queued chunk ends inside a ciphertext")
        ciphertexts.append(bytes(view[position:position + length]))
        position += length
    return tuple(ciphertexts)


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

    def stream_chunk_count(self, campaign_id: str, round_: int, stream: str) -> int | None:
        """The ``chunk_count`` of the stream's chunks, stored or queued (the first chunk
        fixes it); ``None`` before its first chunk."""
        ...

    def queued_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
                     ) -> QueuedChunk | None:
        """One chunk of the decode queue (claimed or not), ``None`` if not queued."""
        ...

    def enqueue_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int,
                      entry: QueueEntry) -> None:
        """Queue a chunk for decoding, unclaimed; :class:`ConflictError` if that chunk is
        queued already (the service checks before, in the same transaction)."""
        ...

    def dequeue_chunk(self, campaign_id: str, seq: int) -> bool:
        """Remove queue row ``seq`` of the campaign; whether it was there (a second
        finisher of the same chunk finds it gone and changes nothing)."""
        ...

    def queued_count(self, campaign_id: str, round_: int) -> int:
        """How many chunks of the round are queued or being decoded."""
        ...

    def drop_queue(self, campaign_id: str) -> int:
        """Remove every queued chunk of the campaign (it ended); how many there were."""
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

    # -- the decode queue (no campaign transaction: see the module docstring) -----------

    def queued_chunk(self, campaign_id: str, round_: int, stream: str, chunk_index: int
                     ) -> QueuedChunk | None:
        """One chunk of the decode queue (claimed or not), ``None`` if not queued."""
        ...

    def decode_backlog(self, campaign_id: str, round_: int) -> DecodeBacklog:
        """How many chunks of the round are queued or being decoded, and how many of those
        have failed to decode at least once."""
        ...

    def claim_chunk(self, owner: str, lease_seconds: float) -> ClaimedChunk | None:
        """Claim the oldest queued chunk that no lease holds (never claimed, released, or
        its lease expired) for ``owner`` until ``lease_seconds`` from now, in one atomic
        step; ``None`` when there is none. While the lease holds no other claim returns
        that chunk, in any process sharing the storage; claimers do not wait for each
        other's rows."""
        ...

    def listen_for_queued_chunks(self, on_queued: Callable[[], None], stop: threading.Event,
                                 on_failure: Callable[[Exception, float], None] | None = None
                                 ) -> None:
        """Block, calling ``on_queued`` whenever another process sharing the storage queues
        a chunk, until ``stop`` is set; ``on_failure(error, retry_seconds)`` hears of a lost
        connection before it is retried. Returns at once when no other process can queue
        chunks (SQLite). A hint only: claims find every chunk without it."""
        ...

    def renew_claim(self, seq: int, owner: str, lease_seconds: float) -> bool:
        """Extend ``owner``'s claim of row ``seq`` to ``lease_seconds`` from now; ``False``
        if the row is gone or another worker holds it now (its lease had expired)."""
        ...

    def release_claim(self, seq: int, owner: str, delay_seconds: float = 0.0, *,
                      failed: bool = False) -> bool:
        """Give back ``owner``'s claim of row ``seq``: claimable again after
        ``delay_seconds`` (a worker that could not decode it waits before the next
        attempt), its ``failures`` counted up if ``failed``; ``False`` if ``owner`` does
        not hold it."""
        ...

    # -- completion jobs (the pinned batch's row; see CompletionJob) ----------------------

    def request_completion(self, campaign_id: str, round_: int, batch_id: str
                           ) -> CompletionJob | None:
        """Record that the round's completion is wanted (once: a repeated request changes
        nothing) and return its job; ``None`` when the batch is not pinned under
        ``batch_id`` or its completion is already stored."""
        ...

    def completion_job(self, campaign_id: str, round_: int) -> CompletionJob | None:
        """The round's job, ``None`` when none was requested or its completion is stored."""
        ...

    def completion_jobs(self) -> list[CompletionJob]:
        """Every job not yet done, oldest request first (at most one per round)."""
        ...

    def claim_completion(self, owner: str, lease_seconds: float) -> CompletionJob | None:
        """Claim the oldest requested job that no lease holds for ``owner`` until
        ``lease_seconds`` from now, atomically (as :meth:`claim_chunk`: replicas sharing
        the storage never hold one job at once); ``None`` when there is none."""
        ...

    def renew_completion(self, campaign_id: str, round_: int, owner: str,
                         lease_seconds: float) -> bool:
        """Extend ``owner``'s claim of the job; ``False`` if it is done or held by another."""
        ...

    def release_completion(self, campaign_id: str, round_: int, owner: str,
                           delay_seconds: float = 0.0, *, error: str | None = None) -> bool:
        """Give back ``owner``'s claim of the job, claimable again after ``delay_seconds``;
        with ``error`` the attempt counts as failed and the message is kept."""
        ...

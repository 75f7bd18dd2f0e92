"""The server's operations, independent of HTTP: each raises a domain error
(:mod:`segshuffle.services.errors`) on refusal.

Calls are synchronous (the HTTP layer runs them in its thread pool).  Every write
is one storage transaction (:class:`~.storage_api.ServerTransaction`) that checks
again, inside it, what it read before doing slow work (decryption, the optimizer):
the phase, the pinned batch, whether the chunk or the completion is stored already.
So a round is never finished while a chunk of it is queued or being counted, and the
replay policy (:meth:`ServerService._count`) lives here, not in storage.  Campaign creation
takes no lock: its key file is named by its key id and written before its row, and the
database's primary key decides between racing creations (:mod:`.keys`), so several
replicas may share the database and the key directory.

Batch intake (docs/architecture.md, "Server"):

- The first chunk of a round pins its batch id; every stream's ``chunk_count`` is
  fixed by its first chunk.
- A chunk is identified by (round, stream, chunk_index) and fingerprinted by a
  SHA-256 digest of its content: the same chunk again returns the stored receipt
  (``duplicate: true``), a different content under the same identity is a conflict.
- A chunk that passes these checks is *queued* (:meth:`ServerService.store_chunk`,
  one transaction, no decryption), and the answer says so (``state: "queued"``).
  Decode workers (:mod:`.decoding`, in every replica) claim queued chunks and decode
  them (:meth:`ServerService.decode_claimed`): decrypt and classify
  (:meth:`ServerService.decode_messages`), then count in one transaction
  (:meth:`ServerService.finish_chunk`) that removes the queue row, so a chunk is
  counted once even when two workers decoded it (the second finds its row gone).
  Bad messages are dropped and listed in the receipt with their problem type
  (``decrypt-failed``, ``invalid-message``, ``out-of-domain``, ``replay``), never
  failing the chunk: one user's garbage must not block a round.
- ``complete`` waits for the queue: while a chunk of the round is queued or being
  decoded it answers ``unavailable`` with ``Retry-After`` (the shuffler retries).
  Then it checks every chunk of every stream is there and finishes the round (round
  1: histogram, optimizer, publication; round 2: decoding) in one transaction.
  Repeating it returns the stored answer.  Ending a campaign drops its queued chunks.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from segshuffle.crypto import build_info, key_config, private_key_bytes, public_key_from_bytes
from segshuffle.crypto.documents import sign_view
from segshuffle.crypto.invitations import public_key_text
from segshuffle.services import errors
from segshuffle.wire.models import (
    BatchChunk,
    BatchCompletion,
    CampaignConfig,
    CampaignCreate,
    CampaignList,
    CampaignSummary,
    CampaignView,
    ChunkReceipt,
    CompletionPending,
    HpkeConfig,
    MessageFailure,
    PublishedParameters,
    Results,
    StreamSummary,
    b64url_decode,
)
from segshuffle.wire.plaintext import Kind
from segshuffle.wire.problems import problem_uri

from .aggregation import decode_results, histogram, publish_parameters
from .decrypt import Decryptor, Outcome
from .keys import KeyStore
from .storage_api import (
    NULL_VALUE,
    AcceptedMessage,
    CampaignRecord,
    ChunkRecord,
    ClaimedChunk,
    CompletionJob,
    ConflictError,
    QueuedChunk,
    QueueEntry,
    ServerStorage,
    ServerTransaction,
)

log = logging.getLogger("segshuffle.server")

MAX_LISTED_FAILURES = 1000
"""Failures listed per receipt; beyond that only counted."""
STREAMS_BY_ROUND: dict[int, tuple[str, ...]] = {1: ("levels",), 2: ("levels", "data")}
FAILURE_NAMES = ("decrypt-failed", "invalid-message", "out-of-domain", "replay")
DECODING_RETRY_AFTER = 1
"""Seconds ``complete`` asks the shuffler to wait while chunks of the round are decoded."""
FAILING_RETRY_AFTER = 30
"""The same while some of them have failed to decode: they are retried seconds to minutes
apart and may wait for an operator, so the shuffler need not ask every second."""


def chunk_digest(batch_id: str, chunk: BatchChunk) -> bytes:
    """SHA-256 over the chunk's identity, count and ciphertexts (idempotency fingerprint)."""
    digest = hashlib.sha256()
    digest.update(f"{batch_id}\x00{chunk.stream}\x00{chunk.chunk_index}\x00"
                  f"{chunk.chunk_count}\x00".encode())
    for text in chunk.ciphertexts:
        digest.update(text.encode("ascii"))
        digest.update(b"\x00")
    return digest.digest()


FINAL_PHASES = frozenset({"done", "failed", "aborted"})
"""Phases after which a campaign's view never changes again."""
DOCUMENT_CACHE_ENTRIES = 4096
"""Campaigns whose view and key config are kept in memory (least recently used evicted)."""


def _bounded_put(cache: OrderedDict[str, Any], key: str, value: Any) -> None:
    """Insert into an LRU dict of at most :data:`DOCUMENT_CACHE_ENTRIES` entries."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > DOCUMENT_CACHE_ENTRIES:
        cache.popitem(last=False)


class ServerService:
    """Campaigns, batch intake, round completion and results."""

    def __init__(self, repository: ServerStorage, keys: KeyStore, decryptor: Decryptor, *,
                 signing_key: Ed25519PrivateKey,
                 allow_insecure_parameters: bool = False,
                 shuffler_min_users: int = 0) -> None:
        self.repository = repository
        self.signing_key = signing_key
        """Signs every view's statements (:func:`segshuffle.crypto.documents.sign_view`)."""
        self.keys = keys
        self.decryptor = decryptor
        self.allow_insecure_parameters = allow_insecure_parameters
        self.shuffler_min_users = shuffler_min_users
        """The shuffler's floor on participants per release, when known (0: unknown)."""
        self._views: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._key_configs: OrderedDict[str, bytes] = OrderedDict()

    # -- campaigns ---------------------------------------------------------------------------

    def create_campaign(self, request: CampaignCreate) -> CampaignView:
        """Create a campaign with a fresh HPKE key; ``already-exists`` if the id is taken.

        No process-local lock: the key is written to a file named by its key id before
        the row that records the key id is inserted, and of two replicas racing on one
        id the database's primary key lets exactly one insert; the other's key file is
        an orphan no row names (:mod:`.keys`).
        """
        if request.insecure_parameters is not None and not self.allow_insecure_parameters:
            raise errors.InsecureRefusedError(
                "insecure_parameters needs a server started with the insecure flag")
        floor = self.shuffler_min_users
        if request.min_users < floor:
            raise errors.InvalidRequestError(
                f"min_users: {request.min_users} is below the shuffler's floor of {floor} "
                f"participants per release, so each round would wait for {floor}; ask for "
                f"min_users {floor} or more (or lower the shuffler's "
                "SEGSHUFFLE_SHUFFLER_MIN_USERS and this server's "
                "SEGSHUFFLE_SERVER_SHUFFLER_MIN_USERS together)")
        config = request.to_config()
        if self.repository.campaign(config.id) is not None:
            raise errors.AlreadyExistsError(f"campaign {config.id!r} already exists")
        key = self.keys.create(config.id)
        hpke = key_config(key)
        try:
            record = self.repository.create_campaign(
                config.id, config.model_dump(mode="json"), config.hash_hex(), hpke.key_id,
                b64url_decode(hpke.public_key))
        except ConflictError as exc:
            raise errors.AlreadyExistsError(str(exc)) from None
        log.info("campaign %s created: d=%d s=%d K=%d %s blanket, key %s", config.id,
                 config.domain_size, config.set_size, len(config.levels), config.blanket_mode,
                 hpke.key_id)
        return self.view(record)

    def missing_keys(self) -> list[str]:
        """The collecting campaigns whose private key cannot be loaded (readiness)."""
        missing = []
        for campaign_id in self.repository.collecting_campaign_ids():
            record = self.repository.campaign(campaign_id)
            if record is None:  # pragma: no cover - campaigns are never deleted
                continue
            try:
                self.keys.get(campaign_id, record.key_id)  # loads the file once, then cached
                present = self.keys.path(campaign_id, record.key_id).is_file()
            except (OSError, ValueError):
                present = False
            if not present:
                missing.append(campaign_id)
        return missing

    def list_campaigns(self, after: str | None, limit: int) -> CampaignList:
        """One page of the stored campaigns by id (keyset pagination): at most ``limit``
        with id > ``after``; ``next`` is the cursor of the following page, if any."""
        rows = self.repository.campaign_phases(after, limit + 1)
        page = [CampaignSummary(id=cid, phase=phase) for cid, phase in rows[:limit]]  # type: ignore[arg-type]
        return CampaignList(campaigns=page, next=page[-1].id if len(rows) > limit else None)

    def campaign(self, campaign_id: str) -> CampaignRecord:
        record = self.repository.campaign(campaign_id)
        if record is None:
            raise errors.UnknownCampaignError(f"no campaign {campaign_id!r}")
        return record

    @staticmethod
    def hpke_config(record: CampaignRecord) -> HpkeConfig:
        return key_config(public_key_from_bytes(record.public_key))

    @property
    def signing_public_key(self) -> str:
        """The document-signing public key, unpadded base64url of its 32 raw bytes."""
        return public_key_text(self.signing_key)

    def view(self, record: CampaignRecord) -> CampaignView:
        """The public view, signed: campaign statement, parameters once published, end
        once terminal (docs/wire.md section 9)."""
        view = CampaignView(
            id=record.id,
            phase=record.phase,  # type: ignore[arg-type]
            config=CampaignConfig.model_validate(record.config),
            config_hash=record.config_hash,
            key_id=record.key_id,
            hpke_config=self.hpke_config(record),
            parameters=(PublishedParameters.model_validate(record.parameters)
                        if record.parameters is not None else None),
            parameters_hash=record.parameters_hash,
            end_reason=record.end_reason,
        )
        return view.model_copy(update={"signatures": sign_view(self.signing_key, view)})

    def _view_entry(self, campaign_id: str) -> tuple[str, bytes]:
        """(phase, serialized public view), cached per phase (the only part that ever
        changes; configuration, key and published parameters are immutable). The phase
        is read from storage every time, so a replica sees another's phase change."""
        phase = self.repository.phase(campaign_id)
        if phase is None:
            raise errors.UnknownCampaignError(f"no campaign {campaign_id!r}")
        cached = self._views.get(campaign_id)
        if cached is not None and cached[0] == phase:
            self._views.move_to_end(campaign_id)
            return cached
        record = self.campaign(campaign_id)
        entry = (record.phase, self.view(record).model_dump_json().encode())
        _bounded_put(self._views, campaign_id, entry)
        return entry

    def final_view(self, campaign_id: str) -> bytes | None:
        """The cached view of an ended campaign (immutable, so no storage read is needed),
        or ``None``: memory only, cheap enough for the event loop."""
        cached = self._views.get(campaign_id)
        if cached is None or cached[0] not in FINAL_PHASES:
            return None
        return cached[1]

    def key_config_document(self, campaign_id: str) -> bytes:
        """The serialized key config of a campaign (immutable: cached once read)."""
        cached = self.cached_key_config(campaign_id)
        if cached is not None:
            return cached
        body = self.hpke_config(self.campaign(campaign_id)).model_dump_json().encode()
        _bounded_put(self._key_configs, campaign_id, body)
        return body

    def cached_key_config(self, campaign_id: str) -> bytes | None:
        """The key config if it has been read before (memory only), else ``None``."""
        cached = self._key_configs.get(campaign_id)
        if cached is not None:
            self._key_configs.move_to_end(campaign_id)
        return cached

    def view_document(self, campaign_id: str) -> tuple[bytes, bool]:
        """The serialized view and whether it is final (the campaign has ended: ``done``,
        ``failed`` or ``aborted``; immutable from then on)."""
        phase, body = self._view_entry(campaign_id)
        return body, phase in FINAL_PHASES

    def results(self, campaign_id: str) -> Results:
        record = self.campaign(campaign_id)
        if record.phase != "done" or record.results is None:
            extra = {"phase": record.phase}
            if record.end_reason is not None:
                extra["end_reason"] = record.end_reason
            raise errors.WrongPhaseError(f"campaign {campaign_id!r} is in phase {record.phase}; "
                                         "results exist once round 2 is complete", extra=extra)
        return Results.model_validate(record.results)

    # -- batch intake ------------------------------------------------------------------------

    def _info(self, record: CampaignRecord, round_: int) -> bytes:
        context = record.config_hash if round_ == 1 else record.parameters_hash
        assert context is not None
        return build_info(record.id, round_, record.key_id, bytes.fromhex(context))

    def _private_key(self, record: CampaignRecord) -> bytes:
        """The campaign's raw private key, or ``unavailable`` when its file cannot be read."""
        try:
            return private_key_bytes(self.keys.get(record.id, record.key_id))
        except (OSError, ValueError):
            raise errors.UnavailableError("the campaign's private key is not available") from None

    @staticmethod
    def _duplicate(campaign_id: str, phase: str | None, round_: int, batch_id: str,
                   chunk: BatchChunk, digest: bytes,
                   stored: ChunkRecord | QueuedChunk) -> ChunkReceipt:
        """The receipt of a chunk delivered again (decoded: the stored one; queued: a queued
        one), or why it cannot be one: the same identity with other content."""
        if stored.batch_id != batch_id or stored.digest != digest:
            if phase != f"round{round_}":
                raise errors.WrongPhaseError(
                    f"campaign {campaign_id!r} is in phase {phase}, "
                    f"not accepting round-{round_} batches", extra={"phase": phase})
            raise errors.ConflictError(f"chunk {chunk.chunk_index} of stream {chunk.stream!r} "
                                       "was already delivered with different content")
        if isinstance(stored, QueuedChunk):
            return _queued_receipt(campaign_id, round_, batch_id, chunk.stream,
                                   chunk.chunk_index, chunk.chunk_count, stored.received,
                                   duplicate=True)
        return ChunkReceipt.model_validate({**stored.receipt, "duplicate": True})

    def store_chunk(self, campaign_id: str, round_: int, batch_id: str,
                    chunk: BatchChunk) -> ChunkReceipt:
        """Accept a chunk into the decode queue (``state: "queued"``), or answer a repeat.

        Every refusal of the old synchronous intake happens here, in the same order and
        in one transaction: a repeat of a decoded or queued chunk returns its receipt
        (``duplicate``), other content under its identity is a ``conflict``; then the
        stream must belong to the round, the campaign be in the round, the batch be the
        pinned one (the first chunk pins it) and ``chunk_count`` be the stream's.  A
        missing private key is ``unavailable`` now rather than a chunk that can never
        be decoded.  Nothing is decrypted: that is the decode workers' job.
        """
        record = self.campaign(campaign_id)
        digest = chunk_digest(batch_id, chunk)
        stored = self.repository.chunk(campaign_id, round_, chunk.stream, chunk.chunk_index)
        if stored is not None:  # a retry of a decoded chunk needs no write transaction
            return self._duplicate(campaign_id, record.phase, round_, batch_id, chunk, digest,
                                   stored)
        if chunk.stream not in STREAMS_BY_ROUND[round_]:
            raise errors.InvalidRequestError(f"round {round_} has no {chunk.stream!r} stream")
        if record.phase == f"round{round_}":
            self._private_key(record)
        ciphertexts = tuple(b64url_decode(text) for text in chunk.ciphertexts)
        with self.repository.transaction() as tx:
            phase = tx.phase(campaign_id)
            existing: ChunkRecord | QueuedChunk | None = (
                tx.chunk(campaign_id, round_, chunk.stream, chunk.chunk_index)
                or tx.queued_chunk(campaign_id, round_, chunk.stream, chunk.chunk_index))
            if existing is not None:
                return self._duplicate(campaign_id, phase, round_, batch_id, chunk, digest,
                                       existing)
            self._require_round(campaign_id, phase, round_)
            pinned = tx.batch(campaign_id, round_)
            if pinned is None:
                tx.pin_batch(campaign_id, round_, batch_id)
            elif pinned.batch_id != batch_id:
                raise errors.ConflictError(f"round {round_} is receiving another batch")
            count = tx.stream_chunk_count(campaign_id, round_, chunk.stream)
            if count is not None and count != chunk.chunk_count:
                raise errors.ConflictError(f"stream {chunk.stream!r} has chunk_count {count}, "
                                           f"not {chunk.chunk_count}")
            tx.enqueue_chunk(campaign_id, round_, chunk.stream, chunk.chunk_index,
                             QueueEntry(batch_id=batch_id, chunk_count=chunk.chunk_count,
                                        digest=digest, ciphertexts=ciphertexts))
        return _queued_receipt(campaign_id, round_, batch_id, chunk.stream, chunk.chunk_index,
                               chunk.chunk_count, len(ciphertexts))

    def chunk_receipt(self, campaign_id: str, round_: int, batch_id: str, stream: str,
                      chunk_index: int) -> ChunkReceipt:
        """The receipt of one chunk of the batch: decoded, or queued; ``not-found`` if the
        batch holds no such chunk (never delivered, or dropped with its campaign)."""
        self.campaign(campaign_id)
        # The queue first: a chunk leaves it in the transaction that stores it, so one
        # that is in neither when read in this order was never delivered.
        queued = self.repository.queued_chunk(campaign_id, round_, stream, chunk_index)
        if queued is not None and queued.batch_id == batch_id:
            return _queued_receipt(campaign_id, round_, batch_id, stream, chunk_index,
                                   queued.chunk_count, queued.received)
        stored = self.repository.chunk(campaign_id, round_, stream, chunk_index)
        if stored is not None and stored.batch_id == batch_id:
            return ChunkReceipt.model_validate(stored.receipt)
        raise errors.NotFoundError(f"no chunk {chunk_index} of stream {stream!r} in batch "
                                   f"{batch_id!r} of round {round_}")

    # -- decoding (the decode workers, :mod:`.decoding`) ---------------------------------------

    def decode_messages(self, record: CampaignRecord, round_: int, stream: str,
                        ciphertexts: Sequence[bytes]
                        ) -> tuple[list[tuple[int, AcceptedMessage]], list[tuple[int, str]]]:
        """Decrypt the ciphertexts of one chunk (in the process pool when large) and
        classify them: the accepted messages and the (position, problem name) failures.
        The one place a chunk's messages are opened."""
        outcomes = self.decryptor.open(self._private_key(record), self._info(record, round_),
                                       ciphertexts)
        config = CampaignConfig.model_validate(record.config)
        return classify(outcomes, stream, len(config.levels), config.privacy_domain_size)

    def decode_claimed(self, claimed: ClaimedChunk) -> ChunkReceipt | None:
        """Decode a chunk this worker has claimed and count it (:meth:`finish_chunk`).

        Returns the receipt stored, or ``None`` when nothing was counted: another worker
        counted the chunk first, or its campaign left the round (the row is dropped).
        Raises ``unavailable`` when the private key cannot be read (the caller gives the
        claim back for a later attempt).
        """
        record = self.campaign(claimed.campaign_id)
        if record.phase != f"round{claimed.round}":
            return self.finish_chunk(claimed, [], [])  # counts nothing: drops the row
        accepted, failures = self.decode_messages(record, claimed.round, claimed.stream,
                                                  claimed.ciphertexts)
        return self.finish_chunk(claimed, accepted, failures)

    def finish_chunk(self, claimed: QueuedChunk,
                     accepted: Sequence[tuple[int, AcceptedMessage]],
                     failures: Sequence[tuple[int, str]]) -> ChunkReceipt | None:
        """Count a decoded chunk in one transaction and take it off the queue.

        The queue row is the ticket: the transaction first removes it, and counts only if
        it was there, the chunk is not stored, the campaign is still in the round and the
        batch is the pinned one.  A second finisher of the same chunk (a worker whose
        lease expired while another claimed and finished it) finds the row gone and
        changes nothing, so a chunk's nonces and counts are added exactly once.
        """
        cid, round_ = claimed.campaign_id, claimed.round
        with self.repository.transaction() as tx:
            if not tx.dequeue_chunk(cid, claimed.seq):
                return None
            if tx.chunk(cid, round_, claimed.stream, claimed.chunk_index) is not None:
                return None
            pinned = tx.batch(cid, round_)
            if (tx.phase(cid) != f"round{round_}" or pinned is None
                    or pinned.batch_id != claimed.batch_id):
                return None
            receipt = self._count(tx, claimed, accepted, failures)
            tx.put_chunk(cid, round_, claimed.stream, claimed.chunk_index,
                         ChunkRecord(batch_id=claimed.batch_id,
                                     chunk_count=claimed.chunk_count, digest=claimed.digest,
                                     receipt=receipt.model_dump(mode="json")))
        return receipt

    @staticmethod
    def _count(tx: ServerTransaction, chunk: QueuedChunk,
               accepted: Sequence[tuple[int, AcceptedMessage]],
               failures: Sequence[tuple[int, str]]) -> ChunkReceipt:
        """The replay policy: a message whose nonce this round has already accepted is a
        replay, listed in the receipt and not counted; every other accepted message adds
        one to its value's count (nulls under NULL_VALUE)."""
        campaign_id, round_ = chunk.campaign_id, chunk.round
        fresh = tx.insert_nonces(campaign_id, round_, [m.nonce for _, m in accepted])
        replays = [position for (position, _), new in zip(accepted, fresh, strict=True)
                   if not new]
        counts = Counter(NULL_VALUE if m.value is None else m.value
                         for (_, m), new in zip(accepted, fresh, strict=True) if new)
        tx.add_counts(campaign_id, round_, chunk.stream, counts)
        listed = sorted([*failures, *((i, "replay") for i in replays)])
        tally = Counter(name for _, name in listed)
        return ChunkReceipt(
            campaign_id=campaign_id, round=round_, batch_id=chunk.batch_id,
            stream=chunk.stream,  # type: ignore[arg-type]
            chunk_index=chunk.chunk_index, chunk_count=chunk.chunk_count,
            received=chunk.received, accepted=len(accepted) - len(replays),
            replays=len(replays),
            failures=[MessageFailure(stream=chunk.stream,  # type: ignore[arg-type]
                                     chunk_index=chunk.chunk_index, index=i,
                                     type=problem_uri(name))
                      for i, name in listed[:MAX_LISTED_FAILURES]],
            failures_omitted=max(0, len(listed) - MAX_LISTED_FAILURES),
            failure_counts={name: tally.get(name, 0) for name in FAILURE_NAMES},
            state="decoded",
        )

    # -- round completion --------------------------------------------------------------------

    def complete(self, campaign_id: str, round_: int, batch_id: str
                 ) -> BatchCompletion | CompletionPending:
        """Ask for a round to be finished once every chunk of every stream is stored.

        The stored completion when the round is finished (a repeated request returns it).
        Otherwise, once nothing of the round waits to be decoded (``unavailable`` with
        ``Retry-After`` until then, :meth:`_require_decoded`) and every chunk is there
        (``incomplete-batch``), the round's completion is recorded as a durable job and
        its state returned (:class:`CompletionPending`): the work (the optimizer, the
        decoding) runs once, in :mod:`.completion`'s workers, never in this request, and
        a repeated request only reads the job.
        """
        _, stored = self._open_or_completed(campaign_id, round_, batch_id)
        if stored is not None:
            return stored
        job = self.repository.completion_job(campaign_id, round_)
        if job is None:
            backlog = self.repository.decode_backlog(campaign_id, round_)
            self._require_decoded(campaign_id, round_, backlog.queued, backlog.failing)
            self._summaries(campaign_id, round_)  # every chunk is there, or refuse now
            job = self.repository.request_completion(campaign_id, round_, batch_id)
        if job is None:  # finished meanwhile by a worker
            _, stored = self._open_or_completed(campaign_id, round_, batch_id)
            if stored is not None:
                return stored
            raise errors.NotFoundError(f"no batch {batch_id!r} in round {round_}")
        return pending_answer(job)

    def _open_or_completed(self, campaign_id: str, round_: int, batch_id: str
                           ) -> tuple[CampaignRecord, BatchCompletion | None]:
        """The campaign and the round's stored completion (``None`` while the round is open,
        after checking the campaign is in that round); ``not-found`` unless ``batch_id`` is
        the round's pinned batch."""
        record = self.campaign(campaign_id)
        pinned = self.repository.batch(campaign_id, round_)
        if pinned is None or pinned.batch_id != batch_id:
            self._require_phase(campaign_id, record.phase, round_)
            raise errors.NotFoundError(f"no batch {batch_id!r} in round {round_}")
        if pinned.completion is not None:
            return record, BatchCompletion.model_validate(pinned.completion)
        self._require_phase(campaign_id, record.phase, round_)
        return record, None

    def compute_completion(self, job: CompletionJob) -> BatchCompletion:
        """Finish a claimed job's round (the work :meth:`complete` recorded): round 1's
        histogram, optimizer and publication, or round 2's decoding.

        The outcome is computed outside any transaction, then written in one transaction
        that checks the batch is still open and stores the completion, which ends the job;
        when another worker wrote first (a claim that outlived its lease), its stored
        answer is returned and nothing is written twice.  A campaign aborted meanwhile
        raises ``wrong-phase`` (its job is closed with it: nothing is left to compute).
        """
        campaign_id, round_, batch_id = job.campaign_id, job.round, job.batch_id
        record, stored = self._open_or_completed(campaign_id, round_, batch_id)
        if stored is not None:
            return stored
        backlog = self.repository.decode_backlog(campaign_id, round_)
        self._require_decoded(campaign_id, round_, backlog.queued, backlog.failing)
        summaries, failures, omitted = self._summaries(campaign_id, round_)
        config = CampaignConfig.model_validate(record.config)
        observed = histogram(self.repository.counts(campaign_id, round_, "levels"),
                             len(config.levels))
        completion: dict[str, Any] = {
            "campaign_id": campaign_id, "round": round_, "batch_id": batch_id,
            "streams": summaries, "failures": failures, "failures_omitted": omitted,
        }
        failure: str | None = None
        try:
            if round_ == 1:
                parameters, summary = self._round1_parameters(record, config, observed)
                parameters_hash = parameters.hash_hex()
                completion.update(phase="round2", parameters_hash=parameters_hash)
            else:
                results = self._round2_results(record, config, observed, summaries)
                completion.update(phase="done", parameters_hash=record.parameters_hash)
        except (errors.NotEnoughParticipantsError, errors.OptimizationFailedError) as exc:
            # The round cannot be finished, now or ever: close it as failed rather than
            # refuse and be asked again forever.
            failure = f"round {round_}: {exc.detail}"
            completion.update(phase="failed", end_reason=failure)
        with self.repository.transaction() as tx:
            stored = tx.batch(campaign_id, round_)
            if stored is not None and stored.completion is not None:
                return BatchCompletion.model_validate(stored.completion)
            self._require_phase(campaign_id, tx.phase(campaign_id), round_)
            # A chunk queued after the checks above (a shuffler that resent one) must be
            # counted before the round is: checked again under the campaign's lock.
            self._require_decoded(campaign_id, round_, tx.queued_count(campaign_id, round_))
            tx.complete_batch(campaign_id, round_, completion)
            if failure is not None:
                tx.end_campaign(campaign_id, "failed", failure)
                tx.drop_queue(campaign_id)
            elif round_ == 1:
                tx.publish_parameters(campaign_id, parameters.model_dump(mode="json"),
                                      parameters_hash, summary)
            else:
                tx.store_results(campaign_id, results)
            tx.delete_nonces(campaign_id, round_)  # they only served replay detection
        if failure is not None:
            log.warning("campaign %s failed: %s", campaign_id, failure)
        elif round_ == 1:
            log.info("campaign %s round 1 complete: n=%d n_min=%d h=%d (f=%g) m=%.6g (%s "
                     "blanket, %d messages per user), parameters published", campaign_id,
                     parameters.users, parameters.accounting_users, parameters.honest_users,
                     parameters.fake_tolerance, parameters.m, parameters.blanket_mode,
                     parameters.messages_per_user)
        else:
            log.info("campaign %s round 2 complete: n2=%d, %d data messages, %d dropped",
                     campaign_id, sum(observed), results["round2_messages"],
                     results["dropped_messages"])
        return BatchCompletion.model_validate(completion)

    def abort(self, campaign_id: str, reason: str) -> CampaignView:
        """End a campaign that is collecting (round 1 or 2) without results (idempotent).

        Every later chunk or completion of it is refused as ``wrong-phase``; the shuffler
        learns the phase from the view and forgets the campaign's open rounds.
        """
        with self.repository.transaction() as tx:
            phase = tx.phase(campaign_id)
            if phase is None:
                raise errors.UnknownCampaignError(f"no campaign {campaign_id!r}")
            if phase in ("round1", "round2"):
                tx.end_campaign(campaign_id, "aborted", reason)
                tx.drop_queue(campaign_id)  # never decoded: the campaign has no results
                for round_ in (1, 2):
                    tx.delete_nonces(campaign_id, round_)
            elif phase != "aborted":
                raise errors.WrongPhaseError(f"campaign {campaign_id!r} has ended ({phase})",
                                             extra={"phase": phase})
        if phase != "aborted":
            log.warning("campaign %s aborted: %s", campaign_id, reason)
        return self.view(self.campaign(campaign_id))

    @staticmethod
    def _require_phase(campaign_id: str, phase: str | None, round_: int) -> None:
        if phase != f"round{round_}":
            raise errors.WrongPhaseError(f"campaign {campaign_id!r} is in phase {phase}",
                                         extra={"phase": phase})

    @staticmethod
    def _require_round(campaign_id: str, phase: str | None, round_: int) -> None:
        """Chunks of round ``round_`` are accepted only in phase ``round<round_>``."""
        if phase != f"round{round_}":
            raise errors.WrongPhaseError(f"campaign {campaign_id!r} is in phase {phase}, "
                                         f"not accepting round-{round_} batches",
                                         extra={"phase": phase})

    @staticmethod
    def _require_decoded(campaign_id: str, round_: int, queued: int, failing: int = 0
                         ) -> None:
        """Refuse, for now, to finish a round while ``queued`` of its chunks wait to be
        decoded: ``unavailable`` (503, retried by the shuffler) with ``Retry-After``,
        ``queued_chunks`` and ``failing_chunks``, how many of those failed to decode at
        least once (the shuffler sent those chunks: it learns nothing new, and its
        operator sees why the round does not end; the reason is in the server's log)."""
        if queued:
            failing_note = (f"; {failing} of them failed to decode and are being retried "
                            "(the server's log says why)" if failing else "")
            raise errors.UnavailableError(
                f"{queued} chunk(s) of round {round_} of campaign {campaign_id!r} are still "
                f"being decoded{failing_note}; complete the batch again later",
                extra={"queued_chunks": queued, "failing_chunks": failing},
                headers={"Retry-After": str(FAILING_RETRY_AFTER if failing
                                            else DECODING_RETRY_AFTER)})

    def _summaries(self, campaign_id: str, round_: int
                   ) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
        summaries: dict[str, Any] = {}
        failures: list[dict[str, Any]] = []
        omitted = 0
        for stream in STREAMS_BY_ROUND[round_]:
            chunks = self.repository.stream_chunks(campaign_id, round_, stream)
            expected = chunks[0].chunk_count if chunks else None
            present = [stored.chunk_index for stored in chunks]
            if expected is None or present != list(range(expected)):
                missing = ([] if expected is None else
                           sorted(set(range(expected)) - set(present))[:100])
                raise errors.IncompleteBatchError(
                    f"stream {stream!r} is incomplete"
                    + ("" if expected is None else f": {len(present)} of {expected}"
                       " chunks"),
                    extra={"stream": stream, "missing_chunks": missing})
            receipts = [stored.receipt for stored in chunks]
            tally = Counter[str]()
            for receipt in receipts:
                tally.update(receipt.get("failure_counts", {}))
                room = MAX_LISTED_FAILURES - len(failures)
                failures.extend(receipt["failures"][:max(room, 0)])
                omitted += max(len(receipt["failures"]) - max(room, 0), 0)
                omitted += receipt.get("failures_omitted", 0)
            summaries[stream] = StreamSummary(
                chunks=len(receipts),
                received=sum(r["received"] for r in receipts),
                accepted=sum(r["accepted"] for r in receipts),
                replays=sum(r["replays"] for r in receipts),
                decrypt_failures=tally["decrypt-failed"],
                invalid_messages=tally["invalid-message"],
                out_of_domain=tally["out-of-domain"],
            ).model_dump(mode="json")
        return summaries, failures, omitted

    @staticmethod
    def _round1_parameters(record: CampaignRecord, config: CampaignConfig,
                           observed: list[int]) -> tuple[PublishedParameters, dict[str, Any]]:
        """The round-2 parameters from the round-1 level histogram (the optimizer)."""
        participants = sum(observed)
        if participants < config.min_users:
            raise errors.NotEnoughParticipantsError(
                f"round 1 has {participants} valid level messages, the campaign "
                f"needs at least {config.min_users}",
                extra={"participants": participants, "required": config.min_users})
        try:
            return publish_parameters(config, record.config_hash, record.key_id, observed)
        except ValueError as exc:
            raise errors.OptimizationFailedError(str(exc)) from None

    def _round2_results(self, record: CampaignRecord, config: CampaignConfig,
                        observed: list[int], summaries: dict[str, Any]) -> dict[str, Any]:
        """The decoded estimates of round 2 and what the round received."""
        assert record.parameters is not None and record.round1 is not None
        parameters = PublishedParameters.model_validate(record.parameters)
        participants = sum(observed)
        if participants < parameters.accounting_users:
            raise errors.NotEnoughParticipantsError(
                f"round 2 has {participants} valid level messages; privacy was "
                f"accounted for at least {parameters.accounting_users}",
                extra={"participants": participants,
                       "required": parameters.accounting_users})
        data_counts = self.repository.counts(record.id, 2, "data")
        items = histogram(data_counts, config.privacy_domain_size)
        results = decode_results(config, parameters, record.round1, observed, items)
        data = summaries["data"]
        results.update(
            round2_messages=data["received"],
            null_messages=data_counts.get(NULL_VALUE, 0),
            dropped_messages=data["received"] - data["accepted"],
            parameters_hash=record.parameters_hash,
        )
        Results.model_validate(results)
        return results


def pending_answer(job: CompletionJob) -> CompletionPending:
    """The ``202`` answer that says where a round's completion job stands."""
    return CompletionPending(
        campaign_id=job.campaign_id, round=job.round, batch_id=job.batch_id,
        state=job.state,  # type: ignore[arg-type]
        waiting_seconds=round(job.age, 3),
        computing_seconds=None if job.running is None else round(job.running, 3),
        attempts=job.attempts, last_error=job.last_error)


def _queued_receipt(campaign_id: str, round_: int, batch_id: str, stream: str,
                    chunk_index: int, chunk_count: int, received: int, *,
                    duplicate: bool = False) -> ChunkReceipt:
    """The receipt of a chunk waiting to be decoded: its identity and size only (what is
    accepted or dropped is known once it is decoded)."""
    return ChunkReceipt(
        campaign_id=campaign_id, round=round_, batch_id=batch_id,
        stream=stream,  # type: ignore[arg-type]
        chunk_index=chunk_index, chunk_count=chunk_count, received=received, accepted=0,
        replays=0, failures=[], failure_counts={}, duplicate=duplicate, state="queued")


def classify(outcomes: Sequence[Outcome], stream: str, level_count: int, domain_size: int
             ) -> tuple[list[tuple[int, AcceptedMessage]], list[tuple[int, str]]]:
    """Split decrypted outcomes into accepted messages and (position, problem name) failures.

    The levels stream takes only level messages with index < K; the data stream takes
    null messages and item messages with id < D (padding included).
    """
    accepted: list[tuple[int, AcceptedMessage]] = []
    failures: list[tuple[int, str]] = []
    for position, outcome in enumerate(outcomes):
        if isinstance(outcome, str):
            failures.append((position, outcome))
            continue
        kind, value, nonce = outcome
        if stream == "levels":
            if kind != Kind.LEVEL:
                failures.append((position, "invalid-message"))
            elif value >= level_count:
                failures.append((position, "out-of-domain"))
            else:
                accepted.append((position, AcceptedMessage(value, nonce)))
        elif kind == Kind.NULL:
            accepted.append((position, AcceptedMessage(None, nonce)))
        elif kind != Kind.ITEM:
            failures.append((position, "invalid-message"))
        elif value >= domain_size:
            failures.append((position, "out-of-domain"))
        else:
            accepted.append((position, AcceptedMessage(value, nonce)))
    return accepted, failures

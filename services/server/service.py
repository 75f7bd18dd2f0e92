"""The server's operations, independent of HTTP: each raises a domain error
(:mod:`segshuffle.services.errors`) on refusal.

Calls are synchronous (the HTTP layer runs them in its thread pool).  A
per-campaign lock serialises the writes of one campaign (chunk storage, round
completion), so a round is never finished while a chunk of it is being stored;
one server process per database is assumed.

Batch intake (docs/architecture.md, "Server"):

- The first chunk of a round pins its batch id; every stream's ``chunk_count`` is
  fixed by its first chunk.
- A chunk is identified by (round, stream, chunk_index) and fingerprinted by a
  SHA-256 digest of its content: the same chunk again returns the stored receipt
  (``duplicate: true``), a different content under the same identity is a conflict.
- Messages are decrypted as the chunk arrives.  Bad messages are dropped and
  listed in the receipt with their problem type (``decrypt-failed``,
  ``invalid-message``, ``out-of-domain``, ``replay``), never failing the chunk: one
  user's garbage must not block a round.
- ``complete`` checks every chunk of every stream is there, then finishes the
  round (round 1: histogram, optimizer, publication; round 2: decoding) in one
  transaction.  Repeating it returns the stored answer.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from segshuffle.crypto import build_info, key_config, private_key_bytes, public_key_from_bytes
from segshuffle.services import errors
from segshuffle.wire.models import (
    BatchChunk,
    BatchCompletion,
    CampaignConfig,
    CampaignCreate,
    CampaignView,
    ChunkReceipt,
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
    ConflictError,
    ServerStorage,
)

log = logging.getLogger("segshuffle.server")

MAX_LISTED_FAILURES = 1000
"""Failures listed per receipt; beyond that only counted."""
STREAMS_BY_ROUND: dict[int, tuple[str, ...]] = {1: ("levels",), 2: ("levels", "data")}
FAILURE_NAMES = ("decrypt-failed", "invalid-message", "out-of-domain", "replay")


def chunk_digest(batch_id: str, chunk: BatchChunk) -> bytes:
    """SHA-256 over the chunk's identity, count and ciphertexts (idempotency fingerprint)."""
    digest = hashlib.sha256()
    digest.update(f"{batch_id}\x00{chunk.stream}\x00{chunk.chunk_index}\x00"
                  f"{chunk.chunk_count}\x00".encode())
    for text in chunk.ciphertexts:
        digest.update(text.encode("ascii"))
        digest.update(b"\x00")
    return digest.digest()


class ServerService:
    """Campaigns, batch intake, round completion and results."""

    def __init__(self, repository: ServerStorage, keys: KeyStore, decryptor: Decryptor, *,
                 allow_insecure_parameters: bool = False) -> None:
        self.repository = repository
        self.keys = keys
        self.decryptor = decryptor
        self.allow_insecure_parameters = allow_insecure_parameters
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._views: dict[str, tuple[str, bytes]] = {}

    def _lock(self, campaign_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(campaign_id, threading.Lock())

    # -- campaigns ---------------------------------------------------------------------------

    def create_campaign(self, request: CampaignCreate) -> CampaignView:
        if request.insecure_parameters is not None and not self.allow_insecure_parameters:
            raise errors.InsecureRefusedError(
                "insecure_parameters needs a server started with the insecure flag")
        config = request.to_config()
        with self._lock(config.id):
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

    def campaign(self, campaign_id: str) -> CampaignRecord:
        record = self.repository.campaign(campaign_id)
        if record is None:
            raise errors.UnknownCampaignError(f"no campaign {campaign_id!r}")
        return record

    @staticmethod
    def hpke_config(record: CampaignRecord) -> HpkeConfig:
        return key_config(public_key_from_bytes(record.public_key))

    def view(self, record: CampaignRecord) -> CampaignView:
        return CampaignView(
            id=record.id,
            phase=record.phase,  # type: ignore[arg-type]
            config=CampaignConfig.model_validate(record.config),
            config_hash=record.config_hash,
            key_id=record.key_id,
            hpke_config=self.hpke_config(record),
            parameters=(PublishedParameters.model_validate(record.parameters)
                        if record.parameters is not None else None),
            parameters_hash=record.parameters_hash,
        )

    def _view_entry(self, campaign_id: str) -> tuple[str, bytes]:
        """(phase, serialized public view), cached per phase (the only part that ever
        changes; configuration, key and published parameters are immutable)."""
        phase = self.repository.phase(campaign_id)
        if phase is None:
            raise errors.UnknownCampaignError(f"no campaign {campaign_id!r}")
        cached = self._views.get(campaign_id)
        if cached is not None and cached[0] == phase:
            return cached
        record = self.campaign(campaign_id)
        entry = (record.phase, self.view(record).model_dump_json().encode())
        self._views[campaign_id] = entry
        return entry

    def view_json(self, campaign_id: str) -> bytes:
        """The serialized public view (see :meth:`_view_entry`)."""
        return self._view_entry(campaign_id)[1]

    def view_document(self, campaign_id: str) -> tuple[bytes, bool]:
        """The serialized view and whether it is final (phase ``done``: immutable)."""
        phase, body = self._view_entry(campaign_id)
        return body, phase == "done"

    def results(self, campaign_id: str) -> Results:
        record = self.campaign(campaign_id)
        if record.phase != "done" or record.results is None:
            raise errors.WrongPhaseError(f"campaign {campaign_id!r} is in phase {record.phase}; "
                                         "results exist once round 2 is complete",
                                         extra={"phase": record.phase})
        return Results.model_validate(record.results)

    # -- batch intake ------------------------------------------------------------------------

    def _info(self, record: CampaignRecord, round_: int) -> bytes:
        context = record.config_hash if round_ == 1 else record.parameters_hash
        assert context is not None
        return build_info(record.id, round_, record.key_id, bytes.fromhex(context))

    def _check_chunk(self, record: CampaignRecord, round_: int, batch_id: str,
                     chunk: BatchChunk) -> None:
        """Refusals that do not depend on the messages (checked before and after decrypting)."""
        if chunk.stream not in STREAMS_BY_ROUND[round_]:
            raise errors.InvalidRequestError(f"round {round_} has no {chunk.stream!r} stream")
        if record.phase != f"round{round_}":
            raise errors.WrongPhaseError(f"campaign {record.id!r} is in phase {record.phase}, "
                                         f"not accepting round-{round_} batches",
                                         extra={"phase": record.phase})
        pinned = self.repository.batch(record.id, round_)
        if pinned is not None and pinned.batch_id != batch_id:
            raise errors.ConflictError(f"round {round_} is receiving another batch")
        existing = self.repository.stream_chunks(record.id, round_, chunk.stream)
        if existing and existing[0].chunk_count != chunk.chunk_count:
            raise errors.ConflictError(f"stream {chunk.stream!r} has chunk_count "
                                       f"{existing[0].chunk_count}, not {chunk.chunk_count}")

    def _stored_receipt(self, record: CampaignRecord, round_: int, batch_id: str,
                        chunk: BatchChunk, digest: bytes) -> ChunkReceipt | None:
        stored = self.repository.chunk(record.id, round_, chunk.stream, chunk.chunk_index)
        if stored is None:
            return None
        if stored.batch_id != batch_id or stored.digest != digest:
            if record.phase != f"round{round_}":
                raise errors.WrongPhaseError(
                    f"campaign {record.id!r} is in phase {record.phase}, "
                    f"not accepting round-{round_} batches", extra={"phase": record.phase})
            raise errors.ConflictError(f"chunk {chunk.chunk_index} of stream {chunk.stream!r} "
                                       "was already delivered with different content")
        return ChunkReceipt.model_validate({**stored.receipt, "duplicate": True})

    def store_chunk(self, campaign_id: str, round_: int, batch_id: str,
                    chunk: BatchChunk) -> ChunkReceipt:
        record = self.campaign(campaign_id)
        digest = chunk_digest(batch_id, chunk)
        stored = self._stored_receipt(record, round_, batch_id, chunk, digest)
        if stored is not None:
            return stored
        self._check_chunk(record, round_, batch_id, chunk)
        ciphertexts = [b64url_decode(text) for text in chunk.ciphertexts]
        try:
            private_key = private_key_bytes(self.keys.get(record.id))
        except (OSError, ValueError):
            raise errors.UnavailableError("the campaign's private key is not available") from None
        outcomes = self.decryptor.open(private_key, self._info(record, round_), ciphertexts)
        config = CampaignConfig.model_validate(record.config)
        accepted, failures = classify(outcomes, chunk.stream, len(config.levels),
                                      config.privacy_domain_size)
        with self._lock(campaign_id):
            record = self.campaign(campaign_id)
            stored = self._stored_receipt(record, round_, batch_id, chunk, digest)
            if stored is not None:
                return stored
            self._check_chunk(record, round_, batch_id, chunk)

            def make_receipt(replays: list[int], kept: int) -> dict[str, Any]:
                listed = sorted(failures + [(i, "replay") for i in replays])
                counts = Counter(name for _, name in listed)
                return ChunkReceipt(
                    campaign_id=campaign_id, round=round_, batch_id=batch_id,
                    stream=chunk.stream, chunk_index=chunk.chunk_index,
                    chunk_count=chunk.chunk_count, received=len(ciphertexts), accepted=kept,
                    replays=len(replays),
                    failures=[MessageFailure(stream=chunk.stream, chunk_index=chunk.chunk_index,
                                             index=i, type=problem_uri(name))
                              for i, name in listed[:MAX_LISTED_FAILURES]],
                    failures_omitted=max(0, len(listed) - MAX_LISTED_FAILURES),
                    failure_counts={name: counts.get(name, 0) for name in FAILURE_NAMES},
                ).model_dump(mode="json")

            try:
                receipt = self.repository.store_chunk(
                    campaign_id, round_, batch_id, chunk.stream, chunk.chunk_index,
                    chunk.chunk_count, digest, accepted, make_receipt)
            except ConflictError as exc:
                raise errors.ConflictError(str(exc)) from None
        return ChunkReceipt.model_validate(receipt)

    # -- round completion --------------------------------------------------------------------

    def complete(self, campaign_id: str, round_: int, batch_id: str) -> BatchCompletion:
        with self._lock(campaign_id):
            record = self.campaign(campaign_id)
            pinned = self.repository.batch(campaign_id, round_)
            if pinned is None or pinned.batch_id != batch_id:
                if record.phase != f"round{round_}":
                    raise errors.WrongPhaseError(f"campaign {campaign_id!r} is in phase "
                                                 f"{record.phase}", extra={"phase": record.phase})
                raise errors.NotFoundError(f"no batch {batch_id!r} in round {round_}")
            if pinned.completion is not None:
                return BatchCompletion.model_validate(pinned.completion)
            if record.phase != f"round{round_}":
                raise errors.WrongPhaseError(f"campaign {campaign_id!r} is in phase "
                                             f"{record.phase}", extra={"phase": record.phase})
            summaries, failures, omitted = self._summaries(campaign_id, round_)
            config = CampaignConfig.model_validate(record.config)
            observed = histogram(self.repository.counts(campaign_id, round_, "levels"),
                                 len(config.levels))
            participants = sum(observed)
            completion: dict[str, Any] = {
                "campaign_id": campaign_id, "round": round_, "batch_id": batch_id,
                "streams": summaries, "failures": failures, "failures_omitted": omitted,
            }
            try:
                if round_ == 1:
                    self._finish_round1(record, config, batch_id, observed, participants,
                                        completion)
                else:
                    self._finish_round2(record, config, batch_id, observed, participants,
                                        completion, summaries)
            except ConflictError as exc:
                raise errors.ConflictError(str(exc)) from None
            return BatchCompletion.model_validate(completion)

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

    def _finish_round1(self, record: CampaignRecord, config: CampaignConfig, batch_id: str,
                       observed: list[int], participants: int,
                       completion: dict[str, Any]) -> None:
        if participants < config.min_users:
            raise errors.NotEnoughParticipantsError(
                f"round 1 has {participants} valid level messages, the campaign "
                f"needs at least {config.min_users}",
                extra={"participants": participants, "required": config.min_users})
        try:
            parameters, summary = publish_parameters(config, record.config_hash,
                                                     record.key_id, observed)
        except ValueError as exc:
            raise errors.OptimizationFailedError(str(exc)) from None
        parameters_hash = parameters.hash_hex()
        completion.update(phase="round2", parameters_hash=parameters_hash)
        self.repository.finish_round1(record.id, batch_id, completion,
                                      parameters.model_dump(mode="json"), parameters_hash,
                                      summary)
        log.info("campaign %s round 1 complete: n=%d n_min=%d m=%.6g (%s blanket, %d "
                 "messages per user), parameters published", record.id, parameters.users,
                 parameters.accounting_users, parameters.m, parameters.blanket_mode,
                 parameters.messages_per_user)

    def _finish_round2(self, record: CampaignRecord, config: CampaignConfig, batch_id: str,
                       observed: list[int], participants: int, completion: dict[str, Any],
                       summaries: dict[str, Any]) -> None:
        assert record.parameters is not None and record.round1 is not None
        parameters = PublishedParameters.model_validate(record.parameters)
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
        completion.update(phase="done", parameters_hash=record.parameters_hash)
        self.repository.finish_round2(record.id, batch_id, completion, results)
        log.info("campaign %s round 2 complete: n2=%d, %d data messages, %d dropped",
                 record.id, participants, data["received"], results["dropped_messages"])


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

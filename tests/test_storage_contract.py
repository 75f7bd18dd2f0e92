"""Contract of the storage Protocols, run against every available backend.

Each test uses a storage only through the methods of its Protocol
(:class:`~segshuffle.services.server.storage_api.ServerStorage`,
:class:`~segshuffle.services.shuffler.storage_api.ShufflerStorage`), never SQL, so
that another backend passes by being added to ``SERVER_BACKENDS`` and
``SHUFFLER_BACKENDS`` (a factory from a temporary directory to a fresh, empty
storage; a backend on a database server is added to ``SERVER_URL_BACKENDS`` and
``SHUFFLER_URL_BACKENDS`` instead, a factory from the URL of a fresh database, and is
skipped when no server is configured, except under CI, where that fails).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from segshuffle.services import errors
from segshuffle.services.server.service import ServerService
from segshuffle.services.server.storage import Repository
from segshuffle.services.server.storage_api import (
    NULL_VALUE,
    AcceptedMessage,
    BatchRecord,
    ChunkRecord,
    ConflictError,
    DecodeBacklog,
    QueueEntry,
    ServerStorage,
    StoredChunk,
)
from segshuffle.services.shuffler.storage import Storage
from segshuffle.services.shuffler.storage_api import (
    RELEASED,
    RELEASING,
    AlreadySubmittedError,
    InvitationUsedError,
    NotEnoughParticipantsError,
    RoundClosedError,
    ShufflerStorage,
    StoredMessage,
    UnknownTokenError,
)

from .postgres_support import fresh_database

T = TypeVar("T")

def _postgres_server(url: str) -> ServerStorage:
    from segshuffle.services.server.storage_postgres import PostgresRepository

    return PostgresRepository(url, pool_size=4)


def _postgres_shuffler(url: str) -> ShufflerStorage:
    from segshuffle.services.shuffler.storage_postgres import PostgresStorage

    return PostgresStorage(url, pool_size=4)


SERVER_BACKENDS: dict[str, Callable[[Path], ServerStorage]] = {
    "sqlite": lambda directory: Repository(directory / "server.sqlite3"),
}
SHUFFLER_BACKENDS: dict[str, Callable[[Path], ShufflerStorage]] = {
    "sqlite": lambda directory: Storage(directory / "shuffler.sqlite3"),
}
# Backends on a database server: a factory from the URL of a fresh, empty database
# (tests/postgres_support.py; skipped without a server, failed under CI).
SERVER_URL_BACKENDS: dict[str, Callable[[str], ServerStorage]] = {
    "postgresql": _postgres_server,
}
SHUFFLER_URL_BACKENDS: dict[str, Callable[[str], ShufflerStorage]] = {
    "postgresql": _postgres_shuffler,
}


@contextmanager
def _open(name: str, directory: Path, local: dict[str, Callable[[Path], T]],
          remote: dict[str, Callable[[str], T]]) -> Iterator[T]:
    if name in local:
        storage = local[name](directory)
        try:
            yield storage
        finally:
            storage.close()  # type: ignore[attr-defined]
        return
    with fresh_database() as url:
        storage = remote[name](url)
        try:
            yield storage
        finally:
            storage.close()  # type: ignore[attr-defined]


@pytest.fixture(params=sorted({*SERVER_BACKENDS, *SERVER_URL_BACKENDS}))
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerStorage]:
    with _open(request.param, tmp_path, SERVER_BACKENDS, SERVER_URL_BACKENDS) as storage:
        yield storage


@pytest.fixture(params=sorted({*SHUFFLER_BACKENDS, *SHUFFLER_URL_BACKENDS}))
def shuffler(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ShufflerStorage]:
    with _open(request.param, tmp_path, SHUFFLER_BACKENDS, SHUFFLER_URL_BACKENDS) as storage:
        yield storage


# -- server ----------------------------------------------------------------------------------

def _create(server: ServerStorage, campaign_id: str = "c1") -> None:
    server.create_campaign(campaign_id, {"id": campaign_id, "n": 1}, "hash-" + campaign_id,
                           "key-1", b"public")


def _chunk(batch: str = "b1", count: int = 2, tag: str = "x") -> ChunkRecord:
    return ChunkRecord(batch_id=batch, chunk_count=count, digest=f"digest-{tag}".encode(),
                       receipt={"tag": tag})


def test_server_campaigns(server: ServerStorage) -> None:
    assert server.ping()
    assert server.campaign("c1") is None and server.phase("c1") is None
    created = server.create_campaign("c1", {"id": "c1", "n": 1}, "h", "k", b"pk")
    assert created == server.campaign("c1")
    assert (created.config, created.config_hash, created.key_id, created.public_key,
            created.phase) == ({"id": "c1", "n": 1}, "h", "k", b"pk", "round1")
    assert created.parameters is None and created.results is None and created.round1 is None
    assert server.phase("c1") == "round1"
    with pytest.raises(ConflictError):
        server.create_campaign("c1", {"id": "c1"}, "h2", "k2", b"pk2")
    _create(server, "a0")
    assert server.campaign_ids() == ["a0", "c1"]
    assert server.campaign_phases(None, 1) == [("a0", "round1")]
    assert server.campaign_phases("a0", 5) == [("c1", "round1")]


def test_server_transaction_pins_batches_nonces_counts_and_chunks(
        server: ServerStorage) -> None:
    _create(server)
    assert server.batch("c1", 1) is None
    with server.transaction() as tx:
        assert tx.phase("c1") == "round1" and tx.phase("nope") is None
        assert tx.batch("c1", 1) is None
        tx.pin_batch("c1", 1, "b1")
        assert tx.batch("c1", 1) == BatchRecord("b1", None)
        assert tx.insert_nonces("c1", 1, [b"n1", b"n2", b"n1"]) == [True, True, False]
        assert tx.insert_nonces("c1", 1, [b"n2", b"n3"]) == [False, True]
        assert tx.insert_nonces("c1", 2, [b"n1"]) == [True]  # rounds are separate
        tx.add_counts("c1", 1, "levels", {0: 2, NULL_VALUE: 1})
        tx.add_counts("c1", 1, "levels", {0: 1, 3: 4})
        assert tx.chunk("c1", 1, "levels", 0) is None
        tx.put_chunk("c1", 1, "levels", 0, _chunk())
        assert tx.chunk("c1", 1, "levels", 0) == _chunk()
    assert server.batch("c1", 1) == BatchRecord("b1", None)
    assert server.counts("c1", 1, "levels") == {0: 3, 3: 4, NULL_VALUE: 1}
    assert server.counts("c1", 1, "data") == {}
    assert server.chunk("c1", 1, "levels", 0) == _chunk()
    assert server.chunk("c1", 1, "levels", 1) is None
    with server.transaction() as tx:
        tx.put_chunk("c1", 1, "levels", 1, _chunk(tag="y"))
    assert server.stream_chunks("c1", 1, "levels") == [
        StoredChunk(0, 2, {"tag": "x"}), StoredChunk(1, 2, {"tag": "y"})]
    assert server.stream_chunks("c1", 1, "data") == []


def test_server_transaction_rolls_back_on_error(server: ServerStorage) -> None:
    _create(server)
    with pytest.raises(RuntimeError), server.transaction() as tx:
        tx.pin_batch("c1", 1, "b1")
        tx.insert_nonces("c1", 1, [b"n1"])
        tx.add_counts("c1", 1, "levels", {0: 1})
        raise RuntimeError("abandon")
    assert server.batch("c1", 1) is None and server.counts("c1", 1, "levels") == {}
    with server.transaction() as tx:
        assert tx.insert_nonces("c1", 1, [b"n1"]) == [True]


def test_server_round_completion(server: ServerStorage) -> None:
    _create(server)
    with server.transaction() as tx:
        tx.pin_batch("c1", 1, "b1")
        tx.insert_nonces("c1", 1, [b"n1"])
    with server.transaction() as tx:
        tx.complete_batch("c1", 1, {"done": 1})
        tx.publish_parameters("c1", {"p": 1}, "ph", {"r": 1})
        tx.delete_nonces("c1", 1)
    record = server.campaign("c1")
    assert record is not None
    assert (record.phase, record.parameters, record.parameters_hash, record.round1) == (
        "round2", {"p": 1}, "ph", {"r": 1})
    assert server.phase("c1") == "round2"
    assert server.batch("c1", 1) == BatchRecord("b1", {"done": 1})
    with server.transaction() as tx:
        assert tx.insert_nonces("c1", 1, [b"n1"]) == [True]  # the round's nonces are gone
        tx.pin_batch("c1", 2, "b2")
        tx.complete_batch("c1", 2, {"done": 2})
        tx.store_results("c1", {"estimate": [1]})
    record = server.campaign("c1")
    assert record is not None and (record.phase, record.results) == ("done", {"estimate": [1]})
    assert server.batch("c1", 2) == BatchRecord("b2", {"done": 2})


# -- server: the decode queue ----------------------------------------------------------------

def _entry(batch: str = "b1", count: int = 3, tag: str = "x", size: int = 2) -> QueueEntry:
    """A queue entry of ``size`` distinct 80-byte ciphertexts (one of them shorter)."""
    texts = tuple(f"{tag}-{i}".encode().ljust(80, b"\x00") for i in range(size))
    return QueueEntry(batch_id=batch, chunk_count=count, digest=f"digest-{tag}".encode(),
                      ciphertexts=(*texts[:-1], texts[-1][:7]) if texts else ())


def _queue(server: ServerStorage, indices: range, stream: str = "levels",
           campaign: str = "c1") -> None:
    """Queue chunks ``indices`` of ``stream`` in round 1 of ``campaign`` (pinned to b1)."""
    with server.transaction() as tx:
        if tx.batch(campaign, 1) is None:
            tx.pin_batch(campaign, 1, "b1")
        for index in indices:
            tx.enqueue_chunk(campaign, 1, stream, index, _entry(tag=f"{stream}{index}"))


def _finisher(server: ServerStorage) -> ServerService:
    """The service on ``server`` without keys or decryption: its counting step
    (``finish_chunk``) and its completion checks use the storage Protocol only."""
    return ServerService(server, None, None,  # type: ignore[arg-type]
                         signing_key=Ed25519PrivateKey.generate())


def test_server_queue_enqueue_and_read(server: ServerStorage) -> None:
    _create(server)
    assert server.decode_backlog("c1", 1).queued == 0
    assert server.queued_chunk("c1", 1, "levels", 0) is None
    with server.transaction() as tx:
        assert tx.stream_chunk_count("c1", 1, "levels") is None
        tx.pin_batch("c1", 1, "b1")
        tx.enqueue_chunk("c1", 1, "levels", 0, _entry())
        assert tx.stream_chunk_count("c1", 1, "levels") == 3  # from the queue
        assert tx.queued_count("c1", 1) == 1
    queued = server.queued_chunk("c1", 1, "levels", 0)
    assert queued is not None
    assert (queued.campaign_id, queued.round, queued.stream, queued.chunk_index,
            queued.batch_id, queued.chunk_count, queued.digest, queued.received,
            queued.owner, queued.attempts) == ("c1", 1, "levels", 0, "b1", 3, b"digest-x", 2,
                                               None, 0)
    assert server.decode_backlog("c1", 1) == DecodeBacklog(queued=1, failing=0)
    assert server.decode_backlog("c1", 2) == DecodeBacklog(queued=0, failing=0)
    with pytest.raises(ConflictError), server.transaction() as tx:  # queued already
        tx.enqueue_chunk("c1", 1, "levels", 0, _entry(tag="other"))
    assert server.queued_chunk("c1", 1, "levels", 0) == queued
    with server.transaction() as tx:
        tx.put_chunk("c1", 1, "data", 0, _chunk(count=5))
        assert tx.stream_chunk_count("c1", 1, "data") == 5  # from the stored chunks


def test_server_queue_claims_are_exclusive_while_the_lease_holds(server: ServerStorage
                                                                   ) -> None:
    _create(server)
    _queue(server, range(3))
    first = server.claim_chunk("worker-a", 60.0)
    second = server.claim_chunk("worker-b", 60.0)
    third = server.claim_chunk("worker-a", 60.0)
    assert first is not None and second is not None and third is not None
    assert [c.chunk_index for c in (first, second, third)] == [0, 1, 2]  # oldest first
    assert (first.owner, first.attempts, second.owner) == ("worker-a", 1, "worker-b")
    assert first.ciphertexts == _entry(tag="levels0").ciphertexts
    assert server.claim_chunk("worker-c", 60.0) is None  # every lease holds
    assert not server.renew_claim(first.seq, "worker-b", 60.0)  # not b's claim
    assert not server.release_claim(first.seq, "worker-b")
    assert server.renew_claim(first.seq, "worker-a", 60.0)
    assert server.release_claim(first.seq, "worker-a")
    again = server.claim_chunk("worker-c", 60.0)
    assert again is not None and (again.seq, again.owner, again.attempts) == (
        first.seq, "worker-c", 2)
    assert server.decode_backlog("c1", 1).queued == 3


def test_server_queue_concurrent_claimers_never_share_a_row(server: ServerStorage) -> None:
    _create(server)
    _queue(server, range(24))
    barrier = threading.Barrier(4, timeout=30)

    def claim_all(name: str) -> list[int]:
        barrier.wait()
        taken = []
        while (claimed := server.claim_chunk(name, 60.0)) is not None:
            taken.append(claimed.seq)
        return taken

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(claim_all, ["w1", "w2", "w3", "w4"]))
    taken = [seq for result in results for seq in result]
    assert len(taken) == len(set(taken)) == 24


def test_server_queue_an_expired_lease_is_claimed_again(server: ServerStorage) -> None:
    _create(server)
    _queue(server, range(1))
    dead = server.claim_chunk("dead-worker", 0.25)
    assert dead is not None
    assert server.claim_chunk("live-worker", 60.0) is None  # the lease holds
    time.sleep(0.4)
    taken = server.claim_chunk("live-worker", 60.0)
    assert taken is not None and (taken.seq, taken.attempts) == (dead.seq, 2)
    assert not server.renew_claim(dead.seq, "dead-worker", 60.0)  # it lost the claim
    assert server.release_claim(taken.seq, "live-worker", delay_seconds=0.3)
    assert server.claim_chunk("live-worker", 60.0) is None  # not before the delay
    time.sleep(0.45)
    assert server.claim_chunk("live-worker", 60.0) is not None


def test_server_queue_counts_failed_attempts_apart_from_other_claims(
        server: ServerStorage) -> None:
    """A claim given back as failed counts in ``failures`` and in the round's ``failing``
    backlog; one given back otherwise (a stopped worker) or left to expire does not."""
    _create(server)
    _queue(server, range(2))
    first = server.claim_chunk("w", 60.0)
    assert first is not None and first.failures == 0
    assert server.release_claim(first.seq, "w")  # given back, not failed
    assert server.decode_backlog("c1", 1) == DecodeBacklog(queued=2, failing=0)
    again = server.claim_chunk("w", 60.0)
    assert again is not None and (again.seq, again.attempts, again.failures) == (
        first.seq, 2, 0)
    assert server.release_claim(again.seq, "w", failed=True)
    assert not server.release_claim(again.seq, "w", failed=True)  # no longer w's claim
    queued = server.queued_chunk("c1", 1, "levels", 0)
    assert queued is not None and (queued.attempts, queued.failures) == (2, 1)
    assert server.decode_backlog("c1", 1) == DecodeBacklog(queued=2, failing=1)
    third = server.claim_chunk("w", 60.0)
    assert third is not None and (third.seq, third.failures) == (first.seq, 1)
    assert server.release_claim(third.seq, "w", failed=True)
    queued = server.queued_chunk("c1", 1, "levels", 0)
    assert queued is not None and (queued.attempts, queued.failures) == (3, 2)
    assert server.decode_backlog("c1", 1) == DecodeBacklog(queued=2, failing=1)
    assert server.decode_backlog("c1", 2) == DecodeBacklog(queued=0, failing=0)


def test_server_queue_finishing_twice_counts_once(server: ServerStorage) -> None:
    """Two workers that decoded the same chunk (the first stalled past its lease) both
    finish it: the first counts it and stores its receipt, the second changes nothing."""
    _create(server)
    _queue(server, range(1))
    slow = server.claim_chunk("slow", 0.2)
    time.sleep(0.3)
    fast = server.claim_chunk("fast", 60.0)
    assert slow is not None and fast is not None and slow.seq == fast.seq
    messages = [(0, AcceptedMessage(1, b"n1")), (1, AcceptedMessage(None, b"n2"))]
    failures = [(2, "decrypt-failed")]
    service = _finisher(server)
    receipt = service.finish_chunk(fast, messages, failures)
    assert receipt is not None and receipt.state == "decoded"
    assert (receipt.received, receipt.accepted, receipt.replays) == (2, 2, 0)
    stored = server.chunk("c1", 1, "levels", 0)
    assert stored is not None and stored.digest == fast.digest
    assert stored.receipt == receipt.model_dump(mode="json")
    assert server.decode_backlog("c1", 1).queued == 0
    assert service.finish_chunk(slow, messages, failures) is None
    assert service.finish_chunk(fast, messages, failures) is None
    assert server.counts("c1", 1, "levels") == {1: 1, NULL_VALUE: 1}
    assert server.chunk("c1", 1, "levels", 0) == stored


def test_server_queue_holds_the_round_open_and_ends_with_the_campaign(
        server: ServerStorage) -> None:
    _create(server)
    _queue(server, range(2))
    with pytest.raises(errors.UnavailableError) as refused:
        _finisher(server).complete("c1", 1, "b1")
    assert refused.value.extra == {"queued_chunks": 2, "failing_chunks": 0}
    assert refused.value.headers["Retry-After"]
    claimed = server.claim_chunk("w", 60.0)
    assert claimed is not None
    with server.transaction() as tx:
        tx.end_campaign("c1", "aborted", "stop")
        assert tx.drop_queue("c1") == 2
    assert server.decode_backlog("c1", 1).queued == 0
    assert _finisher(server).finish_chunk(claimed, [(0, AcceptedMessage(0, b"n"))], []) is None
    assert server.counts("c1", 1, "levels") == {} and server.chunk("c1", 1, "levels", 0) is None
    assert not server.renew_claim(claimed.seq, "w", 60.0)


# -- shuffler --------------------------------------------------------------------------------

def test_shuffler_tokens(shuffler: ShufflerStorage) -> None:
    assert shuffler.ping()
    assert shuffler.token_campaign(b"t" * 32) is None
    shuffler.add_token("c", b"t" * 32)
    assert shuffler.token_campaign(b"t" * 32) == "c"


def test_shuffler_invitations_buy_one_token(shuffler: ShufflerStorage) -> None:
    shuffler.add_token_for_invitation("c", b"a" * 32, b"i" * 32, 10**9)
    assert shuffler.token_campaign(b"a" * 32) == "c"
    with pytest.raises(InvitationUsedError):
        shuffler.add_token_for_invitation("c", b"b" * 32, b"i" * 32, 10**9)
    assert shuffler.token_campaign(b"b" * 32) is None  # nothing recorded by the refusal
    shuffler.add_token_for_invitation("c", b"b" * 32, b"j" * 32, 10**9)
    assert shuffler.token_campaign(b"b" * 32) == "c"
    shuffler.add_token_for_invitation("c", b"d" * 32, b"k" * 32, 500)
    assert shuffler.forget_expired_invitations(500) == 0
    assert shuffler.forget_expired_invitations(501) == 1  # expires < before
    shuffler.add_token_for_invitation("c", b"e" * 32, b"k" * 32, 500)  # forgotten: no reuse
    with pytest.raises(InvitationUsedError):
        shuffler.add_token_for_invitation("c", b"f" * 32, b"i" * 32, 10**9)  # still known


def _rows(streams: dict[str, list[bytes]]) -> list[StoredMessage]:
    """One message per value, row keys derived from the value (distinct, 16 bytes)."""
    return [StoredMessage(stream, (stream.encode() + value).ljust(16, b"\x00"), value)
            for stream, values in streams.items() for value in values]


def _all_rows(shuffler: ShufflerStorage, campaign: str, round_number: int,
              stream: str) -> list[tuple[bytes, bytes]]:
    """Every (row key, sealed) pair of a stream, read in keyset pages of two."""
    found: list[tuple[bytes, bytes]] = []
    while page := shuffler.sealed_rows(campaign, round_number, stream,
                                       after=found[-1][0] if found else b"", limit=2):
        assert len(page) <= 2
        found.extend(page)
    return found


def test_shuffler_submissions(shuffler: ShufflerStorage) -> None:
    assert shuffler.participants("c", 1) == 0
    assert shuffler.submit("c", 1, b"u1", _rows({"levels": [b"a"], "data": [b"x", b"y"]})) == 1
    assert shuffler.submit("c", 1, b"u2", _rows({"levels": [b"b"], "data": []})) == 2
    with pytest.raises(AlreadySubmittedError):
        shuffler.submit("c", 1, b"u1", _rows({"levels": [b"c"]}))
    assert shuffler.participants("c", 1) == 2 and shuffler.participants("c", 2) == 0
    assert shuffler.has_submitted("c", 1, b"u1") and not shuffler.has_submitted("c", 2, b"u1")
    assert shuffler.pending_count("c", 1, "levels") == 2
    assert shuffler.pending_count("c", 1, "data") == 2
    assert shuffler.round_record("c", 1) is None
    assert shuffler.rounds_with_messages() == [("c", 1)]


def test_shuffler_submissions_with_the_token_checked_inside(shuffler: ShufflerStorage) -> None:
    """``submit_as``: the token's check and the submission in one transaction; an unknown
    token, or one issued for another campaign, stores nothing, and is refused before the
    round's own refusals (a closed round, a second submission)."""
    shuffler.add_token("c", b"t" * 32)
    shuffler.add_token("other", b"o" * 32)
    for stranger in (b"x" * 32, b"o" * 32):
        with pytest.raises(UnknownTokenError):
            shuffler.submit_as("c", 1, stranger, _rows({"levels": [b"s"]}))
    assert shuffler.participants("c", 1) == 0 and shuffler.pending_count("c", 1, "levels") == 0
    assert shuffler.rounds_with_messages() == []
    assert shuffler.submit_as("c", 1, b"t" * 32, _rows({"levels": [b"a"], "data": [b"x"]})) == 1
    with pytest.raises(AlreadySubmittedError):
        shuffler.submit_as("c", 1, b"t" * 32, _rows({"levels": [b"b"]}))
    with pytest.raises(UnknownTokenError):  # the token's refusal comes first
        shuffler.submit_as("c", 1, b"x" * 32, _rows({"levels": [b"a"]}))
    assert shuffler.participants("c", 1) == 1
    assert shuffler.has_submitted("c", 1, b"t" * 32)
    assert shuffler.pending_count("c", 1, "data") == 1


def test_shuffler_release_lifecycle(shuffler: ShufflerStorage) -> None:
    for i in range(3):
        shuffler.submit("c", 1, f"u{i}".encode(), _rows({"levels": [bytes([i])]}))
    with pytest.raises(NotEnoughParticipantsError) as refused:
        shuffler.close_round("c", 1, minimum=4, batch_id="b0", chunk_size=2,
                             streams=["levels", "data"])
    assert (refused.value.participants, refused.value.required) == (3, 4)
    assert shuffler.round_record("c", 1) is None
    record = shuffler.close_round("c", 1, minimum=3, batch_id="b1", chunk_size=2,
                                  streams=["levels", "data"])
    assert (record.campaign_id, record.round, record.state, record.batch_id,
            record.participants, record.chunk_size) == ("c", 1, RELEASING, "b1", 3, 2)
    assert dict(record.stream_sizes) == {"levels": 3, "data": 0}
    assert record.chunk_count("levels") == 2 and record.chunk_count("data") == 1
    again = shuffler.close_round("c", 1, minimum=3, batch_id="b2", chunk_size=5,
                                 streams=["levels"])
    assert again == record == shuffler.round_record("c", 1)
    with pytest.raises(RoundClosedError):
        shuffler.submit("c", 1, b"late", _rows({"levels": [b"z"]}))
    expected = sorted((m.row_key, m.sealed)
                      for m in _rows({"levels": [b"\x00", b"\x01", b"\x02"]}))
    assert _all_rows(shuffler, "c", 1, "levels") == expected  # in key order
    assert shuffler.sealed_rows("c", 1, "levels", after=expected[0][0], limit=5) == expected[1:]
    assert shuffler.sealed_rows("c", 1, "data", limit=5) == []
    assert shuffler.releasing() == [record]
    shuffler.acknowledge(record, "levels", 0)
    shuffler.acknowledge(record, "levels", 0)
    assert shuffler.acknowledged(record) == {("levels", 0)}
    shuffler.clear_acknowledgements(record)
    assert shuffler.acknowledged(record) == set()
    shuffler.acknowledge(record, "levels", 1)
    finished = shuffler.finish_release(record)
    assert finished.state == RELEASED and finished.batch_id == record.batch_id
    assert shuffler.round_record("c", 1) == finished
    assert shuffler.releasing() == [] and shuffler.rounds_with_messages() == []
    assert shuffler.sealed_rows("c", 1, "levels", limit=5) == []
    assert shuffler.acknowledged(record) == set()
    assert not shuffler.has_submitted("c", 1, b"u0")
    assert shuffler.participants("c", 1) == 3


def test_shuffler_forgets_a_campaigns_tokens_after_round_two(shuffler: ShufflerStorage) -> None:
    shuffler.add_token("c", b"t" * 32)
    shuffler.add_token("d", b"u" * 32)
    shuffler.submit("c", 2, b"t" * 32, _rows({"levels": [b"a"], "data": [b"x"]}))
    record = shuffler.close_round("c", 2, minimum=1, batch_id="b", chunk_size=10,
                                  streams=["levels", "data"])
    shuffler.finish_release(record)
    assert shuffler.token_campaign(b"t" * 32) is None
    assert shuffler.token_campaign(b"u" * 32) == "d"


# -- completion jobs -------------------------------------------------------------------------

def _pinned(server: ServerStorage, campaign_id: str = "c1", batch: str = "b1") -> None:
    _create(server, campaign_id)
    with server.transaction() as tx:
        tx.pin_batch(campaign_id, 1, batch)


def test_server_completion_job_is_requested_once(server: ServerStorage) -> None:
    _pinned(server)
    assert server.completion_job("c1", 1) is None
    assert server.request_completion("c1", 1, "other") is None  # not the pinned batch
    first = server.request_completion("c1", 1, "b1")
    assert first is not None and (first.campaign_id, first.round, first.batch_id) == (
        "c1", 1, "b1")
    assert first.state == "waiting" and first.attempts == 0 and first.running is None
    time.sleep(0.05)
    again = server.request_completion("c1", 1, "b1")
    assert again is not None and again.age >= first.age + 0.04  # the first request's time
    listed = server.completion_jobs()
    assert [(j.campaign_id, j.round, j.batch_id) for j in listed] == [("c1", 1, "b1")]
    job = server.completion_job("c1", 1)
    assert job is not None and job.attempts == 0 and job.owner is None


def test_server_completion_claims_are_exclusive_and_expire(server: ServerStorage) -> None:
    _pinned(server)
    assert server.claim_completion("w1", 30.0) is None  # nothing requested
    server.request_completion("c1", 1, "b1")
    claimed = server.claim_completion("w1", 0.5)
    assert claimed is not None and claimed.owner == "w1" and claimed.attempts == 1
    assert claimed.state == "computing"
    assert server.claim_completion("w2", 30.0) is None  # the lease holds
    assert server.renew_completion("c1", 1, "w1", 0.5)
    assert not server.renew_completion("c1", 1, "w2", 0.5)
    time.sleep(0.7)
    taken = server.claim_completion("w2", 30.0)  # w1 died: its lease ran out
    assert taken is not None and taken.owner == "w2" and taken.attempts == 2
    assert not server.renew_completion("c1", 1, "w1", 30.0)
    assert not server.release_completion("c1", 1, "w1")


def test_server_completion_concurrent_claimers_never_share_a_job(server: ServerStorage
                                                                 ) -> None:
    for name in ("a", "b", "c"):
        _pinned(server, name)
        server.request_completion(name, 1, "b1")
    with ThreadPoolExecutor(6) as pool:
        claims = list(pool.map(lambda i: server.claim_completion(f"w{i}", 30.0), range(6)))
    won = [c.campaign_id for c in claims if c is not None]
    assert sorted(won) == ["a", "b", "c"]


def test_server_completion_failures_wait_and_are_kept(server: ServerStorage) -> None:
    _pinned(server)
    server.request_completion("c1", 1, "b1")
    server.claim_completion("w1", 30.0)
    assert server.release_completion("c1", 1, "w1", 0.4, error="boom")
    job = server.completion_job("c1", 1)
    assert job is not None and job.state == "waiting" and job.failures == 1
    assert job.last_error == "boom"
    assert server.claim_completion("w2", 30.0) is None  # the retry delay holds
    time.sleep(0.5)
    again = server.claim_completion("w2", 30.0)
    assert again is not None and again.attempts == 2 and again.last_error == "boom"


def test_server_completion_job_ends_with_the_completion_or_the_campaign(
        server: ServerStorage) -> None:
    _pinned(server)
    server.request_completion("c1", 1, "b1")
    server.claim_completion("w1", 30.0)
    with server.transaction() as tx:
        tx.complete_batch("c1", 1, {"phase": "round2"})
    assert server.completion_job("c1", 1) is None and server.completion_jobs() == []
    assert server.request_completion("c1", 1, "b1") is None
    assert not server.renew_completion("c1", 1, "w1", 30.0)
    _pinned(server, "c2")
    server.request_completion("c2", 1, "b1")
    with server.transaction() as tx:
        tx.end_campaign("c2", "aborted", "stop")
    assert server.completion_job("c2", 1) is None  # nothing left to compute
    assert server.claim_completion("w1", 30.0) is None

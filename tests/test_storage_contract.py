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

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from segshuffle.services.server.storage import Repository
from segshuffle.services.server.storage_api import (
    NULL_VALUE,
    BatchRecord,
    ChunkRecord,
    ConflictError,
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
    StorageError,
    StoredMessage,
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


def _keys(packed: bytes) -> list[bytes]:
    return [packed[i:i + 16] for i in range(0, len(packed), 16)]


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
    keys = _keys(shuffler.row_keys("c", 1, "levels"))
    assert sorted(keys) == sorted(m.row_key for m in _rows({"levels": [b"\x00", b"\x01",
                                                                       b"\x02"]}))
    assert shuffler.sealed_messages("c", 1, "levels", keys[::-1]) == [
        key[6:7] for key in keys[::-1]]  # in the order asked for
    with pytest.raises(StorageError):
        shuffler.sealed_messages("c", 1, "levels", [b"?" * 16])
    assert shuffler.row_keys("c", 1, "data") == b""
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
    assert shuffler.row_keys("c", 1, "levels") == b""
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

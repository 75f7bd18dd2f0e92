"""Contract of the storage Protocols, run against every available backend.

Each test uses a storage only through the methods of its Protocol
(:class:`~segshuffle.services.server.storage_api.ServerStorage`,
:class:`~segshuffle.services.shuffler.storage_api.ShufflerStorage`), never SQL, so
that another backend passes by being added to ``SERVER_BACKENDS`` and
``SHUFFLER_BACKENDS`` (a factory from a temporary directory to a fresh, empty
storage; a backend that needs a running database server would be skipped when none
is configured).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from segshuffle.services.server.storage import Repository
from segshuffle.services.server.storage_api import (
    NULL_VALUE,
    AcceptedMessage,
    BatchRecord,
    ConflictError,
    ServerStorage,
    StoredChunk,
)
from segshuffle.services.shuffler.storage import Storage
from segshuffle.services.shuffler.storage_api import (
    RELEASED,
    RELEASING,
    AlreadySubmittedError,
    NotEnoughParticipantsError,
    RoundClosedError,
    ShufflerStorage,
)

SERVER_BACKENDS: dict[str, Callable[[Path], ServerStorage]] = {
    "sqlite": lambda directory: Repository(directory / "server.sqlite3"),
}
SHUFFLER_BACKENDS: dict[str, Callable[[Path], ShufflerStorage]] = {
    "sqlite": lambda directory: Storage(directory / "shuffler.sqlite3"),
}


@pytest.fixture(params=sorted(SERVER_BACKENDS))
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerStorage]:
    storage = SERVER_BACKENDS[request.param](tmp_path)
    yield storage
    storage.close()


@pytest.fixture(params=sorted(SHUFFLER_BACKENDS))
def shuffler(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ShufflerStorage]:
    storage = SHUFFLER_BACKENDS[request.param](tmp_path)
    yield storage
    storage.close()


# -- server ----------------------------------------------------------------------------------

def _receipt(replays: list[int], kept: int) -> dict[str, Any]:
    return {"replays": replays, "accepted": kept}


def _create(server: ServerStorage, campaign_id: str = "c1") -> None:
    server.create_campaign(campaign_id, {"id": campaign_id, "n": 1}, "hash-" + campaign_id,
                           "key-1", b"public")


def _store(server: ServerStorage, *, round_: int = 1, batch: str = "b1", stream: str = "levels",
           index: int = 0, count: int = 2, messages: list[tuple[int | None, bytes]] | None = None
           ) -> dict[str, Any]:
    accepted = [(i, AcceptedMessage(value, nonce))
                for i, (value, nonce) in enumerate(messages or [])]
    return server.store_chunk("c1", round_, batch, stream, index, count,
                              f"digest-{stream}-{index}".encode(), accepted, _receipt)


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


def test_server_chunks_pin_the_batch_count_values_and_drop_replays(server: ServerStorage) -> None:
    _create(server)
    assert server.batch("c1", 1) is None
    receipt = _store(server, messages=[(0, b"n1"), (1, b"n2"), (None, b"n3"), (1, b"n1")])
    assert receipt == {"replays": [3], "accepted": 3}
    assert server.batch("c1", 1) == BatchRecord("b1", None)
    assert server.counts("c1", 1, "levels") == {0: 1, 1: 1, NULL_VALUE: 1}
    stored = server.chunk("c1", 1, "levels", 0)
    assert stored is not None
    assert (stored.batch_id, stored.chunk_count, stored.digest, stored.receipt) == (
        "b1", 2, b"digest-levels-0", receipt)
    assert server.chunk("c1", 1, "levels", 1) is None
    _store(server, index=1, messages=[(0, b"n4"), (0, b"n2")])
    assert server.stream_chunks("c1", 1, "levels") == [
        StoredChunk(0, 2, receipt), StoredChunk(1, 2, {"replays": [1], "accepted": 1})]
    assert server.counts("c1", 1, "levels") == {0: 2, 1: 1, NULL_VALUE: 1}
    assert server.stream_chunks("c1", 1, "data") == []
    with pytest.raises(ConflictError):
        _store(server, index=0)
    with pytest.raises(ConflictError):
        _store(server, batch="b2", index=1)
    with pytest.raises(ConflictError):
        _store(server, round_=2, stream="data")


def test_server_round_completion(server: ServerStorage) -> None:
    _create(server)
    _store(server, count=1, messages=[(0, b"n1")])
    with pytest.raises(ConflictError):
        server.finish_round1("c1", "other", {"done": 1}, {"p": 1}, "ph", {"r": 1})
    server.finish_round1("c1", "b1", {"done": 1}, {"p": 1}, "ph", {"r": 1})
    record = server.campaign("c1")
    assert record is not None
    assert (record.phase, record.parameters, record.parameters_hash, record.round1) == (
        "round2", {"p": 1}, "ph", {"r": 1})
    assert server.batch("c1", 1) == BatchRecord("b1", {"done": 1})
    with pytest.raises(ConflictError):
        server.finish_round1("c1", "b1", {"done": 1}, {"p": 1}, "ph", {"r": 1})
    with pytest.raises(ConflictError):
        _store(server, index=0, count=1)
    _store(server, round_=2, batch="b2", stream="data", count=1, messages=[(3, b"n1")])
    assert server.counts("c1", 2, "data") == {3: 1}
    server.finish_round2("c1", "b2", {"done": 2}, {"estimate": [1]})
    record = server.campaign("c1")
    assert record is not None and (record.phase, record.results) == ("done", {"estimate": [1]})
    assert server.batch("c1", 2) == BatchRecord("b2", {"done": 2})
    with pytest.raises(ConflictError):
        server.finish_round2("c1", "b2", {"done": 2}, {"estimate": [1]})


# -- shuffler --------------------------------------------------------------------------------

def _reverse(n: int) -> list[int]:
    return list(range(n))[::-1]


def test_shuffler_tokens(shuffler: ShufflerStorage) -> None:
    assert shuffler.ping()
    assert shuffler.token_campaign(b"t" * 32) is None
    shuffler.add_token("c", b"t" * 32)
    assert shuffler.token_campaign(b"t" * 32) == "c"


def test_shuffler_submissions(shuffler: ShufflerStorage) -> None:
    assert shuffler.participants("c", 1) == 0
    assert shuffler.submit("c", 1, b"u1", {"levels": [b"a"], "data": [b"x", b"y"]}) == 1
    assert shuffler.submit("c", 1, b"u2", {"levels": [b"b"], "data": []}) == 2
    with pytest.raises(AlreadySubmittedError):
        shuffler.submit("c", 1, b"u1", {"levels": [b"c"]})
    assert shuffler.participants("c", 1) == 2 and shuffler.participants("c", 2) == 0
    assert shuffler.has_submitted("c", 1, b"u1") and not shuffler.has_submitted("c", 2, b"u1")
    assert shuffler.pending_count("c", 1, "levels") == 2
    assert shuffler.pending_count("c", 1, "data") == 2
    assert shuffler.round_record("c", 1) is None


def test_shuffler_release_lifecycle(shuffler: ShufflerStorage) -> None:
    for i in range(3):
        shuffler.submit("c", 1, f"u{i}".encode(), {"levels": [bytes([i])]})
    with pytest.raises(NotEnoughParticipantsError) as refused:
        shuffler.start_release("c", 1, minimum=4, chunk_size=2, streams=["levels", "data"])
    assert (refused.value.participants, refused.value.required) == (3, 4)
    assert shuffler.round_record("c", 1) is None
    record = shuffler.start_release("c", 1, minimum=3, chunk_size=2,
                                    streams=["levels", "data"], permutation=_reverse)
    assert (record.campaign_id, record.round, record.state, record.participants,
            record.chunk_size) == ("c", 1, RELEASING, 3, 2)
    assert dict(record.stream_sizes) == {"levels": 3, "data": 0}
    assert record.chunk_count("levels") == 2 and record.chunk_count("data") == 1
    again = shuffler.start_release("c", 1, minimum=3, chunk_size=5, streams=["levels"])
    assert again == record == shuffler.round_record("c", 1)
    assert shuffler.pending_count("c", 1, "levels") == 0
    with pytest.raises(RoundClosedError):
        shuffler.submit("c", 1, b"late", {"levels": [b"z"]})
    released = shuffler.chunk(record, "levels", 0) + shuffler.chunk(record, "levels", 1)
    assert sorted(released) == [b"\x00", b"\x01", b"\x02"]
    assert shuffler.chunk(record, "data", 0) == []
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
    assert shuffler.releasing() == []
    assert shuffler.chunk(record, "levels", 0) == []
    assert shuffler.acknowledged(record) == set()


def test_shuffler_release_uses_the_given_permutation(shuffler: ShufflerStorage) -> None:
    sizes: list[int] = []

    def permutation(n: int) -> list[int]:
        sizes.append(n)
        return _reverse(n)

    shuffler.submit("c", 1, b"u", {"levels": [b"a", b"b", b"c"], "data": [b"x"]})
    record = shuffler.start_release("c", 1, minimum=1, chunk_size=10,
                                    streams=["levels", "data"], permutation=permutation)
    assert sorted(sizes) == [1, 3]
    assert sorted(shuffler.chunk(record, "levels", 0)) == [b"a", b"b", b"c"]
    assert shuffler.chunk(record, "data", 0) == [b"x"]

"""Shuffler storage: one submission per token, atomic release, no identities, crash safety."""

from __future__ import annotations

import multiprocessing
import os
import secrets
import signal
import sqlite3
from pathlib import Path

import pytest

from segshuffle.services.shuffler.enrollment import (
    AuthenticationError,
    OpenEnrollment,
    token_hash,
)
from segshuffle.services.shuffler.storage import (
    RELEASED,
    RELEASING,
    AlreadySubmittedError,
    NotEnoughParticipantsError,
    RoundClosedError,
    Storage,
)


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage(tmp_path / "shuffler.sqlite3")


def _ct(tag: int) -> bytes:
    return tag.to_bytes(4, "big") + secrets.token_bytes(76)


def test_one_submission_per_token_per_round(storage: Storage) -> None:
    h = token_hash("alice")
    assert storage.submit("c1", 1, h, {"levels": [_ct(1)]}) == 1
    with pytest.raises(AlreadySubmittedError):
        storage.submit("c1", 1, h, {"levels": [_ct(2)]})
    assert storage.participants("c1", 1) == 1
    assert storage.pending_count("c1", 1, "levels") == 1  # the refused one was not stored
    storage.submit("c1", 2, h, {"levels": [_ct(3)], "data": [_ct(4), _ct(5)]})
    storage.submit("c2", 1, h, {"levels": [_ct(6)]})  # another campaign is independent
    assert storage.participants("c1", 2) == 1 and storage.participants("c2", 1) == 1


def test_release_needs_threshold_and_closes_round(storage: Storage) -> None:
    for i in range(5):
        storage.submit("c", 1, token_hash(f"u{i}"), {"levels": [_ct(i)]})
    with pytest.raises(NotEnoughParticipantsError) as info:
        storage.start_release("c", 1, minimum=6, chunk_size=2, streams=["levels"])
    assert (info.value.participants, info.value.required) == (5, 6)
    assert storage.round_record("c", 1) is None
    storage.submit("c", 1, token_hash("u5"), {"levels": [_ct(5)]})
    record = storage.start_release("c", 1, minimum=6, chunk_size=4, streams=["levels"])
    assert record.state == RELEASING and record.participants == 6
    assert record.stream_sizes == {"levels": 6} and record.chunk_count("levels") == 2
    with pytest.raises(RoundClosedError):
        storage.submit("c", 1, token_hash("late"), {"levels": [_ct(9)]})
    # idempotent: a second release request returns the same batch
    assert storage.start_release("c", 1, minimum=6, chunk_size=4, streams=["levels"]) == record
    released = storage.chunk(record, "levels", 0) + storage.chunk(record, "levels", 1)
    assert sorted(int.from_bytes(c[:4], "big") for c in released) == list(range(6))
    assert storage.pending_count("c", 1, "levels") == 0
    storage.acknowledge(record, "levels", 0)
    assert storage.acknowledged(record) == {("levels", 0)}
    assert storage.releasing() == [record]
    done = storage.finish_release(record)
    assert done.state == RELEASED and storage.releasing() == []
    assert storage.chunk(record, "levels", 0) == []  # ciphertexts are gone after the release


def test_streams_are_permuted_independently(storage: Storage) -> None:
    calls: list[int] = []

    def reverse(n: int) -> list[int]:
        calls.append(n)
        return list(range(n))[::-1]

    for i in range(3):
        storage.submit("c", 2, token_hash(f"u{i}"),
                       {"levels": [_ct(i)], "data": [_ct(10 + i), _ct(20 + i)]})
    record = storage.start_release("c", 2, minimum=3, chunk_size=100,
                                   streams=["levels", "data"], permutation=reverse)
    assert calls == [3, 6]
    assert record.stream_sizes == {"levels": 3, "data": 6}
    assert len(storage.chunk(record, "data", 0)) == 6


def test_no_arrival_order_or_identity_in_the_database(storage: Storage) -> None:
    tokens = [f"token-{i}" for i in range(200)]
    for i, t in enumerate(tokens):
        storage.submit("c", 1, token_hash(t), {"levels": [_ct(i)]})
    db = sqlite3.connect(storage.path)
    stored = [int.from_bytes(bytes(r[0])[:4], "big") for r in db.execute(
        "SELECT ciphertext FROM pending")]
    assert sorted(stored) == list(range(200))
    assert stored != list(range(200))  # storage order is the random key order
    columns = {row[1] for row in db.execute("PRAGMA table_info(pending)")}
    assert columns == {"campaign_id", "round", "stream", "row_key", "ciphertext"}
    raw = Path(storage.path).read_bytes() + Path(storage.path + "-wal").read_bytes()
    assert not any(t.encode() in raw for t in tokens)


def test_enrollment_tokens_are_stored_hashed_and_campaign_bound(storage: Storage) -> None:
    policy = OpenEnrollment(storage)
    token = policy.enroll("c", None)
    assert policy.authenticate("c", token) == token_hash(token)
    with pytest.raises(AuthenticationError):
        policy.authenticate("other", token)
    with pytest.raises(AuthenticationError):
        policy.authenticate("c", token + "x")
    with pytest.raises(AuthenticationError):
        policy.authenticate("c", "")
    assert policy.enroll("c", None) != policy.enroll("c", None)


def _submit_forever(path: str, ready: multiprocessing.synchronize.Event) -> None:
    store = Storage(path)
    i = 0
    while True:
        store.submit("c", 1, token_hash(f"user{i}"), {"levels": [_ct(i)]})
        i += 1
        if i == 50:
            ready.set()


def test_kill_nine_mid_write_keeps_a_consistent_state(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.sqlite3")
    Storage(path).close()
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=_submit_forever, args=(path, ready))
    process.start()
    assert ready.wait(30)
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    store = Storage(path)
    participants = store.participants("c", 1)
    assert participants >= 50
    # every committed participation has exactly its ciphertext, nothing half-written
    assert store.pending_count("c", 1, "levels") == participants
    record = store.start_release("c", 1, minimum=participants, chunk_size=1000,
                                 streams=["levels"])
    assert record.stream_sizes["levels"] == participants

"""The shuffler's SQLite storage: one submission per token, atomic release, no identities on
disk, deleted rows overwritten, crash safety.

Backend-specific on purpose (it reads the SQLite files through tests/sqlite_backend.py);
the behaviour every backend shares is tests/test_storage_contract.py."""

from __future__ import annotations

import multiprocessing
import os
import secrets
import signal
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
    StoredMessage,
)

from .sqlite_backend import rows as sqlite_rows


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage(tmp_path / "shuffler.sqlite3")


def _ct(tag: int) -> bytes:
    return tag.to_bytes(4, "big") + secrets.token_bytes(76)


def _rows(streams: dict[str, list[bytes]]) -> list[StoredMessage]:
    """Messages under fresh random row keys, as the service stores them (unsealed here)."""
    return [StoredMessage(stream, secrets.token_bytes(16), ct)
            for stream, cts in streams.items() for ct in cts]


def _close(storage: Storage, campaign: str, round_number: int, **kwargs: object) -> object:
    return storage.close_round(campaign, round_number, batch_id=secrets.token_hex(16),
                               **kwargs)  # type: ignore[arg-type]


def _stream(storage: Storage, campaign: str, round_number: int, stream: str) -> list[bytes]:
    return [sealed for _, sealed in storage.sealed_rows(campaign, round_number, stream,
                                                        limit=1_000_000)]


def test_one_submission_per_token_per_round(storage: Storage) -> None:
    h = token_hash("alice")
    assert storage.submit("c1", 1, h, _rows({"levels": [_ct(1)]})) == 1
    with pytest.raises(AlreadySubmittedError):
        storage.submit("c1", 1, h, _rows({"levels": [_ct(2)]}))
    assert storage.participants("c1", 1) == 1
    assert storage.pending_count("c1", 1, "levels") == 1  # the refused one was not stored
    storage.submit("c1", 2, h, _rows({"levels": [_ct(3)], "data": [_ct(4), _ct(5)]}))
    storage.submit("c2", 1, h, _rows({"levels": [_ct(6)]}))  # another campaign is independent
    assert storage.participants("c1", 2) == 1 and storage.participants("c2", 1) == 1


def test_release_needs_threshold_and_closes_round(storage: Storage) -> None:
    for i in range(5):
        storage.submit("c", 1, token_hash(f"u{i}"), _rows({"levels": [_ct(i)]}))
    with pytest.raises(NotEnoughParticipantsError) as info:
        _close(storage, "c", 1, minimum=6, chunk_size=2, streams=["levels"])
    assert (info.value.participants, info.value.required) == (5, 6)
    assert storage.round_record("c", 1) is None
    storage.submit("c", 1, token_hash("u5"), _rows({"levels": [_ct(5)]}))
    record = storage.close_round("c", 1, minimum=6, batch_id="b1", chunk_size=4,
                                 streams=["levels"])
    assert record.state == RELEASING and record.participants == 6
    assert record.stream_sizes == {"levels": 6} and record.chunk_count("levels") == 2
    with pytest.raises(RoundClosedError):
        storage.submit("c", 1, token_hash("late"), _rows({"levels": [_ct(9)]}))
    # idempotent: a second release request returns the same batch
    assert _close(storage, "c", 1, minimum=6, chunk_size=4, streams=["levels"]) == record
    released = _stream(storage, "c", 1, "levels")
    assert sorted(int.from_bytes(c[:4], "big") for c in released) == list(range(6))
    storage.acknowledge(record, "levels", 0)
    assert storage.acknowledged(record) == {("levels", 0)}
    assert storage.releasing() == [record]
    assert storage.rounds_with_messages() == [("c", 1)]
    done = storage.finish_release(record)
    assert done.state == RELEASED and storage.releasing() == []
    # the round is forgotten: messages, participations and acknowledgements
    assert storage.pending_count("c", 1, "levels") == 0 and _stream(storage, "c", 1, "levels") == []
    assert not storage.has_submitted("c", 1, token_hash("u0"))
    assert storage.acknowledged(record) == set() and storage.rounds_with_messages() == []
    assert storage.participants("c", 1) == 6  # only the count stays


def test_closing_counts_each_stream_and_round_two_forgets_the_tokens(
        storage: Storage) -> None:
    policy = OpenEnrollment(storage)
    tokens = [policy.enroll("c", None) for _ in range(3)]
    for i, token in enumerate(tokens):
        storage.submit("c", 2, token_hash(token),
                       _rows({"levels": [_ct(i)], "data": [_ct(10 + i), _ct(20 + i)]}))
    record = storage.close_round("c", 2, minimum=3, batch_id="b2", chunk_size=100,
                                 streams=["levels", "data"])
    assert record.stream_sizes == {"levels": 3, "data": 6}
    assert len(_stream(storage, "c", 2, "data")) == 6
    storage.finish_release(record)
    with pytest.raises(AuthenticationError):
        policy.authenticate("c", tokens[0])


def test_deleted_rows_are_overwritten_and_the_wal_truncated(storage: Storage) -> None:
    marker = b"\xa5MARK" * 16
    for i in range(20):
        storage.submit("c", 1, token_hash(f"u{i}"), _rows({"levels": [marker + bytes([i])]}))
    assert marker in Path(storage.path + "-wal").read_bytes()
    record = storage.close_round("c", 1, minimum=20, batch_id="b", chunk_size=100,
                                 streams=["levels"])
    storage.finish_release(record)
    files = [Path(storage.path), Path(storage.path + "-wal")]
    raw = b"".join(f.read_bytes() for f in files if f.exists())
    assert marker not in raw


def test_no_arrival_order_or_identity_in_the_database(storage: Storage) -> None:
    tokens = [f"token-{i}" for i in range(200)]
    for i, t in enumerate(tokens):
        storage.submit("c", 1, token_hash(t), _rows({"levels": [_ct(i)]}))
    stored = [int.from_bytes(bytes(r[0])[:4], "big")
              for r in sqlite_rows(storage.path, "SELECT ciphertext FROM pending")]
    assert sorted(stored) == list(range(200))
    assert stored != list(range(200))  # storage order is the random key order
    columns = {row[1] for row in sqlite_rows(storage.path, "PRAGMA table_info(pending)")}
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
        store.submit("c", 1, token_hash(f"user{i}"), _rows({"levels": [_ct(i)]}))
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
    record = store.close_round("c", 1, minimum=participants, batch_id="b", chunk_size=1000,
                               streams=["levels"])
    assert record.stream_sizes["levels"] == participants


def test_an_open_rounds_count_costs_no_write_after_its_first_submission(
        storage: Storage) -> None:
    """The participant count of an open round is kept in memory: only a round's first
    submission writes its participant_counts row (before, every submission rewrote it,
    one more page in the WAL each)."""
    statements: list[str] = []
    storage._db.set_trace_callback(statements.append)
    for i in range(3):
        assert storage.submit("c", 1, token_hash(f"user{i}"),
                              _rows({"levels": [_ct(i)]})) == i + 1
    storage._db.set_trace_callback(None)
    writes = [s for s in statements if "participant_counts" in s]
    assert len(writes) == 1 and writes[0].startswith("INSERT OR IGNORE")
    assert storage.participants("c", 1) == 3
    assert storage.rounds_holding_messages() == [("c", 1)]


def test_counts_are_recounted_after_a_restart_and_kept_once_closed(tmp_path: Path) -> None:
    path = tmp_path / "shuffler.sqlite3"
    first = Storage(path)
    for i in range(4):
        first.submit("c", 2, token_hash(f"user{i}"), _rows({"levels": [_ct(i)]}))
    first.close()
    second = Storage(path)  # a restart: the count comes from the participations
    assert second.participants("c", 2) == 4
    assert second.submit("c", 2, token_hash("user4"), _rows({"levels": [_ct(4)]})) == 5
    with pytest.raises(AlreadySubmittedError):
        second.submit("c", 2, token_hash("user4"), _rows({"levels": [_ct(5)]}))
    assert second.participants("c", 2) == 5  # a refusal leaves the count as it was
    record = _close(second, "c", 2, minimum=5, chunk_size=10, streams=["levels"])
    assert record.participants == 5  # type: ignore[attr-defined]
    assert sqlite_rows(path, "SELECT * FROM participant_counts") == [("c", 2, 5)]
    second.close()
    third = Storage(path)
    assert third.participants("c", 2) == 5
    third.close()


def test_one_process_serves_a_database_file(tmp_path: Path) -> None:
    """The open-round counts live in memory, which is right only for the file's one
    writer: a second store on the same file is refused at once, naming the lock, and the
    file is free again once the first is closed."""
    from segshuffle.services.database import DatabaseInUseError

    path = tmp_path / "shuffler.sqlite3"
    first = Storage(path)
    first.submit("c", 1, token_hash("user0"), _rows({"levels": [_ct(0)]}))
    with pytest.raises(DatabaseInUseError, match=r"in use by another process.*\.lock"):
        Storage(path)
    assert first.participants("c", 1) == 1  # the refused store changed nothing
    first.close()
    second = Storage(path)
    assert second.participants("c", 1) == 1
    second.close()


def _hold(path: str, ready: object, release: object) -> None:
    storage = Storage(path)
    ready.set()  # type: ignore[attr-defined]
    release.wait(30)  # type: ignore[attr-defined]
    storage.close()


def test_a_second_process_is_refused_and_a_killed_owner_frees_the_file(
        tmp_path: Path) -> None:
    path = str(tmp_path / "shuffler.sqlite3")
    context = multiprocessing.get_context("spawn")
    ready, release = context.Event(), context.Event()
    owner = context.Process(target=_hold, args=(path, ready, release))
    owner.start()
    try:
        assert ready.wait(30)
        from segshuffle.services.database import DatabaseInUseError
        with pytest.raises(DatabaseInUseError):
            Storage(path)
    finally:
        os.kill(owner.pid, signal.SIGKILL)  # type: ignore[arg-type]
        owner.join(30)
    Storage(path).close()  # the kernel dropped the dead owner's lock

"""What is PostgreSQL-specific in the shuffler's storage (services/shuffler/storage_postgres.py).

The behaviour every backend shares is tests/test_storage_contract.py.  Here: several
replicas (two :class:`PostgresStorage` objects, each with its own pool, on one fresh
database from ``postgres_url``, tests/postgres_support.py) racing on the same round,
token and invitation; migrations run by replicas starting together; reopening; a newer
schema; the message table's columns; large streams; a broken connection.
"""

# ruff: noqa: F811  (the imported ``postgres_url`` fixture is a parameter of each test)

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import TypeVar

import psycopg
import pytest

from segshuffle.services.postgres_base import identify, lock, migrate
from segshuffle.services.shuffler.backends import open_storage
from segshuffle.services.shuffler.storage_api import (
    RELEASED,
    AlreadySubmittedError,
    InvitationUsedError,
    RoundClosedError,
    RoundRecord,
    StorageError,
    StoredMessage,
)
from segshuffle.services.shuffler.storage_postgres import (
    COUNT_SHARDS,
    MIGRATIONS,
    PostgresStorage,
    _round_lock,
)
from segshuffle.services.sqlite_base import SchemaVersionError

from .postgres_support import postgres_url  # noqa: F401  (the fixture)

T = TypeVar("T")
WAIT = 60.0
"""Upper bound (seconds) on any wait for a thread of these tests."""


@contextmanager
def replica(url: str, pool_size: int = 4) -> Iterator[PostgresStorage]:
    """One replica's storage on ``url``, closed afterwards."""
    storage = PostgresStorage(url, pool_size=pool_size)
    try:
        yield storage
    finally:
        storage.close()


def submission(streams: dict[str, int]) -> list[StoredMessage]:
    """Random messages as the service makes them: random row keys, random sealed bytes."""
    return [StoredMessage(stream, secrets.token_bytes(16), secrets.token_bytes(40))
            for stream, count in streams.items() for _ in range(count)]


def stream_rows(storage: PostgresStorage, campaign: str, round_number: int, stream: str,
                page: int = 7000) -> list[tuple[bytes, bytes]]:
    """Every (row key, sealed) pair of a stream, read in keyset pages of ``page``."""
    found: list[tuple[bytes, bytes]] = []
    while rows := storage.sealed_rows(campaign, round_number, stream,
                                      after=found[-1][0] if found else b"", limit=page):
        assert len(rows) <= page
        found.extend(rows)
    return found


def race(first: Callable[[], T], second: Callable[[], T]) -> list[T | BaseException]:
    """Run two calls at once (released by one barrier); each one's result or exception."""
    barrier = threading.Barrier(2, timeout=WAIT)

    def call(function: Callable[[], T]) -> T | BaseException:
        barrier.wait()
        try:
            return function()
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(call, first), pool.submit(call, second)]
        return [future.result(timeout=WAIT) for future in futures]


def test_submissions_racing_a_close_on_another_replica_are_all_counted_or_refused(
        postgres_url: str) -> None:
    """Eight threads submit through two replicas while a third thread closes the round
    through one of them: the stream sizes count exactly the accepted submissions, whose
    messages (and only those) are stored; each refused one stored nothing."""
    threads, per_thread = 8, 300
    with replica(postgres_url) as one, replica(postgres_url) as two:
        accepted: list[tuple[bytes, list[StoredMessage]]] = []
        refused: list[tuple[bytes, list[StoredMessage]]] = []
        outcomes = threading.Lock()
        start = threading.Barrier(threads + 1, timeout=WAIT)

        def submitter(index: int) -> None:
            storage = (one, two)[index % 2]
            start.wait()
            for _ in range(per_thread):
                token = secrets.token_bytes(32)
                messages = submission({"levels": 1, "data": 2})
                try:
                    storage.submit("c", 2, token, messages)
                except RoundClosedError:
                    with outcomes:
                        refused.append((token, messages))
                    return
                with outcomes:
                    accepted.append((token, messages))

        def closer() -> RoundRecord:
            start.wait()
            deadline = time.monotonic() + WAIT
            while two.participants("c", 2) < 40 and time.monotonic() < deadline:
                time.sleep(0.005)
            return two.close_round("c", 2, minimum=1, batch_id="b", chunk_size=100,
                                   streams=["levels", "data"])

        with ThreadPoolExecutor(threads + 1) as pool:
            workers = [pool.submit(submitter, i) for i in range(threads)]
            closing = pool.submit(closer)
            record = closing.result(timeout=WAIT)
            for worker in workers:
                worker.result(timeout=WAIT)

        # The round closed while submissions were still arriving: every thread was refused.
        assert len(refused) == threads
        assert 40 <= len(accepted) < threads * per_thread
        assert record.participants == len(accepted) == one.participants("c", 2)
        assert dict(record.stream_sizes) == {"levels": len(accepted),
                                             "data": 2 * len(accepted)}
        stored = {m.row_key: m for _, messages in accepted for m in messages}
        kept = {}
        for stream in ("levels", "data"):
            rows = stream_rows(two, "c", 2, stream, page=13)
            assert len(rows) == record.stream_sizes[stream]
            assert {k for k, _ in rows} == {k for k, m in stored.items() if m.stream == stream}
            assert all(sealed == stored[k].sealed for k, sealed in rows)
            kept.update(rows)
        for token, messages in refused:
            assert not one.has_submitted("c", 2, token)
            assert not any(message.row_key in kept for message in messages)
        assert all(two.has_submitted("c", 2, token) for token, _ in accepted)


def _wait_for_a_lock_wait(url: str) -> None:
    """Return once some backend of the database waits for a lock (or fail after WAIT)."""
    deadline = time.monotonic() + WAIT
    with psycopg.connect(url, autocommit=True) as db:
        while time.monotonic() < deadline:
            row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type "
                             "= 'Lock' AND datname = current_database()").fetchone()
            if row is not None and row[0] > 0:
                return
            time.sleep(0.02)
    raise AssertionError("no submission started waiting")


def test_a_close_waits_for_a_submission_in_flight_on_another_replica(
        postgres_url: str) -> None:
    """A submission that has begun when another replica closes the round is counted:
    close_round waits for it to commit, then counts its messages.

    The submission is held in the database right after its closed check (holding the
    round's shared lock): an open transaction of a third connection has inserted the same
    participation row, so the submission's insert waits until that transaction rolls
    back."""
    with ExitStack() as stack:
        paused = stack.enter_context(replica(postgres_url, pool_size=2))
        other = stack.enter_context(replica(postgres_url))
        other.submit("c", 1, b"first", submission({"levels": 1}))
        late = submission({"levels": 1})
        holder = stack.enter_context(psycopg.connect(postgres_url))
        holder.execute("INSERT INTO participations (campaign_id, round, token_hash) "
                       "VALUES ('c', 1, %s)", (b"late",))
        with ThreadPoolExecutor(2) as pool:
            submitting = pool.submit(paused.submit, "c", 1, b"late", late)
            _wait_for_a_lock_wait(postgres_url)
            closing = pool.submit(other.close_round, "c", 1, minimum=1, batch_id="b",
                                  chunk_size=10, streams=["levels"])
            time.sleep(0.5)
            assert not closing.done() and not submitting.done()  # the submission in flight
            holder.rollback()
            assert submitting.result(timeout=WAIT) == 2
            record = closing.result(timeout=WAIT)
        assert record.participants == 2 and dict(record.stream_sizes) == {"levels": 2}
        assert late[0].row_key in dict(stream_rows(other, "c", 1, "levels"))


def test_the_same_token_racing_on_two_replicas_is_stored_once(postgres_url: str) -> None:
    with replica(postgres_url) as one, replica(postgres_url) as two:
        rounds = 25
        for attempt in range(rounds):
            token = secrets.token_bytes(32)
            a, b = submission({"levels": 1}), submission({"levels": 1})
            results = race(lambda: one.submit("c", 1, token, a),  # noqa: B023
                           lambda: two.submit("c", 1, token, b))  # noqa: B023
            errors = [r for r in results if isinstance(r, BaseException)]
            counts = [r for r in results if not isinstance(r, BaseException)]
            assert len(errors) == 1 and isinstance(errors[0], AlreadySubmittedError), results
            assert counts == [attempt + 1]
        assert one.participants("c", 1) == rounds
        assert two.pending_count("c", 1, "levels") == rounds


def test_an_invitation_racing_on_two_replicas_buys_one_token(postgres_url: str) -> None:
    with replica(postgres_url) as one, replica(postgres_url) as two:
        for _ in range(25):
            invitation = secrets.token_bytes(32)
            tokens = secrets.token_bytes(32), secrets.token_bytes(32)
            results = race(
                lambda: one.add_token_for_invitation("c", tokens[0], invitation, 10**10),  # noqa: B023
                lambda: two.add_token_for_invitation("c", tokens[1], invitation, 10**10))  # noqa: B023
            refusals = [r for r in results if isinstance(r, InvitationUsedError)]
            assert len(refusals) == 1 and results.count(None) == 1, results
            recorded = [one.token_campaign(token) for token in tokens]
            assert recorded.count("c") == 1 and recorded.count(None) == 1
            assert recorded[results.index(None)] == "c"  # the winner's token, not the other


def test_replicas_starting_together_migrate_once(postgres_url: str) -> None:
    count = 4
    barrier = threading.Barrier(count, timeout=WAIT)

    def start() -> PostgresStorage:
        barrier.wait()
        return PostgresStorage(postgres_url, pool_size=1)

    with ThreadPoolExecutor(count) as pool:
        storages = [f.result(timeout=WAIT) for f in [pool.submit(start) for _ in range(count)]]
    try:
        storages[0].add_token("c", b"t" * 32)
        assert all(s.token_campaign(b"t" * 32) == "c" for s in storages)
    finally:
        for storage in storages:
            storage.close()
    with psycopg.connect(postgres_url) as db:
        versions = db.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert versions == [(m.version,) for m in MIGRATIONS]


def test_reopening_keeps_the_data(postgres_url: str) -> None:
    messages = submission({"levels": 2, "data": 3})
    with replica(postgres_url) as storage:
        storage.add_token("c", b"t" * 32)
        storage.add_token_for_invitation("c", b"u" * 32, b"i" * 32, 10**10)
        storage.submit("c", 2, b"t" * 32, messages)
        record = storage.close_round("c", 2, minimum=1, batch_id="b", chunk_size=2,
                                     streams=["levels", "data"])
        storage.acknowledge(record, "data", 1)
    with replica(postgres_url) as storage:
        assert storage.token_campaign(b"t" * 32) == "c"
        assert storage.token_campaign(b"u" * 32) == "c"
        with pytest.raises(InvitationUsedError):
            storage.add_token_for_invitation("c", b"v" * 32, b"i" * 32, 10**10)
        assert storage.round_record("c", 2) == record and storage.releasing() == [record]
        assert storage.acknowledged(record) == {("data", 1)}
        assert storage.rounds_with_messages() == [("c", 2)]
        assert stream_rows(storage, "c", 2, "data") == sorted(
            (m.row_key, m.sealed) for m in messages if m.stream == "data")


def test_a_database_at_a_newer_schema_version_is_refused(postgres_url: str) -> None:
    with replica(postgres_url) as storage:
        storage.add_token("c", b"t" * 32)
    newer = len(MIGRATIONS) + 1
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("INSERT INTO schema_version (version, applied_at) VALUES (%s, 0)", (newer,))
    with pytest.raises(SchemaVersionError, match=f"schema version {newer}"):
        PostgresStorage(postgres_url, pool_size=1)
    with psycopg.connect(postgres_url) as db:  # refused, not written to
        assert db.execute("SELECT COUNT(*) FROM tokens").fetchone() == (1,)


def test_stored_messages_carry_no_user_and_no_time(postgres_url: str) -> None:
    """Unlinkability by schema: the message table has the round, the stream, the random
    row key and the sealed bytes, nothing else; no table has a timestamp column."""
    with replica(postgres_url):
        pass
    with psycopg.connect(postgres_url) as db:
        columns = db.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'pending' "
            "ORDER BY ordinal_position").fetchall()
        timed = db.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name <> 'schema_version' "
            "AND data_type LIKE 'time%%'").fetchall()
    assert [c for (c,) in columns] == ["campaign_id", "round", "stream", "row_key",
                                       "ciphertext"]
    assert timed == []


def test_large_streams_in_one_statement_each(postgres_url: str) -> None:
    """A 25 000-message submission is stored in one insert and read back in key order,
    page by page (pages of 7,000: the last one short), with no other stream's rows."""
    messages = submission({"data": 25_000})
    with replica(postgres_url) as storage:
        assert storage.submit("c", 2, b"t", messages) == 1
        record = storage.close_round("c", 2, minimum=1, batch_id="b", chunk_size=5000,
                                     streams=["levels", "data"])
        assert dict(record.stream_sizes) == {"levels": 0, "data": 25_000}
        assert record.chunk_count("data") == 5 and record.chunk_count("levels") == 1
        assert stream_rows(storage, "c", 2, "data") == sorted(
            (m.row_key, m.sealed) for m in messages)
        assert stream_rows(storage, "c", 2, "levels") == []


def test_a_reused_row_key_refuses_the_whole_submission(postgres_url: str) -> None:
    with replica(postgres_url) as storage:
        first = submission({"levels": 1})
        storage.submit("c", 1, b"u1", first)
        with pytest.raises(StorageError):
            storage.submit("c", 1, b"u2", [*submission({"levels": 1}), first[0]])
        assert storage.participants("c", 1) == 1 and not storage.has_submitted("c", 1, b"u2")
        assert storage.pending_count("c", 1, "levels") == 1


def test_forgetting_a_round_vacuums_the_message_table(postgres_url: str) -> None:
    with replica(postgres_url) as storage:
        for user in range(20):
            storage.submit("c", 1, bytes([user]), submission({"levels": 5}))
        storage.submit("d", 1, b"x", submission({"levels": 1}))
        storage.submit("c", 2, b"y", submission({"levels": 1, "data": 1}))
        storage.submit("c:1", 2, b"y", submission({"data": 1}))
        assert storage.rounds_with_messages() == [("c", 1), ("c", 2), ("c:1", 2), ("d", 1)]
        record = storage.close_round("c", 1, minimum=1, batch_id="b", chunk_size=10,
                                     streams=["levels"])
        finished = storage.finish_release(record)
        assert finished.state == RELEASED
        assert storage.rounds_with_messages() == [("c", 2), ("c:1", 2), ("d", 1)]
        discarded = storage.discard_round("d", 1, "the campaign aborted: test")
        assert discarded.reason == "the campaign aborted: test"
        assert storage.rounds_with_messages() == [("c", 2), ("c:1", 2)]
    with psycopg.connect(postgres_url, autocommit=True) as db:
        row = db.execute("SELECT vacuum_count FROM pg_stat_user_tables "
                         "WHERE relname = 'pending'").fetchone()
    assert row is not None and row[0] >= 1


def test_a_broken_connection_surfaces_as_a_psycopg_error_and_the_pool_recovers(
        postgres_url: str) -> None:
    with replica(postgres_url, pool_size=1) as storage:
        storage.add_token("c", b"t" * 32)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        with pytest.raises(psycopg.OperationalError):
            storage.token_campaign(b"t" * 32)
        deadline = time.monotonic() + WAIT
        while not storage.ping() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert storage.token_campaign(b"t" * 32) == "c"


def test_lock_waits_are_bounded(postgres_url: str) -> None:
    """A replica whose transaction holds a round's exclusive lock (here: a connection
    that took it and went quiet) makes a submission fail after ``lock_timeout`` seconds,
    with a psycopg error and nothing stored, instead of waiting for ever."""
    with pytest.raises(ValueError):
        PostgresStorage(postgres_url, lock_timeout=0)
    storage = PostgresStorage(postgres_url, pool_size=2, lock_timeout=0.3)
    try:
        with psycopg.connect(postgres_url) as holder:
            lock(holder, _round_lock("c", 1))
            started = time.monotonic()
            with pytest.raises(psycopg.errors.LockNotAvailable):
                storage.submit("c", 1, b"u", submission({"levels": 1}))
            assert 0.25 <= time.monotonic() - started < 10
            holder.rollback()
        assert storage.participants("c", 1) == 0 and storage.rounds_with_messages() == []
        assert storage.submit("c", 1, b"u", submission({"levels": 1})) == 1  # lock gone
    finally:
        storage.close()


def test_a_postgresql_database_setting_opens_this_backend(postgres_url: str) -> None:
    storage = open_storage(postgres_url, pool_size=2)
    try:
        assert isinstance(storage, PostgresStorage) and storage.ping()
    finally:
        storage.close()


def test_the_loop_statements_answer_as_the_threaded_ones(postgres_url: str) -> None:
    """The token lookup and the submission on the event loop's own pool (what the
    shuffler uses once started) give what the synchronous calls give, refusals included;
    before the pool is open, and after it is closed, they are refused, not run."""
    import asyncio

    from segshuffle.services.shuffler.storage_api import (
        LoopStatements,
        ReplayedCiphertextError,
    )

    async def scenario(storage: PostgresStorage) -> None:
        assert isinstance(storage, LoopStatements) and not storage.async_ready
        with pytest.raises(RuntimeError, match="open_async"):
            await storage.token_campaign_async(b"t" * 32)
        await storage.open_async()
        assert storage.async_ready
        try:
            storage.add_token("c", b"t" * 32)
            assert await storage.token_campaign_async(b"t" * 32) == "c"
            assert await storage.token_campaign_async(b"u" * 32) is None
            first = submission({"levels": 1})
            assert await storage.submit_async("c", 1, b"t" * 32, first) == 1
            with pytest.raises(AlreadySubmittedError):
                await storage.submit_async("c", 1, b"t" * 32, submission({"levels": 1}))
            with pytest.raises(ReplayedCiphertextError):
                await storage.submit_async("c", 1, b"v" * 32, first)
            assert storage.submit("c", 1, b"w" * 32, submission({"levels": 1})) == 2
            storage.close_round("c", 1, minimum=1, batch_id="b", chunk_size=10,
                                streams=["levels"])
            with pytest.raises(RoundClosedError):
                await storage.submit_async("c", 1, b"x" * 32, submission({"levels": 1}))
            assert storage.participants("c", 1) == 2
        finally:
            await storage.close_async()
        assert not storage.async_ready

    with replica(postgres_url) as storage:
        asyncio.run(scenario(storage))


# -- the participant count in shards (migration 5) -------------------------------------------

def _submit_statement(db: psycopg.Connection, token: bytes, lock_timeout: str = "2s") -> int:
    """One submission of round 1 of campaign ``c`` through ``shuffler_submit`` on ``db`` (in
    ``db``'s own transaction, left open unless ``db`` is in autocommit)."""
    row = db.execute("SELECT shuffler_submit('c', 1, %s, %s, %s, ARRAY['levels'], %s, %s)",
                     (token, _round_lock("c", 1), lock_timeout, [secrets.token_bytes(16)],
                      [secrets.token_bytes(40)])).fetchone()
    assert row is not None
    return int(row[0])


def test_submissions_in_flight_do_not_wait_for_each_other(postgres_url: str) -> None:
    """A submission commits while another one of the same round is still open.

    With one count row per round, the open transaction held that row's lock until it
    ended, so every other submission waited for it (and failed here after the 2 s lock
    timeout): concurrent submissions committed one after another, each with its own
    flush of the write-ahead log.  The answer of the one that commits first leaves out
    the one in flight, by fewer than ``count_lag``; every count read afterwards is exact."""
    with ExitStack() as stack:
        storage = stack.enter_context(replica(postgres_url, pool_size=1))
        held = stack.enter_context(psycopg.connect(postgres_url))
        held_shard = held.info.backend_pid % COUNT_SHARDS
        free = None
        for _ in range(8):  # a second backend on another shard (ids are rarely equal)
            candidate = stack.enter_context(psycopg.connect(postgres_url, autocommit=True))
            if candidate.info.backend_pid % COUNT_SHARDS != held_shard:
                free = candidate
                break
        assert free is not None
        assert _submit_statement(held, b"first") == 1  # open: its shard row stays locked
        started = time.monotonic()
        assert _submit_statement(free, b"second") == 1  # the first is not committed yet
        assert time.monotonic() - started < 1.5
        assert storage.participants("c", 1) == 1
        held.commit()
        assert storage.participants("c", 1) == 2
        assert storage.count_lag > 1  # the first answer (1) left out the one in flight
        record = storage.close_round("c", 1, minimum=2, batch_id="b", chunk_size=10,
                                     streams=["levels"])
        assert record.participants == 2 and dict(record.stream_sizes) == {"levels": 2}
        assert storage.rounds_with_messages() == [("c", 1)]
        assert storage.rounds_holding_messages() == [("c", 1)]


def test_counts_of_a_database_before_the_shards_carry_over(postgres_url: str) -> None:
    """A database at schema version 4 (one count row per round) opens with its counts
    intact, and later submissions add to them."""
    with psycopg.connect(postgres_url, autocommit=True) as db:
        identify(db, service="shuffler", where="test")
        migrate(db, MIGRATIONS[:4], service="shuffler")
        for index in range(3):
            _submit_statement(db, bytes([index]) * 32)
        assert db.execute("SELECT participants FROM participant_counts").fetchall() == [(3,)]
    with replica(postgres_url) as storage:
        assert storage.participants("c", 1) == 3
        assert storage.rounds_holding_messages() == [("c", 1)]
        assert storage.submit("c", 1, b"t" * 32, submission({"levels": 1})) == 4
        assert storage.participants("c", 1) == 4

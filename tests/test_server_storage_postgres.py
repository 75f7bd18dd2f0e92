"""What is specific to the server's PostgreSQL storage (the contract shared with SQLite is
tests/test_storage_contract.py): several replicas on one database, locks, migrations,
reopening, exact JSON round trips, set-based writes, and whole campaigns served by two
replicas of the server application.

Each test gets a fresh database (``postgres_url``, tests/postgres_support.py); two
:class:`PostgresRepository` objects on it stand for two replicas (separate pools, so
separate connections and sessions, as in separate processes).
"""

# ruff: noqa: F811  (the imported ``postgres_url`` fixture is a parameter of each test)
from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import psycopg
import pytest
from fastapi.testclient import TestClient

from segshuffle.core.estimator import estimate_frequencies
from segshuffle.services.server import create_app
from segshuffle.services.server.storage import Repository
from segshuffle.services.server.storage_api import (
    NULL_VALUE,
    BatchRecord,
    ChunkRecord,
    ConflictError,
    QueueEntry,
    ServerStorage,
)
from segshuffle.services.server.storage_postgres import (
    MIGRATIONS,
    PostgresRepository,
    PostgresTransaction,
)
from segshuffle.services.sqlite_base import SchemaVersionError

from . import test_server_flow
from .postgres_support import postgres_url  # noqa: F401  (the fixture)
from .test_server_support import (
    ADMIN,
    SHUFFLER,
    Sealer,
    complete_round,
    decoded,
    make_settings,
)

T = TypeVar("T")
WAIT = 60.0
"""Upper bound, in seconds, of every wait for a thread of these tests."""

Message = tuple[bytes, int | None]
"""An accepted message as chunk intake sees it: its nonce and its value (None: a null)."""


@contextmanager
def replica(url: str, **options: Any) -> Iterator[PostgresRepository]:
    """One server replica's storage on ``url``, closed afterwards."""
    repository = PostgresRepository(url, pool_size=2, **options)
    try:
        yield repository
    finally:
        repository.close()


def run_together(*calls: Callable[[], T]) -> list[T]:
    """Run the calls in threads released at the same instant; their results in order
    (the first exception raised by any of them is raised here)."""
    barrier = threading.Barrier(len(calls), timeout=WAIT)

    def start(call: Callable[[], T]) -> T:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(start, call) for call in calls]
        return [future.result(timeout=WAIT) for future in futures]


def intake(storage: ServerStorage, campaign: str, round_: int, batch: str, stream: str,
           index: int, count: int, messages: Sequence[Message], *, pause: float = 0.0
           ) -> tuple[str, list[bool]]:
    """Store one chunk the way the service does (``ServerService.store_chunk``): check
    inside the transaction whether it is stored, whether the round is open and which
    batch is pinned, then record the nonces, count the new ones and store the chunk.
    ``pause`` seconds between the checks and the writes widen the window another replica
    would need to slip in. Returns the outcome and, once stored, which messages were new.
    """
    with storage.transaction() as tx:
        phase = tx.phase(campaign)
        if tx.chunk(campaign, round_, stream, index) is not None:
            return "duplicate", []
        if phase != f"round{round_}":
            return "wrong-phase", []
        time.sleep(pause)
        pinned = tx.batch(campaign, round_)
        if pinned is None:
            tx.pin_batch(campaign, round_, batch)
        elif pinned.batch_id != batch:
            return "other-batch", []
        fresh = tx.insert_nonces(campaign, round_, [nonce for nonce, _ in messages])
        tx.add_counts(campaign, round_, stream, Counter(
            NULL_VALUE if value is None else value
            for (_, value), new in zip(messages, fresh, strict=True) if new))
        digest = hashlib.sha256(b"".join(nonce for nonce, _ in messages)).digest()
        tx.put_chunk(campaign, round_, stream, index,
                     ChunkRecord(batch, count, digest, {"accepted": sum(fresh)}))
    return "stored", fresh


def message(number: int) -> Message:
    """Message ``number``: a 16-byte nonce derived from it and a value that is a function
    of the nonce (every seventh a null), so totals do not depend on who counts it."""
    nonce = hashlib.sha256(number.to_bytes(8, "big")).digest()[:16]
    return nonce, None if number % 7 == 0 else number % 5


def overlapping_chunks(chunks: int, size: int, step: int) -> list[list[Message]]:
    """``chunks`` chunks of ``size`` messages, chunk k starting at message k * step (so
    consecutive chunks share size - step messages), each with its first message repeated
    at its end (a replay inside the chunk)."""
    result = []
    for k in range(chunks):
        part = [message(k * step + i) for i in range(size)]
        result.append([*part, part[0]])
    return result


def create(storage: ServerStorage, campaign: str) -> None:
    storage.create_campaign(campaign, {"id": campaign}, "hash", "key", b"public")


# -- two replicas ----------------------------------------------------------------------------

def test_two_replicas_taking_the_same_chunks_count_each_message_once(postgres_url: str
                                                                      ) -> None:
    """Both replicas receive every chunk (a shuffler retrying on another replica), at the
    same moments: each chunk is stored by exactly one, nothing fails, and the counts and
    per-message outcomes equal a serial execution by one replica."""
    chunks = overlapping_chunks(chunks=12, size=400, step=300)
    with replica(postgres_url) as one, replica(postgres_url) as two:
        create(one, "shared")
        create(one, "serial")

        def deliver(storage: PostgresRepository) -> list[tuple[str, list[bool]]]:
            return [intake(storage, "shared", 1, "b1", "levels", k, len(chunks), part)
                    for k, part in enumerate(chunks)]

        first, second = run_together(lambda: deliver(one), lambda: deliver(two))
        serial = [intake(one, "serial", 1, "b1", "levels", k, len(chunks), part)
                  for k, part in enumerate(chunks)]

        for k, (a, b) in enumerate(zip(first, second, strict=True)):
            assert sorted([a[0], b[0]]) == ["duplicate", "stored"], k
            stored = a if a[0] == "stored" else b
            assert stored == serial[k]  # same new/replay verdict for every message
        new_per_nonce: Counter[bytes] = Counter()
        for k, outcomes in enumerate(zip(first, second, strict=True)):
            stored = next(o for o in outcomes if o[0] == "stored")
            new_per_nonce.update(nonce for (nonce, _), new
                                 in zip(chunks[k], stored[1], strict=True) if new)
        distinct = {m for part in chunks for m in part}
        assert set(new_per_nonce) == {nonce for nonce, _ in distinct}
        assert set(new_per_nonce.values()) == {1}  # each nonce new exactly once
        expected = Counter(NULL_VALUE if value is None else value for _, value in distinct)
        assert one.counts("shared", 1, "levels") == two.counts("shared", 1, "levels") == \
            one.counts("serial", 1, "levels") == dict(expected)
        assert [c.chunk_index for c in two.stream_chunks("shared", 1, "levels")] == \
            list(range(len(chunks)))
        assert one.batch("shared", 1) == BatchRecord("b1", None)


def test_a_round_ended_by_one_replica_takes_no_chunk_of_the_other_afterwards(
        postgres_url: str) -> None:
    """One replica stores chunks slowly (a pause between its checks and its writes) while
    the other ends the round, recording which chunks it saw: the chunks stored at the end
    are exactly those, the later ones are refused, and the counts are theirs."""
    chunks = overlapping_chunks(chunks=8, size=50, step=50)
    with replica(postgres_url) as intake_side, replica(postgres_url) as ending_side:
        create(intake_side, "c")
        two_stored = threading.Event()
        outcomes: list[str] = []

        def deliver() -> None:
            for k, part in enumerate(chunks):
                outcomes.append(intake(intake_side, "c", 1, "b", "levels", k, len(chunks),
                                       part, pause=0.05)[0])
                if outcomes.count("stored") >= 2:
                    two_stored.set()

        def end_round() -> list[int]:
            assert two_stored.wait(WAIT)
            with ending_side.transaction() as tx:
                assert tx.phase("c") == "round1"
                seen = [k for k in range(len(chunks))
                        if tx.chunk("c", 1, "levels", k) is not None]
                tx.complete_batch("c", 1, {"chunks": seen})
                tx.publish_parameters("c", {"m": 1}, "ph", {"seen": seen})
                tx.delete_nonces("c", 1)
            return seen

        _, seen = run_together(deliver, end_round)
        assert 2 <= len(seen) < len(chunks)
        assert outcomes == ["stored"] * len(seen) + ["wrong-phase"] * (len(chunks) - len(seen))
        assert [c.chunk_index for c in intake_side.stream_chunks("c", 1, "levels")] == seen
        assert seen == list(range(len(seen)))
        stored_messages = {m for part in chunks[:len(seen)] for m in part}
        assert intake_side.counts("c", 1, "levels") == dict(Counter(
            NULL_VALUE if value is None else value for _, value in stored_messages))
        assert intake_side.phase("c") == "round2"
        assert intake_side.batch("c", 1) == BatchRecord("b", {"chunks": seen})


def test_a_transaction_that_raises_leaves_nothing_and_no_lock(postgres_url: str) -> None:
    with replica(postgres_url) as one, replica(postgres_url, lock_timeout=1.0) as two:
        create(one, "c")
        with pytest.raises(RuntimeError), one.transaction() as tx:
            tx.pin_batch("c", 1, "b")
            assert tx.insert_nonces("c", 1, [b"n1", b"n2"]) == [True, True]
            tx.add_counts("c", 1, "levels", {0: 2})
            tx.put_chunk("c", 1, "levels", 0, ChunkRecord("b", 1, b"d", {"r": 1}))
            tx.complete_batch("c", 1, {"done": True})
            tx.publish_parameters("c", {"m": 1}, "ph", {"r": 1})
            raise RuntimeError("abandon")
        record = two.campaign("c")
        assert record is not None and record.phase == "round1" and record.parameters is None
        assert two.batch("c", 1) is None and two.counts("c", 1, "levels") == {}
        assert two.stream_chunks("c", 1, "levels") == []
        started = time.monotonic()
        with two.transaction() as tx:  # the lock went with the rollback: no wait
            assert tx.insert_nonces("c", 1, [b"n2", b"n1"]) == [True, True]
        assert time.monotonic() - started < 0.9


def test_the_lock_timeout_is_set_once_per_pooled_connection(postgres_url: str,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """``lock_timeout`` is a setting of each pooled connection, made when the pool opens
    it: a transaction, a claim or a release sends no statement of its own for it."""
    with replica(postgres_url, lock_timeout=2.5) as storage:
        create(storage, "c")
        with storage._connection() as db:
            assert db.execute("SHOW lock_timeout").fetchone() == ("2500ms",)
        with storage.transaction() as tx:
            tx.pin_batch("c", 1, "b")
            tx.enqueue_chunk("c", 1, "levels", 0, QueueEntry("b", 1, b"d", (b"x",)))
        statements: list[str] = []
        pooled = storage._pool.connection

        @contextmanager
        def recording(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with pooled(*args, **kwargs) as db:
                class Recording:
                    def __getattr__(self, name: str) -> Any:
                        return getattr(db, name)

                    def execute(self, query: Any, *rest: Any, **named: Any) -> Any:
                        statements.append(str(query))
                        return db.execute(query, *rest, **named)
                yield Recording()

        monkeypatch.setattr(storage._pool, "connection", recording)
        with storage.transaction() as tx:
            assert tx.phase("c") == "round1"
        claimed = storage.claim_chunk("w", 60.0)
        assert claimed is not None
        assert storage.renew_claim(claimed.seq, "w", 60.0)
        assert storage.release_claim(claimed.seq, "w", failed=True)
        assert len(statements) == 5, statements  # lock + phase, claim, renew, release
        assert not [query for query in statements if "lock_timeout" in query]


def test_lock_waits_are_per_campaign_and_bounded(postgres_url: str) -> None:
    """While one replica's transaction holds campaign a, the other works on b at once, and
    its transaction on a fails after ``lock_timeout`` instead of waiting forever."""
    with replica(postgres_url) as holder, replica(postgres_url, lock_timeout=0.3) as other:
        create(holder, "a")
        create(holder, "b")
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with holder.transaction() as tx:
                tx.phase("a")
                holding.set()
                assert release.wait(WAIT)

        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(hold)
            assert holding.wait(WAIT)
            try:
                with other.transaction() as tx:
                    tx.pin_batch("b", 1, "x")
                started = time.monotonic()
                with pytest.raises(psycopg.errors.LockNotAvailable), \
                        other.transaction() as tx:
                    tx.phase("a")
                assert 0.25 <= time.monotonic() - started < 5.0
            finally:
                release.set()
            held.result(timeout=WAIT)
        with other.transaction() as tx:
            tx.pin_batch("a", 1, "y")
        assert other.batch("a", 1) == BatchRecord("y", None)
        assert other.batch("b", 1) == BatchRecord("x", None)


def test_racing_creations_of_one_campaign_let_exactly_one_win(postgres_url: str) -> None:
    with replica(postgres_url) as one, replica(postgres_url) as two:
        def attempt(storage: PostgresRepository, campaign: str, tag: str) -> str:
            try:
                storage.create_campaign(campaign, {"by": tag}, tag, "key", tag.encode())
            except ConflictError:
                return "refused"
            return tag

        for i in range(10):
            campaign = f"race-{i}"
            outcomes = run_together(lambda c=campaign: attempt(one, c, "one"),
                                    lambda c=campaign: attempt(two, c, "two"))
            assert sorted(outcomes) in (["one", "refused"], ["refused", "two"])
            winner = next(o for o in outcomes if o != "refused")
            record = two.campaign(campaign)
            assert record is not None
            assert (record.config, record.config_hash, record.public_key) == (
                {"by": winner}, winner, winner.encode())
        assert one.campaign_ids() == [f"race-{i}" for i in range(10)]


def test_pinning_or_storing_twice_is_a_conflict(postgres_url: str) -> None:
    with replica(postgres_url) as storage:
        create(storage, "c")
        with storage.transaction() as tx:
            tx.pin_batch("c", 1, "b")
            tx.put_chunk("c", 1, "levels", 0, ChunkRecord("b", 1, b"d", {"r": 1}))
        with pytest.raises(ConflictError), storage.transaction() as tx:
            tx.pin_batch("c", 1, "other")
        with pytest.raises(ConflictError), storage.transaction() as tx:
            tx.put_chunk("c", 1, "levels", 0, ChunkRecord("b", 1, b"e", {"r": 2}))
        assert storage.batch("c", 1) == BatchRecord("b", None)
        assert storage.chunk("c", 1, "levels", 0) == ChunkRecord("b", 1, b"d", {"r": 1})


# -- schema ----------------------------------------------------------------------------------

def versions(url: str) -> list[int]:
    with psycopg.connect(url) as db:
        return [r[0] for r in db.execute("SELECT version FROM schema_version ORDER BY version")]


def test_replicas_starting_together_migrate_once(postgres_url: str) -> None:
    def start() -> int:
        with replica(postgres_url) as storage:
            return len(storage.campaign_ids())

    assert run_together(start, start, start) == [0, 0, 0]
    assert versions(postgres_url) == [m.version for m in MIGRATIONS]


def test_reopening_keeps_the_data(postgres_url: str) -> None:
    with replica(postgres_url) as storage:
        create(storage, "keep")
        with storage.transaction() as tx:
            tx.pin_batch("keep", 1, "b")
            tx.insert_nonces("keep", 1, [b"n1", b"n2"])
            tx.add_counts("keep", 1, "levels", {0: 2, NULL_VALUE: 1})
            tx.put_chunk("keep", 1, "levels", 0, ChunkRecord("b", 1, b"d", {"r": 1}))
            tx.end_campaign("keep", "aborted", "operator said so")
        before = storage.campaign("keep")
    with replica(postgres_url) as storage:
        assert storage.campaign("keep") == before
        assert before is not None and before.end_reason == "operator said so"
        assert storage.counts("keep", 1, "levels") == {0: 2, NULL_VALUE: 1}
        assert storage.chunk("keep", 1, "levels", 0) == ChunkRecord("b", 1, b"d", {"r": 1})
        with storage.transaction() as tx:
            assert tx.insert_nonces("keep", 1, [b"n2", b"n3"]) == [False, True]
    assert versions(postgres_url) == [m.version for m in MIGRATIONS]


def test_a_newer_schema_is_refused(postgres_url: str) -> None:
    with replica(postgres_url) as storage:
        create(storage, "c")
    newer = MIGRATIONS[-1].version + 1
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("INSERT INTO schema_version (version, applied_at) VALUES (%s, 0)", (newer,))
    with pytest.raises(SchemaVersionError, match=f"schema version {newer}"):
        PostgresRepository(postgres_url)
    assert versions(postgres_url) == [*(m.version for m in MIGRATIONS), newer]


# -- records ---------------------------------------------------------------------------------

def test_records_round_trip_as_in_sqlite(postgres_url: str, tmp_path: Path) -> None:
    """The same writes give equal records on both backends, key order included, and ids
    sort and paginate by code point whatever the database's locale."""
    config = {"z": [1, 2.5, -0.0, 1e-300, 2**70], "a": {"é": "ünïcode ✓", "n": None},
              "m": True, "b": [{"y": 1, "x": [None, False]}]}
    receipt = {"failures": [{"type": "https://x/replay", "index": 3}], "accepted": 0.1}
    ids = ["b", "a-b", "A", "ab", "a.b", "a_b", "Z9", "a"]

    def write(storage: ServerStorage) -> list[Any]:
        for campaign in ids:
            storage.create_campaign(campaign, config, "h", "k", b"\x00\xffkey")
        with storage.transaction() as tx:
            tx.pin_batch("a", 1, "b1")
            tx.put_chunk("a", 1, "data", 0, ChunkRecord("b1", 1, b"\x00digest", receipt))
            tx.complete_batch("a", 1, {"streams": config, "phase": "round2"})
            tx.publish_parameters("a", config, "ph", receipt)
            tx.add_counts("a", 1, "data", {2**40: 3, NULL_VALUE: 2**40})
        with storage.transaction() as tx:
            tx.store_results("a", config)
        record = storage.campaign("a")
        batch = storage.batch("a", 1)
        assert record is not None and batch is not None and batch.completion is not None
        assert record.results is not None and record.parameters is not None
        return [record, list(record.config), list(record.results), list(record.parameters),
                batch, list(batch.completion), storage.chunk("a", 1, "data", 0),
                storage.stream_chunks("a", 1, "data"), storage.counts("a", 1, "data"),
                storage.campaign_ids(), storage.campaign_phases("a", 3),
                storage.campaign_phases(None, 2), storage.collecting_campaign_ids()]

    sqlite = Repository(tmp_path / "server.sqlite3")
    try:
        expected = write(sqlite)
    finally:
        sqlite.close()
    with replica(postgres_url) as storage:
        assert write(storage) == expected
    assert expected[9] == sorted(ids)


def test_nonces_and_counts_are_one_statement_each_whatever_the_size(postgres_url: str
                                                                     ) -> None:
    """5000 nonces (some repeated in the list, some stored before) are one INSERT whose
    answer matches a replay model; a chunk's counts are one INSERT."""
    numbers = [i % 4500 for i in range(5000)]  # 500 repeats inside the list
    nonces = [message(n)[0] for n in numbers]
    with replica(postgres_url) as storage:
        create(storage, "c")
        with storage.transaction() as tx:
            assert tx.insert_nonces("c", 1, nonces[:1000:3]) == [True] * 334
        with psycopg.connect(postgres_url, autocommit=True) as db, db.transaction():
            statements: list[str] = []

            class Recording:
                def execute(self, query: str, *args: Any) -> Any:
                    statements.append(query)
                    return db.execute(query, *args)

            tx = PostgresTransaction(Recording())  # type: ignore[arg-type]
            tx.phase("c")
            statements.clear()
            fresh = tx.insert_nonces("c", 1, nonces)
            tx.add_counts("c", 1, "data", Counter(numbers))
            assert len(statements) == 2
        seen = set(nonces[:1000:3])
        model = []
        for nonce in nonces:
            model.append(nonce not in seen)
            seen.add(nonce)
        assert fresh == model and sum(fresh) == 4500 - 334
        assert storage.counts("c", 1, "data") == dict(Counter(numbers))


# -- the server application on two replicas --------------------------------------------------

@pytest.mark.parametrize("name", [
    "test_insecure_campaign_counts_every_message_exactly",
    "test_estimates_match_the_core_estimator",
    "test_state_survives_a_restart",
])
def test_server_flow_on_postgresql(name: str, postgres_url: str, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Flows of tests/test_server_flow.py as written, their storage on PostgreSQL."""
    def settings(directory: Path, **changes: Any) -> Any:
        return make_settings(directory, database=postgres_url,
                             key_dir=str(directory / "keys"), **changes)

    monkeypatch.setattr(test_server_flow, "make_settings", settings)
    getattr(test_server_flow, name)(tmp_path)


def test_two_server_replicas_share_a_campaign(postgres_url: str, tmp_path: Path) -> None:
    """Two server applications on one database and key directory receive every chunk of
    both rounds at the same time: each chunk is queued once (the other replica answers
    with a duplicate receipt) and counted once by whichever replica's decode worker
    claims it, either replica completes, and the results are exactly the core
    estimator's on the messages sent."""
    settings = make_settings(tmp_path, database=postgres_url, key_dir=str(tmp_path / "keys"),
                             allow_insecure_parameters=True)
    with TestClient(create_app(settings)) as one, TestClient(create_app(settings)) as two:
        created = one.post("/v1/campaigns", headers=ADMIN, json={
            "id": "both", "domain_size": 4, "set_size": 1, "levels": [1, 2], "min_users": 4,
            "padding": False, "dropout_tolerance": 0.2,
            "insecure_parameters": {"m": 1.5, "lambdas": [0.5, 0.75]}})
        assert created.status_code == 201, created.text

        def send(round_: int, batch: str, streams: dict[str, list[str]]) -> None:
            path = f"/v1/campaigns/both/rounds/{round_}/batches/{batch}"
            for stream, ciphertexts in streams.items():
                parts = [ciphertexts[i:i + 3] for i in range(0, len(ciphertexts), 3)]
                for index, part in enumerate(parts):
                    body = {"chunk_index": index, "chunk_count": len(parts), "stream": stream,
                            "ciphertexts": part}
                    answers = run_together(
                        lambda body=body: one.put(path, json=body, headers=SHUFFLER),
                        lambda body=body: two.put(path, json=body, headers=SHUFFLER))
                    assert {a.status_code for a in answers} <= {200, 202}, answers[0].text
                    receipts = [a.json() for a in answers]
                    assert sorted(bool(r.get("duplicate")) for r in receipts) == [False, True]
                    receipts = [decoded(client, "both", round_, batch, stream, index)
                                for client in (one, two)]
                    assert receipts[0] == receipts[1]
                    assert receipts[0]["accepted"] == len(part)
            completed = complete_round(two, "both", round_, batch)
            assert completed.status_code == 200, completed.text
            again = one.post(path + "/complete", headers=SHUFFLER)
            assert again.json() == completed.json()

        send(1, "a", {"levels": Sealer(created.json(), 1).levels([0, 0, 1, 1, 1])})
        view = two.get("/v1/campaigns/both").json()
        assert view["phase"] == "round2" and view["parameters"]["users"] == 5
        sealer = Sealer(view, 2)
        values = [0, None, 3, 1, 1, None, 2, 2, 2, 3, None, None, 0, 0, 1]
        send(2, "b", {"levels": sealer.levels([0, 1, 1, 1]), "data": sealer.slots(values)})
        results = one.get("/v1/campaigns/both/results", headers=ADMIN).json()
        assert two.get("/v1/campaigns/both/results", headers=ADMIN).json() == results
    counts = np.bincount([v for v in values if v is not None], minlength=4)
    expected = estimate_frequencies(counts, [1, 3], [0.5, 0.75], 1.5)
    np.testing.assert_allclose([r["estimate"] for r in results["items"]], expected.values)
    np.testing.assert_allclose([r["standard_error"] for r in results["items"]],
                               expected.standard_errors)
    assert results["null_messages"] == values.count(None)
    assert results["round2_messages"] == len(values) and results["dropped_messages"] == 0

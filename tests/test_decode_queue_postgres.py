"""The decode queue on PostgreSQL with several replicas: concurrent claims skip each
other's rows (``FOR UPDATE SKIP LOCKED``) and every chunk is decoded and counted once.

Each replica is a :class:`ServerService` on its own :class:`PostgresRepository` (its own
pool, so its own connections, as in separate processes) sharing one database and one key
directory; the decode workers are threads calling what a worker task calls.
"""

# ruff: noqa: F811  (the imported ``postgres_url`` fixture is a parameter of each test)
from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from segshuffle.services.server import decoding as decoding_module
from segshuffle.services.server.decoding import DecodeWorkers
from segshuffle.services.server.decrypt import Decryptor
from segshuffle.services.server.keys import KeyStore
from segshuffle.services.server.service import ServerService
from segshuffle.services.server.storage_postgres import PostgresRepository
from segshuffle.wire.models import BatchChunk, CampaignCreate, CompletionPending

from .postgres_support import postgres_url  # noqa: F401  (the fixture)
from .test_server_support import Sealer

REPLICAS = 3
WORKERS_PER_REPLICA = 2
CHUNKS = 24
PER_CHUNK = 15
WAIT = 60.0


@pytest.fixture
def replicas(postgres_url: str, tmp_path: Path) -> Iterator[list[ServerService]]:
    """Three server replicas on one fresh database and one key directory."""
    with ExitStack() as stack:
        services = []
        for _ in range(REPLICAS):
            repository = PostgresRepository(postgres_url, pool_size=3, lock_timeout=10.0)
            stack.callback(repository.close)
            decryptor = Decryptor(workers=1)
            stack.callback(decryptor.close)
            services.append(ServerService(repository, KeyStore(tmp_path / "keys"), decryptor,
                                          signing_key=Ed25519PrivateKey.generate()))
        yield services


def _campaign(service: ServerService) -> Sealer:
    view = service.create_campaign(CampaignCreate.model_validate({
        "id": "pg", "domain_size": 4, "set_size": 1, "levels": [1, 2, 3], "min_users": 10,
        "dropout_tolerance": 0.0}))
    return Sealer(view.model_dump(mode="json"), 1)


def test_replicas_claim_concurrently_and_decode_every_chunk_once(
        replicas: list[ServerService]) -> None:
    """24 chunks queued through different replicas, six workers on three replicas claiming
    at once: every chunk is claimed and decoded exactly once, nothing is left queued, and
    the counts are exactly those of the messages (a replayed message counted once)."""
    sealer = _campaign(replicas[0])
    levels = [[(chunk + i) % 3 for i in range(PER_CHUNK)] for chunk in range(CHUNKS)]
    texts = [sealer.levels(part) for part in levels]
    texts[5][0] = texts[4][0]  # an exact replay of a message of another chunk
    for index, part in enumerate(texts):
        receipt = replicas[index % REPLICAS].store_chunk(
            "pg", 1, "b1", BatchChunk(chunk_index=index, chunk_count=CHUNKS, stream="levels",
                                      ciphertexts=part))
        assert receipt.state == "queued" and not receipt.duplicate
    assert replicas[1].repository.decode_backlog("pg", 1).queued == CHUNKS
    barrier = threading.Barrier(REPLICAS * WORKERS_PER_REPLICA, timeout=WAIT)

    def work(number: int) -> list[tuple[int, bool]]:
        service = replicas[number % REPLICAS]
        owner = f"worker-{number}"
        barrier.wait()
        done = []
        while (claimed := service.repository.claim_chunk(owner, 60.0)) is not None:
            done.append((claimed.seq, service.decode_claimed(claimed) is not None))
        return done

    with ThreadPoolExecutor(REPLICAS * WORKERS_PER_REPLICA) as pool:
        results = list(pool.map(work, range(REPLICAS * WORKERS_PER_REPLICA)))
    decoded = [seq for result in results for seq, _ in result]
    assert len(decoded) == len(set(decoded)) == CHUNKS  # each claimed once, by one worker
    assert all(counted for result in results for _, counted in result)
    assert sum(1 for result in results if result) >= 2  # the work was shared
    repository = replicas[2].repository
    assert repository.decode_backlog("pg", 1).queued == 0
    expected = Counter(level for part in levels for level in part)
    expected[levels[5][0]] -= 1  # the replay is not counted
    assert repository.counts("pg", 1, "levels") == dict(expected)
    receipts = [repository.chunk("pg", 1, "levels", i) for i in range(CHUNKS)]
    assert all(r is not None for r in receipts)
    replays = [r.receipt["replays"] for r in receipts if r is not None]
    assert sum(replays) == 1 and sum(replays[4:6]) == 1  # whichever of the two came second
    pending = replicas[1].complete("pg", 1, "b1")  # a job, computed by any replica
    assert isinstance(pending, CompletionPending) and pending.state == "waiting"
    job = replicas[0].repository.claim_completion("worker-0", 60.0)
    assert job is not None and replicas[2].repository.claim_completion("other", 60.0) is None
    completion = replicas[0].compute_completion(job)
    assert completion.phase == "round2"
    assert replicas[1].complete("pg", 1, "b1") == completion
    assert completion.streams["levels"].accepted == CHUNKS * PER_CHUNK - 1


def test_a_claim_skips_a_row_another_claimer_holds(replicas: list[ServerService],
                                                    postgres_url: str) -> None:
    """While another session holds the oldest row locked (a claim in progress), a claim
    takes the next row at once instead of waiting for it."""
    sealer = _campaign(replicas[0])
    for index in range(2):
        replicas[0].store_chunk("pg", 1, "b1", BatchChunk(
            chunk_index=index, chunk_count=2, stream="levels", ciphertexts=sealer.levels([0])))
    with psycopg.connect(postgres_url) as holder:
        oldest = holder.execute("SELECT seq FROM decode_queue ORDER BY seq LIMIT 1"
                                " FOR UPDATE").fetchone()
        assert oldest is not None
        started = time.monotonic()
        claimed = replicas[1].repository.claim_chunk("w", 60.0)
        assert time.monotonic() - started < 5.0  # lock_timeout is 10 s: no wait
        assert claimed is not None and claimed.seq != oldest[0] and claimed.chunk_index == 1
        assert replicas[2].repository.claim_chunk("w2", 60.0) is None
        holder.rollback()
    again = replicas[2].repository.claim_chunk("w2", 60.0)
    assert again is not None and again.seq == oldest[0]


# -- waking the other replicas -----------------------------------------------------------------

def _wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_a_chunk_queued_on_one_replica_wakes_the_workers_of_another(
        replicas: list[ServerService], monkeypatch: pytest.MonkeyPatch) -> None:
    """Replica B's worker found the queue empty and waits 30 s before it looks again; a
    chunk queued on replica A (no workers of its own) is announced to B at commit, and B
    decodes it at once."""
    monkeypatch.setattr(decoding_module, "IDLE_MIN_SECONDS", 30.0)
    sealer = _campaign(replicas[0])
    claims: list[float] = []
    repository = replicas[1].repository
    claim = repository.claim_chunk

    def counted(owner: str, lease_seconds: float) -> Any:
        claims.append(time.monotonic())
        return claim(owner, lease_seconds)

    monkeypatch.setattr(repository, "claim_chunk", counted)

    async def main() -> None:
        workers = DecodeWorkers(replicas[1], concurrency=1, idle_seconds=30.0)
        workers.start()
        try:
            await asyncio.sleep(1.0)  # B polled once, and listens
            assert len(claims) == 1
            queued = time.monotonic()
            await asyncio.to_thread(replicas[0].store_chunk, "pg", 1, "b1", BatchChunk(
                chunk_index=0, chunk_count=1, stream="levels",
                ciphertexts=sealer.levels([0, 1])))
            decoded = await asyncio.to_thread(
                _wait_until, lambda: repository.chunk("pg", 1, "levels", 0) is not None, 10.0)
            assert decoded, claims
            assert claims[1] - queued < 5.0
        finally:
            await workers.stop()

    asyncio.run(main())
    assert repository.counts("pg", 1, "levels") == {0: 1, 1: 1}


def test_a_listener_whose_connection_is_cut_listens_again(
        replicas: list[ServerService], postgres_url: str) -> None:
    """The listening connection is terminated by the database: the failure is reported,
    the listener connects again, and the next queued chunk is announced."""
    sealer = _campaign(replicas[0])
    # this test's database only: tests running beside it have listeners of their own
    ours = ("datname = current_database()"
            " AND query LIKE 'LISTEN segshuffle_decode_queue%'")
    heard: list[float] = []
    failures: list[tuple[str, float]] = []
    stop = threading.Event()
    listener = threading.Thread(target=replicas[1].repository.listen_for_queued_chunks,
                                args=(lambda: heard.append(time.monotonic()), stop,
                                      lambda exc, wait: failures.append((str(exc), wait))))

    def queue(index: int) -> None:
        replicas[0].store_chunk("pg", 1, "b1", BatchChunk(
            chunk_index=index, chunk_count=3, stream="levels", ciphertexts=sealer.levels([0])))

    def listening() -> int:
        with psycopg.connect(postgres_url, autocommit=True) as db:
            row = db.execute(f"SELECT count(*) FROM pg_stat_activity WHERE {ours}").fetchone()
        return 0 if row is None else int(row[0])

    listener.start()
    try:
        assert _wait_until(lambda: listening() == 1, 10.0)
        queue(0)
        assert _wait_until(lambda: len(heard) == 1, 10.0)
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {ours}")
        assert _wait_until(lambda: len(failures) == 1, 10.0)
        assert failures[0][1] == 0.5
        assert _wait_until(lambda: listening() == 1, 10.0)
        queue(1)
        assert _wait_until(lambda: len(heard) == 2, 10.0)
    finally:
        stop.set()
        listener.join(10.0)
    assert not listener.is_alive()

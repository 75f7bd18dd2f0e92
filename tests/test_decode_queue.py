"""The server's decode queue through its HTTP API and its decode workers (SQLite).

A chunk is queued by the request that delivers it (``202``, ``state: "queued"``) and
decoded by the application's background workers; these tests hold the workers back (a
``TestClient`` used without ``with`` runs no lifespan, so no worker) to look at the queue
itself, kill a worker after its claim, and make a decoding fail once.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from segshuffle.services.server import create_app
from segshuffle.services.server import decoding as decoding_module
from segshuffle.services.server.decoding import DecodeWorkers
from segshuffle.services.server.storage_api import ClaimedChunk

from .observability_support import samples, value
from .test_server_support import (
    ADMIN,
    SHUFFLER,
    Sealer,
    complete_round,
    decoded,
    make_settings,
)

CAMPAIGN = {"id": "q", "domain_size": 4, "set_size": 1, "levels": [1, 2], "min_users": 3,
            "dropout_tolerance": 0.0}
BATCH = "/v1/campaigns/q/rounds/1/batches/b1"
DEAD_LEASE = 2.0
"""Seconds a dead worker's claim holds in the test of a worker killed mid-decode."""


def _chunk(ciphertexts: list[str], index: int = 0, count: int = 2) -> dict[str, Any]:
    return {"chunk_index": index, "chunk_count": count, "stream": "levels",
            "ciphertexts": ciphertexts}


def _receipt(client: TestClient, index: int) -> dict[str, Any]:
    response = client.get(f"{BATCH}/chunks/levels/{index}", headers=SHUFFLER)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _problem(response: Any, name: str, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:segshuffle:error:{name}", body
    return body


@pytest.fixture
def idle(tmp_path: Path) -> tuple[TestClient, Any, Sealer]:
    """A server whose decode workers have not started, with campaign ``q``."""
    app = create_app(make_settings(tmp_path, decode_lease_seconds=5.0,
                                   decode_idle_seconds=0.2))
    client = TestClient(app, raise_server_exceptions=False)  # no lifespan: no workers
    view = client.post("/v1/campaigns", json=CAMPAIGN, headers=ADMIN).json()
    return client, app, Sealer(view, 1)


@pytest.mark.slow  # over 10 s on a 2-core machine: the fast tier stays within 3 minutes
def test_chunks_wait_in_the_queue_until_decoded(idle: tuple[TestClient, Any, Sealer]
                                                ) -> None:
    """Intake answers from the queue (202, queued receipts, the same refusals as for stored
    chunks), complete waits for it with Retry-After, and the workers then decode it."""
    client, app, sealer = idle
    first, second = _chunk(sealer.levels([0, 1, 1])), _chunk(sealer.levels([1, 0]), 1)
    answer = client.put(BATCH, json=first, headers=SHUFFLER)
    assert answer.status_code == 202
    queued = answer.json()
    assert (queued["state"], queued["received"], queued["accepted"], queued["duplicate"],
            queued["failures"], queued["failure_counts"]) == ("queued", 3, 0, False, [], {})
    again = client.put(BATCH, json=first, headers=SHUFFLER)
    assert again.status_code == 202 and again.json() == queued | {"duplicate": True}
    _problem(client.put(BATCH, json=_chunk(sealer.levels([0, 1, 1])), headers=SHUFFLER),
             "conflict", 409)  # other content under a queued chunk's identity
    _problem(client.put(BATCH, json=_chunk([], 1, 3), headers=SHUFFLER), "conflict", 409)
    _problem(client.put("/v1/campaigns/q/rounds/1/batches/other", json=_chunk([], 1),
                        headers=SHUFFLER), "conflict", 409)
    assert client.put(BATCH, json=second, headers=SHUFFLER).status_code == 202
    assert _receipt(client, 0) == queued
    _problem(client.get(f"{BATCH}/chunks/levels/2", headers=SHUFFLER), "not-found", 404)
    _problem(client.get("/v1/campaigns/q/rounds/1/batches/zz/chunks/levels/0",
                        headers=SHUFFLER), "not-found", 404)
    _problem(client.get(f"{BATCH}/chunks/nulls/0", headers=SHUFFLER), "invalid-field", 422)
    _problem(client.get(f"{BATCH}/chunks/levels/-1", headers=ADMIN), "invalid-field", 422)
    _problem(client.get(f"{BATCH}/chunks/levels/0"), "unauthorized", 401)
    waiting = _problem(client.post(BATCH + "/complete", headers=SHUFFLER), "unavailable", 503)
    assert waiting["queued_chunks"] == 2
    assert client.post(BATCH + "/complete", headers=SHUFFLER).headers["retry-after"] == "1"
    with TestClient(app) as running:  # the workers start
        receipts = [decoded(running, "q", 1, "b1", "levels", i) for i in (0, 1)]
        assert [r["accepted"] for r in receipts] == [3, 2]
        repeat = running.put(BATCH, json=first, headers=SHUFFLER)
        assert repeat.status_code == 200
        assert repeat.json() == receipts[0] | {"duplicate": True}
        assert _receipt(running, 0) == receipts[0]  # the admin may read it too
        done = complete_round(running, "q", 1, "b1")
        assert done.status_code == 200, done.text
        assert done.json()["streams"]["levels"]["accepted"] == 5
        metrics = running.get("/metrics").text
    assert 'segshuffle_server_chunks_queued_total{round="1",stream="levels"} 2.0' in metrics
    assert 'segshuffle_server_chunks_stored_total{round="1",stream="levels"} 2.0' in metrics


@pytest.mark.slow  # over 8 s: the fast tier stays within 3 minutes
def test_a_chunk_claimed_by_a_dead_worker_is_decoded_once_its_lease_expires(
        idle: tuple[TestClient, Any, Sealer]) -> None:
    """A worker that claimed a chunk and died (here: a claim never finished) delays the
    round by its lease, never loses the chunk: then a live worker claims and counts it."""
    client, app, sealer = idle
    service = app.state.service
    for index, levels in enumerate([[0, 1, 1], [1, 0]]):
        assert client.put(BATCH, json=_chunk(sealer.levels(levels), index),
                          headers=SHUFFLER).status_code == 202
    claimed = service.repository.claim_chunk("a process killed mid-decode", DEAD_LEASE)
    started = time.monotonic()
    assert claimed is not None and claimed.chunk_index == 0
    with TestClient(app) as running:
        other = decoded(running, "q", 1, "b1", "levels", 1)  # not held up by the dead claim
        assert other["accepted"] == 2
        assert _receipt(running, 0)["state"] == "queued"
        waiting = running.post(BATCH + "/complete", headers=SHUFFLER)
        assert _problem(waiting, "unavailable", 503)["queued_chunks"] == 1
        assert time.monotonic() - started < DEAD_LEASE  # all of that while the lease held
        late = decoded(running, "q", 1, "b1", "levels", 0)
        assert time.monotonic() - started >= DEAD_LEASE  # decoded once it expired
        assert late["accepted"] == 3
        done = complete_round(running, "q", 1, "b1")
        assert done.status_code == 200, done.text
        assert done.json()["streams"]["levels"]["accepted"] == 5
        assert service.repository.counts("q", 1, "levels") == {0: 2, 1: 3}
        assert not service.repository.renew_claim(claimed.seq, "a process killed mid-decode",
                                                  1.0)


def test_abort_drops_the_queued_chunks(idle: tuple[TestClient, Any, Sealer]) -> None:
    client, app, sealer = idle
    assert client.put(BATCH, json=_chunk(sealer.levels([0, 1])), headers=SHUFFLER
                      ).status_code == 202
    aborted = client.post("/v1/campaigns/q/abort", json={"reason": "enough"}, headers=ADMIN)
    assert aborted.status_code == 200 and aborted.json()["phase"] == "aborted"
    assert app.state.service.repository.decode_backlog("q", 1).queued == 0
    _problem(client.get(f"{BATCH}/chunks/levels/0", headers=SHUFFLER), "not-found", 404)
    _problem(client.put(BATCH, json=_chunk(sealer.levels([0, 1])), headers=SHUFFLER),
             "wrong-phase", 409)


def test_a_decoding_that_fails_is_tried_again_later(idle: tuple[TestClient, Any, Sealer],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    client, app, sealer = idle
    monkeypatch.setattr(decoding_module, "RETRY_DELAY_SECONDS", 0.2)
    decryptor = app.state.service.decryptor
    opened = decryptor.open
    failures = []

    def open_once_broken(*args: Any) -> Any:
        if not failures:
            failures.append(time.monotonic())
            raise RuntimeError("a transient failure")
        return opened(*args)

    monkeypatch.setattr(decryptor, "open", open_once_broken)
    assert client.put(BATCH, json=_chunk(sealer.levels([0, 1]), count=1),
                      headers=SHUFFLER).status_code == 202
    with TestClient(app) as running:
        receipt = decoded(running, "q", 1, "b1", "levels", 0)
        assert app.state.service.repository.counts("q", 1, "levels") == {0: 1, 1: 1}
    assert receipt["accepted"] == 2 and len(failures) == 1


def test_retry_delay_doubles_up_to_its_cap() -> None:
    assert [decoding_module.retry_delay(f) for f in (1, 2, 3, 4)] == [5.0, 10.0, 20.0, 40.0]
    assert decoding_module.retry_delay(7) == 300.0 == decoding_module.retry_delay(10**6)
    with pytest.raises(ValueError):
        decoding_module.retry_delay(0)


def test_a_chunk_that_keeps_failing_backs_off_and_is_reported(
        idle: tuple[TestClient, Any, Sealer], monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk that cannot be decoded is neither dropped nor retried at a fixed pace: the
    waits between attempts double, every failure is counted in ``decode_failures``,
    ``complete`` says how many chunks are failing, and once the cause is gone the chunk
    is decoded and the round completes with every message."""
    client, app, sealer = idle
    monkeypatch.setattr(decoding_module, "RETRY_DELAY_SECONDS", 0.1)
    monkeypatch.setattr(decoding_module, "MAX_RETRY_DELAY_SECONDS", 0.4, raising=False)
    decryptor = app.state.service.decryptor
    opened = decryptor.open
    attempts: list[float] = []
    broken = threading.Event()
    broken.set()

    def open_while_broken(*args: Any) -> Any:
        if broken.is_set():
            attempts.append(time.monotonic())
            raise RuntimeError("the key file is unreadable")
        return opened(*args)

    monkeypatch.setattr(decryptor, "open", open_while_broken)
    assert client.put(BATCH, json=_chunk(sealer.levels([0, 1]), count=1),
                      headers=SHUFFLER).status_code == 202
    with TestClient(app, raise_server_exceptions=False) as running:
        deadline = time.monotonic() + 30
        while len(attempts) < 5:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
        assert gaps[0] >= 0.09 and gaps[1] >= 0.19 and gaps[2] >= 0.39, gaps
        assert gaps[3] < 1.5, gaps  # capped at 0.4 s (plus the idle poll)
        answer = running.post(BATCH + "/complete", headers=SHUFFLER)
        waiting = _problem(answer, "unavailable", 503)
        assert (waiting["queued_chunks"], waiting["failing_chunks"]) == (1, 1)
        assert answer.headers["retry-after"] == "30"  # it waits for an operator
        assert "failed to decode" in waiting["detail"]
        failed = value(samples(running), "segshuffle_server_decode_failures_total",
                       round="1", stream="levels")
        assert failed >= 5, failed
        broken.clear()
        receipt = decoded(running, "q", 1, "b1", "levels", 0)
        assert receipt["accepted"] == 2
        assert app.state.service.repository.counts("q", 1, "levels") == {0: 1, 1: 1}
        assert app.state.service.repository.decode_backlog("q", 1).queued == 0


# -- the workers on their own ------------------------------------------------------------------

class CountingQueue:
    """A storage whose queue is empty and counts the claims; ``hold`` makes a claim wait
    (and then return ``claim``) until it is set."""

    def __init__(self, claim: ClaimedChunk | None = None) -> None:
        self.claims = 0
        self.claim = claim
        self.hold = threading.Event()
        self.hold.set()
        self.claimed = threading.Event()
        self.released: list[tuple[int, str, float]] = []

    def claim_chunk(self, owner: str, lease_seconds: float) -> ClaimedChunk | None:
        self.claims += 1
        self.claimed.set()
        assert self.hold.wait(30)
        return self.claim

    def release_claim(self, seq: int, owner: str, delay_seconds: float = 0.0, *,
                      failed: bool = False) -> bool:
        self.released.append((seq, owner, delay_seconds))
        return True

    def listen_for_queued_chunks(self, *args: Any) -> None:
        return None  # one process: nothing to hear from


class NoService:
    def __init__(self, repository: CountingQueue) -> None:
        self.repository = repository


def test_an_idle_worker_is_woken_at_once() -> None:
    """Idle polls back off (0.05 s doubling, here to 60 s); a wake from another thread
    makes the next claim at once."""
    queue = CountingQueue()

    async def main() -> None:
        workers = DecodeWorkers(NoService(queue), concurrency=1,  # type: ignore[arg-type]
                                idle_seconds=60.0)
        workers.start()
        try:
            deadline = time.monotonic() + 30
            while queue.claims < 5:  # polls at about 0, .05, .15, .35, .75 s; next at 1.55
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            before = queue.claims
            await asyncio.to_thread(workers.wake)
            for _ in range(50):
                if queue.claims > before:
                    break
                await asyncio.sleep(0.01)
            assert queue.claims == before + 1
        finally:
            await workers.stop()

    asyncio.run(main())


def test_stopping_gives_back_a_claim_taken_meanwhile() -> None:
    """A worker stopped while its claim is in flight waits for it and gives it back at
    once, rather than leaving it to expire."""
    chunk = ClaimedChunk(seq=7, campaign_id="c", round=1, stream="levels", chunk_index=0,
                         batch_id="b", chunk_count=1, digest=b"d", received=0, owner="me",
                         attempts=1, failures=0, ciphertexts=())
    queue = CountingQueue(chunk)
    queue.hold.clear()

    async def main() -> None:
        workers = DecodeWorkers(NoService(queue), concurrency=1)  # type: ignore[arg-type]
        workers.start()
        assert await asyncio.to_thread(queue.claimed.wait, 30)
        stopping = asyncio.get_running_loop().create_task(workers.stop())
        await asyncio.sleep(0.05)
        assert not stopping.done()  # waits for the claim in flight
        queue.hold.set()
        await asyncio.wait_for(stopping, 30)
        assert queue.released == [(7, workers.owner, 0.0)]

    asyncio.run(main())


def test_a_long_decoding_renews_its_claim() -> None:
    """The claim is renewed every third of the lease while its chunk is decoded, and the
    receipt goes to ``on_decoded``."""
    chunk = ClaimedChunk(seq=3, campaign_id="c", round=1, stream="levels", chunk_index=0,
                         batch_id="b", chunk_count=1, digest=b"d", received=0, owner="me",
                         attempts=1, failures=0, ciphertexts=())
    renewals: list[tuple[int, float]] = []

    class OneChunk(CountingQueue):
        def claim_chunk(self, owner: str, lease_seconds: float) -> ClaimedChunk | None:
            self.claims += 1
            return chunk if self.claims == 1 else None

        def renew_claim(self, seq: int, owner: str, lease_seconds: float) -> bool:
            renewals.append((seq, lease_seconds))
            return True

    queue = OneChunk()

    class SlowService(NoService):
        def decode_claimed(self, claimed: ClaimedChunk) -> str:
            time.sleep(0.5)
            return f"receipt of {claimed.seq}"

    decoded_receipts: list[Any] = []

    async def main() -> None:
        workers = DecodeWorkers(SlowService(queue), concurrency=1,  # type: ignore[arg-type]
                                lease_seconds=0.3, on_decoded=decoded_receipts.append)
        workers.start()
        try:
            for _ in range(300):
                if decoded_receipts:
                    break
                await asyncio.sleep(0.01)
        finally:
            await workers.stop()

    asyncio.run(main())
    assert decoded_receipts == ["receipt of 3"]
    assert len(renewals) >= 2 and set(renewals) == {(3, 0.3)}

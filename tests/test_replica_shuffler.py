"""Shuffler state shared by replicas: round-key files in one directory and the release
lease in one database (docs/architecture.md, "Replicas")."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from segshuffle.services.shuffler import vault
from segshuffle.services.shuffler.release import Releaser
from segshuffle.services.shuffler.storage import Storage
from segshuffle.services.shuffler.storage_api import (
    RELEASED,
    ShufflerStorage,
    StoredMessage,
)
from segshuffle.services.shuffler.storage_postgres import PostgresStorage
from segshuffle.services.shuffler.upstream import ServerLink
from segshuffle.services.shuffler.vault import RoundKeyMissingError, RoundKeys
from tests.postgres_support import fresh_database

# -- round keys ------------------------------------------------------------------------------


def test_replicas_racing_to_create_a_round_key_get_the_same_key(tmp_path: Path) -> None:
    """Each thread stands for a replica (its own RoundKeys) creating the round's key on
    its first submission at the same moment: every one must end with the same key."""
    replicas = 8
    for round_number in range(40):
        stores = [RoundKeys(tmp_path) for _ in range(replicas)]
        barrier = threading.Barrier(replicas)
        tags: list[bytes] = []
        failures: list[BaseException] = []

        def create(keys: RoundKeys, barrier: threading.Barrier = barrier,
                   tags: list[bytes] = tags, failures: list[BaseException] = failures,
                   round_number: int = round_number) -> None:
            barrier.wait(timeout=10)
            try:
                key = keys.get("race", round_number, create=True)
                tags.append(key.order_tags(bytes(16)))
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=create, args=(k,)) for k in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert failures == []
        assert len(tags) == replicas and len(set(tags)) == 1, f"round {round_number}"
    assert list(tmp_path.glob(".*.tmp")) == []  # no temporary file left behind


def test_a_key_destroyed_by_another_replica_is_forgotten_here(tmp_path: Path) -> None:
    first, second = RoundKeys(tmp_path), RoundKeys(tmp_path, recheck_seconds=0)
    first.get("c", 1, create=True)
    second.get("c", 1)  # cached by the second replica
    first.destroy("c", 1)  # the first finished the round
    with pytest.raises(RoundKeyMissingError):
        second.get("c", 1)


def test_a_cached_key_file_is_looked_at_once_per_recheck_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A submission does not stat the key file: a cached key is used as is for
    ``recheck_seconds``, then its file is looked at once; a file another replica
    destroyed meanwhile makes this replica forget the key at that look."""
    clock = [1000.0]
    monkeypatch.setattr(vault.time, "monotonic", lambda: clock[0])
    first, second = RoundKeys(tmp_path), RoundKeys(tmp_path, recheck_seconds=1.0)
    made = first.get("c", 1, create=True)
    cached = second.get("c", 1)
    looks: list[Path] = []
    exists = Path.exists

    def counted(path: Path, *args: object, **kwargs: object) -> bool:
        looks.append(path)
        return exists(path)

    monkeypatch.setattr(Path, "exists", counted)
    for _ in range(100):
        assert second.get("c", 1) is cached
    assert looks == []
    clock[0] += 1.5
    assert second.get("c", 1) is cached and len(looks) == 1
    assert second.get("c", 1) is cached and len(looks) == 1  # checked again just now
    first.destroy("c", 1)
    assert second.get("c", 1) is cached  # within the interval: still in use here
    clock[0] += 1.5
    with pytest.raises(RoundKeyMissingError):
        second.get("c", 1)
    assert made.order_tags(bytes(16)) == cached.order_tags(bytes(16))


def test_the_start_up_sweep_spares_a_key_another_replica_just_made(tmp_path: Path) -> None:
    """Replica A made the key of a round whose first submission has not committed yet
    (no stored message): replica B starting now must not destroy it."""
    storage = Storage(tmp_path / "shuffler.sqlite3")
    keys = RoundKeys(tmp_path / "keys")
    made = keys.get("c", 1, create=True)
    starting = Releaser(storage, ServerLink("http://127.0.0.1:9", "t"),
                        RoundKeys(tmp_path / "keys"), chunk_size=5)

    async def start() -> None:
        starting.resume_all()
        await starting.shutdown()

    asyncio.run(start())
    assert keys.get("c", 1).order_tags(bytes(16)) == made.order_tags(bytes(16))
    storage.close()


# -- the release lease -----------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ShufflerStorage]:
    """One shuffler database (SQLite file or fresh PostgreSQL database)."""
    if request.param == "sqlite":
        store: ShufflerStorage = Storage(tmp_path / "shuffler.sqlite3")
        yield store
        store.close()
        return
    with fresh_database() as url:
        store = PostgresStorage(url)
        yield store
        store.close()


def _closed_round(storage: ShufflerStorage, keys: RoundKeys, users: int = 6) -> None:
    """Round 1 of campaign ``c`` with ``users`` submissions, closed for release."""
    key = keys.get("c", 1, create=True)
    for user in range(users):
        row = bytes([user]) * 16
        storage.submit("c", 1, bytes([user]) * 32,
                       [StoredMessage("levels", row, key.seal("c", 1, "levels", row, b"m"))])
    storage.close_round("c", 1, minimum=1, batch_id="b", chunk_size=2, streams=["levels"])


def test_lease_take_renew_expire_stop_force(storage: ShufflerStorage, tmp_path: Path) -> None:
    assert not storage.take_release_lease("c", 1, "a", 5.0)  # an open round has none
    _closed_round(storage, RoundKeys(tmp_path / "keys"))
    assert storage.take_release_lease("c", 1, "a", 0.5)
    assert not storage.take_release_lease("c", 1, "b", 5.0)  # held by a
    assert storage.take_release_lease("c", 1, "a", 0.5)  # renewed by its holder
    time.sleep(0.7)
    assert storage.take_release_lease("c", 1, "b", 5.0)  # a let it expire
    assert not storage.take_release_lease("c", 1, "a", 5.0, force=True)  # b is alive
    storage.stop_release_lease("c", 1, "a")  # not a's: nothing changes
    assert not storage.take_release_lease("c", 1, "a", 5.0)
    storage.stop_release_lease("c", 1, "b")  # b gave up
    assert not storage.take_release_lease("c", 1, "a", 5.0)  # a scan leaves it alone
    assert storage.take_release_lease("c", 1, "a", 5.0, force=True)  # a release request
    storage.drop_release_lease("c", 1, "a")
    assert storage.take_release_lease("c", 1, "b", 5.0)  # dropped: free at once
    record = storage.round_record("c", 1)
    assert record is not None
    storage.finish_release(record)
    assert not storage.take_release_lease("c", 1, "b", 5.0)  # finished: no lease
    assert storage.finished_rounds() == [("c", 1)]


def test_a_replica_takes_over_a_dead_replicas_forwarding(storage: ShufflerStorage,
                                                         tmp_path: Path) -> None:
    """A replica died holding the lease: the others' scan leaves the round alone until
    the lease expires, then one of them takes it over (and only one)."""
    keys = tmp_path / "keys"
    _closed_round(storage, RoundKeys(keys))
    assert storage.take_release_lease("c", 1, "dead replica", 1.0)
    # the server is unreachable (nothing listens on port 9): forwarding keeps retrying
    link = ServerLink("http://127.0.0.1:9", "t")
    # The replicas' own leases are long, so that a busy machine cannot let the taker's
    # lapse before its forwarding is looked at (only the dead replica's is short).
    replicas = [Releaser(storage, link, RoundKeys(keys), chunk_size=2, lease_seconds=60.0)
                for _ in range(2)]

    async def main() -> list[int]:
        taken = [await r.take_over() for r in replicas]
        await asyncio.sleep(1.2)
        taken += [await r.take_over() for r in replicas]
        forwarding = [r.forwarding("c", 1) for r in replicas]
        for replica in replicas:
            await replica.shutdown()
        await link.aclose()
        return taken + [int(f) for f in forwarding]

    before_a, before_b, after_a, after_b, forwarding_a, forwarding_b = asyncio.run(main())
    assert (before_a, before_b) == (0, 0)
    assert sorted([after_a, after_b]) == [0, 1]
    assert (forwarding_a, forwarding_b) == (after_a, after_b)
    # shutting down let go of the lease: a third replica may take it at once
    assert storage.take_release_lease("c", 1, "third", 5.0)


def test_a_release_request_waits_for_the_replica_that_holds_the_lease(
        storage: ShufflerStorage, tmp_path: Path) -> None:
    """The operator asks replica B while replica A forwards: B's answer is A's outcome."""
    keys = tmp_path / "keys"
    _closed_round(storage, RoundKeys(keys))
    assert storage.take_release_lease("c", 1, "replica A", 30.0)
    record = storage.round_record("c", 1)
    assert record is not None
    link = ServerLink("http://127.0.0.1:9", "t")
    replica_b = Releaser(storage, link, RoundKeys(keys), chunk_size=2, lease_seconds=1.0)

    async def main() -> str:
        task = replica_b.schedule(record, force=True)
        await asyncio.sleep(0.6)
        assert replica_b.last_error[("c", 1)] == "forwarded by another replica"
        await asyncio.to_thread(storage.finish_release, record)  # A is done
        finished = await asyncio.wait_for(task, 10)
        await link.aclose()
        return finished.state

    assert asyncio.run(main()) == RELEASED


class _SlowLease:
    """A storage whose lease-taking takes a while in its worker thread."""

    def __init__(self, storage: ShufflerStorage, delay: float) -> None:
        self._storage = storage
        self._delay = delay

    def take_release_lease(self, *args: object, **kwargs: object) -> bool:
        time.sleep(self._delay)
        return bool(self._storage.take_release_lease(*args, **kwargs))  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self._storage, name)


def test_a_forwarding_cancelled_while_taking_the_lease_lets_it_go(
        storage: ShufflerStorage, tmp_path: Path) -> None:
    """Shut down while a worker thread is taking the lease: once the thread has taken it,
    the cancelled forwarding gives it back, so another replica need not wait for expiry."""
    _closed_round(storage, RoundKeys(tmp_path / "keys"))
    record = storage.round_record("c", 1)
    assert record is not None
    link = ServerLink("http://127.0.0.1:9", "t")
    slow = _SlowLease(storage, 0.4)
    releaser = Releaser(slow, link, RoundKeys(tmp_path / "keys"),  # type: ignore[arg-type]
                        chunk_size=2, lease_seconds=30.0)

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(releaser.forward(record))
        await asyncio.sleep(0.1)  # the thread is inside take_release_lease now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await link.aclose()

    asyncio.run(main())
    assert storage.take_release_lease("c", 1, "another replica", 5.0)

"""Short storage calls from the event loop on a SQLite store: inline when it is free, else
queued behind one worker thread (services/storage_calls.py, SQLiteStore.call_threads)."""

from __future__ import annotations

import asyncio
import threading

from services.shuffler.storage import Storage
from services.storage_calls import storage_call


def test_a_free_store_runs_the_call_on_the_event_loop(tmp_path):
    storage = Storage(tmp_path / "s.db")

    async def main() -> tuple[int, int]:
        return threading.get_ident(), await storage_call(storage, threading.get_ident)

    try:
        loop_thread, call_thread = asyncio.run(main())
    finally:
        storage.close()
    assert call_thread == loop_thread


def test_calls_that_find_the_store_busy_share_one_thread(tmp_path):
    """With one connection behind one lock, more threads could only queue on the lock;
    under load they kept the store busy, so most calls left the loop (the old pool had 8)."""
    storage = Storage(tmp_path / "s.db")
    release = threading.Event()
    held = threading.Event()

    def hold() -> None:
        with storage._lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    seen: list[int] = []

    def record() -> None:  # as a storage method does: under the store's lock
        with storage._lock:
            seen.append(threading.get_ident())

    async def main() -> None:
        calls = [asyncio.ensure_future(storage_call(storage, record)) for _ in range(12)]
        await asyncio.sleep(0.05)
        assert seen == []  # the store is busy: nothing ran inline
        release.set()
        await asyncio.wait_for(asyncio.gather(*calls), 10)

    try:
        asyncio.run(main())
    finally:
        release.set()
        holder.join(10)
        storage.close()
    assert len(seen) == 12
    assert len(set(seen)) == 1
    assert storage.call_threads == 1

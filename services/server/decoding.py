"""Decode workers: background tasks that claim queued chunks, decode them and count them.

A chunk the shuffler delivers is only validated and queued by the request that carries
it (:meth:`.service.ServerService.store_chunk`); decrypting and counting it is the work
of :class:`DecodeWorkers`, a fixed number of asyncio tasks per server process
(``decode_concurrency``), each of which loops:

1. claim the oldest claimable chunk of the decode queue for a lease
   (:meth:`~.storage_api.ServerStorage.claim_chunk`; on PostgreSQL every replica's
   workers claim from one queue with ``FOR UPDATE SKIP LOCKED``, so a round's chunks are
   decoded by all replicas at once);
2. decode and count it in a thread of this object's own pool
   (:meth:`~.service.ServerService.decode_claimed`: decryption in the process pool of
   :class:`~.decrypt.Decryptor` for a large chunk, then one transaction that counts the
   chunk and removes its queue row), renewing the lease every third of its length
   meanwhile;
3. on a failure (the key cannot be read, the database is away) give the claim back
   with a delay that doubles with each failure of that chunk (:func:`retry_delay`), so
   it is tried again later, here or on another replica, and a chunk that can never be
   decoded costs a bounded, shrinking share of the workers. Nothing is dropped: the
   round waits (``complete`` answers that it is still decoding, with how many chunks
   failed) until the cause is mended or the campaign is aborted, and every failure
   is logged and counted (the ``decode_failures`` metric).

An idle worker polls with a backoff that doubles from :data:`IDLE_MIN_SECONDS` to
``idle_seconds``, and :meth:`DecodeWorkers.wake` ends every idle wait at once. It is called
when this process queues a chunk, and, on PostgreSQL, when any other replica does: a
thread of this object listens for the storage's notifications
(:meth:`~.storage_api.ServerStorage.listen_for_queued_chunks`), so every replica's
workers start on a round's first chunks at once, not after their idle backoff.

A process that dies mid-decode leaves its claim in the queue until the lease expires;
then any worker claims the chunk again. If the dead worker had already committed the
count, its row is gone and nothing is decoded twice; if two workers decode one chunk (a
worker stalled past its lease), the second count finds the row gone and changes nothing
(:meth:`~.service.ServerService.finish_chunk`).

Stopping (:meth:`DecodeWorkers.stop`) cancels the tasks; a chunk being decoded is
finished first (its thread runs to its end), and a claim taken but not decoded is given
back at once rather than left to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from segshuffle.wire.models import ChunkReceipt

from ..storage_calls import in_thread
from .service import ServerService
from .storage_api import ClaimedChunk

log = logging.getLogger("segshuffle.server")
T = TypeVar("T")

IDLE_MIN_SECONDS = 0.05
"""The first idle wait of a worker that found the queue empty (it doubles from there)."""
RETRY_DELAY_SECONDS = 5.0
"""How long a chunk that failed to decode once stays unclaimable before the next attempt."""
MAX_RETRY_DELAY_SECONDS = 300.0
"""The longest wait between two attempts at a chunk that keeps failing."""


def retry_delay(failures: int) -> float:
    """Seconds before the next attempt at a chunk that has failed ``failures`` >= 1 times:

        delay(f) = min(RETRY_DELAY_SECONDS * 2**(f - 1), MAX_RETRY_DELAY_SECONDS)

    5, 10, 20, ... seconds, at most 5 minutes: a transient fault (the database restarting)
    is retried soon, a lasting one (a lost key file) about 12 times an hour."""
    if failures < 1:
        raise ValueError(f"failures must be at least 1, got {failures}")
    exponent = min(failures - 1, 32)  # 2**32 * 5 s is far past the cap already
    return min(RETRY_DELAY_SECONDS * 2.0 ** exponent, MAX_RETRY_DELAY_SECONDS)


async def poll(step: Callable[[], Awaitable[bool]],
               wakeup: Callable[[], asyncio.Event | None], idle_seconds: float,
               what: str) -> None:
    """Run ``step`` until cancelled: again at once after it worked (returned True), else
    after an idle wait that doubles from IDLE_MIN_SECONDS to ``idle_seconds`` and ends
    early when the ``wakeup`` event is set.  A step that raises (the storage is away) is
    logged as ``what`` failing and counts as idle."""
    idle = IDLE_MIN_SECONDS
    while True:
        try:
            worked = await step()
        except Exception as exc:
            log.warning("%s failed: %s", what, exc)
            worked = False
        if worked:
            idle = IDLE_MIN_SECONDS
            continue
        event = wakeup()
        if event is None:
            await asyncio.sleep(idle)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(idle):  # unlike wait_for, never loses a cancel
                    await event.wait()
            event.clear()
        idle = min(idle * 2, idle_seconds)


def owner_name() -> str:
    """A claim owner unique to this process incarnation: host, process id, random tag."""
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"


class DecodeWorkers:
    """``concurrency`` background tasks decoding the queue (see the module docstring).

    ``lease_seconds``: how long a claim holds without renewal; ``idle_seconds``: the
    longest wait between two polls of an empty queue; ``on_decoded`` is called on the
    event loop with the receipt of every chunk this process counted, ``on_failed`` with
    every chunk whose decoding failed here.
    """

    def __init__(self, service: ServerService, *, concurrency: int = 2,
                 lease_seconds: float = 60.0, idle_seconds: float = 1.0,
                 on_decoded: Callable[[ChunkReceipt], None] | None = None,
                 on_failed: Callable[[ClaimedChunk], None] | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if lease_seconds <= 0 or idle_seconds <= 0:
            raise ValueError("lease_seconds and idle_seconds must be positive")
        self.service = service
        self.repository = service.repository
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.idle_seconds = max(idle_seconds, IDLE_MIN_SECONDS)
        self.on_decoded = on_decoded
        self.on_failed = on_failed
        self.owner = owner_name()
        """This process's name as a claim owner."""
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._stop_listening = threading.Event()
        self._listener: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the tasks on the running event loop (once)."""
        if self._tasks:
            return
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(self.concurrency,
                                            thread_name_prefix="segshuffle-decode")
        self._tasks = [self._loop.create_task(self._run(), name=f"decode worker {number}")
                       for number in range(self.concurrency)]
        self._stop_listening.clear()
        self._listener = threading.Thread(target=self._listen, daemon=True,
                                          name="segshuffle-decode-listener")
        self._listener.start()

    def _listen(self) -> None:
        """The listener thread: wake the workers whenever another process queues a chunk."""
        def failed(exc: Exception, retry_seconds: float) -> None:
            log.warning("listening for queued chunks failed (%s: %s); again in %g s",
                        type(exc).__name__, exc, retry_seconds)

        try:
            self.repository.listen_for_queued_chunks(self.wake, self._stop_listening,
                                                     failed)
        except Exception as exc:  # never silently: the workers still poll
            log.warning("listening for queued chunks stopped: %s", exc)

    async def stop(self) -> None:
        """Cancel the tasks and wait for them (each finishes the chunk it is decoding).

        A task still running a second after its cancellation is cancelled again: a
        cancellation that arrives just as an await completes may be lost, and one lost
        cancellation must not keep the process from stopping.
        """
        pending: set[asyncio.Task[None]] = set(self._tasks)
        self._tasks = []
        self._stop_listening.set()
        listener, self._listener = self._listener, None
        if listener is not None:
            await asyncio.to_thread(listener.join, 15.0)  # it looks up every half second
        while pending:
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=1.0)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def wake(self) -> None:
        """End every idle wait now (a chunk was queued); safe from any thread or loop."""
        loop, event = self._loop, self._wakeup
        if loop is None or event is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            event.set()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(event.set)

    # -- one worker --------------------------------------------------------------------------

    async def _run(self) -> None:
        """Claim and decode until cancelled; wait with a growing backoff while idle."""
        await poll(self.decode_one, lambda: self._wakeup, self.idle_seconds,
                   "decode worker: claiming a chunk")

    async def decode_one(self) -> bool:
        """Claim one chunk and decode it; whether there was one to claim.

        The claim is given back (after :func:`retry_delay`) when decoding fails, and at
        once when this task is cancelled before decoding began.
        """
        claimed: ClaimedChunk | None = await self._in_pool(
            self.repository.claim_chunk, self.owner, self.lease_seconds,
            on_cancel=self._give_back)
        if claimed is None:
            return False
        renewal = asyncio.get_running_loop().create_task(self._renew(claimed))
        try:
            receipt, failure = await self._in_pool(self._decode, claimed)
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
        if failure is not None:
            log.warning("decoding chunk %d of stream %s (campaign %s, round %d, attempt %d, "
                        "failure %d) failed: %s; retrying in %g s", claimed.chunk_index,
                        claimed.stream, claimed.campaign_id, claimed.round, claimed.attempts,
                        claimed.failures + 1, failure, retry_delay(claimed.failures + 1))
            if self.on_failed is not None:
                self.on_failed(claimed)
        elif receipt is not None and self.on_decoded is not None:
            self.on_decoded(receipt)
        return True

    def _decode(self, claimed: ClaimedChunk) -> tuple[ChunkReceipt | None, Exception | None]:
        """Decode and count a claimed chunk (in a pool thread); on a failure give the claim
        back for a later attempt, in this thread, so that it happens even when the
        awaiting task was cancelled meanwhile. Returns (receipt or None, failure)."""
        try:
            return self.service.decode_claimed(claimed), None
        except Exception as exc:
            self._release(claimed, retry_delay(claimed.failures + 1), failed=True)
            return None, exc

    async def _renew(self, claimed: ClaimedChunk) -> None:
        """Renew the claim every third of the lease while the chunk is being decoded."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                held = await in_thread(self.repository.renew_claim, claimed.seq, self.owner,
                                       self.lease_seconds)
            except Exception as exc:  # the next renewal may still come before the expiry
                log.warning("renewing the claim of a queued chunk failed: %s", exc)
                continue
            if not held:  # another worker holds it now: harmless, counting is idempotent
                log.warning("the claim of chunk %d of stream %s (campaign %s, round %d) "
                            "expired and was taken over", claimed.chunk_index,
                            claimed.stream, claimed.campaign_id, claimed.round)
                return

    def _give_back(self, claimed: ClaimedChunk | None) -> None:
        """Release a claim taken by a call whose caller was cancelled (in its thread)."""
        if claimed is not None:
            self._release(claimed, 0.0)

    def _release(self, claimed: ClaimedChunk, delay: float, *, failed: bool = False) -> None:
        """Give a claim back, claimable again after ``delay`` seconds, with its failure
        counted if ``failed`` (best effort: an unreleased claim only waits for its lease
        to expire)."""
        try:
            self.repository.release_claim(claimed.seq, self.owner, delay, failed=failed)
        except Exception as exc:
            log.warning("giving back the claim of a queued chunk failed: %s", exc)

    async def _in_pool(self, function: Callable[..., T], *args: Any,
                       on_cancel: Callable[[T], None] | None = None) -> T:
        """``function(*args)`` in a thread of this object's pool, awaited to its end even if
        the caller is cancelled meanwhile; then ``on_cancel`` gets its result (a claim to
        give back) before the cancellation goes on."""
        executor = self._executor
        if executor is None:
            raise RuntimeError("the decode workers are not running")
        future = asyncio.get_running_loop().run_in_executor(executor, function, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await _settled(future)
            if on_cancel is not None and not future.cancelled() and future.exception() is None:
                await _settled(asyncio.get_running_loop().run_in_executor(
                    executor, on_cancel, future.result()))
            raise


async def _settled(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, through any further cancellation of the waiting task
    (the caller raises the first one afterwards): a thread's result must not be lost."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([future])

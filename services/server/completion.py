"""Completion workers: the background tasks that finish rounds, once each.

Finishing a round is slow (round 1 runs the parameter optimizer, seconds to minutes on a
busy host; round 2 decodes the estimates), so it is never done inside the request that
asks for it.  ``POST .../complete`` (:meth:`.service.ServerService.complete`) records a
durable *completion job* on the round's pinned batch and answers ``202`` with the job's
state; the shuffler asks again after ``Retry-After`` until the stored completion comes
back.  :class:`CompletionWorkers`, a background task in every server process, loops:

1. claim the oldest requested job that no lease holds
   (:meth:`~.storage_api.ServerStorage.claim_completion`; on PostgreSQL replicas claim
   with ``FOR UPDATE SKIP LOCKED``, so one replica computes a job at a time);
2. compute it in a thread of its own (:meth:`~.service.ServerService.compute_completion`),
   renewing the lease every third of its length; the completion is stored in the
   transaction that ends the job, so a job is done exactly when its answer exists;
3. on a failure give the claim back with a delay that doubles with each failure
   (:func:`.decoding.retry_delay`), the error kept on the job for the operator
   (``segshuffle admin status`` shows it through the shuffler).

A process killed while computing leaves its claim until the lease expires; then a worker
(here after a restart, or on another replica) claims the job again and computes it once
more: the work is repeated at most once per lost process, never lost, and never written
twice (the storing transaction finds the completion already there).  Repeated completion
requests only read the job.  Every wait is bounded: the idle poll by ``idle_seconds``,
retries by the delay's cap, a stop by one second per cancellation round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from segshuffle.wire.models import BatchCompletion

from .decoding import IDLE_MIN_SECONDS, owner_name, poll, retry_delay
from .service import ServerService
from .storage_api import CompletionJob

log = logging.getLogger("segshuffle.server")


class CompletionWorkers:
    """One background task finishing requested rounds (see the module docstring).

    ``lease_seconds``: how long a claim holds without renewal; ``idle_seconds``: the longest
    wait between two looks for a job.  ``on_started(job)`` is called on the event loop as
    each computation begins, ``on_failed(job, error)`` when one fails.
    """

    def __init__(self, service: ServerService, *, lease_seconds: float = 60.0,
                 idle_seconds: float = 1.0,
                 on_started: Callable[[CompletionJob], None] | None = None,
                 on_failed: Callable[[CompletionJob, BaseException], None] | None = None
                 ) -> None:
        if lease_seconds <= 0 or idle_seconds <= 0:
            raise ValueError("lease_seconds and idle_seconds must be positive")
        self.service = service
        self.repository = service.repository
        self.lease_seconds = lease_seconds
        self.idle_seconds = max(idle_seconds, IDLE_MIN_SECONDS)
        self.on_started = on_started
        self.on_failed = on_failed
        self.owner = owner_name()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None

    def start(self) -> None:
        """Start the task on the running event loop (once)."""
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._task = self._loop.create_task(self._run(), name="completion worker")

    async def stop(self) -> None:
        """Cancel the task; a job being computed is given back at once (claimable again
        by the next process) rather than awaited: an optimizer may run for minutes."""
        task, self._task = self._task, None
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)

    def wake(self) -> None:
        """End the idle wait now (a job was requested); safe from any thread."""
        loop, event = self._loop, self._wakeup
        if loop is None or event is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(event.set)

    async def _run(self) -> None:
        await poll(self.finish_one, lambda: self._wakeup, self.idle_seconds,
                   "completion worker: claiming a job")

    async def finish_one(self) -> bool:
        """Claim one job and compute it; whether there was one to claim."""
        job = await asyncio.to_thread(self.repository.claim_completion, self.owner,
                                      self.lease_seconds)
        if job is None:
            return False
        if self.on_started is not None:
            self.on_started(job)
        log.info("completing campaign %s round %d (attempt %d)", job.campaign_id, job.round,
                 job.attempts)
        renewal = asyncio.get_running_loop().create_task(self._renew(job))
        try:
            completion = await _in_daemon_thread(self.service.compute_completion, job)
        except asyncio.CancelledError:
            await asyncio.to_thread(self._give_back, job, None)
            raise
        except Exception as exc:
            failures = job.failures + 1
            delay = retry_delay(failures)
            log.warning("completing campaign %s round %d failed (attempt %d): %s; retrying "
                        "in %g s", job.campaign_id, job.round, job.attempts, exc, delay)
            if self.on_failed is not None:
                self.on_failed(job, exc)
            await asyncio.to_thread(self._give_back, job, f"{type(exc).__name__}: {exc}",
                                    delay)
            return True
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
        log.info("campaign %s round %d completed: phase %s", job.campaign_id, job.round,
                 completion.phase)
        return True

    def _give_back(self, job: CompletionJob, error: str | None, delay: float = 0.0) -> None:
        try:
            self.repository.release_completion(job.campaign_id, job.round, self.owner, delay,
                                               error=None if error is None else error[:500])
        except Exception as exc:  # the lease expires by itself
            log.warning("giving back the completion job of campaign %s round %d failed: %s",
                        job.campaign_id, job.round, exc)

    async def _renew(self, job: CompletionJob) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                held = await asyncio.to_thread(self.repository.renew_completion,
                                               job.campaign_id, job.round, self.owner,
                                               self.lease_seconds)
            except Exception as exc:  # the next renewal may succeed before the expiry
                log.warning("renewing the completion job of campaign %s round %d failed: %s",
                            job.campaign_id, job.round, exc)
                continue
            if not held:
                log.warning("the completion job of campaign %s round %d was taken over",
                            job.campaign_id, job.round)
                return


async def _in_daemon_thread(function: Callable[[CompletionJob], BatchCompletion],
                            job: CompletionJob) -> BatchCompletion:
    """``function(job)`` in a daemon thread: a stopping process neither waits for it nor
    is kept alive by it (its claim is given back and the job computed again later)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            result: Any = function(job)
        except BaseException as exc:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, None, exc)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, daemon=True,
                     name=f"segshuffle-complete-{job.campaign_id}-{job.round}").start()
    return await future

"""Releasing a round: close it, forward it in chunks in its secret order, complete, forget.

A release has three steps (docs/protocol.md sections 1 and 2):

1. :meth:`Releaser.start` draws a batch id and closes the round in one database
   transaction, only if it has at least the required number of distinct participants
   (:meth:`ShufflerStorage.close_round`).  From then on the batch is fixed: no
   message is added or removed.
2. :meth:`Releaser.forward` sends each stream to the server in chunks of
   ``chunk_size`` ciphertexts, in the release order computed from the round key
   (:mod:`.permutation`; the order exists only in memory and is recomputed
   identically after a restart), each message unsealed from its stored form
   (:mod:`.vault`).  ``PUT .../batches/{batch_id}`` carries ``chunk_index`` and
   ``chunk_count``; the server queues a chunk idempotently per (batch, stream, index)
   and decodes it in the background, on any of its replicas.  Up to ``window`` chunk
   deliveries are in flight at once (:meth:`Releaser._send_chunks`), so the server's
   replicas decode a round in parallel; each is retried on its own.  Every
   acknowledged chunk is recorded, then ``complete`` is called, which the server
   answers ``unavailable`` (retried like any 503) until it has decoded every chunk.
   Network errors, 5xx and 429 are retried with capped exponential backoff and
   jitter for at most ``retry_seconds``; any other refusal stops forwarding (the
   round stays ``releasing`` and says why; a new release request resumes it).  A
   restart resumes every batch still in the ``releasing`` state, skipping
   acknowledged chunks.
   Replicas sharing the database forward a round under a *release lease* (below).
3. Once the server has finished the round (or closed it as failed, or the campaign
   was aborted), the storage forgets the round's messages and participations and the
   round key is destroyed (crypto-shredding).

Release lease (docs/architecture.md, "Replicas"): a replica forwards a round only
while it holds the round's lease in storage (:meth:`ShufflerStorage.take_release_lease`),
taken for ``lease_seconds`` on the database's clock and renewed every third of that
while it forwards.  Every replica scans the ``releasing`` rounds every half lease
(:meth:`Releaser.resume_all` starts the scan) and takes over any round whose lease has
expired, so the forwarding of a replica that died (``SIGKILL``, a lost host) is resumed
by another within about 1.5 leases, with no operator request; the chunks already
acknowledged are skipped.  A release request on a replica that does not hold the lease
waits for the holder's outcome (or takes over once the lease expires).  A forwarding
that gave up (a refusal, or retries exhausted) *stops* the lease: the scan leaves the
round alone and only a new release request resumes it, as with one process.  Two
forwarders of one round (a holder that stalled past its lease while another took over)
are harmless: the order is recomputed identically from the round key, so chunks are
byte-identical, and the server answers a repeated chunk as a duplicate.

Required participants: round 1 needs ``max(min_users, floor)``; round 2 needs
``max(n_min, min_users, floor)`` with ``n_min = ceil((1 - tau) n1)``, n1 the
round-1 participant count (the server publishes the same n_min as
``accounting_users``; the larger of the two is used).  A campaign's fake tolerance
lowers the count the accounting uses (``honest_users``), never this threshold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from segshuffle.core import rules
from segshuffle.services import errors
from segshuffle.wire.models import BatchChunk, CampaignView, b64url_encode

from .shuffled_stream import ShuffledStream
from .storage_api import (
    FAILED,
    RELEASED,
    RELEASING,
    RoundRecord,
    ShufflerStorage,
    StorageError,
)
from .upstream import PendingCompletion, ServerLink, UpstreamError
from .vault import RoundKeyMissingError, RoundKeys

log = logging.getLogger("segshuffle.shuffler")

LEVELS = "levels"
DATA = "data"
MIN_RETRY_AFTER_SECONDS = 0.25
"""The shortest wait the server's ``Retry-After`` can ask of a forwarding."""
DEFAULT_WINDOW = 4
"""Chunk deliveries of one round in flight at once, unless the releaser is told otherwise."""


def streams_of(round_number: int) -> tuple[str, ...]:
    """Round 1 carries level messages; round 2 level messages and data messages."""
    return (LEVELS,) if round_number == 1 else (LEVELS, DATA)


def threshold_reason(view: CampaignView, round_number: int, floor: int, required: int) -> str:
    """Which rule sets a round's release threshold ``required``, in words."""
    if floor >= required and floor > view.config.min_users:
        return (f"the shuffler's own floor of {floor} participants per release "
                f"(SEGSHUFFLE_SHUFFLER_MIN_USERS; the campaign's min_users is "
                f"{view.config.min_users})")
    if round_number == 2 and required > max(view.config.min_users, floor):
        return (f"n_min = {required}: the round-1 participants less the campaign's dropout "
                f"tolerance {view.config.dropout_tolerance:g}")
    return f"the campaign's min_users of {view.config.min_users}"


def required_participants(view: CampaignView, round_number: int, floor: int,
                          round1_participants: int | None) -> int:
    """The release threshold of a round (see the module docstring)."""
    required = max(view.config.min_users, floor)
    if round_number == 2:
        if round1_participants is not None:
            n_min = rules.accounting_users(round1_participants, view.config.dropout_tolerance)
            required = max(required, n_min)
        if view.parameters is not None:
            required = max(required, view.parameters.accounting_users)
    return required



async def _to_the_end(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function`` in a worker thread, awaited to its end even if the caller is cancelled
    meanwhile (the cancellation is raised after it), so that whoever cleans up after a
    cancellation knows what the thread did, e.g. that it took a lease."""
    future = asyncio.ensure_future(asyncio.to_thread(function, *args, **kwargs))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await future
        raise

class Backoff:
    """Capped exponential backoff with full jitter: delay_k uniform in [d_k / 2, d_k]."""

    def __init__(self, initial: float = 0.1, maximum: float = 10.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self.attempt = 0
        self._rng = random.Random()

    def next_delay(self) -> float:
        ceiling = min(self.maximum, self.initial * 2.0**self.attempt)
        self.attempt += 1
        return ceiling * (0.5 + 0.5 * self._rng.random())

    def reset(self) -> None:
        self.attempt = 0


class Releaser:
    """Starts releases and forwards them to the server, one task per batch."""

    def __init__(self, storage: ShufflerStorage, link: ServerLink, keys: RoundKeys, *,
                 chunk_size: int, backoff_initial: float = 0.1, backoff_max: float = 10.0,
                 retry_seconds: float = 6 * 3600.0, lease_seconds: float = 10.0,
                 window: int = DEFAULT_WINDOW, spill_directory: Path | None = None) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.storage = storage
        self.link = link
        self.keys = keys
        self.window = window
        """Chunk deliveries of a round in flight at once (:meth:`_send_chunks`)."""
        self.spill_directory = spill_directory
        """Where a stream being released keeps its sealed, unnamed spill file
        (:mod:`.shuffled_stream`; the system's temporary directory if None)."""
        self._orders: dict[tuple[str, str], ShuffledStream] = {}
        self._order_lock = threading.Lock()
        """Held while a stream is put in its release order: concurrent chunk reads of a
        stream do it once."""
        self.chunk_size = chunk_size
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.retry_seconds = retry_seconds
        self.lease_seconds = lease_seconds
        """How long a release lease lasts unless renewed (module docstring)."""
        self.owner = f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"
        """This process's name as a lease holder (unique per process incarnation)."""
        self._tasks: dict[tuple[str, int], asyncio.Task[RoundRecord]] = {}
        self._scanner: asyncio.Task[None] | None = None
        self.last_error: dict[tuple[str, int], str] = {}
        """Why the latest delivery attempt of a round failed (cleared on success)."""
        self.on_change: Callable[[str, int], None] | None = None
        """Called on the event loop with (campaign_id, round) when forwarding changes a
        round's state (delivered, or a failed attempt)."""

    def _changed(self, campaign_id: str, round_number: int) -> None:
        if self.on_change is not None:
            self.on_change(campaign_id, round_number)

    # -- step 1 ------------------------------------------------------------------------
    def start(self, campaign_id: str, round_number: int, required: int) -> RoundRecord:
        """Close the round and fix its order (raises ``NotEnoughParticipantsError``)."""
        record = self.storage.close_round(
            campaign_id, round_number, minimum=required, batch_id=secrets.token_hex(16),
            chunk_size=self.chunk_size, streams=streams_of(round_number),
        )
        log.info("round closed: campaign=%s round=%d participants=%d messages=%s",
                 campaign_id, round_number, record.participants,
                 ",".join(f"{k}:{v}" for k, v in sorted(record.stream_sizes.items())))
        return record

    # -- step 2 ------------------------------------------------------------------------
    def schedule(self, record: RoundRecord, *, force: bool = False
                 ) -> asyncio.Task[RoundRecord]:
        """Forward ``record`` in the background (one task per batch, reused if running).

        ``force`` (an operator's release request) also resumes a round whose forwarding
        stopped; without it such a round is left alone.
        """
        key = (record.campaign_id, record.round)
        task = self._tasks.get(key)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(
                self.forward(record, force=force),
                name=f"forward {record.campaign_id}/{record.round}",
            )
            # The outcome is logged and kept in last_error; nobody may be awaiting it.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._tasks[key] = task
        return task

    def chunk(self, record: RoundRecord, stream: str, index: int) -> list[bytes]:
        """The ciphertexts of chunk ``index`` of ``stream``, in release order, unsealed."""
        slot = (record.batch_id, stream)
        order = self._orders.get(slot)
        if order is None:
            with self._order_lock:
                order = self._orders.get(slot)
                if order is None:
                    order = self._shuffle(record, stream)
                    self._orders[slot] = order
        start = index * record.chunk_size
        return order.messages(start, start + record.chunk_size)

    def _shuffle(self, record: RoundRecord, stream: str) -> ShuffledStream:
        """The stream of a closed round in its release order (one pass over its rows)."""
        key = self.keys.get(record.campaign_id, record.round)
        expected = record.stream_sizes[stream]

        def rows(after: bytes, limit: int) -> list[tuple[bytes, bytes]]:
            return self.storage.sealed_rows(record.campaign_id, record.round, stream,
                                            after=after, limit=limit)

        order = ShuffledStream.build(key, record.campaign_id, record.round, stream, rows,
                                     expected, self.spill_directory)
        if len(order) != expected:
            order.close()
            raise StorageError(f"stream {stream!r} of the closed round has {len(order)} "
                               f"messages, {expected} were counted")
        return order

    def finish(self, record: RoundRecord, state: str = RELEASED,
               reason: str | None = None) -> RoundRecord:
        """The round is over (released, or failed and why): forget it, destroy its key."""
        finished = self.storage.finish_release(record, state=state, reason=reason)
        self.keys.destroy(record.campaign_id, record.round)
        self.drop_streams(record)
        return finished

    def drop_streams(self, record: RoundRecord) -> None:
        """Close the batch's streams in release order and their spill files (waiting for
        a pass or a chunk read in progress); a later forwarding puts them in order again."""
        with self._order_lock:
            for stream in record.stream_sizes:
                order = self._orders.pop((record.batch_id, stream), None)
                if order is not None:
                    order.close()

    def forwarding(self, campaign_id: str, round_number: int) -> bool:
        """Whether a forwarding task of the round is running."""
        task = self._tasks.get((campaign_id, round_number))
        return task is not None and not task.done()

    def resume_all(self) -> int:
        """Destroy the key files of finished rounds, take over every ``releasing`` round
        whose lease is free or expired, and start the periodic scan (on the running
        event loop); returns how many rounds were resumed now.

        Rounds another replica holds are left to it; the scan takes them over if its
        lease expires.
        """
        swept = self.keys.sweep_finished(self.storage.finished_rounds())
        if swept:
            log.info("destroyed %d round key(s) of finished rounds", swept)
        resumed = 0
        for record in self.storage.releasing():
            if self.storage.take_release_lease(record.campaign_id, record.round, self.owner,
                                               self.lease_seconds):
                log.info("resuming release: campaign=%s round=%d", record.campaign_id,
                         record.round)
                self.schedule(record)
                resumed += 1
        if self._scanner is None or self._scanner.done():
            self._scanner = asyncio.get_running_loop().create_task(
                self._scan_forever(), name="release lease scan")
        return resumed

    async def _scan_forever(self) -> None:
        """Every half lease, take over the releasing rounds whose lease expired."""
        while True:
            await asyncio.sleep(self.lease_seconds / 2)
            try:
                await self.take_over()
            except Exception as exc:  # the database is unreachable: try again next time
                log.warning("release lease scan failed: %s", exc)

    async def take_over(self) -> int:
        """Schedule every ``releasing`` round not forwarded here whose lease this process
        could take (free or expired, not stopped); returns how many."""
        taken = 0
        for record in await asyncio.to_thread(self.storage.releasing):
            if self.forwarding(record.campaign_id, record.round):
                continue
            if await asyncio.to_thread(self.storage.take_release_lease, record.campaign_id,
                                       record.round, self.owner, self.lease_seconds):
                log.warning("resuming release: campaign=%s round=%d (its lease expired: "
                            "taken over)", record.campaign_id, record.round)
                self.schedule(record)
                taken += 1
        return taken

    async def shutdown(self) -> None:
        """Stop the scan and every forwarding (their leases are let go at once)."""
        tasks = [t for t in self._tasks.values() if not t.done()]
        if self._scanner is not None:
            tasks.append(self._scanner)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def forward(self, record: RoundRecord, *, force: bool = False) -> RoundRecord:
        """Deliver every chunk, then ``complete``, until the server has finished the round.

        First takes the round's release lease (``force``: even a stopped one), waiting
        while another replica holds it; if that replica finishes the round meanwhile,
        returns its record.  The lease is renewed while forwarding.  Network errors, 5xx
        and 429 are retried with backoff for at most ``retry_seconds``; any other refusal
        stops forwarding at once.  A round the server finished (or closed as failed, or
        whose campaign ended) is finished here too, and forgotten.  A stopped forwarding
        keeps the round ``releasing`` with its reason in :attr:`last_error` and its lease
        stopped; a new release request resumes it.  Raises ``upstream-failed`` when
        stopped and ``unavailable`` when the round can never be sent (its key or a
        stored message is gone).
        """
        slot = (record.campaign_id, record.round)
        try:
            try:
                finished = await self._acquire(record, force)
            except asyncio.CancelledError:
                # cancelled while a worker thread may just have taken the lease for us
                self._let_go(slot)
                raise
            if finished is not None:
                return finished
            renewal = asyncio.get_running_loop().create_task(self._renew(record))
            try:
                return await self._forward_and_finish(record, slot)
            except (errors.UpstreamFailedError, errors.UnavailableError):
                await asyncio.to_thread(self.storage.stop_release_lease, *slot, self.owner)
                raise
            except asyncio.CancelledError:
                self._let_go(slot)
                raise
            finally:
                renewal.cancel()
        finally:
            # However it ended (finished, stopped, taken over, cancelled), nothing of the
            # batch's order stays behind: no spill file outlives its forwarding.
            await _to_the_end(self.drop_streams, record)
            self._changed(*slot)

    async def _acquire(self, record: RoundRecord, force: bool) -> RoundRecord | None:
        """Take the round's lease (``None``), or the round's record once another replica
        has finished it; waits at most ``retry_seconds`` for the holder."""
        slot = (record.campaign_id, record.round)
        deadline = time.monotonic() + self.retry_seconds
        poll = min(1.0, self.lease_seconds / 4)
        while not await _to_the_end(self.storage.take_release_lease, *slot, self.owner,
                                    self.lease_seconds, force=force):
            current = await asyncio.to_thread(self.storage.round_record, *slot)
            if current is not None and current.state != RELEASING:
                self.last_error.pop(slot, None)
                return current
            if time.monotonic() + poll > deadline:
                raise errors.UpstreamFailedError("another replica is forwarding the round")
            self.last_error[slot] = "forwarded by another replica"
            await asyncio.sleep(poll)
        self.last_error.pop(slot, None)
        return None

    async def _renew(self, record: RoundRecord) -> None:
        """Renew the lease every third of its length while forwarding."""
        slot = (record.campaign_id, record.round)
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                held = await asyncio.to_thread(self.storage.take_release_lease, *slot,
                                               self.owner, self.lease_seconds)
            except Exception as exc:  # the next renewal may succeed before the expiry
                log.warning("renewing the release lease of campaign=%s round=%d failed: %s",
                            *slot, exc)
                continue
            if not held:  # another replica took over: harmless, chunks are identical
                log.warning("the release lease of campaign=%s round=%d was taken over", *slot)

    def _let_go(self, slot: tuple[str, int]) -> None:
        """Drop this process's lease of a round (best effort, while shutting down)."""
        try:
            self.storage.drop_release_lease(*slot, self.owner)
        except Exception as exc:
            log.warning("letting go of the release lease of campaign=%s round=%d failed: %s",
                        *slot, exc)

    async def _forward_and_finish(self, record: RoundRecord,
                                  slot: tuple[str, int]) -> RoundRecord:
        try:
            state, reason = await self._forward(record)
        except _StoppedError as stop:
            self.last_error[slot] = f"stopped: {stop}"
            log.error("forwarding of campaign=%s round=%d stopped: %s", *slot, stop)
            raise errors.UpstreamFailedError(f"forwarding stopped: {stop}") from None
        except (RoundKeyMissingError, StorageError) as exc:
            self.last_error[slot] = str(exc)
            log.error("release of campaign=%s round=%d cannot proceed: %s", *slot, exc)
            raise errors.UnavailableError(f"the round cannot be released: {exc}") from None
        finished = await asyncio.to_thread(self.finish, record, state, reason)
        self.last_error.pop(slot, None)
        if state == RELEASED:
            log.info("round released: campaign=%s round=%d", *slot)
        else:
            log.warning("round ended without results: campaign=%s round=%d (%s)", *slot,
                        reason)
        return finished

    async def _forward(self, record: RoundRecord) -> tuple[str, str | None]:
        """Send until the round is over; returns its final state and reason."""
        deadline = time.monotonic() + self.retry_seconds
        while True:
            done = await asyncio.to_thread(self.storage.acknowledged, record)
            pending = [(stream, index, record.chunk_count(stream))
                       for stream in streams_of(record.round)
                       for index in range(record.chunk_count(stream))
                       if (stream, index) not in done]
            ended = await self._send_chunks(record, pending, deadline)
            if ended is not None:
                return ended
            backoff = Backoff(self.backoff_initial, self.backoff_max)
            outcome = await self._complete(record, backoff, deadline)
            if outcome is not None:
                return outcome
            # the server lacks chunks (it answered incomplete-batch): send them all again
            await asyncio.to_thread(self.storage.clear_acknowledgements, record)

    async def _send_chunks(self, record: RoundRecord, pending: list[tuple[str, int, int]],
                           deadline: float) -> tuple[str, str | None] | None:
        """Deliver the ``pending`` (stream, index, count) chunks, in their order, with at
        most :attr:`window` deliveries in flight, each retried on its own with its own
        backoff (:meth:`_send_chunk`).  Returns ``None`` once all are acknowledged, or the
        round's end as soon as one delivery finds it over.  The first delivery that
        stops (:class:`_StoppedError`) or fails otherwise ends the others, and its error
        is raised; so does a cancellation: no delivery outlives this call.
        """
        loop = asyncio.get_running_loop()
        waiting = iter(pending)
        running: set[asyncio.Task[tuple[str, str | None] | None]] = set()
        try:
            while True:
                while len(running) < self.window:
                    item = next(waiting, None)
                    if item is None:
                        break
                    stream, index, count = item
                    backoff = Backoff(self.backoff_initial, self.backoff_max)
                    running.add(loop.create_task(
                        self._send_chunk(record, stream, index, count, backoff, deadline),
                        name=f"chunk {record.campaign_id}/{record.round}/{stream}/{index}"))
                if not running:
                    return None
                finished, running = await asyncio.wait(running,
                                                       return_when=asyncio.FIRST_COMPLETED)
                ended = _first_outcome(finished)
                if ended is not None:
                    return ended
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _send_chunk(self, record: RoundRecord, stream: str, index: int, count: int,
                          backoff: Backoff, deadline: float) -> tuple[str, str | None] | None:
        """Deliver one chunk; ``None`` once acknowledged, the round's end if it is over."""
        ciphertexts = await asyncio.to_thread(self.chunk, record, stream, index)
        chunk = BatchChunk(
            chunk_index=index, chunk_count=count, stream=stream,  # type: ignore[arg-type]
            ciphertexts=[b64url_encode(c) for c in ciphertexts],
        )
        while True:
            try:
                await self.link.put_chunk(record.campaign_id, record.round, record.batch_id,
                                          chunk)
            except UpstreamError as exc:
                if exc.problem == "wrong-phase":
                    ended = await self._ended(record)
                    if ended is not None:
                        return ended
                await self._wait(record, f"chunk {stream}/{index}", exc, backoff, deadline)
                continue
            backoff.reset()
            await asyncio.to_thread(self.storage.acknowledge, record, stream, index)
            return None

    async def _complete(self, record: RoundRecord, backoff: Backoff,
                        deadline: float) -> tuple[str, str | None] | None:
        """The round's end once the server has finished it; ``None`` if it lacks chunks.

        While the server is still decoding chunks of the round it answers ``unavailable``
        with ``queued_chunks`` (and ``failing_chunks``): waited for with the backoff like
        any 503, within the same ``retry_seconds``, and shown in the round's
        ``last_error`` as such (:func:`_decoding_reason`)."""
        while True:
            try:
                completion = await self.link.complete(record.campaign_id, record.round,
                                                      record.batch_id)
            except UpstreamError as exc:
                if exc.problem == "incomplete-batch":
                    log.warning("server lacks chunks: campaign=%s round=%d; resending",
                                record.campaign_id, record.round)
                    return None
                if exc.problem == "wrong-phase":
                    ended = await self._ended(record)
                    if ended is not None:
                        return ended  # e.g. completed earlier, the answer lost in a crash
                await self._wait(record, "complete", exc, backoff, deadline,
                                 reason=_decoding_reason(exc))
                continue
            if isinstance(completion, PendingCompletion):
                # The server computes the round in the background: a wait, not a failure,
                # bounded by the same retry_seconds, at the pace the server asked for.
                await self._pause(record, completion.describe(), completion.retry_after,
                                  backoff, deadline)
                continue
            if completion.phase == "failed":
                return FAILED, completion.end_reason
            return RELEASED, None

    async def _ended(self, record: RoundRecord) -> tuple[str, str | None] | None:
        """How the round ended, from the campaign's phase; ``None`` if it has not."""
        try:
            view = await self.link.campaign(record.campaign_id, fresh=True)
        except UpstreamError:
            return None
        if view is None:
            return None
        if view.phase == "done" or (record.round == 1 and view.phase == "round2"):
            return RELEASED, None
        if view.phase in ("failed", "aborted"):
            return FAILED, f"the campaign {view.phase}: {view.end_reason or 'no reason given'}"
        return None

    async def _wait(self, record: RoundRecord, what: str, exc: UpstreamError,
                    backoff: Backoff, deadline: float, *, reason: str | None = None) -> None:
        """Sleep before the next attempt, or raise :class:`_StoppedError` if there is none
        (``reason``, if given, says why better than ``exc``).

        The delay is the backoff's, unless the server said how long to wait
        (``Retry-After``): then that, within [:data:`MIN_RETRY_AFTER_SECONDS`, the
        backoff's ceiling], so no answer makes the shuffler ask in a tight loop. The server
        asks for 1 s while it decodes a round's last chunks, so the round ends about a
        second after its decoding does, not after a backoff grown to its ceiling."""
        message = f"{what}: {reason or exc}"
        if not exc.transient:
            raise _StoppedError(f"{message} (not retried)")
        delay = self._delay(message, exc.retry_after, backoff, deadline)
        log.info("forwarding %s of campaign=%s round=%d failed (%s); retry in %.2fs",
                 what, record.campaign_id, record.round, exc, delay)
        await self._show_and_sleep(record, message, delay)

    async def _pause(self, record: RoundRecord, message: str, retry_after: float | None,
                     backoff: Backoff, deadline: float) -> None:
        """Wait for work the server reported in progress (``message``), as :meth:`_wait`
        does for a failure: the same delays, the same deadline."""
        delay = self._delay(message, retry_after, backoff, deadline)
        log.info("campaign=%s round=%d: %s; asking again in %.2fs", record.campaign_id,
                 record.round, message, delay)
        await self._show_and_sleep(record, message, delay)

    def _delay(self, message: str, retry_after: float | None, backoff: Backoff,
               deadline: float) -> float:
        """The wait before the next attempt: the backoff's delay, or the server's
        ``retry_after`` within [MIN_RETRY_AFTER_SECONDS, the backoff's ceiling];
        :class:`_StoppedError` (with ``message``) when it would pass ``deadline``."""
        delay = backoff.next_delay()
        if retry_after is not None:
            delay = min(max(retry_after, MIN_RETRY_AFTER_SECONDS), backoff.maximum)
        if time.monotonic() + delay > deadline:
            raise _StoppedError(f"{message} (retried for {self.retry_seconds:g} s)")
        return delay

    async def _show_and_sleep(self, record: RoundRecord, message: str, delay: float) -> None:
        """Show ``message`` as the round's ``last_error``, then sleep ``delay`` seconds."""
        self.last_error[(record.campaign_id, record.round)] = message
        self._changed(record.campaign_id, record.round)
        await asyncio.sleep(delay)


def _decoding_reason(exc: UpstreamError) -> str | None:
    """The round's ``last_error`` while the server answers that it is still decoding
    (``unavailable`` with ``queued_chunks``); ``None`` for any other refusal."""
    decoding = exc.members.get("queued_chunks") if exc.status == 503 else None
    if decoding is None:
        return None
    failing = exc.members.get("failing_chunks") or 0
    if failing:
        return (f"the server is still decoding {decoding} chunk(s), {failing} of which "
                "failed to decode and are being retried (see the server's log)")
    return f"the server is still decoding {decoding} chunk(s)"


def _first_outcome(finished: set[asyncio.Task[tuple[str, str | None] | None]]
                   ) -> tuple[str, str | None] | None:
    """The round's end if a finished delivery found one; raises the first failure among
    them (after looking at every one, so no failure goes unretrieved)."""
    failures = [exc for task in finished if (exc := task.exception()) is not None]
    if failures:
        raise failures[0]
    return next((ended for task in finished if (ended := task.result()) is not None), None)


class _StoppedError(Exception):
    """Forwarding gave up: the server refused, or kept failing past the retry budget."""

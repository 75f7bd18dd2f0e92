"""How request handlers call storage: inline when that is cheaper, else in a worker thread.

A storage call from the event loop costs a hand-off to a worker thread and back, often
more than the call itself. A store that can run a short call in the calling thread offers
``run_inline(function, *args)`` (SQLite, :meth:`.sqlite_base.SQLiteStore.run_inline`:
only while no other thread holds it, so the loop never waits behind a release reading a
large round). PostgreSQL does not: its network round trips must not hold up the loop, so
its calls always go to a thread.

The threads are this module's own: a call is put on a queue (a C ``SimpleQueue``) that
its threads take calls from, and the thread hands the outcome back with
``call_soon_threadsafe`` to a future of the event loop.  That costs a fraction of AnyIO's
``to_thread.run_sync`` (Starlette's ``run_in_threadpool``, whose capacity limiter and
cancel scopes cost about 0.1 ms of CPU per call under load), and of the event loop's
``run_in_executor`` too: a ``ThreadPoolExecutor`` makes a ``concurrent.futures.Future``
(with its condition variable) per call, chains it to an asyncio future, and the shield
around it adds a third; measured on 32 concurrent callers, a hand-off cost about 40 us
of CPU that way and 7 us this way (about 110 and 50 us one call at a time, where waking
the thread dominates).  A store gets as many threads as it has connections
(``call_threads``, e.g. a PostgreSQL pool's size; :data:`DEFAULT_THREADS` otherwise):
more threads would only wait for a connection, and waiting threads cost CPU (with 32
threads on 8 connections a PostgreSQL submission cost half again as much).  What AnyIO
kept is kept: the call runs in a copy of the caller's context (the request id of log
lines), and it always runs to its end, also when the waiting request is cancelled, which
then waits for it before the cancellation goes on.  The threads are daemon threads,
started with their queue and idle on it from then on; a call still running when the
interpreter exits is abandoned (an open transaction is rolled back by its database).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_THREADS = 8
"""Worker threads of a store that does not say how many it can use (the services'
default ``database_pool_size``)."""


class _Call:
    """One call handed to a worker thread, and how its outcome gets back to the loop."""

    __slots__ = ("args", "context", "finished", "function", "future", "loop", "waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop, function: Callable[..., Any],
                 args: tuple[Any, ...]) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.context = contextvars.copy_context()
        self.function = function
        self.args = args
        self.finished = False
        """Set on the loop once the call has ended (whether or not anyone still waits)."""
        self.waiter: asyncio.Future[None] | None = None
        """A cancelled caller's wait for the end of the call."""


def _deliver(call: _Call, result: Any, error: BaseException | None) -> None:
    """On the loop: the call has ended; wake whoever waits for it."""
    call.finished = True
    if call.waiter is not None and not call.waiter.done():
        call.waiter.set_result(None)
    if call.future.cancelled():
        return
    if error is None:
        call.future.set_result(result)
    else:
        call.future.set_exception(error)


def _work(calls: queue.SimpleQueue[_Call]) -> None:
    """A worker thread: run the calls of ``calls``, one after another, for ever."""
    while True:
        call = calls.get()
        result: Any = None
        error: BaseException | None = None
        try:
            result = call.context.run(call.function, *call.args)
        except BaseException as exc:  # handed to the caller, as an executor would
            error = exc
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            call.loop.call_soon_threadsafe(_deliver, call, result, error)
        del call, result, error


_queues: dict[int, queue.SimpleQueue[_Call]] = {}
_queues_lock = threading.Lock()


def _queue(threads: int) -> queue.SimpleQueue[_Call]:
    """The queue of the shared set of ``threads`` worker threads (started on first use)."""
    calls = _queues.get(threads)
    if calls is None:
        with _queues_lock:
            calls = _queues.get(threads)
            if calls is None:
                calls = queue.SimpleQueue()
                for index in range(threads):
                    threading.Thread(target=_work, args=(calls,), daemon=True,
                                     name=f"segshuffle-storage-{threads}-{index}").start()
                _queues[threads] = calls
    return calls


async def in_thread(function: Callable[..., T], *args: Any,
                    threads: int = DEFAULT_THREADS) -> T:
    """``function(*args)`` in one of ``threads`` worker threads, in a copy of the current
    context; the call runs to its end even if the caller is cancelled meanwhile."""
    call = _Call(asyncio.get_running_loop(), function, args)
    _queue(max(1, threads)).put(call)
    try:
        return await call.future  # type: ignore[no-any-return]
    except asyncio.CancelledError:
        if not call.finished:  # as AnyIO does: the call ends before the cancellation
            call.waiter = call.loop.create_future()
            await call.waiter
        raise


async def storage_call(storage: object, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)``, a short call that touches ``storage``: inline on the event loop
    when ``storage`` offers it and is free, else in a worker thread."""
    run_inline = getattr(storage, "run_inline", None)
    if run_inline is not None:
        done, value = run_inline(function, *args)
        if done:
            return value  # type: ignore[no-any-return]
    threads = getattr(storage, "call_threads", None)
    return await in_thread(function, *args,
                           threads=threads if isinstance(threads, int) else DEFAULT_THREADS)

"""How request handlers call storage: inline when that is cheaper, else in a worker thread.

A storage call from the event loop costs a hand-off to a worker thread and back, often
more than the call itself. A store that can run a short call in the calling thread offers
``run_inline(function, *args)`` (SQLite, :meth:`.sqlite_base.SQLiteStore.run_inline`:
only while no other thread holds it, so the loop never waits behind a release reading a
large round). PostgreSQL does not: its network round trips must not hold up the loop, so
its calls always go to a thread.

The threads are this module's own, handed calls with the event loop's
``run_in_executor``: a hand-off costs a fraction of AnyIO's ``to_thread.run_sync``
(Starlette's ``run_in_threadpool``, whose capacity limiter and cancel scopes cost about
0.1 ms of CPU per call under load).  A store gets as many threads as it has connections
(``call_threads``, e.g. a PostgreSQL pool's size; :data:`DEFAULT_THREADS` otherwise):
more threads would only wait for a connection, and waiting threads cost CPU (with 32
threads on 8 connections a PostgreSQL submission cost half again as much).  What AnyIO
kept is kept: the call runs in a copy of the caller's context (the request id of log
lines), and it always runs to its end, also when the waiting request is cancelled, which
then waits for it before the cancellation goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_THREADS = 8
"""Worker threads of a store that does not say how many it can use (the services'
default ``database_pool_size``)."""

_executors: dict[int, ThreadPoolExecutor] = {}
_executors_lock = threading.Lock()


def _executor(threads: int) -> ThreadPoolExecutor:
    """The shared pool of ``threads`` worker threads (made on first use)."""
    executor = _executors.get(threads)
    if executor is None:
        with _executors_lock:
            executor = _executors.get(threads)
            if executor is None:
                executor = ThreadPoolExecutor(threads, thread_name_prefix="segshuffle-storage")
                _executors[threads] = executor
    return executor


async def in_thread(function: Callable[..., T], *args: Any,
                    threads: int = DEFAULT_THREADS) -> T:
    """``function(*args)`` in one of ``threads`` worker threads, in a copy of the current
    context; the call runs to its end even if the caller is cancelled meanwhile."""
    context = contextvars.copy_context()
    future = asyncio.get_running_loop().run_in_executor(_executor(max(1, threads)),
                                                       context.run, function, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])  # as AnyIO does: the call ends before the cancellation
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

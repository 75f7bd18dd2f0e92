"""The hand-off of a storage call to a worker thread (services/storage_calls.py,
``in_thread``): the outcome comes back, the call runs in a copy of the caller's context,
at most ``threads`` calls run at once, and a cancelled caller waits for its call's end."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import time

import pytest

from segshuffle.services.storage_calls import in_thread, storage_call

REQUEST = contextvars.ContextVar("request", default="none")


def test_the_result_or_the_exception_comes_back_from_a_worker_thread() -> None:
    def fail() -> None:
        raise LookupError("missing")

    async def main() -> tuple[int, int]:
        with pytest.raises(LookupError, match="missing"):
            await in_thread(fail)
        return threading.get_ident(), await in_thread(threading.get_ident)

    loop_thread, call_thread = asyncio.run(main())
    assert call_thread != loop_thread


def test_the_call_runs_in_a_copy_of_the_callers_context() -> None:
    def read_and_change() -> str:
        seen = REQUEST.get()
        REQUEST.set("changed by the call")
        return seen

    async def main() -> tuple[str, str]:
        REQUEST.set("r-1")
        return await in_thread(read_and_change), REQUEST.get()

    assert asyncio.run(main()) == ("r-1", "r-1")


def test_at_most_threads_calls_run_at_once() -> None:
    running = 0
    most = 0
    lock = threading.Lock()

    def call() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with lock:
            running -= 1

    async def main() -> None:
        await asyncio.gather(*(in_thread(call, threads=3) for _ in range(12)))

    asyncio.run(main())
    assert most == 3


def test_a_cancelled_caller_waits_for_the_end_of_its_call() -> None:
    started = threading.Event()
    release = threading.Event()
    ended = threading.Event()

    def call() -> str:
        started.set()
        release.wait(10)
        ended.set()
        return "done"

    async def main() -> None:
        task = asyncio.ensure_future(in_thread(call, threads=2))
        while not started.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()  # the cancellation waits for the call
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ended.is_set()
        assert await in_thread(lambda: "next", threads=2) == "next"  # the thread is free

    asyncio.run(main())


def test_a_call_that_ends_after_its_loop_closed_leaves_the_thread_working() -> None:
    release = threading.Event()
    started = threading.Event()

    def slow() -> None:
        started.set()
        release.wait(10)

    loop = asyncio.new_event_loop()
    task = loop.create_task(in_thread(slow, threads=1))
    loop.run_until_complete(asyncio.sleep(0.01))
    assert started.wait(10)
    loop.close()  # with the call still running (its task is left pending)
    release.set()

    async def later() -> int:
        return await storage_call(object(), lambda: 7)

    assert asyncio.run(asyncio.wait_for(in_thread(lambda: 7, threads=1), 10)) == 7
    assert asyncio.run(later()) == 7
    assert not task.done()
    del task  # its loop is gone: asyncio logs that it was destroyed pending
    gc.collect()

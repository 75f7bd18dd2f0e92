"""How request handlers call storage: inline when that is cheaper, else in a worker thread.

A storage call from the event loop costs a hand-off to a worker thread and back (tens of
microseconds of CPU and two wake-ups), often more than the call itself. A store that can
run a short call in the calling thread offers ``run_inline(function, *args)`` (SQLite,
:meth:`.sqlite_base.SQLiteStore.run_inline`: only while no other thread holds it, so the
loop never waits behind a release reading a large round). PostgreSQL does not: its
network round trips must not hold up the loop, so its calls always go to a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

T = TypeVar("T")


async def storage_call(storage: object, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)``, a short call that touches ``storage``: inline on the event loop
    when ``storage`` offers it and is free, else in a worker thread."""
    run_inline = getattr(storage, "run_inline", None)
    if run_inline is not None:
        done, value = run_inline(function, *args)
        if done:
            return value  # type: ignore[no-any-return]
    return await run_in_threadpool(function, *args)

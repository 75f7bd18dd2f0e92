"""SIGINT and SIGTERM while a command runs, turned into one clean stop.

A Python signal handler that raises ``KeyboardInterrupt`` raises it wherever the main
thread happens to be.  In plain code that is what we want: ``with`` and ``finally``
blocks clean up on the way out.  Inside an asyncio event loop it is not: the exception
lands in whichever task is running, which ends with it, and asyncio later logs that
task's "exception was never retrieved" with a traceback.  :class:`SignalStop` therefore
raises only outside an event loop; while :meth:`SignalStop.run` drives one, a signal
cancels that run's main task instead, which unwinds every task it awaits, and the run
raises :class:`~segshuffle.cli.errors.Interrupted` once the loop is closed.

Only the first signal acts: later ones are ignored while the command cleans up (every
cleanup step is bounded), so a second Ctrl-C cannot cut a cleanup short.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any, TypeVar

from .errors import Interrupted

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalStop:
    """SIGINT and SIGTERM handlers for the duration of a ``with`` block (see the module
    docstring).  Outside the main thread, where Python cannot install handlers, it does
    nothing."""

    def __init__(self) -> None:
        self.signal_number: int | None = None
        """The first signal received, if any."""
        self._previous: dict[int, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._in_loop = False

    def __enter__(self) -> SignalStop:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._on_signal) for sig in SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _on_signal(self, signal_number: int, _frame: FrameType | None) -> None:
        if self.signal_number is not None:
            return
        self.signal_number = signal_number
        if not self._in_loop:
            raise Interrupted(signal_number)
        if self._loop is not None and self._task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._task.cancel)

    def check(self) -> None:
        """Raise :class:`Interrupted` if a signal was received."""
        if self.signal_number is not None:
            raise Interrupted(self.signal_number)

    def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """``asyncio.run(work())``, which a signal cancels; then :class:`Interrupted`
        (whatever the cancelled work raised on its way out)."""

        async def main() -> T:
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
            if self.signal_number is not None:  # received before the task existed
                raise asyncio.CancelledError
            return await work()

        self._in_loop = True
        try:
            result = asyncio.run(main())
        except BaseException:
            if self.signal_number is not None:
                raise Interrupted(self.signal_number) from None
            raise
        finally:
            self._in_loop = False
            self._loop = self._task = None
        self.check()
        return result

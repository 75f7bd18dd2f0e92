"""Progress lines while the main thread waits on something slow."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Ticker:
    """Calls ``say(elapsed_seconds)`` after ``first`` seconds and then every ``every``
    seconds, from a daemon thread, until the ``with`` block ends.

    The main thread stays where a signal can reach it (a blocking HTTP call, say) while
    the ticker shows that it is still waiting; at most ``1 + elapsed / every`` lines,
    whatever the wait, and none for a wait shorter than ``first``.
    """

    def __init__(self, say: Callable[[float], None], *, first: float = 5.0,
                 every: float = 10.0) -> None:
        if first <= 0 or every <= 0:
            raise ValueError("the ticker's intervals must be positive")
        self._say = say
        self._first = first
        self._every = every
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        pause = self._first
        while not self._done.wait(pause):
            self._say(time.monotonic() - started)
            pause = self._every

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5.0)  # only a `say` in progress can hold it up

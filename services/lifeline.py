"""A service started by another process stops when that process is gone, however it ends.

The supervisor (``segshuffle demo``, the test harness: :class:`Lifeline`) opens a pipe,
keeps its write end and hands the read end to every service it starts (the
``lifeline_fd`` setting).  Nobody ever writes to the pipe: the read end reaches end of
file only when every copy of the write end is closed, which the kernel does when the
supervisor exits, ``SIGKILL`` included.  The service (:func:`watch`) waits for that in a
thread, then stops the way its supervisor would have stopped it: ``SIGTERM`` (uvicorn's
graceful shutdown), and after :data:`STOP_GRACE_SECONDS` an immediate exit.  The server's
own workers die with the server (:mod:`.server.child_guard`), so a whole tree goes.

A pipe rather than ``PR_SET_PDEATHSIG``: the kernel fires that signal when the *thread*
that started the child ends, so a service started from a short-lived thread (a thread
pool's) would die early; the pipe belongs to the process, and works beyond Linux too.
The write end is not inheritable (no ``exec``-ed child keeps the line open), and a
child *forked* from the supervisor closes its copy (:func:`os.register_at_fork`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import weakref

STOP_GRACE_SECONDS = 20.0
"""How long a service whose supervisor is gone may take to stop after ``SIGTERM`` (uvicorn
allows 10 s of graceful shutdown) before it exits at once."""

ORPHANED_EXIT_STATUS = 70
"""The status of a service that had to exit without finishing its graceful shutdown."""


class Lifeline:
    """The supervisor's end: a pipe whose read end (:attr:`child_fd`) each child is given
    (``pass_fds``) and whose write end only this process holds until :meth:`close`."""

    def __init__(self) -> None:
        self.child_fd, self._write_fd = os.pipe()  # both non-inheritable (PEP 446)
        _open_lifelines.add(self)

    @property
    def closed(self) -> bool:
        return self._write_fd < 0

    def close(self) -> None:
        """Cut the line: every child still watching it stops; idempotent."""
        for descriptor in (self._write_fd, self.child_fd):
            if descriptor >= 0:
                os.close(descriptor)
        self._write_fd = self.child_fd = -1
        _open_lifelines.discard(self)

    def _forget_in_forked_child(self) -> None:
        """In a child forked from the supervisor: drop the inherited write end, so that
        the child does not keep the line open after the supervisor is gone."""
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1

    def __enter__(self) -> Lifeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_open_lifelines: weakref.WeakSet[Lifeline] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for lifeline in list(_open_lifelines):
        lifeline._forget_in_forked_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def wait_for_end_of_file(descriptor: int) -> None:
    """Block until ``descriptor`` reads end of file (or fails: the line is unusable,
    which is taken as the supervisor being gone too)."""
    try:
        while os.read(descriptor, 4096):
            pass  # nobody writes; bytes would only be someone else's mistake
    except OSError:
        pass


def stop_this_process(grace: float = STOP_GRACE_SECONDS) -> None:
    """``SIGTERM`` to this process (graceful shutdown), then exit at once after ``grace``
    seconds if it is still running."""
    logging.getLogger("segshuffle.lifeline").warning(
        "the process that started this service is gone: stopping")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    os._exit(ORPHANED_EXIT_STATUS)


def watch(descriptor: int, grace: float = STOP_GRACE_SECONDS) -> threading.Thread:
    """Stop this process once the lifeline ``descriptor`` reads end of file (in a daemon
    thread, returned); if the supervisor is already gone, that is at once.  A descriptor
    that is not open is a ValueError (a setting that cannot be used)."""
    try:
        os.fstat(descriptor)
    except OSError:
        raise ValueError(f"lifeline_fd {descriptor} is not an open file descriptor") from None

    def run() -> None:
        wait_for_end_of_file(descriptor)
        stop_this_process(grace)

    thread = threading.Thread(target=run, name="lifeline", daemon=True)
    thread.start()
    return thread

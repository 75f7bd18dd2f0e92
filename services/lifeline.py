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

A supervisor that made a scratch folder for its services (databases, keys, logs) also
starts a janitor (:func:`start_janitor`): a small process on the same line that, once the
line is cut, waits until no process holds anything open under the folder (bounded by
:data:`JANITOR_WAIT_SECONDS`) and removes it, so a supervisor killed outright leaves no
folder behind either.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

STOP_GRACE_SECONDS = 20.0
"""How long a service whose supervisor is gone may take to stop after ``SIGTERM`` (uvicorn
allows 10 s of graceful shutdown) before it exits at once."""

ORPHANED_EXIT_STATUS = 70
"""The status of a service that had to exit without finishing its graceful shutdown."""

JANITOR_WAIT_SECONDS = STOP_GRACE_SECONDS + 10.0
"""How long a janitor waits, after the line is cut, for the services to let go of their
folder (they stop within :data:`STOP_GRACE_SECONDS`) before it removes the folder anyway."""


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


def holds_open(folder: str | os.PathLike[str], *, proc: str = "/proc") -> bool:
    """Whether a process other than this one has a file, or its working directory, under
    ``folder`` (read from ``/proc``; processes this user may not inspect are not seen).

    Without ``/proc`` (not Linux) nothing is seen, and a janitor waits its whole bound."""
    root = os.path.realpath(folder)
    inside = root.rstrip(os.sep) + os.sep
    mine = str(os.getpid())
    try:
        pids = [entry for entry in os.listdir(proc) if entry.isdigit() and entry != mine]
    except OSError:
        return True
    for pid in pids:
        links = [f"{proc}/{pid}/cwd"]
        try:
            links += [f"{proc}/{pid}/fd/{fd}" for fd in os.listdir(f"{proc}/{pid}/fd")]
        except OSError:
            continue  # gone meanwhile, or not ours to inspect
        for link in links:
            try:
                target = os.readlink(link)
            except OSError:
                continue
            if target == root or target.startswith(inside):
                return True
    return False


def remove_when_cut(descriptor: int, folder: str | os.PathLike[str], *,
                    wait: float = JANITOR_WAIT_SECONDS, poll: float = 0.1) -> None:
    """The janitor's work: once ``descriptor`` reads end of file, wait (at most ``wait``
    seconds) until nobody holds anything open under ``folder``, then remove it."""
    wait_for_end_of_file(descriptor)
    can_see = Path("/proc/self/fd").is_dir()
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and (not can_see or holds_open(folder)):
        time.sleep(poll)
    shutil.rmtree(folder, ignore_errors=True)


def start_janitor(line: Lifeline, folder: str | os.PathLike[str], *,
                  wait: float = JANITOR_WAIT_SECONDS) -> subprocess.Popen[bytes]:
    """A process that removes ``folder`` once ``line`` is cut (:func:`remove_when_cut`),
    however the supervisor ends.  It runs in a session of its own, so a signal to the
    supervisor's process group (Ctrl-C, ``timeout``) does not stop it before its work."""
    return subprocess.Popen(
        [sys.executable, "-m", "segshuffle.services.lifeline", "--remove", os.fspath(folder),
         "--fd", str(line.child_fd), "--wait", repr(float(wait))],
        pass_fds=(line.child_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m segshuffle.services.lifeline",
        description="remove a folder once a supervisor's lifeline is cut")
    parser.add_argument("--remove", required=True, help="the folder to remove")
    parser.add_argument("--fd", type=int, required=True, help="the lifeline's read end")
    parser.add_argument("--wait", type=float, default=JANITOR_WAIT_SECONDS,
                        help="longest wait for the folder's users to let go (seconds)")
    options = parser.parse_args(argv)
    remove_when_cut(options.fd, options.remove, wait=options.wait)


if __name__ == "__main__":
    _main()

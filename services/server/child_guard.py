"""Worker processes die with the server, however it dies (``SIGKILL`` included).

The decrypt pool (:mod:`.decrypt`) runs its workers from a ``forkserver`` process, so
neither is a child the kernel would reap with the server.  Two guards, Linux only:

- the fork server imports :mod:`.forkserver_guard` first (``set_forkserver_preload``),
  which asks the kernel to kill it when its parent, the server, exits
  (``PR_SET_PDEATHSIG``, :func:`die_with_parent`); the fork server is started by a
  thread that never ends (:func:`fork_server_context`), because the kernel means the
  creating *thread* by "parent";
- every worker runs :func:`watch_server` as the pool's initializer: a thread waits on a
  pidfd of the server and ends the worker when the server is gone, even if the fork
  server were still there.

Once both are gone, the resource tracker (which multiprocessing starts beside them) reads
the end of its pipe and exits too.  Elsewhere than Linux the guards do nothing.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import select
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel for SIGKILL when the parent exits; exit now if it already has."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not allowed here: the workers' own guard still holds
    if os.getppid() != parent or parent == 1:
        os._exit(0)  # the parent died before the guard was set


def watch_server(server_pid: int) -> None:
    """Pool initializer: end this worker as soon as process ``server_pid`` is gone."""
    if not hasattr(os, "pidfd_open"):
        return
    try:
        descriptor = os.pidfd_open(server_pid)
    except OSError:  # already gone
        os._exit(0)

    def wait() -> None:
        select.select([descriptor], [], [])  # readable once the process has exited
        os._exit(0)

    threading.Thread(target=wait, name="server-watch", daemon=True).start()


_keeper_lock = threading.Lock()
_keeper_started = False


def _keep_fork_server() -> None:
    """The body of the keeper thread: start the fork server, then never return."""
    multiprocessing.forkserver.ensure_running()
    _fork_server_up.set()
    threading.Event().wait()


_fork_server_up = threading.Event()


def fork_server_context() -> multiprocessing.context.BaseContext:
    """The ``forkserver`` context, its server running, started with the guard preloaded
    by a thread that lives as long as this process (the kernel's "parent" of the fork
    server is the creating thread: any shorter-lived one would take it down early)."""
    global _keeper_started
    context = multiprocessing.get_context("forkserver")
    with _keeper_lock:
        if not _keeper_started:
            context.set_forkserver_preload([f"{__package__}.forkserver_guard"])
            threading.Thread(target=_keep_fork_server, name="fork-server-keeper",
                             daemon=True).start()
            _keeper_started = True
    if not _fork_server_up.wait(timeout=60):
        raise RuntimeError("the fork server did not start within 60 s")
    return context


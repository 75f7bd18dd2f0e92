"""Worker processes die with the server, however it dies (``SIGKILL`` included).

The decrypt pool (:mod:`.decrypt`) runs its workers from a ``forkserver`` process, so
neither is a child the kernel would reap with the server.  Two guards, Linux only:

- the fork server imports :mod:`.forkserver_guard` first (``set_forkserver_preload``),
  which asks the kernel to kill it when its parent, the server, exits
  (``PR_SET_PDEATHSIG``, :func:`die_with_parent`); the
  server starts the fork server from its main thread (:func:`start_fork_server`),
  because the kernel means the creating *thread* by "parent";
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


def start_fork_server() -> multiprocessing.context.BaseContext:
    """The ``forkserver`` context, its server started now (from the calling thread, which
    should be the main one) with this module preloaded."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([f"{__package__}.forkserver_guard"])
    multiprocessing.forkserver.ensure_running()
    return context


"""A process given a lifeline stops when the process that started it is gone: closed
normally, or killed outright (SIGKILL) with a child it forked still running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from segshuffle.services import lifeline

from .process_support import alive, gone_within

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes and signals")

WAIT_SECONDS = 60.0
"""A generous bound on a process's exit (the machine may be busy)."""

WATCHER = """
import sys, time
from segshuffle.services.lifeline import watch
watch(int(sys.argv[1]), grace=float(sys.argv[2]))
print("watching", flush=True)
time.sleep(600)
"""

SUPERVISOR = """
import os, subprocess, sys, time
from segshuffle.services.lifeline import Lifeline
line = Lifeline()
forked = os.fork() if sys.argv[1] == "fork" else None
if forked == 0:
    time.sleep(600)  # a forked child of the supervisor that outlives it
    os._exit(0)
watcher = subprocess.Popen([sys.executable, "-c", sys.argv[2], str(line.child_fd), "20"],
                           pass_fds=(line.child_fd,), stdout=subprocess.PIPE, text=True)
assert watcher.stdout.readline() == "watching\\n"
print(watcher.pid, forked or 0, flush=True)
time.sleep(600)
"""


def _watcher(line: lifeline.Lifeline, grace: float,
             prelude: str = "") -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", prelude + WATCHER, str(line.child_fd),
                                str(grace)],
                               pass_fds=(line.child_fd,), stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline() == "watching\n"
    return process


def test_closing_the_line_stops_the_child_with_sigterm() -> None:
    with lifeline.Lifeline() as line:
        child = _watcher(line, grace=20)
        try:
            line.close()
            assert child.wait(WAIT_SECONDS) == -signal.SIGTERM
        finally:
            child.kill()
            child.wait()
    assert line.closed


def test_a_child_that_ignores_sigterm_exits_after_the_grace() -> None:
    with lifeline.Lifeline() as line:
        child = _watcher(line, grace=0.2,
                         prelude="import signal; signal.signal(signal.SIGTERM, "
                                 "signal.SIG_IGN)\n")
        try:
            line.close()
            assert child.wait(WAIT_SECONDS) == lifeline.ORPHANED_EXIT_STATUS
        finally:
            child.kill()
            child.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("fork", ["fork", "no-fork"])
def test_the_child_of_a_killed_supervisor_stops(fork: str) -> None:
    """SIGKILL of the supervisor: the kernel closes its write end and the child stops,
    even while a process forked from the supervisor (holding a copy of every descriptor)
    lives on."""
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR, fork, WATCHER],
                                  stdout=subprocess.PIPE, text=True)
    assert supervisor.stdout is not None
    watcher, forked = (int(word) for word in supervisor.stdout.readline().split())
    try:
        supervisor.kill()
        supervisor.wait(WAIT_SECONDS)
        assert gone_within(watcher, WAIT_SECONDS)
    finally:
        for pid in (watcher, forked):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_descriptor_that_is_not_open_is_refused() -> None:
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    with pytest.raises(ValueError, match=f"lifeline_fd {read} is not an open file descriptor"):
        lifeline.watch(read)


def test_a_janitor_removes_its_folder_once_the_line_is_cut(tmp_path: Path) -> None:
    """A supervisor's scratch folder goes when the supervisor does, however it ends."""
    folder = tmp_path / "scratch"
    (folder / "keys").mkdir(parents=True)
    (folder / "server.sqlite3").write_bytes(b"state")
    line = lifeline.Lifeline()
    janitor = lifeline.start_janitor(line, folder, wait=WAIT_SECONDS)
    time.sleep(0.2)
    assert folder.exists() and janitor.poll() is None  # nothing happens while the line holds
    line.close()
    assert janitor.wait(timeout=WAIT_SECONDS) == 0
    assert not folder.exists()


def test_a_janitor_waits_for_the_folders_users_to_let_go(tmp_path: Path) -> None:
    """A service still writing in the folder (it stops within its grace) keeps it."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; log = open(sys.argv[1], 'w'); print('open', flush=True); "
         "time.sleep(1.5)", str(folder / "service.log")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "open\n"
    assert lifeline.holds_open(folder)
    line = lifeline.Lifeline()
    janitor = lifeline.start_janitor(line, folder, wait=WAIT_SECONDS)
    line.close()
    time.sleep(0.5)
    assert folder.exists()  # the holder still has its log open
    holder.wait(timeout=WAIT_SECONDS)
    assert janitor.wait(timeout=WAIT_SECONDS) == 0
    assert not folder.exists()


def test_a_supervisor_killed_outright_leaves_no_scratch_folder(tmp_path: Path) -> None:
    """SIGKILL gives the supervisor no chance to remove its folder: the janitor does."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    supervisor = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from segshuffle.services.lifeline import Lifeline, start_janitor\n"
         "line = Lifeline(); start_janitor(line, sys.argv[1])\n"
         "print('ready', flush=True); time.sleep(600)", str(folder)],
        stdout=subprocess.PIPE, text=True)
    assert supervisor.stdout is not None and supervisor.stdout.readline() == "ready\n"
    supervisor.kill()
    supervisor.wait()
    deadline = time.monotonic() + WAIT_SECONDS
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not folder.exists()

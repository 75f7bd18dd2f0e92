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


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


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
        assert _gone_within(watcher, WAIT_SECONDS)
    finally:
        for pid in (watcher, forked):
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_descriptor_that_is_not_open_is_refused() -> None:
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    with pytest.raises(ValueError, match=f"lifeline_fd {read} is not an open file descriptor"):
        lifeline.watch(read)

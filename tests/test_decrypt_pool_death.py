"""The decrypt pool dies with a killed server: after ``SIGKILL`` of
the process that owns it, the fork server, the workers and the resource tracker are gone
within seconds (they used to stay 30 s and more)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .process_support import alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the guards use Linux's prctl and pidfd")

OWNER = """
import os, sys, time
from segshuffle.services.server.decrypt import Decryptor

decryptor = Decryptor(workers=2, threshold=1)
assert decryptor.open(bytes(32), b"info", [bytes(80)] * 4) == ["decrypt-failed"] * 4
print(os.getpid(), flush=True)
time.sleep(600)
"""


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(text[text.rindex(")") + 2:].split()[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def test_the_pool_dies_with_its_killed_owner(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        assert int(owner.stdout.readline()) == owner.pid  # the pool has opened a chunk
        children = _descendants(owner.pid)
        assert len(children) >= 3  # fork server, two workers (and the resource tracker)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(pid) for pid in children):
            time.sleep(0.1)
        assert not [pid for pid in children if alive(pid)]
    finally:
        if owner.poll() is None:
            owner.kill()

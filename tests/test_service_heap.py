"""Both services freeze their start-up heap before serving (services/heap.py).

A full collection of CPython's cyclic collector walks every tracked object, and a
service's start-up heap (modules, classes, schemas: several hundred thousand objects)
was walked again every few hundred requests: about a tenth of the shuffler's CPU under
load.  Each check runs in a child process, so this test process keeps its own collector
settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from segshuffle.services.heap import YOUNG_THRESHOLD

ADMIN = "a" * 32
SHUFFLER = "s" * 32

SERVE_AND_REPORT = """
import gc, json, sys
import uvicorn
from segshuffle.services.server.runner import run
from segshuffle.services.server.settings import Settings

def report(self, sockets=None):
    for sock in sockets or ():
        sock.close()
    print(json.dumps({"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}))

uvicorn.Server.run = report
sys.exit(run(Settings()))
"""


def test_the_server_serves_with_its_start_up_heap_frozen(tmp_path: Path) -> None:
    env = {**os.environ, "SEGSHUFFLE_SERVER_DATABASE": str(tmp_path / "server.sqlite3"),
           "SEGSHUFFLE_SERVER_ADMIN_TOKEN": ADMIN,
           "SEGSHUFFLE_SERVER_SHUFFLER_TOKEN": SHUFFLER, "SEGSHUFFLE_SERVER_PORT": "0"}
    done = subprocess.run([sys.executable, "-c", SERVE_AND_REPORT], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout.strip().splitlines()[-1])
    # what start-up made: tens of thousands of objects at least (modules, classes, schemas)
    assert state["frozen"] > 20_000, state
    assert state["threshold"][0] == YOUNG_THRESHOLD


CYCLE_AFTER_FREEZE = """
import gc, weakref
from segshuffle.services.heap import freeze_start_up_heap

class Node:
    pass

kept = Node()
kept.self = kept
freeze_start_up_heap()
late = Node()
late.self = late
watch_late, watch_kept = weakref.ref(late), weakref.ref(kept)
del late, kept
gc.collect()
print(watch_late() is None, watch_kept() is None)
"""


def test_garbage_made_after_the_freeze_is_still_collected() -> None:
    """A cycle made after the freeze is freed by a collection; one alive at the freeze
    stays (it is in the permanent generation)."""
    done = subprocess.run([sys.executable, "-c", CYCLE_AFTER_FREEZE], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.split() == ["True", "False"]

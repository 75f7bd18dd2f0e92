"""What the shuffler's key-ordered message table costs a submission, against arrival order.

    python benchmarks/bench_storage_layout.py --users 100000 --messages-per-user 1,6

The shuffler stores every message under a fresh random 128-bit row key in a
``WITHOUT ROWID`` table, so rows sit in key order and the file never holds the order in
which messages arrived, nor which of them arrived together (docs/architecture.md, "What
the shuffler keeps").  The price: each message lands in a random leaf of the B-tree, so a
submission of k messages dirties about k + 1 pages, and its commit writes each of them
to the write-ahead log.  Appending in arrival order would dirty one or two.

This benchmark measures both in one run, on fresh files in the same directory:

- ``shuffler``: :meth:`segshuffle.services.shuffler.storage.Storage.submit` as the
  service calls it (participation row, participant count, k sealed messages, one
  ``BEGIN IMMEDIATE`` ... ``COMMIT``, the service's pragmas);
- ``arrival``: the same rows and transaction, but the messages appended to a rowid table
  in arrival order: the layout the shuffler refuses, measured as a bound on what any
  tuning of the key-ordered table could save.

It prints CPU-microseconds per submission (medians over ``--slices`` slices, the first
slice of each run left out as warm-up) and the ratio, for every ``--messages-per-user``.
CPU time is the process's (``time.process_time``), so other load on the machine changes
the figures less than wall time would.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from segshuffle.services.shuffler.storage import Storage
from segshuffle.services.shuffler.storage_api import StoredMessage

CAMPAIGN = "bench-layout"
ROUND = 2
SEALED_BYTES = 90
"""A round-2 message as stored: a 60-byte ciphertext sealed (nonce + tag) at rest."""
MAX_USERS = 2_000_000

_ARRIVAL_SCHEMA = """
CREATE TABLE participations (campaign_id TEXT, round INTEGER, token_hash BLOB,
                             PRIMARY KEY (campaign_id, round, token_hash)) WITHOUT ROWID;
CREATE TABLE participant_counts (campaign_id TEXT, round INTEGER, participants INTEGER,
                                 PRIMARY KEY (campaign_id, round)) WITHOUT ROWID;
CREATE TABLE arrivals (campaign_id TEXT, round INTEGER, stream TEXT, row_key BLOB,
                       ciphertext BLOB);
"""


def _submissions(users: int, per_user: int) -> list[tuple[bytes, list[StoredMessage]]]:
    """Random token hashes and sealed-size messages, drawn before any clock starts."""
    return [(secrets.token_bytes(32),
             [StoredMessage("levels" if i == 0 else "data", secrets.token_bytes(16),
                            secrets.token_bytes(SEALED_BYTES)) for i in range(per_user)])
            for _ in range(users)]


def _arrival_store(path: Path) -> Callable[[bytes, list[StoredMessage]], None]:
    """A store with the shuffler's pragmas whose messages are appended in arrival order."""
    db = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "secure_delete=ON"):
        db.execute(f"PRAGMA {pragma}")
    db.executescript(_ARRIVAL_SCHEMA)

    def submit(token_hash: bytes, messages: list[StoredMessage]) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO participations VALUES (?, ?, ?)", (CAMPAIGN, ROUND, token_hash))
        db.execute("INSERT INTO participant_counts VALUES (?, ?, 1) ON CONFLICT DO UPDATE "
                   "SET participants = participants + 1", (CAMPAIGN, ROUND))
        db.executemany("INSERT INTO arrivals VALUES (?, ?, ?, ?, ?)",
                       [(CAMPAIGN, ROUND, m.stream, m.row_key, m.sealed) for m in messages])
        db.execute("COMMIT")

    return submit


def _measure(submit: Callable[[bytes, list[StoredMessage]], object],
             work: list[tuple[bytes, list[StoredMessage]]], slices: int,
             label: str) -> float:
    """Median CPU-microseconds per submission over the slices after the first."""
    size = max(1, len(work) // (slices + 1))
    per_slice = []
    for start in range(0, size * (slices + 1), size):
        began = time.process_time()
        for token_hash, messages in work[start:start + size]:
            submit(token_hash, messages)
        per_slice.append((time.process_time() - began) / size * 1e6)
        print(f"[layout] {label}: {start + size}/{len(work)} submissions, "
              f"{per_slice[-1]:.1f} CPU-us each", file=sys.stderr, flush=True)
    return statistics.median(per_slice[1:])


def run(users: int, per_user: int, slices: int, directory: Path) -> dict[str, float]:
    """Both layouts on the same submissions; CPU-us per submission and the ratio."""
    work = _submissions(users, per_user)
    shuffler = Storage(directory / f"shuffler-{per_user}.db")
    try:
        keyed = _measure(lambda t, m: shuffler.submit(CAMPAIGN, ROUND, t, m), work, slices,
                         f"shuffler k={per_user}")
    finally:
        shuffler.close()
    arrival = _measure(_arrival_store(directory / f"arrival-{per_user}.db"), work, slices,
                       f"arrival k={per_user}")
    return {"messages_per_user": per_user, "users": users,
            "shuffler_cpu_us_per_submission": round(keyed, 1),
            "arrival_order_cpu_us_per_submission": round(arrival, 1),
            "ratio": round(keyed / arrival, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--messages-per-user", default="1,6",
                        help="comma-separated message counts per submission")
    parser.add_argument("--slices", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        counts = [int(c) for c in args.messages_per_user.split(",")]
    except ValueError:
        parser.error("--messages-per-user takes comma-separated integers")
    if not 1 <= args.users <= MAX_USERS:
        parser.error(f"--users must lie in [1, {MAX_USERS}]")
    if not all(1 <= c <= 64 for c in counts) or not 1 <= args.slices <= 100:
        parser.error("--messages-per-user in [1, 64] and --slices in [1, 100]")
    with tempfile.TemporaryDirectory(prefix="segshuffle-layout-") as directory:
        results = [run(args.users, c, args.slices, Path(directory)) for c in counts]
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load_average": load, "results": results}))
        return 0
    print(f"== CPU-us per submission, medians over {args.slices} slices, "
          f"load average {load:.1f}")
    print(f"{'messages':>8} {'users':>9} {'key order':>10} {'arrival':>9} {'ratio':>6}")
    for r in results:
        print(f"{r['messages_per_user']:>8} {r['users']:>9} "
              f"{r['shuffler_cpu_us_per_submission']:>10.1f} "
              f"{r['arrival_order_cpu_us_per_submission']:>9.1f} {r['ratio']:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

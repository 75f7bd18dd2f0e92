"""Benchmarks of the shuffler and the demo; prints medians over repeats.

    python benchmarks/bench_shuffler.py release --messages 100000 --repeats 5
    python benchmarks/bench_shuffler.py demo --users 2000 --repeats 3

``release``: storing N ciphertexts (one submission of 10 per user), then closing the
round: CSPRNG permutation and the copy into release order (one transaction), and
reading it back in chunks of 5000.  ``demo``: ``segshuffle demo --json`` end to end
(both services as subprocesses, users over HTTP), total and per-phase seconds.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from segshuffle.services.shuffler.enrollment import token_hash
from segshuffle.services.shuffler.permutation import random_permutation
from segshuffle.services.shuffler.storage import Storage


def bench_release(messages: int, repeats: int) -> None:
    per_user = 10
    figures: dict[str, list[float]] = {"submit": [], "permutation": [], "release": [],
                                       "read": []}
    for r in range(repeats):
        with tempfile.TemporaryDirectory() as directory:
            storage = Storage(Path(directory) / "bench.sqlite3")
            started = time.perf_counter()
            for u in range(messages // per_user):
                storage.submit("c", 2, token_hash(f"{r}-{u}"),
                               {"data": [secrets.token_bytes(80) for _ in range(per_user)]})
            figures["submit"].append(time.perf_counter() - started)
            started = time.perf_counter()
            random_permutation(messages)
            figures["permutation"].append(time.perf_counter() - started)
            started = time.perf_counter()
            record = storage.start_release("c", 2, minimum=1, chunk_size=5000,
                                           streams=["data"])
            figures["release"].append(time.perf_counter() - started)
            started = time.perf_counter()
            for index in range(record.chunk_count("data")):
                storage.chunk(record, "data", index)
            figures["read"].append(time.perf_counter() - started)
            storage.close()
        sys.stderr.write(f"repeat {r + 1}/{repeats} done\n")
    print(f"release benchmark: {messages} ciphertexts of 80 bytes, {repeats} repeats (medians)")
    for name, values in figures.items():
        print(f"  {name:<12} {statistics.median(values):8.3f} s")
    print(f"  submissions/s {messages / per_user / statistics.median(figures['submit']):8.0f}")


def bench_demo(users: int, repeats: int) -> None:
    reports = []
    for r in range(repeats):
        result = subprocess.run(
            [sys.executable, "-m", "segshuffle.cli.main", "demo", "--users", str(users),
             "--seed", str(r), "--json"], capture_output=True, text=True, check=True)
        reports.append(json.loads(result.stdout))
        sys.stderr.write(f"repeat {r + 1}/{repeats}: {reports[-1]['seconds']:.1f} s\n")
    print(f"demo benchmark: {users} users, {repeats} repeats (medians)")
    print(f"  total        {statistics.median(r['seconds'] for r in reports):8.2f} s")
    for phase in reports[0]["timings"]:
        values = [r["timings"][phase] for r in reports]
        print(f"  {phase:<15} {statistics.median(values):8.2f} s")
    print(f"  mse          {statistics.median(r['mse'] for r in reports):10.5f} "
          f"(bound {statistics.median(r['mse_bound'] for r in reports):.5f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    release = sub.add_parser("release")
    release.add_argument("--messages", type=int, default=100_000)
    release.add_argument("--repeats", type=int, default=5)
    demo = sub.add_parser("demo")
    demo.add_argument("--users", type=int, default=2000)
    demo.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.what == "release":
        bench_release(args.messages, args.repeats)
    else:
        bench_demo(args.users, args.repeats)


if __name__ == "__main__":
    main()

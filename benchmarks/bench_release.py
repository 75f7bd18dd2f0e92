"""The shuffler's release of a large round: time and peak memory.

    python benchmarks/bench_release.py --users 1000000 --messages-per-user 4
    python benchmarks/bench_release.py --users 100000 --database postgresql://...

Fills a fresh shuffler storage with a synthetic round 2 (``--users`` submissions of
``--messages-per-user`` ciphertexts of ``--ciphertext-bytes`` random bytes each, sealed
under the round key exactly as the service stores them), then releases it with the
shuffler's own :class:`~segshuffle.services.shuffler.release.Releaser` up to the HTTP
request: close the round, compute the secret order, and produce every chunk in release
order (read the sealed rows of the chunk's keys, unseal them). The chunks go to a sink
that only counts them, so the figures are the shuffler's side of a release.

It prints the time of each phase and the peak resident memory of the release alone
(the kernel's high-water mark is reset before it starts, ``/proc/self/clear_refs``),
next to the resident memory before it and the size of the round's ciphertexts, so one
can see that a release holds the row keys and the order (16 + 8 bytes per message and
their sort), never the round's ciphertexts.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from segshuffle.services.shuffler.backends import open_storage
from segshuffle.services.shuffler.enrollment import token_hash
from segshuffle.services.shuffler.release import Releaser
from segshuffle.services.shuffler.shuffled_stream import PAGE_ROWS, keyset_pages
from segshuffle.services.shuffler.vault import RoundKeys, seal_submission

CAMPAIGN = "bench-release"
ROUND = 2
BATCH_USERS = 1000
MAX_USERS = 5_000_000


def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> bool:
    """Reset the peak resident memory (VmHWM) to the current one; False if not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def fill(storage: Any, keys: RoundKeys, users: int, per_user: int, size: int) -> float:
    """Store ``users`` submissions of round 2; returns the seconds it took."""
    key = keys.get(CAMPAIGN, ROUND, create=True)
    started = time.perf_counter()
    for user in range(users):
        levels = [secrets.token_bytes(size)]
        data = [secrets.token_bytes(size) for _ in range(per_user)]
        messages = seal_submission(key, CAMPAIGN, ROUND, {"levels": levels, "data": data})
        storage.submit(CAMPAIGN, ROUND, token_hash(f"user-{user}"), messages)
        if (user + 1) % max(1, users // 20) == 0:
            sys.stderr.write(f"\rfilled {user + 1}/{users} users "
                             f"({time.perf_counter() - started:.0f} s)")
    sys.stderr.write("\n")
    return time.perf_counter() - started


def release(storage: Any, keys: RoundKeys, users: int, chunk_size: int) -> dict[str, float]:
    """Close the round and produce every chunk of every stream; returns phase timings."""
    releaser = Releaser(storage, None, keys, chunk_size=chunk_size)  # type: ignore[arg-type]
    timings: dict[str, float] = {}
    started = time.perf_counter()
    cpu_started = time.process_time()
    record = releaser.start(CAMPAIGN, ROUND, users)
    timings["close_s"] = time.perf_counter() - started
    delivered = 0
    first_chunk = None
    produce_started = time.perf_counter()
    for stream in sorted(record.stream_sizes):
        chunks = record.chunk_count(stream)
        for index in range(chunks):
            ciphertexts = releaser.chunk(record, stream, index)
            delivered += len(ciphertexts)
            if first_chunk is None:
                first_chunk = time.perf_counter() - produce_started  # includes the order
            if (index + 1) % max(1, chunks // 10) == 0:
                sys.stderr.write(f"\r{stream}: chunk {index + 1}/{chunks}")
        sys.stderr.write("\n")
    timings["order_and_first_chunk_s"] = first_chunk or 0.0
    timings["produce_all_chunks_s"] = time.perf_counter() - produce_started
    timings["release_cpu_s"] = time.process_time() - cpu_started
    timings["messages"] = float(delivered)
    expected = sum(record.stream_sizes.values())
    if delivered != expected:
        raise RuntimeError(f"delivered {delivered} messages, the round holds {expected}")
    return timings


def read_in_key_order(storage: Any) -> float:
    """CPU seconds to read every sealed message of the round in key order, a keyset page
    at a time: the floor of any release from this table (no secret order, no
    unsealing)."""
    started = time.process_time()
    for stream in ("data", "levels"):
        def rows(after: bytes, limit: int, stream: str = stream) -> Any:
            return storage.sealed_rows(CAMPAIGN, ROUND, stream, after=after, limit=limit)
        for _ in keyset_pages(rows, PAGE_ROWS):
            pass
    return time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--messages-per-user", type=int, default=4,
                        help="round-2 data ciphertexts per user (plus one level ciphertext)")
    parser.add_argument("--ciphertext-bytes", type=int, default=80)
    parser.add_argument("--chunk-size", type=int, default=5000)
    parser.add_argument("--database", default="",
                        help="a postgresql:// URL of an empty database (default: a SQLite "
                             "file in a temporary directory)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 1 <= args.users <= MAX_USERS:
        parser.error(f"--users must be in 1..{MAX_USERS}")
    if not 1 <= args.messages_per_user <= 64 or not 16 <= args.ciphertext_bytes <= 4096:
        parser.error("--messages-per-user must be in 1..64, --ciphertext-bytes in 16..4096")
    with tempfile.TemporaryDirectory(prefix="bench-release-") as directory:
        database = args.database or str(Path(directory) / "shuffler.sqlite3")
        storage = open_storage(database, synchronous="NORMAL")
        keys = RoundKeys(Path(directory) / "keys")
        try:
            fill_s = fill(storage, keys, args.users, args.messages_per_user,
                          args.ciphertext_bytes)
            floor_cpu_s = read_in_key_order(storage)
            rss_before = _status_kib("VmRSS")
            reset = _reset_peak()
            timings = release(storage, keys, args.users, args.chunk_size)
            peak = _status_kib("VmHWM")
        finally:
            storage.close()
    messages = int(timings["messages"])
    report = {
        "users": args.users, "messages": messages,
        "backend": "postgresql" if args.database else "sqlite",
        "fill_s": round(fill_s, 2), **{k: round(v, 3) for k, v in timings.items()
                                        if k != "messages"},
        "release_cpu_us_per_message": round(1e6 * timings["release_cpu_s"] / messages, 2),
        "key_order_read_cpu_s": round(floor_cpu_s, 3),
        "release_cpu_vs_key_order_read": round(timings["release_cpu_s"] / floor_cpu_s, 2),
        "rss_before_release_mib": round(rss_before / 1024, 1),
        "peak_rss_during_release_mib": round(peak / 1024, 1) if reset else None,
        "release_growth_mib": round((peak - rss_before) / 1024, 1) if reset else None,
        "round_ciphertexts_mib": round(messages * args.ciphertext_bytes / 2**20, 1),
        "growth_bytes_per_message": round((peak - rss_before) * 1024 / messages, 1)
        if reset else None,
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"release of {report['users']} users, {messages} messages ({report['backend']}):")
    for name, value in report.items():
        if name not in ("users", "messages", "backend"):
            print(f"  {name:<32} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

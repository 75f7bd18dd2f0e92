"""The shuffler's release of a large round: CPU time per message at each size, and memory.

    python benchmarks/bench_release.py --users 50000,200000,1000000 --repeats 3
    python benchmarks/bench_release.py --users 100000 --database postgresql://...

For each ``--users`` count it fills a fresh shuffler storage with a synthetic round 2
(that many submissions of ``--messages-per-user`` data ciphertexts and one level
ciphertext of ``--ciphertext-bytes`` random bytes each, sealed under the round key
exactly as the service stores them), then releases it with the shuffler's own
:class:`~segshuffle.services.shuffler.release.Releaser` up to the HTTP request: close the
round, compute the secret order, and produce every chunk in release order (one pass
over the stream's rows in key order into a sealed spill, then each chunk from it). The
chunks go to a sink that only counts them, so the figures are the shuffler's side of a
release, measured at every size for real, none extrapolated.

The machine may be shared, so every figure is CPU time (``time.process_time``: user and
system of this process), each size's release is repeated ``--repeats`` times (a fresh
releaser each time: the order and the spill are built again; the round is closed once)
and the median is reported.  Every size is filled first (and the fill's writes reach the
disk: the kernel's writeback of a 1 GB store would otherwise share the machine with the
measurement), then each repeat releases every size in turn, so the sizes' figures come
from the same minutes.  Each release is paired with the floor of any release from this
table, measured right before it: reading every sealed row in key order, a keyset page
at a time (no order, no unsealing). ``release / read`` is the median of the repeats'
ratios; its two sides saw the machine in the same state.

Release CPU is closing the round (once, after the fill; it counts the participants and each
stream's messages) plus ordering and producing every chunk (median over the repeats).
Per-message cost should not depend on the round's size: with several sizes the last line
is the cost per message at the largest over that at the smallest (1.0: flat).

Memory: the peak resident memory of each release alone (the kernel's high-water mark is
reset before it starts, ``/proc/self/clear_refs``), next to the resident memory before it
and the size of the round's ciphertexts: a release holds the pass's buffers and a few
buckets of the order, never the round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from segshuffle.services.shuffler.backends import open_storage
from segshuffle.services.shuffler.enrollment import token_hash
from segshuffle.services.shuffler.release import Releaser
from segshuffle.services.shuffler.shuffled_stream import PAGE_ROWS, keyset_pages
from segshuffle.services.shuffler.vault import RoundKeys, seal_submission

CAMPAIGN = "bench-release"
ROUND = 2
MAX_USERS = 5_000_000
MAX_REPEATS = 20


class BenchError(RuntimeError):
    """A release that did not deliver the round: one line on stderr, exit status 1."""


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


def _cpu() -> tuple[float, float]:
    """(user, system) CPU seconds of this process so far."""
    times = os.times()
    return times.user, times.system


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


def close(storage: Any, keys: RoundKeys, users: int, chunk_size: int) -> dict[str, float]:
    """Close the round (once per store); its wall and CPU seconds."""
    releaser = Releaser(storage, None, keys, chunk_size=chunk_size)  # type: ignore[arg-type]
    started, cpu = time.perf_counter(), time.process_time()
    releaser.start(CAMPAIGN, ROUND, users)
    return {"close_s": time.perf_counter() - started,
            "close_cpu_s": time.process_time() - cpu}


def release(storage: Any, keys: RoundKeys, users: int, chunk_size: int) -> dict[str, float]:
    """Order the closed round and produce every chunk of every stream with a fresh
    releaser; its timings (wall and CPU seconds, CPU split into user and system)."""
    releaser = Releaser(storage, None, keys, chunk_size=chunk_size)  # type: ignore[arg-type]
    record = releaser.start(CAMPAIGN, ROUND, users)  # closed already: the stored record
    delivered = 0
    first_chunk = None
    user, system = _cpu()
    cpu_started = time.process_time()
    started = time.perf_counter()
    try:
        for stream in sorted(record.stream_sizes):
            chunks = record.chunk_count(stream)
            for index in range(chunks):
                delivered += len(releaser.chunk(record, stream, index))
                if first_chunk is None:
                    first_chunk = time.perf_counter() - started  # includes the order
                if (index + 1) % max(1, chunks // 10) == 0:
                    sys.stderr.write(f"\r{stream}: chunk {index + 1}/{chunks}")
            sys.stderr.write("\n")
    finally:
        releaser.drop_streams(record)
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    user_after, system_after = _cpu()
    expected = sum(record.stream_sizes.values())
    if delivered != expected:
        raise BenchError(f"delivered {delivered} messages, the round holds {expected}")
    return {"order_and_first_chunk_s": first_chunk or 0.0, "produce_all_chunks_s": seconds,
            "order_and_chunks_cpu_s": cpu, "user_cpu_s": user_after - user,
            "system_cpu_s": system_after - system, "messages": float(delivered)}


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


@dataclass
class Filled:
    """One size's filled store, its closing and its repeats so far."""

    users: int
    storage: Any
    keys: RoundKeys
    fill_s: float
    closing: dict[str, float] = field(default_factory=dict)
    runs: list[dict[str, float]] = field(default_factory=list)


def measure_once(filled: Filled, chunk_size: int) -> None:
    """One repeat of a size: its key-order read, then its release (with its memory)."""
    floor = read_in_key_order(filled.storage)
    rss_before = _status_kib("VmRSS")
    reset = _reset_peak()
    timings = release(filled.storage, filled.keys, filled.users, chunk_size)
    peak = _status_kib("VmHWM")
    timings["release_cpu_s"] = filled.closing["close_cpu_s"] + timings["order_and_chunks_cpu_s"]
    timings["key_order_read_cpu_s"] = floor
    timings["rss_before_mib"] = rss_before / 1024
    timings["growth_mib"] = (peak - rss_before) / 1024 if reset else float("nan")
    filled.runs.append(timings)
    sys.stderr.write(f"{filled.users} users, repeat {len(filled.runs)}: release "
                     f"{timings['release_cpu_s']:.2f} CPU-s, key-order read {floor:.2f} "
                     "CPU-s\n")


def summarize(filled: Filled, args: argparse.Namespace) -> dict[str, Any]:
    """One size's report (JSON-ready) from its repeats."""
    users, closing, runs = filled.users, filled.closing, filled.runs

    def median(name: str) -> float:
        return statistics.median(run[name] for run in runs)

    messages = int(runs[0]["messages"])
    release_cpu = median("release_cpu_s")
    growth = max(run["growth_mib"] for run in runs)
    measured = growth == growth  # not NaN: the peak could be reset
    return {
        "users": users, "messages": messages, "repeats": len(runs),
        "backend": "postgresql" if args.database else "sqlite",
        "fill_s": round(filled.fill_s, 2),
        "close_s": round(closing["close_s"], 3),
        "close_cpu_s": round(closing["close_cpu_s"], 3),
        "order_and_first_chunk_s": round(median("order_and_first_chunk_s"), 3),
        "produce_all_chunks_s": round(median("produce_all_chunks_s"), 3),
        "release_cpu_s": round(release_cpu, 3),
        "release_cpu_s_each": [round(run["release_cpu_s"], 3) for run in runs],
        "release_user_cpu_s": round(median("user_cpu_s"), 3),
        "release_system_cpu_s": round(median("system_cpu_s"), 3),
        "release_cpu_us_per_message": round(1e6 * release_cpu / messages, 3),
        "key_order_read_cpu_s": round(median("key_order_read_cpu_s"), 3),
        "release_cpu_vs_key_order_read": round(statistics.median(
            run["release_cpu_s"] / run["key_order_read_cpu_s"] for run in runs), 2),
        "rss_before_release_mib": round(runs[0]["rss_before_mib"], 1),
        "release_growth_mib": round(growth, 1) if measured else None,
        "round_ciphertexts_mib": round(messages * args.ciphertext_bytes / 2**20, 1),
        "growth_bytes_per_message": round(growth * 2**20 / messages, 1) if measured else None,
    }


def fill_store(args: argparse.Namespace, users: int, closing: contextlib.ExitStack
               ) -> Filled:
    """A fresh store (closed with ``closing``) filled with ``users`` users, its round
    closed."""
    directory = Path(closing.enter_context(tempfile.TemporaryDirectory(
        prefix="bench-release-")))
    storage = open_storage(args.database or str(directory / "shuffler.sqlite3"),
                           synchronous="NORMAL")
    closing.callback(storage.close)
    keys = RoundKeys(directory / "keys")
    filled = Filled(users, storage, keys,
                    fill(storage, keys, users, args.messages_per_user, args.ciphertext_bytes))
    os.sync()  # the fill's dirty pages written now, not beside the measurement
    filled.closing = close(storage, keys, users, args.chunk_size)
    return filled


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Fill a store of each size, then repeat the releases size after size (each repeat
    measures every size once, so the sizes see the machine in a like state); the
    sizes' reports."""
    with contextlib.ExitStack() as closing:
        stores = [fill_store(args, users, closing) for users in args.users]
        for _ in range(args.repeats):
            for filled in stores:
                measure_once(filled, args.chunk_size)
        return [summarize(filled, args) for filled in stores]


def per_message_ratio(reports: list[dict[str, Any]]) -> float | None:
    """CPU per message at the largest size over that at the smallest (None for one size)."""
    if len(reports) < 2:
        return None
    return round(reports[-1]["release_cpu_us_per_message"]
                 / reports[0]["release_cpu_us_per_message"], 3)


def format_report(reports: list[dict[str, Any]], args: argparse.Namespace,
                  loadavg: float) -> str:
    """The table printed without ``--json`` (``loadavg``: the machine's, at the end)."""
    first = reports[0]
    lines = [
        f"release of round 2 ({first['backend']}; per user {args.messages_per_user} data "
        f"ciphertexts and a level of {args.ciphertext_bytes} B), CPU seconds, medians over "
        f"{args.repeats} repeat(s); load average {loadavg:.1f}",
        f"{'users':>10} {'messages':>10} {'fill s':>8} {'close CPU-s':>11} "
        f"{'release CPU-s':>13} {'us/message':>10} {'read CPU-s':>10} {'/ read':>7} "
        f"{'growth MiB':>10} {'B/message':>9}",
    ]
    for report in reports:
        lines.append(
            f"{report['users']:>10,} {report['messages']:>10,} {report['fill_s']:>8.0f} "
            f"{report['close_cpu_s']:>11.2f} {report['release_cpu_s']:>13.2f} "
            f"{report['release_cpu_us_per_message']:>10.2f} "
            f"{report['key_order_read_cpu_s']:>10.2f} "
            f"{report['release_cpu_vs_key_order_read']:>7.2f} "
            f"{report['release_growth_mib'] or float('nan'):>10.1f} "
            f"{report['growth_bytes_per_message'] or float('nan'):>9.1f}")
    ratio = per_message_ratio(reports)
    if ratio is not None:
        lines.append(f"CPU per message at {reports[-1]['users']:,} users / at "
                     f"{reports[0]['users']:,}: {ratio:.3f}")
    return "\n".join(lines)


def _counts(text: str) -> list[int]:
    try:
        return sorted({int(v.replace("_", "")) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad list of user counts {text!r}") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=_counts, default=[100_000],
                        help="user counts, comma-separated (each a fresh store)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="releases of each size (medians are reported)")
    parser.add_argument("--messages-per-user", type=int, default=4,
                        help="round-2 data ciphertexts per user (plus one level ciphertext)")
    parser.add_argument("--ciphertext-bytes", type=int, default=80)
    parser.add_argument("--chunk-size", type=int, default=5000)
    parser.add_argument("--database", default="",
                        help="a postgresql:// URL of an empty database, one size only "
                             "(default: a SQLite file in a temporary directory)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object on one line of stdout")
    args = parser.parse_args(argv)
    if not args.users or not all(1 <= n <= MAX_USERS for n in args.users):
        parser.error(f"--users must lie in 1..{MAX_USERS}")
    if not 1 <= args.repeats <= MAX_REPEATS:
        parser.error(f"--repeats must lie in 1..{MAX_REPEATS}")
    if not 1 <= args.messages_per_user <= 64 or not 16 <= args.ciphertext_bytes <= 4096:
        parser.error("--messages-per-user must be in 1..64, --ciphertext-bytes in 16..4096")
    if not 1 <= args.chunk_size <= 1_000_000:
        parser.error("--chunk-size must lie in 1..1000000")
    if args.database and len(args.users) > 1:
        parser.error("--database takes one --users count (the database must be empty)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        reports = run(args)
    except BenchError as exc:
        print(f"bench_release: error: {exc}", file=sys.stderr)
        return 1
    loadavg = list(os.getloadavg())
    if args.json:
        print(json.dumps({"runs": reports, "per_message_ratio": per_message_ratio(reports),
                          "loadavg": loadavg}))
    else:
        print(format_report(reports, args, loadavg[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

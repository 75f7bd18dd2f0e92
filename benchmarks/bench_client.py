#!/usr/bin/env python3
"""A simulated user's client CPU against its crypto floor, measured in one run.

    python benchmarks/bench_client.py --users 2000
    python benchmarks/bench_client.py --users 2000 --json

Starts both services as real processes (:class:`segshuffle.testing.localstack.LocalStack`,
invitation enrollment as deployed) and plays ``--users`` users of one campaign through both
rounds with :class:`segshuffle.testing.population.Population`, the load generator's
users: each an :class:`~segshuffle.client.AsyncClient` that fetches and verifies the
campaign and its signatures, enrolls with its own invitation, seals and sends its level,
then verifies the published parameters for its own level and seals and sends its data.
The invitations are signed before the measurement (that is the issuer's work, not the
user's).

**Client CPU** is this process's CPU time (``time.process_time``: every thread, user and
system) over each round's users, divided by the users: everything the SDK and the
simulated app do for a user, HTTP included; the services run in other processes.

**The floor** is what no client can skip: its HPKE seals (one X25519 key pair, one
Diffie-Hellman, HKDF and AES-GCM each, :func:`segshuffle.crypto.seal`) and its Ed25519
signature checks.  Both are counted during the run (the SDK's own calls, wrapped), then
the same numbers of each are timed in this process right after, with the campaign's
key and the same plaintext sizes: per user, ``seals x t_seal + checks x t_check``.
``ratio`` is client CPU over that floor (1.0: nothing but the crypto).

The machine is shared: CPU per user is the figure to compare between runs; run it more
than once (``--repeats``) and read the median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from segshuffle.client import messages as client_messages
from segshuffle.crypto import documents
from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.population import Population

CAMPAIGN = "bench-client"
MIN_USERS = 20
MAX_USERS = 200_000
FLOOR_SAMPLES = 2000
"""Seals and signature checks timed for the floor (each kind)."""


class Counted:
    """A module function wrapped to count its calls (and remember one call's arguments)."""

    def __init__(self, module: Any, name: str) -> None:
        self.module, self.name = module, name
        self.original: Callable[..., Any] = getattr(module, name)
        self.calls = 0
        self.example: tuple[Any, ...] | None = None

    def __enter__(self) -> Counted:
        def counted(*args: Any) -> Any:
            self.calls += 1
            if self.example is None:
                self.example = args
            return self.original(*args)
        setattr(self.module, self.name, counted)
        return self

    def __exit__(self, *_: object) -> None:
        setattr(self.module, self.name, self.original)


def _cpu_per_call(function: Callable[..., Any], args: tuple[Any, ...]) -> float:
    """CPU seconds per call of ``function(*args)``: the median of 5 batches."""
    batch = FLOOR_SAMPLES // 5
    timings = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(batch):
            function(*args)
        timings.append((time.process_time() - started) / batch)
    return statistics.median(timings)


def _campaign(users: int, items: int, set_size: int) -> dict[str, Any]:
    return {"id": CAMPAIGN, "items": [f"item-{i}" for i in range(items)],
            "set_size": set_size, "levels": [1.0, 2.0, 4.0], "min_users": users}


async def _run(stack: LocalStack, users: int, items: int, set_size: int,
               concurrency: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    sets = [sorted(rng.choice(items, size=set_size, replace=False).tolist())
            for _ in range(users)]
    population = Population.with_shares(
        stack.shuffler_url, CAMPAIGN, sets, [0.3, 0.4, 0.3], seed=seed,
        concurrency=concurrency, invitations=stack.invitations(CAMPAIGN, users),
        server_key=stack.server_key)
    report: dict[str, Any] = {}
    with Counted(client_messages, "seal") as seals, Counted(documents, "_verify") as checks:
        async with population:
            for number, play in ((1, population.round1), (2, population.round2)):
                seals_before, checks_before = seals.calls, checks.calls
                started = time.process_time()
                phase = await play()
                cpu = time.process_time() - started
                if phase.failures:
                    raise RuntimeError(f"round {number}: {phase.failures} users failed")
                report[f"round{number}"] = {
                    "client_cpu_ms_per_user": 1e3 * cpu / users,
                    "seals_per_user": (seals.calls - seals_before) / users,
                    "signature_checks_per_user": (checks.calls - checks_before) / users,
                    "seconds": phase.seconds,
                }
                await asyncio.to_thread(stack.release, CAMPAIGN, number)
    assert seals.example is not None and checks.example is not None
    seal_ms = 1e3 * _cpu_per_call(seals.original, seals.example)
    check_ms = 1e3 * _cpu_per_call(checks.original, checks.example)
    for number in (1, 2):
        phase = report[f"round{number}"]
        floor = phase["seals_per_user"] * seal_ms + phase["signature_checks_per_user"] * check_ms
        phase["floor_cpu_ms_per_user"] = floor
        phase["ratio"] = phase["client_cpu_ms_per_user"] / floor
    client = sum(report[f"round{n}"]["client_cpu_ms_per_user"] for n in (1, 2))
    floor = sum(report[f"round{n}"]["floor_cpu_ms_per_user"] for n in (1, 2))
    report.update(seal_cpu_ms=seal_ms, signature_check_cpu_ms=check_ms,
                  client_cpu_ms_per_user=client, floor_cpu_ms_per_user=floor,
                  ratio=client / floor)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--set-size", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON object on one line")
    args = parser.parse_args(argv)
    if not MIN_USERS <= args.users <= MAX_USERS:
        parser.error(f"--users must be in {MIN_USERS}..{MAX_USERS}")
    if not 1 <= args.repeats <= 20 or not 1 <= args.concurrency <= 1024:
        parser.error("--repeats must be in 1..20, --concurrency in 1..1024")
    runs = []
    for repeat in range(args.repeats):
        with LocalStack(min_users=2) as stack:
            stack.create_campaign(_campaign(args.users, args.items, args.set_size))
            runs.append(asyncio.run(_run(stack, args.users, args.items, args.set_size,
                                         args.concurrency, args.seed + repeat)))
        sys.stderr.write(f"run {repeat + 1}/{args.repeats}: client "
                         f"{runs[-1]['client_cpu_ms_per_user']:.2f} CPU-ms per user, floor "
                         f"{runs[-1]['floor_cpu_ms_per_user']:.2f}\n")
    ratios = [run["ratio"] for run in runs]
    summary = {"users": args.users, "set_size": args.set_size, "cpus": os.cpu_count(),
               "ratio_median": statistics.median(ratios), "runs": runs}
    if args.json:
        print(json.dumps(summary))
        return 0
    for index, run in enumerate(runs):
        print(f"run {index + 1}: seal {run['seal_cpu_ms']:.3f} ms, signature check "
              f"{run['signature_check_cpu_ms']:.3f} ms")
        for number in (1, 2):
            phase = run[f"round{number}"]
            print(f"  round {number}: client {phase['client_cpu_ms_per_user']:.3f} CPU-ms/user"
                  f" ({phase['seals_per_user']:.2f} seals, "
                  f"{phase['signature_checks_per_user']:.2f} checks), floor "
                  f"{phase['floor_cpu_ms_per_user']:.3f}, ratio {phase['ratio']:.2f}")
        print(f"  both rounds: client {run['client_cpu_ms_per_user']:.3f}, floor "
              f"{run['floor_cpu_ms_per_user']:.3f}, ratio {run['ratio']:.2f}")
    print(f"median ratio over {len(runs)} run(s): {summary['ratio_median']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Where each CPU-second of a large campaign goes, through the compose profile ``scale``.

    SEGSHUFFLE_SHUFFLER_ENROLL_RATE=0 SEGSHUFFLE_SHUFFLER_SUBMIT_RATE=0 \\
    SEGSHUFFLE_SHUFFLER_READ_RATE=0 \\
        docker compose -f deploy/compose.yaml --profile scale up -d lb
    python benchmarks/bench_replicas.py --users 100000 --source-addresses 64 --json

Runs ``loadtest/loadtest.py`` (one campaign, both rounds, invitations as deployed)
against the balancer of a running ``scale`` deployment (PostgreSQL, two replicas of
each service, nginx) and reads every container's CPU time from its cgroup
(``cpuacct.usage`` on cgroup v1, ``cpu.stat``'s ``usage_usec`` on v2) at each of the
load test's phase lines: the users of round 1; the round-1 release, the optimizer and
the users of round 2; the round-2 release, decoding and the results.  The load
generator's own CPU is its process's, once it has exited.  Per-source rate limits
must be off (they are meant for real users, one per address); ``--source-addresses``
spreads the users over loopback addresses so that the balancer, which hashes the
client address to a shuffler replica, uses both.

It prints CPU seconds per container and phase and CPU milliseconds per user, summed
over the services (``service_cpu_ms_per_user``: servers, shufflers, PostgreSQL, nginx)
and for the generator, next to the load test's own figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PHASE_LINES = (
    ("round1_users", re.compile(r"\] campaign ")),
    ("release1_and_round2_users", re.compile(r"\] round 1: \d+ users in ")),
    ("release2_and_results", re.compile(r"\] round 2: \d+ users, ")),
)
"""A phase starts at its line of the load test's log (the last one ends at its exit)."""
MAX_USERS = 2_000_000


def containers(project: str) -> dict[str, str]:
    """Service name -> full container id of the running containers of a compose project."""
    listing = subprocess.run(
        ["docker", "ps", "--no-trunc", "--filter", f"label=com.docker.compose.project={project}",
         "--format", '{{.ID}} {{.Label "com.docker.compose.service"}}'],
        check=True, text=True, capture_output=True).stdout
    found = dict(reversed(line.split(" ", 1)) for line in listing.splitlines() if line)
    if not found:
        raise SystemExit(f"no running container of the compose project {project!r}: "
                         "bring the scale profile up first (see the docstring)")
    return found


def container_cpu_seconds(container_id: str) -> float:
    """A container's CPU time so far, from its cgroup (v1 cgroupfs or v2 systemd/cgroupfs)."""
    candidates = [
        (Path(f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage"), 1e-9),
        (Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat"), 1e-6),
        (Path(f"/sys/fs/cgroup/docker/{container_id}/cpu.stat"), 1e-6),
    ]
    for path, unit in candidates:
        if path.exists():
            text = path.read_text()
            if path.name == "cpu.stat":
                text = dict(line.split() for line in text.splitlines())["usage_usec"]
            return int(text.strip()) * unit
    raise RuntimeError(f"no cgroup CPU counter found for container {container_id[:12]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--source-addresses", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--env-file", type=Path, default=REPO / "deploy" / ".env")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON object on one line")
    args = parser.parse_args(argv)
    if not 100 <= args.users <= MAX_USERS:
        parser.error(f"--users must be in 100..{MAX_USERS}")
    env = dict(line.split("=", 1) for line in args.env_file.read_text().splitlines()
               if line and not line.startswith("#") and "=" in line)
    server = f"http://127.0.0.1:{env.get('SEGSHUFFLE_SCALE_SERVER_PORT', '8180')}"
    shuffler = f"http://127.0.0.1:{env.get('SEGSHUFFLE_SCALE_SHUFFLER_PORT', '8181')}"
    ids = containers(env.get("COMPOSE_PROJECT_NAME", "segshuffle"))
    command = [sys.executable, str(REPO / "loadtest" / "loadtest.py"), "--users",
               str(args.users), "--repeats", "1", "--json", "--seed", str(args.seed),
               "--concurrency", str(args.concurrency), "--source-addresses",
               str(args.source_addresses), "--max-seconds", "7200", "--release-timeout",
               "1800", "--progress", "--server-url", server, "--shuffler-url", shuffler,
               "--env-file", str(args.env_file)]

    def sample() -> dict[str, float]:
        return {name: container_cpu_seconds(cid) for name, cid in ids.items()}

    children_before = os.times()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    marks: list[tuple[str, float, dict[str, float]]] = []
    assert process.stderr is not None and process.stdout is not None
    for line in process.stderr:
        sys.stderr.write(line)
        for phase, pattern in PHASE_LINES:
            if pattern.search(line):
                marks.append((phase, time.monotonic(), sample()))
    final = sample()
    output = process.stdout.read()
    if process.wait() != 0:
        raise SystemExit(f"the load test failed (exit {process.returncode})")
    children = os.times()  # the load test, reaped: its CPU counts among our children's
    generator = (children.children_user - children_before.children_user
                 + children.children_system - children_before.children_system)
    ended = time.monotonic()
    phases: dict[str, Any] = {}
    for index, (phase, started, before) in enumerate(marks):
        stop, after = ((marks[index + 1][1], marks[index + 1][2]) if index + 1 < len(marks)
                       else (ended, final))
        phases[phase] = {"seconds": stop - started,
                         "cpu_seconds": {k: after[k] - before[k] for k in before}}
    totals: dict[str, float] = {}
    for phase in phases.values():
        for name, value in phase["cpu_seconds"].items():
            totals[name] = totals.get(name, 0.0) + value
    service = sum(totals.values())
    report = {
        "users": args.users, "source_addresses": args.source_addresses,
        "concurrency": args.concurrency, "phases": phases,
        "cpu_seconds": totals, "service_cpu_seconds": service,
        "service_cpu_ms_per_user": 1e3 * service / args.users,
        "cpu_ms_per_user": {k: 1e3 * v / args.users for k, v in totals.items()},
        "generator_cpu_ms_per_user": 1e3 * generator / args.users,
        "loadtest": json.loads(output) if output.strip() else None,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Where each CPU-second of a large campaign goes, through the compose profile ``scale``,
and whether the replicas of each service share it.

    SEGSHUFFLE_SCALE_SOURCE_LIMITS=off \\
        docker compose -f deploy/compose.yaml --profile scale up -d lb
    python benchmarks/bench_replicas.py --users 100000 --source-addresses 64 --json

Runs ``loadtest/loadtest.py`` (one campaign, both rounds, invitations as deployed)
against the balancer of a running ``scale`` deployment (PostgreSQL, two replicas of
each service, nginx) and reads every container's CPU time from its cgroup
(``cpuacct.usage`` on cgroup v1, ``cpu.stat``'s ``usage_usec`` on v2) at each of the
load test's phase lines: the users of round 1; the round-1 release, the optimizer and
the users of round 2; the round-2 release, decoding and the results.  The load
generator's own CPU is its process's, once it has exited.  The balancer's per-source
rate limits must be off (``SEGSHUFFLE_SCALE_SOURCE_LIMITS=off``, as above): they are
meant for real users, and the load test's all reach the balancer from one address
(Docker's port forwarding hides ``--source-addresses``).

It prints CPU seconds per container and phase and CPU milliseconds per user, summed
over the services (``service_cpu_ms_per_user``: servers, shufflers, PostgreSQL, nginx)
and for the generator, next to the load test's own figures.  For each service with
replicas (``shuffler-1``, ``shuffler-2``, ...) it gives every replica's share of that
service's CPU and of the HTTP requests it answered (``segshuffle_http_requests_total``
from each replica's ``/metrics``, read with ``docker exec``); when a replica's share of
either is above ``--max-share`` (60%), the load was not shared: it says so in one line
on stderr and exits 1, after printing the report.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
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
MAX_SHARE = 0.6
"""A replica above this share of its service's CPU or requests: the load was not shared."""
REPLICA = re.compile(r"^(?P<service>[a-z]+)-\d+$")
"""Compose service names of replicas: ``shuffler-1``, ``server-2``."""
PORTS = {"shuffler": 8081, "server": 8080}
"""Where each service listens inside its container (deploy/compose.yaml)."""
REQUESTS = re.compile(r'^segshuffle_http_requests_total\{(?P<labels>.*)\} (?P<count>\S+)$',
                      re.MULTILINE)
PROBES = re.compile(r'route="/(readyz|healthz|metrics)"')
"""Requests of the health checks and of this script, which are not the load."""


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


def replica_requests(container_id: str, port: int) -> float | None:
    """The HTTP requests a replica has answered so far (:func:`answered`), or None when
    its /metrics cannot be read: the replicas publish no port, so it is read from inside
    the container."""
    script = ("import urllib.request; print(urllib.request.urlopen("
              f"'http://127.0.0.1:{port}/metrics', timeout=5).read().decode())")
    try:
        result = subprocess.run(["docker", "exec", container_id, "python", "-c", script],
                                text=True, capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    if result.returncode != 0:
        return None
    return answered(result.stdout)


def answered(metrics: str) -> float:
    """The requests a replica's ``/metrics`` text counts, health checks and metrics reads
    left out."""
    return sum(float(match["count"]) for match in REQUESTS.finditer(metrics)
               if not PROBES.search(match["labels"]))


def requests_by_replica(ids: Mapping[str, str]) -> dict[str, float | None]:
    """:func:`replica_requests` of every replica among ``ids`` (service name -> id)."""
    counts: dict[str, float | None] = {}
    for name, container_id in ids.items():
        match = REPLICA.match(name)
        if match and match["service"] in PORTS:
            counts[name] = replica_requests(container_id, PORTS[match["service"]])
    return counts


def replica_shares(values: Mapping[str, float | None]) -> dict[str, dict[str, float]]:
    """Each replica's share of its service's total, per service with two or more replicas
    (``{"shuffler": {"shuffler-1": 0.52, "shuffler-2": 0.48}}``); a service with a value
    missing or a total of zero has no shares."""
    groups: dict[str, dict[str, float | None]] = {}
    for name, value in values.items():
        match = REPLICA.match(name)
        if match:
            groups.setdefault(match["service"], {})[name] = value
    shares: dict[str, dict[str, float]] = {}
    for service, replicas in sorted(groups.items()):
        known = {name: value for name, value in replicas.items() if value is not None}
        total = sum(known.values())
        if len(replicas) >= 2 and len(known) == len(replicas) and total > 0:
            shares[service] = {name: value / total for name, value in sorted(known.items())}
    return shares


def unshared(shares: Mapping[str, Mapping[str, Mapping[str, float]]],
             max_share: float) -> list[str]:
    """One phrase per replica whose share of a measure (``cpu``, ``requests``) is above
    ``max_share``, e.g. ``shuffler-1 took 96% of the shufflers' CPU``."""
    found = []
    for measure, by_service in shares.items():
        label = "CPU" if measure == "cpu" else measure
        for service, replicas in by_service.items():
            for name, share in replicas.items():
                if share > max_share:
                    found.append(f"{name} took {share:.0%} of the {service}s' {label}")
    return found


def differences(after: Mapping[str, float | None],
                before: Mapping[str, float | None]) -> dict[str, float | None]:
    """``after - before`` per name; None where either is unknown."""
    result: dict[str, float | None] = {}
    for name, value in after.items():
        earlier = before.get(name)
        result[name] = None if value is None or earlier is None else value - earlier
    return result


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--source-addresses", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--env-file", type=Path, default=REPO / "deploy" / ".env")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-share", type=float, default=MAX_SHARE,
                        help="the largest share of its service's CPU or requests one replica "
                             "may take (default 0.6)")
    parser.add_argument("--json", action="store_true", help="one JSON object on one line")
    args = parser.parse_args(argv)
    if not 100 <= args.users <= MAX_USERS:
        parser.error(f"--users must be in 100..{MAX_USERS}")
    if not 0 < args.max_share <= 1:
        parser.error("--max-share must be in (0, 1]")
    if not args.env_file.is_file():
        parser.error(f"--env-file {args.env_file}: no such file (deploy/init-secrets.sh "
                     "writes it)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    env = dict(line.split("=", 1) for line in args.env_file.read_text().splitlines()
               if line and not line.startswith("#") and "=" in line)
    server = f"http://127.0.0.1:{env.get('SEGSHUFFLE_SCALE_SERVER_PORT', '8180')}"
    shuffler = f"http://127.0.0.1:{env.get('SEGSHUFFLE_SCALE_SHUFFLER_PORT', '8181')}"
    ids = containers(os.environ.get("COMPOSE_PROJECT_NAME")
                     or env.get("COMPOSE_PROJECT_NAME", "segshuffle"))
    command = [sys.executable, str(REPO / "loadtest" / "loadtest.py"), "--users",
               str(args.users), "--repeats", "1", "--json", "--seed", str(args.seed),
               "--concurrency", str(args.concurrency), "--source-addresses",
               str(args.source_addresses), "--max-seconds", "7200", "--release-timeout",
               "1800", "--progress", "--server-url", server, "--shuffler-url", shuffler,
               "--env-file", str(args.env_file)]

    def sample() -> dict[str, float]:
        return {name: container_cpu_seconds(cid) for name, cid in ids.items()}

    requests_before = requests_by_replica(ids)
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
    requests = differences(requests_by_replica(ids), requests_before)
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
    shares = {"cpu": replica_shares(totals), "requests": replica_shares(requests)}
    problems = unshared(shares, args.max_share)
    report = {
        "users": args.users, "source_addresses": args.source_addresses,
        "concurrency": args.concurrency, "phases": phases,
        "cpu_seconds": totals, "service_cpu_seconds": service,
        "service_cpu_ms_per_user": 1e3 * service / args.users,
        "cpu_ms_per_user": {k: 1e3 * v / args.users for k, v in totals.items()},
        "generator_cpu_ms_per_user": 1e3 * generator / args.users,
        "replica_requests": requests,
        "cpu_share": shares["cpu"], "request_share": shares["requests"],
        "max_share": args.max_share, "shared": not problems,
        "loadtest": json.loads(output) if output.strip() else None,
    }
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    if problems:
        print(f"bench_replicas: the replicas did not share the load: {'; '.join(problems)} "
              f"(above {args.max_share:.0%})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Per-request CPU cost of the server and the shuffler, against bare baselines on the same server.

    python benchmarks/bench_services.py --users 2000,10000
    python benchmarks/bench_services.py --users 2000 --databases sqlite,postgresql --json

Per configuration (user count x database) it starts both services as real processes
(:class:`segshuffle.testing.localstack.LocalStack`: ``segshuffle serve``, invitation
enrollment as deployed, per-source rate limits off since every request comes from one
loopback address) and the bare app under the services' uvicorn configuration
(``benchmarks/bare_app.py``), then drives N users through one campaign:

1. ``enroll``: N ``POST .../enrollments``, each with its own signed invitation;
2. ``round1``: N round-1 submissions; ``release1``: the operator releases round 1 and the
   server publishes the parameters;
3. ``round2``: N round-2 submissions; ``release2``: release and decoding;
4. ``server_get``: N ``GET /v1/campaigns/{cid}`` straight at the server (the view of a
   ``done`` campaign is immutable);
5. ``bare_get``: N GETs of a body of the same size at the bare app.

The baselines of the submissions are measured beside them: after every slice of
``round1`` and ``round2``, the same bodies, byte for byte, are POSTed to each of the
bare app's four endpoints as one slice of its phase (:data:`BASELINES`): a FastAPI route
that parses the body (``bare_post``) and one that also appends it to a table of the
configuration's database, SQLite or PostgreSQL (``bare_stored``, the floor of any
request that stores what it receives), and the same two as plain ASGI callables ahead
of FastAPI (``raw_post``, ``raw_stored``).  The shuffler serves its user routes without
FastAPI's router (``UserRoutes``), so the raw-ASGI pair is the floor of the stack those
routes run on; the FastAPI pair leaves the router's cost on the baseline's side.  A
shared machine drifts by tens of percent over a minute, so a baseline taken after the
campaign compared the shuffler with a machine in another state; slice by slice, each
ratio's two sides see the same one.

Every body is prepared before its phase in a process pool, as real clients would with the
SDK (:mod:`loadgen`: campaign and signatures verified, parameters verified per level,
HPKE sealing with :mod:`segshuffle.client.messages`), and sent by a few sender processes
over keep-alive connections with bounded concurrency.  Each phase runs in slices; around
every slice the CPU time of each process tree (``utime + stime`` of /proc/<pid>/stat, with
children: the server's decryption pool) is read.  CPU-ms per request is the median over
the slices; the generator's own CPU is shown so one can tell it is not the bottleneck.
Latencies (p50/p95) are per request, from writing it to reading the whole answer.

Summary figures: ``shuffler_cpu_ms_per_submission`` (both rounds), ``server_cpu_ms_per_get``,
``bare_cpu_ms_per_request`` (a bare FastAPI POST of the same bodies), ``bare_cpu_ms_per_get``,
and ``shuffler_rate_vs_bare`` = bare / shuffler CPU per request (the fraction of the bare
app's throughput per core the shuffler reaches), ``server_get_rate_vs_bare`` likewise;
``bare_stored_cpu_ms_per_request``, ``raw_cpu_ms_per_request`` and
``raw_stored_cpu_ms_per_request`` with ``shuffler_rate_vs_bare_stored``,
``shuffler_rate_vs_raw`` and ``shuffler_rate_vs_raw_stored``; and ``baselines``, per
baseline its CPU-ms per request and ``shuffler_cost_ratio`` = shuffler / baseline CPU per
request (how many baseline requests one submission costs), printed for each.  On a
PostgreSQL server of this machine its process tree is metered too (``database``: every
backend, the WAL writer, the checkpointer), with ``database_cpu_ms_per_submission``,
``..._per_enrollment``, ``bare_stored_database_cpu_ms_per_request`` and their ratio
``database_vs_bare_stored``; a server elsewhere is not.  With several user counts, the
flatness check prints CPU-ms per submission at the largest N over that at the smallest
(1.0: cost per user independent of the campaign's size).

The machine is shared: wall-time figures (requests/s, latencies) are noisy; CPU per
request is the figure to compare between runs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import math
import multiprocessing
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from segshuffle.testing.localstack import RELEASE_SECONDS, harness_seconds

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bare_app import RAW_SUBMIT, RAW_SUBMIT_STORED
from loadgen import BatchResult, Senders, encode_request, tree_cpu_seconds

MAX_USERS = 200_000
MIN_USERS = 10
MIN_SLICE = 2000
"""Fewest requests per measured slice: /proc reports CPU time in 10 ms clock ticks, so a
slice of 2000 requests at 0.1 ms each (the bare app) reads 20 ticks, +-1."""
MIN_MEASURED = 2000
"""Fewest GETs per GET phase."""
WARMUP = 200
"""Unmeasured requests before the GET and bare phases (first-request costs)."""
SEAL_CHUNK = 250
PHASE_WAIT_SECONDS = harness_seconds("release", RELEASE_SECONDS)
DEFAULT_POSTGRES = "postgresql://segshuffle:segshuffle@127.0.0.1:5432/postgres"
BARE_APP = Path(__file__).resolve().parent / "bare_app.py"
LEVELS = (1.0, 2.0, 4.0)
SHARES = (0.3, 0.4, 0.3)
DOMAIN = 64
SET_SIZE = 2
BASELINES = {
    "raw_post": (RAW_SUBMIT, "raw-ASGI POST"),
    "raw_stored": (RAW_SUBMIT_STORED, "raw-ASGI storing POST"),
    "bare_post": ("/submit", "FastAPI POST"),
    "bare_stored": ("/submit-stored", "FastAPI storing POST"),
}
"""The submissions' baselines: phase name -> (the bare app's route, its name in the
report), each measured slice by slice beside the rounds."""


class BenchError(RuntimeError):
    """A failed run: one line on stderr, exit status 1."""


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# -- phases ------------------------------------------------------------------------------
@dataclass
class Phase:
    """Figures of one phase: per-slice CPU seconds per process and the latencies."""

    name: str
    requests: int = 0
    seconds: float = 0.0
    slice_sizes: list[int] = field(default_factory=list)
    slice_seconds: list[float] = field(default_factory=list)
    slice_cpu: dict[str, list[float]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    def cpu_ms_per_request(self, process: str) -> float:
        """Median over the slices of the process's CPU-ms per request.

        A slice smaller than :data:`MIN_SLICE` (a small campaign's rounds) may read no
        clock tick at all, so the median of such slices can be 0 while the process did
        work. When the median is 0, the pooled figure (all slices' CPU over all their
        requests) is returned instead: it is 0 only if no slice read a tick."""
        readings = [(cpu, size) for cpu, size in
                    zip(self.slice_cpu.get(process, []), self.slice_sizes, strict=True)
                    if size]
        if not readings:
            return math.nan
        median = statistics.median(1000.0 * cpu / size for cpu, size in readings)
        if median > 0:
            return median
        return 1000.0 * sum(cpu for cpu, _ in readings) / sum(size for _, size in readings)

    def summary(self) -> dict[str, Any]:
        total = {p: sum(v) for p, v in self.slice_cpu.items()}
        return {
            "requests": self.requests, "seconds": self.seconds,
            "requests_per_s": self.requests / self.seconds if self.seconds else math.nan,
            "slices": len(self.slice_sizes),
            "cpu_ms_per_request": {p: self.cpu_ms_per_request(p) for p in self.slice_cpu},
            "cpu_ms_per_request_overall": {p: 1000.0 * cpu / self.requests
                                           for p, cpu in total.items()},
            "cpu_seconds": total,
            "p50_ms": 1000.0 * percentile(self.latencies, 50),
            "p95_ms": 1000.0 * percentile(self.latencies, 95),
        }


class Meter:
    """CPU time of the watched process trees (and the senders) around each slice."""

    def __init__(self, processes: dict[str, int], senders: Senders) -> None:
        self.processes = dict(processes)
        self.senders = senders

    def snapshot(self) -> dict[str, float]:
        roots = list(self.processes.values()) + self.senders.pids
        cpu = tree_cpu_seconds(roots)
        answer = {name: cpu[pid] for name, pid in self.processes.items()}
        answer["generator"] = sum(cpu[pid] for pid in self.senders.pids)
        return answer

    def warm_up(self, port: int, request: bytes) -> None:
        """:data:`WARMUP` unmeasured copies of ``request`` (must answer 2xx)."""
        self.senders.load(port, [request] * WARMUP)
        result = self.senders.go(WARMUP)
        if any(not 200 <= s < 300 for s in result.statuses):
            raise BenchError(f"warm-up at port {port} failed: {result.first_error}")

    def run(self, name: str, port: int, requests: Sequence[bytes], slices: int, *,
            keep_bodies: bool = False, companions: Sequence[Companion] = ()
            ) -> tuple[Phase, list[bytes | None]]:
        """Send ``requests`` in ``slices`` slices; every answer must be 2xx.

        After each slice, each of ``companions`` sends its requests of the same positions
        (cycled to at least :data:`MIN_SLICE`) as one slice of its own phase: a baseline
        measured right after the slice it is compared with, not minutes later."""
        count = max(1, min(slices, len(requests) // MIN_SLICE))
        bounds = [round(i * len(requests) / count) for i in range(count + 1)]
        phase = Phase(name)
        bodies: list[bytes | None] = []
        for index in range(count):
            part = requests[bounds[index]:bounds[index + 1]]
            result = self.measure(phase, port, part, keep_bodies=keep_bodies)
            if result.bodies is not None:
                bodies.extend(result.bodies)
            log(f"{name}: {phase.requests}/{len(requests)} requests, "
                f"{len(part) / phase.slice_seconds[-1]:.0f}/s")
            for companion in companions:
                same = companion.requests[bounds[index]:bounds[index + 1]]
                self.measure(companion.phase, companion.port,
                             [same[i % len(same)] for i in range(max(len(same), MIN_SLICE))])
        return phase, bodies

    def measure(self, phase: Phase, port: int, part: Sequence[bytes], *,
                keep_bodies: bool = False) -> BatchResult:
        """Send ``part`` as one slice of ``phase``, every answer 2xx, CPU read around it."""
        self.senders.load(port, part, keep_bodies=keep_bodies)
        before = self.snapshot()
        started = time.perf_counter()
        result: BatchResult = self.senders.go(len(part))
        elapsed = time.perf_counter() - started
        after = self.snapshot()
        bad = {s: c for s, c in result.statuses.items() if not 200 <= s < 300}
        if bad:
            raise BenchError(f"{phase.name}: {sum(bad.values())} of {len(part)} requests "
                             f"failed {bad}; first: {result.first_error}")
        phase.requests += len(part)
        phase.seconds += elapsed
        phase.slice_seconds.append(elapsed)
        phase.slice_sizes.append(len(part))
        for process in after:
            phase.slice_cpu.setdefault(process, []).append(after[process] - before[process])
        phase.latencies.extend(result.latencies)
        return result


@dataclass
class Companion:
    """A baseline phase measured slice by slice beside another (:meth:`Meter.run`)."""

    phase: Phase
    port: int
    requests: Sequence[bytes]
    """One request per request of the phase it accompanies, in the same order."""


def timed_operation(name: str, meter: Meter, users: int, action: Callable[[], None]
                    ) -> dict[str, Any]:
    """CPU per user and wall time of an operator action (a release)."""
    before = meter.snapshot()
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    after = meter.snapshot()
    log(f"{name}: {seconds:.2f} s")
    return {"seconds": seconds,
            "cpu_ms_per_user": {p: 1000.0 * (after[p] - before[p]) / users
                                for p in after}}


# -- databases ---------------------------------------------------------------------------
@contextmanager
def databases(kind: str, admin_url: str, label: str) -> Iterator[dict[str, str]]:
    """Database URLs for the two services and the bare app's storing endpoint: SQLite files
    (LocalStack's default for the services; ``{}``), or three fresh PostgreSQL databases,
    dropped afterwards."""
    if kind == "sqlite":
        yield {}
        return
    import psycopg
    from psycopg import sql

    names = {service: f"bench_{label}_{service}_{secrets.token_hex(4)}"
             for service in ("server", "shuffler", "bare")}
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as connection:
        for name in names.values():
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        # The database name replaced, the URL's parameters (sslmode, host, ...) kept.
        base, _, query = admin_url.partition("?")
        base = base.rsplit("/", 1)[0]
        query = f"?{query}" if query else ""
        yield {service: f"{base}/{name}{query}" for service, name in names.items()}
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as connection:
            for name in names.values():
                connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                                   .format(sql.Identifier(name)))


def local_postmaster(admin_url: str) -> int | None:
    """The pid of the PostgreSQL server behind ``admin_url`` if it runs on this machine
    (the parent of a backend of ours, a process named ``postgres``), else ``None``: its
    process tree (every backend, the WAL writer, the checkpointer) is then metered as
    ``database``."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as connection:
        row = connection.execute("SELECT pg_backend_pid()").fetchone()
        try:  # while the connection is open: its backend exits with it
            with open(f"/proc/{row[0]}/status") as handle:
                status = dict(line.split(":\t", 1) for line in handle if ":\t" in line)
            parent = int(status["PPid"])
            with open(f"/proc/{parent}/comm") as handle:
                named = handle.read().strip()
        except (OSError, KeyError, ValueError, TypeError):
            return None  # another host (or container): not ours to meter
    return parent if named in ("postgres", "postmaster") else None


# -- the bare app --------------------------------------------------------------------------
@contextmanager
def bare_app(get_bytes: int, directory: Path, store: str) -> Iterator[tuple[int, int]]:
    """(pid, port) of ``bare_app.py`` running as its own process, storing bodies in
    ``store`` (a database URL) on ``POST /submit-stored``."""
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / "bare.log"
    with log_path.open("wb") as sink:
        process = subprocess.Popen([sys.executable, str(BARE_APP), "--get-bytes",
                                    str(get_bytes), "--store", store],
                                   stdout=sink, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        port = None
        while port is None:
            text = log_path.read_text(errors="replace")
            for line in text.splitlines():
                if line.startswith("bare listening on port "):
                    port = int(line.rsplit(" ", 1)[1])
            if process.poll() is not None:
                raise BenchError(f"the bare app exited: {text.strip()[-300:]}")
            if port is None and time.monotonic() > deadline:
                raise BenchError("the bare app did not start within 30 s")
            time.sleep(0.05)
        _wait_http(port, "/document")
        yield process.pid, port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_http(port: int, path: str) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise BenchError(f"port {port} did not answer {path} within 30 s")


# -- one configuration ---------------------------------------------------------------------
def _wait_phase(stack: Any, campaign_id: str, phases: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + PHASE_WAIT_SECONDS
    while True:
        view = stack.campaign(campaign_id)
        if view.phase in phases:
            return view.model_dump(mode="json")
        if view.phase in {"failed", "aborted"}:
            raise BenchError(f"campaign {campaign_id} ended: {view.phase} "
                             f"({view.end_reason})")
        if time.monotonic() > deadline:
            raise BenchError(f"campaign {campaign_id} still {view.phase} after "
                             f"{PHASE_WAIT_SECONDS:.0f} s")
        time.sleep(0.1)


def _log_tails(directory: Path, lines: int = 15) -> str:
    """The last lines of each service's log (shown with a failure)."""
    parts = []
    for log_file in sorted(directory.glob("*.log")):
        tail = log_file.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {log_file.name}\n" + "\n".join(line[:400] for line in tail))
    return "\n".join(parts)


def _chunks(count: int) -> list[tuple[int, int]]:
    return [(lo, min(count, lo + SEAL_CHUNK)) for lo in range(0, count, SEAL_CHUNK)]


def run_configuration(args: argparse.Namespace, database: str, users: int) -> dict[str, Any]:
    """Both services, the bare app, one campaign of ``users`` users; the figures."""
    from loadgen import prepare_round1, prepare_round2

    from segshuffle.datasets import synthetic_source
    from segshuffle.testing.localstack import LocalStack

    rng = np.random.default_rng(args.seed)
    items = synthetic_source(DOMAIN).draw(users, SET_SIZE, rng).items.tolist()
    levels = rng.choice(len(LEVELS), size=users, p=SHARES).tolist()
    label = f"{database}-{users}"
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-services-") as tmp, \
            databases(database, args.postgres_url, str(users)) as urls, \
            concurrent.futures.ProcessPoolExecutor(args.seal_workers,
                                                   mp_context=context) as pool:
        directory = Path(tmp)
        server_env: dict[str, str] = {}
        shuffler_env: dict[str, str] = dict(args.shuffler_setting)
        if urls:
            server_env["SEGSHUFFLE_SERVER_DATABASE"] = urls["server"]
            shuffler_env["SEGSHUFFLE_SHUFFLER_DATABASE"] = urls["shuffler"]
            shuffler_env["SEGSHUFFLE_SHUFFLER_KEY_DIRECTORY"] = str(directory / "round-keys")
        log(f"{label}: starting the services")
        try:
            with LocalStack(directory / "stack", server_env=server_env,
                            shuffler_env=shuffler_env) as stack, \
                    Senders(args.senders, args.concurrency) as senders, \
                    contextlib.ExitStack() as closing:
                campaign_id = f"bench-{users}-{secrets.token_hex(3)}"
                stack.create_campaign({
                    "id": campaign_id, "domain_size": DOMAIN, "set_size": SET_SIZE,
                    "levels": list(LEVELS), "min_users": max(MIN_USERS, users // 2),
                    "dropout_tolerance": 0.1, "padding": False})
                view = stack.campaign(campaign_id).model_dump(mode="json")
                hpke = view["hpke_config"]
                server_key = stack.server_key
                issuer_seed = stack.issuer_key.private_bytes_raw()
                expires = int(time.time()) + 6 * 3600

                log(f"{label}: sealing round 1 for {users} users")
                prepared = [r for part in pool.map(
                    prepare_round1, *zip(*[(view, hpke, server_key, issuer_seed, expires,
                                            levels[lo:hi], args.seed * 1_000_003 + lo)
                                           for lo, hi in _chunks(users)], strict=True))
                    for r in part]
                shuffler_host = f"127.0.0.1:{stack.ports['shuffler']}"
                server_host = f"127.0.0.1:{stack.ports['server']}"
                base = f"/v1/campaigns/{campaign_id}"
                watched = {"shuffler": stack.processes["shuffler"].pid,
                           "server": stack.processes["server"].pid}
                postmaster = local_postmaster(args.postgres_url) if urls else None
                if postmaster is not None:
                    watched["database"] = postmaster
                meter = Meter(watched, senders)
                phases: dict[str, Phase] = {}
                operations: dict[str, dict[str, Any]] = {}
                sport = stack.ports["shuffler"]
                store = urls.get("bare", f"sqlite:///{directory / 'bare.sqlite3'}")
                bare_posts = closing.enter_context(bare_app(16, directory / "posts", store))
                meter.processes["bare"] = bare_posts[0]
                baselines = {name: Phase(name) for name in BASELINES}

                def companions(bodies: Sequence[bytes]) -> list[Companion]:
                    """The bare POSTs of ``bodies``, each phase's slice beside the round's."""
                    host = f"127.0.0.1:{bare_posts[1]}"
                    answer = []
                    for name, (route, _) in BASELINES.items():
                        posts = [encode_request("POST", host, route, body) for body in bodies]
                        meter.warm_up(bare_posts[1], posts[-1])
                        answer.append(Companion(baselines[name], bare_posts[1], posts))
                    return answer

                enrollments = [encode_request("POST", shuffler_host, f"{base}/enrollments", body)
                               for body, _, _ in prepared]
                phases["enroll"], answers = meter.run("enroll", sport, enrollments, args.slices,
                                                      keep_bodies=True)
                tokens = [json.loads(a or b"{}")["token"] for a in answers]

                round1 = [body for _, _, body in prepared]
                phases["round1"], _ = meter.run("round1", sport, [
                    encode_request("POST", shuffler_host, f"{base}/rounds/1/submissions", body,
                                   [("Authorization", f"Bearer {token}")])
                    for body, token in zip(round1, tokens, strict=True)], args.slices,
                    companions=companions(round1))

                def release(round_number: int, phases_after: set[str]) -> None:
                    stack.release(campaign_id, round_number, wait=True, timeout=PHASE_WAIT_SECONDS)
                    _wait_phase(stack, campaign_id, phases_after)

                operations["release1"] = timed_operation(
                    "release1", meter, users, lambda: release(1, {"round2", "done"}))
                published = stack.campaign(campaign_id).model_dump(mode="json")
                if published["parameters_hash"] is None:
                    raise BenchError(f"round 1 released but no parameters published (phase "
                                     f"{published['phase']}): {published}")

                log(f"{label}: sealing round 2")
                reported = [r for _, r, _ in prepared]
                round2 = [b for part in pool.map(
                    prepare_round2, *zip(*[(published, hpke, server_key,
                                            [(levels[i], reported[i], items[i])
                                             for i in range(lo, hi)],
                                            args.seed * 1_000_003 + users + lo)
                                           for lo, hi in _chunks(users)], strict=True))
                    for b in part]
                phases["round2"], _ = meter.run("round2", sport, [
                    encode_request("POST", shuffler_host, f"{base}/rounds/2/submissions", body,
                                   [("Authorization", f"Bearer {token}")])
                    for body, token in zip(round2, tokens, strict=True)], args.slices,
                    companions=companions(round2))
                phases.update(baselines)

                operations["release2"] = timed_operation(
                    "release2", meter, users, lambda: release(2, {"done"}))

                import httpx

                answer = httpx.get(f"{stack.server_url}{base}", timeout=30)
                if "immutable" not in answer.headers.get("cache-control", ""):
                    raise BenchError(f"the done campaign's view is not immutable "
                                     f"({answer.headers.get('cache-control')!r})")
                document_bytes = len(answer.content)
                get = encode_request("GET", server_host, base)
                gets = max(users, MIN_MEASURED)
                meter.warm_up(stack.ports["server"], get)
                phases["server_get"], _ = meter.run("server_get", stack.ports["server"],
                                                    [get] * gets, args.slices)

                with bare_app(document_bytes, directory / "gets", store) as (bare_pid,
                                                                            bare_port):
                    meter.processes["bare"] = bare_pid
                    bare_host = f"127.0.0.1:{bare_port}"
                    bare_get = encode_request("GET", bare_host, "/document")
                    meter.warm_up(bare_port, bare_get)
                    phases["bare_get"], _ = meter.run("bare_get", bare_port, [bare_get] * gets,
                                                      args.slices)
        except BenchError as exc:
            raise BenchError(f"{exc}\n{_log_tails(directory / 'stack')}") from None

    sizes = {"round1_body_bytes": statistics.median(len(b) for b in round1),
             "round2_body_bytes": statistics.median(len(b) for b in round2),
             "get_document_bytes": document_bytes}
    return summarize(database, users, args, phases, operations, sizes)


def _over(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, NaN where the denominator read no CPU at all."""
    return numerator / denominator if denominator > 0 else math.nan


def summarize(database: str, users: int, args: argparse.Namespace,
              phases: dict[str, Phase], operations: dict[str, dict[str, Any]],
              sizes: dict[str, Any]) -> dict[str, Any]:
    """The figures of one configuration (JSON-ready)."""
    submissions = Phase("submissions")
    for name in ("round1", "round2"):
        submissions.slice_sizes += phases[name].slice_sizes
        for process, values in phases[name].slice_cpu.items():
            submissions.slice_cpu.setdefault(process, []).extend(values)
    shuffler = submissions.cpu_ms_per_request("shuffler")
    server_get = phases["server_get"].cpu_ms_per_request("server")
    bare_post = phases["bare_post"].cpu_ms_per_request("bare")
    bare_get = phases["bare_get"].cpu_ms_per_request("bare")
    bare_stored = phases["bare_stored"].cpu_ms_per_request("bare")
    raw_post = phases["raw_post"].cpu_ms_per_request("bare")
    raw_stored = phases["raw_stored"].cpu_ms_per_request("bare")
    return {
        "database": database, "users": users, "concurrency": args.concurrency,
        "senders": args.senders, "loadavg": _loadavg(),
        "shuffler_cpu_ms_per_submission": shuffler,
        "shuffler_cpu_ms_per_enrollment": phases["enroll"].cpu_ms_per_request("shuffler"),
        "server_cpu_ms_per_get": server_get,
        "bare_cpu_ms_per_request": bare_post,
        "bare_cpu_ms_per_get": bare_get,
        "shuffler_rate_vs_bare": _over(bare_post, shuffler),
        "server_get_rate_vs_bare": _over(bare_get, server_get),
        "bare_stored_cpu_ms_per_request": bare_stored,
        "shuffler_rate_vs_bare_stored": _over(bare_stored, shuffler),
        "raw_cpu_ms_per_request": raw_post,
        "raw_stored_cpu_ms_per_request": raw_stored,
        "shuffler_rate_vs_raw": _over(raw_post, shuffler),
        "shuffler_rate_vs_raw_stored": _over(raw_stored, shuffler),
        "baselines": baseline_figures(phases, shuffler),
        **_database_figures(phases, submissions),
        "sizes": sizes,
        "phases": {name: phase.summary() for name, phase in phases.items()},
        "releases": operations,
    }


def baseline_figures(phases: dict[str, Phase], shuffler: float) -> dict[str, dict[str, float]]:
    """Per baseline of :data:`BASELINES`: its CPU-ms per request and the shuffler's
    cost in those requests (``shuffler`` CPU-ms per submission over it)."""
    answer = {}
    for name in BASELINES:
        cost = phases[name].cpu_ms_per_request("bare")
        answer[name] = {"cpu_ms_per_request": cost,
                        "shuffler_cost_ratio": _over(shuffler, cost)}
    return answer


def _database_figures(phases: dict[str, Phase], submissions: Phase) -> dict[str, Any]:
    """The PostgreSQL server's CPU-ms per request where it was metered (a local server):
    per submission (both rounds), per enrollment and per storing POST of the bare app,
    and ``database_vs_bare_stored``, the submission's over the storing POST's."""
    if "database" not in submissions.slice_cpu:
        return {}
    submission = submissions.cpu_ms_per_request("database")
    stored = phases["bare_stored"].cpu_ms_per_request("database")
    return {"database_cpu_ms_per_submission": submission,
            "database_cpu_ms_per_enrollment": phases["enroll"].cpu_ms_per_request("database"),
            "bare_stored_database_cpu_ms_per_request": stored,
            "database_vs_bare_stored": submission / stored if stored else math.nan}


def _loadavg() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (how busy the shared host was)."""
    with open("/proc/loadavg") as handle:
        return [float(v) for v in handle.read().split()[:3]]


# -- report --------------------------------------------------------------------------------
def _cell(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}f}"


def format_configuration(figures: dict[str, Any]) -> str:
    columns = ("shuffler", "server", "bare", "database", "generator")
    header = (f"{'phase':<11} {'requests':>8} {'req/s':>8} "
              + " ".join(f"{c + ' ms':>12}" for c in columns) + f" {'p50 ms':>8} {'p95 ms':>8}")
    lines = [f"== {figures['database']}, {figures['users']} users, concurrency "
             f"{figures['concurrency']} ({figures['senders']} sender processes), load average "
             f"{figures['loadavg'][0]:.1f}; CPU-ms per request, medians over slices",
             header, "-" * len(header)]
    for name, phase in figures["phases"].items():
        cpu = phase["cpu_ms_per_request"]
        lines.append(f"{name:<11} {phase['requests']:>8} {phase['requests_per_s']:>8.0f} "
                     + " ".join(f"{_cell(cpu.get(c)):>12}" for c in columns)
                     + f" {phase['p50_ms']:>8.1f} {phase['p95_ms']:>8.1f}")
    for name, operation in figures["releases"].items():
        cpu = operation["cpu_ms_per_user"]
        lines.append(f"{name:<11} {'(per user)':>8} {operation['seconds']:>7.2f}s "
                     + " ".join(f"{_cell(cpu.get(c)):>12}" for c in columns))
    sizes = figures["sizes"]
    lines += [
        f"bodies: round 1 {sizes['round1_body_bytes']:.0f} B, round 2 "
        f"{sizes['round2_body_bytes']:.0f} B; GET document {sizes['get_document_bytes']} B",
        f"shuffler CPU-ms per submission  {figures['shuffler_cpu_ms_per_submission']:.3f}",
        f"shuffler CPU-ms per enrollment  {figures['shuffler_cpu_ms_per_enrollment']:.3f}",
        f"server CPU-ms per GET           {figures['server_cpu_ms_per_get']:.3f}",
        f"bare CPU-ms per GET             {figures['bare_cpu_ms_per_get']:.3f}",
        f"server GET rate vs bare (bare_cpu/server_cpu)  "
        f"{figures['server_get_rate_vs_bare']:.3f}",
        "shuffler submission against each baseline, measured beside the rounds:",
        f"  {'baseline':<24} {'CPU-ms':>8} {'shuffler / baseline':>20} "
        f"{'rate vs baseline':>17}",
    ]
    for name, (_, title) in BASELINES.items():
        baseline = figures["baselines"][name]
        ratio = baseline["shuffler_cost_ratio"]
        lines.append(f"  {title:<24} {_cell(baseline['cpu_ms_per_request']):>8} "
                     f"{_cell(ratio, 2) + 'x':>20} {_cell(1 / ratio if ratio else None):>17}")
    if "database_cpu_ms_per_submission" in figures:
        lines += [
            f"database CPU-ms per submission  {figures['database_cpu_ms_per_submission']:.3f}",
            f"database CPU-ms per enrollment  {figures['database_cpu_ms_per_enrollment']:.3f}",
            "database CPU-ms per storing POST "
            f"{figures['bare_stored_database_cpu_ms_per_request']:.3f}",
        ]
    return "\n".join(lines)


def flatness(results: dict[tuple[str, int], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per database: CPU-ms per submission at the largest N over that at the smallest."""
    answer = {}
    for database in sorted({d for d, _ in results}):
        counts = sorted(n for d, n in results if d == database)
        if len(counts) < 2:
            continue
        low, high = results[(database, counts[0])], results[(database, counts[-1])]
        answer[database] = {
            "smallest_users": counts[0], "largest_users": counts[-1],
            "submission_cost_ratio": high["shuffler_cpu_ms_per_submission"]
            / low["shuffler_cpu_ms_per_submission"],
            "get_cost_ratio": high["server_cpu_ms_per_get"] / low["server_cpu_ms_per_get"],
        }
    return answer


# -- command line --------------------------------------------------------------------------
def _list(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            return [kind(v.strip()) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad list {text!r}") from None
    return parse


def _setting(text: str) -> tuple[str, str]:
    """``name=value`` as the shuffler's environment variable and its value."""
    name, equals, value = text.partition("=")
    if not equals or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return "SEGSHUFFLE_SHUFFLER_" + name.strip().upper(), value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_services.py",
                                     description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--users", type=_list(int), default=[2000],
                        help="user counts, comma-separated")
    parser.add_argument("--databases", type=_list(str), default=["sqlite"],
                        help="sqlite and/or postgresql, comma-separated")
    parser.add_argument("--postgres-url", default=os.environ.get(
        "SEGSHUFFLE_BENCH_POSTGRES", DEFAULT_POSTGRES),
        help="superuser URL used to create and drop the per-run databases "
             "(default: $SEGSHUFFLE_BENCH_POSTGRES or the local CI server)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="open connections in all (keep-alive)")
    parser.add_argument("--senders", type=int, default=2, help="sender processes")
    parser.add_argument("--seal-workers", type=int, default=os.cpu_count() or 1,
                        help="processes that seal the submissions")
    parser.add_argument("--slices", type=int, default=5,
                        help="measured slices per phase (at least 2000 requests each)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shuffler-setting", action="append", default=[], metavar="NAME=VALUE",
                        type=_setting,
                        help="a shuffler setting for this run, e.g. synchronous=FULL "
                             "(SEGSHUFFLE_SHUFFLER_ + NAME in upper case); repeatable")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object on one line of stdout")
    args = parser.parse_args(argv)
    if not args.users or not all(MIN_USERS <= n <= MAX_USERS for n in args.users):
        parser.error(f"--users must lie in [{MIN_USERS}, {MAX_USERS}]")
    if not args.databases or not set(args.databases) <= {"sqlite", "postgresql"}:
        parser.error("--databases takes sqlite and/or postgresql")
    if not 1 <= args.senders <= 16 or not args.senders <= args.concurrency <= 1024:
        parser.error("--senders must lie in [1, 16], --concurrency in [senders, 1024]")
    if not 1 <= args.slices <= 100 or not 1 <= args.seal_workers <= 64:
        parser.error("--slices must lie in [1, 100], --seal-workers in [1, 64]")
    args.users = sorted(set(args.users))
    args.databases = list(dict.fromkeys(args.databases))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        for database in args.databases:
            for users in args.users:
                results[(database, users)] = run_configuration(args, database, users)
                if not args.json:
                    print(format_configuration(results[(database, users)]), flush=True)
                    print(flush=True)
    except BenchError as exc:
        print(f"bench_services: error: {exc}", file=sys.stderr)
        return 1
    flat = flatness(results)
    if args.json:
        if len(results) == 1:
            report = next(iter(results.values()))
        else:
            report = {"configurations": {f"{d}/{n}": r for (d, n), r in results.items()},
                      "flatness": flat}
        print(json.dumps(report, allow_nan=False, default=float, separators=(",", ":")))
        return 0
    for database, figures in flat.items():
        print(f"flatness ({database}): CPU-ms per submission at {figures['largest_users']} "
              f"users / at {figures['smallest_users']} users = "
              f"{figures['submission_cost_ratio']:.3f}; per server GET "
              f"{figures['get_cost_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

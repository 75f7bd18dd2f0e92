#!/usr/bin/env python3
"""Load test of a running segshuffle deployment: thousands of users through both rounds.

Each repeat creates a fresh campaign on the server (admin token), then plays N simulated
users with the client SDK's population simulator (:class:`segshuffle.testing.population.
Population`: every user fetches and verifies the campaign, enrolls at the shuffler with an
invitation of its own, signed here with the app operator's issuer key, sends its sealed
level; after the release, fetches and verifies the published parameters and sends its sealed
data; every view's signatures are checked with the server's signing key, fetched with the
admin token), releasing each round with the operator token and waiting for the server to
finish it (round 1: level histogram, optimizer, publication; round 2: decoding).
It prints per repeat, and as medians over the repeats:

- round-1 and round-2 submissions per second (completed users / wall time of the round),
- p50 and p95 of the per-user latency of each round (a user's whole round: its GETs,
  enrollment and submission, each retried on transient failures by the SDK),
- the release times (``POST .../release?wait=true``: the shuffler permutes, forwards the
  batch in chunks and the server finishes the round before the answer), and the time until
  the campaign's phase changes as seen by a client,
- the CPU time the load generator itself spends per user (sealing, verifying, HTTP), to
  tell how much of the machine the clients take from the services,
- the decoded estimates' MSE against the population's true frequencies, as a sanity check.

The issuer key is ``--issuer-key FILE`` (PEM) or ``SEGSHUFFLE_ISSUER_PRIVATE_KEY`` (the
environment, then the env file that deploy/init-secrets.sh writes); ``--no-invitations``
targets a shuffler with open enrollment.  All simulated users share one source address, so
the shuffler under test needs its per-source rate limits off (``ENROLL_RATE`` and
``SUBMIT_RATE`` 0, as deploy/compose.yaml lets you set them).

Targets must resolve to loopback addresses (``--allow-private`` also accepts private ones,
for the compose network); the number of users and the total time are bounded.

    python loadtest/loadtest.py                           # compose defaults, 5000 users, 3 repeats
    python loadtest/loadtest.py --users 300 --repeats 1 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (
    Metric,
    TargetError,
    check_target,
    format_table,
    resolve_token,
    summarize,
)

from segshuffle.client.policy import ClientPolicy
from segshuffle.client.retry import RetryPolicy
from segshuffle.core import rules
from segshuffle.testing.population import MAX_SOURCE_ADDRESSES, loopback_addresses

MAX_USERS = 1_000_000
"""The most simulated users of one run: every user is held in memory until the end (its
client, invitation and what it sent), so the generator grows with the run."""
MAX_REPEATS = 20
RELEASE_RETRY = RetryPolicy(attempts=8, initial=0.5, maximum=5.0)
"""Tries of a release that fails transiently (11 to 23 s of waits in all)."""
DEFAULT_ENV_FILE = Path(__file__).resolve().parents[1] / "deploy" / ".env"

METRICS = [
    Metric("round1_submissions_per_s", "round 1 submissions/s", "1/s"),
    Metric("round1_p50_ms", "round 1 user latency p50", "ms"),
    Metric("round1_p95_ms", "round 1 user latency p95", "ms"),
    Metric("round1_seconds", "round 1 wall time", "s", 2),
    Metric("round1_client_cpu_ms", "round 1 load-generator CPU per user", "ms", 2),
    Metric("release1_seconds", "round 1 release (+ optimize, publish)", "s", 3),
    Metric("phase2_seconds", "round 1 release until phase round2", "s", 3),
    Metric("round2_submissions_per_s", "round 2 submissions/s", "1/s"),
    Metric("round2_messages_per_s", "round 2 ciphertexts/s", "1/s", 0),
    Metric("round2_p50_ms", "round 2 user latency p50", "ms"),
    Metric("round2_p95_ms", "round 2 user latency p95", "ms"),
    Metric("round2_seconds", "round 2 wall time", "s", 2),
    Metric("round2_client_cpu_ms", "round 2 load-generator CPU per user", "ms", 2),
    Metric("release2_seconds", "round 2 release (+ decode)", "s", 3),
    Metric("done_seconds", "round 2 release until phase done", "s", 3),
    Metric("results_seconds", "results fetch", "s", 3),
    Metric("total_seconds", "campaign end to end", "s", 2),
    Metric("mse", "MSE of the estimates", "", 6),
]


class LoadTestError(RuntimeError):
    """A failed run: printed as one line, exit status 1."""


@dataclass(frozen=True)
class Workload:
    """The campaign every repeat creates, and the population that takes part."""

    users: int
    dataset: str
    item_count: int
    set_size: int
    levels: tuple[float, ...]
    shares: tuple[float, ...]
    delta: float | None
    dropout_tolerance: float
    level_privacy: float | None
    min_users: int

    def population(self, rng: np.random.Generator) -> tuple[np.ndarray, int, bool]:
        """Item sets (n, s), the campaign's domain size d and whether padding is on."""
        from segshuffle.datasets import CollectionSource, load_msnbc, synthetic_source

        if self.dataset == "msnbc":
            collection = load_msnbc()
            source = CollectionSource(name="msnbc", collection=collection)
            drawn = source.draw(self.users, self.set_size, rng)
            return drawn.items, drawn.item_count, True
        drawn = synthetic_source(self.item_count).draw(self.users, self.set_size, rng)
        return drawn.items, drawn.item_count, False

    def campaign_body(self, campaign_id: str, domain_size: int, padding: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": campaign_id, "domain_size": domain_size, "set_size": self.set_size,
            "levels": list(self.levels), "min_users": self.min_users,
            "dropout_tolerance": self.dropout_tolerance, "padding": padding,
            "level_privacy": self.level_privacy,
        }
        if self.delta is not None:
            body["delta"] = self.delta
        return body


def _problem(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return f"HTTP {response.status_code}: {body.get('title')}: {body.get('detail')}"
    return f"HTTP {response.status_code}: {response.text[:200]}"


async def _wait_phase(http: httpx.AsyncClient, server: str, campaign_id: str, phase: str,
                      deadline: float) -> None:
    while True:
        response = await http.get(f"{server}/v1/campaigns/{campaign_id}")
        if response.status_code != 200:
            raise LoadTestError(f"campaign view: {_problem(response)}")
        if response.json()["phase"] in ({"round2", "done"} if phase == "round2" else {"done"}):
            return
        if time.monotonic() > deadline:
            raise LoadTestError(f"campaign {campaign_id} did not reach phase {phase} in time")
        await asyncio.sleep(0.05)


async def _release(http: httpx.AsyncClient, shuffler: str, campaign_id: str, round_: int,
                   operator_token: str, timeout: float) -> float:
    """Seconds until the shuffler answers the release (``wait=true``). A release is
    idempotent: a transient failure (no answer, 5xx, 429; e.g. the balancer's 502 for a
    replica killed under the request) is retried with :data:`RELEASE_RETRY` within
    ``timeout``."""
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    for attempt in range(RELEASE_RETRY.attempts):
        try:
            response = await http.post(
                f"{shuffler}/v1/campaigns/{campaign_id}/rounds/{round_}/release",
                params={"wait": "true"}, headers={"Authorization": f"Bearer {operator_token}"},
                timeout=max(deadline - time.monotonic(), 1.0))
            failure = _problem(response)
            transient = response.status_code >= 500 or response.status_code == 429
        except httpx.HTTPError as exc:
            response, failure, transient = None, f"no answer ({type(exc).__name__})", True
        if response is not None and response.status_code in (200, 202):
            return time.perf_counter() - started
        pause = RELEASE_RETRY.delay(attempt)
        if (not transient or attempt + 1 == RELEASE_RETRY.attempts
                or time.monotonic() + pause >= deadline):
            raise LoadTestError(f"release of round {round_}: {failure}")
        print(f"release of round {round_}: {failure}; again in {pause:.1f} s",
              file=sys.stderr, flush=True)
        await asyncio.sleep(pause)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _deadline_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise LoadTestError("the time budget (--max-seconds) is used up")
    return left


async def run_once(args: argparse.Namespace, workload: Workload, repeat: int,
                   deadline: float) -> tuple[str, dict[str, float]]:
    """One campaign through both rounds; returns its id and the figures of :data:`METRICS`."""
    from segshuffle.testing.population import Population, stderr_progress

    rng = np.random.default_rng(None if args.seed is None else args.seed + repeat)
    items, domain_size, padding = workload.population(rng)
    campaign_id = f"load-{int(time.time())}-{os.getpid()}-{repeat}"
    admin = {"Authorization": f"Bearer {args.admin_token}"}
    figures: dict[str, float] = {}

    def log(message: str) -> None:
        print(f"[repeat {repeat + 1}] {message}", file=sys.stderr, flush=True)

    async with httpx.AsyncClient(timeout=args.request_timeout) as http:
        started = time.perf_counter()
        response = await http.post(f"{args.server_url}/v1/campaigns", headers=admin,
                                   json=workload.campaign_body(campaign_id, domain_size, padding))
        if response.status_code != 201:
            raise LoadTestError(f"creating the campaign: {_problem(response)}")
        response = await http.get(f"{args.server_url}/v1/signing-key", headers=admin)
        if response.status_code != 200:
            raise LoadTestError(f"the server's signing key: {_problem(response)}")
        server_key = response.json()["public_key"]
        log(f"campaign {campaign_id}: {workload.users} users, d={domain_size}, "
            f"s={workload.set_size}, levels={list(workload.levels)}")
        population = Population.with_shares(
            args.shuffler_url, campaign_id, items.tolist(), workload.shares,
            invitations=invitations(args.issuer, campaign_id, workload.users,
                                    args.max_seconds + 3600),
            seed=None if args.seed is None else args.seed + repeat,
            concurrency=args.concurrency, timeout=args.request_timeout,
            server_key=server_key, source_addresses=args.sources,
            # Synthetic users hold exactly s items, so a campaign without padding ids
            # covers them (the client refuses a smaller set all the same).
            policy=ClientPolicy(allow_unpadded=not padding),
            progress=stderr_progress if args.progress else None)
        async with population:
            cpu = time.process_time()
            one = await asyncio.wait_for(population.round1(), _deadline_left(deadline))
            figures["round1_client_cpu_ms"] = 1000.0 * (time.process_time() - cpu) / one.users
            if one.failures:
                raise LoadTestError(f"round 1: {one.failures} users failed, first: "
                                    f"{population.errors()[0]}")
            figures.update(_phase_figures("round1", one))
            log(f"round 1: {one.users} users in {one.seconds:.2f} s; releasing")
            release_started = time.perf_counter()
            figures["release1_seconds"] = await _release(
                http, args.shuffler_url, campaign_id, 1, args.operator_token,
                min(args.release_timeout, _deadline_left(deadline)))
            await _wait_phase(http, args.server_url, campaign_id, "round2", deadline)
            figures["phase2_seconds"] = time.perf_counter() - release_started

            cpu = time.process_time()
            two = await asyncio.wait_for(population.round2(), _deadline_left(deadline))
            figures["round2_client_cpu_ms"] = 1000.0 * (time.process_time() - cpu) / two.users
            if two.failures:
                raise LoadTestError(f"round 2: {two.failures} users failed, first: "
                                    f"{population.errors()[0]}")
            figures.update(_phase_figures("round2", two))
            messages = sum(len(u.round2.slots) for u in population.users if u.round2)
            figures["round2_messages_per_s"] = (messages + two.users) / two.seconds
            log(f"round 2: {two.users} users, {messages} data ciphertexts in "
                f"{two.seconds:.2f} s; releasing")
            release_started = time.perf_counter()
            figures["release2_seconds"] = await _release(
                http, args.shuffler_url, campaign_id, 2, args.operator_token,
                min(args.release_timeout, _deadline_left(deadline)))
            await _wait_phase(http, args.server_url, campaign_id, "done", deadline)
            figures["done_seconds"] = time.perf_counter() - release_started

        fetch_started = time.perf_counter()
        response = await http.get(f"{args.server_url}/v1/campaigns/{campaign_id}/results",
                                  headers=admin)
        if response.status_code != 200:
            raise LoadTestError(f"results: {_problem(response)}")
        figures["results_seconds"] = time.perf_counter() - fetch_started
        figures["total_seconds"] = time.perf_counter() - started
        figures["mse"] = _mse(response.json(), items, domain_size)
    log("  ".join(f"{m.key}={figures[m.key]:.{m.digits}f}" for m in METRICS if m.key in figures))
    return campaign_id, figures


def invitations(issuer: Any, campaign_id: str, count: int, lifetime: float) -> list[str] | None:
    """One invitation per simulated user, signed as the app operator (None: open shuffler)."""
    from segshuffle.crypto.invitations import new_invitation, sign_invitation

    if issuer is None:
        return None
    expires = int(time.time() + lifetime)
    return [sign_invitation(new_invitation(campaign_id, expires), issuer) for _ in range(count)]


def _phase_figures(prefix: str, timing: Any) -> dict[str, float]:
    completed = timing.users - timing.failures
    return {
        f"{prefix}_submissions_per_s": completed / timing.seconds if timing.seconds else math.nan,
        f"{prefix}_p50_ms": 1000.0 * timing.median_user_seconds,
        f"{prefix}_p95_ms": 1000.0 * timing.p95_user_seconds,
        f"{prefix}_seconds": timing.seconds,
    }


def _mse(results: dict[str, Any], items: np.ndarray, domain_size: int) -> float:
    """Mean squared error of the real items' estimates against the true shares."""
    truth = np.bincount(items.ravel(), minlength=domain_size)[:domain_size] / items.shape[0]
    estimates = {entry["id"]: entry["estimate"] for entry in results["items"]}
    errors = [(estimates[j] - truth[j]) ** 2 for j in range(domain_size)
              if estimates.get(j) is not None]
    if len(errors) != domain_size:
        raise LoadTestError(f"results carry {len(errors)} item estimates, expected {domain_size}")
    return float(np.mean(errors))


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") \
            from None
    if not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError("values must be finite")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadtest.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    target = parser.add_argument_group("deployment")
    target.add_argument("--server-url", default="http://127.0.0.1:8080")
    target.add_argument("--shuffler-url", default="http://127.0.0.1:8081")
    target.add_argument("--admin-token", default=None,
                        help="server admin token (default: $SEGSHUFFLE_ADMIN_TOKEN or the "
                             "env file)")
    target.add_argument("--operator-token", default=None,
                        help="shuffler operator token (default: $SEGSHUFFLE_OPERATOR_TOKEN or "
                             "the env file)")
    target.add_argument("--issuer-key", type=Path, default=None, metavar="FILE",
                        help="the invitation issuer's private key (PEM) to invite the users "
                             "with; default: SEGSHUFFLE_ISSUER_PRIVATE_KEY from the environment "
                             "or the env file")
    target.add_argument("--no-invitations", action="store_true",
                        help="enroll without invitations (a shuffler with open enrollment)")
    target.add_argument("--env-file", type=Path, default=DEFAULT_ENV_FILE,
                        help="dotenv file with the tokens (written by deploy/init-secrets.sh)")
    target.add_argument("--allow-private", action="store_true",
                        help="also accept targets on private addresses (compose network)")
    load = parser.add_argument_group("load")
    load.add_argument("--users", type=int, default=5000)
    load.add_argument("--repeats", type=int, default=3)
    load.add_argument("--concurrency", type=int, default=64,
                      help="users in flight at once")
    load.add_argument("--max-seconds", type=float, default=1800.0,
                      help="time budget of the whole load test")
    load.add_argument("--request-timeout", type=float, default=120.0,
                      help="timeout of one user request (the SDK retries transient failures)")
    load.add_argument("--release-timeout", type=float, default=600.0,
                      help="timeout of one release (shuffle, forward, server finishes round)")
    load.add_argument("--source-addresses", type=int, default=1, metavar="K",
                      help="spread the users over K loopback source addresses from "
                           "127.0.0.2 (user i connects from the (i mod K)-th), so a "
                           "balancer's per-address hashing and the shuffler's per-source "
                           "rate limits see K clients; 1: the system's choice. Needs "
                           "loopback targets; Docker's userland proxy hides the source")
    load.add_argument("--seed", type=int, default=None)
    load.add_argument("--progress", action="store_true",
                      help="a progress line per tenth of the users")
    campaign = parser.add_argument_group("campaign")
    campaign.add_argument("--dataset", choices=["synthetic", "msnbc"], default="synthetic")
    campaign.add_argument("--items", type=int, default=64,
                          help="synthetic domain size d")
    campaign.add_argument("--set-size", type=int, default=2)
    campaign.add_argument("--levels", type=_floats, default=(1.0, 2.0, 4.0))
    campaign.add_argument("--shares", type=_floats, default=(0.3, 0.4, 0.3))
    campaign.add_argument("--delta", type=float, default=None,
                          help="default: the server's (0.01/n)")
    campaign.add_argument("--dropout-tolerance", type=float,
                          default=rules.DEFAULT_DROPOUT_TOLERANCE)
    campaign.add_argument("--level-privacy", type=float, default=None,
                          help="eps_p of randomized response on levels (default: exact)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, Workload]:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 10 <= args.users <= MAX_USERS:
        parser.error(f"--users must lie in [10, {MAX_USERS}]")
    if not 1 <= args.repeats <= MAX_REPEATS:
        parser.error(f"--repeats must lie in [1, {MAX_REPEATS}]")
    if not 1 <= args.concurrency <= 1024:
        parser.error("--concurrency must lie in [1, 1024]")
    if not 0 < args.max_seconds <= 6 * 3600:
        parser.error("--max-seconds must lie in (0, 21600]")
    if not (args.request_timeout > 0 and args.release_timeout > 0):
        parser.error("timeouts must be positive")
    if len(args.levels) != len(args.shares):
        parser.error("give one share per level")
    if not 1 <= args.source_addresses <= MAX_SOURCE_ADDRESSES:
        parser.error(f"--source-addresses must lie in [1, {MAX_SOURCE_ADDRESSES}]")
    args.sources = (loopback_addresses(args.source_addresses)
                    if args.source_addresses > 1 else [])
    try:
        args.server_url = check_target(args.server_url, allow_private=args.allow_private)
        args.shuffler_url = check_target(args.shuffler_url, allow_private=args.allow_private)
        args.admin_token = resolve_token("admin", args.admin_token, args.env_file)
        args.operator_token = resolve_token("operator", args.operator_token, args.env_file)
        args.issuer = resolve_issuer(args)
    except (TargetError, ValueError) as exc:
        parser.error(str(exc))
    workload = Workload(
        users=args.users, dataset=args.dataset, item_count=args.items, set_size=args.set_size,
        levels=args.levels, shares=args.shares, delta=args.delta,
        dropout_tolerance=args.dropout_tolerance, level_privacy=args.level_privacy,
        min_users=max(10, args.users // 2))
    return args, workload


def resolve_issuer(args: argparse.Namespace) -> Any:
    """The issuer key: ``--issuer-key``, else SEGSHUFFLE_ISSUER_PRIVATE_KEY (environment, env
    file); None with ``--no-invitations``."""
    from segshuffle.crypto.invitations import issuer_key_from_text, load_issuer_key

    if args.no_invitations:
        return None
    if args.issuer_key is not None:
        return load_issuer_key(args.issuer_key)
    return issuer_key_from_text(resolve_token("issuer", None, args.env_file,
                                              flag="--issuer-key (or --no-invitations)"))


async def run(args: argparse.Namespace,
              workload: Workload) -> list[tuple[str, dict[str, float]]]:
    deadline = time.monotonic() + args.max_seconds
    return [await run_once(args, workload, repeat, deadline) for repeat in range(args.repeats)]


def main(argv: list[str] | None = None) -> int:
    args, workload = parse_args(argv)
    try:
        campaigns = asyncio.run(run(args, workload))
    except (LoadTestError, TimeoutError) as exc:
        message = str(exc) or "the time budget (--max-seconds) is used up"
        print(f"loadtest: error: {message}", file=sys.stderr)
        return 1
    except httpx.TimeoutException:
        print("loadtest: error: a request timed out (--request-timeout, --release-timeout)",
              file=sys.stderr)
        return 1
    except httpx.HTTPError as exc:
        print(f"loadtest: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    runs = [figures for _, figures in campaigns]
    rows = summarize(runs, METRICS)
    if args.json:
        report = {"workload": workload.__dict__, "concurrency": args.concurrency,
                  "server_url": args.server_url, "shuffler_url": args.shuffler_url,
                  "campaigns": [cid for cid, _ in campaigns],
                  "runs": runs, "medians": {row["key"]: row["median"] for row in rows}}
        print(json.dumps(report, indent=2))
    else:
        domain = workload.item_count if workload.dataset == "synthetic" else "17 (+s padding)"
        print(f"{workload.users} users, {len(runs)} repeat(s), concurrency {args.concurrency}, "
              f"{workload.dataset} d={domain} s={workload.set_size} "
              f"levels={list(workload.levels)}")
        print(format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

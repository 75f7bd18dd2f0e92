"""Many simulated users against live services (asyncio, bounded concurrency).

:class:`Population` plays N users of one campaign, each an
:class:`~segshuffle.client.AsyncClient` sharing one connection pool:

- :meth:`Population.round1`: every user fetches and verifies the campaign,
  enrolls (with its own invitation), and sends its (possibly randomized) level;
- :meth:`Population.round2`: every (remaining) user fetches the published
  parameters, verifies them for its own level, and sends its data.

The users share one connection pool and one short-lived cache of the public
documents (campaign view, key config, round status), as users behind a common
HTTP cache would; each user still verifies every document itself (verdicts on the
exact same bytes are shared: :mod:`segshuffle.client.verdicts`).  Against plain
``http://`` services the pools are :class:`~.lean_transport.LeanClient` over
:class:`~.lean_transport.LeanTransport` (the generator's CPU per request a fraction of
httpx's and httpcore's); ``https://`` keeps httpx's own.

Releasing the rounds is the shuffler operator's job, between the two calls.

Each user has its own seeded generator (spawned from ``seed``), so the
randomizers are reproducible; nonces and HPKE ephemeral keys still come from the
operating system's CSPRNG.  The plaintexts every user sent are kept
(:attr:`UserRecord.round1`, :attr:`UserRecord.round2`) so that tests can
recompute the server's counts offline.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx
import numpy as np

from segshuffle.client import accountant
from segshuffle.client.aio import AsyncClient
from segshuffle.client.errors import ClientError
from segshuffle.client.messages import SentRound1, SentRound2
from segshuffle.client.policy import ClientPolicy
from segshuffle.client.session import PublicCache, RetryPolicy

from .lean_transport import LeanClient, LeanTransport

Progress = Callable[[str, int, int], None]

MAX_SOURCE_ADDRESSES = 65_536
POOL_CONNECTIONS = 8
"""Connections per pool of the simulated users (see :meth:`Population.__aenter__`)."""


def loopback_addresses(count: int, first: str = "127.0.0.2") -> list[str]:
    """``count`` consecutive IPv4 loopback addresses from ``first`` (Linux routes all of
    127.0.0.0/8 to the loopback interface, so each can be a connection's source)."""
    import ipaddress

    start = ipaddress.IPv4Address(first)
    if not 1 <= count <= MAX_SOURCE_ADDRESSES:
        raise ValueError(f"give 1 to {MAX_SOURCE_ADDRESSES} source addresses, got {count}")
    last = start + (count - 1)
    network = ipaddress.IPv4Network("127.0.0.0/8")
    if start not in network or last not in network or last == network.broadcast_address:
        raise ValueError(f"{count} addresses from {first} leave 127.0.0.0/8")
    return [str(start + offset) for offset in range(count)]


ACCOUNTANT_MODULES = ("segshuffle.core.arrays.python_distributions",)
"""Modules the accountant imports on its first computation (the numpy accountant's exact
binomial tails come from the portable package: some 30 ms of imports)."""


def load_accountant() -> None:
    """Import the accountant the users' round-2 checks will use, now.

    The SDK imports it on first use (a light app that never reaches round 2 does not pay
    for numpy and scipy); in a simulation the first user's check would otherwise carry
    the whole process's imports (some 0.2 s) inside the measured round.  Importing is all
    this does: no verdict is computed, and every user still runs its own check.  A bad
    ``SEGSHUFFLE_ACCOUNTANT`` is left for those checks to report, as without this.
    """
    with contextlib.suppress(ValueError):
        accountant.implementation()
    for module in ACCOUNTANT_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def stderr_progress(phase: str, done: int, total: int) -> None:
    """Default progress report: a line to stderr per tenth of the users, and at least
    every :attr:`Population.progress_seconds` while they run."""
    sys.stderr.write(f"{phase}: {done}/{total} users\n")
    sys.stderr.flush()


@dataclass
class UserRecord:
    """One simulated user: its input, its level and what it sent."""

    index: int
    items: tuple[int, ...]
    level_index: int
    round1: SentRound1 | None = None
    round2: SentRound2 | None = None
    error: str | None = None
    finished: dict[int, int] = field(default_factory=dict)
    """Round -> rank of this user's submission among the accepted ones of that round."""


@dataclass(frozen=True)
class PhaseTiming:
    """Wall time of a phase and the per-user latency distribution (seconds)."""

    phase: str
    users: int
    failures: int
    seconds: float
    median_user_seconds: float
    p95_user_seconds: float

    def as_dict(self) -> dict[str, float | int | str]:
        return {"phase": self.phase, "users": self.users, "failures": self.failures,
                "seconds": self.seconds, "median_user_seconds": self.median_user_seconds,
                "p95_user_seconds": self.p95_user_seconds}


@dataclass
class Population:
    """N users of one campaign (see the module docstring)."""

    shuffler_url: str
    campaign_id: str
    item_sets: Sequence[Sequence[int]]
    level_indices: Sequence[int]
    seed: int | None = None
    concurrency: int = 16
    """Users in flight at once (also the connection pool size: httpx's pool gets slow with
    many connections, and a few keep-alive connections already saturate local services)."""
    invitations: Sequence[str] | None = None
    """One enrollment invitation per user (``LocalStack.invitations``), or None for a
    shuffler with open enrollment."""
    local_address: str | None = None
    """Source address of the users' connections (e.g. 127.0.0.2 to tell them apart)."""
    source_addresses: Sequence[str] = ()
    """Spread the users over these source addresses instead (user i connects from address
    i mod k, each address with its own connection pool), e.g. :func:`loopback_addresses`:
    a balancer's per-address hashing and the shuffler's per-source rate limits then see
    many users rather than one."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: float = 60.0
    cache_seconds: float = 1.0
    """Lifetime of the users' shared cache of public documents (:class:`PublicCache`)."""
    allow_insecure: bool = False
    """Accept parameters a test server published with its insecure flag."""
    policy: ClientPolicy | None = None
    """What the simulated app accepts (:class:`ClientPolicy`; default: its defaults)."""
    server_key: str | None = None
    """The server's document-signing public key (``LocalStack.server_key``): every user
    then refuses views the server did not sign."""
    progress: Progress | None = None
    progress_seconds: float = 10.0
    """Besides one per tenth of the users, a progress report at least this often while a
    phase runs (a tenth of a large population can take minutes on a busy machine)."""
    users: list[UserRecord] = field(init=False)
    _clients: list[AsyncClient] = field(init=False)
    _pools: list[httpx.AsyncClient] = field(init=False, default_factory=list)
    _seeds: list[np.random.SeedSequence] = field(init=False)

    def __post_init__(self) -> None:
        if len(self.item_sets) != len(self.level_indices):
            raise ValueError("give one level per item set")
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.invitations is not None and len(self.invitations) != len(self.item_sets):
            raise ValueError("give one invitation per user")
        self.users = [
            UserRecord(index=i, items=tuple(int(j) for j in items), level_index=int(level))
            for i, (items, level) in enumerate(zip(self.item_sets, self.level_indices,
                                                   strict=True))
        ]
        self._seeds = np.random.SeedSequence(self.seed).spawn(len(self.item_sets))
        self._clients = []

    @classmethod
    def with_shares(cls, shuffler_url: str, campaign_id: str,
                    item_sets: Sequence[Sequence[int]], shares: Sequence[float],
                    *, seed: int | None = None, **kwargs: object) -> Population:
        """Levels drawn independently with probabilities ``shares`` (one per level)."""
        p = np.asarray(shares, dtype=float)
        if p.ndim != 1 or p.size == 0 or (p < 0).any() or abs(p.sum() - 1.0) > 1e-6:
            raise ValueError("shares must be non-negative and sum to 1")
        # a stream of its own: the users' generators are the children 0..N-1 of the seed
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0xFFFFFFFF,)))
        levels = rng.choice(p.size, size=len(item_sets), p=p / p.sum())
        return cls(shuffler_url, campaign_id, item_sets,
                   [int(v) for v in levels], seed=seed, **kwargs)  # type: ignore[arg-type]

    # -- lifecycle -----------------------------------------------------------------------
    async def __aenter__(self) -> Population:
        addresses: list[str | None] = list(self.source_addresses) or [self.local_address]
        # Pools of at most POOL_CONNECTIONS connections, a multiple of the addresses in
        # number (pool j connects from address j mod k, so user i from address i mod k):
        # httpcore scans its whole pool on every request, so one pool of C connections
        # costs O(C) per request and small pools keep that flat.
        rounds = max(1, -(-self.concurrency // (POOL_CONNECTIONS * len(addresses))))
        pools = len(addresses) * rounds
        per_pool = max(1, -(-self.concurrency // pools))
        limits = httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool)
        lean = self.shuffler_url.startswith("http://")

        def pool(address: str | None) -> httpx.AsyncClient:
            if lean:
                return LeanClient(LeanTransport(max_connections=per_pool,
                                                local_address=address), timeout=self.timeout)
            return httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(local_address=address, limits=limits),
                timeout=self.timeout)

        self._pools = [pool(addresses[j % len(addresses)]) for j in range(pools)]
        load_accountant()
        if self._clients:  # entered again (e.g. one event loop per round): keep the users
            for index, client in enumerate(self._clients):
                client._http = self._pool_of(index)
            return self
        cache = PublicCache(self.cache_seconds)
        self._clients = [
            AsyncClient(self.shuffler_url, self.campaign_id,
                        rng=np.random.default_rng(seed), retry=self.retry,
                        http=self._pool_of(index), cache=cache,
                        allow_insecure=self.allow_insecure, policy=self.policy,
                        server_key=self.server_key)
            for index, seed in enumerate(self._seeds)
        ]
        return self

    def _pool_of(self, user: int) -> httpx.AsyncClient:
        return self._pools[user % len(self._pools)]

    async def __aexit__(self, *exc: object) -> None:
        pools, self._pools = self._pools, []
        await asyncio.gather(*(pool.aclose() for pool in pools))

    # -- phases --------------------------------------------------------------------------
    async def _run(self, phase: str, indices: Sequence[int],
                   job: Callable[[int], object]) -> PhaseTiming:
        if not self._pools:
            raise ClientError("use the population as 'async with Population(...)'")
        latencies: list[float] = []
        failures = 0
        done = 0
        step = max(1, len(indices) // 10)
        queue = iter(indices)
        reported = time.monotonic()

        async def worker() -> None:
            """Plays users one after the other, in the order of ``indices``: ``concurrency``
            workers keep that many users in flight (one task per user waiting at a
            semaphore cost the generator a few per cent of its CPU)."""
            nonlocal failures, done, reported
            for i in queue:
                started = time.perf_counter()
                try:
                    await job(i)  # type: ignore[misc]
                except ClientError as exc:
                    self.users[i].error = f"{phase}: {exc}"
                    failures += 1
                latencies.append(time.perf_counter() - started)
                done += 1
                now = time.monotonic()
                if self.progress is not None and (done % step == 0 or done == len(indices)
                                                  or now - reported >= self.progress_seconds):
                    self.progress(phase, done, len(indices))
                    reported = now

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(self.concurrency, len(indices)))))
        seconds = time.perf_counter() - started
        ordered = sorted(latencies) or [0.0]
        return PhaseTiming(
            phase=phase, users=len(indices), failures=failures, seconds=seconds,
            median_user_seconds=statistics.median(ordered),
            p95_user_seconds=ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        )

    async def round1(self, indices: Sequence[int] | None = None) -> PhaseTiming:
        """Every user (or ``indices``): fetch and verify the campaign, enroll, send the level."""
        order = itertools.count(sum(1 for u in self.users if 1 in u.finished))

        async def job(i: int) -> None:
            client = self._clients[i]
            await client.campaign()
            await client.enroll(None if self.invitations is None else self.invitations[i])
            self.users[i].round1 = await client.submit_level(self.users[i].level_index)
            self.users[i].finished[1] = next(order)

        chosen = list(indices) if indices is not None else range(len(self.users))
        return await self._run("round 1", chosen, job)  # type: ignore[arg-type]

    async def round2(self, indices: Sequence[int] | None = None) -> PhaseTiming:
        """Users (all who completed round 1, or ``indices``): verify parameters, send data."""
        chosen = list(indices) if indices is not None else [
            u.index for u in self.users if u.round1 is not None and u.round2 is None]
        order = itertools.count(sum(1 for u in self.users if 2 in u.finished))

        async def job(i: int) -> None:
            client = self._clients[i]
            await client.fetch_parameters()
            self.users[i].round2 = await client.submit_data(self.users[i].items)
            self.users[i].finished[2] = next(order)

        return await self._run("round 2", chosen, job)  # type: ignore[arg-type]

    # -- what was sent ---------------------------------------------------------------------
    def sent_item_counts(self, domain: int) -> np.ndarray:
        """C_j recomputed from the plaintexts sent in round 2 (nulls excluded)."""
        counts = np.zeros(domain, dtype=np.int64)
        for user in self.users:
            if user.round2 is not None:
                for j in user.round2.slots:
                    if j is not None:
                        counts[j] += 1
        return counts

    def sent_level_counts(self, levels: int, round_number: int) -> np.ndarray:
        """The histogram of reported levels of one round's level stream."""
        counts = np.zeros(levels, dtype=np.int64)
        for user in self.users:
            sent = user.round1 if round_number == 1 else user.round2
            if sent is not None:
                counts[sent.reported_level] += 1
        return counts

    def errors(self) -> list[str]:
        return [u.error for u in self.users if u.error is not None]


"""Two server replicas and two shuffler replicas behind the deploy/scale load balancer.

Real processes on loopback: each kind shares one fresh PostgreSQL database and one key
directory; a real nginx runs deploy/scale/ rendered with loopback upstreams and free ports
(as tests/test_tls.py renders deploy/tls/); the shufflers reach the servers through it.
A campaign of a few hundred simulated users (the SDK population, from several loopback
addresses; the balancer's per-source limits off, as for a load test) runs through the balancer
while replicas are killed with SIGKILL:

- a shuffler replica that is taking submissions, during round 1 (then restarted);
- the shuffler replica holding the release lease, while it forwards round 1: another
  replica must finish the release without any operator request (bounded time);
- a server replica while round 2 is being forwarded.

Then no submission is lost and none is counted twice: with lambda = 1, m = 0 (insecure
parameters) and one unique item per user, every decoded count is exactly 1 for the users
whose round-2 submission the SDK reported as accepted and 0 for the others, and the
round-1 and round-2 user counts equal the accepted submissions.

Needs PostgreSQL (``SEGSHUFFLE_TEST_POSTGRES_URL``) and nginx; skipped without them,
except under ``CI=true``, where they are failures.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.operator import OperatorClient
from segshuffle.testing.population import Population

from .nginx_support import free_ports, nginx_binary, render_balancer, running_nginx
from .postgres_support import fresh_database
from .test_e2e_support import decoded_counts

pytestmark = pytest.mark.slow

USERS = 320
ADDRESSES = 8
"""The users connect from 127.0.0.1 ... 127.0.0.8, ``USERS / ADDRESSES`` from each."""
LEASE_SECONDS = 3.0
TAKEOVER_BOUND = 30.0
"""Seconds within which a killed forwarder's round must be released by another replica."""
CHUNK_SIZE = 2


@dataclass
class Deployment:
    """The replicas, the balancer and the two databases."""

    stack: LocalStack
    server_url: str
    shuffler_url: str
    shuffler_database: str
    operator: OperatorClient

    def name_of_pid(self, pid: int) -> str:
        """The process name (``shuffler``, ``shuffler-2``...) of a running replica."""
        for name, process in self.stack.processes.items():
            if process.pid == pid and process.poll() is None:
                return name
        raise AssertionError(f"no running replica has pid {pid}")

    def shuffler_rows(self, query: str, *args: object) -> list[tuple[object, ...]]:
        with psycopg.connect(self.shuffler_database, autocommit=True) as db:
            return list(db.execute(query, args).fetchall())  # type: ignore[arg-type]

    def status(self, campaign_id: str, round_number: int) -> dict[str, object]:
        """The round status through the balancer; ``{}`` on the balancer's own unavailable
        problem (503, Retry-After: 5: deploy/scale/shuffler.conf), which a client retries:
        when every replica is marked failed (one killed, the other restarted less than
        ``fail_timeout`` ago) nginx has no live upstream for a moment."""
        answer = httpx.get(f"{self.shuffler_url}/v1/campaigns/{campaign_id}/rounds/"
                           f"{round_number}", timeout=10)
        if answer.status_code == 503 and "no shuffler replica answered" in answer.text:
            return {}
        assert answer.status_code == 200, (answer.status_code, answer.text)
        return dict(answer.json())


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    nginx_binary()
    with fresh_database("segshuffle_server") as server_db, \
            fresh_database("segshuffle_shuffler") as shuffler_db:
        server_lb, shuffler_lb, shuffler_1, shuffler_2 = free_ports(4)
        stack = LocalStack(tmp_path / "stack", min_users=2, allow_insecure=True, server_env={
            "SEGSHUFFLE_SERVER_DATABASE": server_db,
            "SEGSHUFFLE_SERVER_KEY_DIR": str(tmp_path / "server-keys"),
            "SEGSHUFFLE_SERVER_DECRYPT_WORKERS": "1",
        }, shuffler_env={
            "SEGSHUFFLE_SHUFFLER_DATABASE": shuffler_db,
            "SEGSHUFFLE_SHUFFLER_KEY_DIRECTORY": str(tmp_path / "round-keys"),
            "SEGSHUFFLE_SHUFFLER_CHUNK_SIZE": str(CHUNK_SIZE),
            "SEGSHUFFLE_SHUFFLER_RELEASE_LEASE_SECONDS": str(LEASE_SECONDS),
            "SEGSHUFFLE_SHUFFLER_TRUSTED_PROXIES": "127.0.0.1/32",
        })
        stack.upstream_url = f"http://127.0.0.1:{server_lb}"
        try:
            stack.start_service("server")
            stack.start_replica("server")
            stack.ports["shuffler"], stack.ports["shuffler-2"] = shuffler_1, shuffler_2
            state = tmp_path / "nginx"
            conf = render_balancer(state, servers=[stack.ports["server"],
                                                   stack.ports["server-2"]],
                                   shufflers=[shuffler_1, shuffler_2],
                                   server_port=server_lb, shuffler_port=shuffler_lb,
                                   source_limits="off")
            with running_nginx(conf, state, (server_lb, shuffler_lb)):
                stack.start_service("shuffler")
                stack.start_service("shuffler-2")
                operator = OperatorClient(server=f"http://127.0.0.1:{server_lb}",
                                          shuffler=f"http://127.0.0.1:{shuffler_lb}",
                                          admin_token=stack.admin_token,
                                          operator_token=stack.operator_token)
                yield Deployment(stack, f"http://127.0.0.1:{server_lb}",
                                 f"http://127.0.0.1:{shuffler_lb}", shuffler_db, operator)
        finally:
            stack.close()


def _submissions(port: int, round_number: int) -> float:
    """Round submissions one shuffler replica accepted (its own /metrics, not via the LB)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    pattern = (r'^segshuffle_shuffler_submissions_total\{round="' + str(round_number)
               + r'"\} ([0-9.e+]+)$')
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


class Crowd:
    """The users, one :class:`Population` per source address, run in a thread."""

    def __init__(self, deployment: Deployment, campaign_id: str) -> None:
        stack = deployment.stack
        per = USERS // ADDRESSES
        self.groups = [
            Population(deployment.shuffler_url, campaign_id,
                       [[i] for i in range(g * per, (g + 1) * per)], [0] * per,
                       seed=g, allow_insecure=True, server_key=stack.server_key,
                       invitations=stack.invitations(campaign_id, per),
                       local_address=f"127.0.0.{g + 1}", concurrency=8)
            for g in range(ADDRESSES)
        ]
        self._thread: threading.Thread | None = None
        self._failure: list[BaseException] = []

    def start(self, round_number: int) -> None:
        async def run() -> None:
            async def one(group: Population) -> None:
                async with group:
                    await (group.round1() if round_number == 1 else group.round2())

            await asyncio.gather(*(one(g) for g in self.groups))

        def main() -> None:
            try:
                asyncio.run(run())
            except BaseException as exc:
                self._failure.append(exc)

        self._thread = threading.Thread(target=main, name=f"round {round_number} users")
        self._thread.start()

    def join(self, timeout: float = 240.0) -> None:
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the users did not finish in time"
        assert self._failure == []

    def accepted(self, round_number: int) -> list[int]:
        """The items (= user indices) whose submission the SDK reported as accepted."""
        return [u.items[0] for g in self.groups for u in g.users
                if (u.round1 if round_number == 1 else u.round2) is not None]


def _wait_for(condition: object, what: str, timeout: float, interval: float = 0.02) -> float:
    """Poll ``condition()`` until true; returns the seconds it took."""
    started = time.monotonic()
    while not condition():  # type: ignore[operator]
        assert time.monotonic() - started < timeout, f"timed out waiting for {what}"
        time.sleep(interval)
    return time.monotonic() - started


def test_replicas_killed_mid_round_lose_and_double_nothing(deployment: Deployment) -> None:
    stack, operator = deployment.stack, deployment.operator
    operator.create_campaign({
        "id": "scale", "domain_size": USERS, "set_size": 1, "levels": [1.0],
        "min_users": 10, "dropout_tolerance": 0.5,
        "insecure_parameters": {"m": 0.0, "lambdas": [1.0]},
    })
    crowd = Crowd(deployment, "scale")
    shufflers = {"shuffler": stack.ports["shuffler"], "shuffler-2": stack.ports["shuffler-2"]}

    # -- round 1: kill a shuffler replica that is taking submissions ------------------------
    crowd.start(1)
    _wait_for(lambda: sum(_submissions(p, 1) for p in shufflers.values()) >= USERS // 4,
              "a quarter of the round-1 submissions", 120)
    busiest = max(shufflers, key=lambda name: _submissions(shufflers[name], 1))
    stack.kill(busiest)
    crowd.join()
    stack.start_service(busiest)  # back on its port, on the same database and keys
    accepted_1 = crowd.accepted(1)
    assert len(accepted_1) >= USERS * 3 // 4
    _wait_for(lambda: deployment.status("scale", 1).get("participants") == len(accepted_1),
              "the round-1 participants", 10, interval=0.2)

    # -- release round 1: kill the replica forwarding it; another one takes over ------------
    operator.release("scale", 1, wait=False, timeout=10)
    _wait_for(lambda: deployment.shuffler_rows(
        "SELECT 1 FROM acknowledged a JOIN rounds r ON a.batch_id = r.batch_id "
        "WHERE r.campaign_id = 'scale' AND r.round = 1"), "a first acknowledged chunk", 60,
        interval=0.005)
    ((owner,),) = deployment.shuffler_rows(
        "SELECT owner FROM release_leases WHERE campaign_id = 'scale' AND round = 1")
    forwarder = deployment.name_of_pid(int(str(owner).split("/")[1]))
    stack.kill(forwarder)
    killed_at = time.monotonic()
    ((acknowledged,),) = deployment.shuffler_rows("SELECT COUNT(*) FROM acknowledged")
    chunks = -(-len(accepted_1) // CHUNK_SIZE)
    assert 0 < int(acknowledged) < chunks, "the kill did not land mid-forwarding"
    _wait_for(lambda: deployment.status("scale", 1).get("state") == "released",
              "another replica to finish the release", TAKEOVER_BOUND, interval=0.2)
    takeover = time.monotonic() - killed_at
    assert takeover < TAKEOVER_BOUND
    assert operator.campaign("scale").phase == "round2"
    stack.start_service(forwarder)

    # -- round 2, then kill a server replica while the round is forwarded ------------------
    crowd.start(2)
    crowd.join()
    accepted_2 = crowd.accepted(2)
    assert len(accepted_2) == len(accepted_1)
    operator.release("scale", 2, wait=False, timeout=10)
    _wait_for(lambda: deployment.shuffler_rows(
        "SELECT 1 FROM acknowledged a JOIN rounds r ON a.batch_id = r.batch_id "
        "WHERE r.campaign_id = 'scale' AND r.round = 2"), "round 2 forwarding", 60,
        interval=0.005)
    stack.kill("server-2")
    _wait_for(lambda: deployment.status("scale", 2).get("state") == "released",
              "the round-2 release", 120, interval=0.2)

    # -- nothing lost, nothing doubled -----------------------------------------------------
    results = operator.results("scale")
    parameters = operator.campaign("scale").parameters
    assert parameters is not None and (parameters.m, parameters.lambdas) == (0.0, [1.0])
    counts = decoded_counts(results, parameters)
    assert len(counts) == parameters.privacy_domain_size >= USERS
    expected = [0] * len(counts)
    for item in accepted_2:
        expected[item] = 1
    assert counts.tolist() == expected  # each accepted user's item once, nothing else
    assert [lv.users_round1 for lv in results.privacy.levels] == [len(accepted_1)]
    assert [lv.users_round2 for lv in results.privacy.levels] == [len(accepted_2)]
    assert results.privacy.round2_users == len(accepted_2)
    assert results.dropped_messages == 0
    print(f"\nreplicas: round 1 accepted {len(accepted_1)}/{USERS} after killing {busiest}; "
          f"release taken over {takeover:.1f} s after killing {forwarder} "
          f"({acknowledged}/{chunks} chunks acknowledged); round 2 accepted "
          f"{len(accepted_2)} with server-2 killed mid-forwarding")

"""Fault injection over real processes: 1,000 users through both
rounds while each service is killed (``SIGKILL``) at a random point of every phase and
restarted at once.  Every campaign ends exact (the server's counts equal what the users
sent, nothing dropped), and no process, the decrypt pool's included, outlives the run.

The phases are the two intakes (a kill when a random tenth of the users has finished)
and the two releases (a kill at a random moment of the forwarding and decoding, which
small chunks and a window of one stretch out).  Ten seeds, one per test.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from segshuffle.client.retry import RetryPolicy
from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.population import Population

from .process_support import alive
from .test_decrypt_pool_death import _descendants
from .test_e2e_support import decoded_counts, run_rounds

pytestmark = pytest.mark.slow  # real service processes end to end, 1,000 users

USERS = 1000
ITEMS = 20
SERVICES = ("server", "shuffler")
RIDE_OUT = RetryPolicy(attempts=14, initial=0.2, maximum=2.0)
"""Users retry through a restart (about 20 s of waits in all)."""


class Killer:
    """Kills and restarts services off the test's thread, and remembers every process
    (and its children) it has seen, for the final check that none is left."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.seen: set[int] = set()
        self.kills: list[str] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def remember(self) -> None:
        for process in self.stack.processes.values():
            self.seen.add(process.pid)
            self.seen |= _descendants(process.pid)

    def _kill_and_restart(self, service: str, phase: str) -> None:
        with self._lock:  # one restart at a time
            self.remember()
            self.stack.kill(service)
            self.stack.start_service(service)
            self.kills.append(f"{phase}:{service}")
            self.remember()

    def soon(self, service: str, phase: str, delay: float = 0.0) -> None:
        """Kill ``service`` after ``delay`` seconds, in a thread of its own."""
        def run() -> None:
            time.sleep(delay)
            self._kill_and_restart(service, phase)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._threads.append(thread)

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=120)
            assert not thread.is_alive(), "a restart did not finish"
        self._threads.clear()


def _intake_trigger(killer: Killer, rng: random.Random, phase: str
                    ) -> Callable[[str, int, int], None]:
    """A progress callback that kills each service once, at a random tenth of the users."""
    at = {service: rng.randint(1, 9) for service in SERVICES}

    def progress(_: str, done: int, total: int) -> None:
        tenth = done * 10 // total
        for service, when in list(at.items()):
            if tenth >= when:
                del at[service]
                killer.soon(service, phase)
    return progress


def _status(stack: LocalStack, cid: str, round_number: int) -> dict[str, object]:
    url = f"{stack.shuffler_url}/v1/campaigns/{cid}/rounds/{round_number}"
    for _ in range(100):
        try:
            return dict(httpx.get(url, timeout=5).json())
        except (httpx.HTTPError, ValueError):
            time.sleep(0.1)  # the shuffler is restarting
    raise AssertionError("the shuffler did not answer")


def _release_with_kills(stack: LocalStack, killer: Killer, rng: random.Random, cid: str,
                        round_number: int) -> None:
    phase = f"release{round_number}"
    for service in SERVICES:
        killer.soon(service, phase, delay=rng.uniform(0.0, 1.5))
    for _ in range(100):  # the release request itself may meet a restart
        try:
            stack.release(cid, round_number, wait=False)
            break
        except Exception:
            time.sleep(0.2)
    killer.join()
    deadline = time.monotonic() + 180
    while (status := _status(stack, cid, round_number))["state"] != "released":
        assert time.monotonic() < deadline, status
        if status["state"] == "open":  # the request met a dying shuffler: ask again
            stack.release(cid, round_number, wait=False)
        time.sleep(0.3)


@pytest.mark.parametrize("seed", range(10))
def test_random_kills_leave_every_campaign_exact(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    items = np.random.default_rng(seed)
    sets = [list(items.choice(ITEMS, size=2, replace=False)) for _ in range(USERS)]
    cid = f"fault-{seed}"
    stack = LocalStack(tmp_path, min_users=10,
                       server_env={"SEGSHUFFLE_SERVER_DECRYPT_WORKERS": "2",
                                   "SEGSHUFFLE_SERVER_PARALLEL_THRESHOLD": "100"},
                       shuffler_env={"SEGSHUFFLE_SHUFFLER_CHUNK_SIZE": "100",
                                     "SEGSHUFFLE_SHUFFLER_FORWARD_WINDOW": "1",
                                     # a restarted shuffler takes over the dead one's
                                     # forwarding within 1.5 leases
                                     "SEGSHUFFLE_SHUFFLER_RELEASE_LEASE_SECONDS": "2"})
    killer = Killer(stack)
    try:
        with stack:
            killer.remember()
            stack.create_campaign({"id": cid, "domain_size": ITEMS, "set_size": 2,
                                   "levels": [0.5, 1.0, 2.0], "min_users": 100})
            population = Population.with_shares(
                stack.shuffler_url, cid, sets, [0.3, 0.4, 0.3], seed=seed,
                server_key=stack.server_key, invitations=stack.invitations(cid, USERS),
                retry=RIDE_OUT, concurrency=32)
            for round_number in (1, 2):
                population.progress = _intake_trigger(killer, rng, f"intake{round_number}")
                run_rounds(population, round_number)
                killer.join()
                assert _status(stack, cid, round_number)["participants"] == USERS
                _release_with_kills(stack, killer, rng, cid, round_number)
            assert len(killer.kills) == 8, killer.kills  # each service in each phase

            results = stack.results(cid)
            parameters = stack.campaign(cid).parameters
            assert parameters is not None
            assert results.privacy.users == USERS and results.privacy.round2_users == USERS
            assert [lv.users_round1 for lv in results.privacy.levels] == \
                population.sent_level_counts(3, 1).tolist()
            assert [lv.users_round2 for lv in results.privacy.levels] == \
                population.sent_level_counts(3, 2).tolist()
            expected = population.sent_item_counts(parameters.privacy_domain_size)
            assert decoded_counts(results, parameters).tolist() == expected.tolist()
            assert results.dropped_messages == 0
            killer.remember()
    finally:
        killer.join()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(pid) for pid in killer.seen):
        time.sleep(0.2)
    assert not [pid for pid in killer.seen if alive(pid)], "processes left behind"

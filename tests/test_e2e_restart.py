"""Crash recovery over real processes: kill -9 either service mid-round and restart it.

Round 1: half the users submit, the shuffler is killed and restarted, the other half
submit; then the release is started while the server is down, the shuffler is
killed mid-forwarding, both restart and the forwarding resumes.  Round 2: half the
users submit, the server is killed and restarted, the rest submit.  No accepted
submission is lost: the server's totals equal what the users sent.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.population import Population

from .test_e2e_support import decoded_counts, run_rounds

pytestmark = pytest.mark.slow  # real service processes end to end

USERS = 240
ITEMS = 12


def _participants(stack: LocalStack, round_number: int) -> dict[str, object]:
    url = f"{stack.shuffler_url}/v1/campaigns/crash/rounds/{round_number}"
    return dict(httpx.get(url, timeout=10).json())


def test_kill_nine_and_restart_loses_nothing(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    sets = [list(rng.choice(ITEMS, size=2, replace=False)) for _ in range(USERS)]
    first, second = list(range(USERS // 2)), list(range(USERS // 2, USERS))
    with LocalStack(tmp_path, min_users=10,
                    shuffler_env={"SEGSHUFFLE_SHUFFLER_CHUNK_SIZE": "50"}) as stack:
        stack.create_campaign({"id": "crash", "domain_size": ITEMS, "set_size": 2,
                               "levels": [1.0, 2.0], "min_users": 20})
        population = Population.with_shares(stack.shuffler_url, "crash",
                                            sets, [0.5, 0.5], seed=9, server_key=stack.server_key,
                                            invitations=stack.invitations("crash", len(sets)))
        # round 1: the shuffler dies between the two halves
        run_rounds(population, 1, indices=first)
        stack.kill("shuffler")
        stack.start_service("shuffler")
        assert _participants(stack, 1)["participants"] == len(first)
        run_rounds(population, 1, indices=second)
        assert _participants(stack, 1)["participants"] == USERS

        # release while the server is down, kill the shuffler mid-forwarding, restart both
        stack.kill("server")
        answer = stack.release("crash", 1, wait=False)
        assert answer["messages"] == USERS and answer["chunks"] == 5
        # forwarding fails and backs off: poll until the round status says why
        deadline = time.monotonic() + 30
        status = _participants(stack, 1)
        while "server unreachable" not in str(status["last_error"]):
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
            status = _participants(stack, 1)
        assert status["state"] == "releasing"
        stack.kill("shuffler")
        stack.start_service("server")
        stack.start_service("shuffler")  # resumes the release on startup
        deadline = time.monotonic() + 60
        while _participants(stack, 1)["state"] != "released":
            assert time.monotonic() < deadline, "the resumed release did not finish"
            time.sleep(0.2)
        assert stack.campaign("crash").phase == "round2"

        # round 2: the server dies between the two halves
        run_rounds(population, 2, indices=first)
        stack.kill("server")
        stack.start_service("server")
        run_rounds(population, 2, indices=second)
        assert _participants(stack, 2)["participants"] == USERS
        stack.release("crash", 2)

        results = stack.results("crash")
        parameters = stack.campaign("crash").parameters
        assert parameters is not None
        assert results.privacy.users == USERS and results.privacy.round2_users == USERS
        assert [lv.users_round1 for lv in results.privacy.levels] == \
            population.sent_level_counts(2, 1).tolist()
        assert [lv.users_round2 for lv in results.privacy.levels] == \
            population.sent_level_counts(2, 2).tolist()
        expected = population.sent_item_counts(parameters.privacy_domain_size)
        assert decoded_counts(results, parameters).tolist() == expected.tolist()
        assert results.dropped_messages == 0
        log = stack.log_path("shuffler").read_text()
        assert "resuming release: campaign=crash round=1" in log

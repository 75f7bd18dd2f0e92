"""Round completion over real processes: computed once, off the request path, on a busy
host and across a server killed while it computes round 2's parameters."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest

from segshuffle.testing.localstack import LocalStack, harness_seconds
from segshuffle.testing.population import Population

from .test_e2e_support import decoded_counts, run_rounds

pytestmark = pytest.mark.slow  # real service processes end to end

ITEMS = 12


def _status(stack: LocalStack, campaign_id: str, round_number: int) -> dict[str, object]:
    url = f"{stack.shuffler_url}/v1/campaigns/{campaign_id}/rounds/{round_number}"
    return dict(httpx.get(url, timeout=30).json())


def _population(stack: LocalStack, campaign_id: str, users: int, seed: int, *,
                items: int = ITEMS, set_size: int = 2,
                levels: tuple[float, ...] = (1.0, 2.0)) -> Population:
    rng = np.random.default_rng(seed)
    sets = [list(rng.choice(items, size=set_size, replace=False)) for _ in range(users)]
    stack.create_campaign({"id": campaign_id, "domain_size": items, "set_size": set_size,
                           "levels": list(levels), "min_users": 20})
    return Population.with_shares(stack.shuffler_url, campaign_id, sets,
                                  [1.0 / len(levels)] * len(levels), seed=seed,
                                  server_key=stack.server_key,
                                  invitations=stack.invitations(campaign_id, users))


def _computations(stack: LocalStack) -> dict[str, float]:
    """completion_computations_total per round, from the server's /metrics."""
    text = httpx.get(f"{stack.server_url}/metrics", timeout=30).text
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r'completion_computations_total\{round="(\d)"\} ([0-9.e+]+)', text)}


def _check_exact(stack: LocalStack, population: Population, campaign_id: str,
                 users: int) -> None:
    results = stack.results(campaign_id)
    parameters = stack.campaign(campaign_id).parameters
    assert parameters is not None
    assert results.privacy.users == users and results.privacy.round2_users == users
    expected = population.sent_item_counts(parameters.privacy_domain_size)
    assert decoded_counts(results, parameters).tolist() == expected.tolist()


@contextmanager
def _busy_cores(count: int, seconds: float) -> Iterator[None]:
    """``count`` CPU-bound processes beside the services (a shared host), each ending by
    itself after ``seconds`` and killed when the block ends."""
    burn = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(count)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait(timeout=30)


def test_a_campaign_completes_on_a_busy_host_computing_each_round_once(tmp_path: Path
                                                                        ) -> None:
    users = 200
    with _busy_cores(2, harness_seconds("release", 1800.0)), \
            LocalStack(tmp_path, min_users=10) as stack:
        population = _population(stack, "busy", users, seed=3)
        run_rounds(population, 1)
        stack.release("busy", 1)
        run_rounds(population, 2)
        stack.release("busy", 2)
        _check_exact(stack, population, "busy", users)
        assert _computations(stack) == {"1": 1.0, "2": 1.0}


def _server_computing(stack: LocalStack, campaign: str, status: dict[str, object]) -> bool:
    """Whether round 1's first completion attempt has begun: the server's log says so, or
    the shuffler's status reports the server optimizing."""
    if "the server is optimizing" in str(status["last_error"]):
        return True
    log = stack.log_path("server")
    return log.exists() and (f"completing campaign {campaign} round 1 (attempt 1)"
                             in log.read_text(errors="replace"))


def test_a_server_killed_while_it_computes_the_parameters_completes_after_restart(
        tmp_path: Path) -> None:
    users = 120
    with LocalStack(tmp_path, min_users=10) as stack:
        # A campaign whose parameters take the optimizer seconds (2 to 6 CPU-s: d = 64,
        # s = 4, three levels).  The server is killed once it is seen computing: in its
        # log, where the completion worker writes the attempt as it begins (watched every
        # 50 ms), or in the shuffler's round status, which asks it only every 2 s (on a
        # fast host the optimizer can finish between two of those asks).
        population = _population(stack, "killed", users, seed=4, items=64, set_size=4,
                                 levels=(0.5, 1.0, 2.0))
        run_rounds(population, 1)
        stack.release("killed", 1, wait=False)
        deadline = time.monotonic() + harness_seconds("release", 1800.0)
        while not _server_computing(stack, "killed", status := _status(stack, "killed", 1)):
            assert time.monotonic() < deadline, status
            assert status["state"] != "released", ("the optimizer finished before it was "
                                                   f"seen running: {status}")
            time.sleep(0.05)
        stack.kill("server")  # SIGKILL while the optimizer runs
        stack.start_service("server")
        while _status(stack, "killed", 1)["state"] != "released":
            assert time.monotonic() < deadline, _status(stack, "killed", 1)
            time.sleep(0.2)
        assert stack.campaign("killed").phase == "round2"
        log = stack.log_path("server").read_text()
        attempts = re.findall(r"completing campaign killed round 1 \(attempt (\d+)\)", log)
        assert attempts == ["1", "2"], attempts  # computed once more, not again and again
        run_rounds(population, 2)
        stack.release("killed", 2)
        _check_exact(stack, population, "killed", users)

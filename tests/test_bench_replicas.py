"""benchmarks/bench_replicas.py tells whether the replicas shared the load: each replica's
share of its service's CPU and requests, and a failure when one took more than 60%.

Fast: the pure parts of the script, and its argument checks (the run itself needs the
compose profile ``scale``; deploy/README.md, "Toward a million users per round").
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_replicas.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_replicas", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# CPU seconds per container of a 100,000-user run whose balancer hashed the client address
HASHED = {"shuffler-1": 215.8, "shuffler-2": 9.6, "postgres": 145.0, "lb": 37.0,
          "server-1": 30.0, "server-2": 30.0}


def test_each_replica_gets_its_share_of_its_service(bench: ModuleType) -> None:
    shares = bench.replica_shares(HASHED)
    assert set(shares) == {"shuffler", "server"}  # postgres and lb have no replicas
    assert shares["shuffler"]["shuffler-1"] == pytest.approx(215.8 / 225.4)
    assert shares["server"] == {"server-1": 0.5, "server-2": 0.5}
    # a replica whose count could not be read: no shares for its service
    assert bench.replica_shares({"shuffler-1": 10.0, "shuffler-2": None}) == {}
    assert bench.replica_shares({"shuffler-1": 0.0, "shuffler-2": 0.0}) == {}


def test_a_replica_above_sixty_percent_is_named(bench: ModuleType) -> None:
    shares = {"cpu": bench.replica_shares(HASHED),
              "requests": bench.replica_shares({"shuffler-1": 590.0, "shuffler-2": 410.0})}
    assert bench.unshared(shares, bench.MAX_SHARE) == [
        "shuffler-1 took 96% of the shufflers' CPU"]
    shared = {"cpu": bench.replica_shares({"shuffler-1": 110.0, "shuffler-2": 100.0}),
              "requests": shares["requests"]}
    assert bench.unshared(shared, bench.MAX_SHARE) == []
    assert bench.unshared(shared, 0.55) == ["shuffler-1 took 59% of the shufflers' requests"]


def test_request_counts_are_the_differences_over_the_run(bench: ModuleType) -> None:
    assert bench.differences({"shuffler-1": 50.0, "shuffler-2": 7.0},
                             {"shuffler-1": 10.0, "shuffler-2": None}) == {
        "shuffler-1": 40.0, "shuffler-2": None}
    route = "/v1/campaigns/{campaign_id}/rounds/{round_number}/submissions"
    metrics = (
        '# TYPE segshuffle_http_requests_total counter\n'
        'segshuffle_http_requests_total{method="GET",route="/readyz",status="200"} 3.0\n'
        'segshuffle_http_requests_total{method="GET",route="/metrics",status="200"} 2.0\n'
        f'segshuffle_http_requests_total{{method="POST",route="{route}",status="201"}} 4914.0\n'
        f'segshuffle_http_requests_created{{method="POST",route="{route}"}} 1.79e+09\n'
        'segshuffle_http_requests_total{method="GET",route="/v1/campaigns/{campaign_id}",'
        'status="200"} 1e+01\n')
    assert bench.answered(metrics) == 4924.0  # the health checks and metrics reads left out


@pytest.mark.parametrize("arguments", [["--users", "5"], ["--max-share", "0"],
                                       ["--env-file", "/nonexistent/.env"]])
def test_bad_arguments_exit_2_with_one_line(arguments: list[str]) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1].startswith("bench_replicas.py: error: ")

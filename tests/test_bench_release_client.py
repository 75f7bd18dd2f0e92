"""The release and client benchmarks end to end at a tiny size, one JSON line each."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str, *args: str, timeout: float = 300) -> dict[str, object]:
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), *args, "--json"],
                            capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.splitlines()) == 1
    return json.loads(result.stdout)


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_the_release_benchmark_releases_every_message() -> None:
    report = _run("bench_release.py", "--users", "300", "--messages-per-user", "3",
                  "--chunk-size", "100")
    assert report["messages"] == 300 * 4  # three data messages and a level each
    for key in ("release_cpu_s", "key_order_read_cpu_s", "release_cpu_us_per_message"):
        assert _positive(report[key]), key


@pytest.mark.slow
def test_the_client_benchmark_counts_the_floor_of_both_rounds() -> None:
    report = _run("bench_client.py", "--users", "30", "--concurrency", "8", timeout=600)
    (run,) = report["runs"]
    assert run["round1"]["seals_per_user"] == 1  # its level
    assert run["round2"]["seals_per_user"] >= 3  # its level and s = 2 items at least
    assert run["round1"]["signature_checks_per_user"] >= 1
    for key in ("seal_cpu_ms", "signature_check_cpu_ms", "client_cpu_ms_per_user",
                "floor_cpu_ms_per_user"):
        assert _positive(run[key]), key
    assert run["ratio"] == pytest.approx(
        run["client_cpu_ms_per_user"] / run["floor_cpu_ms_per_user"])
    assert report["ratio_median"] == run["ratio"] and run["ratio"] > 1

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


def test_the_release_benchmark_measures_each_size_with_repeats() -> None:
    """Every size is filled and released for real (none extrapolated), each release
    repeated beside its key-order read; the report has per-message cost at each size
    and its ratio between the largest and the smallest."""
    report = _run("bench_release.py", "--users", "300,600", "--messages-per-user", "3",
                  "--chunk-size", "100", "--repeats", "2")
    small, large = report["runs"]
    assert (small["users"], large["users"]) == (300, 600)
    assert small["messages"] == 300 * 4 and large["messages"] == 600 * 4  # 3 data + 1 level
    for run in (small, large):
        assert run["repeats"] == 2 and len(run["release_cpu_s_each"]) == 2
        for key in ("release_cpu_s", "key_order_read_cpu_s", "release_cpu_us_per_message",
                    "release_cpu_vs_key_order_read"):
            assert _positive(run[key]), key
        # CPU-s rounded to 3 decimals: off by at most half a millisecond, exactly half where
        # the time ends in 5 (widened by 1e-9 relative for the division's own rounding).
        assert run["release_cpu_us_per_message"] == pytest.approx(
            1e6 * run["release_cpu_s"] / run["messages"],
            abs=1e6 * 5e-4 / run["messages"] * (1.0 + 1e-9))
    assert report["per_message_ratio"] == pytest.approx(
        large["release_cpu_us_per_message"] / small["release_cpu_us_per_message"], abs=2e-3)


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

"""The service benchmark end to end at a tiny size: both services, the bare app, --json."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from .postgres_support import server_url

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_services.py"
HEADLINE = ("shuffler_cpu_ms_per_submission", "server_cpu_ms_per_get", "bare_cpu_ms_per_request")


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.mark.slow
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_tiny_run_prints_one_json_object_with_positive_figures(database: str) -> None:
    extra = [] if database == "sqlite" else ["--postgres-url", server_url()]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--users", "60", "--concurrency", "8",
         "--seal-workers", "2", "--databases", database, "--json", *extra],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.splitlines()) == 1  # one line, for scripts
    report = json.loads(result.stdout)
    for key in (*HEADLINE, "bare_stored_cpu_ms_per_request"):
        assert _positive(report[key]), (key, report[key])
    assert _positive(report["shuffler_rate_vs_bare"])
    assert _positive(report["shuffler_rate_vs_bare_stored"])
    assert report["users"] == 60 and report["database"] == database
    phases = report["phases"]
    assert set(phases) == {"enroll", "round1", "round2", "server_get", "bare_get",
                           "bare_post", "bare_stored"}
    assert phases["round1"]["requests"] == phases["round2"]["requests"] == 60
    for phase in phases.values():
        assert _positive(phase["requests_per_s"])
        assert _positive(phase["p50_ms"]) and phase["p95_ms"] >= phase["p50_ms"]
    assert _positive(phases["round2"]["cpu_ms_per_request"]["shuffler"])
    assert _positive(phases["server_get"]["cpu_ms_per_request"]["server"])
    assert set(report["releases"]) == {"release1", "release2"}
    if database == "postgresql":  # the local server's processes are metered as well
        for key in ("database_cpu_ms_per_submission", "database_cpu_ms_per_enrollment",
                    "bare_stored_database_cpu_ms_per_request"):
            assert math.isfinite(report[key]) and report[key] >= 0, (key, report[key])
        assert "database" in phases["bare_stored"]["cpu_ms_per_request"]
    else:
        assert "database_cpu_ms_per_submission" not in report
    assert "[bench]" in result.stderr  # progress goes to stderr, stdout holds the JSON only


def test_flatness_compares_largest_and_smallest_user_counts() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_services
    finally:
        sys.path.remove(str(SCRIPT.parent))
    results = {("sqlite", n): {"shuffler_cpu_ms_per_submission": cost,
                               "server_cpu_ms_per_get": 0.5}
               for n, cost in ((1000, 1.0), (5000, 9.0), (10000, 1.5))}
    flat = bench_services.flatness(results)
    assert flat["sqlite"]["submission_cost_ratio"] == pytest.approx(1.5)
    assert flat["sqlite"]["get_cost_ratio"] == pytest.approx(1.0)
    assert bench_services.flatness({("sqlite", 10): results[("sqlite", 1000)]}) == {}


def test_a_shuffler_setting_becomes_its_environment_variable() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_services
    finally:
        sys.path.remove(str(SCRIPT.parent))
    args = bench_services.parse_args(["--shuffler-setting", "synchronous=FULL",
                                      "--shuffler-setting", " chunk_size =100"])
    assert args.shuffler_setting == [("SEGSHUFFLE_SHUFFLER_SYNCHRONOUS", "FULL"),
                                     ("SEGSHUFFLE_SHUFFLER_CHUNK_SIZE", "100")]
    with pytest.raises(SystemExit):
        bench_services.parse_args(["--shuffler-setting", "synchronous"])

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


class _RecordingSenders:
    """Senders that answer 201 at once and record which port each batch went to."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.batches: list[tuple[int, list[bytes]]] = []

    def load(self, port: int, requests: list[bytes], *, keep_bodies: bool = False) -> None:
        self.batches.append((port, list(requests)))

    def go(self, total: int) -> object:
        sys.path.insert(0, str(SCRIPT.parent))
        try:
            from loadgen import BatchResult
        finally:
            sys.path.remove(str(SCRIPT.parent))
        return BatchResult(latencies=[0.001] * total, statuses={201: total})


def test_the_bare_baselines_are_measured_slice_by_slice_beside_the_rounds() -> None:
    """A baseline measured minutes after the rounds compared them with a machine in
    another state: each round slice is now followed by the bare POSTs of the same bodies
    (cycled to a measurable slice), one slice of each baseline phase."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_services
    finally:
        sys.path.remove(str(SCRIPT.parent))
    senders = _RecordingSenders()
    meter = bench_services.Meter({}, senders)
    size = 2 * bench_services.MIN_SLICE
    submissions = [b"submission %d" % i for i in range(size)]
    plain = [b"post %d" % i for i in range(size)]
    stored = [b"stored %d" % i for i in range(size)]
    bare_post, bare_stored = bench_services.Phase("bare_post"), bench_services.Phase("b")
    phase, _ = meter.run("round1", 1, submissions, 2, companions=[
        bench_services.Companion(bare_post, 2, plain),
        bench_services.Companion(bare_stored, 3, stored)])
    half = bench_services.MIN_SLICE
    assert [(port, batch[0], len(batch)) for port, batch in senders.batches] == [
        (1, submissions[0], half), (2, plain[0], half), (3, stored[0], half),
        (1, submissions[half], half), (2, plain[half], half), (3, stored[half], half)]
    assert phase.slice_sizes == bare_post.slice_sizes == bare_stored.slice_sizes == [half] * 2
    # a round slice smaller than a measurable one: its bodies repeat
    senders.batches.clear()
    meter.run("round2", 1, submissions[:10], 5,
              companions=[bench_services.Companion(bare_post, 2, plain[:10])])
    assert [(port, len(batch)) for port, batch in senders.batches] == [(1, 10), (2, half)]
    assert senders.batches[1][1][:12] == plain[:10] + plain[:2]

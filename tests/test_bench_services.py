"""The service benchmark end to end at a tiny size: both services, the bare app, --json."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType

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
                           "bare_post", "bare_stored", "raw_post", "raw_stored"}
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


def _bench_services() -> ModuleType:
    """The benchmark module, imported from its directory."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_services
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return bench_services


@pytest.mark.slow
def test_the_report_sets_the_submission_against_raw_asgi_and_fastapi_baselines() -> None:
    """The shuffler's user routes bypass FastAPI's router, so a FastAPI route is not the
    floor of the stack they run on: the report has a raw-ASGI POST and a raw-ASGI storing
    POST beside the FastAPI pair, each measured slice by slice with the rounds, and the
    shuffler's cost over each, in JSON and in the printed table."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--users", "40", "--concurrency", "8",
         "--seal-workers", "2", "--databases", "sqlite"],
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    for title in ("raw-ASGI POST", "raw-ASGI storing POST", "FastAPI POST",
                  "FastAPI storing POST"):
        line = next((line for line in result.stdout.splitlines()
                     if line.strip().startswith(title + " ")), None)
        assert line is not None, (title, result.stdout)
        cost, ratio, rate = line.split()[-3:]
        assert float(cost) > 0 and ratio.endswith("x") and float(ratio[:-1]) > 0
        assert float(rate) == pytest.approx(1 / float(ratio[:-1]), rel=0.02, abs=0.002)


def test_each_baseline_reports_the_shuffler_cost_over_it() -> None:
    bench_services = _bench_services()
    assert set(bench_services.BASELINES) == {"raw_post", "raw_stored", "bare_post",
                                             "bare_stored"}
    phases = {}
    for name, cost in (("raw_post", 0.08), ("raw_stored", 0.1), ("bare_post", 0.16),
                       ("bare_stored", 0.2)):
        phase = bench_services.Phase(name)
        phase.slice_sizes = [2000, 2000]
        phase.slice_cpu = {"bare": [2.0 * cost, 2.0 * cost]}
        phases[name] = phase
    figures = bench_services.baseline_figures(phases, shuffler=0.4)
    assert figures["raw_post"] == pytest.approx({"cpu_ms_per_request": 0.08,
                                                 "shuffler_cost_ratio": 5.0})
    assert figures["bare_post"]["shuffler_cost_ratio"] == pytest.approx(2.5)
    assert figures["raw_stored"]["shuffler_cost_ratio"] == pytest.approx(4.0)
    assert figures["bare_stored"]["shuffler_cost_ratio"] == pytest.approx(2.0)


def test_slices_below_the_clock_resolution_pool_their_ticks() -> None:
    """A small campaign's submission slices (tens of requests) can each read 0 or 1 tick
    of 10 ms: the median of such slices was 0 and the report divided by it. The figure
    is then the pooled one, all the slices' CPU over all their requests."""
    bench_services = _bench_services()
    phase = bench_services.Phase("submissions")
    phase.slice_sizes = [20, 20, 20, 20]
    phase.slice_cpu = {"shuffler": [0.0, 0.01, 0.0, 0.0]}
    assert phase.cpu_ms_per_request("shuffler") == pytest.approx(10.0 / 80)
    phase.slice_cpu = {"shuffler": [0.01, 0.02, 0.0, 0.01]}
    assert phase.cpu_ms_per_request("shuffler") == pytest.approx(0.5)
    phase.slice_cpu = {"shuffler": [0.0] * 4}
    assert phase.cpu_ms_per_request("shuffler") == 0.0
    assert math.isnan(bench_services.Phase("empty").cpu_ms_per_request("shuffler"))


def _bare_app() -> ModuleType:
    """The bare app's module, imported from its directory."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bare_app
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return bare_app


async def _post(app: object, path: str, body: bytes) -> tuple[int, bytes]:
    """One ASGI POST of ``body`` (in two parts) to ``app``: (status, answer)."""
    parts = [{"type": "http.request", "body": body[:3], "more_body": True},
             {"type": "http.request", "body": body[3:], "more_body": False}]
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return parts.pop(0) if parts else {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "server": ("bench", 80), "client": None,
             "headers": [(b"content-type", b"application/json")]}
    await app(scope, receive, send)  # type: ignore[operator]
    return int(sent[0]["status"]), b"".join(m.get("body", b"") for m in sent[1:])


def test_the_raw_routes_parse_and_store_a_body_without_the_framework(tmp_path: Path) -> None:
    """The raw-ASGI POSTs answer ahead of FastAPI (which never sees them), parse the
    body, and the storing one appends it as one row; other paths go to FastAPI."""
    import asyncio

    bare_app = _bare_app()
    sink = bare_app.SQLiteSink(str(tmp_path / "bare.sqlite3"))
    seen: list[str] = []
    fastapi_app = bare_app.create_app(64, sink)

    async def framework(scope: dict[str, object], receive: object, send: object) -> None:
        seen.append(str(scope["path"]))
        await fastapi_app(scope, receive, send)  # type: ignore[arg-type]

    app = bare_app.RawRoutes(framework, sink)

    async def scenario() -> list[tuple[int, bytes]]:
        return [await _post(app, bare_app.RAW_SUBMIT, b'{"levels": ["x"]}'),
                await _post(app, bare_app.RAW_SUBMIT_STORED, b'{"data": [1, 2]}'),
                await _post(app, bare_app.RAW_SUBMIT, b"not json"),
                await _post(app, "/submit", b'{"levels": []}')]

    answers = asyncio.run(scenario())
    assert answers[0] == (201, b'{"accepted":true}')
    assert answers[1] == (201, b'{"accepted":true}')
    assert answers[2][0] == 400
    assert answers[3][0] == 201
    assert seen == ["/submit"]  # the raw routes never reached the framework
    rows = sink.db.execute("SELECT body FROM bodies").fetchall()
    assert rows == [(b'{"data": [1, 2]}',)]
    sink.db.close()

"""The load test's plumbing (loadtest/harness.py): target checks, tokens, statistics."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from segshuffle.client.retry import RetryPolicy

LOADTEST = Path(__file__).resolve().parents[1] / "loadtest"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"loadtest_{name}", LOADTEST / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


harness = _load("harness")


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8081", "http://127.0.0.1:8081/", "http://localhost:8080",
    "http://[::1]:8080", "http://127.0.0.5:1",
])
def test_loopback_targets_are_accepted(url: str) -> None:
    assert harness.check_target(url) == url.rstrip("/")


@pytest.mark.parametrize("url", [
    "http://10.1.2.3:8080", "http://192.168.0.1", "http://8.8.8.8:80", "http://[2001:db8::1]/",
])
def test_other_targets_are_refused(url: str) -> None:
    with pytest.raises(harness.TargetError, match="not a loopback address"):
        harness.check_target(url)


def test_private_targets_need_the_explicit_flag() -> None:
    assert harness.check_target("http://10.1.2.3:8080", allow_private=True)
    assert harness.check_target("http://172.18.0.2:8080/", allow_private=True)
    with pytest.raises(harness.TargetError, match="not a loopback or private address"):
        harness.check_target("http://8.8.8.8", allow_private=True)


@pytest.mark.parametrize("url", [
    "ftp://127.0.0.1/", "127.0.0.1:8080", "http://user:pw@127.0.0.1/", "http://127.0.0.1/?a=1",
    "http://127.0.0.1:99999/",
])
def test_malformed_targets_are_refused(url: str) -> None:
    with pytest.raises(harness.TargetError):
        harness.check_target(url)


def test_tokens_come_from_flag_then_environment_then_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / "deploy.env"
    env_file.write_text("# comment\nSEGSHUFFLE_ADMIN_TOKEN=from-file\n\n"
                        "SEGSHUFFLE_OPERATOR_TOKEN='quoted'\n")
    assert harness.resolve_token("admin", "flag", env_file, {}) == "flag"
    assert harness.resolve_token("admin", None, env_file,
                                 {"SEGSHUFFLE_SERVER_ADMIN_TOKEN": "env"}) == "env"
    assert harness.resolve_token("admin", None, env_file, {}) == "from-file"
    assert harness.resolve_token("operator", None, env_file, {}) == "quoted"
    with pytest.raises(ValueError, match="--admin-token"):
        harness.resolve_token("admin", None, tmp_path / "missing.env", {})


def test_users_are_invited_with_the_issuer_key(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from segshuffle.crypto.invitations import (
        generate_issuer_key,
        issuer_key_pem,
        parse_public_keys,
        public_key_text,
        verify_invitation,
    )
    from segshuffle.wire.models import b64url_encode

    loadtest = _load("loadtest")
    key = generate_issuer_key()
    seed = b64url_encode(key.private_bytes_raw())
    env_file = tmp_path / "deploy.env"
    env_file.write_text(f"SEGSHUFFLE_ADMIN_TOKEN=a\nSEGSHUFFLE_OPERATOR_TOKEN=o\n"
                        f"SEGSHUFFLE_ISSUER_PRIVATE_KEY={seed}\n")
    monkeypatch.delenv("SEGSHUFFLE_ISSUER_PRIVATE_KEY", raising=False)
    args, _ = loadtest.parse_args(["--env-file", str(env_file)])
    assert public_key_text(args.issuer) == public_key_text(key)
    pem = tmp_path / "issuer.pem"
    pem.write_bytes(issuer_key_pem(key))
    args, _ = loadtest.parse_args(["--env-file", str(env_file), "--issuer-key", str(pem)])
    invited = loadtest.invitations(args.issuer, "load-1", 3, 60.0)
    assert len(set(invited)) == 3
    for text in invited:
        verify_invitation(text, parse_public_keys(public_key_text(key)), "load-1", time.time())
    args, _ = loadtest.parse_args(["--env-file", str(env_file), "--no-invitations"])
    assert args.issuer is None and loadtest.invitations(None, "load-1", 3, 60.0) is None
    env_file.write_text("SEGSHUFFLE_ADMIN_TOKEN=a\nSEGSHUFFLE_OPERATOR_TOKEN=o\n")
    with pytest.raises(SystemExit):
        loadtest.parse_args(["--env-file", str(env_file)])


def test_env_file_syntax_errors_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.env"
    bad.write_text("A=1\nnot a pair\n")
    with pytest.raises(ValueError, match=r"bad.env:2"):
        harness.read_env_file(bad)


def test_percentile_interpolates_order_statistics() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert harness.percentile(values, 50) == 3.0
    assert harness.percentile(values, 0) == 1.0
    assert harness.percentile(values, 100) == 5.0
    assert harness.percentile(values, 95) == pytest.approx(4.8)
    assert harness.percentile(list(range(101)), 95) == pytest.approx(95.0)
    assert math.isnan(harness.percentile([], 50))
    with pytest.raises(ValueError):
        harness.percentile(values, 101)


def test_summary_takes_medians_over_repeats_and_skips_missing() -> None:
    metrics = [harness.Metric("a", "A", "s"), harness.Metric("b", "B", "1/s", 0),
               harness.Metric("c", "C", "s")]
    runs = [{"a": 1.0, "b": 10.0}, {"a": 3.0, "b": 30.0}, {"a": 2.0, "b": math.nan}]
    rows = harness.summarize(runs, metrics)
    assert [row["key"] for row in rows] == ["a", "b"]
    assert rows[0]["median"] == 2.0 and rows[0]["min"] == 1.0 and rows[0]["max"] == 3.0
    assert rows[1]["median"] == 20.0 and rows[1]["repeats"] == 2
    table = harness.format_table(rows)
    assert "A" in table and "2.0" in table and "20" in table


# --- the driver --------------------------------------------------------------------------


@pytest.mark.parametrize(("flags", "message"), [
    (["--users", "5"], "--users must lie in"),
    (["--users", "1000001"], "--users must lie in"),
    (["--repeats", "0"], "--repeats must lie in"),
    (["--levels", "1,2", "--shares", "1"], "one share per level"),
    (["--levels", "1,x"], "comma-separated numbers"),
    (["--server-url", "http://8.8.8.8:8080"], "not a loopback address"),
    (["--release-timeout", "0"], "timeouts must be positive"),
    (["--source-addresses", "0"], "--source-addresses must lie in"),
    (["--source-addresses", "70000"], "--source-addresses must lie in"),
])
def test_driver_refuses_bad_arguments(flags: list[str], message: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(LOADTEST / "loadtest.py"), "--admin-token", "a",
         "--operator-token", "o", *flags], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_driver_needs_tokens(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_TOKEN")}
    result = subprocess.run(
        [sys.executable, str(LOADTEST / "loadtest.py"), "--env-file", str(tmp_path / "none")],
        capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert "no admin token" in result.stderr


@pytest.mark.slow
def test_local_services_run_both_rounds_end_to_end() -> None:
    """Real `segshuffle serve` processes on loopback, 60 users through both rounds."""
    result = subprocess.run(
        [str(LOADTEST / "local-services.sh"), "--users", "60", "--repeats", "2", "--json",
         "--seed", "3", "--concurrency", "16", "--max-seconds", "240",
         "--source-addresses", "8"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert len(report["runs"]) == 2 and len(set(report["campaigns"])) == 2
    for run in report["runs"]:
        assert run["round1_submissions_per_s"] > 0 and run["round2_submissions_per_s"] > 0
        assert 0 < run["round1_p50_ms"] <= run["round1_p95_ms"]
        assert 0 < run["release1_seconds"] <= run["phase2_seconds"] + 1e-3
        assert run["round1_client_cpu_ms"] > 0
        assert run["mse"] < 0.2  # 60 users: only that the decoded estimates are sane
    for key, median in report["medians"].items():
        values = sorted(run[key] for run in report["runs"])
        assert median == pytest.approx((values[0] + values[1]) / 2)
    assert "both services ready" in result.stderr


def test_the_load_tests_release_is_retried_while_it_fails_transiently(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A release is idempotent: the load test asks again after a balancer's 502 (a shuffler
    replica killed under the request) or a dropped connection, never after a refusal."""
    sys.path.insert(0, str(LOADTEST))
    try:
        loadtest = _load("loadtest")
    finally:
        sys.path.remove(str(LOADTEST))
    monkeypatch.setattr(loadtest, "RELEASE_RETRY",
                        RetryPolicy(attempts=5, initial=0.01, maximum=0.02), raising=False)

    def run(answers: list[int | None]) -> tuple[object, int]:
        calls = []

        def handle(request: httpx.Request) -> httpx.Response:
            calls.append(request)
            status = answers.pop(0)
            if status is None:
                raise httpx.ConnectError("connection reset", request=request)
            return httpx.Response(status, text="<html>Bad Gateway</html>")

        async def main() -> object:
            async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as http:
                try:
                    return await loadtest._release(http, "http://shuffler", "c", 1, "op", 30.0)
                except loadtest.LoadTestError as exc:
                    return exc

        return asyncio.run(main()), len(calls)

    seconds, tries = run([502, None, 200])
    assert isinstance(seconds, float) and tries == 3
    refused, tries = run([502, 403])
    assert isinstance(refused, loadtest.LoadTestError) and tries == 2
    assert "HTTP 403" in str(refused)
    exhausted, tries = run([503] * 5)
    assert isinstance(exhausted, loadtest.LoadTestError) and tries == 5

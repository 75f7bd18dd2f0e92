"""``segshuffle demo`` as a user runs it: real processes, JSON report, clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest


def _demo(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "segshuffle.cli.main", "demo", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={k: v for k, v in os.environ.items()
                               if not k.startswith("SEGSHUFFLE_")})


def _children_gone(before: set[int]) -> bool:
    """No segshuffle service process started by the demo is left running."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    alive = {int(line.split()[0]) for line in out.splitlines()[1:]
             if "segshuffle.cli.main serve" in line}
    return not (alive - before)


def _services() -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return {int(line.split()[0]) for line in out.splitlines()[1:]
            if "segshuffle.cli.main serve" in line}


@pytest.mark.parametrize("dataset,users", [("synthetic", 200), ("msnbc", 150)])
def test_demo_json_report(dataset: str, users: int) -> None:
    before = _services()
    result = _demo("--users", str(users), "--dataset", dataset, "--seed", "7", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    for key in ("users", "m", "lambdas", "estimates", "truth", "mse", "mse_bound", "seconds",
                "timings", "standard_errors", "epsilons"):
        assert key in report, key
    assert report["users"] == users
    d = report["privacy_domain_size"]
    assert len(report["estimates"]) == len(report["truth"]) == d
    assert len(report["lambdas"]) == len(report["levels"]) == 3
    assert abs(sum(report["truth"]) - report["set_size"]) < 1e-9
    within = sum(abs(e - t) <= 4 * se for e, t, se in
                 zip(report["estimates"], report["truth"], report["standard_errors"],
                     strict=True))
    assert within == d
    assert report["mse"] >= 0 and report["mse_bound"] > 0
    assert {"round1_users", "round1_release", "round2_users", "round2_release"} <= \
        set(report["timings"])
    if dataset == "msnbc":
        assert report["items"][:2] == ["frontpage", "news"]
    assert "round 1:" in result.stderr  # progress lines
    assert _children_gone(before)


def test_demo_human_summary() -> None:
    result = _demo("--users", "60", "--top", "3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "top 3 items" in result.stdout
    assert "MSE (sum over the domain)" in result.stdout


def test_demo_bad_arguments_fail_in_one_line() -> None:
    result = _demo("--users", "1")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "error" in result.stderr
    result = _demo("--shares", "0.5,0.6")
    assert result.returncode == 2 and "shares" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_demo_interrupted_shuts_everything_down(sig: int) -> None:
    before = _services()
    process = subprocess.Popen(
        [sys.executable, "-m", "segshuffle.cli.main", "demo", "--users", "3000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")})
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    for line in process.stderr:  # wait until users are being simulated
        if line.startswith("round 1:") or time.monotonic() > deadline:
            break
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-2000:]
    assert "interrupted" in err
    assert _children_gone(before)

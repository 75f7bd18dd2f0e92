"""``segshuffle demo`` as a user runs it: real processes, JSON report, clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real service processes end to end


def _demo_environment(marker: str) -> dict[str, str]:
    """The caller's environment without SEGSHUFFLE_* settings, plus a marker that the
    demo's service processes inherit, so they can be told apart from services other
    tests (in other workers) run at the same time."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    environment["DEMO_TEST_MARKER"] = marker
    return environment


def _demo(*args: str, marker: str = "", timeout: float = 120
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "segshuffle.cli.main", "demo", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=_demo_environment(marker or uuid.uuid4().hex))


def _marked_processes(marker: str) -> list[int]:
    """Live processes whose environment carries ``DEMO_TEST_MARKER=marker``."""
    needle = f"DEMO_TEST_MARKER={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if needle in environment.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def _children_gone(marker: str, timeout: float = 10.0) -> bool:
    """No process started by the demo (its services) is left running."""
    deadline = time.monotonic() + timeout
    while _marked_processes(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.parametrize("dataset,users", [("synthetic", 200), ("msnbc", 150)])
def test_demo_json_report(dataset: str, users: int) -> None:
    marker = uuid.uuid4().hex
    result = _demo("--users", str(users), "--dataset", dataset, "--seed", "7", "--json",
                   marker=marker)
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
    assert _children_gone(marker)


def test_demo_independent_blanket_mode() -> None:
    """The campaign the demo creates uses the mode asked for: one blanket slot per item
    of the privacy domain, s + D data messages per user, estimates within their errors."""
    marker = uuid.uuid4().hex
    result = _demo("--users", "100", "--dataset", "msnbc", "--blanket-mode", "independent",
                   "--seed", "3", "--json", marker=marker)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    d = report["privacy_domain_size"]
    assert report["blanket_mode"] == "independent"
    assert report["messages_per_user"] == report["set_size"] + d
    assert 0 < report["m"] <= d
    assert all(e is not None and e <= level * (1 + 1e-6)
               for e, level in zip(report["epsilons"], report["levels"], strict=True))
    assert all(abs(e - t) <= 4 * se for e, t, se in
               zip(report["estimates"], report["truth"], report["standard_errors"],
                   strict=True))
    assert _children_gone(marker)
    result = _demo("--blanket-mode", "uniform")
    assert result.returncode == 2 and "blanket-mode" in result.stderr


def test_demo_with_a_dropout_tolerance_the_parties_agree_on_n_min() -> None:
    """tau = 0.45 of 100 users: server, shuffler and clients all count n_min = 55 (one
    computed 55 and the others 56 before, and every client refused round 2)."""
    marker = uuid.uuid4().hex
    result = _demo("--users", "100", "--dropout-tolerance", "0.45", "--json", marker=marker)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["accounting_users"] == 55
    assert _children_gone(marker)


def test_demo_human_summary() -> None:
    result = _demo("--users", "60", "--top", "3", "--dataset", "msnbc")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "top 3 items" in result.stdout
    assert "(slots blanket, " in result.stdout  # the default mode
    top, padding = result.stdout.split("top 3 items")[1].split("padding items, reported apart")
    assert "padding" not in top
    assert "a set smaller than s" in padding and "noise" in padding  # why they are not 0
    assert sum(line.startswith("  padding") for line in padding.splitlines()) == 4  # s
    assert "MSE (sum over the domain)" in result.stdout


def test_demo_bad_arguments_fail_in_one_line() -> None:
    result = _demo("--users", "1")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "error" in result.stderr
    result = _demo("--shares", "0.5,0.6")
    assert result.returncode == 2 and "shares" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_demo_interrupted_shuts_everything_down(sig: int) -> None:
    marker = uuid.uuid4().hex
    # A runner started in the background may ignore SIGINT, and the child would inherit
    # that (Python then installs no KeyboardInterrupt handler): restore the default.
    process = subprocess.Popen(
        [sys.executable, "-m", "segshuffle.cli.main", "demo", "--users", "3000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_demo_environment(marker),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    for line in process.stderr:  # wait until users are being simulated
        if line.startswith("round 1:") or time.monotonic() > deadline:
            break
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-2000:]
    assert "interrupted" in err
    assert _children_gone(marker)

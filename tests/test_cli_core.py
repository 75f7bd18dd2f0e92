"""``segshuffle optimize`` and ``segshuffle audit`` as a user runs them: real processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

OPTIMIZE = ["optimize", "--users", "5000", "--domain-size", "17", "--set-size", "4",
            "--levels", "0.5,1,2", "--shares", "0.25,0.5,0.25", "--delta", "2e-6"]


def run_cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "segshuffle.cli.main", *arguments],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_optimize_json() -> None:
    done = run_cli(*OPTIMIZE, "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert 0.0 < payload["m"] <= 3.0
    assert len(payload["lambdas"]) == 3 and len(payload["epsilons"]) == 3
    assert payload["delta"] == 2e-6 and payload["mse_bound"] > 0
    assert payload["objective"] == "variance" and payload["variance"] > 0
    assert all(e <= level for e, level in zip(payload["epsilons"], [0.5, 1, 2], strict=True))


@pytest.mark.slow
def test_optimize_large_population_json() -> None:
    arguments = list(OPTIMIZE)
    arguments[arguments.index("5000")] = "50000"
    arguments[arguments.index("2e-6")] = "2e-7"
    payload = json.loads(run_cli(*arguments, "--json").stdout)
    assert payload["m"] <= 1.0


def test_optimize_fixed_blanket_text() -> None:
    done = run_cli(*OPTIMIZE, "--blanket", "2", "--dropout-tolerance", "0.1")
    assert done.returncode == 0, done.stderr
    assert "(fixed)" in done.stdout and "accounting users    4500 of 5000" in done.stdout


def test_audit_json() -> None:
    done = run_cli("audit", "--users", "5000", "--domain-size", "17", "--set-size", "4",
                   "--blanket", "2", "--lam", "0.5", "--delta", "2e-6", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert 0 < payload["epsilon_lower"] <= payload["epsilon_upper"]


def test_audit_reports_not_achievable_as_null() -> None:
    done = run_cli("audit", "--users", "5000", "--domain-size", "17", "--set-size", "4",
                   "--blanket", "0", "--lam", "1", "--delta", "2e-6", "--json")
    payload = json.loads(done.stdout)
    assert payload["epsilon_upper"] is None and payload["epsilon_lower"] is None


def _replace(flag: str, value: str) -> list[str]:
    arguments = list(OPTIMIZE)
    arguments[arguments.index(flag) + 1] = value
    return arguments


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        (_replace("--levels", "0.5,0,2"), "privacy level must be in [0.01, 30]"),
        (_replace("--levels", "1,0.5,2"), "strictly increasing"),
        (_replace("--delta", "1.5"), "delta must be in (0, 1)"),
        (_replace("--delta", "0"), "delta must be in (0, 1)"),
        (_replace("--shares", "0.3,0.3,0.3"), "shares must sum to 1"),
        (_replace("--shares", "0.5,0.5"), "one entry per level"),
        (_replace("--domain-size", "1"), "domain size must be >= 2"),
        (_replace("--set-size", "18"), "set size (18) must not exceed"),
        (_replace("--users", "1"), "users must be >= 2"),
        (_replace("--users", "many"), "expected an integer"),
        (_replace("--delta", "tiny"), "expected a number"),
        ([*OPTIMIZE, "--blanket", "-1"], "blanket rate m must be >= 0"),
    ],
)
def test_optimize_bad_input_is_one_line_and_exit_2(arguments: list[str], fragment: str) -> None:
    done = run_cli(*arguments)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], done.stderr


def test_audit_bad_input() -> None:
    done = run_cli("audit", "--users", "100", "--domain-size", "10", "--set-size", "2",
                   "--blanket", "-2", "--lam", "0.5", "--delta", "1e-6")
    assert done.returncode == 2
    assert "blanket rate m must be >= 0" in done.stderr
    done = run_cli("audit", "--users", "100", "--domain-size", "10", "--set-size", "2",
                   "--blanket", "1", "--lam", "1.5", "--delta", "1e-6")
    assert done.returncode == 2 and "lambda must be in [0, 1]" in done.stderr

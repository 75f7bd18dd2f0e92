"""``segshuffle admin``: light imports, ``release --when-ready`` against real services, and
the help on dropouts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from segshuffle.cli import admin_campaign
from segshuffle.client import Client
from segshuffle.testing import operator
from segshuffle.testing.localstack import LocalStack

HEAVY = ("scipy", "numpy")
PROBE = ("import json, sys\n"
         "{statement}\n"
         "print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))\n")


def _loaded(statement: str) -> set[str]:
    """The top-level modules a fresh interpreter holds after ``statement``."""
    done = subprocess.run([sys.executable, "-c", PROBE.format(statement=statement)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_admin_modules_do_not_import_scipy() -> None:
    loaded = _loaded("import segshuffle.cli.admin, segshuffle.cli.admin_campaign, "
                     "segshuffle.cli.admin_results, segshuffle.testing.operator")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_admin_help_loads_neither_the_protocol_nor_http() -> None:
    statement = ("from segshuffle.cli.main import main\n"
                 "try:\n    main(['admin', 'issuer-key', '--help'])\n"
                 "except SystemExit:\n    pass")
    loaded = _loaded(statement)
    assert not loaded & {*HEAVY, "httpx", "pydantic"}, sorted(loaded)


def test_the_token_variables_are_the_operator_clients() -> None:
    assert admin_campaign.ADMIN_TOKEN_ENV == operator.ADMIN_TOKEN_ENV
    assert admin_campaign.OPERATOR_TOKEN_ENV == operator.OPERATOR_TOKEN_ENV


def test_the_help_says_what_the_dropout_tolerance_allows() -> None:
    done = subprocess.run([sys.executable, "-m", "segshuffle.cli.main", "admin", "campaign",
                           "create", "--help"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "400"})
    text = " ".join(done.stdout.split())
    assert "round 2 is released with max(N, ceil((1 - T) n)) participants" in text
    assert "with N equal to n no one may drop out" in text
    assert "choose N <= ceil((1 - T) n)" in text


# -- slow: real services -----------------------------------------------------------------------

CID = "ready"
USERS = 4


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(tmp_path_factory.mktemp("ready"), min_users=2) as running:
        running.create_campaign({"id": CID, "domain_size": 6, "set_size": 1,
                                 "levels": [1.0, 2.0], "min_users": USERS,
                                 "dropout_tolerance": 0.0})
        yield running


def _release(stack: LocalStack, *argv: str) -> subprocess.Popen[str]:
    """``segshuffle admin release`` as a process; its standard error goes to a file named
    after the process (``_stderr``), which the test reads while it runs."""
    env = {**os.environ, "SEGSHUFFLE_OPERATOR_TOKEN": stack.operator_token}
    log = stack.directory / f"release-{time.monotonic_ns()}.err"
    process = subprocess.Popen(
        [sys.executable, "-m", "segshuffle.cli.main", "admin", "release", *argv,
         "--shuffler", stack.shuffler_url], env=env, text=True, stdout=subprocess.PIPE,
        stderr=log.open("w"))
    process.log = log  # type: ignore[attr-defined]
    return process


def _stderr(process: subprocess.Popen[str]) -> str:
    return process.log.read_text()  # type: ignore[attr-defined]


def _finish(process: subprocess.Popen[str]) -> tuple[str, str]:
    out, _ = process.communicate(timeout=120)
    return out, _stderr(process)


def _shows(process: subprocess.Popen[str], needle: str, timeout: float = 60.0) -> None:
    """Wait (at most ``timeout`` seconds) until the process has printed ``needle``."""
    deadline = time.monotonic() + timeout
    while needle not in _stderr(process):
        assert process.poll() is None, _stderr(process)
        assert time.monotonic() < deadline, f"no {needle!r} in {_stderr(process)!r}"
        time.sleep(0.1)


def _waits(process: subprocess.Popen[str], stack: LocalStack, round_number: int,
           needle: str) -> None:
    """The process has printed ``needle`` and still waits; the round is still open."""
    _shows(process, needle)
    time.sleep(0.5)
    assert process.poll() is None, _stderr(process)
    status = stack.operator.round_status(CID, round_number)
    assert status["state"] == "open", status


@pytest.mark.slow
def test_release_when_ready_waits_for_the_threshold(stack: LocalStack) -> None:
    round2 = _release(stack, CID, "--round", "2", "--when-ready", "--wait", "--interval",
                      "0.2", "--timeout", "120")
    round1 = _release(stack, CID, "--round", "1", "--when-ready", "--wait", "--interval",
                      "0.2", "--timeout", "120", "--json")
    users = [Client(stack.shuffler_url, CID, server_key=stack.server_key,
                     policy=stack.client_policy())
             for _ in range(USERS)]
    try:
        for user, invitation in zip(users, stack.invitations(CID, USERS), strict=True):
            user.enroll(invitation)
        for number, user in enumerate(users[:-1]):
            user.submit_level(number % 2)
        _waits(round1, stack, 1, "3/4 participants")  # 3 of 4: not released
        users[-1].submit_level(0)
        out, err = _finish(round1)
        assert round1.returncode == 0, err
        assert json.loads(out)["acknowledged"] is True
        assert "4/4 participants, ready" in err

        _waits(round2, stack, 2, "parameters not published yet")
        for number, user in enumerate(users):
            if number:
                _waits(round2, stack, 2, f"{number}/4 participants")
            user.submit_data([number])
        out, err = _finish(round2)
        assert round2.returncode == 0, err
        assert "round 2 of ready released and acknowledged by the server" in out
        assert "4/4 participants, ready" in err
    finally:
        for process in (round1, round2):
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        for user in users:
            user.close()
    assert stack.results(CID).phase == "done"


@pytest.mark.slow
def test_release_when_ready_gives_up_in_one_line(stack: LocalStack) -> None:
    stack.create_campaign({"id": "short", "domain_size": 6, "set_size": 1,
                           "levels": [1.0, 2.0], "min_users": USERS})
    started = time.monotonic()
    process = _release(stack, "short", "--round", "1", "--when-ready", "--timeout", "1.5",
                       "--interval", "0.2")
    out, err = _finish(process)
    assert process.returncode == 2 and out == ""
    errors = [line for line in err.splitlines() if line.startswith("segshuffle: error:")]
    assert len(errors) == 1 and errors == err.splitlines()[-1:]
    assert "did not reach its release threshold within --timeout 1.5s" in errors[0]
    assert "0/4 participants" in errors[0] and "not released" in errors[0]
    assert time.monotonic() - started < 30
    assert stack.operator.round_status("short", 1)["state"] == "open"

    stack.abort("short", "wrong items")
    process = _release(stack, "short", "--round", "1", "--when-ready")
    out, err = _finish(process)
    assert process.returncode == 2
    *progress, last = err.splitlines()  # the shuffler may relay its cached view a moment
    assert all(line.startswith("waiting for round 1 of short") for line in progress)
    assert last == ("segshuffle: error: campaign short aborted (wrong items) before round 1 "
                    "reached its release threshold")

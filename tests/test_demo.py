"""``segshuffle demo`` as a user runs it: real processes, JSON report, clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from segshuffle.testing.localstack import RELEASE_SECONDS, STARTUP_SECONDS, harness_seconds

pytestmark = pytest.mark.slow  # real service processes end to end

PHASE_SECONDS = harness_seconds("release", RELEASE_SECONDS)
"""The longest a test waits for the demo to reach a phase (its optimizer included)."""
DEMO_SECONDS = harness_seconds("startup", STARTUP_SECONDS) + 2 * PHASE_SECONDS
"""The longest a whole demo may take: its services' start and both releases."""


def _demo_environment(marker: str) -> dict[str, str]:
    """The caller's environment without SEGSHUFFLE_* settings, plus a marker that the
    demo's service processes inherit, so they can be told apart from services other
    tests (in other workers) run at the same time."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SEGSHUFFLE_")}
    environment["DEMO_TEST_MARKER"] = marker
    return environment


def _demo(*args: str, marker: str = "") -> subprocess.CompletedProcess[str]:
    """Run a demo to its end; the bound is against a hang, not a speed requirement (both
    releases include the server's optimizer or decoding, minutes on a busy machine)."""
    return subprocess.run([sys.executable, "-m", "segshuffle.cli.main", "demo", *args],
                          capture_output=True, text=True, timeout=DEMO_SECONDS,
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


def _scratch_folders(pids: list[int]) -> set[Path]:
    """The demo's scratch folders (``segshuffle-*`` in the temporary directory) that the
    processes ``pids`` hold files open in."""
    top = Path(tempfile.gettempdir()).resolve()
    found = set()
    for pid in pids:
        try:
            links = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for link in links:
            try:
                target = Path(os.readlink(link))
            except OSError:
                continue
            if target.is_relative_to(top) and len(target.parts) > len(top.parts):
                folder = top / target.parts[len(top.parts)]
                if folder.name.startswith("segshuffle-"):
                    found.add(folder)
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


class RunningDemo:
    """A demo started in the background, its stderr read line by line by a thread (so a
    wait for a line is bounded even if the demo hangs)."""

    def __init__(self, *args: str) -> None:
        self.marker = uuid.uuid4().hex
        # A runner started in the background may ignore SIGINT, and the child would inherit
        # that (Python then installs no KeyboardInterrupt handler): restore the default.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "segshuffle.cli.main", "demo", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=_demo_environment(self.marker),
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.lines.append(EOF)
            self._changed.notify_all()

    def wait_for_line(self, prefix: str, timeout: float) -> int:
        """The index of the first stderr line starting with ``prefix``, once it is there."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [i for i, line in enumerate(self.lines) if line.startswith(prefix)]
                if found:
                    return found[0]
                if EOF in self.lines:
                    raise AssertionError(f"the demo ended before {prefix!r}: {self.lines}")
                if not self._changed.wait(max(0.0, deadline - time.monotonic())):
                    raise AssertionError(f"no {prefix!r} line within {timeout} s")

    def finish(self, timeout: float) -> list[str]:
        """Wait for the demo to exit; its whole stderr."""
        self.process.wait(timeout)
        self._reader.join(timeout)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return [line for line in self.lines if line is not EOF]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(60)


EOF = "\0end of stderr"
STOP_SECONDS = 120.0
"""The longest a test waits for the demo, or a service whose demo died, to be gone."""


def _is_progress(line: str) -> bool:
    return line.startswith(("round ", "demo: "))


@pytest.mark.parametrize(("sig", "phase"), [
    (signal.SIGTERM, "demo: "),  # the services starting (the demo's first line)
    (signal.SIGINT, "round 1:"),  # users enrolling and sending their levels
    (signal.SIGTERM, "round 1:"),
    (signal.SIGINT, "demo: releasing round 1"),  # the server's optimizer at work
    (signal.SIGTERM, "round 2:"),  # users sending their data
    (signal.SIGTERM, "demo: releasing round 2"),  # decryption and decoding
])
def test_demo_stopped_by_a_signal_says_one_line_and_stops_its_services(
        sig: int, phase: str) -> None:
    """SIGINT or SIGTERM at any phase: the services are stopped, stderr ends with exactly
    one line (no traceback, no asyncio "Task exception was never retrieved"), and the exit
    status is 128 + the signal's number.  The phases' users are sized so that each phase
    lasts long enough for the signal to land in it."""
    demo = RunningDemo("--users", "1500" if phase == "round 1:" else "400")
    try:
        signalled_after = demo.wait_for_line(phase, PHASE_SECONDS)
        demo.process.send_signal(sig)
        lines = demo.finish(STOP_SECONDS)
    finally:
        demo.kill()
    name = signal.Signals(sig).name
    assert demo.process.returncode == 128 + sig, lines[-20:]
    after = [line for line in lines[signalled_after + 1:] if not _is_progress(line)]
    assert after == [f"segshuffle: interrupted by {name}"], lines[-20:]
    assert lines[-1] == after[0]
    assert not [line for line in lines if "Traceback" in line or "exception" in line]
    assert _children_gone(demo.marker, STOP_SECONDS)


def test_demo_says_it_draws_a_large_population_and_a_signal_ends_the_draw() -> None:
    """The users' sets of the largest sizes take minutes to draw (users x items random
    keys): the demo says so first, and SIGTERM meanwhile ends it with one line and status
    143 before any service has started."""
    demo = RunningDemo("--users", "1000000", "--items", "100000", "--set-size", "64")
    try:
        said = demo.wait_for_line("demo: 1000000 users, dataset synthetic-T100000, drawing",
                                  PHASE_SECONDS)
        demo.process.send_signal(signal.SIGTERM)
        lines = demo.finish(STOP_SECONDS)
    finally:
        demo.kill()
    assert demo.process.returncode == 128 + signal.SIGTERM, lines[-20:]
    assert lines[said + 1:] == ["segshuffle: interrupted by SIGTERM"], lines
    assert _children_gone(demo.marker, STOP_SECONDS)


def test_demo_killed_outright_takes_its_services_with_it() -> None:
    """SIGKILL gives the demo no chance to clean up: its services notice that it is gone
    (their lifeline pipe reads end of file) and stop by themselves, in bounded time."""
    demo = RunningDemo("--users", "3000")
    try:
        demo.wait_for_line("round 1:", PHASE_SECONDS)  # both services are up
        services = [pid for pid in _marked_processes(demo.marker) if pid != demo.process.pid]
        assert len(services) >= 2, services  # the server and the shuffler
        scratch = _scratch_folders(services)
        assert scratch, "the services hold nothing open in a scratch folder"
        demo.process.kill()
        demo.finish(STOP_SECONDS)
    finally:
        demo.kill()
    assert demo.process.returncode == -signal.SIGKILL
    assert _children_gone(demo.marker, STOP_SECONDS), _marked_processes(demo.marker)
    assert not any(folder.exists() for folder in scratch), scratch  # the janitor's work

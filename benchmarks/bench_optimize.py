"""Whole ``segshuffle optimize`` processes against a bare numeric import; prints figures.

Run: ``python benchmarks/bench_optimize.py [--cases PATTERN[,PATTERN..]] [--repeats R]
[--timeout S] [--json FILE]``.

Every case of :data:`CASES` is one ``segshuffle optimize`` command (levels 0.5, 1, 2 with
shares 0.3, 0.4, 0.3 and delta 1e-8 unless its name says otherwise), run as a fresh
interpreter (``python -m segshuffle.cli.main optimize ... --json``; the command's defaults
otherwise, so the slot-mode cases also optimise the other blanket mode for comparison, as
the command does).  Right before each run of a case the bare baseline
``python -c "import numpy, scipy.special, scipy.fft"`` runs, so that drift of the machine
between the two cancels in their ratio.  For each case it reports:

* CPU s: user + system CPU seconds of the child (``os.wait4``), median over ``--repeats``;
* baseline CPU s: the same for the baseline runs paired with it, median;
* ratio: the median over the repeats of (case CPU / its paired baseline's CPU);
* peak MB: the child's peak resident set (``ru_maxrss``, MB = 2**20 bytes), largest run;
* target met: ratio <= 3 and peak < 500 MB;
* m: the blanket rate the command chose, so that one can see it ran.

Before the first run the package's bytecode is written (:mod:`package_bytecode`: where the
environment forbids writing it, each process would otherwise compile every module again,
which neither an installed package nor the baseline's numpy and scipy do).

A run that exceeds ``--timeout`` seconds (default 900) is killed and the case is reported
as timed out (its CPU so far is kept in the JSON); a command that fails is reported as
failed with its last line of error.  One progress line per case goes to stderr as it
finishes.  ``--cases`` keeps the cases whose name contains any of the comma-separated
patterns (e.g. ``--cases "n=1e6 d=128"``; ``--list`` prints the names).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from package_bytecode import compile_package

CLI = [sys.executable, "-m", "segshuffle.cli.main"]
BASELINE = [sys.executable, "-c", "import numpy, scipy.special, scipy.fft"]
BASELINE_SHOWN = 'python -c "import numpy, scipy.special, scipy.fft"'
RATIO_TARGET, PEAK_TARGET_MB = 3.0, 500.0

LEVELS, SHARES, DELTA = "0.5,1,2", "0.3,0.4,0.3", "1e-8"
#: K = 1000 levels evenly spaced in [0.5, 2] (repr: exact, strictly increasing) and equal
#: shares: 0.001 each, whose sum is 1 to within float rounding (the command allows 1e-6).
K1000_LEVELS = ",".join(repr(0.5 + 1.5 * index / 999) for index in range(1000))
K1000_SHARES = ",".join(["0.001"] * 1000)


def n_label(users: int) -> str:
    """``30``, ``100``, ``1e3``, ``1e6``: powers of ten from 1000 up as 1eX."""
    exponent = len(str(users)) - 1
    if users >= 1000 and users == 10**exponent:
        return f"1e{exponent}"
    return str(users)


@dataclass(frozen=True)
class Case:
    """One ``segshuffle optimize`` command."""

    name: str
    arguments: list[str] = field(default_factory=list)
    """Everything after ``segshuffle optimize``."""

    @property
    def command(self) -> list[str]:
        return [*CLI, "optimize", *self.arguments, "--json"]

    @property
    def shown(self) -> str:
        """The command as a reader types it, with the long lists elided."""
        words = ["segshuffle", "optimize"]
        for word in self.arguments:
            words.append(word if len(word) <= 40 else f"<{word.count(',') + 1} values>")
        return " ".join(words)


def _case(users: int, domain: int, set_size: int, *extra: str, levels: str = LEVELS,
          shares: str = SHARES, suffix: str = "") -> Case:
    name = f"n={n_label(users)} d={domain} s={set_size}{suffix}"
    return Case(name, ["--users", str(users), "--domain-size", str(domain), "--set-size",
                       str(set_size), "--levels", levels, "--shares", shares, "--delta",
                       DELTA, *extra])


CASES: list[Case] = [
    *(_case(n, 128, 8) for n in (30, 100, 1000, 10_000, 1_000_000, 100_000_000)),
    *(_case(n, d, 1) for d in (16, 16384) for n in (1000, 1_000_000)),
    _case(1_000_000, 128, 8, levels=K1000_LEVELS, shares=K1000_SHARES, suffix=" K=1000"),
    *(_case(n, 128, 8, "--blanket-mode", "independent", suffix=" independent")
      for n in (1000, 1_000_000)),
    # Small domains at s = 2 and 3, where the accountant enumerates the joint view.
    *(_case(n, d, s) for n, d, s in ((40, 8, 2), (120, 10, 2), (20, 8, 3))),
]


def select(patterns: str | None) -> list[Case]:
    """The cases whose name contains any of the comma-separated patterns (all: None)."""
    if not patterns:
        return list(CASES)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    return [case for case in CASES if any(p in case.name for p in wanted)]


@dataclass
class Run:
    """One child process: its CPU and peak memory, and how it ended."""

    cpu_s: float
    peak_mb: float
    wall_s: float
    status: str
    """``ok``, ``timeout`` or ``failed``."""
    stdout: str = ""
    error: str = ""


def _peak_mb(maxrss: int) -> float:
    """``ru_maxrss`` in MB: kilobytes on Linux, bytes on macOS."""
    return maxrss / 2**20 if sys.platform == "darwin" else maxrss / 1024


def run_child(command: list[str], timeout: float, poll: float = 0.02) -> Run:
    """Run ``command`` to completion or until ``timeout`` s, reaped by ``os.wait4``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        pid = os.posix_spawn(command[0], command, os.environ,
                             file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                           (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                                           (os.POSIX_SPAWN_DUP2, err.fileno(), 2)])
        timed_out = False
        try:
            while True:
                reaped, wait_status, usage = os.wait4(pid, os.WNOHANG)
                if reaped == pid:
                    break
                if time.perf_counter() - started > timeout:
                    os.kill(pid, signal.SIGKILL)
                    _, wait_status, usage = os.wait4(pid, 0)
                    timed_out = True
                    break
                time.sleep(poll)
        except BaseException:  # interrupted: leave no child behind
            try:
                os.kill(pid, signal.SIGKILL)
                os.wait4(pid, 0)
            except ChildProcessError:
                pass
            raise
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(wait_status)
    status = "timeout" if timed_out else ("ok" if code == 0 else "failed")
    error = ""
    if status == "failed":
        lines = stderr.strip().splitlines()
        error = f"exit {code}: {lines[-1] if lines else '(no message)'}"
    return Run(usage.ru_utime + usage.ru_stime, _peak_mb(usage.ru_maxrss), wall, status,
               stdout, error)


def measure(case: Case, repeats: int, timeout: float) -> dict[str, Any]:
    """Baseline then case, ``repeats`` times; a timeout or failure ends the case."""
    cpus, baselines, ratios, peaks, walls = [], [], [], [], []
    status, error, m = "ok", "", None
    for _ in range(repeats):
        baseline = run_child(BASELINE, timeout)
        if baseline.status != "ok":
            status, error = "failed", f"baseline {baseline.status} {baseline.error}".strip()
            break
        run = run_child(case.command, timeout)
        cpus.append(run.cpu_s)
        baselines.append(baseline.cpu_s)
        ratios.append(run.cpu_s / baseline.cpu_s)
        peaks.append(run.peak_mb)
        walls.append(run.wall_s)
        if run.status != "ok":
            status, error = run.status, run.error
            break
        try:
            m = json.loads(run.stdout)["m"]
        except (ValueError, KeyError, TypeError):
            status, error = "failed", f"no m in the output: {run.stdout.strip()[-200:]!r}"
            break
    return summarise(case, status, error, m, cpus, baselines, ratios, peaks, walls, timeout)


def summarise(case: Case, status: str, error: str, m: float | None, cpus: list[float],
              baselines: list[float], ratios: list[float], peaks: list[float],
              walls: list[float], timeout: float) -> dict[str, Any]:
    """One case's record: medians of the complete runs; the CPU and peak of a last run
    that timed out or failed are kept as ``cpu_s_so_far`` and ``peak_mb_so_far``."""
    complete = len(cpus) if status == "ok" else len(cpus) - 1
    record: dict[str, Any] = {"case": case.name, "command": case.shown, "status": status,
                              "runs": complete, "m": m, "timeout_s": timeout}
    if error:
        record["error"] = error
    if baselines:
        record["baseline_cpu_s"] = round(statistics.median(baselines), 3)
    if status != "ok" and cpus:
        record["cpu_s_so_far"] = round(cpus[-1], 3)
        record["peak_mb_so_far"] = round(peaks[-1], 1)
    if complete > 0:
        cpu = statistics.median(cpus[:complete])
        ratio = statistics.median(ratios[:complete])
        peak = max(peaks[:complete])
        record.update(
            cpu_s=round(cpu, 3), ratio=round(ratio, 3), peak_mb=round(peak, 1),
            wall_s=round(statistics.median(walls[:complete]), 3),
            target_met=bool(status == "ok" and ratio <= RATIO_TARGET
                            and peak < PEAK_TARGET_MB))
    else:
        record["target_met"] = False
    return record


HEADER = ("case", "CPU s", "baseline CPU s", "ratio", "peak MB", "target met", "m")


def _figure(record: dict[str, Any], key: str, digits: int) -> str:
    value = record.get(key)
    return "-" if value is None else f"{value:.{digits}f}"


def row(record: dict[str, Any]) -> list[str]:
    """One table row; a case that did not complete says why in the CPU column."""
    if record["status"] == "timeout" and record["runs"] == 0:
        cpu = f"timeout >{record['timeout_s']:g} s"
    elif record["status"] == "failed" and record["runs"] == 0:
        cpu = "failed"
    else:
        cpu = _figure(record, "cpu_s", 2)
    met = "yes" if record["target_met"] else "no"
    m = "-" if record.get("m") is None else f"{record['m']:.6g}"
    return [record["case"], cpu, _figure(record, "baseline_cpu_s", 3),
            _figure(record, "ratio", 1), _figure(record, "peak_mb", 0), met, m]


def table(records: list[dict[str, Any]]) -> str:
    """The records as an aligned text table (first column left, the rest right)."""
    rows = [list(HEADER), *(row(r) for r in records)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = []
    for cells in rows:
        parts = [cells[0].ljust(widths[0])]
        parts += [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def progress(index: int, total: int, record: dict[str, Any]) -> str:
    """The stderr line of a finished case."""
    head = f"[{index}/{total}] {record['case']}:"
    if record["status"] == "timeout":
        return f"{head} timed out after {record['timeout_s']:g} s"
    if record["status"] == "failed" and record["runs"] == 0:
        return f"{head} failed ({record.get('error', '')})"
    return (f"{head} CPU {record['cpu_s']:.2f} s, ratio {record['ratio']:.1f}, peak "
            f"{record['peak_mb']:.0f} MB, m = {record['m']:.6g} ({record['wall_s']:.1f} s wall)")


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "system": f"{platform.system()} {platform.machine()}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", metavar="PATTERN",
                        help="run the cases whose name contains any of these "
                             "comma-separated substrings (default: all)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="baseline-and-case pairs per case (default 1)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds one run of a case may take (default 900)")
    parser.add_argument("--json", metavar="FILE", type=Path,
                        help="also write the figures to FILE as JSON")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    cases = select(args.cases)
    if args.list:
        for case in cases:
            print(f"{case.name:32} {case.shown}")
        return 0
    if not cases:
        parser.error(f"no case matches {args.cases!r}; names: "
                     + ", ".join(c.name for c in CASES))
    print(f"segshuffle optimize, whole processes, CPU against `{BASELINE_SHOWN}`"
          f" (median of {args.repeats}; target: ratio <= {RATIO_TARGET:g} and peak < "
          f"{PEAK_TARGET_MB:g} MB)", flush=True)
    compile_package()
    records = []
    for index, case in enumerate(cases, 1):
        record = measure(case, args.repeats, args.timeout)
        records.append(record)
        print(progress(index, len(cases), record), file=sys.stderr, flush=True)
    print(table(records), flush=True)
    if args.json:
        document = {"measured": datetime.date.today().isoformat(), "machine": machine(),
                    "baseline": BASELINE_SHOWN, "repeats": args.repeats,
                    "timeout_s": args.timeout, "ratio_target": RATIO_TARGET,
                    "peak_target_mb": PEAK_TARGET_MB, "cases": records}
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

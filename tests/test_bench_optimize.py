"""The optimize benchmark's case list, table and child runs, without running optimize."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from segshuffle.cli._args import float_list
from segshuffle.core import validation

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_optimize.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_optimize
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return bench_optimize


def test_the_cases_are_named_and_filtered_by_substring(bench) -> None:
    names = [case.name for case in bench.CASES]
    assert len(names) == len(set(names)) == 16
    assert names[-3:] == ["n=40 d=8 s=2", "n=120 d=10 s=2", "n=20 d=8 s=3"]
    assert names[:6] == [f"n={n} d=128 s=8" for n in ("30", "100", "1e3", "1e4", "1e6", "1e8")]
    assert [c.name for c in bench.select("n=1e6 d=128")] == [
        "n=1e6 d=128 s=8", "n=1e6 d=128 s=8 K=1000", "n=1e6 d=128 s=8 independent"]
    assert [c.name for c in bench.select("d=16 s,d=16384")] == [
        "n=1e3 d=16 s=1", "n=1e6 d=16 s=1", "n=1e3 d=16384 s=1", "n=1e6 d=16384 s=1"]
    assert bench.select(None) == bench.CASES and bench.select("nothing") == []


def test_every_case_is_a_valid_optimize_command(bench) -> None:
    for case in bench.CASES:
        command = case.command
        assert command[1:4] == ["-m", "segshuffle.cli.main", "optimize"]
        assert command[-1] == "--json"
        value = dict(zip(command[4:-1:2], command[5:-1:2], strict=True))
        levels = validation.require_levels(float_list(value["--levels"]))
        validation.require_shares(float_list(value["--shares"]), len(levels))
        assert value["--delta"] == "1e-8"
    (k1000,) = bench.select("K=1000")
    assert "<1000 values>" in k1000.shown


def test_a_run_past_its_timeout_is_killed_and_reported(bench) -> None:
    run = bench.run_child([sys.executable, "-c", "import time; time.sleep(30)"], 0.3)
    assert run.status == "timeout" and run.wall_s < 10
    done = bench.run_child([sys.executable, "-c", "print('{\"m\": 1.5}')"], 30)
    assert done.status == "ok" and done.stdout.strip() == '{"m": 1.5}'
    assert done.cpu_s > 0 and done.peak_mb > 1
    failed = bench.run_child([sys.executable, "-c", "raise SystemExit('bad input')"], 30)
    assert failed.status == "failed" and failed.error == "exit 1: bad input"


def test_the_table_shows_met_targets_timeouts_and_failures(bench) -> None:
    case = bench.CASES[0]
    ok = bench.summarise(case, "ok", "", 0.5, [2.0, 4.0, 3.0], [1.0, 1.0, 1.0],
                         [2.0, 4.0, 3.0], [100.0, 120.0, 110.0], [1.0, 1.0, 1.0], 900)
    assert (ok["cpu_s"], ok["ratio"], ok["peak_mb"], ok["target_met"]) == (3.0, 3.0, 120.0,
                                                                            True)
    big = bench.summarise(case, "ok", "", 0.5, [2.0], [1.0], [2.0], [600.0], [1.0], 900)
    late = bench.summarise(case, "timeout", "", None, [900.0], [1.0], [900.0], [90.0],
                           [900.0], 900)
    bad = bench.summarise(case, "failed", "exit 2: no", None, [0.1], [1.0], [0.1], [50.0],
                          [0.1], 900)
    assert not big["target_met"] and not late["target_met"] and not bad["target_met"]
    assert late["cpu_s_so_far"] == 900.0 and "cpu_s" not in late
    lines = bench.table([ok, big, late, bad]).splitlines()
    assert lines[0].split("  ")[0].strip() == "case" and "target met" in lines[0]
    assert lines[1].split()[-2:] == ["yes", "0.5"]
    assert lines[2].split()[-2:] == ["no", "0.5"]
    assert "timeout >900 s" in lines[3] and "failed" in lines[4]
    assert "timed out after 900 s" in bench.progress(1, 4, late)
    assert "ratio 3.0" in bench.progress(1, 4, ok)


def test_the_package_bytecode_is_written_before_timing(bench, tmp_path, monkeypatch) -> None:
    # Where PYTHONDONTWRITEBYTECODE is set, every timed process compiled the package's
    # modules from source again (0.07-0.1 CPU-s), which the baseline's numpy never does.
    import importlib.util

    package = tmp_path / "timedpkg"
    (package / "inner").mkdir(parents=True)
    for module in (package / "__init__.py", package / "inner" / "__init__.py",
                   package / "inner" / "work.py"):
        module.write_text("VALUE = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert bench.compile_package("timedpkg") == package
    for module in package.rglob("*.py"):
        assert Path(importlib.util.cache_from_source(str(module))).is_file()
    with pytest.raises(RuntimeError, match="not importable"):
        bench.compile_package("no_such_package_here")

"""``segshuffle reproduce``: a quick real run through the command line, and its errors."""

from __future__ import annotations

import csv
import subprocess
import sys
import time

import numpy as np
import pytest

from segshuffle.cli.main import main
from segshuffle.experiments.methods import BASELINES, OURS, OURS_INDEPENDENT


def _rows(path):
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_quick_msnbc_run_writes_csv_png_and_summary(tmp_path):
    out = tmp_path / "out"
    completed = subprocess.run(
        [sys.executable, "-m", "segshuffle.cli.main", "reproduce", "--figure", "msnbc-s1",
         "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=170,
    )
    assert completed.returncode == 0, completed.stderr
    assert "reproduce [" in completed.stderr  # progress lines
    assert "finished in" in completed.stderr
    assert "| msnbc-s1 | 5000 | 4 |" in completed.stdout
    rows = _rows(out / "msnbc-s1.csv")
    assert {"method", "n", "s", "m", "mse", "mse_std", "repeats"} <= set(rows[0])
    for n in ("5000", "50000"):
        mine = [r for r in rows if r["n"] == n]
        assert [r["method"] for r in mine if r["method"] in BASELINES] == list(BASELINES)
        for method in (OURS, OURS_INDEPENDENT):
            ours = [r for r in mine if r["method"] == method]
            assert [float(r["m"]) for r in ours if r["optimal"] == "false"] == [0.1, 0.3, 1, 3,
                                                                                10]
            assert sum(r["optimal"] == "true" for r in ours) == 1
            # Achieved user-level epsilons never exceed the levels (0.5, 1, 2).
            for r in ours:
                eps = [float(e) for e in r["detail"].split("eps=")[1].split(";")[0].split("/")]
                assert all(e <= level * (1 + 1e-6) for e, level in zip(eps, (0.5, 1.0, 2.0),
                                                                         strict=True))
        assert all(r["m"] == "" for r in mine if r["method"] in BASELINES)
        assert all(float(r["mse"]) > 0 and r["repeats"] == "4" for r in mine)
        assert all(r["domain_size"] == "21" for r in mine)
    png = (out / "msnbc-s1.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert (out / "msnbc-s1-summary.md").read_text().startswith("| figure |")


@pytest.mark.slow
def test_user_transaction_file(tmp_path, capsys):
    # A user's own data replaces MSNBC in the msnbc-* figures.
    rng = np.random.default_rng(3)
    lines = [" ".join(str(i) for i in rng.choice(np.arange(100, 110), size=rng.integers(1, 6),
                                                 replace=False))
             for _ in range(4000)]
    data = tmp_path / "mine.txt"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    code = main(["reproduce", "--figure", "msnbc-s2", "--repeats", "1", "--grid", "1",
                 "--jobs", "1", "--users", "3000", "--data", str(data), "--out", str(out)])
    assert code == 0
    rows = _rows(out / "msnbc-s2.csv")
    assert {r["domain_size"] for r in rows} == {"14"}  # 10 items + 4 padding items
    assert {r["shares"] for r in rows} == {"S2"}
    assert {r["n"] for r in rows} == {"3000"}
    assert {r["method"] for r in rows} == {*BASELINES, OURS, OURS_INDEPENDENT}


@pytest.mark.slow
def test_large_domain_file_is_planned_quickly(tmp_path):
    """Regression: a retail-like file (16,470 items) hung for over 20 minutes in planning.

    The PrivSet baselines searched their subset size with exact big-integer
    binomials for every k (now milliseconds, tests/test_baselines.py).  The whole
    run, planning dominated by the user-level accountant plus one repeat, takes
    15-50 s depending on the machine's load.
    """
    rng = np.random.default_rng(8)
    items = 16_470
    popularity = 1.0 / np.arange(1, items + 1) ** 1.1
    popularity /= popularity.sum()
    lines = [" ".join(map(str, range(items)))]  # every id appears at least once
    for size in np.clip(rng.geometric(0.12, size=6000), 1, 40):
        lines.append(" ".join(map(str, rng.choice(items, size=size, replace=False,
                                                  p=popularity))))
    data = tmp_path / "baskets.txt"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "segshuffle.cli.main", "reproduce", "--figure", "msnbc-s1",
         "--data", str(data), "--users", "5000", "--grid", "1", "--repeats", "1",
         "--jobs", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    elapsed = time.perf_counter() - started
    assert completed.returncode == 0, completed.stderr
    assert elapsed < 240.0, elapsed  # the hang lasted over 20 minutes
    rows = _rows(out / "msnbc-s1.csv")
    assert {r["domain_size"] for r in rows} == {"16474"}  # 16,470 items + 4 padding items
    # s + d = 16,478 ciphertexts per user exceed the protocol's cap: no independent blanket.
    assert {r["method"] for r in rows} == {*BASELINES, OURS}
    assert "| msnbc-s1 | 5000 | 4 |" in completed.stdout and "| - | - |" in completed.stdout
    local = next(r for r in rows if r["method"] == "subexp-local")
    assert int(local["detail"].split("k=")[1].split()[0]) > 1  # a real subset-size search
    assert all(float(r["mse"]) > 0 for r in rows)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--figure", "msnbc-s9"], "unknown figure"),
        (["--figure", "msnbc-s1", "--repeats", "0"], "--repeats must be >= 1"),
        (["--figure", "msnbc-s1", "--repeats", "two"], "--repeats must be an integer"),
        (["--figure", "msnbc-s1", "--jobs", "0"], "--jobs must be >= 1"),
        (["--figure", "msnbc-s1", "--grid", "1,x"], "--grid"),
        (["--figure", "msnbc-s1", "--grid", "-1"], "--grid"),
        (["--figure", "msnbc-s1", "--users", "1"], "--users value must be >= 2"),
        (["--figure", "msnbc-s1", "--data", "/nonexistent/data.txt"], "data file not found"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(arguments, message, tmp_path, capsys):
    code = main(["reproduce", *arguments, "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_malformed_and_too_small_data_files(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("1 2 3\n4 five\n")
    assert main(["reproduce", "--figure", "msnbc-s1", "--data", str(bad),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 2: malformed item id" in err
    small = tmp_path / "small.txt"
    small.write_text("1 2\n3\n" * 100)
    assert main(["reproduce", "--figure", "msnbc-s1", "--data", str(small),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs 5000" in err


def test_missing_figure_flag_is_a_usage_error(capsys):
    assert main(["reproduce"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--figure is required" in err and "--quick" in err


class _StopError(Exception):
    """Raised by the stand-in for the experiments: the test has seen what it needs."""


def test_quick_alone_runs_the_documented_default_figure(tmp_path, monkeypatch):
    """``reproduce --quick`` without ``--figure`` (a smoke run) runs QUICK_FIGURE with the
    quick repeats and grid, and ``--figure`` still chooses another."""
    from segshuffle.cli import reproduce
    from segshuffle.experiments.settings import QUICK_GRID, QUICK_REPEATS

    asked = {}

    def run_figures(figures, **options):
        asked.update(options, figures=[figure.name for figure in figures])
        raise _StopError

    monkeypatch.setattr(reproduce, "run_figures", run_figures)
    with pytest.raises(_StopError):
        main(["reproduce", "--quick", "--out", str(tmp_path / "o")])
    assert asked["figures"] == [reproduce.QUICK_FIGURE] == ["msnbc-s1"]
    assert asked["repeats"] == QUICK_REPEATS and asked["grid"] == QUICK_GRID
    asked.clear()
    with pytest.raises(_StopError):  # --figure still chooses
        main(["reproduce", "--quick", "--figure", "synthetic-s2", "--out", str(tmp_path / "o")])
    assert asked["figures"] == ["synthetic-s2"]

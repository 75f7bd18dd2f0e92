"""Round 2's level guarantee at the optimizer's m* of every panel of the paper's experiments.

Reads the optimal rows (``optimal`` true) of docs/results/all.csv: the figure, n, s, the
privacy domain, m* and the lambdas (as printed there, four digits) of ``ours`` (slot
blanket) and ``ours-independent``; the levels are 0.5, 1 and 2, delta = 0.01 / n and the
honest users n (the experiments tolerate no dropouts).  For every two levels whose rates
differ it prints the certified epsilon of :mod:`segshuffle.core.level_privacy` and the
exhibited lower bound, and the CPU seconds each panel took::

    .venv/bin/python benchmarks/level_privacy_panels.py [--csv docs/results/all.csv]

The output is the markdown table of docs/results.md, "The level in round 2".
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from segshuffle.core.level_privacy import LevelSetting, level_report

ROOT = Path(__file__).resolve().parents[1]
LEVELS = [0.5, 1.0, 2.0]
MODES = {"ours": "slots", "ours-independent": "independent"}


def _lambdas(detail: str) -> list[float]:
    for part in detail.split(";"):
        key, _, value = part.strip().partition("=")
        if key == "lambdas":
            return [float(x) for x in value.split("/")]
    raise ValueError(f"no lambdas in {detail!r}")


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.3g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=ROOT / "docs" / "results" / "all.csv")
    args = parser.parse_args()
    with args.csv.open(newline="", encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle)
                if row["method"] in MODES and row["optimal"] == "true"]
    print("| figure | n | s | mode | m* | lambdas | round 2: levels, eps upper (lower) | "
          "CPU s |")
    print("| --- | ---: | ---: | --- | ---: | --- | --- | ---: |")
    total = 0.0
    for row in rows:
        n, s, domain, m = int(row["n"]), int(row["s"]), int(row["domain_size"]), float(row["m"])
        lambdas = _lambdas(row["detail"])
        started = time.process_time()
        setting = LevelSetting(n, s, domain, m, MODES[row["method"]])
        report = level_report(LEVELS, lambdas, setting, 0.01 / n)
        seconds = time.process_time() - started
        total += seconds
        pairs = "; ".join(
            f"{a:g} / {b:g}: {_fmt(p.epsilon_upper)} ({_fmt(p.epsilon_lower)})"
            for p in report.pairs for a, b in [p.levels]) or "one rate: 0"
        print(f"| {row['figure']} | {n} | {s} | {MODES[row['method']]} | {m:.3g} | "
              f"{'/'.join(f'{x:g}' for x in lambdas)} | {pairs} | {seconds:.2f} |", flush=True)
    print(f"\n{len(rows)} panels, {total:.1f} CPU s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

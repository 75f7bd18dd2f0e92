"""Benchmark of the reproduction: planning time and per-repeat time of every panel kind.

    python -m segshuffle.experiments.benchmark [--samples 7]

Prints, for each (dataset, n, s) panel of the paper's figures, the time to plan it
(every accountant search, S1 shares, default m grid) once, and the median over
``--samples`` repeats of one repeat (a population plus every method), measured in
this process on one core.  From those it projects the single-core and two-core
wall time of ``segshuffle reproduce --figure all`` with the default repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ..datasets.msnbc import load_msnbc
from ..datasets.population import CollectionSource, synthetic_source
from .methods import plan_panel, run_repeat
from .settings import (
    DEFAULT_GRID,
    DEFAULT_REPEATS,
    FIGURES,
    SHARES,
    SYNTHETIC_ITEMS,
    SYNTHETIC_SET_SIZES,
    USER_COUNTS,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=7, help="timed repeats per panel")
    args = parser.parse_args(argv)
    msnbc = CollectionSource("msnbc", load_msnbc())
    synthetic = synthetic_source(SYNTHETIC_ITEMS)
    kinds = [("msnbc", n, 4, 17, 21, msnbc) for n in USER_COUNTS]
    kinds += [("synthetic", n, s, SYNTHETIC_ITEMS, SYNTHETIC_ITEMS, synthetic)
              for s in SYNTHETIC_SET_SIZES for n in USER_COUNTS]
    print(f"{'panel':<24} {'plan s':>8} {'median repeat s':>16}")
    plan_total = repeat_total = 0.0
    for dataset, n, s, d, domain, source in kinds:
        started = time.perf_counter()
        plan = plan_panel(f"bench|{dataset}|{n}|{s}", n, s, domain, d, SHARES["S1"],
                          DEFAULT_GRID)
        planning = time.perf_counter() - started
        times = []
        for r in range(args.samples):
            started = time.perf_counter()
            run_repeat(plan, source, 0, r)
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        # Every kind appears in three figures (shares S1, S2, S3).
        figures = sum(1 for f in FIGURES.values() if f.dataset == dataset)
        plan_total += figures * planning
        repeat_total += figures * median * DEFAULT_REPEATS
        print(f"{dataset + f' n={n} s={s}':<24} {planning:8.2f} {median:16.4f}")
    single = plan_total + repeat_total
    print(f"projected 'reproduce --figure all' ({DEFAULT_REPEATS} repeats): "
          f"{single:.0f} s on one core, {single / 2:.0f} s on two")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

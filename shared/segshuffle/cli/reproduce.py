"""``segshuffle reproduce``: the paper's experiments, figures and CSVs in one command.

    segshuffle reproduce --figure msnbc-s1 --repeats 100 --out results/

writes ``results/msnbc-s1.csv``, ``results/msnbc-s1.png`` and
``results/msnbc-s1-summary.md``.  ``--figure all`` writes every figure's files and
``all.csv`` / ``all-summary.md`` covering them all.  ``--quick`` uses a few repeats
and a coarse m grid (a smoke run); without ``--figure`` it runs :data:`QUICK_FIGURE`.
Results are deterministic for a given
``--seed`` whatever ``--jobs`` is.  Progress and the elapsed time go to stderr;
the summary table goes to stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..core.validation import require_int, require_positive
from ..experiments.plotting import figure_title, plot_figure
from ..experiments.report import panel_rows, summarize_rows, summary_markdown, write_csv
from ..experiments.runner import DataChoice, run_figures
from ..experiments.settings import (
    DEFAULT_GRID,
    DEFAULT_REPEATS,
    FIGURE_NAMES,
    QUICK_GRID,
    QUICK_REPEATS,
    resolve_figures,
    with_user_counts,
)

QUICK_FIGURE = "msnbc-s1"
"""The figure ``--quick`` runs when no ``--figure`` is given: the bundled data, one panel
per n, the smallest of the paper's figures to compute."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help="run the paper's experiments (baselines, m sweep) and write CSVs and figures",
        description="Reproduce the paper's experiments: the five baselines and the segmented "
                    "protocol over a sweep of the blanket rate m, for MSNBC and synthetic data.",
    )
    parser.add_argument("--figure", default=None, metavar="NAME",
                        help=f"one of {', '.join(FIGURE_NAMES)} (required, except with "
                             f"--quick, which runs {QUICK_FIGURE} by default)")
    parser.add_argument("--repeats", default=None, metavar="R",
                        help=f"repeats per panel (default {DEFAULT_REPEATS}; "
                             f"{QUICK_REPEATS} with --quick)")
    parser.add_argument("--out", default="results", metavar="DIR",
                        help="output directory (created if missing; default ./results)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_REPEATS} repeats, m grid "
                             f"{','.join(f'{m:g}' for m in QUICK_GRID)}, figure "
                             f"{QUICK_FIGURE} unless --figure names another")
    parser.add_argument("--grid", default=None, metavar="M1,M2,..",
                        help="blanket rates to sweep (default: 21 points from 0.1 to 10)")
    parser.add_argument("--seed", default="0", metavar="SEED", help="master seed (default 0)")
    parser.add_argument("--jobs", default=None, metavar="J",
                        help="worker processes (default: every core)")
    parser.add_argument("--users", default=None, metavar="N1,N2,..",
                        help="numbers of users per panel (default: the paper's 5000,50000)")
    parser.add_argument("--data", default=None, metavar="FILE",
                        help="transaction file (one user per line, whitespace-separated "
                             "integer item ids; .gz ok) replacing the bundled MSNBC data in "
                             "the msnbc-* figures")
    parser.set_defaults(handler=run)


def _grid(text: str) -> tuple[float, ...]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--grid must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError("--grid must list at least one blanket rate")
    return tuple(sorted({require_positive("every --grid value", v) for v in values}))


def chosen_figure(args: argparse.Namespace) -> str:
    """The ``--figure`` value, or :data:`QUICK_FIGURE` for a ``--quick`` run without one."""
    if args.figure is not None:
        return str(args.figure)
    if args.quick:
        return QUICK_FIGURE
    raise ValueError(f"--figure is required (one of {', '.join(FIGURE_NAMES)}), except with "
                     f"--quick, which runs {QUICK_FIGURE}")


def run(args: argparse.Namespace) -> int:
    name = chosen_figure(args)
    figures = resolve_figures(name)
    if args.users is not None:
        counts = tuple(require_int("every --users value", _integer("--users", part), 2)
                       for part in args.users.split(",") if part.strip())
        if not counts:
            raise ValueError("--users must list at least one number of users")
        figures = [with_user_counts(figure, counts) for figure in figures]
    repeats_default = QUICK_REPEATS if args.quick else DEFAULT_REPEATS
    repeats = require_int("--repeats", repeats_default if args.repeats is None
                          else _integer("--repeats", args.repeats), 1)
    seed = require_int("--seed", _integer("--seed", args.seed), 0)
    jobs = None if args.jobs is None else require_int("--jobs", _integer("--jobs", args.jobs), 1)
    default_grid = QUICK_GRID if args.quick else DEFAULT_GRID
    grid = _grid(args.grid) if args.grid is not None else default_grid
    data = DataChoice(path=args.data)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create output directory {out}: {exc.strerror}") from None

    started = time.perf_counter()
    results = run_figures(figures, repeats=repeats, grid=grid, seed=seed, jobs=jobs, data=data)
    all_rows = []
    for figure in figures:
        rows = [row for result in results if result.figure.name == figure.name
                for row in panel_rows(result)]
        all_rows.extend(rows)
        write_csv(out / f"{figure.name}.csv", rows)
        title = figure_title(figure.name, figure.dataset, data.label, figure.shares_name,
                             repeats)
        plot_figure(rows, out / f"{figure.name}.png", title)
        (out / f"{figure.name}-summary.md").write_text(summary_markdown(summarize_rows(rows)))
    summary = summary_markdown(summarize_rows(all_rows))
    if name == "all":
        write_csv(out / "all.csv", all_rows)
        (out / "all-summary.md").write_text(summary)
    elapsed = time.perf_counter() - started
    sys.stdout.write(summary)
    sys.stderr.write(f"reproduce: {name} with {repeats} repeats finished in "
                     f"{elapsed:.1f} s; wrote {out}\n")
    return 0


def _integer(flag: str, text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise ValueError(f"{flag} must be an integer, got {text!r}") from None

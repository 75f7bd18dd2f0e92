"""``segshuffle reproduce``: the paper's experiments, figures and CSVs in one command.

    segshuffle reproduce --figure msnbc-s1 --repeats 100 --out results/

writes ``results/msnbc-s1.csv``, ``results/msnbc-s1.png`` and
``results/msnbc-s1-summary.md``.  ``--figure all`` writes every figure's files and
``all.csv`` / ``all-summary.md`` covering them all.  ``--quick`` uses a few repeats
and a coarse m grid (a smoke run); without ``--figure`` it runs :data:`QUICK_FIGURE`.
Results are deterministic for a given
``--seed`` whatever ``--jobs`` is.  Progress and the elapsed time go to stderr;
the summary table goes to stdout.

Levels that go with items (docs/protocol.md section 5.1)::

    segshuffle reproduce --figure msnbc-s1 --users 5000 --grid none \
        --correlation 1,2,3 --correlated-items 0 --guard 2,3 --out results/

runs every method with the levels drawn independently (R = 1) and with the strict users
R times likelier (odds) among the holders of item 0 (``--correlation-mode sets``: the
level depends on the whole set), all from one plan; ``--guard`` adds the slot blanket
tuned for each R (``ours-r2``, ``ours-r3``).  ``NAME-correlation.md`` then lists every
method's MSE with its standard error and bias.  ``--plan-cache DIR`` keeps the plans
(public parameters only) for the next run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..core.correlation import require_correlation_ratio, require_largest_share
from ..core.validation import require_int, require_positive
from ..experiments.correlated_levels import MODES, Correlation
from ..experiments.plotting import figure_title, plot_figure
from ..experiments.report import (
    correlation_markdown,
    correlation_pivot_markdown,
    panel_rows,
    summarize_rows,
    summary_markdown,
    write_csv,
)
from ..experiments.runner import DataChoice, run_figures
from ..experiments.settings import (
    DEFAULT_GRID,
    DEFAULT_REPEATS,
    FIGURE_NAMES,
    QUICK_GRID,
    QUICK_REPEATS,
    resolve_figures,
    with_set_sizes,
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
                        help="blanket rates to sweep (default: 21 points from 0.1 to 10; "
                             "'none': no sweep, only each optimizer's m*)")
    parser.add_argument("--seed", default="0", metavar="SEED", help="master seed (default 0)")
    parser.add_argument("--jobs", default=None, metavar="J",
                        help="worker processes (default: every core)")
    parser.add_argument("--users", default=None, metavar="N1,N2,..",
                        help="numbers of users per panel (default: the paper's 5000,50000)")
    parser.add_argument("--set-sizes", default=None, metavar="S1,S2,..",
                        help="only the panels with these set sizes (default: the figure's)")
    parser.add_argument("--data", default=None, metavar="FILE",
                        help="transaction file (one user per line, whitespace-separated "
                             "integer item ids; .gz ok) replacing the bundled MSNBC data in "
                             "the msnbc-* figures")
    parser.add_argument("--correlation", default="1", metavar="R1,R2,..",
                        help="odds ratios R >= 1 of the strict level between the users the "
                             "correlation favours and the others; every value is run with "
                             "the same plans (default 1: levels independent of items)")
    parser.add_argument("--correlation-mode", default="items", choices=MODES,
                        help="items: the holders of --correlated-items are favoured; sets: "
                             "users holding rarely held items are favoured, R^(mean rarity "
                             "rank of the set's items) (default items)")
    parser.add_argument("--correlated-items", default="0", metavar="J1,J2,..",
                        help="item ids of the items mode (default 0)")
    parser.add_argument("--guard", default=None, metavar="R1,R2,..",
                        help="also run the slot blanket tuned for correlation up to each R > 1 "
                             "(methods ours-r<R>)")
    parser.add_argument("--largest-share", default="1", metavar="W",
                        help="the guarded variants consider items held by at most this share "
                             "of users (default 1: any item)")
    parser.add_argument("--plan-cache", default=None, metavar="DIR",
                        help="keep the panels' plans in DIR and reuse them when the code and "
                             "the public parameters are the same")
    parser.set_defaults(handler=run)


def _grid(text: str) -> tuple[float, ...]:
    if text.strip().lower() == "none":
        return ()
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


def _numbers(flag: str, text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{flag} must list at least one number")
    return values


def correlations_of(args: argparse.Namespace) -> tuple[Correlation, ...]:
    """The correlation settings ``--correlation``, ``--correlation-mode`` and
    ``--correlated-items`` ask for, in the order given (duplicates dropped)."""
    ratios = _ratios("--correlation", args.correlation)
    items = tuple(require_int("every --correlated-items value", _integer("--correlated-items",
                                                                          part), 0)
                  for part in args.correlated_items.split(",") if part.strip())
    if not items:
        raise ValueError("--correlated-items must list at least one item id")
    return tuple(Correlation(mode=args.correlation_mode, ratio=ratio, items=items)
                 for ratio in ratios)


def guards_of(args: argparse.Namespace) -> tuple[float, ...]:
    """The R > 1 of ``--guard`` (empty without it)."""
    if args.guard is None:
        return ()
    return tuple(sorted(_ratios("--guard", args.guard, above_one=True)))


def _ratios(flag: str, text: str, *, above_one: bool = False) -> list[float]:
    """The correlation ratios ``flag`` lists, each checked (``above_one``: R = 1 refused),
    in order, duplicates dropped."""
    ratios: list[float] = []
    for value in _numbers(flag, text):
        try:
            ratio = require_correlation_ratio(value)
        except ValueError as exc:
            raise ValueError(f"{flag}: {exc}") from None
        if above_one and ratio == 1.0:
            raise ValueError(f"{flag} values must be above 1 (R = 1 is the method ours)")
        if ratio not in ratios:
            ratios.append(ratio)
    return ratios


def run(args: argparse.Namespace) -> int:
    name = chosen_figure(args)
    figures = resolve_figures(name)
    if args.users is not None:
        counts = tuple(require_int("every --users value", _integer("--users", part), 2)
                       for part in args.users.split(",") if part.strip())
        if not counts:
            raise ValueError("--users must list at least one number of users")
        figures = [with_user_counts(figure, counts) for figure in figures]
    if args.set_sizes is not None:
        sizes = tuple(require_int("every --set-sizes value", _integer("--set-sizes", part), 1)
                      for part in args.set_sizes.split(",") if part.strip())
        figures = [with_set_sizes(figure, sizes) for figure in figures]
    repeats_default = QUICK_REPEATS if args.quick else DEFAULT_REPEATS
    repeats = require_int("--repeats", repeats_default if args.repeats is None
                          else _integer("--repeats", args.repeats), 1)
    seed = require_int("--seed", _integer("--seed", args.seed), 0)
    jobs = None if args.jobs is None else require_int("--jobs", _integer("--jobs", args.jobs), 1)
    default_grid = QUICK_GRID if args.quick else DEFAULT_GRID
    grid = _grid(args.grid) if args.grid is not None else default_grid
    data = DataChoice(path=args.data)
    correlations = correlations_of(args)
    guards = guards_of(args)
    try:
        largest_share = require_largest_share(_float("--largest-share", args.largest_share))
    except ValueError as exc:
        raise ValueError(f"--largest-share: {exc}") from None
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create output directory {out}: {exc.strerror}") from None

    started = time.perf_counter()
    results = run_figures(figures, repeats=repeats, grid=grid, seed=seed, jobs=jobs, data=data,
                          correlations=correlations, guards=guards,
                          largest_share=largest_share,
                          plan_cache=None if args.plan_cache is None else Path(args.plan_cache))
    correlated = any(not c.independent for c in correlations) or bool(guards)
    all_rows = []
    for figure in figures:
        rows = [row for result in results if result.figure.name == figure.name
                for row in panel_rows(result)]
        all_rows.extend(rows)
        write_csv(out / f"{figure.name}.csv", rows)
        independent = [row for row in rows if row["correlation"] == "none"]
        if independent and grid:
            title = figure_title(figure.name, figure.dataset, data.label, figure.shares_name,
                                 repeats)
            plot_figure(independent, out / f"{figure.name}.png", title)
        (out / f"{figure.name}-summary.md").write_text(summary_markdown(summarize_rows(rows)))
        if correlated:
            (out / f"{figure.name}-correlation.md").write_text(
                correlation_pivot_markdown(rows) + "\n" + correlation_markdown(rows))
    summary = summary_markdown(summarize_rows(all_rows))
    if name == "all":
        write_csv(out / "all.csv", all_rows)
        (out / "all-summary.md").write_text(summary)
        if correlated:
            (out / "all-correlation.md").write_text(
                correlation_pivot_markdown(all_rows) + "\n" + correlation_markdown(all_rows))
    elapsed = time.perf_counter() - started
    sys.stdout.write(summary)
    sys.stderr.write(f"reproduce: {name} with {repeats} repeats finished in "
                     f"{elapsed:.1f} s; wrote {out}\n")
    return 0


def _float(flag: str, text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{flag} must be a number, got {text!r}") from None


def _integer(flag: str, text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise ValueError(f"{flag} must be an integer, got {text!r}") from None

"""Results of an earlier accountant beside a new run, with the old parameters re-audited.

    python -m segshuffle.experiments.compare OLD.csv NEW.csv > comparison.md

Both files are ``reproduce`` CSVs (:mod:`segshuffle.experiments.report`).  For
every panel the old run's published parameters of the segmented protocol (m* and
the lambdas, from the ``detail`` column) are audited again with the user-level
accountant on the server's full view (:func:`segshuffle.core.accounting.user_epsilon`,
slot blanket, delta = 0.01 / n): the result is the guarantee those parameters
actually certify, to set beside the levels (0.5, 1, 2) the old run claimed.  The
lambdas are stored with 4 significant digits, so the re-audited epsilons carry a
relative uncertainty of about 1e-4.

The balls-into-bins baseline ``mm-shuffle`` is audited the same way: the
all-items variant by the user-level accountant at lambda = 1, the one-item
variant by its single-message pair (:func:`~segshuffle.experiments.balls_into_bins.pair_for`).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from ..core import accounting
from ..core.hockey_stick import epsilon_for
from .balls_into_bins import pair_for
from .methods import OURS, OURS_INDEPENDENT
from .report import read_csv, summarize_rows
from .settings import LEVELS, delta_for_users

Row = dict[str, str]


def parse_detail(detail: str) -> dict[str, str]:
    """``"lambdas=a/b/c; eps=x/y/z; ciphertexts=7"`` as a dictionary (old rows: lambdas only)."""
    fields = {}
    for part in detail.split(";"):
        if "=" in part:
            key, value = part.split("=", 1)
            fields[key.strip()] = value.strip()
    return fields


def ours_parameters(row: Row) -> tuple[float, tuple[float, ...]]:
    """(m, lambdas) of one row of a segmented variant."""
    lambdas = tuple(float(v) for v in parse_detail(row["detail"])["lambdas"].split("/"))
    return float(row["m"]), lambdas


def audited_epsilons(row: Row, mode: str = "slots") -> tuple[float | None, ...]:
    """The user-level epsilon (upper bound, None above the cap) each level's lambda certifies."""
    n, s, d = int(row["n"]), int(row["s"]), int(row["domain_size"])
    m, lambdas = ours_parameters(row)
    delta = delta_for_users(n)
    return tuple(accounting.user_epsilon(lam, s, delta, n, m, d, mode=mode) for lam in lambdas)


def baseline_parameters(detail: str) -> tuple[str, float]:
    """(variant, m) of a balls-into-bins row: ``"all-items m=8.288"``."""
    variant, rate = detail.split()[:2]
    return variant, float(rate.split("=")[1])


def audited_bib_epsilon(row: Row) -> float | None:
    """The user-level epsilon an ``mm-shuffle`` row's blanket certifies (upper bound)."""
    n, s, d = int(row["n"]), int(row["s"]), int(row["domain_size"])
    variant, m = baseline_parameters(row["detail"])
    delta = delta_for_users(n)
    if variant == "all-items":
        return accounting.user_epsilon(1.0, s, delta, n, m, d)
    return epsilon_for(pair_for(n, d, s, m), delta)


def _optimal(rows: Sequence[Row], method: str) -> Row | None:
    return next((r for r in rows if r["method"] == method and r["optimal"] == "true"), None)


def _panels(rows: Sequence[Row]) -> dict[tuple[str, int, int], list[Row]]:
    panels: dict[tuple[str, int, int], list[Row]] = {}
    for row in rows:
        panels.setdefault((row["figure"], int(row["n"]), int(row["s"])), []).append(row)
    return panels


def _eps(values: Sequence[float | None]) -> str:
    return "/".join(">cap" if v is None else f"{v:.3g}" for v in values)


def _eps_text(text: str) -> str:
    """Epsilons as stored in a CSV detail (``-``: above the cap), to 3 digits."""
    return "/".join(f"{float(v):.3g}" if v != "-" else ">cap" for v in text.split("/") if v)


def _lambdas(values: Sequence[float]) -> str:
    return "/".join(f"{v:.3g}" for v in values)


def _change(old: float, new: float) -> str:
    return f"{100.0 * (new / old - 1.0):+.0f}%"


def ours_table(old_rows: Sequence[Row], new_rows: Sequence[Row]) -> str:
    """Ours (slot blanket) at the optimizer's m*: old and new parameters, MSE and epsilons."""
    old_panels, new_panels = _panels(old_rows), _panels(new_rows)
    lines = [
        "| figure | n | s | old m* | old lambdas | old MSE | old claim | old parameters, "
        "audited eps | new m* | new lambdas | new MSE | new eps | MSE change |",
        "| --- | ---: | ---: | ---: | --- | ---: | --- | --- | ---: | --- | ---: | --- | ---: |",
    ]
    claim = "/".join(f"{level:g}" for level in LEVELS)
    for key, new in new_panels.items():
        old_star, new_star = _optimal(old_panels.get(key, []), OURS), _optimal(new, OURS)
        if old_star is None or new_star is None:
            continue
        old_m, old_lambdas = ours_parameters(old_star)
        new_m, new_lambdas = ours_parameters(new_star)
        new_eps = parse_detail(new_star["detail"]).get("eps", "")
        old_mse, new_mse = float(old_star["mse"]), float(new_star["mse"])
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {old_m:.3g} | {_lambdas(old_lambdas)} | "
            f"{old_mse:.3e} | {claim} | {_eps(audited_epsilons(old_star))} | {new_m:.3g} | "
            f"{_lambdas(new_lambdas)} | {new_mse:.3e} | {_eps_text(new_eps)} | "
            f"{_change(old_mse, new_mse)} |")
    return "\n".join(lines) + "\n"


def headline_table(old_rows: Sequence[Row], new_rows: Sequence[Row]) -> str:
    """Per panel: best baseline and ours (sweep, m*), old and new; ours-independent at its m*."""
    old_summary = {(p.figure, p.n, p.s): p for p in summarize_rows(list(old_rows))}
    lines = [
        "| figure | n | s | best baseline old -> new | its MSE old -> new | ours best swept "
        "MSE old -> new | ours m* MSE old -> new | ours-independent m* (ciphertexts) | its MSE "
        "| reduction old / new (m*) / independent (m*) |",
        "| --- | ---: | ---: | --- | --- | --- | --- | --- | ---: | --- |",
    ]
    for new in summarize_rows(list(new_rows)):
        key = (new.figure, new.n, new.s)
        old = old_summary.get(key)
        if old is None:
            continue
        star = _optimal(_panels(new_rows)[key], OURS_INDEPENDENT)
        ciphertexts = parse_detail(star["detail"]).get("ciphertexts", "?") if star else "?"
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {_short(old.best_baseline)} -> "
            f"{_short(new.best_baseline)} | {old.best_baseline_mse:.3e} -> "
            f"{new.best_baseline_mse:.3e} | {old.best_mse:.3e} -> {new.best_mse:.3e} | "
            f"{old.optimizer_mse:.3e} -> {new.optimizer_mse:.3e} | "
            f"{new.independent_m:.3g} ({ciphertexts}) | {new.independent_mse:.3e} | "
            f"{_percent(old.optimizer_reduction)} / {_percent(new.optimizer_reduction)} / "
            f"{_percent(new.independent_reduction)} |")
    return "\n".join(lines) + "\n"


def _short(method: str) -> str:
    return method.removesuffix("-shuffle")


def _percent(value: float) -> str:
    return "-" if math.isnan(value) else f"{100.0 * value:.0f}%"


def mm_table(old_rows: Sequence[Row], new_rows: Sequence[Row]) -> str:
    """``mm-shuffle`` (every user at 0.5): old and new blanket, and what the old one certifies.

    The baseline's parameters do not depend on the shares, so one line per
    (dataset, n, s); its MSE is the first figure's (S1, the first in the files).
    """
    def by_panel(rows: Sequence[Row]) -> dict[tuple[str, int, int], Row]:
        first: dict[tuple[str, int, int], Row] = {}
        for r in rows:
            if r["method"] == "mm-shuffle":
                first.setdefault((r["dataset"], int(r["n"]), int(r["s"])), r)
        return first

    old, new = by_panel(old_rows), by_panel(new_rows)
    lines = [
        "| dataset | n | s | old variant, m | old blanket, audited eps | new variant, m "
        "| old MSE -> new MSE |",
        "| --- | ---: | ---: | --- | ---: | --- | --- |",
    ]
    for key, row in new.items():
        if key not in old:
            continue
        before = old[key]
        old_variant, old_m = baseline_parameters(before["detail"])
        new_variant, new_m = baseline_parameters(row["detail"])
        audited = audited_bib_epsilon(before)
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {old_variant}, {old_m:.4g} | "
            f"{'>cap' if audited is None else f'{audited:.3g}'} | {new_variant}, {new_m:.4g} | "
            f"{float(before['mse']):.3e} -> {float(row['mse']):.3e} |")
    return "\n".join(lines) + "\n"


def comparison_markdown(old_rows: Sequence[Row], new_rows: Sequence[Row]) -> str:
    """All three tables, with headings."""
    return ("### Headline per panel\n\n" + headline_table(old_rows, new_rows)
            + "\n### Ours (slot blanket) at the optimizer's m*\n\n"
            + ours_table(old_rows, new_rows)
            + "\n### mm-shuffle (every user at eps = 0.5)\n\n" + mm_table(old_rows, new_rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="CSV of the earlier run")
    parser.add_argument("new", type=Path, help="CSV of the new run")
    args = parser.parse_args(argv)
    sys.stdout.write(comparison_markdown(read_csv(args.old), read_csv(args.new)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Turning panel results into CSV rows and per-panel summaries.

CSV columns (one row per method and panel; ``ours`` and ``ours-independent`` one
row per swept m plus the optimizer's m*, flagged ``optimal``):

``figure, dataset, shares, method, n, s, domain_size, m, mse, mse_std, repeats,
mse_bound, messages_per_user, optimal, detail, correlation, squared_bias, bias_max_z,
items_z3``

``m`` is empty for baselines; ``mse`` is the mean over repeats of
sum_j (W^_j - w_j)^2 over the real items (padding items excluded), w the sampled
users' own frequencies; ``mse_std`` the standard deviation over repeats;
``mse_bound`` the paper's bound for the segmented variants and the analytic
expectation for the balls-into-bins and subset-exponential baselines;
``messages_per_user`` the expected non-null messages per user; ``detail`` the
calibrated parameters (segmented variants: the lambdas, the achieved user-level
epsilons per level and the data ciphertexts of one fixed-size submission; the guarded
variants ``ours-r<R>`` also their bias bound).  ``correlation`` is the setting the
levels were drawn under (``none``, ``items:3``, ``sets:2``, ...).  The last three describe
the bias of each method's headline point (baselines, and the segmented variants at
their m*; empty on swept rows): with e_rj = W^_j - w_j in repeat r, mean e_j and
standard deviation sd_j over the N repeats, ``squared_bias`` is
sum_j (e_j^2 - sd_j^2 / N) (unbiased for sum_j b_j^2), ``bias_max_z`` the largest
|e_j| / (sd_j / sqrt(N)) over the real items and ``items_z3`` how many items have
|z| > 3.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.correlation import CorrelationGuard, relative_bias_bound
from .methods import BASELINES, OURS, OURS_INDEPENDENT, OURS_METHODS, PanelPlan, guarded_ratio
from .runner import PanelResult, expected_messages_ours, summarize
from .settings import SHARES, level_counts

COLUMNS = ("figure", "dataset", "shares", "method", "n", "s", "domain_size", "m", "mse",
           "mse_std", "repeats", "mse_bound", "messages_per_user", "optimal", "detail",
           "correlation", "squared_bias", "bias_max_z", "items_z3")


@dataclass(frozen=True)
class BiasSummary:
    """The bias of one method over a run's repeats (module docstring)."""

    squared_bias: float
    max_z: float
    items_z3: int


def bias_summary(item_errors: np.ndarray) -> BiasSummary:
    """:class:`BiasSummary` of a (repeats x items) array of W^_j - w_j."""
    errors = np.asarray(item_errors, dtype=float)
    repeats = errors.shape[0]
    mean = errors.mean(axis=0)
    if repeats < 2:
        return BiasSummary(float(np.sum(mean**2)), math.nan, 0)
    sd = errors.std(axis=0, ddof=1)
    se = sd / math.sqrt(repeats)
    z = np.divide(mean, se, out=np.zeros_like(mean), where=se > 0)
    return BiasSummary(squared_bias=float(np.sum(mean**2 - sd**2 / repeats)),
                       max_z=float(np.max(np.abs(z))) if z.size else 0.0,
                       items_z3=int(np.sum(np.abs(z) > 3.0)))


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.6g}"


def _baseline_facts(plan: PanelPlan, method: str) -> tuple[float | None, float, str]:
    """(analytic expected MSE or None, messages per user, detail) of a baseline."""
    s = plan.set_size
    if method in ("subexp-local", "subexp-shuffle"):
        mech = plan.local if method == "subexp-local" else plan.shuffled
        return (mech.total_variance(plan.n), 1.0,
                f"k={mech.subset_size} eps0={mech.epsilon:.4g}")
    if method == "mm-shuffle":
        c = plan.mm.config
        sent = 1.0 if c.variant == "one-item" else float(s)
        return plan.mm.expected_mse, sent + c.m, f"{c.variant} m={c.m:.4g}"
    parts, messages = [], 0.0
    for n_k, choice in zip(plan.counts, plan.sepmm, strict=True):
        c = choice.config
        sent = 1.0 if c.variant == "one-item" else float(s)
        messages += n_k * (sent + c.m) / plan.n
        parts.append(f"{c.variant} m={c.m:.4g}")
    detail = "; ".join(parts)
    if method == "weighted-sepmm-shuffle":
        detail += "; weights=" + "/".join(f"{w:.3f}" for w in plan.sepmm_weights)
    return None, messages, detail


def _bias_columns(result: PanelResult, method: str) -> dict[str, str]:
    errors = result.item_errors.get(method)
    if errors is None:
        return {"squared_bias": "", "bias_max_z": "", "items_z3": ""}
    summary = bias_summary(errors)
    return {"squared_bias": _fmt(summary.squared_bias), "bias_max_z": _fmt(summary.max_z),
            "items_z3": str(summary.items_z3)}


def panel_rows(result: PanelResult) -> list[dict[str, str]]:
    plan, figure, panel = result.plan, result.figure, result.panel
    repeats = len(result.errors[OURS])
    common = {"figure": figure.name, "dataset": figure.dataset, "shares": figure.shares_name,
              "n": str(panel.n), "s": str(panel.set_size),
              "domain_size": str(plan.domain_size), "repeats": str(repeats),
              "correlation": result.correlation.label}
    no_bias = {"squared_bias": "", "bias_max_z": "", "items_z3": ""}
    rows = []
    for method in BASELINES:
        mean, std = summarize([e[0] for e in result.errors[method]])
        expected, messages, detail = _baseline_facts(plan, method)
        rows.append({**common, "method": method, "m": "", "mse": _fmt(mean),
                     "mse_std": _fmt(std), "mse_bound": _fmt(expected),
                     "messages_per_user": _fmt(messages), "optimal": "", "detail": detail,
                     **_bias_columns(result, method)})
    for method in (*OURS_METHODS, *plan.guarded_methods):
        for index, point in enumerate(plan.points(method)):
            mean, std = summarize([e[index] for e in result.errors[method]])
            lambdas = "/".join(f"{lam:.4g}" for lam in point.lambdas)
            epsilons = "/".join("-" if e is None else f"{e:.4g}" for e in point.epsilons)
            detail = f"lambdas={lambdas}; eps={epsilons}; ciphertexts={point.ciphertexts}"
            if guarded_ratio(method) is not None:
                detail += f"; bias_bound={point.bias_bound:.4g}"
            rows.append({**common, "method": method, "m": _fmt(point.m), "mse": _fmt(mean),
                         "mse_std": _fmt(std), "mse_bound": _fmt(point.mse_bound),
                         "messages_per_user": _fmt(expected_messages_ours(
                             plan, point.lambdas, point.m)),
                         "optimal": "true" if point.optimal else "false",
                         "detail": detail,
                         **(_bias_columns(result, method) if point.optimal else no_bias)})
    return rows


def write_csv(path: Path, rows: Iterable[dict[str, str]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@dataclass(frozen=True)
class PanelSummary:
    """The headline numbers of one panel.

    ``independent_*`` describe ``ours-independent`` (NaN when the rows have none,
    e.g. results written before that variant existed).
    """

    figure: str
    n: int
    s: int
    best_m: float  # the swept m with the lowest measured MSE
    best_mse: float
    optimizer_m: float
    optimizer_mse: float
    best_baseline: str
    best_baseline_mse: float
    correlation: str = "none"
    independent_m: float = math.nan  # its optimizer's m*
    independent_mse: float = math.nan  # measured at that m*
    independent_best_mse: float = math.nan  # the lowest over its sweep and m*

    @property
    def reduction(self) -> float:
        """1 - (best ours over the sweep) / (best baseline)."""
        return 1.0 - self.best_mse / self.best_baseline_mse

    @property
    def optimizer_reduction(self) -> float:
        return 1.0 - self.optimizer_mse / self.best_baseline_mse

    @property
    def independent_reduction(self) -> float:
        """1 - (ours-independent at its m*) / (best baseline)."""
        return 1.0 - self.independent_mse / self.best_baseline_mse


def _optimal_row(rows: list[dict[str, str]], method: str) -> dict[str, str] | None:
    chosen = [r for r in rows if r["method"] == method and r["optimal"] == "true"]
    return chosen[0] if chosen else None


def summarize_rows(rows: list[dict[str, str]]) -> list[PanelSummary]:
    """One summary per (figure, n, s, correlation), from CSV rows (rows written before
    the correlation column are ``none``; a run without a sweep takes m* as its best m)."""
    def key_of(row: dict[str, str]) -> tuple[str, int, int, str]:
        return (row["figure"], int(row["n"]), int(row["s"]),
                row.get("correlation") or "none")

    keys = []
    for row in rows:
        key = key_of(row)
        if key not in keys:
            keys.append(key)
    summaries = []
    for figure, n, s, correlation in keys:
        mine = [r for r in rows if key_of(r) == (figure, n, s, correlation)]
        chosen = _optimal_row(mine, OURS)
        sweep = [r for r in mine if r["method"] == OURS and r["optimal"] != "true"] or \
            ([chosen] if chosen else [])
        independent = [r for r in mine if r["method"] == OURS_INDEPENDENT]
        independent_star = _optimal_row(mine, OURS_INDEPENDENT)
        baselines = [r for r in mine if r["method"] in BASELINES]
        best = min(sweep, key=lambda r: float(r["mse"]))
        top = min(baselines, key=lambda r: float(r["mse"]))
        summaries.append(PanelSummary(
            figure=figure, n=n, s=s, best_m=float(best["m"]), best_mse=float(best["mse"]),
            optimizer_m=float(chosen["m"]) if chosen else math.nan,
            optimizer_mse=float(chosen["mse"]) if chosen else math.nan,
            best_baseline=top["method"], best_baseline_mse=float(top["mse"]),
            correlation=correlation,
            independent_m=float(independent_star["m"]) if independent_star else math.nan,
            independent_mse=float(independent_star["mse"]) if independent_star else math.nan,
            independent_best_mse=min((float(r["mse"]) for r in independent),
                                     default=math.nan),
        ))
    return summaries


def _or_dash(value: float, spec: str, suffix: str = "") -> str:
    """``value`` formatted, or ``-`` when it is NaN (a variant the panel does not have)."""
    return "-" if math.isnan(value) else f"{value:{spec}}{suffix}"


def summary_markdown(summaries: list[PanelSummary]) -> str:
    """A markdown table of the panel summaries (``-``: no ``ours-independent`` in the panel)."""
    lines = [
        "| figure | n | s | best swept m | ours MSE there | optimizer m* | ours MSE at m* "
        "| ours-independent m* | its MSE | best baseline | its MSE | reduction (sweep) "
        "| reduction (m*) | reduction (independent m*) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: "
        "| ---: | ---: |",
    ]
    for p in summaries:
        figure = p.figure if p.correlation == "none" else f"{p.figure} [{p.correlation}]"
        lines.append(
            f"| {figure} | {p.n} | {p.s} | {p.best_m:.3g} | {p.best_mse:.3e} | "
            f"{p.optimizer_m:.3g} | {p.optimizer_mse:.3e} | {_or_dash(p.independent_m, '.3g')} | "
            f"{_or_dash(p.independent_mse, '.3e')} | {p.best_baseline} | "
            f"{p.best_baseline_mse:.3e} | {100 * p.reduction:.0f}% | "
            f"{100 * p.optimizer_reduction:.0f}% | "
            f"{_or_dash(100 * p.independent_reduction, '.0f', '%')} |"
        )
    return "\n".join(lines) + "\n"


def _headline_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Each method's headline row: baselines, and the segmented variants at m*."""
    return [r for r in rows if r["method"] in BASELINES or r["optimal"] == "true"]


def correlation_markdown(rows: list[dict[str, str]]) -> str:
    """Per (panel, correlation): every method's MSE with its standard error, the estimated
    summed squared bias, the largest |z| of an item's bias and the items with |z| > 3."""
    lines = [
        "| figure | n | s | correlation | method | m | MSE | standard error | squared bias "
        "| max abs z | items with abs z > 3 |",
        "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in _headline_rows(rows):
        repeats = int(row["repeats"])
        std = float(row["mse_std"]) if row["mse_std"] else math.nan
        se = std / math.sqrt(repeats) if repeats > 0 else math.nan
        m = f"{float(row['m']):.3g}" if row["m"] else ""
        lines.append(
            f"| {row['figure']} | {row['n']} | {row['s']} | "
            f"{row.get('correlation') or 'none'} | {row['method']} | {m} | "
            f"{float(row['mse']):.3e} | {se:.2e} | "
            f"{_or_blank(row.get('squared_bias'), '.2e')} | "
            f"{_or_blank(row.get('bias_max_z'), '.1f')} | {row.get('items_z3') or ''} |")
    return "\n".join(lines) + "\n"


def correlation_pivot_markdown(rows: list[dict[str, str]]) -> str:
    """One table per panel: a line per method, a column per correlation setting, each
    cell "MSE +- standard error (largest |z|; items with |z| > 3)" at the method's
    headline point."""
    headline = _headline_rows(rows)
    panels: list[tuple[str, str, str]] = []
    settings: list[str] = []
    methods: list[str] = []
    cells: dict[tuple[tuple[str, str, str], str, str], dict[str, str]] = {}
    for row in headline:
        panel = (row["figure"], row["n"], row["s"])
        setting = row.get("correlation") or "none"
        for seen, value in ((panels, panel), (settings, setting), (methods, row["method"])):
            if value not in seen:
                seen.append(value)
        cells[panel, setting, row["method"]] = row
    parts = []
    for panel in panels:
        figure, n, s = panel
        parts.append(f"{figure}, n = {n}, s = {s}\n")
        parts.append("| method | " + " | ".join(settings) + " |")
        parts.append("| --- |" + " ---: |" * len(settings))
        for method in methods:
            line = [method]
            for setting in settings:
                row = cells.get((panel, setting, method))
                line.append("" if row is None else _pivot_cell(row))
            parts.append("| " + " | ".join(line) + " |")
        parts.append("")
    return "\n".join(parts)


def _pivot_cell(row: dict[str, str]) -> str:
    repeats = int(row["repeats"])
    se = float(row["mse_std"]) / math.sqrt(repeats) if row["mse_std"] and repeats else math.nan
    z = row.get("bias_max_z")
    bias = f" ({float(z):.1f}; {row.get('items_z3') or 0})" if z else ""
    return f"{float(row['mse']):.3e} +- {se:.1e}{bias}"


def _or_blank(text: str | None, spec: str) -> str:
    if not text:
        return ""
    return f"{float(text):{spec}}"


def _lambdas_of(row: dict[str, str]) -> tuple[float, ...]:
    """The lambdas a segmented row's ``detail`` lists (``lambdas=a/b/c; ...``)."""
    text = row["detail"].split("lambdas=")[1].split(";")[0]
    return tuple(float(part) for part in text.split("/"))


def bias_bound_markdown(rows: list[dict[str, str]],
                        ratios: tuple[float, ...] = (2.0, 3.0)) -> str:
    """What the published parameters imply under correlation up to each R: for every
    segmented variant at its m* (``ours``, ``ours-independent``, ``ours-r<R>``), the bias
    bound beta of any one item and the relative bound phi (docs/protocol.md section 5.1),
    from the lambdas in the rows and the level counts of the shares (public only)."""
    header = "| figure | n | s | method | m* | lambdas | " + " | ".join(
        f"beta at R = {r:g} | phi at R = {r:g}" for r in ratios) + " |"
    lines = [header, "| --- | ---: | ---: | --- | ---: | --- |" + " ---: | ---: |" * len(ratios)]
    guards = {r: CorrelationGuard(r) for r in ratios}
    seen = set()
    for row in rows:
        if row["method"] in BASELINES or row["optimal"] != "true":
            continue
        key = (row["figure"], row["n"], row["s"], row["method"])
        if key in seen:
            continue
        seen.add(key)
        counts = level_counts(int(row["n"]), SHARES[row["shares"]])
        lambdas = _lambdas_of(row)
        cells = []
        for r in ratios:
            cells.append(f"{guards[r].bias_bound(counts, lambdas):.4f}")
            cells.append(f"{relative_bias_bound(counts, lambdas, r):.3f}")
        lines.append(f"| {row['figure']} | {row['n']} | {row['s']} | {row['method']} | "
                     f"{float(row['m']):.3g} | {'/'.join(f'{v:.4g}' for v in lambdas)} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m segshuffle.experiments.report bias-bounds CSV ...``: the bias bounds the
    runs' published parameters imply at R = 2 and 3 (:func:`bias_bound_markdown`)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("table", choices=["bias-bounds"])
    parser.add_argument("csv", nargs="+", type=Path)
    args = parser.parse_args(argv)
    rows = [row for path in args.csv for row in read_csv(path)]
    print(bias_bound_markdown(rows), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

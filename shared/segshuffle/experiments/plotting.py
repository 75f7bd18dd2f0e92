"""Figures: MSE against the blanket rate m, one panel per (n, s), log axes.

``ours`` (slot blanket) and ``ours-independent`` (independent blanket) are lines
over the swept m (each with the paper's MSE bound dotted and its optimizer's m*
as a marker); every baseline is a horizontal line at its measured MSE.  The m* markers
are drawn above every line (:data:`LINE_ZORDER`, :data:`OPTIMUM_ZORDER`), ``ours``' star
last and filled, ``ours-independent``'s plus hollow and larger, so that neither hides
the other where the two optima (nearly) coincide, and no baseline crosses them.  Rendering
uses matplotlib's Agg backend (no display needed); one legend below the panels serves
them all, so no legend covers a curve.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.artist import Artist
from matplotlib.figure import Figure

from .methods import BASELINES, OURS, OURS_INDEPENDENT

_STYLE = {
    "subexp-local": ("tab:gray", ":"),
    "subexp-shuffle": ("tab:brown", "-."),
    "mm-shuffle": ("tab:blue", "--"),
    "sepmm-shuffle": ("tab:orange", "--"),
    "weighted-sepmm-shuffle": ("tab:green", "-."),
    "ivw-sepmm-shuffle": ("tab:olive", "-"),
    "share-sepmm-shuffle": ("tab:cyan", ":"),
}

#: Colour, m* marker and label of each segmented variant.
_OURS_STYLE = {
    OURS: ("tab:red", "*", "ours (slot blanket)"),
    OURS_INDEPENDENT: ("tab:purple", "P", "ours-independent"),
}

#: Every curve and baseline is drawn at this zorder (matplotlib's default for lines).
LINE_ZORDER = 2.0

#: How each variant's m* marker is drawn: above every line, ``ours`` on top of all; the
#: independent marker hollow and larger, so that ``ours``' star shows inside it.
OPTIMUM_ZORDER = {OURS: 4.0, OURS_INDEPENDENT: 3.0}
_OPTIMUM_LOOK = {  # edge and face colours (None: the variant's colour), size, edge width
    OURS: {"mec": "black", "mfc": None, "ms": 13, "mew": 1.0},
    OURS_INDEPENDENT: {"mec": None, "mfc": "none", "ms": 15, "mew": 2.0},
}

#: Resolution of the saved PNG files.
DPI = 110

#: How a panel's title names each segmented variant's m*.
_SHORT = {OURS: "slots", OURS_INDEPENDENT: "independent"}


def figure_title(name: str, dataset: str, data_label: str, shares_name: str,
                 repeats: int) -> str:
    """The title line of one figure (the same for a run and a redraw); ``data_label`` names
    the MSNBC file a run read."""
    shown = data_label if dataset == "msnbc" else "synthetic T=128"
    return (f"{name}: {shown}, levels (0.5, 1, 2), shares {shares_name}, "
            f"delta = 0.01/n, {repeats} repeats")


def figure_of(rows: list[dict[str, str]], title: str) -> Figure:
    """The figure of one ``--figure`` name (rows of that figure only), not yet saved.

    One legend for all panels, below them, outside every axes (a legend inside a panel
    covers some curve whatever its place, since the curves span the whole panel); each
    panel's title gives the optimizer's m* of each segmented variant, which the stars mark.
    """
    panels: list[tuple[int, int]] = []
    for row in rows:
        key = (int(row["s"]), int(row["n"]))
        if key not in panels:
            panels.append(key)
    panels.sort()
    columns = 2
    lines = max(1, (len(panels) + columns - 1) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(6.0 * columns, 3.9 * lines + 1.4),
                             squeeze=False, layout="constrained")
    legend: dict[str, Artist] = {}
    for ax, (s, n) in zip(axes.ravel(), panels, strict=False):
        mine = [r for r in rows if int(r["n"]) == n and int(r["s"]) == s]
        optima: list[str] = []
        for method, (color, marker, label) in _OURS_STYLE.items():
            sweep = sorted((r for r in mine if r["method"] == method and r["optimal"] != "true"),
                           key=lambda r: float(r["m"]))
            ms = [float(r["m"]) for r in sweep]
            (measured,) = ax.plot(ms, [float(r["mse"]) for r in sweep], "o-", color=color,
                                  lw=2, ms=4, zorder=LINE_ZORDER)
            (bound,) = ax.plot(ms, [float(r["mse_bound"]) for r in sweep], ":", color=color,
                               lw=1, alpha=0.7, zorder=LINE_ZORDER)
            legend.setdefault(f"{label} (measured)", measured)
            legend.setdefault(f"{label} (MSE bound)", bound)
            for r in mine:
                if r["method"] == method and r["optimal"] == "true":
                    (star,) = ax.plot([float(r["m"])], [float(r["mse"])], marker,
                                      ls="none", color=color, zorder=OPTIMUM_ZORDER[method],
                                      **_optimum_look(method, color))
                    legend.setdefault(f"{label} at the optimizer's m*", star)
                    optima.append(f"{_SHORT[method]} {float(r['m']):.2g}")
        for r in mine:
            if r["method"] in BASELINES:
                color, style = _STYLE[r["method"]]
                line = ax.axhline(float(r["mse"]), color=color, ls=style, lw=1.6,
                                  zorder=LINE_ZORDER)
                legend.setdefault(r["method"], line)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("blanket messages per user m")
        ax.set_ylabel("MSE  sum_j (W^_j - w_j)^2")
        ax.set_title(f"n = {n}, s = {s}" + (f"  (m*: {', '.join(optima)})" if optima else ""))
        ax.grid(True, which="both", alpha=0.25)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title)
    if legend:
        fig.legend(list(legend.values()), list(legend.keys()), loc="outside lower center",
                   ncols=4, fontsize=8, frameon=False)
    return fig


def _optimum_look(method: str, color: str) -> dict[str, object]:
    """The m* marker's edge, face and size of ``method`` (its own colour where
    :data:`_OPTIMUM_LOOK` gives None)."""
    return {key: color if value is None else value
            for key, value in _OPTIMUM_LOOK[method].items()}


def plot_figure(rows: list[dict[str, str]], path: Path, title: str) -> None:
    """Write the figure of one ``--figure`` name (rows of that figure only) as PNG."""
    fig = figure_of(rows, title)
    try:
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)


def redraw(csv_path: Path) -> Path:
    """Draw the PNG beside a figure's CSV (as ``reproduce`` wrote them) from the CSV alone."""
    from .report import read_csv

    rows = read_csv(csv_path)
    if not rows:
        raise ValueError(f"{csv_path} holds no rows")
    first = rows[0]
    repeats = max(int(row["repeats"]) for row in rows if row["repeats"])
    title = figure_title(first["figure"], first["dataset"], first["dataset"], first["shares"],
                         repeats)
    out = csv_path.with_suffix(".png")
    plot_figure(rows, out, title)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m segshuffle.experiments.plotting FIGURE.csv ...``: redraw the figures
    from their CSV files (after a change to the drawing, without running anything)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("csv", nargs="+", type=Path)
    for path in parser.parse_args(argv).csv:
        print(redraw(path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

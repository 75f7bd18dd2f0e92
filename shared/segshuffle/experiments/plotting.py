"""Figures: MSE against the blanket rate m, one panel per (n, s), log axes.

``ours`` (slot blanket) and ``ours-independent`` (independent blanket) are lines
over the swept m (each with the paper's MSE bound dotted and its optimizer's m*
as a star); every baseline is a horizontal line at its measured MSE.  Rendering
uses matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .methods import BASELINES, OURS, OURS_INDEPENDENT

_STYLE = {
    "subexp-local": ("tab:gray", ":"),
    "subexp-shuffle": ("tab:brown", "-."),
    "mm-shuffle": ("tab:blue", "--"),
    "sepmm-shuffle": ("tab:orange", "--"),
    "weighted-sepmm-shuffle": ("tab:green", "-."),
}

#: Colour, star marker and label of each segmented variant.
_OURS_STYLE = {
    OURS: ("tab:red", "*", "ours (slot blanket)"),
    OURS_INDEPENDENT: ("tab:purple", "P", "ours-independent"),
}


def plot_figure(rows: list[dict[str, str]], path: Path, title: str) -> None:
    """Write the figure of one ``--figure`` name (rows of that figure only) as PNG."""
    panels: list[tuple[int, int]] = []
    for row in rows:
        key = (int(row["s"]), int(row["n"]))
        if key not in panels:
            panels.append(key)
    panels.sort()
    columns = 2
    lines = (len(panels) + columns - 1) // columns
    fig, axes = plt.subplots(lines, columns, figsize=(6.0 * columns, 4.2 * lines),
                             squeeze=False)
    for ax, (s, n) in zip(axes.ravel(), panels, strict=False):
        mine = [r for r in rows if int(r["n"]) == n and int(r["s"]) == s]
        for method, (color, marker, label) in _OURS_STYLE.items():
            sweep = sorted((r for r in mine if r["method"] == method and r["optimal"] != "true"),
                           key=lambda r: float(r["m"]))
            ms = [float(r["m"]) for r in sweep]
            ax.plot(ms, [float(r["mse"]) for r in sweep], "o-", color=color, lw=2, ms=4,
                    label=f"{label} (measured)")
            ax.plot(ms, [float(r["mse_bound"]) for r in sweep], ":", color=color, lw=1,
                    alpha=0.7, label=f"{label} (MSE bound)")
            for r in mine:
                if r["method"] == method and r["optimal"] == "true":
                    ax.plot([float(r["m"])], [float(r["mse"])], marker, color="black",
                            mfc=color, ms=12, label=f"{label} at its m*={float(r['m']):.2g}")
        for r in mine:
            if r["method"] in BASELINES:
                color, style = _STYLE[r["method"]]
                ax.axhline(float(r["mse"]), color=color, ls=style, lw=1.6, label=r["method"])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("blanket messages per user m")
        ax.set_ylabel("MSE  sum_j (W^_j - w_j)^2")
        ax.set_title(f"n = {n}, s = {s}")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7, loc="best")
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

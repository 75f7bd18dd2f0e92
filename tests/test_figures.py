"""The figures people look at: nothing covers the data, nothing is cut off or overprinted.

Each test renders the figure the code under test saves (captured at ``savefig``) and checks
it with :func:`tests.figure_support.collisions`; the checker itself is tested on figures
made to fail it, so a test here cannot pass by checking nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from segshuffle.cli.admin_results import write_png
from segshuffle.experiments import plotting
from segshuffle.experiments.plotting import plot_figure
from segshuffle.experiments.report import read_csv
from segshuffle.wire.models import Results

from .figure_support import capture_saved_figures, collisions

RESULTS_DIR = Path(__file__).resolve().parents[1] / "docs" / "results"
FIGURES = sorted(path.stem for path in RESULTS_DIR.glob("*.csv") if path.stem != "all")


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    """Every figure a test opens with pyplot is closed after it, whatever happened."""
    yield
    plt.close("all")


def _results(items: int, levels: list[float]) -> Results:
    """A results document shaped like the server's, with ``items`` items and the levels."""
    names = [f"item-{index:02d}" for index in range(items)]
    estimates = [0.6 * (0.93 ** index) - 0.02 for index in range(items)]
    users = [200 // len(levels) + index % 2 for index in range(len(levels))]  # near-even
    return Results.model_validate({
        "campaign_id": "fruit", "phase": "done",
        "items": [{"id": index, "name": name, "estimate": estimate, "standard_error": 0.05,
                   "projected": max(estimate, 0.0)}
                  for index, (name, estimate) in enumerate(zip(names, estimates, strict=True))],
        "padding": [],
        "privacy": {"delta": 5e-5, "m": 0.6, "lambdas": [0.5] * len(levels),
                    "users": sum(users), "accounting_users": sum(users),
                    "round2_users": sum(users), "insecure": False,
                    "levels": [{"level": level, "lam": 0.5, "epsilon_upper": level,
                                "epsilon_lower": level / 2, "users_round1": count,
                                "users_round2": count}
                               for level, count in zip(levels, users, strict=True)]},
        "round2_messages": 1000, "null_messages": 200, "dropped_messages": 0,
        "parameters_hash": "0" * 64})


@pytest.mark.parametrize(("items", "levels"), [
    (8, [0.5, 1.0, 2.0]),        # the README walkthrough's campaign
    (60, [0.5, 1.0, 2.0]),       # as many items as the plot shows
    (17, [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]),
    (3, [1.0]),
])
def test_results_png_keeps_legend_and_labels_off_the_data(tmp_path: Path, items: int,
                                                          levels: list[float]) -> None:
    """``admin results --format png``: the round 1 / round 2 legend used to sit on the
    bars of the level histogram."""
    with capture_saved_figures() as saved:
        write_png(_results(items, levels), tmp_path / "results.png")
    assert len(saved) == 1
    assert collisions(saved[0]) == []
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.parametrize("figure", FIGURES)
def test_reproduce_figures_keep_legends_off_the_curves(tmp_path: Path, figure: str) -> None:
    """``reproduce``'s figures, drawn from the committed results: the per-panel legends used
    to cover the curves and the baselines' lines."""
    rows = read_csv(RESULTS_DIR / f"{figure}.csv")
    with capture_saved_figures() as saved:
        plot_figure(rows, tmp_path / f"{figure}.png", f"{figure}: a title")
    assert len(saved) == 1
    assert collisions(saved[0]) == []


@pytest.mark.slow
def test_committed_figures_are_the_current_drawing() -> None:
    """The PNGs in docs/results were drawn by the current code: same size as a fresh
    drawing (a stale file keeps the old layout's height)."""
    from PIL import Image

    for figure in FIGURES:
        with Image.open(RESULTS_DIR / f"{figure}.png") as image:
            committed = image.size
        rows = read_csv(RESULTS_DIR / f"{figure}.csv")
        with capture_saved_figures() as saved:
            plot_figure(rows, Path("/dev/null"), figure)
        width, height = saved[0].get_size_inches() * plotting.DPI
        assert committed == (round(width), round(height)), figure


def test_checker_finds_a_legend_on_a_line_and_on_bars() -> None:
    figure, (left, right) = plt.subplots(1, 2)
    left.plot([0, 1], [0, 1], label="diagonal")
    left.legend(loc="center")
    right.bar([0, 1], [5, 5], label="bars")
    right.legend(loc="center")
    found = collisions(figure)
    assert any("covers line 'diagonal'" in problem for problem in found)
    assert any("covers a bar" in problem for problem in found)


def test_checker_finds_overprinted_tick_labels_and_a_clipped_legend() -> None:
    figure, ax = plt.subplots(figsize=(2, 2))
    ax.bar(range(4), [1, 2, 3, 4])
    ax.set_xticks(range(4), ["a long label"] * 4)
    ax.plot([0, 3], [0, 4], label="line")
    ax.legend(loc="upper left", bbox_to_anchor=(1.5, 1.0))
    found = collisions(figure)
    assert any("tick labels" in problem for problem in found)
    assert any("outside the figure" in problem for problem in found)


def test_checker_accepts_a_legend_beside_the_data() -> None:
    figure, ax = plt.subplots(layout="constrained")
    ax.plot([0, 1], [0, 1], label="diagonal")
    figure.legend(loc="outside lower center")
    assert collisions(figure) == []


def _panel_rows(optimum_m: float, optimum_mse: float) -> list[dict[str, str]]:
    """One panel's CSV rows: both segmented variants swept over m, their optima at the
    same (m*, MSE), and a baseline whose line runs right through that point."""
    rows = []
    base = {"figure": "f", "dataset": "msnbc", "shares": "S1", "n": "5000", "s": "4",
            "repeats": "4", "detail": ""}
    for method in (plotting.OURS, plotting.OURS_INDEPENDENT):
        for m in (0.1, 1.0, 10.0):
            rows.append({**base, "method": method, "m": str(m), "mse": str(0.001 / m + 0.001),
                         "mse_bound": str(0.002 / m + 0.002), "optimal": "false"})
        rows.append({**base, "method": method, "m": str(optimum_m), "mse": str(optimum_mse),
                     "mse_bound": str(2 * optimum_mse), "optimal": "true"})
    rows.append({**base, "method": "sepmm-shuffle", "m": "", "mse": str(optimum_mse),
                 "mse_bound": "", "optimal": ""})
    return rows


def test_the_optimum_markers_of_ours_are_drawn_on_top() -> None:
    """Where the two segmented variants share m* (and a baseline runs through it), the
    slot-blanket star is drawn last, above every line and above the independent marker,
    which is hollow and larger so that the star shows inside it; neither hides under
    a curve or a baseline."""
    fig = plotting.figure_of(_panel_rows(1.0, 0.002), "title")
    ax = fig.axes[0]
    lines = list(ax.lines)
    drawn = sorted(range(len(lines)), key=lambda i: (lines[i].get_zorder(), i))  # stable
    (star,) = [line for line in lines if line.get_marker() == "*"]
    (plus,) = [line for line in lines if line.get_marker() == "P"]
    curves = [line for line in lines if line not in (star, plus)]
    assert lines[drawn[-1]] is star and lines[drawn[-2]] is plus
    assert all(star.get_zorder() > plus.get_zorder() > line.get_zorder() for line in curves)
    assert plus.get_markerfacecolor() == "none"
    assert plus.get_markersize() > star.get_markersize()

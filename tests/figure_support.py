"""Checks a person makes when looking at a figure, made on the rendered figure itself.

:func:`collisions` draws a matplotlib figure (Agg) and lists what would be hard to read:

- a legend that covers data: a point of a plotted line (densified along its segments in
  display space, so a line crossing the legend counts even between its markers), an error
  bar, a marker of a scatter, or a bar;
- a legend that lies partly outside the figure (cut off in the saved file);
- tick labels of one axis that overlap each other, and a legend over an axes' title or tick
  labels.

:func:`capture_saved_figures` records the figures a function saves, so a test can check the
figure that the code under test really writes (whatever its internal structure).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import matplotlib

matplotlib.use("Agg")
import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection, LineCollection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.transforms import Bbox

SEGMENT_SAMPLES = 25
"""Points per line segment (in display space) tested against a legend's box."""


def _densified(points: np.ndarray) -> np.ndarray:
    """Display points of a polyline with :data:`SEGMENT_SAMPLES` points on every segment."""
    points = points[np.all(np.isfinite(points), axis=1)]
    if len(points) < 2:
        return points
    steps = np.linspace(0.0, 1.0, SEGMENT_SAMPLES)[:, None, None]
    starts, ends = points[:-1][None], points[1:][None]
    return (starts + steps * (ends - starts)).reshape(-1, 2)


def _collection_points(collection: Collection) -> list[np.ndarray]:
    """Display polylines of a collection: line segments, or the offsets of markers."""
    if isinstance(collection, LineCollection):
        transform = collection.get_transform()
        return [_densified(transform.transform(path.vertices))
                for path in collection.get_paths()]
    offsets = np.asarray(collection.get_offsets())
    if offsets.size == 0:
        return []
    return [collection.get_offset_transform().transform(offsets)]


def data_polylines(ax: Axes) -> list[tuple[str, np.ndarray]]:
    """Every plotted line, error bar and marker of ``ax`` as display points."""
    found: list[tuple[str, np.ndarray]] = []
    for line in ax.lines:
        if line.get_visible():
            display = line.get_transform().transform(line.get_path().vertices)
            found.append((f"line {line.get_label()!r}", _densified(display)))
    for collection in ax.collections:
        if collection.get_visible():
            found.extend((f"collection {collection.get_label()!r}", points)
                         for points in _collection_points(collection))
    return found


def _inside(points: np.ndarray, box: Bbox) -> bool:
    if len(points) == 0:
        return False
    x, y = points[:, 0], points[:, 1]
    return bool(np.any((x > box.x0) & (x < box.x1) & (y > box.y0) & (y < box.y1)))


def _tick_labels(axis: Axis) -> list:
    """The drawn tick labels of an axis: visible, non-empty, at a tick inside the view."""
    low, high = sorted(axis.get_view_interval())
    labels = []
    for ticks in (axis.get_major_ticks(), axis.get_minor_ticks()):
        for tick in ticks:
            label = tick.label1
            location = tick.get_loc()
            if (label.get_visible() and label.get_text() and location is not None
                    and low <= location <= high):
                labels.append(label)
    return labels


def legends_of(figure: Figure) -> list[Legend]:
    """The figure's legends and those of its visible axes."""
    found = list(figure.legends)
    found.extend(ax.get_legend() for ax in figure.axes
                 if ax.get_visible() and ax.get_legend() is not None)
    return found


def collisions(figure: Figure) -> list[str]:
    """What a reader would find hard to read in ``figure`` (empty: nothing)."""
    canvas = FigureCanvasAgg(figure)  # also for a figure pyplot has closed
    canvas.draw()
    renderer = canvas.get_renderer()
    problems: list[str] = []
    axes = [ax for ax in figure.axes if ax.get_visible()]
    legend_boxes = [(legend, legend.get_window_extent(renderer))
                    for legend in legends_of(figure)]
    whole = figure.bbox
    for legend, box in legend_boxes:
        if (box.x0 < whole.x0 - 1 or box.y0 < whole.y0 - 1 or box.x1 > whole.x1 + 1
                or box.y1 > whole.y1 + 1):
            problems.append(f"a legend ({_legend_name(legend)}) reaches outside the figure")
        for ax in axes:
            where = ax.get_title() or "an axes"
            for name, points in data_polylines(ax):
                if _inside(points, box):
                    problems.append(f"the legend ({_legend_name(legend)}) covers {name} "
                                    f"in {where!r}")
            for patch in ax.patches:
                if patch.get_visible() and patch.get_window_extent(renderer).overlaps(box):
                    problems.append(f"the legend ({_legend_name(legend)}) covers a bar "
                                    f"in {where!r}")
                    break
            texts = [ax.title, *_tick_labels(ax.xaxis), *_tick_labels(ax.yaxis)]
            for text in texts:
                if text.get_text() and text.get_window_extent(renderer).overlaps(box):
                    problems.append(f"the legend ({_legend_name(legend)}) covers the text "
                                    f"{text.get_text()!r} in {where!r}")
    for ax in axes:
        for axis_name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            boxes = [(label.get_text(), label.get_window_extent(renderer))
                     for label in _tick_labels(axis)]
            for index, (text, box) in enumerate(boxes):
                for other, other_box in boxes[index + 1:]:
                    if box.overlaps(other_box):
                        problems.append(f"{axis_name} tick labels {text!r} and {other!r} "
                                        f"overlap in {ax.get_title() or 'an axes'!r}")
    return problems


def _legend_name(legend: Legend) -> str:
    labels = [text.get_text() for text in legend.get_texts()]
    return ", ".join(labels[:3]) + (", ..." if len(labels) > 3 else "")


@contextlib.contextmanager
def capture_saved_figures() -> Iterator[list[Figure]]:
    """Within the block, every ``Figure.savefig`` also appends the figure to the list."""
    saved: list[Figure] = []
    original = Figure.savefig

    def recording(self: Figure, *args: object, **kwargs: object) -> None:
        saved.append(self)
        original(self, *args, **kwargs)

    Figure.savefig = recording  # type: ignore[method-assign]
    try:
        yield saved
    finally:
        Figure.savefig = original  # type: ignore[method-assign]

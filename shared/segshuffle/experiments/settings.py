"""The paper's experimental settings (Section "Experiments").

- Levels E = (0.5, 1, 2); delta = 0.01 / n.
- Level shares S1 = (25%, 50%, 25%), S2 = (50%, 25%, 25%), S3 = (25%, 25%, 50%).
- MSNBC: n in {5000, 50000} users sampled without replacement, s = 4 items each
  (padding/sampling of docs/protocol.md section 2, privacy domain 17 + 4 = 21).
- Synthetic: T = 128 items, s in {4, 8} uniform items per user, n in {5000, 50000}.
- The blanket rate m of the segmented protocol is swept over 0.1 .. 10.

One figure = one (dataset, shares) pair; one panel = one (n, s).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEVELS: tuple[float, ...] = (0.5, 1.0, 2.0)
SHARES: dict[str, tuple[float, ...]] = {
    "S1": (0.25, 0.50, 0.25),
    "S2": (0.50, 0.25, 0.25),
    "S3": (0.25, 0.25, 0.50),
}
USER_COUNTS: tuple[int, ...] = (5000, 50000)
MSNBC_SET_SIZES: tuple[int, ...] = (4,)
SYNTHETIC_SET_SIZES: tuple[int, ...] = (4, 8)
SYNTHETIC_ITEMS = 128

#: The uniform-level baselines: every user at the liberal level locally, at the
#: conservative level in the shuffle model (paper, "Competitive approaches").
LOCAL_EPSILON = 2.0
UNIFORM_EPSILON = 0.5

#: Sweep of the blanket rate: the paper's range 0.1 .. 10.
DEFAULT_GRID: tuple[float, ...] = tuple(
    float(f"{v:.3g}") for v in np.geomspace(0.1, 10.0, 21)
)
QUICK_GRID: tuple[float, ...] = (0.1, 0.3, 1.0, 3.0, 10.0)

DEFAULT_REPEATS = 500
QUICK_REPEATS = 4


def delta_for_users(n: int) -> float:
    """The paper's delta = 0.01 / n."""
    return 0.01 / n


@dataclass(frozen=True)
class Panel:
    """One (n, s) cell of a figure."""

    n: int
    set_size: int

    @property
    def label(self) -> str:
        return f"n={self.n}, s={self.set_size}"


@dataclass(frozen=True)
class Figure:
    """A figure of the paper: a dataset, a level-share setting, and its panels."""

    name: str
    dataset: str  # "msnbc" or "synthetic"
    shares_name: str
    panels: tuple[Panel, ...]

    @property
    def shares(self) -> tuple[float, ...]:
        return SHARES[self.shares_name]


def _figures() -> dict[str, Figure]:
    figures: dict[str, Figure] = {}
    for setting in ("S1", "S2", "S3"):
        tag = setting.lower()
        figures[f"msnbc-{tag}"] = Figure(
            name=f"msnbc-{tag}", dataset="msnbc", shares_name=setting,
            panels=tuple(Panel(n, s) for s in MSNBC_SET_SIZES for n in USER_COUNTS),
        )
    for setting in ("S1", "S2", "S3"):
        tag = setting.lower()
        figures[f"synthetic-{tag}"] = Figure(
            name=f"synthetic-{tag}", dataset="synthetic", shares_name=setting,
            panels=tuple(Panel(n, s) for s in SYNTHETIC_SET_SIZES for n in USER_COUNTS),
        )
    return figures


FIGURES: dict[str, Figure] = _figures()
FIGURE_NAMES: tuple[str, ...] = (*FIGURES, "all")


def resolve_figures(name: str) -> list[Figure]:
    """The figures a ``--figure`` value names (``all``: every figure)."""
    if name == "all":
        return list(FIGURES.values())
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; choose one of {', '.join(FIGURE_NAMES)}")
    return [FIGURES[name]]


def with_user_counts(figure: Figure, user_counts: tuple[int, ...]) -> Figure:
    """The figure with its panels' n replaced by ``user_counts`` (same set sizes)."""
    sizes = sorted({p.set_size for p in figure.panels})
    panels = tuple(Panel(n, s) for s in sizes for n in user_counts)
    return Figure(name=figure.name, dataset=figure.dataset, shares_name=figure.shares_name,
                  panels=panels)


def with_set_sizes(figure: Figure, set_sizes: tuple[int, ...]) -> Figure:
    """The figure's panels whose s is one of ``set_sizes`` (ValueError when none is)."""
    panels = tuple(p for p in figure.panels if p.set_size in set_sizes)
    if not panels:
        sizes = sorted({p.set_size for p in figure.panels})
        raise ValueError(f"{figure.name} has set sizes {', '.join(map(str, sizes))}, not "
                         f"{', '.join(map(str, set_sizes))}")
    return Figure(name=figure.name, dataset=figure.dataset, shares_name=figure.shares_name,
                  panels=panels)


def level_counts(n: int, shares: tuple[float, ...]) -> list[int]:
    """Exact level counts n_k = round(share_k n), the last one absorbing rounding."""
    counts = [round(share * n) for share in shares[:-1]]
    counts.append(n - sum(counts))
    if min(counts) < 0:
        raise ValueError("shares do not split the users")
    return counts

"""The output formats of ``segshuffle admin results``: table, json, csv and png.

- ``json``: the server's :class:`~segshuffle.wire.models.Results` document.
- ``table``: one line per item (id, name, estimate, standard error, projected estimate),
  then the privacy report (delta, users, epsilon per level).
- ``csv``: RFC 4180, header ``id,name,estimate,standard_error,projected`` and one row per
  item (empty cell: no value; numbers as Python's shortest round-trip ``repr``, so they
  read back exactly).  Everything else of the document (privacy report, message counts,
  parameters hash, padding estimates) goes to a second file next to it,
  ``<out without suffix>.privacy.json``, so the two files together hold the whole document.
- ``png`` (matplotlib, the ``experiments`` extra): the estimates with +-1 standard error bars
  next to the item names (the ``MAX_PLOTTED_ITEMS`` largest), and the level histogram
  (users per privacy level in rounds 1 and 2).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

from segshuffle.wire.models import Results

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CSV_HEADER = ("id", "name", "estimate", "standard_error", "projected")
MAX_PLOTTED_ITEMS = 60


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _text(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def to_table(results: Results) -> str:
    """A plain-text table of the estimates, then the privacy report."""
    names = [item.name if item.name is not None else "" for item in results.items]
    width = max([4, *(len(name) for name in names)])
    lines = [f"campaign {results.campaign_id} ({results.phase})",
             f"{'id':>6}  {'name':<{width}}  {'estimate':>9}  {'std.err':>9}  {'projected':>9}"]
    for item, name in zip(results.items, names, strict=True):
        lines.append(f"{item.id:>6}  {name:<{width}}  {_text(item.estimate):>9}  "
                     f"{_text(item.standard_error):>9}  {_text(item.projected):>9}")
    privacy = results.privacy
    lines.append(f"privacy: delta={privacy.delta:g}, users={privacy.users}, "
                 f"round-2 users={privacy.round2_users}, "
                 f"fake tolerance={privacy.fake_tolerance:g}"
                 + (", INSECURE parameters" if privacy.insecure else ""))
    for level in privacy.levels:
        lines.append(f"  level {level.level:g}: epsilon <= {_text(level.epsilon_upper)} "
                     f"(lower bound {_text(level.epsilon_lower)}), "
                     f"users {level.users_round1:g} / {level.users_round2:g}")
    if privacy.level_pairs:
        lines.append("level privacy, round 2 (a change of level, the items unchanged): "
                     + ("round 1 sends the level itself" if privacy.level_privacy is None
                        else f"round 1 eps_p = {privacy.level_privacy:g}"))
        for pair in privacy.level_pairs:
            both = ("" if pair.epsilon_both_rounds is None
                    else f", both rounds <= {pair.epsilon_both_rounds:.4g}")
            lines.append(f"  levels {pair.levels[0]:g} / {pair.levels[1]:g} (lambdas "
                         f"{pair.lambdas[0]:.4g} / {pair.lambdas[1]:.4g}): epsilon <= "
                         f"{_text(pair.epsilon_upper)} (lower bound "
                         f"{_text(pair.epsilon_lower)}){both}")
    elif privacy.level_pairs is not None:
        lines.append("level privacy, round 2: every level sends at the same rate")
    lines.append(f"round-2 messages: {results.round2_messages} "
                 f"({results.null_messages} null, {results.dropped_messages} dropped)")
    return "\n".join(lines) + "\n"


def to_json(results: Results) -> str:
    return results.model_dump_json(indent=2) + "\n"


def to_csv(results: Results) -> str:
    """The item rows (see the module docstring)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for item in results.items:
        writer.writerow([item.id, item.name if item.name is not None else "",
                         _number(item.estimate), _number(item.standard_error),
                         _number(item.projected)])
    return buffer.getvalue()


def privacy_path(out: Path) -> Path:
    """Where ``csv`` puts the rest of the document: ``results.csv`` -> ``results.privacy.json``."""
    return out.with_suffix(".privacy.json")


def privacy_document(results: Results) -> str:
    """Everything of the document but the item rows (the CSV's companion file)."""
    return json.dumps(results.model_dump(mode="json", exclude={"items"}), indent=2) + "\n"


def results_figure(results: Results) -> Figure:
    """Estimates with error bars by item name, and the users per privacy level with each
    level's certified epsilon and lambda; the level axis leaves a quarter of its height
    above the tallest bar for the legend, so the legend never covers a bar."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    items = [item for item in results.items if item.estimate is not None]
    items.sort(key=lambda item: item.estimate or 0.0, reverse=True)
    shown = items[:MAX_PLOTTED_ITEMS][::-1]
    labels = [item.name or f"item {item.id}" for item in shown]
    height = 2.0 + 0.25 * max(len(shown), 8)
    levels = results.privacy.levels
    level_width = max(4.8, 1.25 * len(levels))  # inches: each level's label fits
    figure, (left, right) = plt.subplots(
        1, 2, figsize=(7.2 + level_width, height),
        gridspec_kw={"width_ratios": [7.2, level_width]}, layout="constrained")
    left.barh(range(len(shown)), [item.estimate or 0.0 for item in shown],
              xerr=[item.standard_error or 0.0 for item in shown], capsize=2,
              color="tab:blue")
    left.set_yticks(range(len(shown)), labels)
    left.axvline(0.0, color="black", linewidth=0.5)
    left.set_xlabel("estimated share of users (+-1 standard error)")
    total = len(results.items)
    left.set_title(f"{results.campaign_id}: estimates"
                   + (f" (largest {len(shown)} of {total})" if len(shown) < total else ""))
    positions = range(len(levels))
    right.bar([p - 0.2 for p in positions], [lv.users_round1 for lv in levels], 0.4,
              label="round 1 (levels)")
    right.bar([p + 0.2 for p in positions], [lv.users_round2 for lv in levels], 0.4,
              label="round 2 (items)")
    right.set_xticks(list(positions),
                     [f"level {lv.level:g}\neps <= {_text(lv.epsilon_upper, 2)}"
                      f"\nlambda {_text(lv.lam, 2)}" for lv in levels])
    right.set_ylabel("users")
    right.set_title("users per privacy level")
    tallest = max((max(lv.users_round1, lv.users_round2) for lv in levels), default=0.0)
    right.set_ylim(0.0, 1.25 * tallest if tallest > 0 else 1.0)  # room for the legend
    right.legend(loc="upper center", ncols=2, fontsize=9)
    return figure


def write_png(results: Results, out: Path) -> None:
    """Write :func:`results_figure` as a PNG file."""
    from matplotlib import pyplot as plt

    figure = results_figure(results)
    try:
        figure.savefig(out, format="png", dpi=100)
    finally:
        plt.close(figure)

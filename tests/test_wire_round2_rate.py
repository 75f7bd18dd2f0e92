"""The normative spec sends round 2's items at the chosen level's lambda, as both SDKs do.

docs/wire.md section 5.2 told a client to send at the *reported* level's lambda.  With
level privacy the reported index is randomized, so a client written from the spec sent a
strict level's items at a laxer level's rate, outside the published guarantee.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from segshuffle.core.accounting import user_delta_lower

WIRE = Path(__file__).resolve().parents[1] / "docs" / "wire.md"


def _item_slots_step() -> str:
    text = WIRE.read_text(encoding="utf-8")
    section = text[text.index("### 5.2 Round 2"):text.index("### 5.3")]
    match = re.search(r"^3\. \*\*Item slots\*\*(.*?)^4\. ", section, re.S | re.M)
    assert match is not None, "section 5.2 has no item-slots step"
    return " ".join(match.group(1).split())


def test_the_item_slots_step_names_the_chosen_level_not_the_reported_one() -> None:
    step = _item_slots_step()
    assert "`lambdas[k]`, k the index of the level the user **chose**" in step
    assert "never the reported one" in step
    assert "k the reported level's index" not in step


def test_the_documented_figure_is_what_sending_at_the_reported_rate_exhibits() -> None:
    """The step's example: s = 1, 1000 honest users, D = 21, m = 1.5, lambdas 0.832 (level
    0.5) and 1, eps_p = 0.5 over K = 2 levels."""
    step = _item_slots_step()
    keep = math.exp(0.5) / (math.exp(0.5) + 1.0)
    lam = keep * 0.8322 + (1.0 - keep) * 1.0  # 0.8322: level 0.5's lambda there
    assert f"{lam:.3f}" == "0.896" and "probability 0.896" in step
    ratio = user_delta_lower(0.5, lam, 1, 1000, 1.5, 21) / 1e-5
    assert f"{ratio:.1f} times delta" in step
    assert ratio > 1.0  # the strict level's guarantee is lost

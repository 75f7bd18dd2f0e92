"""The connect-the-dots grid never raised a certified delta: every point of the vectors,
against the values of the accountant that rounded losses up on a grid ten times finer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from segshuffle.core.accounting import user_delta

pytestmark = pytest.mark.slow  # 165 certified bounds, about 30 CPU-s

POINTS = json.loads((Path(__file__).parent / "data" / "delta_user_on_the_fine_grid.json")
                    .read_text())["points"]


@pytest.mark.parametrize("point", POINTS, ids=lambda p: (
    f"{p['mode']}-s{p['set_size']}-d{p['domain_size']}-h{p['users']}-m{p['m']:.4g}"
    f"-lam{p['lam']:.4g}-E{p['level']}"))
def test_no_certified_delta_rose_when_the_grid_got_coarser(point: dict) -> None:
    now = user_delta(point["level"], point["lam"], point["set_size"], point["users"],
                     point["m"], point["domain_size"], mode=point["mode"],
                     delta=point["delta"])
    # A relative 1e-12 for the summation order, and 1e-20 absolute: at the 1e-15 floor of
    # the certified margins the bound underneath is about 1e-24, where the rounding of its
    # compositions moves it, eight orders of magnitude below the smallest delta a
    # campaign may ask for (1e-12).  Nothing more may be added.
    assert now <= point["delta_user"] * (1.0 + 1e-12) + 1e-20

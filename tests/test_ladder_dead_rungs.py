"""The labelled-groups and level ladders stop before their first rung charged 1.

Once the union bound min(1, S Pr[N_1 <= k_j]) reaches 1 the Abel sum's later terms
telescope: the rungs from k_j on weigh nothing, yet F was evaluated there (for S = 8 the
two largest groups, the costliest compositions: a fifth of a certified optimize at
n = 1e4).  The cut ladder's bound is the same formula on a shorter ladder: equal to the
full one up to rounding, never larger.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from segshuffle.core import arrays, level_privacy, slot_groups
from segshuffle.core.blanket import BlanketMode
from segshuffle.core.privacy_loss import DEFAULT_STEP

from .node_support import run_accountant_script

# (N slots, gamma, d, S, slack): the optimizer's choices at n = 1e4, 1e3 (d = 128, s = 8),
# a million users (three live rungs) and s = 3 on a small domain.
GEOMETRIES = [
    (10_000 * 2, 1.64 / 2, 128, 8, 1e-10),
    (1_000 * 17, 16.4 / 17, 128, 8, 1e-10),
    (1_000_000, 0.222, 128, 8, 1e-10),
    (20 * 52, 51.07 / 52, 8, 3, 1e-10),
]


def _full_ladder(bound: slot_groups.GroupsBound) -> tuple[list[int], list[float]]:
    """The sigma-spaced ladder before the cut, as the module's constructor lays it out."""
    n, p = bound.n_slots, bound.p_group
    mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
    ladder = [bound.ladder[0]]
    for z in slot_groups.LADDER_SIGMAS:
        k = min(n, math.floor(mean + z * sd))
        if k > ladder[-1] and (k - ladder[-1]) > slot_groups.LADDER_MERGE * k:
            ladder.append(k)
    xp = arrays.namespace()
    return ladder, [min(xp.binom_cdf(k, n, p) * bound.pairs, 1.0) for k in ladder]


def _abel(values: list[float], charged: list[float]) -> float:
    v = [1.0, *values]
    for i in range(len(v) - 2, -1, -1):
        v[i] = max(v[i], v[i + 1])
    return min(1.0, v[-1] + sum(c * (v[i] - v[i + 1]) for i, c in enumerate(charged)))


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_no_rung_is_charged_one(geometry) -> None:
    bound = slot_groups.GroupsBound(*geometry)
    full, charged = _full_ladder(bound)
    assert 1.0 in charged  # the union bound does reach 1 on the sigma ladder
    assert all(c < 1.0 for c in bound.ladder_cdf)
    cut = charged.index(1.0)
    assert bound.ladder == full[:cut]
    assert bound.ladder_cdf == charged[:cut]


@pytest.mark.parametrize("geometry", GEOMETRIES[:2])
def test_the_cut_ladder_builds_no_dead_rung_and_keeps_the_value(geometry,
                                                               composed_group_sizes) -> None:
    slot_groups.clear_caches()
    bound = slot_groups.GroupsBound(*geometry)
    full, charged = _full_ladder(bound)
    built = composed_group_sizes
    eps, lam = 1.0, 0.5
    value = bound.ladder_delta(eps, lam)
    assert sorted(set(built)) == [k + 1 for k in bound.ladder]
    assert max(built) < full[charged.index(1.0)] + 1
    every = [bound._f(k + 1, eps, lam) for k in full]
    assert value <= _abel(every, charged)
    assert value == pytest.approx(_abel(every, charged), rel=1e-12, abs=1e-300)


def test_the_level_ladder_stops_before_its_first_rung_charged_one() -> None:
    setting = level_privacy.LevelSetting(users=10_000, m=1.64, domain_size=128, set_size=8,
                                         mode=BlanketMode.SLOTS)
    ladder = level_privacy._Ladder(setting, 1e-10)
    assert len(ladder.ladder) >= 3
    assert np.all(ladder.cdf < 1.0)
    n, p = setting.n_slots, ladder.p_group
    top = min(n, math.floor(n * p + level_privacy.LADDER_SIGMAS[-1] * math.sqrt(n * p * (1 - p))))
    assert ladder.ladder[-1] < top  # the sigma ladder's top rung, charged 1, is cut


_LADDER_SCRIPT = """
const geometries = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
import(process.argv[1]).then(({ GroupsBound }) => {
  console.log(JSON.stringify(geometries.map((g) => {
    const bound = new GroupsBound(...g);
    return [bound.ladder, bound.ladderCdf];
  })));
});
"""


def test_the_javascript_ladder_is_cut_alike() -> None:
    cut = run_accountant_script(_LADDER_SCRIPT, "slot_groups.js",
                                [[*g, DEFAULT_STEP] for g in GEOMETRIES])
    for geometry, (ladder, charged) in zip(GEOMETRIES, cut, strict=True):
        bound = slot_groups.GroupsBound(*geometry)
        assert ladder == bound.ladder
        assert charged == pytest.approx(bound.ladder_cdf, rel=1e-9, abs=1e-300)

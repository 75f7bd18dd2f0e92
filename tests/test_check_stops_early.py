"""A client's check of delta_user <= delta stops at the first slot bound that certifies it.

``user_delta(..., enough=delta)`` may return a larger bound than the smallest one, but
only at or below ``delta``: the verdict is the full computation's, in all three
accountants, and the costly revealed-send bound is not built where the labelled groups
already certify the level.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from segshuffle.core import accounting
from segshuffle.core.portable import accounting as portable_accounting

from .node_support import node
from .test_portable_pairs import ACCOUNTANT_JS

DELTA = 1e-8

#: (level, lambda, s, h, m, d): large campaigns whose groups certify their level (the first
#: two; before, each check also built the revealed-send bound: 1.7 CPU-s for the first),
#: one whose rate is far above its constraint (every bound is taken), and a small one.
CAMPAIGNS = [
    (0.5, 0.387, 8, 6_758_661, 7.483665219857224, 279),
    (1.0, 0.3, 4, 9_294_142, 0.111, 185),
    (0.5, 0.95, 3, 20_000, 2.5, 64),
    (1.0, 0.5, 2, 500, 1.5, 40),
]


def _both(implementation, case: tuple) -> tuple[float, float]:
    level, lam, s, h, m, d = case
    full = implementation.user_delta(level, lam, s, h, m, d, delta=DELTA)
    early = implementation.user_delta(level, lam, s, h, m, d, delta=DELTA, enough=DELTA)
    return full, early


@pytest.mark.parametrize("implementation", [
    pytest.param(accounting, id="numpy"),
    # The full computation costs the pure-Python accountant up to 18 CPU-s here.
    pytest.param(portable_accounting, id="portable", marks=pytest.mark.slow),
])
@pytest.mark.parametrize("case", CAMPAIGNS)
def test_stopping_early_keeps_the_verdict(implementation, case: tuple) -> None:
    full, early = _both(implementation, case)
    assert (early <= DELTA) == (full <= DELTA)
    assert early >= full  # a bound among those the full computation takes the least of
    if full > DELTA:
        assert early == full


def test_the_groups_certify_without_the_revealed_send_bound() -> None:
    accounting.clear_caches()
    level, lam, s, h, m, d = CAMPAIGNS[0]
    assert accounting.user_delta(level, lam, s, h, m, d, delta=DELTA, enough=DELTA) <= DELTA
    bound = accounting._slot_bound(h, m, d, s, accounting.POISSON_SLACK_SHARE * DELTA,
                                   accounting.DEFAULT_STEP)  # the cached one user_delta used
    assert bound.groups is not None
    assert bound._revealed is None  # never built
    # Asked for the least bound, it builds it.
    accounting.user_delta(level, lam, s, h, m, d, delta=DELTA)
    assert bound._revealed is not None


_NODE = """
const { userDelta } = await import(process.argv[1]);
const delta = Number(process.argv[3]);
const out = JSON.parse(process.argv[2]).map(([level, lam, s, h, m, d]) => [
  userDelta(level, lam, s, h, m, d, { delta }),
  userDelta(level, lam, s, h, m, d, { delta, enough: delta }),
]);
console.log(JSON.stringify(out));
"""


@pytest.mark.slow
def test_the_javascript_accountant_stops_early_with_the_same_verdicts() -> None:
    done = subprocess.run([node(), "--input-type=module", "-e", _NODE,
                           (ACCOUNTANT_JS / "index.js").as_uri(), json.dumps(CAMPAIGNS),
                           repr(DELTA)],
                          capture_output=True, text=True, timeout=600, check=True)
    for (full, early), case in zip(json.loads(done.stdout), CAMPAIGNS, strict=True):
        assert (early <= DELTA) == (full <= DELTA), case
        assert early >= full, case
        if full > DELTA:
            assert early == full, case

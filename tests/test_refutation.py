"""A client refuses parameters an exhibited pair of datasets shows unsafe, before any upper
bound: ``refuting_delta`` in the three accountants, and the check that asks it first."""

from __future__ import annotations

import math
import random

import pytest

from segshuffle.core import accounting, slot_groups
from segshuffle.core.accounting import blanket_geometry, refuting_delta, user_delta
from segshuffle.core.portable import accounting as portable_accounting

from .node_support import run_accountant_script


def _points(count: int, seed: int) -> list[tuple[float, float, int, int, float, int]]:
    """(level, lambda, s, h, m, d): h from 8 to 1e7, m from 0.05 to 20 and d from 2 s + 2
    to 16384, each uniform in its logarithm."""
    rng = random.Random(seed)
    points = []
    for _ in range(count):
        s = rng.randint(1, 8)
        d = round((2 * s + 2) * (16384 / (2 * s + 2)) ** rng.random())
        points.append((rng.choice([0.25, 0.5, 1.0, 2.0]), rng.uniform(0.02, 1.0), s,
                       round(8 * (1e7 / 8) ** rng.random()),
                       min(0.05 * 400 ** rng.random(), float(d)), d))
    return points


def _exact_pair_divergence(level: float, lam: float, n_slots: int, r: float) -> float:
    """D_{e^E}(P || Q) of the two-bin counts by enumerating every (a, b): the blanket puts
    Multinomial(N; r, r) on (j0, j1), the victim adds one to j0 (P) or j1 (Q) w.p. lambda."""
    e = math.exp(level)
    rest = 1.0 - 2.0 * r

    def blanket(a: int, b: int) -> float:
        if a < 0 or b < 0 or a + b > n_slots:
            return 0.0
        return (math.comb(n_slots, a) * math.comb(n_slots - a, b)
                * r ** (a + b) * rest ** (n_slots - a - b))

    terms = []
    for a in range(n_slots + 2):
        for b in range(n_slots + 2 - a):
            p = (1.0 - lam) * blanket(a, b) + lam * blanket(a - 1, b)
            q = (1.0 - lam) * blanket(a, b) + lam * blanket(a, b - 1)
            terms.append(max(0.0, p - e * q))
    return math.fsum(terms)


@pytest.mark.parametrize(("users", "m", "d", "lam", "level"), [
    (8, 0.5, 16, 1.0, 0.5), (12, 1.0, 40, 0.6, 1.0), (5, 2.7, 9, 0.9, 0.25),
    (20, 0.2, 4, 0.3, 0.1), (30, 1.5, 64, 1.0, 2.0),
])
def test_the_refutation_never_exceeds_the_exhibited_pairs_exact_divergence(
        users: int, m: float, d: int, lam: float, level: float) -> None:
    n_slots, r = blanket_geometry(users, m, d, every_slot=True)
    exact = _exact_pair_divergence(level, lam, n_slots, r)
    assert exact > 1e-6  # the cases are chosen to be refuted
    for refute in (refuting_delta, portable_accounting.refuting_delta):
        value = refute(level, lam, 2, users, m, d, delta=1e-6)
        assert value is not None and value <= exact
        assert value == pytest.approx(exact, rel=1e-8)


def test_the_refutation_is_below_every_upper_bound_and_refutes_only_above_delta() -> None:
    delta = 1e-8
    refuted = 0
    for level, lam, s, h, m, d in _points(60, 20261128):
        lower = refuting_delta(level, lam, s, h, m, d, delta=delta)
        if lower is None:
            continue
        refuted += 1
        assert delta < lower <= user_delta(level, lam, s, h, m, d, delta=delta)
    assert refuted >= 20


def test_the_three_accountants_refute_alike() -> None:
    points = _points(40, 7)
    numpy_values = [refuting_delta(*p, delta=1e-8) for p in points]
    portable_values = [portable_accounting.refuting_delta(*p, delta=1e-8) for p in points]
    script = """
const points = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
import(process.argv[1]).then(({ refutingDelta }) => {
  console.log(JSON.stringify(points.map((p) => refutingDelta(...p, { delta: 1e-8 }))));
});
"""
    javascript_values = run_accountant_script(script, "index.js", points, timeout=300)
    assert sum(v is not None for v in numpy_values) >= 10
    for a, b, c in zip(numpy_values, portable_values, javascript_values, strict=True):
        assert (a is None) == (b is None) == (c is None)
        if a is not None:
            assert b == pytest.approx(a, rel=1e-9) and c == pytest.approx(a, rel=1e-9)


def test_no_refutation_where_it_has_no_proof() -> None:
    # s > d - 2 leaves no room for an item set that avoids both j0 and j1.
    assert refuting_delta(0.5, 1.0, 3, 100, 0.5, 4, delta=1e-8) is None
    assert portable_accounting.refuting_delta(0.5, 1.0, 3, 100, 0.5, 4, delta=1e-8) is None
    assert refuting_delta(0.5, 1.0, 2, 100, 0.5, 16, delta=1e-8, mode="independent") is None
    assert refuting_delta(0.5, 0.0, 2, 100, 0.5, 16, delta=1e-8) is None
    with pytest.raises(ValueError):
        refuting_delta(0.5, 1.5, 2, 100, 0.5, 16, delta=1e-8)


def test_a_refuted_check_computes_no_upper_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # n = 353, s = 8, d = 3100, m = 0.265 with lambdas about 0.2-0.6 (the verification
    # benchmark's random campaign 25): delta_user is about 0.8 where delta is 1e-8.  The
    # pure-Python check used to compose every rung of the labelled groups' ladder for
    # each level (16 CPU-s) before refusing.
    from segshuffle.client.verify import _unprotected_levels

    def refused(*_args, **_kwargs):
        raise AssertionError("an upper bound was computed for refuted parameters")

    monkeypatch.setattr(slot_groups.GroupsBound, "delta", refused)
    monkeypatch.setattr(slot_groups.GroupsBound, "first_rung_delta", refused)
    monkeypatch.setattr(portable_accounting, "user_delta", refused)
    monkeypatch.setattr(accounting, "user_delta", refused)
    _unprotected_levels.cache_clear()
    problems = _unprotected_levels((0.5, 1.0, 2.0), (0.5, 1.0, 2.0), (0.223, 0.174, 0.600), 8,
                                   1e-8, 353, 0.265, 3100, accounting.BlanketMode.SLOTS,
                                   "portable")
    assert [check for check, _ in problems] == ["lambdas"] * 3
    assert all("exhibited pair of datasets" in text for _, text in problems)

"""The numpy-free pair losses against the numpy accountant and the JavaScript one, within
1e-9 relative or 1e-13 absolute, at small and medium sizes (slots 1e3..1e6, r around 1/256,
lambda 0.1..1, eps 0.1..4): the modules written once (the count pair of
:mod:`segshuffle.core.hockey_stick`, the one-item mixture, the Poisson comparison, the
item pairs' loss distributions of :mod:`segshuffle.core.privacy_loss`, the multinomial
pair of :mod:`segshuffle.core.multinomial_pair`) on their Python backend against their
numpy backend."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from segshuffle.core import (
    arrays,
    distributions,
    hockey_stick,
    multinomial_pair,
    poisson_comparison,
    privacy_loss,
    slot_single,
)
from segshuffle.core.errors import AccountantError

from .node_support import node

ROOT = Path(__file__).resolve().parents[1]
ACCOUNTANT_JS = ROOT / "clients" / "web" / "src" / "accountant"

RELATIVE = 1e-9
ABSOLUTE = 1e-13

R = 1.0 / 256.0


def close(actual: float, expected: float) -> bool:
    """Within 1e-9 relative or 1e-13 absolute (equal infinities included)."""
    if actual == expected:
        return True
    return abs(actual - expected) <= RELATIVE * abs(expected) + ABSOLUTE


def assert_close(actual: float, expected: float, what: object = "") -> None:
    assert close(float(actual), float(expected)), (what, actual, expected)


def assert_all_close(actual, expected, what: object = "") -> None:
    actual = [float(x) for x in actual]
    expected = [float(x) for x in expected]
    assert len(actual) == len(expected), (what, len(actual), len(expected))
    bad = [(i, x, y) for i, (x, y) in enumerate(zip(actual, expected, strict=True))
           if not (close(x, y) or (math.isnan(x) and math.isnan(y)))]
    assert not bad, (what, len(bad), bad[:5])


# --- hockey_stick -----------------------------------------------------------------------

PAIR_CASES = [(n, R, lam, 0.0) for n in (1000, 10**4, 10**5, 10**6) for lam in (0.1, 0.5, 1.0)]
PAIR_CASES += [(5000, 0.01, 0.6, 0.2), (0, 0.01, 0.6, 0.2), (100, 0.5, 0.6, 0.0),
               (2000, 0.02, 0.3, 0.1)]


@pytest.mark.parametrize(("n_slots", "r", "own", "other"), PAIR_CASES)
def test_delta_for_is_the_same_on_both_backends(n_slots: int, r: float, own: float,
                                                other: float) -> None:
    pair = hockey_stick.CountPair(n_slots, r, own, other)
    for eps in (0.0, 0.1, 1.0, 4.0):
        with arrays.use(arrays.PYTHON):
            portable = hockey_stick.delta_for(pair, eps)
        with arrays.use(arrays.NUMPY):
            reference = hockey_stick.delta_for(pair, eps)
        assert_close(portable, reference, (n_slots, r, own, other, eps))


@pytest.mark.parametrize(("n_slots", "r"), [(0, R), (1000, R), (10**6, R), (50, 0.5),
                                              (10**4, 0.0)])
def test_summation_window_is_the_same_on_both_backends(n_slots: int, r: float) -> None:
    with arrays.use(arrays.PYTHON):
        window = hockey_stick.summation_window(n_slots, r)
    with arrays.use(arrays.NUMPY):
        reference = hockey_stick.summation_window(n_slots, r)
    assert isinstance(window.t, list) and isinstance(reference.t, np.ndarray)
    assert window.t.tolist() == reference.t.tolist()
    assert_all_close(window.w0, reference.w0, "w0")
    assert_all_close(window.w1, reference.w1, "w1")
    assert_close(window.omitted0, reference.omitted0)
    assert_close(window.omitted1, reference.omitted1)
    assert_all_close(window.rho_slack, reference.rho_slack, "rho_slack")


def test_poisson_pair_and_delta_arguments() -> None:
    assert hockey_stick.poisson_pair(0.5, 10, R) == hockey_stick.CountPair(10, R, 0.5, 0.0)
    for args in ((1.5, 10, R), (-0.1, 10, R), (math.nan, 10, R), (0.5, -1, R), (0.5, 10, 0.6)):
        with pytest.raises(AccountantError):
            hockey_stick.poisson_pair(*args)
    pair = hockey_stick.poisson_pair(0.5, 10, R)
    for eps in (-1.0, math.nan):
        with pytest.raises(AccountantError, match="eps"):
            hockey_stick.delta_for(pair, eps)
    # Identical distributions, and no blanket at all.
    assert hockey_stick.delta_for(hockey_stick.poisson_pair(0.0, 10, R), 0.1) == 0.0
    assert hockey_stick.delta_for(hockey_stick.poisson_pair(1.0, 0, R), 3.0) == 1.0


# --- poisson_comparison -----------------------------------------------------------------

@pytest.mark.parametrize(("trials", "q", "slack"), [
    (1000, 2 * R, 1e-12), (10**5, 4 * R, 1e-12), (10**6, 6 * R, 1e-9), (50, 0.3, 1e-6),
    (0, 0.1, 1e-9), (10, 0.0, 1e-9)])
def test_dominated_poisson_mean_on_both_backends(trials: int, q: float, slack: float) -> None:
    """The one comparison module finds the same nu and eta on Python lists as on numpy."""
    with arrays.use(arrays.PYTHON):
        nu, eta = poisson_comparison.dominated_poisson_mean(trials, q, slack)
    expected_nu, expected_eta = poisson_comparison.dominated_poisson_mean(trials, q, slack)
    assert_close(nu, expected_nu, "nu")
    assert_close(eta, expected_eta, "eta")
    assert eta <= slack
    assert poisson_comparison.BINOMIAL_TAIL_RTOL == distributions.BINOMIAL_TAIL_RTOL == 1e-10


# --- slot_single ------------------------------------------------------------------------

@pytest.mark.parametrize(("n_slots", "gamma", "domain_size"), [
    (1000, 0.5, 256), (10**5, 1.0, 1000), (10**6, 0.9, 10000), (200, 1.0, 2), (0, 0.5, 10),
    (500, 0.0, 10), (500, 0.5, 1)])
def test_single_item_mixture_on_both_backends(n_slots: int, gamma: float, domain_size: int
                                              ) -> None:
    """The one mixture module gives the same buckets and values on Python lists as on
    numpy (its summation order differs: a few ulps)."""
    with arrays.use(arrays.PYTHON):
        mixture = slot_single.single_item_mixture(n_slots, gamma, domain_size)
    reference = slot_single.single_item_mixture(n_slots, gamma, domain_size)
    assert (mixture.backend, reference.backend) == (arrays.PYTHON, arrays.NUMPY)
    assert_close(mixture.r1, reference.r1)
    assert mixture.slots == reference.slots
    assert_all_close(mixture.weights, reference.weights, "weights")
    assert_close(mixture.tail, reference.tail)
    for eps, lam in ((0.1, 0.5), (1.0, 1.0), (4.0, 0.1), (0.5, 0.0)):
        assert_close(mixture.delta(eps, lam), reference.delta(eps, lam), (eps, lam))


# --- privacy_loss -----------------------------------------------------------------------

def on_python(function, *args, **kwargs):
    """``function(*args, **kwargs)`` on the Python backend."""
    with arrays.use(arrays.PYTHON):
        return function(*args, **kwargs)


def on_numpy(function, *args, **kwargs):
    """``function(*args, **kwargs)`` on the numpy backend."""
    with arrays.use(arrays.NUMPY):
        return function(*args, **kwargs)


LAWS = [(10.0, None, 1.0), (10.0, None, 0.5), (3906.0, None, 1.0), (200.0, 1000, 0.3),
        (50.0, 60, 0.7), (0.0, None, 0.5), (1e5, None, 0.2), (2.0, 5, 1.0), (3.0, 0, 0.5)]


@pytest.mark.parametrize(("mean", "trials", "lam"), LAWS)
@pytest.mark.parametrize("upper", [True, False])
def test_pair_loss_is_the_same_on_both_backends(mean: float, trials: int | None, lam: float,
                                                upper: bool) -> None:
    law = privacy_loss.BinLaw(mean, trials)
    loss = on_python(privacy_loss.pair_loss, law, lam, upper=upper)
    reference = on_numpy(privacy_loss.pair_loss, law, lam, upper=upper)
    assert isinstance(loss.pmf, list) and isinstance(reference.pmf, np.ndarray)
    assert loss.step == reference.step
    assert loss.offset == reference.offset
    assert_all_close(loss.pmf, reference.pmf, "pmf")
    assert_close(loss.infinity, reference.infinity)
    # The transforms differ (lengths, algorithms): their rounding allowances agree only
    # to within the rounding itself.
    assert abs(loss.noise - reference.noise) <= 1e-15


@pytest.mark.parametrize(("mean", "trials", "lam", "times"), [
    (10.0, None, 1.0, 3), (390.0, None, 1.0, 2), (3906.0, None, 1.0, 2), (200.0, 1000, 0.3, 3),
    (20.0, 10**6, 0.5, 3), (1.5, None, 0.9, 4), (0.0, None, 0.5, 3)])
def test_composed_pair_is_the_same_on_both_backends(mean: float, trials: int | None,
                                                    lam: float, times: int) -> None:
    law = privacy_loss.BinLaw(mean, trials)
    for upper in (True, False):
        composed = on_python(privacy_loss.composed_pair, law, lam, times, upper=upper)
        reference = on_numpy(privacy_loss.composed_pair, law, lam, times, upper=upper)
        assert isinstance(composed.tail_p, list) and isinstance(reference.tail_p, np.ndarray)
        assert composed.first == reference.first
        assert len(composed.tail_p) == reference.tail_p.size
        assert_close(composed.infinity, reference.infinity)
        for eps in (0.0, 0.1, 0.5, 1.0, 2.0, 4.0):
            assert_close(composed.delta(eps), reference.delta(eps), (upper, eps))
    with pytest.raises(AccountantError, match="eps"):
        composed.delta(-0.5)


def test_bin_law_and_grid() -> None:
    poisson = privacy_loss.BinLaw(10.0)
    binomial = privacy_loss.BinLaw(10.0, 100)
    assert poisson.window() == (0, 195) and binomial.window() == (0, 101)
    assert binomial.p == 0.1
    assert poisson.key != binomial.key and poisson.key == privacy_loss.BinLaw(10.0).key
    counts = [0, 1, 5, 10, 40, 101]
    for law in (poisson, binomial):
        assert_all_close(on_python(law.pmf, _python_ints(counts)),
                         on_numpy(law.pmf, np.array(counts)), law)
        assert_all_close(on_python(law.previous_ratio, _python_ints([0, 1, 7, 100, 101])),
                         on_numpy(law.previous_ratio, np.array([0, 1, 7, 100, 101])), law)
        assert_close(on_python(law.outside, 2, 20), on_numpy(law.outside, 2, 20), law)
    assert_close(on_numpy(law.pmf, np.array([7]))[0],
                 math.comb(100, 7) * 0.1**7 * 0.9**93)
    # f(a - 1) / f(a): a / mean for Poisson, a (1 - p) / ((n - a + 1) p) for a binomial,
    # infinite above the binomial's support and for a point mass at 0.
    assert on_python(poisson.previous_ratio, _python_ints([0, 5])) == [0.0, 0.5]
    assert on_python(binomial.previous_ratio, _python_ints([101, 102]))[1] == math.inf
    assert on_python(privacy_loss.BinLaw(0.0).previous_ratio, _python_ints([3]))[0] == math.inf
    assert privacy_loss.BinLaw(0.0).outside(0, 3) == 0.0
    assert privacy_loss.BinLaw(0.0).outside(1, 3) == 1.0
    # The grid point an atom is placed from: its mass goes there and to the next point up
    # in an upper bound, all of it there in a lower one.
    assert privacy_loss.grid_floor(0.25, 0.1, True) == 2
    assert privacy_loss.grid_floor(0.25, 0.1, False) == 2
    assert privacy_loss.grid_floor(-0.25, 0.1, True) == -3
    # Within 1e-9 steps of a grid point (0.3 / 0.1 = 2.9999999999999996), a loss moves on
    # to the next point outwards.
    assert privacy_loss.grid_floor(0.3, 0.1, True) == 3
    assert privacy_loss.grid_floor(0.3, 0.1, False) == 2
    assert privacy_loss.DEFAULT_STEP == 2e-3 and privacy_loss.LOWER_STEP == 1e-4
    assert privacy_loss.sparse_is_cheaper(1000, 1000, 200000)
    assert not privacy_loss.sparse_is_cheaper(1000, 1000, 100000)
    assert not privacy_loss.sparse_is_cheaper(2000, 2000, 10**7)
    for lam in (0.0, 1.5, math.nan):
        with pytest.raises(AccountantError, match="lambda"):
            on_python(privacy_loss.pair_loss, poisson, lam, upper=True)


def _python_ints(values: list[int]) -> list[int]:
    """An integer vector of the Python backend."""
    with arrays.use(arrays.PYTHON) as xp:
        return xp.vector(values)


def _random_atoms(seed: int) -> tuple[list[float], list[float]]:
    """Losses around 0 (normal, sd 1.5; some on grid points and just below them) with
    masses summing to 1."""
    generator = random.Random(seed)
    count = generator.randint(1, 300)
    losses = [generator.gauss(0.0, 1.5) for _ in range(count)]
    losses[: count // 10] = [0.05 * generator.randint(-40, 40) for _ in range(count // 10)]
    losses[count // 10: count // 5] = [math.nextafter(0.001 * generator.randint(-500, 500),
                                                      -math.inf)
                                       for _ in range(count // 5 - count // 10)]
    weights = [generator.expovariate(1.0) for _ in range(count)]
    total = math.fsum(weights)
    return losses, [w / total for w in weights]


def _discretised_on_python(losses: list[float], masses: list[float], step: float,
                           upper: bool, grid: tuple[int, int] | None = None):
    with arrays.use(arrays.PYTHON) as xp:
        return privacy_loss.discretise(xp.vector(losses), xp.vector(masses), step, upper, grid)


def _discretised_on_numpy(losses: list[float], masses: list[float], step: float,
                          upper: bool, grid: tuple[int, int] | None = None):
    with arrays.use(arrays.NUMPY):
        return privacy_loss.discretise(np.array(losses), np.array(masses), step, upper, grid)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("step", [1e-3, 1e-4, 0.05, 0.7])
def test_discretise_is_the_same_on_both_backends(seed: int, step: float) -> None:
    """Connecting the dots (upper) and rounding down (lower) put every atom's mass on the
    same grid points on both backends, each entry within 1e-12 relative."""
    losses, masses = _random_atoms(seed)
    for upper in (True, False):
        offset, pmf = _discretised_on_python(losses, masses, step, upper)
        expected_offset, expected = _discretised_on_numpy(losses, masses, step, upper)
        assert offset == expected_offset, (seed, step, upper)
        assert len(pmf) == expected.size, (seed, step, upper)
        bad = [(i, x, y) for i, (x, y) in enumerate(zip(pmf, expected.tolist(), strict=True))
               if not abs(x - y) <= 1e-12 * abs(y)]
        assert not bad, (seed, step, upper, bad[:5])
        # On a wider grid given by the caller, the same masses at the same points.
        wide_offset, wide = _discretised_on_python(losses, masses, step, upper,
                                                   (offset - 3, len(pmf) + 7))
        assert wide_offset == offset - 3 and len(wide) == len(pmf) + 7
        assert wide[3:3 + len(pmf)] == pmf and not any(wide[:3]) and not any(wide[-4:])


def _direct_convolution(x: list[float], y: list[float]) -> tuple[int, list[float]]:
    """The JavaScript double loop over non-zero entries, transliterated."""
    xi = [i for i, v in enumerate(x) if v != 0]
    yi = [j for j, v in enumerate(y) if v != 0]
    if not xi or not yi:
        return 0, [0.0]
    low = xi[0] + yi[0]
    pmf = [0.0] * (xi[-1] + yi[-1] - low + 1)
    for i in xi:
        for j in yi:
            pmf[i + j - low] += x[i] * y[j]
    return low, pmf


@pytest.mark.parametrize("density", [0.05, 0.5, 0.95, 1.0])
def test_exact_convolution_adds_in_the_javascript_order(density: float) -> None:
    generator = random.Random(7)
    for size_x, size_y in ((1, 1), (40, 300), (300, 40), (257, 513)):
        x = [generator.random() if generator.random() < density else 0.0
             for _ in range(size_x)]
        y = [generator.random() * 1e-3 if generator.random() < density else 0.0
             for _ in range(size_y)]
        with arrays.use(arrays.PYTHON) as xp:
            shift, got = xp.convolve_exact(x, y)
        assert (shift, list(got)) == _direct_convolution(x, y)  # bit for bit
        with arrays.use(arrays.NUMPY) as xp:
            numpy_shift, numpy_got = xp.convolve_exact(np.array(x), np.array(y))
        # numpy's direct convolution (dense) starts at index 0, the sparse one at the
        # first non-zero sum: the same entries either way.
        assert_all_close(numpy_got[shift - numpy_shift:][:len(got)], got, (size_x, size_y))


# --- multinomial_pair -------------------------------------------------------------------

ATOM_CASES = [(1000, R), (10**4, R), (10**5, 1 / 200), (50, 0.2), (3, 0.4), (7, 0.3)]


@pytest.mark.parametrize(("slots", "r"), ATOM_CASES)
def test_pair_atoms_match_numpy(slots: int, r: float) -> None:
    atoms = on_python(multinomial_pair.pair_atoms, slots, r)
    reference = on_numpy(multinomial_pair.pair_atoms, slots, r)
    assert atoms is not None and reference is not None
    assert atoms.low == reference.low.tolist()
    assert atoms.high == reference.high.tolist()
    assert_all_close(atoms.here, reference.here, "here")
    assert_all_close(atoms.before, reference.before, "before")
    assert_all_close(atoms.split, reference.split, "split")
    assert_close(atoms.tail, reference.tail)
    for lam in (0.1, 0.5, 1.0):
        loss, p_mass = on_python(multinomial_pair.pair_losses, atoms, lam)
        expected_loss, expected_mass = on_numpy(multinomial_pair.pair_losses, reference, lam)
        assert_all_close(loss, expected_loss, ("loss", lam))
        assert_all_close(p_mass, expected_mass, ("p_mass", lam))


def test_pair_atoms_limits() -> None:
    # Nearly every slot on the pair: blocks of one total, each with ~90,000 splits.
    assert on_python(multinomial_pair.pair_atoms, 10**8, 0.4999999) is None  # > MAX_ATOMS
    assert on_numpy(multinomial_pair.pair_atoms, 10**8, 0.4999999) is None
    assert multinomial_pair.MAX_ATOMS == 6_000_000
    for r in (0.0, 0.5, -0.1, math.nan):
        with pytest.raises(AccountantError, match="r must be"):
            on_python(multinomial_pair.pair_atoms, 100, r)
    atoms = on_python(multinomial_pair.pair_atoms, 100, R)
    assert atoms is not None
    for lam in (0.0, 1.5):
        with pytest.raises(AccountantError, match="lambda"):
            on_python(multinomial_pair.pair_loss, atoms, lam, upper=True, step=1e-4)


@pytest.mark.parametrize(("slots", "r", "lam", "times", "uppers"), [
    (1000, R, 0.5, 2, (True, False)), (10**4, R, 0.1, 3, (True, False)),
    (10**5, 1 / 200, 1.0, 2, (True, False)), (10**5, R, 0.9, 2, (True, False)),
    (50, 0.2, 0.5, 2, (True, False)), (3, 0.4, 1.0, 2, (True, False)),
    pytest.param(10**6, R, 0.5, 2, (True,), marks=pytest.mark.slow),
    # three compositions atom by atom, then the transform
    pytest.param(7, 0.3, 0.5, 6, (True,), marks=pytest.mark.slow),
])
def test_multinomial_pair_loss_matches_numpy(slots: int, r: float, lam: float, times: int,
                                             uppers: tuple[bool, ...]) -> None:
    atoms = on_python(multinomial_pair.pair_atoms, slots, r)
    reference_atoms = on_numpy(multinomial_pair.pair_atoms, slots, r)
    for upper in uppers:
        loss = on_python(multinomial_pair.pair_loss, atoms, lam, upper=upper, step=1e-4)
        reference = on_numpy(multinomial_pair.pair_loss, reference_atoms, lam, upper=upper,
                             step=1e-4)
        assert loss.step == reference.step
        assert loss.offset == reference.offset
        assert_all_close(loss.pmf, reference.pmf, ("pmf", upper))
        assert_close(loss.infinity, reference.infinity)
        composed = on_python(privacy_loss.compose_loss, loss, times, upper)
        expected = on_numpy(privacy_loss.compose_loss, reference, times, upper)
        assert composed.first == expected.first
        for eps in (0.0, 0.1, 0.5, 1.0, 4.0):
            assert_close(composed.delta(eps), expected.delta(eps), (upper, eps))


# --- the JavaScript accountant ----------------------------------------------------------

_NODE_SCRIPT = """
import { readFileSync } from "node:fs";
const base = process.argv[2];
const hs = await import(`${base}/hockey_stick.js`);
const pc = await import(`${base}/poisson_comparison.js`);
const ss = await import(`${base}/slot_single.js`);
const pl = await import(`${base}/privacy_loss.js`);
const mp = await import(`${base}/multinomial_pair.js`);
const arr = (x) => Array.from(x);
const out = [];
for (const { fn, args: a } of JSON.parse(readFileSync(0, "utf8"))) {
  if (fn === "delta_for") {
    out.push(a[4].map((e) => hs.deltaFor(hs.poissonPair(a[0], a[1], a[2]), e)));
  } else if (fn === "dominated") {
    out.push(pc.dominatedPoissonMean(a[0], a[1], a[2]));
  } else if (fn === "mixture") {
    const m = ss.singleItemMixture(a[0], a[1], a[2]);
    out.push(a[3].map(([e, l]) => m.delta(e, l)));
  } else if (fn === "pair_loss") {
    const d = pl.pairLoss(new pl.BinLaw(a[0], a[1]), a[2], { upper: a[3] });
    out.push({ step: d.step, offset: d.offset, pmf: arr(d.pmf), infinity: d.infinity });
  } else if (fn === "composed") {
    const c = pl.composedPair(new pl.BinLaw(a[0], a[1]), a[2], a[3], { upper: a[4] });
    out.push(a[5].map((e) => c.delta(e)));
  } else if (fn === "discretise") {
    const [offset, pmf] = pl.discretise(a[0], a[1], a[2], a[3]);
    out.push({ offset, pmf: arr(pmf) });
  } else if (fn === "multinomial") {
    const d = mp.multinomialPairLoss(mp.pairAtoms(a[0], a[1]), a[2], { upper: a[3], step: 1e-4 });
    const c = pl.composeLoss(d, a[4], a[3]);
    out.push({ step: d.step, offset: d.offset, pmf: arr(d.pmf), infinity: d.infinity,
      deltas: a[5].map((e) => c.delta(e)) });
  }
}
process.stdout.write(JSON.stringify(out));
"""


def _run_node(tmp_path: Path, calls: list[dict]) -> list:
    """The results of ``calls`` in the JavaScript accountant (:data:`_NODE_SCRIPT`)."""
    script = tmp_path / "reference.mjs"
    script.write_text(_NODE_SCRIPT)
    result = subprocess.run([node(), str(script), str(ACCOUNTANT_JS)], input=json.dumps(calls),
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout)
    assert len(out) == len(calls)
    return out


def test_the_javascript_discretise_matches_numpy_on_random_atoms(tmp_path: Path) -> None:
    """privacy_loss.js puts random atoms on the grid as the numpy accountant does (connect
    the dots up, round down), each entry within 1e-12 relative."""
    cases = [(seed, step, upper) for seed in range(8) for step in (1e-3, 0.05, 0.7)
             for upper in (True, False)]
    calls = []
    for seed, step, upper in cases:
        losses, masses = _random_atoms(seed)
        calls.append({"fn": "discretise", "args": [losses, masses, step, upper]})
    for call, got in zip(calls, _run_node(tmp_path, calls), strict=True):
        losses, masses, step, upper = call["args"]
        expected_offset, expected = _discretised_on_numpy(losses, masses, step, upper)
        assert got["offset"] == expected_offset, (step, upper)
        assert len(got["pmf"]) == expected.size, (step, upper)
        bad = [(i, x, y) for i, (x, y) in enumerate(zip(got["pmf"], expected.tolist(),
                                                        strict=True))
               if not abs(x - y) <= 1e-12 * abs(y)]
        assert not bad, (step, upper, bad[:5])


@pytest.mark.slow
def test_the_javascript_accountant_agrees(tmp_path: Path) -> None:
    epsilons = [0.0, 0.1, 0.5, 1.0, 4.0]
    calls: list[dict] = []
    for n_slots in (1000, 10**5, 10**6):
        for lam in (0.1, 1.0):
            calls.append({"fn": "delta_for", "args": [lam, n_slots, R, None, epsilons]})
    calls.append({"fn": "dominated", "args": [10**5, 4 * R, 1e-12]})
    calls.append({"fn": "dominated", "args": [10**6, 0.1, 1e-11]})
    mixture_levels = [[0.1, 0.5], [1.0, 1.0], [4.0, 0.1]]
    calls.append({"fn": "mixture", "args": [10**5, 1.0, 1000, mixture_levels]})
    calls.append({"fn": "mixture", "args": [10**6, 0.9, 10000, mixture_levels]})
    for mean, trials, lam, upper in ((10.0, None, 1.0, True), (3906.0, None, 1.0, True),
                                     (200.0, 1000, 0.3, False)):
        calls.append({"fn": "pair_loss", "args": [mean, trials, lam, upper]})
    for mean, trials, lam, times in ((10.0, None, 1.0, 3), (200.0, 1000, 0.3, 3)):
        calls.append({"fn": "composed", "args": [mean, trials, lam, times, True, epsilons]})
    for slots, r, lam, upper in ((1000, R, 0.5, True), (10**5, 1 / 200, 1.0, True),
                                 (10**4, R, 0.1, False)):
        calls.append({"fn": "multinomial", "args": [slots, r, lam, upper, 2, epsilons]})
    expected = _run_node(tmp_path, calls)
    for call, reference in zip(calls, expected, strict=True):
        args = call["args"]
        if call["fn"] == "delta_for":
            pair = hockey_stick.poisson_pair(args[0], args[1], args[2])
            with arrays.use(arrays.PYTHON):
                portable = [hockey_stick.delta_for(pair, e) for e in args[4]]
            assert_all_close(portable, reference, args)
        elif call["fn"] == "dominated":
            with arrays.use(arrays.PYTHON):
                dominated = poisson_comparison.dominated_poisson_mean(*args)
            assert_all_close(dominated, reference, args)
        elif call["fn"] == "mixture":
            with arrays.use(arrays.PYTHON):
                mixture = slot_single.single_item_mixture(*args[:3])
            assert_all_close([mixture.delta(e, lam) for e, lam in args[3]], reference, args)
        elif call["fn"] == "pair_loss":
            loss = on_python(privacy_loss.pair_loss, privacy_loss.BinLaw(args[0], args[1]),
                             args[2], upper=args[3])
            assert (loss.step, loss.offset) == (reference["step"], reference["offset"])
            assert_all_close(loss.pmf, reference["pmf"], args)
            assert_close(loss.infinity, reference["infinity"], args)
        elif call["fn"] == "composed":
            composed = on_python(privacy_loss.composed_pair,
                                 privacy_loss.BinLaw(args[0], args[1]), args[2], args[3],
                                 upper=args[4])
            assert_all_close([composed.delta(e) for e in args[5]], reference, args)
        else:
            atoms = on_python(multinomial_pair.pair_atoms, args[0], args[1])
            loss = on_python(multinomial_pair.pair_loss, atoms, args[2], upper=args[3],
                             step=1e-4)
            assert (loss.step, loss.offset) == (reference["step"], reference["offset"])
            assert_all_close(loss.pmf, reference["pmf"], args)
            assert_close(loss.infinity, reference["infinity"], args)
            composed = on_python(privacy_loss.compose_loss, loss, args[4], args[3])
            assert_all_close([composed.delta(e) for e in args[5]], reference["deltas"], args)


# --- no numpy ---------------------------------------------------------------------------

def test_the_pair_modules_import_neither_numpy_nor_scipy() -> None:
    code = ("import sys\n"
            "import segshuffle.core.hockey_stick as hs\n"
            "from segshuffle.core import arrays\n"
            "import segshuffle.core.poisson_comparison as pc\n"
            "import segshuffle.core.slot_single as ss\n"
            "import segshuffle.core.privacy_loss as pl\n"
            "import segshuffle.core.multinomial_pair as mp\n"
            "with arrays.use(arrays.PYTHON):\n"
            "    pair = mp.pair_loss(mp.pair_atoms(80_000, 0.486), 0.86, upper=True, step=2e-3)\n"
            "    assert 0.0 < pair.infinity < 1.0\n"
            "    assert hs.delta_for(hs.poisson_pair(0.5, 1000, 0.01), 0.3) > 0.0\n"
            "    assert ss.single_item_mixture(3000, 0.5, 16).delta(0.3, 0.5) > 0.0\n"
            "    assert 0.0 < pc.dominated_poisson_mean(10**5, 0.01, 1e-9)[0] < 1000.0\n"
            "    assert pl.composed_pair(pl.BinLaw(3906.0), 1.0, 3, upper=True).delta(0.5) > 0\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'scipy'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

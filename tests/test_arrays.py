"""The array backends the accountant's bounds are written against, and the count pair's one
implementation in Python.

The Python backend must give numpy's answers element by element (a bound written once runs
on either); the count pair of :mod:`segshuffle.core.hockey_stick` is the only one: the
numpy-free accountant evaluates it on the Python backend without importing numpy.
"""

from __future__ import annotations

import importlib.util
import math
import random
import subprocess
import sys

import numpy as np
import pytest

from segshuffle.core import arrays, hockey_stick
from segshuffle.core.arrays import numpy_backend as npb
from segshuffle.core.arrays import python_backend as pyb


def _random_vectors(seed: int, size: int = 40) -> tuple[list[float], list[float]]:
    chooser = random.Random(seed)
    specials = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, 1e-300, 1e300]
    x = [chooser.choice(specials) if chooser.random() < 0.2 else chooser.uniform(-50, 50)
         for _ in range(size)]
    y = [chooser.choice(specials) if chooser.random() < 0.2 else chooser.uniform(-50, 50)
         for _ in range(size)]
    return x, y


def _same(actual: object, expected: np.ndarray) -> None:
    got = list(actual)  # type: ignore[call-overload]
    want = expected.tolist()
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert (a == b) or (a != a and b != b), (got, want)


@pytest.mark.parametrize("seed", range(5))
def test_python_vectors_compute_what_numpy_computes(seed: int) -> None:
    x, y = _random_vectors(seed)
    px, py = pyb.vector(x), pyb.vector(y)
    nx, ny = np.array(x), np.array(y)
    with np.errstate(all="ignore"):
        _same(px + py, nx + ny)
        _same(px - 2.5, nx - 2.5)
        _same(3.0 - px, 3.0 - nx)
        _same(px * py, nx * ny)
        _same(0.5 * px, 0.5 * nx)
        _same(px / 7.0, nx / 7.0)
        _same(-px, -nx)
        _same(px <= py, nx <= ny)
        _same(px == 0.0, nx == 0.0)
        _same(pyb.maximum(px, py), np.maximum(nx, ny))
        _same(pyb.minimum(px, 0.0), np.minimum(nx, 0.0))
        _same(pyb.isfinite(px), np.isfinite(nx))
        _same(pyb.where(px <= py, px, 1.0), np.where(nx <= ny, nx, 1.0))
        finite = [v if math.isfinite(v) and abs(v) < 1e15 else 0.0 for v in x]
        _same(pyb.floor_int(pyb.clip(pyb.vector(finite), -1.0, 20.0)),
              np.floor(np.clip(np.array(finite), -1.0, 20.0)).astype(np.int64))
        _same(pyb.ceil_int(pyb.vector(finite)), np.ceil(np.array(finite)).astype(np.int64))


def test_python_extremes_keep_numpy_s_nan_and_infinities() -> None:
    """The builtin fast paths of minimum, maximum, smallest and largest give numpy's answer
    with a nan anywhere, and with infinities of both signs (whose sum is nan too)."""
    for x in ([1.0, math.nan, -2.0], [math.inf, -math.inf, 3.0], [0.5, 2.0, -1.0],
              [math.nan], [-math.inf, math.inf, math.nan]):
        with np.errstate(all="ignore"):
            for cap in (1.0, math.nan, -math.inf):
                _same(pyb.minimum(pyb.vector(x), cap), np.minimum(np.array(x), cap))
                _same(pyb.minimum(cap, pyb.vector(x)), np.minimum(cap, np.array(x)))
                _same(pyb.maximum(pyb.vector(x), cap), np.maximum(np.array(x), cap))
            _same(pyb.minimum(pyb.vector(x), pyb.vector(x[::-1])),
                  np.minimum(np.array(x), np.array(x[::-1])))
            for mine, theirs in ((pyb.smallest, np.min), (pyb.largest, np.max)):
                got, want = mine(pyb.vector(x)), float(theirs(np.array(x)))
                assert got == want or (got != got and want != want), (x, got, want)


@pytest.mark.parametrize("seed", range(4))
def test_the_loss_grid_kernels_agree_across_backends(seed: int) -> None:
    """What the item pairs' loss distributions need of a backend: elementwise log1p, exp and
    expm1 (inf and nan where numpy gives them), masks, scatters, suffix sums, exact and
    FFT convolutions."""
    chooser = random.Random(seed)
    x = [chooser.uniform(-3.0, 3.0) for _ in range(60)] + [-1.0, -2.0, 800.0, -math.inf]
    px, nx = pyb.vector(x), np.array(x)
    with np.errstate(all="ignore"):
        _same_close_or_special(pyb.log1p(px), np.log1p(nx))
        _same_close_or_special(pyb.exp(px), np.exp(nx))
        _same_close_or_special(pyb.expm1(px), np.expm1(nx))
    mask = [value > 0.5 for value in x]
    both = pyb.vector(mask) & (px < 2.0)
    _same(both, np.array(mask) & (nx < 2.0))
    _same(pyb.compress(both, px), nx[np.array(mask) & (nx < 2.0)])
    index = [chooser.randrange(3, 40) for _ in range(200)]
    weights = [chooser.random() for _ in range(200)]
    share = [chooser.random() for _ in range(200)]
    _same_close(pyb.scatter_add(pyb.vector(index), pyb.vector(weights), 38, 3),
                npb.scatter_add(np.array(index), np.array(weights), 38, 3))
    _same_close(pyb.split_scatter(pyb.vector(index), pyb.vector(weights), pyb.vector(share),
                                  39, 3),
                npb.split_scatter(np.array(index), np.array(weights), np.array(share), 39, 3))
    _same_close(pyb.suffix_sums(weights), npb.suffix_sums(np.array(weights)))
    assert pyb.count_nonzero([0.0, 1.0, -0.0, 2.0]) == npb.count_nonzero(
        np.array([0.0, 1.0, -0.0, 2.0])) == 2
    pair = [0.0, 0.0] + [chooser.random() for _ in range(30)] + [0.0]
    base = [chooser.random() for _ in range(50)]
    direct = np.convolve(np.convolve(np.array(base), pair), pair)
    for xp, vector in ((pyb, pyb.vector), (npb, np.array)):
        shift, once = xp.convolve_exact(vector(base), vector(pair))
        _same_close(once, np.convolve(np.array(base), pair)[shift:shift + len(once)])
        twice = xp.fft_compose(vector(base), vector(pair), 2)
        assert len(twice) == direct.size
        assert max(abs(a - b) for a, b in zip(twice, direct, strict=True)) < 1e-12
        pair_vector = vector(pair)
        _same_close_or_special(xp.fft_compose(pair_vector, pair_vector, 1),
                               np.convolve(pair, pair), absolute=1e-13)
    counts = [0, 1, 7, 40, 400]
    _same_close(pyb.poisson_pmf(pyb.vector(counts), 30.0), npb.poisson_pmf(np.array(counts),
                                                                            30.0))
    for mean in (0.5, 30.0, 2500.0):
        assert math.isclose(pyb.poisson_outside(3, 60, mean), npb.poisson_outside(3, 60, mean),
                            rel_tol=1e-9, abs_tol=1e-300)


def _same_close_or_special(actual: object, expected: np.ndarray, absolute: float = 1e-300
                           ) -> None:
    got, want = list(actual), expected.tolist()  # type: ignore[call-overload]
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert (a == b or (a != a and b != b)
                or math.isclose(a, b, rel_tol=1e-12, abs_tol=absolute)), (a, b)


def test_python_vectors_slice_into_vectors_and_keep_list_behaviour() -> None:
    v = pyb.arange(3, 9)
    assert v.tolist() == [3, 4, 5, 6, 7, 8] and v.size == 6
    assert isinstance(v[1:], pyb.Vector) and (v[1:] - v[:-1]).tolist() == [1] * 5
    assert v[0] == 3 and len(v) == 6
    assert (v + 1).tolist() == [4, 5, 6, 7, 8, 9]  # adds, does not append


def test_the_special_functions_agree_across_backends() -> None:
    k = list(range(-2, 40))
    _same_close(pyb.binom_pmf(pyb.vector(k), 37, 0.3), npb.binom_pmf(np.array(k), 37, 0.3))
    c = [max(0, i - 1) for i in range(50)]
    a = [(7 * i) % 53 - 3 for i in range(50)]
    _same_close(pyb.half_tail(pyb.vector(c), pyb.vector(a)),
                npb.half_tail(np.array(c), np.array(a)))
    for kk in (-1, 0, 5, 30, 36, 37):
        assert math.isclose(pyb.binom_cdf(kk, 37, 0.3), npb.binom_cdf(kk, 37, 0.3),
                            rel_tol=1e-12, abs_tol=1e-300)
        assert math.isclose(pyb.binom_sf(kk, 37, 0.3), npb.binom_sf(kk, 37, 0.3),
                            rel_tol=1e-12, abs_tol=1e-300)


def test_vector_tails_and_segment_totals_agree_across_backends() -> None:
    """The one-item mixture's vector operations: tails at a vector of counts, vectors
    laid end to end, and sums of consecutive segments."""
    k = [-1, 0, 3, 10, 20, 36, 37]
    _same_close(pyb.binom_cdf(pyb.vector(k), 37, 0.3), npb.binom_cdf(np.array(k), 37, 0.3))
    _same_close(pyb.binom_sf(pyb.vector(k), 37, 0.3), npb.binom_sf(np.array(k), 37, 0.3))
    assert isinstance(npb.binom_cdf(5, 37, 0.3), float)
    parts = [[1.0, 2.0], [3.0], [1e-17, 1.0, -1.0]]
    joined = pyb.concatenate([pyb.vector(p) for p in parts])
    assert isinstance(joined, pyb.Vector)
    _same(joined, npb.concatenate([np.array(p) for p in parts]))
    starts = [0, 2, 3]
    _same_close(pyb.segment_totals(joined, starts),
                npb.segment_totals(npb.concatenate([np.array(p) for p in parts]), starts))
    assert pyb.segment_totals(joined, starts).tolist() == [3.0, 3.0, 1e-17]


def _same_close(actual: object, expected: np.ndarray) -> None:
    got, want = list(actual), expected.tolist()  # type: ignore[call-overload]
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300), (a, b)


def test_every_backend_defines_every_kernel_of_the_one_list() -> None:
    """The kernels a bound may call are listed once (arrays.KERNELS); both backends export
    exactly them (the Python one its Vector too), each defined."""
    assert npb.__all__ == list(arrays.KERNELS)
    assert pyb.__all__ == ["Vector", *arrays.KERNELS]
    for backend in (npb, pyb):
        missing = [name for name in arrays.KERNELS if not hasattr(backend, name)]
        assert missing == [], (backend.__name__, missing)


def test_a_scalar_logarithm_keeps_numpy_s_values() -> None:
    assert arrays.log_or_minus_inf(math.e) == 1.0
    assert arrays.log_or_minus_inf(0.0) == -math.inf
    assert math.isnan(arrays.log_or_minus_inf(-1.0))
    assert pyb.log(pyb.vector([1.0, 0.0, -2.0]))[:2] == [0.0, -math.inf]


def test_use_chooses_the_backend_and_restores_the_caller_s() -> None:
    outer = arrays.name()
    with arrays.use(arrays.PYTHON) as module:
        assert module is pyb and arrays.namespace() is pyb
        with arrays.use(arrays.NUMPY):
            assert arrays.namespace() is npb
        assert arrays.name() == arrays.PYTHON
    assert arrays.name() == outer
    with pytest.raises(ValueError, match="backend"), arrays.use("fortran"):
        pass


def test_the_default_backend_is_numpy_where_numpy_and_scipy_are_installed() -> None:
    installed = all(importlib.util.find_spec(p) for p in ("numpy", "scipy"))
    assert arrays.default_name() == (arrays.NUMPY if installed else arrays.PYTHON)


def test_windows_are_kept_per_backend() -> None:
    hockey_stick.clear_caches()
    with arrays.use(arrays.PYTHON):
        python_window = hockey_stick.summation_window(5000, 0.01)
    numpy_window = hockey_stick.summation_window(5000, 0.01)
    assert isinstance(python_window.w0, pyb.Vector)
    assert isinstance(numpy_window.w0, np.ndarray)


def test_the_count_pair_has_one_implementation() -> None:
    """The numpy-free accountant evaluates the count pair of segshuffle.core.hockey_stick;
    no second copy of the bound remains in the portable package."""
    from segshuffle.core import revealed_send, user_bound

    assert importlib.util.find_spec("segshuffle.core.portable.hockey_stick") is None
    assert revealed_send.delta_for is hockey_stick.delta_for
    assert user_bound.window_delta is hockey_stick.window_delta


def test_the_single_item_mixture_has_one_implementation() -> None:
    """The numpy-free accountant's one-item mixture is segshuffle.core.slot_single's, on
    Python lists; no second copy of the bound remains in the portable package."""
    from segshuffle.core import slot_single, user_bound
    from segshuffle.core.portable import accounting

    assert importlib.util.find_spec("segshuffle.core.portable.slot_single") is None
    assert user_bound.single_item_mixture is slot_single.single_item_mixture
    from segshuffle.core import accounting as numpy_accounting

    for level, lam, users, m, d in ((0.7, 0.6, 300, 1.5, 16), (0.2, 1.0, 50, 3.0, 5),
                                    (1.5, 0.05, 20_000, 0.4, 1024)):
        portable = accounting.user_delta(level, lam, 1, users, m, d, delta=1e-6)
        server = numpy_accounting.user_delta(level, lam, 1, users, m, d, delta=1e-6)
        assert portable == pytest.approx(server, rel=1e-12) and portable > 0.0


def test_the_poisson_comparison_has_one_implementation() -> None:
    """The numpy-free accountant's Poisson comparison is segshuffle.core.poisson_comparison's,
    on Python lists; no second copy remains in the portable package."""
    from segshuffle.core import poisson_comparison, revealed_send

    assert importlib.util.find_spec("segshuffle.core.portable.poisson_comparison") is None
    assert revealed_send.dominated_poisson_mean is poisson_comparison.dominated_poisson_mean
    poisson_comparison.clear_caches()
    with arrays.use(arrays.PYTHON):
        on_lists = poisson_comparison.dominated_poisson_mean(20_000, 0.02, 1e-11)
    on_numpy = poisson_comparison.dominated_poisson_mean(20_000, 0.02, 1e-11)
    assert on_lists[0] == on_numpy[0]  # the same bisection lands on the same nu
    assert on_lists[1] == pytest.approx(on_numpy[1], rel=1e-9)  # tails within ~1e-12


def test_the_item_pair_losses_have_one_implementation() -> None:
    """The numpy-free accountant's item-pair loss distributions and compositions are
    segshuffle.core.privacy_loss's, on Python lists and the pure-Python FFT; no second copy
    remains in the portable package, and the group pair's grid is privacy_loss's."""
    from segshuffle.core import multinomial_pair, privacy_loss, revealed_send, slot_groups

    assert importlib.util.find_spec("segshuffle.core.portable.privacy_loss") is None
    assert revealed_send.composed_pair is privacy_loss.composed_pair
    assert revealed_send.BinLaw is privacy_loss.BinLaw
    assert slot_groups.compose_loss is privacy_loss.compose_loss
    assert multinomial_pair.discretise is privacy_loss.discretise
    privacy_loss.clear_caches()
    law = privacy_loss.BinLaw(390.0)
    with arrays.use(arrays.PYTHON):
        on_lists = privacy_loss.composed_pair(law, 1.0, 3, upper=True)
    on_numpy = privacy_loss.composed_pair(law, 1.0, 3, upper=True)
    assert isinstance(on_lists.tail_p, pyb.Vector) and isinstance(on_numpy.tail_p, np.ndarray)
    assert on_lists.first == on_numpy.first and len(on_lists.tail_p) == on_numpy.tail_p.size
    for eps in (0.0, 0.3, 1.0):
        assert on_lists.delta(eps) == pytest.approx(on_numpy.delta(eps), rel=1e-9, abs=1e-13)


def test_the_group_pair_has_one_implementation() -> None:
    """The labelled groups' multinomial pair is segshuffle.core.multinomial_pair on both
    backends: the numpy-free accountant's groups compose its loss distributions, no second
    copy remains in the portable package, and the two backends give the same grid."""
    from segshuffle.core import multinomial_pair, slot_groups, user_bound

    assert importlib.util.find_spec("segshuffle.core.portable.multinomial_pair") is None
    assert user_bound.GroupsBound is slot_groups.GroupsBound
    assert slot_groups.pair_loss is multinomial_pair.pair_loss
    for slots, r, lam in ((5_000, 0.2, 0.5), (80_000, 0.486, 0.86)):
        with arrays.use(arrays.PYTHON):
            atoms = multinomial_pair.pair_atoms(slots, r)
            on_lists = multinomial_pair.pair_loss(atoms, lam, upper=True, step=2e-3)
        numpy_atoms = multinomial_pair.pair_atoms(slots, r)
        on_numpy = multinomial_pair.pair_loss(numpy_atoms, lam, upper=True, step=2e-3)
        assert isinstance(atoms.split, pyb.Vector) and isinstance(numpy_atoms.split, np.ndarray)
        assert (on_lists.step, on_lists.offset) == (on_numpy.step, on_numpy.offset)
        np.testing.assert_allclose(list(on_lists.pmf), on_numpy.pmf, rtol=1e-9, atol=1e-300)
        assert on_lists.infinity == pytest.approx(on_numpy.infinity, rel=1e-12)


def test_the_labelled_groups_have_one_implementation() -> None:
    """The numpy-free accountant's labelled-groups bound is segshuffle.core.slot_groups, run on
    lists: no second copy in the portable package, and its ladder and exact two-group
    expectation agree with the numpy backend's."""
    from segshuffle.core import slot_groups, user_bound

    assert importlib.util.find_spec("segshuffle.core.portable.slot_groups") is None
    assert user_bound.GroupsBound is slot_groups.GroupsBound
    for n_slots, gamma, d, pairs in ((4_000, 0.9, 64, 3), (300, 0.8, 40, 2)):
        with arrays.use(arrays.PYTHON):
            on_lists = slot_groups.GroupsBound(n_slots, gamma, d, pairs, 1e-12)
        on_numpy = slot_groups.GroupsBound(n_slots, gamma, d, pairs, 1e-12)
        assert (on_lists.backend, on_numpy.backend) == (arrays.PYTHON, arrays.NUMPY)
        assert on_lists.ladder == on_numpy.ladder
        for eps, lam in ((0.3, 0.5), (1.0, 0.2)):
            assert on_lists.delta(eps, lam) == pytest.approx(on_numpy.delta(eps, lam),
                                                             rel=1e-9, abs=1e-13)


@pytest.mark.slow  # 2-4 s on a 2-core machine: the fast tier stays within 3 minutes
def test_the_joint_view_has_one_plan() -> None:
    """The numpy-free accountant's joint view is segshuffle.core.slot_joint's: one plan of
    buckets and charges on both backends (numpy stores a view per orbit, lists every view),
    no second copy in the portable package, and the same deltas."""
    from segshuffle.core import slot_joint, user_bound

    assert importlib.util.find_spec("segshuffle.core.portable.slot_joint") is None
    assert user_bound.joint_view is slot_joint.joint_view
    for n_slots, gamma, d, pairs in ((30, 0.9, 8, 2), (12, 0.6, 10, 3)):
        with arrays.use(arrays.PYTHON):
            on_lists = slot_joint.JointView(n_slots, gamma, d, pairs)
        on_numpy = slot_joint.JointView(n_slots, gamma, d, pairs)
        assert (on_lists.backend, on_numpy.backend) == (arrays.PYTHON, arrays.NUMPY)
        assert [row[1:3] for row in on_lists.plan] == [row[1:3] for row in on_numpy.plan]
        for light, heavy in zip(on_lists.plan, on_numpy.plan, strict=True):
            assert light[0] == pytest.approx(heavy[0], rel=1e-12, abs=1e-300)
        for eps, lam in ((0.3, 0.5), (1.0, 0.2), (2.0, 1.0)):
            assert on_lists.delta(eps, lam) == pytest.approx(on_numpy.delta(eps, lam),
                                                             rel=1e-12, abs=1e-16)


def test_the_slot_accountant_has_one_implementation() -> None:
    """The numpy-free accountant's choice among the slot bounds and its revealed-send bound
    are segshuffle.core.user_bound's and segshuffle.core.revealed_send's: the portable package
    defines no accountant of its own, and an accountant built on lists keeps them."""
    import inspect

    from segshuffle.core import revealed_send, user_bound
    from segshuffle.core.portable import accounting

    own_classes = [name for name, value in vars(accounting).items()
                   if inspect.isclass(value) and value.__module__ == accounting.__name__]
    assert own_classes == []
    assert accounting.slot_bound is user_bound.slot_bound
    with arrays.use(arrays.PYTHON):
        light = user_bound.slot_bound(5_000, 1.5, 64, 4, 1e-12)
    heavy = user_bound.slot_bound(5_000, 1.5, 64, 4, 1e-12)
    assert light is not heavy and (light.backend, heavy.backend) == (arrays.PYTHON, arrays.NUMPY)
    assert isinstance(light.revealed, revealed_send.RevealedSendBound)
    assert light.revealed.backend == arrays.PYTHON
    for eps, lam in ((0.5, 0.3), (1.0, 1.0)):
        assert light.user_delta(eps, lam) == pytest.approx(heavy.user_delta(eps, lam),
                                                           rel=1e-9, abs=1e-13)


def test_the_numpy_free_accountant_runs_the_one_pair_without_numpy() -> None:
    code = (
        "import sys\n"
        "from segshuffle.core.portable import refuting_delta, user_delta\n"
        "value = user_delta(1.0, 0.5, 1, 1000, 0.5, 16, delta=1e-6)\n"
        "assert 0.0 < value < 1.0, value\n"
        "refuting_delta(0.1, 1.0, 1, 1000, 0.5, 16, delta=1e-6)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'scipy'))\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

"""The numpy-free accountant's foundations (``segshuffle.core.portable``: distributions,
fft, cache, errors) against 50-digit references, the numpy accountant, direct sums and
the JavaScript accountant they are ported from."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import mpmath
import numpy as np
import pytest

from segshuffle.core import arrays, slot_joint
from segshuffle.core import bounded_cache as portable_cache
from segshuffle.core import distributions as numpy_distributions
from segshuffle.core.arrays import python_distributions as dist
from segshuffle.core.arrays import python_fft as pfft
from segshuffle.core.errors import AccountantError

from .node_support import node

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = json.loads(
    (ROOT / "clients/web/test/fixtures/accountant-reference.json").read_text(encoding="utf-8"))
ACCOUNTANT_JS = ROOT / "clients/web/src/accountant"

SPECIAL = {
    "binomPmf": dist.binom_pmf, "binomCdf": dist.binom_cdf, "binomSf": dist.binom_sf,
    "poissonPmf": dist.poisson_pmf, "poissonCdf": dist.poisson_cdf, "poissonSf": dist.poisson_sf,
    "halfTail": dist.half_tail, "lnFactorial": dist.ln_factorial, "fsum": dist.fsum,
}


def _relative(value: float, expected: float) -> float:
    return abs(value - expected) / abs(expected)


# --- special functions ------------------------------------------------------------------


def test_special_functions_against_50_digit_references() -> None:
    """Every entry of the fixture's ``special`` section, with the JavaScript test's tolerances."""
    entries = REFERENCE["special"]
    assert len(entries) >= 100
    assert {entry["function"] for entry in entries} == set(SPECIAL)
    failures = []
    for entry in entries:
        name, args, expected = entry["function"], entry["args"], entry["value"]
        value = SPECIAL[name](*args)
        if name == "fsum":
            ok = value == expected  # correctly rounded
        elif name == "lnFactorial":
            ok = abs(value - expected) <= 4e-16 * max(1.0, abs(expected))
        elif name.endswith("Pmf"):
            ok = abs(value - expected) <= 2e-13 * expected
        else:
            # Tails: relative where below 1/2, absolute (the complement's rounding) above.
            allowed = 1e-13 * expected if expected <= 0.5 else 2e-15
            ok = abs(value - expected) <= allowed
        if not ok:
            failures.append(f"{name}({str(args)[:60]}) = {value!r}, not {expected!r}")
    assert not failures, "\n".join(failures)


def _random_points(seed: int, count: int, sizes: list[int]):
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.choice(sizes)
        p = 10 ** rng.uniform(-9, 0) if rng.random() < 0.8 else rng.uniform(0.0, 1.0)
        sd = math.sqrt(n * p * (1 - p)) + 1.0
        k = round(n * p + rng.gauss(0.0, 1.0) * sd * rng.choice([1, 4, 10]))
        yield min(max(k, 0), n), n, p


def _close(value: float, expected: float, rtol: float) -> bool:
    if expected <= 1e-300:
        return value <= 1e-290
    return abs(value - expected) <= rtol * expected


def test_masses_and_tails_agree_with_the_numpy_accountant() -> None:
    """A few hundred random points of every mass and tail, within 1e-12 relative.

    The numpy accountant's binomial tails come from scipy's incomplete beta function,
    which drifts from 1e-11 relative at a million trials (a test below checks the
    portable tails against 50-digit sums there), so binomial tails are compared up to
    1e5 trials; masses and Poisson tails at every size.
    """
    failures = []
    for k, n, p in _random_points(3, 300, [1, 2, 5, 16, 17, 100, 1000, 10**5, 10**7, 10**9]):
        mean = n * p
        checks = [
            ("binom_pmf", dist.binom_pmf(k, n, p), float(numpy_distributions.binom_pmf(k, n, p))),
            ("binom_log_pmf", math.exp(dist.binom_log_pmf(k, n, p)),
             math.exp(float(numpy_distributions.binom_logpmf(k, n, p)))),
            ("poisson_pmf", dist.poisson_pmf(k, mean),
             float(numpy_distributions.poisson_pmf(k, mean))),
        ]
        if mean < 1e6:  # Poisson tails: windows of ~10 standard deviations of masses
            tails = numpy_distributions.poisson_tails([k], mean)
            checks += [("poisson_cdf", dist.poisson_cdf(k, mean), float(tails.lower[0])),
                       ("poisson_sf", dist.poisson_sf(k, mean), float(tails.upper[0]))]
        if n <= 10**5:
            checks += [
                ("binom_cdf", dist.binom_cdf(k, n, p),
                 float(numpy_distributions.binom_cdf([k], n, p)[0])),
                ("binom_sf", dist.binom_sf(k, n, p),
                 float(numpy_distributions.binom_sf([k], n, p)[0])),
            ]
        for name, value, expected in checks:
            if not _close(value, expected, 1e-12):
                failures.append(f"{name} at k={k}, n={n}, p={p!r}: {value!r}, numpy {expected!r}")
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize(("k", "n", "p"), [
    (33, 10**6, 3.69865900582786e-05),  # numpy's (betainc) sf: 1.5e-11 off
    (18, 10**7, 2.117998848890523e-06),  # 1.2e-10 off
    (31, 10**9, 3.212777768856863e-08),  # 2.5e-8 off
    (2, 10**9, 1e-9),
    (40, 10**8, 2e-7),
])
def test_binomial_tails_at_large_sizes_against_50_digit_sums(k: int, n: int, p: float) -> None:
    """Where the numpy accountant's tails drift, the portable ones stay within 1e-14."""
    with mpmath.workdps(50):
        prob = mpmath.mpf(p)
        cdf = mpmath.fsum(mpmath.binomial(n, j) * prob**j * (1 - prob) ** (n - j)
                          for j in range(k + 1))
        sf = 1 - cdf
    assert _relative(dist.binom_cdf(k, n, p), float(cdf)) < 1e-14
    assert _relative(dist.binom_sf(k, n, p), float(sf)) < 1e-14


def test_binomial_tails_on_a_range_match_the_pointwise_tails() -> None:
    for lo, hi, n, p in [(0, 60, 60, 0.3), (200, 500, 1000, 0.35), (1, 1, 2, 0.5),
                         (480_000, 482_000, 10**6, 0.48)]:
        tails = dist.binom_tails_range(lo, hi, n, p)
        assert isinstance(tails, dist.TailPair)
        lower, upper = tails
        assert len(lower) == len(upper) == hi - lo + 1
        for t in range(lo, hi + 1, max(1, (hi - lo) // 50)):
            for value, expected in ((lower[t - lo], dist.binom_cdf(t, n, p)),
                                    (upper[t - lo], dist.binom_sf(t, n, p))):
                assert abs(value - expected) <= 1e-12 * expected + 1e-15, (t, n, p)


def test_poisson_tails_agree_with_the_numpy_accountant() -> None:
    for counts, mean in [([0, 3, 5, 100, 120, 250, 400, 1000, 2000, -1], 300.0),
                         (list(range(0, 3000, 7)), 1500.0),
                         ([5, 5, 0, 17, 1], 0.7),
                         ([999_000, 1_000_000, 1_003_000, 20, 1_200_000], 1e6)]:
        tails = dist.poisson_tails(counts, mean)
        expected = numpy_distributions.poisson_tails(np.asarray(counts), mean)
        assert tails.rtol == expected.rtol
        for value, reference in zip(tails.lower + tails.upper,
                                    [*expected.lower.tolist(), *expected.upper.tolist()],
                                    strict=True):
            assert _close(value, reference, 1e-12), (counts, mean, value, reference)
    zero = dist.poisson_tails([-1, 0, 4], 0.0)
    assert zero == dist.Tails([0.0, 1.0, 1.0], [1.0, 0.0, 0.0], 0.0)


def test_quantiles_agree_with_the_numpy_accountant() -> None:
    rng = random.Random(8)
    for _ in range(40):
        n = rng.choice([1, 10, 1000, 10**5])
        p = rng.uniform(0.001, 0.999)
        q = 10 ** rng.uniform(-12, 0)
        assert dist.binom_ppf(q, n, p) == numpy_distributions.binom_ppf(q, n, p)
        assert dist.binom_isf(q, n, p) == numpy_distributions.binom_isf(q, n, p)
        with arrays.use(arrays.PYTHON):
            j = slot_joint.upper_quantile(n, p, q)
        assert dist.binom_sf(j, n, p) <= q
        assert j == 0 or dist.binom_sf(j - 1, n, p) > q
    assert dist.binom_ppf(0.0, 10, 0.5) == -1
    assert dist.binom_isf(1.0, 10, 0.5) == -1


def test_edges_of_the_support() -> None:
    assert dist.binom_pmf(0, 0, 1.0) == 1.0
    assert dist.binom_pmf(0, 5, 1.0) == 0.0
    assert dist.binom_pmf(5, 5, 0.0) == 0.0
    assert dist.binom_pmf(-1, 5, 0.5) == 0.0
    assert dist.binom_pmf(6, 5, 0.5) == 0.0
    assert dist.binom_log_pmf(3, 5, 0.0) == -math.inf
    assert dist.binom_cdf(-1, 5, 0.5) == 0.0
    assert dist.binom_cdf(5, 5, 0.5) == 1.0
    assert dist.binom_sf(-1, 5, 0.5) == 1.0
    assert dist.binom_sf(5, 5, 0.5) == 0.0
    assert dist.binom_cdf(3, 10, 0.0) == 1.0
    assert dist.binom_sf(3, 10, 1.0) == 1.0
    assert dist.half_tail(10, 0) == 1.0
    assert dist.half_tail(10, 11) == 0.0
    assert dist.half_tail(10, 6) == pytest.approx(386 / 1024, rel=1e-15)
    assert dist.poisson_pmf(0, 2.0) == math.exp(-2.0)
    assert dist.poisson_pmf(-1, 2.0) == 0.0
    assert dist.poisson_pmf(3, 0.0) == 0.0
    assert dist.poisson_log_pmf(-1, 2.0) == -math.inf
    assert dist.poisson_log_pmf(4, 2.0) == pytest.approx(math.log(2.0**4 / 24) - 2.0, rel=1e-15)
    assert dist.deviance(0, 3.0) == 3.0
    assert dist.deviance(5, 0.0) == math.inf
    assert dist.stirling_remainder(0) == 0.0
    assert dist.ln_factorial(0) == 0.0
    assert dist.ln_factorial(20) == pytest.approx(math.lgamma(21), rel=4e-16)
    assert dist.stirling_remainder(7) == pytest.approx(
        math.lgamma(8) - 7.5 * math.log(7) + 7 - dist.LOG_SQRT_2PI, abs=1e-15)


def test_sums() -> None:
    rng = random.Random(4)
    for _ in range(50):
        values = [rng.uniform(-1, 1) * 10 ** rng.randint(-20, 20)
                  for _ in range(rng.randint(0, 60))]
        assert dist.fsum(values) == math.fsum(values)
        plain = dist.compensated_sum(values)
        assert abs(plain - math.fsum(values)) <= 4e-16 * sum(abs(v) for v in values)
    values = [1.0, 1e100, 1.0, -1e100]
    assert dist.fsum(values) == 2.0
    assert dist.compensated_sum(values) == 2.0
    assert dist.compensated_sum([1.0, 2.0, 3.0, 4.0], 1, 3) == 5.0
    assert dist.fsum([]) == 0.0
    assert math.isnan(dist.fsum([math.inf, -math.inf]))  # no exception, as in JavaScript


# --- FFT --------------------------------------------------------------------------------


def test_an_fft_convolution_agrees_with_the_direct_sum() -> None:
    x = [math.exp(-((i - 150) ** 2) / 800) for i in range(300)]
    y = [1 / (1 + i) for i in range(211)]
    n = 512
    spectrum = pfft.multiply_spectra(pfft.rfft(x, n), pfft.rfft(y, n))
    raw = pfft.irfft(spectrum.re, spectrum.im, n)
    assert len(raw) == n
    for k in range(n):
        exact = sum(x[j] * y[k - j] for j in range(max(0, k - len(y) + 1), min(k, len(x) - 1) + 1))
        assert abs(raw[k] - exact) < 1e-14, (k, raw[k], exact)


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32, 64, 128, 512, 2048, 1 << 14])
def test_fft_round_trip_and_numpy_spectrum(n: int) -> None:
    rng = random.Random(n)
    x = [rng.random() for _ in range(max(1, n - rng.randint(0, n // 2)))]
    spectrum = pfft.rfft(x, n)
    assert isinstance(spectrum, pfft.Spectrum)
    assert len(spectrum.re) == len(spectrum.im) == n // 2 + 1
    reference = np.fft.rfft(np.asarray(x), n)
    allowed = 1e-15 * sum(x) * math.log2(n)
    assert np.max(np.abs(np.asarray(spectrum.re) - reference.real)) <= allowed
    assert np.max(np.abs(np.asarray(spectrum.im) - reference.imag)) <= allowed
    back = pfft.irfft(spectrum.re, spectrum.im, n)
    padded = x + [0.0] * (n - len(x))
    error = max(abs(a - b) for a, b in zip(back, padded, strict=True))
    assert error <= 4e-16 * math.log2(n) + 1e-16


def test_rfft_cuts_a_longer_input() -> None:
    x = [0.1 * i for i in range(40)]
    assert pfft.rfft(x, 16) == pfft.rfft(x[:16], 16)


def test_powers_of_a_spectrum_compose_a_law() -> None:
    pmf = [0.5, 0.2, 0.0, 0.25, 0.05]
    times = 13
    n = pfft.next_power_of_two(times * (len(pmf) - 1) + 1)
    power = pfft.power_spectrum(pfft.rfft(pmf, n), times)
    composed = pfft.irfft(power.re, power.im, n)
    exact = np.array([1.0])
    for _ in range(times):
        exact = np.convolve(exact, pmf)
    assert np.max(np.abs(np.asarray(composed[:exact.size]) - exact)) < 1e-15
    assert max(abs(v) for v in composed[exact.size:]) < 1e-15
    assert pfft.power_spectrum(pfft.rfft(pmf, 8), 1) == pfft.rfft(pmf, 8)


def test_next_power_of_two() -> None:
    assert [pfft.next_power_of_two(s) for s in (0, 1, 2, 3, 4, 5, 1000, 1024, 1025)] == [
        2, 2, 2, 4, 4, 8, 1024, 1024, 2048]


# --- against the JavaScript accountant --------------------------------------------------

_JS_PROGRAM = """
import { readFileSync } from "node:fs";
import { irfft, rfft } from "ACCOUNTANT/fft.js";
import * as D from "ACCOUNTANT/distributions.js";
const request = JSON.parse(readFileSync(0, "utf8"));
const fft = request.fft.map(({ x, n }) => {
  const s = rfft(x, n);
  return { re: Array.from(s.re), im: Array.from(s.im), back: Array.from(irfft(s.re, s.im, n)) };
});
const calls = request.calls.map(([name, args]) => {
  const value = D[name](...args);
  return typeof value === "object" ? [...value.lower, ...value.upper] : value;
});
process.stdout.write(JSON.stringify({ fft, calls }));
"""


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def test_agrees_with_the_javascript_accountant(tmp_path: Path) -> None:
    """The same values as the JavaScript module it ports, up to the platforms' libm.

    Both follow the same operations in the same order; V8's exp, log, cos and sin and
    the C library's differ in the last place now and then, which moves far tails by a
    few 1e-13 relative and FFT outputs by a few ulp of the vector's norm.
    """
    binary = node()
    rng = random.Random(9)
    calls = []
    for k, n, p in _random_points(5, 60, [3, 40, 1000, 12345, 10**6]):
        calls += [[name, [k, n, p]] for name in ("binomPmf", "binomCdf", "binomSf")]
        calls += [[name, [k, n * p]] for name in ("poissonPmf", "poissonCdf", "poissonSf")]
    calls += [["binomTailsRange", [100, 400, 1000, 0.3]],
              ["poissonTails", [[0, 3, 5, 100, 120, 250, 400, 1000, 2000, -1], 300.0]],
              ["lnFactorial", [17]], ["lnFactorial", [123456]]]
    ffts = [{"x": [rng.random() * math.exp(-30 * rng.random()) for _ in range(rng.randint(1, n))],
             "n": n} for n in (2, 4, 8, 64, 256, 4096)]
    script = tmp_path / "reference.mjs"
    script.write_text(_JS_PROGRAM.replace("ACCOUNTANT", ACCOUNTANT_JS.as_posix()), encoding="utf-8")
    result = subprocess.run([binary, str(script)], input=json.dumps({"fft": ffts, "calls": calls}),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    expected = json.loads(result.stdout)
    for (name, args), reference in zip(calls, expected["calls"], strict=True):
        value = getattr(dist, _snake(name))(*args)
        values = [*value[0], *value[1]] if isinstance(value, tuple) else [value]
        references = reference if isinstance(reference, list) else [reference]
        for v, r in zip(values, references, strict=True):
            assert abs(v - r) <= 1e-12 * abs(r) + 1e-300, (name, args, v, r)
    for request, reference in zip(ffts, expected["fft"], strict=True):
        spectrum = pfft.rfft(request["x"], request["n"])
        back = pfft.irfft(spectrum.re, spectrum.im, request["n"])
        scale = sum(request["x"])
        for mine, theirs in ((spectrum.re, reference["re"]), (spectrum.im, reference["im"]),
                             (back, reference["back"])):
            assert max(abs(a - b) for a, b in zip(mine, theirs, strict=True)) <= 1e-15 * scale


# --- cache, errors, imports -------------------------------------------------------------


def test_bounded_cache_forgets_the_least_recently_used() -> None:
    cache = portable_cache.registered_cache(2)
    made = []

    def maker(value):
        def make():
            made.append(value)
            return value
        return make

    assert cache.get(portable_cache.key_of(1, 2.5), maker("a")) == "a"
    assert cache.get(portable_cache.key_of(1.0, 2.5), maker("x")) == "a"  # 1 and 1.0: one key
    assert cache.get(portable_cache.key_of(2, "poisson"), maker("b")) == "b"
    assert cache.get((1, 2.5), maker("x")) == "a"  # now the most recent
    assert cache.get(portable_cache.key_of(3, True), maker("c")) == "c"  # forgets (2, "poisson")
    assert cache.get((2, "poisson"), maker("b2")) == "b2"
    assert made == ["a", "b", "c", "b2"]
    assert len(cache) == 2
    assert portable_cache.key_of(portable_cache.key_of(1, 2), [3, 4]) == ((1, 2), (3, 4))
    portable_cache.clear_all_caches()
    assert len(cache) == 0


def test_accountant_error_is_a_value_error() -> None:
    assert issubclass(AccountantError, ValueError)
    with pytest.raises(ValueError, match="rate"):
        raise AccountantError("rate must be in [0, 1]")


def test_the_foundations_import_neither_numpy_nor_scipy() -> None:
    code = (
        "import sys\n"
        "import segshuffle.core.errors, segshuffle.core.bounded_cache\n"
        "import segshuffle.core.arrays.python_distributions, segshuffle.core.arrays.python_fft\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'scipy'))\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_bounded_cache_shared_by_threads_stays_bounded_and_never_raises() -> None:
    """The server's optimizer and its requests share the accountant's tables: evicting while
    another thread reads must not raise, and the table never holds more than its limit."""
    import threading

    cache = portable_cache.BoundedCache(3)
    errors: list[BaseException] = []
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def hammer(seed: int) -> None:
        try:
            for i in range(3000):
                key = (seed * 7 + i) % 5
                assert cache.get(key, lambda key=key: key * 10) == key * 10
                assert len(cache) <= 3
        except BaseException as error:
            errors.append(error)

    try:
        threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sys.setswitchinterval(previous)
    assert not errors, errors[:3]

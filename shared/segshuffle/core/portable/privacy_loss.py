"""Privacy loss distributions of item pairs with independent bins, and their composition.

This is the numpy-free port of the accountant that light client installs use to verify a
server's privacy parameters; ``tests/test_portable_accountant*.py`` keep it equal to the
JavaScript and numpy accountants.

**The item pair.**  Let f be the mass function of one bin's blanket count (Poisson(mu), or
Binomial(n, p)), and f_lam(a) = (1 - lam) f(a) + lam f(a - 1) that of a bin that also gets
the victim's message with probability lam.  With the two bins independent,

    P(a, b) = f_lam(a) f(b),   Q(a, b) = f(a) f_lam(b),

so the privacy loss ln P/Q splits into one term per bin, L(a, b) = l(a) - l(b) with
l(a) = ln(1 - lam + lam f(a - 1) / f(a)), A ~ f_lam and B ~ f independent under P.  The
loss distribution (PLD) of the pair is that of l(A) convolved with that of -l(B), and the
PLD of j independent pairs is its j-fold convolution.  For Poisson(mu),
f(a - 1) / f(a) = a / mu; for Binomial(n, p) it is a (1 - p) / ((n - a + 1) p).  Where
f(a) = 0 < f_lam(a), or f_lam(b) = 0 < f(b), the loss is +infinity.

**Hockey stick from the PLD.**  For a loss L ~ P,

    delta(E) = E_P[(1 - e^{E - L})_+] = Pr[L = inf] + sum_{L_i > E} p_i (1 - e^{E - L_i}),

which does not decrease when any loss value grows.

**Discretisation (pessimistic).**  Each per-bin loss is rounded up to the grid of step h,
and the mass of counts outside the summation window is moved to +infinity.  A sum of
rounded-up terms is at least the rounded-up sum and delta grows with the loss, so every
delta computed from it is an upper bound (the loss error is at most 2 h per pair).
Rounding down and dropping the outside mass gives lower bounds (``upper=False``).

**Composition** is by FFT, whose rounding is absolute, ~1e-16 of the largest entry.  The
exact result has no negative entry, so the largest negative excursion of the computed one
measures that rounding: four times it (floored at 2^-52 of the largest entry) is charged
per grid point summed (``noise``), and the pair's own rounding is carried through the
composition (``inherited``).  Those two allowances depend on the transform's rounding, so
they move (by ~1e-14 absolute at most) with the transform's length and algorithm; they are
part of the upper bound, not of the divergence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add, mul

from .cache import key_of, registered_cache
from .distributions import binom_cdf, binom_pmf, binom_sf, poisson_pmf, poisson_tails
from .errors import AccountantError
from .fft import irfft, multiply_spectra, next_power_of_two, power_spectrum, rfft

__all__ = [
    "DEFAULT_STEP",
    "MAX_BIN_POINTS",
    "WINDOW_SIGMAS",
    "BinLaw",
    "ComposedLoss",
    "LossDistribution",
    "compose_loss",
    "composed_pair",
    "grid_index",
    "pair_loss",
    "sparse_is_cheaper",
]

#: Default grid step of the loss (the eps error is at most 2 h per composed pair).
DEFAULT_STEP = 1e-4

#: The most grid points one per-bin loss distribution may span; the step grows beyond it.
MAX_BIN_POINTS = 1 << 14

#: Standard deviations each side of the mean covered by a bin's summation window.
WINDOW_SIGMAS = 12.0

#: Relative safety factor on the measured FFT noise floor.
_NOISE_FACTOR = 4.0

#: Up to this many pairs of atoms a convolution may be summed atom by atom.
_DIRECT_PAIRS = 1 << 20

_INF = math.inf


@dataclass(frozen=True, slots=True)
class BinLaw:
    """The blanket count of one bin: Poisson(mean) when ``trials`` is None, else
    Binomial(trials, mean / trials)."""

    mean: float
    trials: int | None = None

    @property
    def p(self) -> float:
        """The success probability of the binomial."""
        return self.mean / self.trials  # type: ignore[operator]

    @property
    def key(self) -> tuple:
        """A cache key."""
        return key_of(self.mean, "poisson" if self.trials is None else self.trials)

    def window(self) -> tuple[int, int]:
        """Counts lo..hi summed explicitly (mean +- 12 sd + 146); the rest is tail mass."""
        sigma = math.sqrt(max(self.mean, 0.0))
        margin = WINDOW_SIGMAS * sigma + WINDOW_SIGMAS**2 + 2.0
        lo = max(0, math.floor(self.mean - margin))
        hi = math.ceil(self.mean + margin) + 1
        if self.trials is not None:
            hi = min(hi, self.trials + 1)
        return lo, hi

    def pmf(self, count: int) -> float:
        """f(count), 0 outside the support."""
        if self.mean == 0.0 or self.trials == 0:
            return 1.0 if count == 0 else 0.0
        if self.trials is None:
            return poisson_pmf(count, self.mean)
        return binom_pmf(count, self.trials, self.p)

    def outside(self, lo: int, hi: int) -> float:
        """Pr[count < lo] + Pr[count > hi]."""
        if self.mean == 0.0 or self.trials == 0:
            return 0.0 if lo <= 0 <= hi else 1.0
        if self.trials is None:
            tails = poisson_tails([lo - 1, hi], self.mean)
            return tails.lower[0] + tails.upper[1]
        return binom_cdf(lo - 1, self.trials, self.p) + binom_sf(hi, self.trials, self.p)

    def previous_ratio(self, a: float) -> float:
        """f(a - 1) / f(a) for a >= 1 inside the support (inf where f(a) = 0 < f(a - 1)),
        0 at a <= 0."""
        if a <= 0.0:
            return 0.0
        if self.trials is None:
            return a / self.mean if self.mean > 0.0 else _INF
        if self.trials == 0 or self.mean == 0.0:
            return _INF
        p = self.p
        remaining = self.trials - a + 1.0
        return (a * (1.0 - p)) / (remaining * p) if remaining > 0.0 else _INF


@dataclass(frozen=True, slots=True)
class LossDistribution:
    """A sub-probability mass function on the grid h (offset + i), plus an atom at +inf.

    ``step`` is the grid step h, ``pmf[i]`` the mass at h (offset + i), ``infinity`` the
    atom at +infinity and ``noise`` a bound on the absolute rounding of each entry.
    """

    step: float
    offset: int
    pmf: list[float]
    infinity: float
    noise: float


def grid_index(loss: float, step: float, upper: bool) -> int:
    """Grid index of one loss, rounded up (``upper``) or down.

    The margin of 1e-9 steps covers the rounding of the logarithm (~1e-16 |l|).
    """
    scaled = loss / step
    return math.ceil(scaled + 1e-9) if upper else math.floor(scaled - 1e-9)


def sparse_is_cheaper(atoms_x: int, atoms_y: int, dense_size: int) -> bool:
    """Whether summing atom by atom (exact) costs less than an FFT of ``dense_size`` points."""
    pairs = atoms_x * atoms_y
    return pairs <= _DIRECT_PAIRS and pairs <= 8 * dense_size


def _bin_count(indices: list[int], weights: list[float], low: int, size: int) -> list[float]:
    """Entries added in order into bins index - low."""
    out = [0.0] * size
    for index, weight in zip(indices, weights, strict=True):
        out[index - low] += weight
    return out


def _log1p(x: float) -> float:
    """ln(1 + x), -inf at x = -1 and NaN below (as in JavaScript)."""
    if x > -1.0:
        return math.log1p(x)
    return -_INF if x == -1.0 else math.nan


def pair_loss(law: BinLaw, lam: float, *, upper: bool, step: float = DEFAULT_STEP
              ) -> LossDistribution:
    """The PLD of one item pair with independent bins of law ``law`` at rate ``lam``
    (module docstring).

    The step grows when the loss range would need more than MAX_BIN_POINTS points.
    """
    if not (lam > 0.0 and lam <= 1.0):
        raise AccountantError(f"lambda must be in (0, 1], got {lam}")
    lo, hi = law.window()
    size = hi - lo + 1
    law_pmf = law.pmf
    previous_ratio = law.previous_ratio
    masses = [law_pmf(count) for count in range(lo - 1, hi + 1)]  # f(lo - 1) .. f(hi)
    f = masses[1:]
    keep = 1.0 - lam
    f_lam = [keep * current + lam * previous for current, previous
             in zip(f, masses, strict=False)]
    loss = []
    for i in range(size):
        value = _log1p(lam * (previous_ratio(lo + i) - 1.0))
        if not f[i] > 0.0:
            value = _INF
        if not f_lam[i] > 0.0:
            value = -_INF
        loss.append(value)
    # A ~ f_lam contributes l(A); B ~ f contributes -l(B).
    isfinite = math.isfinite
    a_inf = 0.0
    b_inf = 0.0
    spread_low = _INF
    spread_high = -_INF
    for value, a_mass, b_mass in zip(loss, f_lam, f, strict=True):
        finite = isfinite(value)
        if finite:
            spread_low = min(spread_low, value)
            spread_high = max(spread_high, value)
        if not (finite and a_mass > 0.0) and value > 0:
            a_inf += a_mass
        if not (finite and b_mass > 0.0) and value < 0:
            b_inf += b_mass
    if upper:
        # A lies outside lo..hi when the blanket does, or when the blanket lies outside
        # lo-1..hi-1 and the message was sent.
        a_inf += (1.0 - lam) * law.outside(lo, hi) + lam * law.outside(lo - 1, hi - 1)
        b_inf += law.outside(lo, hi)
    spread = spread_high - spread_low if spread_high >= spread_low else 0.0
    step = max(step, spread / MAX_BIN_POINTS)
    a_index: list[int] = []
    a_probs: list[float] = []
    b_index: list[int] = []
    b_probs: list[float] = []
    for value, a_mass, b_mass in zip(loss, f_lam, f, strict=True):
        if not isfinite(value):
            continue
        if a_mass > 0.0:
            a_index.append(grid_index(value, step, upper))
            a_probs.append(a_mass)
        if b_mass > 0.0:
            b_index.append(grid_index(-value, step, upper))
            b_probs.append(b_mass)
    if not a_index or not b_index:  # every outcome has an infinite loss
        offset = 0
        pmf = [0.0]
        noise = 0.0
    else:
        a_min = min(a_index)
        b_min = min(b_index)
        a_span = max(a_index) - a_min
        b_span = max(b_index) - b_min
        offset = a_min + b_min
        if sparse_is_cheaper(len(a_index), len(b_index), a_span + b_span + 1):
            # Few atoms on a wide grid: add every pair of atoms exactly (no FFT rounding).
            pmf = [0.0] * (a_span + b_span + 1)
            b_pairs = list(zip(b_index, b_probs, strict=True))
            for a_at, a_prob in zip(a_index, a_probs, strict=True):
                base = a_at - offset
                for b_at, b_prob in b_pairs:
                    pmf[base + b_at] += a_prob * b_prob
            noise = 0.0
        else:
            a_pmf = _bin_count(a_index, a_probs, a_min, a_span + 1)
            b_pmf = _bin_count(b_index, b_probs, b_min, b_span + 1)
            pmf, noise = _fft_convolve(a_pmf, b_pmf)
    infinity = 1.0 - (1.0 - min(a_inf, 1.0)) * (1.0 - min(b_inf, 1.0))
    return LossDistribution(step, offset, pmf, infinity, noise)


def _noise_floor(raw: list[float]) -> float:
    """A bound on the FFT's absolute rounding per entry of a non-negative result (``raw``,
    the entries that belong to it): four times the largest negative excursion, floored at
    2^-52 of the largest entry."""
    smallest = min(raw)
    low = smallest if smallest < 0.0 else 0.0
    high = max(raw)
    return _NOISE_FACTOR * max(-low, 2.0**-52 * high)


def _clipped(raw: list[float]) -> list[float]:
    """The entries of raw, clipped at 0."""
    return [value if value > 0.0 else 0.0 for value in raw]


def _fft_convolve(x: list[float], y: list[float]) -> tuple[list[float], float]:
    """x * y by FFT, clipped at 0, with the per-entry rounding bound of :func:`_noise_floor`."""
    size = len(x) + len(y) - 1
    n = next_power_of_two(size)
    spectrum = multiply_spectra(rfft(x, n), rfft(y, n))
    raw = irfft(spectrum.re, spectrum.im, n)[:size]
    return _clipped(raw), _noise_floor(raw)


@dataclass(frozen=True, slots=True)
class ComposedLoss:
    """The j-fold composition of a pair's PLD, ready for hockey-stick evaluation.

    Only grid points with a positive loss are kept (the others never count at E >= 0):
    ``tail_p[i]`` and ``tail_q[i]`` are the suffix sums of p_k and p_k e^{-L_k} from grid
    index ``first + i`` on.  ``noise`` bounds the transform's rounding per grid point and
    ``inherited`` the pair's own rounding carried through the composition.
    """

    step: float
    first: int
    tail_p: list[float]
    tail_q: list[float]
    infinity: float
    noise: float
    inherited: float
    upper: bool

    def delta(self, eps: float) -> float:
        """delta(E) = Pr[L = inf] + sum_{L_i > E} p_i (1 - e^{E - L_i}), with the rounding
        allowances in an upper bound."""
        if eps < 0.0:
            raise AccountantError(f"eps must be >= 0, got {eps}")
        size = len(self.tail_p)
        scaled = eps / self.step
        # Beyond every grid point (eps = inf, or NaN as in JavaScript) nothing is summed.
        start = max(0, math.floor(scaled) + 1 - self.first) if math.isfinite(scaled) else size
        value = self.infinity
        if start < size:
            try:
                e = math.exp(eps)
            except OverflowError:
                e = _INF
            value += max(0.0, self.tail_p[start] - e * self.tail_q[start])
            if self.upper:
                value += self.noise * (size - start)
        if self.upper:
            value += self.inherited
        return min(value, 1.0)


def _count_nonzero(values: list[float]) -> int:
    return len(values) - values.count(0.0)


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """(start, end) positions in ``indices`` of each run of consecutive values."""
    out = []
    first = 0
    for position in range(1, len(indices)):
        if indices[position] != indices[position - 1] + 1:
            out.append((first, position))
            first = position
    if indices:
        out.append((first, len(indices)))
    return out


def _sparse_convolve(x_offset: int, x: list[float], y_offset: int, y: list[float]
                     ) -> tuple[int, list[float]]:
    """x * y summed atom by atom over the non-zero entries (exact: no FFT rounding).

    Entries are added in the order of the direct double loop (x outer, y inner); runs of
    consecutive non-zero entries of y are added as slices, which adds the same products
    to the same entries in the same order.
    """
    xi = [i for i, value in enumerate(x) if value != 0]
    yi = [j for j, value in enumerate(y) if value != 0]
    if not xi or not yi:
        return x_offset + y_offset, [0.0]
    low = xi[0] + yi[0]
    pmf = [0.0] * (xi[-1] + yi[-1] - low + 1)
    runs = _runs(yi)
    if 4 * len(runs) <= len(yi):
        blocks = [(yi[start] - yi[0], y[yi[start]:yi[start] + end - start])
                  for start, end in runs]
        for i in xi:
            value = x[i]
            base = i - xi[0]
            for shift, values in blocks:
                at = base + shift
                stop = at + len(values)
                pmf[at:stop] = map(add, pmf[at:stop], map(mul, repeat(value), values))
    else:
        y_pairs = [(j - yi[0], y[j]) for j in yi]
        for i in xi:
            value = x[i]
            base = i - xi[0]
            for shift, y_value in y_pairs:
                pmf[base + shift] += value * y_value
    return x_offset + y_offset + low, pmf


def compose_loss(pair: LossDistribution, times: int, upper: bool) -> ComposedLoss:
    """The ``times``-fold composition of ``pair``: atom by atom while the atoms are few
    (exact), the remaining power by FFT, whose rounding is bounded by the noise floor."""
    # Rounding already in the pair's pmf: an L1 error of at most G noise, which the
    # composition carries into the result at most ``times`` over.
    inherited = times * pair.noise * len(pair.pmf)
    offset = pair.offset
    pmf = pair.pmf
    done = 1
    noise = 0.0
    atoms = _count_nonzero(pair.pmf)
    while done < times and sparse_is_cheaper(_count_nonzero(pmf), atoms,
                                             len(pmf) + len(pair.pmf) - 1):
        offset, pmf = _sparse_convolve(offset, pmf, pair.offset, pair.pmf)
        done += 1
    if done < times:
        remaining = times - done
        size = len(pmf) + remaining * (len(pair.pmf) - 1)
        n = next_power_of_two(size)
        pair_spectrum = rfft(pair.pmf, n)
        # Nothing summed yet: pmf is the pair itself, whose transform is at hand.
        base = pair_spectrum if done == 1 else rfft(pmf, n)
        spectrum = multiply_spectra(base, power_spectrum(pair_spectrum, remaining))
        raw = irfft(spectrum.re, spectrum.im, n)[:size]
        noise = _noise_floor(raw)
        pmf = _clipped(raw)
        offset += remaining * pair.offset
    # 1 - (1 - p)^times without the cancellation that loses a p below 1e-16.
    infinity = 1.0
    if pair.infinity < 1.0:
        infinity = -math.expm1(times * math.log1p(-pair.infinity))
    # Keep the grid points of positive loss: index offset + i >= 1.
    first_kept = min(len(pmf), max(0, 1 - offset))
    step = pair.step
    exp = math.exp
    # Suffix sums from the last grid point down, as running sums of the reversed masses.
    reversed_masses = pmf[:first_kept - 1:-1] if first_kept > 0 else pmf[::-1]
    last = offset + len(pmf) - 1
    tail_p = list(accumulate(reversed_masses))
    indices = range(last, last - len(reversed_masses), -1)
    tail_q = list(accumulate([mass * exp(-(step * index)) if mass else 0.0
                              for mass, index in zip(reversed_masses, indices, strict=True)]))
    tail_p.reverse()
    tail_q.reverse()
    return ComposedLoss(step, offset + first_kept, tail_p, tail_q, min(infinity, 1.0), noise,
                        inherited, upper)


_composed_cache = registered_cache(512)


def composed_pair(law: BinLaw, lam: float, times: int, *, upper: bool,
                  step: float = DEFAULT_STEP) -> ComposedLoss:
    """The ``times``-fold composition of the item pair of :func:`pair_loss` (cached)."""
    return _composed_cache.get(
        key_of(law.key, lam, times, upper, step),
        lambda: compose_loss(pair_loss(law, lam, upper=upper, step=step), times, upper))

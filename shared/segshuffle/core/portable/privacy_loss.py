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

**Discretisation.**  Losses are put on a grid of step h, each bin's loss law on its own
(each bin is a pair of its own, (f_lam, f) and (f, f_lam), and the item pair is their
composition), then the two are convolved.  *Upper bounds* connect the dots: an atom of
P-mass p at loss L between the grid points x = i h and x + h is split into p (1 - w) at x
and p w at x + h, with w = (1 - e^{-(L - x)}) / (1 - e^{-h}), which keeps its P-mass and
its Q-mass p e^{-L}.  In z = e^{-L} the split is a mean-preserving spread; every
hockey-stick divergence is the P-expectation of (1 - a z)_+, convex and non-increasing in
z, so by Jensen the split raises every one of them: the grid pair dominates the pair
(Blackwell), and its compositions dominate the compositions.  L is shifted up by 1e-9
steps and w widened by a relative 1e-12 (then capped at 1) for the rounding of the
logarithm and the exponentials: extra mass moved up only raises the divergences.  The
error is second order in h.  The mass of counts outside the summation window goes to
+infinity.  *Lower bounds* (``upper=False``) round every loss down to the grid and drop
the outside mass (the loss error is at most 2 h per pair).

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
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add, mul

from ..bounded_cache import key_of, registered_cache
from ..errors import AccountantError
from .distributions import binom_cdf, binom_pmf, binom_sf, poisson_pmf, poisson_tails
from .fft import irfft, multiply_spectra, next_power_of_two, power_spectrum, rfft

__all__ = [
    "DEFAULT_STEP",
    "LOWER_STEP",
    "MAX_BIN_POINTS",
    "WINDOW_SIGMAS",
    "BinLaw",
    "ComposedLoss",
    "LossDistribution",
    "compose_loss",
    "composed_pair",
    "discretise",
    "grid_floor",
    "pair_loss",
    "round_down_atoms",
    "sparse_is_cheaper",
    "spread_atoms",
]

#: Grid step of the loss for upper bounds (connect the dots: the error is second order).
DEFAULT_STEP = 2e-3

#: Grid step of the loss for lower bounds (rounded down: the eps error is at most 2 h a
#: pair).  Only the numpy accountant computes lower bounds; the name is kept alike.
LOWER_STEP = 1e-4

#: The most grid points one per-bin loss distribution may span; the step grows beyond it.
MAX_BIN_POINTS = 1 << 14

#: Standard deviations each side of the mean covered by a bin's summation window.
WINDOW_SIGMAS = 12.0

#: Relative safety factor on the measured FFT noise floor.
_NOISE_FACTOR = 4.0

#: Up to this many pairs of atoms a convolution may be summed atom by atom.
_DIRECT_PAIRS = 1 << 20

#: Relative widening of the share of an atom's mass moved up to the grid point above it.
_UPWARD_MARGIN = 1e-12

#: Steps a loss is moved outwards (up in an upper bound, down in a lower one) before it
#: is placed: covers the rounding of the logarithm (~1e-16 |l|).
_LOSS_MARGIN = 1e-9

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


def grid_floor(loss: float, step: float, upper: bool) -> int:
    """Index of the grid point an atom at ``loss`` is placed from: floor(l / h + 1e-9) in
    an upper bound (its mass is split between that point and the next), floor(l / h - 1e-9)
    in a lower bound (all of it goes there).  Non-decreasing in the loss, so the smallest
    and largest loss give the grid's ends."""
    scaled = loss / step
    return math.floor(scaled + _LOSS_MARGIN) if upper else math.floor(scaled - _LOSS_MARGIN)


def spread_atoms(losses: Iterable[float], masses: Iterable[float], step: float,
                 offset: int, lower: list[float], raised: list[float]) -> None:
    """Connect the dots: each atom (L, p) is split between the grid points x = i h at or
    below it and x + h, p (1 - w) added to ``lower[i - offset]`` and p w to
    ``raised[i + 1 - offset]``, with

        w = min(1, (1 - e^{-(L - x)}) / (1 - e^{-h}) (1 + 1e-12)),   i = floor(L / h + 1e-9),

    computed as the numpy accountant does (e^{-(L - x)} - 1 by expm1 of -(s - i) h, where
    s = L / h + 1e-9).  The entries of ``lower`` and ``raised`` are summed in the order of
    the atoms; the grid's mass is their entrywise sum (:func:`discretise`).
    """
    denominator = -math.expm1(-step)
    widen = 1.0 + _UPWARD_MARGIN
    floor = math.floor
    expm1 = math.expm1
    for loss, mass in zip(losses, masses, strict=True):
        scaled = loss / step + _LOSS_MARGIN
        below = floor(scaled)
        share = (-expm1(-(scaled - below) * step) / denominator) * widen
        up = mass * (share if share < 1.0 else 1.0)
        at = below - offset
        lower[at] += mass - up
        raised[at + 1] += up


def round_down_atoms(losses: Iterable[float], masses: Iterable[float], step: float,
                     offset: int, pmf: list[float]) -> None:
    """Each atom's mass added, in order, at its loss rounded down to the grid (a lower
    bound): ``pmf[floor(L / h - 1e-9) - offset]``."""
    floor = math.floor
    for loss, mass in zip(losses, masses, strict=True):
        pmf[floor(loss / step - _LOSS_MARGIN) - offset] += mass


def discretise(losses: list[float], masses: list[float], step: float, upper: bool
               ) -> tuple[int, list[float]]:
    """(offset, pmf): the atoms (``losses``, ``masses``; at least one, finite) on the grid
    h (offset + i), by connecting the dots in an upper bound (:func:`spread_atoms`: each
    atom keeps its P-mass and its Q-mass, and the grid pair dominates the atoms') and by
    rounding down in a lower one (:func:`round_down_atoms`).

    In an upper bound the grid runs from the point below the smallest loss to the point
    above the largest, so its last entry (and its first, where a share is capped at 1) may
    be 0, as in the numpy accountant.
    """
    offset = grid_floor(min(losses), step, upper)
    size = grid_floor(max(losses), step, upper) - offset + (2 if upper else 1)
    if not upper:
        pmf = [0.0] * size
        round_down_atoms(losses, masses, step, offset, pmf)
        return offset, pmf
    lower = [0.0] * size
    raised = [0.0] * size
    spread_atoms(losses, masses, step, offset, lower, raised)
    return offset, list(map(add, lower, raised))


def sparse_is_cheaper(atoms_x: int, atoms_y: int, dense_size: int) -> bool:
    """Whether summing atom by atom (exact) costs less than an FFT of ``dense_size`` points."""
    pairs = atoms_x * atoms_y
    return pairs <= _DIRECT_PAIRS and pairs <= 8 * dense_size


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
    a_losses: list[float] = []
    a_probs: list[float] = []
    b_losses: list[float] = []
    b_probs: list[float] = []
    for value, a_mass, b_mass in zip(loss, f_lam, f, strict=True):
        if not isfinite(value):
            continue
        if a_mass > 0.0:
            a_losses.append(value)
            a_probs.append(a_mass)
        if b_mass > 0.0:
            b_losses.append(-value)
            b_probs.append(b_mass)
    if not a_losses or not b_losses:  # every outcome has an infinite loss
        offset = 0
        pmf = [0.0]
        noise = 0.0
    else:
        # Each bin is a pair of its own ((f_lam, f) and (f, f_lam)); the item pair is
        # their composition, so each is put on the grid and the two are convolved.
        a_offset, a_pmf = discretise(a_losses, a_probs, step, upper)
        b_offset, b_pmf = discretise(b_losses, b_probs, step, upper)
        offset = a_offset + b_offset
        if _count_nonzero(a_pmf) * _count_nonzero(b_pmf) <= _DIRECT_PAIRS:
            # Add every pair of atoms exactly while that is affordable: FFT rounding
            # charged here would be carried through every composition.
            offset, pmf = _sparse_convolve(a_offset, a_pmf, b_offset, b_pmf)
            noise = 0.0
        else:
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

"""Privacy loss distributions of item pairs with independent bins, and their composition.

**The item pair.**  Let f be the pmf of a bin's blanket count (Poisson(mu), or
Binomial(n, p)), and f_lam(a) = (1 - lam) f(a) + lam f(a - 1) the pmf of a bin
that also receives the victim's message with probability lam.  With the two
bins independent,

    P(a, b) = f_lam(a) f(b),        Q(a, b) = f(a) f_lam(b),

so the privacy loss log P/Q at (a, b) splits into one term per bin,

    L(a, b) = l(a) - l(b),          l(a) = log(f_lam(a) / f(a)) = log(1 - lam + lam f(a-1)/f(a)),

where, under P, a ~ f_lam and b ~ f are independent.  Hence the privacy loss
distribution (PLD) of the pair is the distribution of l(A) convolved with that of
-l(B), and the PLD of j independent pairs (composition) is its j-fold
convolution.  For Poisson(mu), f(a-1)/f(a) = a / mu; for Binomial(n, p) it is
a (1 - p) / ((n - a + 1) p).  Where f(a) = 0 < f_lam(a) (above a binomial's
support) or f_lam(b) = 0 < f(b) (b = 0 when lam = 1) the loss is +infinity.

**Hockey-stick divergence from the PLD.**  For a loss L ~ P (with E_P[e^-L] <= 1),

    delta(E) = E_P[(1 - e^{E - L})_+] = Pr[L = inf] + sum_{L_i > E} p_i (1 - e^{E - L_i}),

which is non-decreasing in every loss value.

**Discretisation** (:func:`discretise`).  Each bin's loss law is a pair of its own
((f_lam, f) for the bin that may get the message, (f, f_lam) for the other), and the
item pair is their composition; so each is put on a grid of step h and the two are
convolved.  *Upper bounds* connect the dots: an atom between two grid points is split
between them keeping its P- and Q-mass, which dominates it for every hockey-stick
divergence (proof in :func:`discretise`), with an error second order in h; the mass
of counts outside the summation window goes to +infinity.  *Lower bounds*
(``upper=False``) round every loss down and drop the mass outside the window; their
error in the loss is at most 2 h per pair.

**Composition** is done by FFT.  FFT rounding is absolute, about 1e-16 of the
largest entry; it is bounded from the computed result (the largest negative
excursion, which the exact result cannot have) and added, per grid point summed,
to upper bounds (:attr:`ComposedLoss.noise`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import fft

from . import distributions
from .memo import memory_bounded_cache

#: Grid step of the loss for upper bounds (connect the dots: the error is second order).
DEFAULT_STEP = 2e-3

#: Grid step of the loss for lower bounds (rounded down: the eps error is at most 2 h a pair).
LOWER_STEP = 1e-4

#: The most grid points one per-bin loss distribution may span; the step grows beyond it.
MAX_BIN_POINTS = 1 << 14

#: Poisson means up to which a bin's outside mass is summed by the scalar tails.
SCALAR_TAILS_UP_TO = 1000.0

#: Standard deviations each side of the mean covered by a bin's summation window.
WINDOW_SIGMAS = 12.0

#: Relative safety factor on the measured FFT noise floor.
_NOISE_FACTOR = 4.0


@dataclass(frozen=True)
class BinLaw:
    """The blanket count of one bin: Poisson(mean) when ``trials`` is None, else Binomial."""

    mean: float
    trials: int | None = None

    @property
    def p(self) -> float:
        """Success probability of the binomial (``trials`` must be set)."""
        assert self.trials is not None and self.trials > 0
        return self.mean / self.trials

    def window(self) -> tuple[int, int]:
        """Counts lo..hi summed explicitly; the rest is handled as tail mass."""
        sigma = math.sqrt(max(self.mean, 0.0))
        margin = WINDOW_SIGMAS * sigma + WINDOW_SIGMAS**2 + 2.0
        lo = max(0, math.floor(self.mean - margin))
        hi = math.ceil(self.mean + margin) + 1
        if self.trials is not None:
            hi = min(hi, self.trials + 1)
        return lo, hi

    def pmf(self, counts: np.ndarray) -> np.ndarray:
        """f(counts), zero outside the support (:mod:`segshuffle.core.distributions`)."""
        if self.mean == 0.0 or self.trials == 0:
            return np.where(counts == 0, 1.0, 0.0)
        if self.trials is None:
            return distributions.poisson_pmf(counts, self.mean)
        return distributions.binom_pmf(counts, self.trials, self.p)

    def outside(self, lo: int, hi: int) -> float:
        """Pr[count < lo] + Pr[count > hi]."""
        if self.mean == 0.0 or self.trials == 0:
            return 0.0 if lo <= 0 <= hi else 1.0
        if self.trials is None:
            # Two counts: at small means the scalar tails (the same sums, without numpy's
            # cost per call), at large ones numpy's (the windows hold many masses).
            if self.mean <= SCALAR_TAILS_UP_TO:
                scalar = distributions.scalar_poisson_tails([lo - 1, hi], self.mean)
                return scalar.lower[0] + scalar.upper[1]
            tails = distributions.poisson_tails(np.array([lo - 1, hi]), self.mean)
            return float(tails.lower[0] + tails.upper[1])
        return (distributions.binom_cdf(lo - 1, self.trials, self.p)
                + distributions.binom_sf(hi, self.trials, self.p))

    def previous_ratio(self, counts: np.ndarray) -> np.ndarray:
        """f(a - 1) / f(a) for a >= 1 inside the support (inf where f(a) = 0 < f(a - 1))."""
        a = counts.astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.trials is None:
                ratio = a / self.mean if self.mean > 0.0 else np.full_like(a, np.inf)
            elif self.trials == 0 or self.mean == 0.0:
                ratio = np.full_like(a, np.inf)
            else:
                n, p = self.trials, self.p
                remaining = n - a + 1.0
                ratio = np.where(remaining > 0.0, a * (1.0 - p) / (remaining * p), np.inf)
        return np.where(a <= 0.0, 0.0, ratio)


@dataclass(frozen=True)
class LossDistribution:
    """A sub-probability pmf on the grid h * (offset + i), plus an atom at +infinity."""

    step: float
    offset: int
    pmf: np.ndarray
    infinity: float
    noise: float = 0.0  # bound on the absolute rounding of each pmf entry


#: Relative widening of the share of an atom's mass moved up to the grid point above it.
_UPWARD_MARGIN = 1e-12


def upper_grid_index(losses: np.ndarray, step: float) -> np.ndarray:
    """floor(L / h + 1e-9): the grid point :func:`discretise` places an upper bound's atom
    from (as floats), the same operations in the same order."""
    return np.floor(losses / step + 1e-9)


def discretise(losses: np.ndarray, masses: np.ndarray, step: float, upper: bool
               ) -> tuple[int, np.ndarray]:
    """(offset, pmf): the atoms (losses, masses) put on the grid step * (offset + i).

    *Upper* (connect the dots): an atom of P-mass p at loss L between the grid
    points x = i h and x + h is split into p (1 - w) at x and p w at x + h with

        w = (1 - e^{-(L - x)}) / (1 - e^{-h}),

    which keeps its P-mass and its Q-mass p e^{-L}.  In z = e^{-L} the split is a
    mean-preserving spread, and every hockey-stick divergence is the P-expectation
    of g_a(z) = (1 - a z)_+, convex and non-increasing in z; by Jensen the split
    raises every D_a (a >= 0), so the grid pair dominates the pair (Blackwell), and
    its compositions dominate the compositions.  Moving extra mass up (w widened by
    a relative 1e-12, L by 1e-9 steps, for the rounding of the exponentials and the
    logarithm) lowers the mean of z and only raises every D_a further.  The error
    is second order in h: an atom whose cell does not straddle log a adds nothing.
    *Lower*: every loss is rounded down to the grid (optimistic).
    """
    scaled = losses / step
    if not upper:
        index = np.floor(scaled - 1e-9).astype(np.int64)
        offset = int(index.min())
        return offset, np.bincount(index - offset, weights=masses)
    scaled = scaled + 1e-9
    below = np.floor(scaled)
    above_share = np.minimum(
        1.0, (-np.expm1(-(scaled - below) * step) / -math.expm1(-step)) * (1.0 + _UPWARD_MARGIN))
    index = below.astype(np.int64)
    offset = int(index.min())
    size = int(index.max()) - offset + 2
    up = masses * above_share
    pmf = np.bincount(index - offset, weights=masses - up, minlength=size)
    pmf += np.bincount(index + 1 - offset, weights=up, minlength=size)
    return offset, pmf


#: Up to this many pairs of atoms a convolution may be summed atom by atom.
_DIRECT_PAIRS = 1 << 20


def _sparse_is_cheaper(atoms_x: int, atoms_y: int, dense_size: int) -> bool:
    """Whether summing atom by atom (exact) costs less than an FFT of ``dense_size`` points."""
    pairs = atoms_x * atoms_y
    return pairs <= _DIRECT_PAIRS and pairs <= 8 * dense_size


def pair_loss(law: BinLaw, lam: float, *, upper: bool, step: float = DEFAULT_STEP
              ) -> LossDistribution:
    """The PLD of one item pair with independent bins of law ``law`` (module docstring).

    The step is enlarged when the loss range would need more than MAX_BIN_POINTS
    points per bin.
    """
    if not 0.0 < lam <= 1.0:
        raise ValueError(f"lambda must be in (0, 1], got {lam}")
    lo, hi = law.window()
    counts = np.arange(lo, hi + 1, dtype=np.int64)
    masses = law.pmf(np.arange(lo - 1, hi + 1, dtype=np.int64))  # f(lo - 1) .. f(hi)
    f, f_prev = masses[1:], masses[:-1]
    f_lam = (1.0 - lam) * f + lam * f_prev
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = law.previous_ratio(counts)
        loss = np.log1p(lam * (ratio - 1.0))
    loss = np.where(f > 0.0, loss, np.inf)
    loss = np.where(f_lam > 0.0, loss, -np.inf)
    # A ~ f_lam contributes l(A); B ~ f contributes -l(B).
    a_finite = np.isfinite(loss) & (f_lam > 0.0)
    b_finite = np.isfinite(loss) & (f > 0.0)
    a_inf = float(np.sum(f_lam[~a_finite & (loss > 0)]))
    b_inf = float(np.sum(f[~b_finite & (loss < 0)]))
    if upper:
        # A = (blanket) + (victim's message with probability lam) lies outside lo..hi when
        # the blanket lies outside lo..hi, or outside lo-1..hi-1 and the message was sent.
        a_inf += (1.0 - lam) * law.outside(lo, hi) + lam * law.outside(lo - 1, hi - 1)
        b_inf += law.outside(lo, hi)
    spread = 0.0
    finite = loss[np.isfinite(loss)]
    if finite.size:
        spread = float(finite.max() - finite.min())
    step = max(step, spread / MAX_BIN_POINTS)
    if not a_finite.any() or not b_finite.any():  # every outcome has an infinite loss
        offset, pmf, noise = 0, np.zeros(1), 0.0
    else:
        # Each bin is a pair of its own ((f_lam, f) and (f, f_lam)); the item pair is
        # their composition, so each is put on the grid and the two are convolved.
        a_offset, a_pmf = discretise(loss[a_finite], f_lam[a_finite], step, upper)
        b_offset, b_pmf = discretise(-loss[b_finite], f[b_finite], step, upper)
        offset = a_offset + b_offset
        atom_pairs = int(np.count_nonzero(a_pmf)) * int(np.count_nonzero(b_pmf))
        if atom_pairs <= _DIRECT_PAIRS:
            # Add every pair of atoms exactly while that is affordable: FFT rounding
            # charged here would be carried through every composition.  Dense grids
            # are summed by numpy's direct convolution, sparse ones atom by atom.
            if a_pmf.size * b_pmf.size <= 8 * atom_pairs:
                pmf = np.convolve(a_pmf, b_pmf)
            else:
                offset, pmf = _sparse_convolve(a_offset, a_pmf, b_offset, b_pmf)
            noise = 0.0
        else:
            pmf, noise = _fft_convolve(a_pmf, b_pmf)
    infinity = 1.0 - (1.0 - min(a_inf, 1.0)) * (1.0 - min(b_inf, 1.0))
    return LossDistribution(step=step, offset=offset, pmf=pmf, infinity=infinity, noise=noise)


def _noise_floor(raw: np.ndarray) -> float:
    """A bound on the FFT's absolute rounding per entry of a non-negative result.

    The exact result has no negative entries, so the largest negative excursion
    measures the rounding; it is widened by a safety factor and floored at
    2^-52 of the largest entry.
    """
    largest_negative = float(max(0.0, -raw.min()))
    return _NOISE_FACTOR * max(largest_negative, 2.0**-52 * float(raw.max()))


def _fft_convolve(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """x * y by FFT, clipped at 0, with the per-entry rounding bound of :func:`_noise_floor`."""
    size = x.size + y.size - 1
    n = fft.next_fast_len(size, real=True)
    raw = fft.irfft(fft.rfft(x, n) * fft.rfft(y, n), n)[:size]
    return np.maximum(raw, 0.0), _noise_floor(raw)


@dataclass(frozen=True)
class ComposedLoss:
    """The j-fold composition of a pair's PLD, ready for hockey-stick evaluation.

    Only grid points with a positive loss are kept (the others never contribute
    to delta at E >= 0), with suffix sums of p_i and p_i e^{-L_i}.  ``noise``
    bounds the FFT's absolute rounding per grid point.
    """

    step: float
    first: int
    tail_p: np.ndarray
    tail_q: np.ndarray
    infinity: float
    noise: float
    inherited: float
    upper: bool

    @property
    def nbytes(self) -> int:
        """Memory held by the suffix sums (for :mod:`segshuffle.core.memo`)."""
        return int(self.tail_p.nbytes + self.tail_q.nbytes)

    def delta(self, eps: float) -> float:
        """delta(E) = Pr[L = inf] + sum_{L_i > E} p_i (1 - e^{E - L_i}) (upper or lower bound)."""
        if eps < 0.0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        # First kept index whose loss exceeds eps.
        start = max(0, math.floor(eps / self.step) + 1 - self.first)
        value = self.infinity
        if start < self.tail_p.size:
            value += max(0.0, float(self.tail_p[start] - math.exp(eps) * self.tail_q[start]))
            if self.upper:
                value += self.noise * (self.tail_p.size - start)
        if self.upper:
            value += self.inherited
        return min(value, 1.0)



def _sparse_convolve(x_offset: int, x: np.ndarray, y_offset: int, y: np.ndarray
                     ) -> tuple[int, np.ndarray]:
    """x * y summed atom by atom over the non-zero entries (exact: no FFT rounding)."""
    xi, yi = np.flatnonzero(x), np.flatnonzero(y)
    if xi.size == 0 or yi.size == 0:
        return x_offset + y_offset, np.zeros(1)
    sums = (xi[:, None] + yi[None, :]).ravel()
    low = int(sums.min())
    pmf = np.bincount(sums - low, weights=np.outer(x[xi], y[yi]).ravel())
    return x_offset + y_offset + low, pmf


def _composed(pair: LossDistribution, times: int, upper: bool) -> ComposedLoss:
    """The ``times``-fold composition of ``pair``.

    While the atoms are few, compositions are summed atom by atom (exact); the
    remaining power is taken by FFT, whose rounding is bounded by
    :func:`_noise_floor` and reported as ``noise``.
    """
    # Rounding already in the pair's pmf: an L1 error of at most G noise, which the
    # composition carries into the result at most ``times`` over.
    inherited = times * pair.noise * pair.pmf.size
    offset, pmf, done, noise = pair.offset, pair.pmf, 1, 0.0
    atoms = int(np.count_nonzero(pair.pmf))
    while done < times and _sparse_is_cheaper(int(np.count_nonzero(pmf)), atoms,
                                              pmf.size + pair.pmf.size - 1):
        offset, pmf = _sparse_convolve(offset, pmf, pair.offset, pair.pmf)
        done += 1
    if done < times:
        remaining = times - done
        size = pmf.size + remaining * (pair.pmf.size - 1)
        n = fft.next_fast_len(size, real=True)
        pair_spectrum = fft.rfft(pair.pmf, n)
        # Nothing summed yet: pmf is the pair itself, whose transform is at hand.
        base = pair_spectrum if done == 1 else fft.rfft(pmf, n)
        raw = fft.irfft(base * pair_spectrum**remaining, n)[:size]
        noise = _noise_floor(raw)
        pmf = np.maximum(raw, 0.0)
        offset += remaining * pair.offset
    # 1 - (1 - p)^times without the cancellation that loses a p below 1e-16.
    infinity = 1.0
    if pair.infinity < 1.0:
        infinity = -math.expm1(times * math.log1p(-pair.infinity))
    losses_index = offset + np.arange(pmf.size)
    keep = losses_index >= 1  # L = index * step > 0
    first_kept = int(np.argmax(keep)) if keep.any() else pmf.size
    kept = pmf[first_kept:]
    losses = pair.step * losses_index[first_kept:]
    tail_p = np.cumsum(kept[::-1])[::-1]
    tail_q = np.cumsum((kept * np.exp(-losses))[::-1])[::-1]
    return ComposedLoss(step=pair.step, first=int(offset + first_kept), tail_p=tail_p,
                        tail_q=tail_q, infinity=min(infinity, 1.0), noise=noise,
                        inherited=inherited, upper=upper)


#: Memory that kept compositions may hold (each is two arrays of its grid's size).
COMPOSED_CACHE_BYTES = 64 << 20


@memory_bounded_cache(COMPOSED_CACHE_BYTES, max_entries=512)
def composed_pair(law: BinLaw, lam: float, times: int, *, upper: bool,
                  step: float = DEFAULT_STEP) -> ComposedLoss:
    """The ``times``-fold composition of the item pair of :func:`pair_loss` (cached)."""
    return _composed(_kept_pair_loss(law, lam, upper, step), times, upper)


@lru_cache(maxsize=16)
def _kept_pair_loss(law: BinLaw, lam: float, upper: bool, step: float) -> LossDistribution:
    """:func:`pair_loss`, kept for the few pairs whose compositions are asked for several
    numbers of pairs in a row (the revealed-send bound's i = 2..s at one blanket)."""
    return pair_loss(law, lam, upper=upper, step=step)


def clear_caches() -> None:
    """Forget the kept compositions and pair losses (benchmarks measure cold costs)."""
    composed_pair.cache_clear()
    _kept_pair_loss.cache_clear()

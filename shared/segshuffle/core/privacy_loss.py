"""Privacy loss distributions of item pairs with independent bins, and their composition.

One implementation for both accountants: written against the array backend in use
(:mod:`segshuffle.core.arrays`), it runs on numpy and scipy's FFT on the server and in
full client installs, and on Python lists and the pure-Python FFT of
:mod:`segshuffle.core.arrays.python_fft` in light ones (the JavaScript accountant's arithmetic,
which the test vectors hold equal to it).

**The item pair.**  Let f be the pmf of a bin's blanket count (Poisson(mu), or
Binomial(n, p)), and f_lam(a) = (1 - lam) f(a) + lam f(a - 1) the pmf of a bin that also
receives the victim's message with probability lam.  With the two bins independent,

    P(a, b) = f_lam(a) f(b),        Q(a, b) = f(a) f_lam(b),

so the privacy loss log P/Q at (a, b) splits into one term per bin,

    L(a, b) = l(a) - l(b),          l(a) = log(f_lam(a) / f(a)) = log(1 - lam + lam f(a-1)/f(a)),

where, under P, a ~ f_lam and b ~ f are independent.  Hence the privacy loss
distribution (PLD) of the pair is the distribution of l(A) convolved with that of -l(B),
and the PLD of j independent pairs (composition) is its j-fold convolution.  For
Poisson(mu), f(a-1)/f(a) = a / mu; for Binomial(n, p) it is a (1 - p) / ((n - a + 1) p).
Where f(a) = 0 < f_lam(a) (above a binomial's support) or f_lam(b) = 0 < f(b) (b = 0 when
lam = 1) the loss is +infinity.

**Hockey-stick divergence from the PLD.**  For a loss L ~ P (with E_P[e^-L] <= 1),

    delta(E) = E_P[(1 - e^{E - L})_+] = Pr[L = inf] + sum_{L_i > E} p_i (1 - e^{E - L_i}),

which is non-decreasing in every loss value.

**Discretisation** (:func:`discretise`).  Each bin's loss law is a pair of its own
((f_lam, f) for the bin that may get the message, (f, f_lam) for the other), and the item
pair is their composition; so each is put on a grid of step h and the two are convolved.
*Upper bounds* connect the dots: an atom between two grid points is split between them
keeping its P- and Q-mass, which dominates it for every hockey-stick divergence (proof in
:func:`discretise`), with an error second order in h; the mass of counts outside the
summation window goes to +infinity.  *Lower bounds* (``upper=False``) round every loss
down and drop the mass outside the window; their error in the loss is at most 2 h per
pair.

**Composition** is summed atom by atom while the atoms are few (exact), the rest by FFT.
FFT rounding is absolute, about 1e-16 of the largest entry; the exact result has no
negative entry, so the largest negative excursion of the computed one measures it: four
times it (floored at 2^-52 of the largest entry) is charged per grid point summed
(:attr:`ComposedLoss.noise`), and the pair's own rounding is carried through the
composition (``inherited``).  Those allowances depend on the transform (numpy pads to a
fast length, the pure-Python one to a power of two), so the two backends' upper bounds
agree to about 1e-14 absolute; both are upper bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from . import arrays
from .bounded_cache import key_of, on_clear_all
from .errors import AccountantError
from .memo import memory_bounded_cache

__all__ = [
    "CHERNOFF_FROM",
    "COMPOSED_CACHE_BYTES",
    "DEFAULT_STEP",
    "LOWER_STEP",
    "MAX_BIN_POINTS",
    "WINDOW_SIGMAS",
    "BinLaw",
    "ComposedLoss",
    "LossDistribution",
    "clear_caches",
    "compose_loss",
    "composed_pair",
    "discretise",
    "grid_floor",
    "grid_index",
    "pair_loss",
    "sparse_is_cheaper",
]

#: Grid step of the loss for upper bounds (connect the dots: the error is second order).
DEFAULT_STEP = 2e-3

#: Grid step of the loss for lower bounds (rounded down: the eps error is at most 2 h a pair).
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

#: Chernoff exponents from which the mass outside a bin's window is bounded rather than
#: summed (:meth:`BinLaw.outside_bound`): e^-50 ~ 2e-22 is far below any delta a campaign
#: certifies, and the sums cost more than the rest of a pair at small means.
CHERNOFF_FROM = 50.0

#: Relative amount by which a Chernoff exponent is lowered before it is used: far more
#: than its rounding (:func:`_poisson_exponent`, :func:`_binomial_exponent`).
_EXPONENT_MARGIN = 1e-6

#: Steps a loss is moved outwards (up in an upper bound, down in a lower one) before it
#: is placed: covers the rounding of the logarithm (~1e-16 |l|).
_LOSS_MARGIN = 1e-9

Vector = Any  # a vector of the backend in use (:mod:`segshuffle.core.arrays`)


@dataclass(frozen=True)
class BinLaw:
    """The blanket count of one bin: Poisson(mean) when ``trials`` is None, else
    Binomial(trials, mean / trials)."""

    mean: float
    trials: int | None = None

    @property
    def p(self) -> float:
        """Success probability of the binomial (``trials`` must be set)."""
        assert self.trials is not None and self.trials > 0
        return self.mean / self.trials

    @property
    def key(self) -> tuple:
        """A cache key (:func:`segshuffle.core.bounded_cache.key_of`)."""
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

    def pmf(self, counts: Vector) -> Vector:
        """f(counts), elementwise over an integer vector; 0 outside the support."""
        xp = arrays.namespace()
        if self.mean == 0.0 or self.trials == 0:
            return xp.where(counts == 0, 1.0, 0.0)
        if self.trials is None:
            return xp.poisson_pmf(counts, self.mean)
        return xp.binom_pmf(counts, self.trials, self.p)

    def outside(self, lo: int, hi: int) -> float:
        """Pr[count < lo] + Pr[count > hi]."""
        if self.mean == 0.0 or self.trials == 0:
            return 0.0 if lo <= 0 <= hi else 1.0
        xp = arrays.namespace()
        if self.trials is None:
            return xp.poisson_outside(lo, hi, self.mean)
        return float(xp.binom_cdf(lo - 1, self.trials, self.p)) + float(
            xp.binom_sf(hi, self.trials, self.p))

    def outside_bound(self, lo: int, hi: int) -> float:
        """An upper bound on :meth:`outside`: Chernoff's on each tail where the window
        reaches far into it (both bounds at most e^-CHERNOFF_FROM), else the tails' sums.

        For k >= E[X] (upper tail) or k <= E[X] (lower tail), Pr[X >= k] resp.
        Pr[X <= k] is at most min over t of E[e^{t X}] e^{-t k}, which is e^{-mu h(k / mu)}
        with h(x) = x ln x - x + 1 for Poisson(mu), and e^{-n D(k / n || p)} with D the
        Kullback-Leibler divergence of Bernoulli laws for Binomial(n, p) (at k = 0 and
        k = n they are the exact masses).  Each exponent is lowered by a relative 1e-6
        before use, more than its rounding, so the value stays an upper bound.  A bound
        above the exact mass only adds to an upper bound's atom at +infinity.
        """
        if self.mean == 0.0 or self.trials == 0:
            return self.outside(lo, hi)
        below = 0.0 if lo <= 0 else self._tail_bound(lo - 1, upper_tail=False)
        if self.trials is not None and hi >= self.trials:
            above: float | None = 0.0
        else:
            above = self._tail_bound(hi + 1, upper_tail=True)
        if below is None or above is None:
            return self.outside(lo, hi)
        return below + above

    def _tail_bound(self, k: int, *, upper_tail: bool) -> float | None:
        """Chernoff's bound on Pr[X >= k] (``upper_tail``) or Pr[X <= k], or None where k
        is on the other side of the mean or the bound exceeds e^-CHERNOFF_FROM."""
        if (k < self.mean) if upper_tail else (k > self.mean):
            return None
        if self.trials is None:
            exponent = _poisson_exponent(k, self.mean)
        else:
            exponent = _binomial_exponent(k, self.trials, self.p)
        exponent *= 1.0 - _EXPONENT_MARGIN
        return math.exp(-exponent) if exponent >= CHERNOFF_FROM else None

    def previous_ratio(self, counts: Vector) -> Vector:
        """f(a - 1) / f(a) over an integer vector of counts a: 0 at a <= 0, inf where
        f(a) = 0 < f(a - 1) (above a binomial's support, or any a >= 1 of a point mass)."""
        xp = arrays.namespace()
        positive = counts > 0
        if self.trials is None and self.mean > 0.0:
            return xp.where(positive, counts / self.mean, 0.0)
        if self.trials is None or self.trials == 0 or self.mean == 0.0:
            return xp.where(positive, math.inf, 0.0)
        p = self.p
        remaining = (self.trials + 1) - counts  # n - a + 1, exact
        inside = remaining > 0
        ratio = counts * (1.0 - p) / (xp.where(inside, remaining, 1) * p)
        return xp.where(positive, xp.where(inside, ratio, math.inf), 0.0)


def _poisson_exponent(k: int, mean: float) -> float:
    """mu h(k / mu), h(x) = x ln x - x + 1 (h(0) = 1), as mu ((1 + u) ln(1 + u) - u) with
    u = (k - mu) / mu: without the cancellation of x ln x against x - 1 near x = 1 (the
    rounding left is a few ulps of (1 + u) u over the result's u^2 / 2, a relative
    ~1e-11 at the windows' u >= 12 / sqrt(mu), mu <= 1e12)."""
    if k <= 0:
        return mean
    u = (k - mean) / mean
    return mean * ((1.0 + u) * math.log1p(u) - u)


def _binomial_exponent(k: int, trials: int, p: float) -> float:
    """n D(a || p), a = k / n, D(a || p) = a ln(a / p) + (1 - a) ln((1 - a) / (1 - p)),
    each logarithm taken as log1p of the gap a - p over p and 1 - p (the exact masses'
    exponents at k = 0 and k = n).  At p = 1 every trial succeeds: Pr[X <= k] = 0 below n
    (an infinite exponent) and Pr[X >= n] = 1 (exponent 0), where the formula would divide
    by 1 - p = 0."""
    if p >= 1.0:
        return 0.0 if k >= trials else math.inf
    if k <= 0:
        return -trials * math.log1p(-p)
    if k >= trials:
        return -trials * math.log(p)
    a = k / trials
    gap = a - p
    return trials * (a * math.log1p(gap / p) + (1.0 - a) * math.log1p(-gap / (1.0 - p)))


@dataclass(frozen=True)
class LossDistribution:
    """A sub-probability mass function on the grid h (offset + i), plus an atom at +inf.

    ``step`` is the grid step h, ``pmf[i]`` the mass at h (offset + i) (a vector of the
    backend that computed it), ``infinity`` the atom at +infinity and ``noise`` a bound on
    the absolute rounding of each entry.
    """

    step: float
    offset: int
    pmf: Vector
    infinity: float
    noise: float = 0.0


def grid_floor(loss: float, step: float, upper: bool) -> int:
    """Index of the grid point an atom at ``loss`` is placed from: floor(l / h + 1e-9) in
    an upper bound (its mass is split between that point and the next), floor(l / h - 1e-9)
    in a lower bound (all of it goes there).  Non-decreasing in the loss, so the smallest
    and largest loss give the grid's ends."""
    scaled = loss / step
    return math.floor(scaled + _LOSS_MARGIN) if upper else math.floor(scaled - _LOSS_MARGIN)


def grid_index(losses: Vector, step: float) -> Vector:
    """:func:`grid_floor` of an upper bound over a vector of losses (as integers): the
    same operations in the same order, for bounds that decide cells of the grid from it."""
    return arrays.namespace().floor_int(losses / step + _LOSS_MARGIN)


def discretise(losses: Vector, masses: Vector, step: float, upper: bool,
               grid: tuple[int, int] | None = None) -> tuple[int, Vector]:
    """(offset, pmf): the atoms (``losses``, ``masses``; finite, at least one) put on the
    grid step * (offset + i).

    *Upper* (connect the dots): an atom of P-mass p at loss L between the grid points
    x = i h and x + h is split into p (1 - w) at x and p w at x + h with

        w = (1 - e^{-(L - x)}) / (1 - e^{-h}),

    which keeps its P-mass and its Q-mass p e^{-L}.  In z = e^{-L} the split is a
    mean-preserving spread, and every hockey-stick divergence is the P-expectation of
    g_a(z) = (1 - a z)_+, convex and non-increasing in z; by Jensen the split raises every
    D_a (a >= 0), so the grid pair dominates the pair (Blackwell), and its compositions
    dominate the compositions.  Moving extra mass up (w widened by a relative 1e-12, then
    capped at 1, and L by 1e-9 steps, for the rounding of the exponentials and the
    logarithm) lowers the mean of z and only raises every D_a further.  The error is
    second order in h: an atom whose cell does not straddle log a adds nothing.
    *Lower*: every loss is rounded down to the grid (optimistic).

    The grid runs from the point at or below the smallest loss to the point above the
    largest in an upper bound (so its last entry, and its first where a share is capped,
    may be 0), to the point at or below the largest in a lower one; ``grid`` =
    (offset, size) gives a wider grid instead (a bound that adds other mass to it).
    """
    xp = arrays.namespace()
    scaled = losses / step + (_LOSS_MARGIN if upper else -_LOSS_MARGIN)
    index = xp.floor_int(scaled)
    if grid is None:
        low = int(xp.smallest(index))
        grid = (low, int(xp.largest(index)) - low + (2 if upper else 1))
    offset, size = grid
    if not upper:
        return offset, xp.scatter_add(index, masses, size, offset)
    # w = (e^{-(L - x)} - 1) / (e^{-h} - 1) (both negative: the same quotient, bit for bit,
    # as that of 1 - e^{...}), widened.
    with xp.quiet():
        share = xp.minimum(1.0, xp.expm1((scaled - index) * -step) / math.expm1(-step)
                           * (1.0 + _UPWARD_MARGIN))
    return offset, xp.split_scatter(index, masses, share, size, offset)


def sparse_is_cheaper(atoms_x: int, atoms_y: int, dense_size: int) -> bool:
    """Whether summing atom by atom (exact) costs less than an FFT of ``dense_size`` points."""
    pairs = atoms_x * atoms_y
    return pairs <= _DIRECT_PAIRS and pairs <= 8 * dense_size


@dataclass(frozen=True)
class _LawTerms:
    """What a pair's loss distribution needs of its bins' law, at every rate: the window
    lo..hi, the masses f(lo - 1) .. f(hi), the ratios f(a - 1) / f(a) for a = lo..hi, and
    the bounds on the mass outside lo..hi and outside lo - 1..hi - 1."""

    lo: int
    hi: int
    masses: Vector
    ratio: Vector
    outside: float
    outside_shifted: float

    @property
    def nbytes(self) -> int:
        """Memory held (for :mod:`segshuffle.core.memo`): an array's bytes, or about 32
        bytes an entry for a list of floats."""
        return sum(int(getattr(v, "nbytes", 32 * len(v))) for v in (self.masses, self.ratio))


#: Memory that kept laws' terms may hold (a window of a few thousand counts each).
LAW_CACHE_BYTES = 16 << 20


@memory_bounded_cache(LAW_CACHE_BYTES, max_entries=1024)
def _law_terms(backend: str, law: BinLaw) -> _LawTerms:
    """The rate-independent terms of :func:`pair_loss` for ``law`` on ``backend`` (kept:
    a root search over lambda asks for the pairs of one law at a dozen rates, and the
    masses, with their Stirling series, and the tails' bounds cost as much as the rest)."""
    with arrays.use(backend):
        xp = arrays.namespace()
        lo, hi = law.window()
        return _LawTerms(lo, hi, law.pmf(xp.arange(lo - 1, hi + 1)),
                         law.previous_ratio(xp.arange(lo, hi + 1)),
                         law.outside_bound(lo, hi), law.outside_bound(lo - 1, hi - 1))


def pair_loss(law: BinLaw, lam: float, *, upper: bool, step: float = DEFAULT_STEP
              ) -> LossDistribution:
    """The PLD of one item pair with independent bins of law ``law`` at rate ``lam``
    (module docstring).

    The step is enlarged when the loss range would need more than MAX_BIN_POINTS points
    per bin.
    """
    if not (lam > 0.0 and lam <= 1.0):
        raise AccountantError(f"lambda must be in (0, 1], got {lam}")
    xp = arrays.namespace()
    terms = _law_terms(arrays.name(), law)
    f, f_prev = terms.masses[1:], terms.masses[:-1]
    f_lam = (1.0 - lam) * f + lam * f_prev
    with xp.quiet():
        loss = xp.log1p(lam * (terms.ratio - 1.0))
    loss = xp.where(f > 0.0, loss, math.inf)
    loss = xp.where(f_lam > 0.0, loss, -math.inf)
    # A ~ f_lam contributes l(A); B ~ f contributes -l(B).  +inf only where f_lam > 0 = f,
    # -inf only where f_lam = 0 < f.
    a_inf = xp.total(xp.where(loss == math.inf, f_lam, 0.0))
    b_inf = xp.total(xp.where(loss == -math.inf, f, 0.0))
    if upper:
        # A = (blanket) + (victim's message with probability lam) lies outside lo..hi when
        # the blanket lies outside lo..hi, or outside lo-1..hi-1 and the message was sent.
        # (Each tail's mass is bounded, :meth:`BinLaw.outside_bound`.)
        a_inf += (1.0 - lam) * terms.outside + lam * terms.outside_shifted
        b_inf += terms.outside
    finite = xp.isfinite(loss)
    a_kept = finite & (f_lam > 0.0)
    b_kept = finite & (f > 0.0)
    a_losses = xp.compress(a_kept, loss)
    b_losses = -xp.compress(b_kept, loss)
    if a_losses.size and b_losses.size:
        finite_losses = xp.compress(finite, loss)
        step = max(step, (xp.largest(finite_losses) - xp.smallest(finite_losses))
                   / MAX_BIN_POINTS)
        # Each bin is a pair of its own ((f_lam, f) and (f, f_lam)); the item pair is
        # their composition, so each is put on the grid and the two are convolved.
        a_offset, a_pmf = discretise(a_losses, xp.compress(a_kept, f_lam), step, upper)
        b_offset, b_pmf = discretise(b_losses, xp.compress(b_kept, f), step, upper)
        offset = a_offset + b_offset
        if xp.count_nonzero(a_pmf) * xp.count_nonzero(b_pmf) <= _DIRECT_PAIRS:
            # Add every pair of atoms exactly while that is affordable: FFT rounding
            # charged here would be carried through every composition.
            shift, pmf = xp.convolve_exact(a_pmf, b_pmf)
            offset += shift
            noise = 0.0
        else:
            raw = xp.fft_compose(a_pmf, b_pmf, 1)
            pmf, noise = xp.maximum(raw, 0.0), _noise_floor(raw)
    else:  # every outcome has an infinite loss
        offset, pmf, noise = 0, xp.vector([0.0]), 0.0
    infinity = 1.0 - (1.0 - min(a_inf, 1.0)) * (1.0 - min(b_inf, 1.0))
    return LossDistribution(step=step, offset=offset, pmf=pmf, infinity=infinity, noise=noise)


def _noise_floor(raw: Vector) -> float:
    """A bound on the FFT's absolute rounding per entry of a non-negative result.

    The exact result has no negative entries, so the largest negative excursion measures
    the rounding; it is widened by a safety factor and floored at 2^-52 of the largest
    entry.
    """
    xp = arrays.namespace()
    largest_negative = max(0.0, -float(xp.smallest(raw)))
    return _NOISE_FACTOR * max(largest_negative, 2.0**-52 * float(xp.largest(raw)))


@dataclass(frozen=True)
class ComposedLoss:
    """The j-fold composition of a pair's PLD, ready for hockey-stick evaluation.

    Only grid points with a positive loss are kept (the others never count at E >= 0):
    ``tail_p[i]`` and ``tail_q[i]`` are the suffix sums of p_k and p_k e^{-L_k} from grid
    index ``first + i`` on.  ``noise`` bounds the transform's rounding per grid point and
    ``inherited`` the pair's own rounding carried through the composition.
    """

    step: float
    first: int
    tail_p: Vector
    tail_q: Vector
    infinity: float
    noise: float
    inherited: float
    upper: bool

    @property
    def nbytes(self) -> int:
        """Memory held by the suffix sums (for :mod:`segshuffle.core.memo`): an array's
        bytes, or about 32 bytes an entry for a list of floats."""
        return sum(int(getattr(tail, "nbytes", 32 * len(tail)))
                   for tail in (self.tail_p, self.tail_q))

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
            e = arrays.exp_or_inf(eps)
            value += max(0.0, float(self.tail_p[start]) - e * float(self.tail_q[start]))
            if self.upper:
                value += self.noise * (size - start)
        if self.upper:
            value += self.inherited
        return min(value, 1.0)


def compose_loss(pair: LossDistribution, times: int, upper: bool) -> ComposedLoss:
    """The ``times``-fold composition of ``pair``.

    While the atoms are few, compositions are summed atom by atom (exact); the remaining
    power is taken by FFT, whose rounding is bounded by :func:`_noise_floor` and reported
    as ``noise``.
    """
    xp = arrays.namespace()
    # Rounding already in the pair's pmf: an L1 error of at most G noise, which the
    # composition carries into the result at most ``times`` over.
    inherited = times * pair.noise * len(pair.pmf)
    offset, pmf, done, noise = pair.offset, pair.pmf, 1, 0.0
    atoms = xp.count_nonzero(pair.pmf)
    while done < times and sparse_is_cheaper(xp.count_nonzero(pmf), atoms,
                                             len(pmf) + len(pair.pmf) - 1):
        shift, pmf = xp.convolve_exact(pmf, pair.pmf)
        offset += pair.offset + shift
        done += 1
    if done < times:
        remaining = times - done
        # Nothing summed yet: pmf is the pair itself, whose transform is taken once.
        raw = xp.fft_compose(pmf, pair.pmf, remaining)
        noise = _noise_floor(raw)
        pmf = xp.maximum(raw, 0.0)
        offset += remaining * pair.offset
    # 1 - (1 - p)^times without the cancellation that loses a p below 1e-16.
    infinity = 1.0
    if pair.infinity < 1.0:
        infinity = -math.expm1(times * math.log1p(-pair.infinity))
    # Keep the grid points of positive loss: index offset + i >= 1.
    first_kept = min(len(pmf), max(0, 1 - offset))
    kept = pmf[first_kept:]
    losses = pair.step * xp.arange(offset + first_kept, offset + len(pmf))
    tail_p = xp.suffix_sums(kept)
    tail_q = xp.suffix_sums(kept * xp.exp(-losses))
    return ComposedLoss(step=pair.step, first=offset + first_kept, tail_p=tail_p,
                        tail_q=tail_q, infinity=min(infinity, 1.0), noise=noise,
                        inherited=inherited, upper=upper)


#: Memory that kept compositions may hold (each is two vectors of its grid's size).
COMPOSED_CACHE_BYTES = 64 << 20


def composed_pair(law: BinLaw, lam: float, times: int, *, upper: bool,
                  step: float = DEFAULT_STEP) -> ComposedLoss:
    """The ``times``-fold composition of the item pair of :func:`pair_loss` (cached)."""
    return _composed_pair(arrays.name(), law, lam, times, upper, step)


@memory_bounded_cache(COMPOSED_CACHE_BYTES, max_entries=512)
def _composed_pair(backend: str, law: BinLaw, lam: float, times: int, upper: bool,
                   step: float) -> ComposedLoss:
    return compose_loss(_kept_pair_loss(backend, law, lam, upper, step), times, upper)


@lru_cache(maxsize=16)
def _kept_pair_loss(backend: str, law: BinLaw, lam: float, upper: bool, step: float
                    ) -> LossDistribution:
    """:func:`pair_loss`, kept for the few pairs whose compositions are asked for several
    numbers of pairs in a row (the revealed-send bound's i = 2..s at one blanket)."""
    return pair_loss(law, lam, upper=upper, step=step)


def clear_caches() -> None:
    """Forget the kept compositions and pair losses (benchmarks measure cold costs)."""
    _composed_pair.cache_clear()
    _kept_pair_loss.cache_clear()
    _law_terms.cache_clear()


on_clear_all(clear_caches)

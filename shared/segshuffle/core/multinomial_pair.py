"""The privacy loss distribution of the multinomial two-bin pair, for composition.

**The pair.**  k blanket slots each land on item x with probability r, on x'
with probability r, and elsewhere (or nowhere) with probability 1 - 2r; the
victim adds one message to x (world P) or to x' (world Q) with probability
lambda.  The observed counts (a, b) on (x, x') have

    P(a, b) = (1 - lambda) M(a, b) + lambda M(a - 1, b),
    Q(a, b) = (1 - lambda) M(a, b) + lambda M(a, b - 1),

with M the Multinomial(k; r, r) pmf of the blanket.  This is the count pair of
:mod:`segshuffle.core.hockey_stick` (``own = lambda``, ``other = 0``), whose
divergence that module evaluates exactly for one pair.  Composing several
pairs needs the distribution of the privacy loss instead.

**The pair given its observed total.**  The observed total t = a + b = T + V,
with T ~ Binomial(k, 2r) =: w the blanket's total on the pair and V the victim's
message, has the same law in both worlds, pi(t) = (1 - lambda) w(t) + lambda w(t - 1).
Given t, the victim's message is among the t with probability

    alpha_t = lambda w(t - 1) / pi(t) = lambda R_t / (1 - lambda + lambda R_t),
    R_t = w(t - 1) / w(t) = t (1 - 2r) / ((k - t + 1) 2r),

and the other messages split uniformly: P(a | t) = (1 - alpha_t) h_t(a) +
alpha_t h_{t-1}(a - 1), with h_t the Binomial(t, 1/2) pmf, and Q(. | t) its mirror
image.  As h_{t-1}(a - 1) = h_t(a) 2a / t,

    P(a | t) = h_t(a) (c_t + a) / (c_t + t / 2),
    Q(a | t) = h_t(a) (c_t + t - a) / (c_t + t / 2),
    L(a | t) = ln(c_t + a) - ln(c_t + t - a),     c_t = (1 - alpha_t) t / (2 alpha_t)
             = ((1 - lambda) / lambda) rho (k - t + 1),  rho = r / (1 - 2r),

so c_t = 0 at t = k + 1 (the victim's message is surely there).

**Blocks of totals.**  Let the totals be cut into blocks B = [t_0, t_1] and let the
*block pair* reveal only the block, then, at the block's lowest total t_0, the split
of t_0 messages of which the victim's is one with probability alpha_{t_1} (the
block's largest: alpha_t increases with t, as R_t does).  Its pair (P', Q') has

    P'(B, a) = pi(B) h_{t_0}(a) (c + a) / (c + t_0 / 2),
    c = ((1 - lambda) / lambda) rho (k - t_1 + 1) t_0 / t_1,

and **the pair is a post-processing of the block pair** (the same kernel in both
worlds), so every hockey-stick divergence of the pair and of its compositions is at
most the block pair's (Blackwell).  The kernel, given (B, a): draw t from pi(. | B)
(the same law in both worlds); with probability 1 - alpha_t / alpha_{t_1} replace
the split by a fresh Binomial(t_0, 1/2) split (a mixture that lowers the victim's
probability from alpha_{t_1} to alpha_t without knowing the world: (alpha_t/alpha_{t_1})
[(1 - alpha_{t_1}) U + alpha_{t_1} X] + (1 - alpha_t/alpha_{t_1}) U = (1 - alpha_t) U + alpha_t X);
then add t - t_0 messages, each on x or x' with probability 1/2.  The output has the
law of the pair given t, and t has the law pi.  A block of one total is that total's
pair exactly; a block of relative width BLOCK_SHARE changes the blanket by at most that
share and the victim's probability by about as much, while the atoms drop by the block's width.

**Enumeration** (the windows and blocks of :mod:`segshuffle.core.pair_windows`).  Totals
t in a window of WINDOW_SIGMAS standard deviations around
the blanket's mean (each observed total t_lo .. t_hi + 1) are cut into blocks of
width max(1, floor(BLOCK_SHARE min(t_0, k + 1 - t_0))); in each block the splits a
within WINDOW_SIGMAS standard deviations of t_0 / 2 are atoms.  The P-mass outside,
Pr[T < t_lo] + Pr[T > t_hi] plus 2 max(W(B), W'(B)) Pr[Binomial(t_0, 1/2) outside]
per block (W(B) = sum w(t), W'(B) = sum w(t - 1) over the block, so pi(B) is at most
their maximum, and (c + a) / (c + t_0 / 2) <= 2), is computed from binomial tails
and, in an upper bound, put at +infinity.  Everything but pi(B) and c is
lambda-free and cached per (k, r).  Atoms are put on the grid of
:mod:`segshuffle.core.privacy_loss` by its
:func:`~segshuffle.core.privacy_loss.discretise` (connecting the dots), whose
composition then applies.  Only upper bounds use this pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from . import distributions
from .pair_windows import block_starts, enumerable, split_window, total_window
from .privacy_loss import LossDistribution, discretise, grid_index

#: The most grid points one pair's loss distribution may span; the step grows beyond it.
MAX_GRID_POINTS = 1 << 17


@dataclass(frozen=True, eq=False)
class PairAtoms:
    """The lambda-free part of the block pair (module docstring).

    Per block: its lowest and highest observed totals (``low``, ``high``), and the
    blanket's mass on its totals ``here`` = W(B) and one below ``before`` = W'(B).
    Per atom: its ``block``, its count ``a`` on x, ``split`` = h_{t_0}(a) and ``moment``
    = a h_{t_0}(a); per block, ``a_lo`` and ``a_hi``, its first and last split, and
    ``start``, the index of its first atom.  ``tail`` bounds the P-mass outside the atoms
    at every lambda.
    """

    slots: int
    r: float
    low: np.ndarray
    high: np.ndarray
    here: np.ndarray
    before: np.ndarray
    block: np.ndarray
    a: np.ndarray
    split: np.ndarray
    moment: np.ndarray
    a_lo: np.ndarray
    a_hi: np.ndarray
    start: np.ndarray
    tail: float


def _binomial_tail_outside(trials: np.ndarray, p: float, lo: np.ndarray, hi: np.ndarray
                           ) -> np.ndarray:
    """Pr[Binomial(trials, p) < lo] + Pr[Binomial(trials, p) > hi], elementwise."""
    below = distributions.binom_cdf(lo - 1, trials, p)
    above = distributions.binom_sf(hi, trials, p)
    return below + above


@lru_cache(maxsize=16)
def pair_atoms(slots: int, r: float) -> PairAtoms | None:
    """The atoms of the pair with ``slots`` blanket slots at rate ``r`` (None: too many)."""
    if not 0.0 < r < 0.5:
        raise ValueError(f"r must be in (0, 1/2), got {r}")
    if not enumerable(slots, r):
        return None
    q = 2.0 * r
    t_lo, t_hi = total_window(slots, q)
    starts = block_starts(slots, t_lo, t_hi + 1)
    low = np.array(starts, dtype=np.int64)
    high = np.append(low[1:] - 1, t_hi + 1)
    a_lo, a_hi = (np.array(ends, dtype=np.int64)
                  for ends in zip(*map(split_window, starts), strict=True))
    widths = a_hi - a_lo + 1
    # w(t) for t = t_lo - 1 .. t_hi + 1: each block's W(B) and W'(B) as sums over its totals.
    weights = np.exp(distributions.binom_logpmf(np.arange(t_lo - 1, t_hi + 2), slots, q))
    here = np.add.reduceat(weights[1:], low - t_lo)
    before = np.add.reduceat(weights[:-1], low - t_lo)
    block = np.repeat(np.arange(low.size), widths)
    first = np.repeat(a_lo - np.cumsum(np.concatenate(([0], widths[:-1]))), widths)
    a = np.arange(block.size, dtype=np.int64) + first
    t0 = low[block].astype(float)
    split = np.exp(special.gammaln(t0 + 1.0) - special.gammaln(a + 1.0)
                   - special.gammaln(t0 - a + 1.0) - t0 * math.log(2.0))
    outside = float(distributions.binom_cdf(t_lo - 1, slots, q)
                    + distributions.binom_sf(t_hi, slots, q))
    split_outside = _binomial_tail_outside(low, 0.5, a_lo, a_hi)
    outside += float(np.sum(2.0 * np.maximum(here, before) * split_outside))
    start = np.concatenate(([0], np.cumsum(widths)[:-1]))
    return PairAtoms(slots=slots, r=r, low=low, high=high, here=here, before=before,
                     block=block, a=a, split=split, moment=a * split, a_lo=a_lo, a_hi=a_hi,
                     start=start, tail=outside)


def _block_rates(atoms: PairAtoms, lam: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t_0, pi(B), c) of every block at rate ``lam`` (c = 0 where t_0 = 0)."""
    rho = atoms.r / (1.0 - 2.0 * atoms.r)
    low = atoms.low.astype(float)
    high = atoms.high.astype(float)
    pi = (1.0 - lam) * atoms.here + lam * atoms.before
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(low > 0.0, ((1.0 - lam) / lam) * rho * (atoms.slots - high + 1.0)
                     * low / high, 0.0)
    return low, pi, c


def _split_loss(c: np.ndarray, t0: np.ndarray, a: np.ndarray) -> np.ndarray:
    """L(a | t_0) = ln(c + a) - ln(c + t_0 - a), evaluated the one way every caller does
    (the cells of :func:`pair_loss` must hold exactly the atoms this puts in them)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(c + a) - np.log(c + (t0 - a))


def pair_losses(atoms: PairAtoms, lam: float, which: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(L, P-mass) of every atom of the block pair at rate ``lam`` (module docstring), or
    of the atoms at the indices ``which``.

    Atoms that world P cannot produce have L = -inf and P-mass 0 and should be
    dropped by the caller; those world Q cannot produce have L = +inf.
    """
    low, pi, c = _block_rates(atoms, lam)
    block = atoms.block if which is None else atoms.block[which]
    t0 = low[block]
    c_atom = c[block]
    a = (atoms.a if which is None else atoms.a[which]).astype(float)
    split = atoms.split if which is None else atoms.split[which]
    loss = np.where(t0 > 0.0, _split_loss(c_atom, t0, a), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(t0 > 0.0, (c_atom + a) / (c_atom + 0.5 * t0), 1.0)
    return loss, pi[block] * split * share


#: A block is summed cell by cell (:func:`pair_loss`) when it has at least this many atoms
#: per grid cell it spans; sparser blocks are put on the grid atom by atom.
ATOMS_PER_CELL = 8

#: Pairs with fewer atoms go atom by atom whatever their blocks: below this numpy's cost
#: per call of the cell path exceeds what it saves (the optimizer builds thousands of
#: small pairs).
CELLS_FROM_ATOMS = 50_000

#: Unit roundoff of a float64.
_UNIT_ROUNDOFF = 2.0**-53


def pair_loss(atoms: PairAtoms, lam: float, *, upper: bool, step: float) -> LossDistribution:
    """The loss distribution of the pair at rate ``lam`` on the grid ``step`` (module docstring).

    Atoms of infinite loss (b = 0 < a where c = 0: at t = k + 1, or anywhere when
    lam = 1) go to the infinity atom; atoms of loss -infinity carry no P-mass that matters
    (they never reach delta), and are dropped.  The step grows when the losses span
    more than MAX_GRID_POINTS points.

    **Cell by cell.**  In an upper bound, the atoms of a block with c > 0 are put on the
    grid by cells rather than one by one.  L(a | t_0) increases with a, so the atoms
    that :func:`~segshuffle.core.privacy_loss.discretise` places from the grid point
    x = j h (those with floor(L / h + 1e-9) = j) are a run a_j .. a_{j+1} - 1, whose
    ends are found by inverting L (a = ((c + t_0) e^y - c) / (1 + e^y)) and then
    checking the same floating-point expression that discretise's caller evaluates.
    discretise moves the share p (1 - e^{-(L - x')}) / (1 - e^{-h}) of an atom of P-mass p
    up (x' = x - 1e-9 h), which is linear in (p, q) with q = p e^{-L} its Q-mass, so a
    cell moves up

        (P - e^{x'} Q) / (1 - e^{-h}),   P = pi (c S_0 + S_1) / (c + t_0 / 2),
                                          Q = pi ((c + t_0) S_0 - S_1) / (c + t_0 / 2),

    with S_0 = sum h_{t_0}(a) and S_1 = sum a h_{t_0}(a) over the run (lambda-free,
    summed per lambda from the cached atoms: additions, no logarithm per atom).  Its
    rounding is charged: n positive terms summed in order lose at most n u relative, so
    P and Q are within (n + 2) u (1 + (c + t_0) / (c + t_0 - a_max)) of exact (Q by
    cancellation), and as e^{x'} Q <= P the moved mass is widened by twice that times
    P / (1 - e^{-h}); moving mass up only raises every divergence (discretise's proof),
    so the result dominates the atom-by-atom one up to that widening.  The per-atom
    widening by 1e-12 is kept.  Blocks with fewer than ATOMS_PER_CELL atoms per cell,
    those with c = 0, pairs of fewer than CELLS_FROM_ATOMS atoms, lower bounds and
    lambda = 1 go atom by atom as before.
    """
    if not 0.0 < lam <= 1.0:
        raise ValueError(f"lambda must be in (0, 1], got {lam}")
    if not upper or lam == 1.0 or atoms.split.size < CELLS_FROM_ATOMS:
        return _pair_loss_by_atom(atoms, lam, upper=upper, step=step)
    t0, pi, c = _block_rates(atoms, lam)
    a_lo = atoms.a_lo.astype(float)
    a_hi = atoms.a_hi.astype(float)
    regular = (t0 > 0.0) & (c > 0.0) & (pi > 0.0)
    end_lo = np.where(regular, _split_loss(c, t0, a_lo), 0.0)
    end_hi = np.where(regular, _split_loss(c, t0, a_hi), 0.0)
    # Which blocks are summed is decided on the step asked for (a wider one only puts
    # more atoms in each cell); summing is exact either way, this only saves work.
    widths = atoms.a_hi - atoms.a_lo + 1
    cells = grid_index(end_hi, step) - grid_index(end_lo, step) + 1.0
    summed = regular & (cells * ATOMS_PER_CELL <= widths)
    if not summed.any():
        return _pair_loss_by_atom(atoms, lam, upper=upper, step=step)
    # The atoms of the other blocks, one by one (the old way).
    single = np.flatnonzero(~regular[atoms.block])
    loss, p_mass = pair_losses(atoms, lam, single)
    infinity = float(np.sum(p_mass[np.isposinf(loss) & (p_mass > 0.0)])) + atoms.tail
    finite = np.isfinite(loss) & (p_mass > 0.0)
    single_loss, single_mass = loss[finite], p_mass[finite]
    ends = [end_lo[regular], end_hi[regular], single_loss]
    if not any(part.size for part in ends):
        return LossDistribution(step=step, offset=0, pmf=np.zeros(1),
                                infinity=min(infinity, 1.0))
    low_loss = min(float(part.min()) for part in ends if part.size)
    high_loss = max(float(part.max()) for part in ends if part.size)
    step = max(step, (high_loss - low_loss) / MAX_GRID_POINTS)

    def cell(block: np.ndarray, a: np.ndarray) -> np.ndarray:
        # discretise's grid index, on the same loss expression.
        return grid_index(_split_loss(c[block], t0[block], a), step)

    j_lo = grid_index(end_lo, step)
    j_hi = grid_index(end_hi, step)
    if not summed.all():
        extra = np.flatnonzero((regular & ~summed)[atoms.block])
        loss, p_mass = pair_losses(atoms, lam, extra)
        keep = p_mass > 0.0
        single_loss = np.concatenate((single_loss, loss[keep]))
        single_mass = np.concatenate((single_mass, p_mass[keep]))
    blocks = np.flatnonzero(summed)
    # The cells of the summed blocks: block b spans cells j_lo[b] .. j_hi[b]; the first
    # atom of cell j > j_lo[b] is the least a with cell(a) >= j.
    inner = (j_hi[blocks] - j_lo[blocks]).astype(np.int64)
    b_of = np.repeat(blocks, inner)
    j = j_lo[b_of] + 1.0 + (np.arange(b_of.size)
                            - np.repeat(np.cumsum(inner) - inner, inner))
    y = (j - 1e-9) * step
    grow = np.exp(y)
    guess = np.ceil(((c[b_of] + t0[b_of]) * grow - c[b_of]) / (1.0 + grow))
    guess = np.where(np.isfinite(guess), guess, a_lo[b_of] + 1.0)
    first = np.clip(guess, a_lo[b_of] + 1.0, a_hi[b_of])
    for _ in range(64):
        low_side = cell(b_of, first) < j
        high_side = (first - 1.0 > a_lo[b_of]) & (cell(b_of, first - 1.0) >= j)
        if not (low_side.any() or high_side.any()):
            break
        first = np.clip(first + low_side - high_side, a_lo[b_of] + 1.0, a_hi[b_of])
    else:  # never seen: L is monotone, so the guesses are off by an atom at most
        return _pair_loss_by_atom(atoms, lam, upper=upper, step=step)
    # Every cell as (block, grid index, first atom, end): first cells, then the others.
    cell_block = np.concatenate((blocks, b_of))
    cell_index = np.concatenate((j_lo[blocks], j))
    cell_first = np.concatenate((a_lo[blocks], first))
    order = np.lexsort((cell_index, cell_first, cell_block))
    cell_block, cell_index, cell_first = cell_block[order], cell_index[order], cell_first[order]
    cell_end = np.append(cell_first[1:], 0.0)
    last_of_block = np.append(cell_block[1:] != cell_block[:-1], True)
    cell_end = np.where(last_of_block, a_hi[cell_block] + 1.0, cell_end)
    occupied = cell_end > cell_first
    cell_block, cell_index = cell_block[occupied], cell_index[occupied]
    cell_first, cell_end = cell_first[occupied], cell_end[occupied]
    # Sums over each run: reduceat over the atoms, with the first atom of every block not
    # summed here as a boundary too (its segment is dropped).
    starts = atoms.start[cell_block] + (cell_first - a_lo[cell_block]).astype(np.int64)
    others = atoms.start[np.flatnonzero(~summed)]
    bounds = np.concatenate((starts, others))
    kinds = np.concatenate((np.ones(starts.size, bool), np.zeros(others.size, bool)))
    order = np.argsort(bounds, kind="stable")
    bounds, kinds = bounds[order], kinds[order]
    s0 = np.add.reduceat(atoms.split, bounds)[kinds]
    s1 = np.add.reduceat(atoms.moment, bounds)[kinds]
    # The cells are in the order of their starts already (blocks and atoms increase).
    cb = cell_block
    scale = pi[cb] / (c[cb] + 0.5 * t0[cb])
    p_cell = scale * (c[cb] * s0 + s1)
    q_cell = scale * ((c[cb] + t0[cb]) * s0 - s1)
    count = cell_end - cell_first
    last_a = cell_end - 1.0
    rounding = 2.0 * (count + 2.0) * _UNIT_ROUNDOFF * (
        1.0 + (c[cb] + t0[cb]) / (c[cb] + t0[cb] - last_a)) + 4.0 * _UNIT_ROUNDOFF
    lift = 1.0 / -math.expm1(-step)
    raised = np.maximum(p_cell - np.exp((cell_index - 1e-9) * step) * q_cell, 0.0)
    up = np.minimum(p_cell, (raised * (1.0 + 1e-12) + rounding * p_cell) * lift)
    # Some block is summed, so there is a cell; the single atoms may add grid points.
    index = cell_index.astype(np.int64)
    offset, top = int(index.min()), int(index.max()) + 1
    if single_loss.size:
        single_offset, single_pmf = discretise(single_loss, single_mass, step, upper)
        offset = min(offset, single_offset)
        top = max(top, single_offset + single_pmf.size - 1)
    size = top - offset + 1
    pmf = np.bincount(index - offset, weights=p_cell - up, minlength=size)
    pmf += np.bincount(index + 1 - offset, weights=up, minlength=size)
    if single_loss.size:
        pmf[single_offset - offset:single_offset - offset + single_pmf.size] += single_pmf
    return LossDistribution(step=step, offset=offset, pmf=pmf, infinity=min(infinity, 1.0))


def _pair_loss_by_atom(atoms: PairAtoms, lam: float, *, upper: bool, step: float
                       ) -> LossDistribution:
    """:func:`pair_loss` with every atom put on the grid by itself."""
    loss, p_mass = pair_losses(atoms, lam)
    infinite = np.isposinf(loss) & (p_mass > 0.0)
    finite = np.isfinite(loss) & (p_mass > 0.0)
    infinity = float(np.sum(p_mass[infinite]))
    if upper:
        infinity += atoms.tail
    values = loss[finite]
    masses = p_mass[finite]
    if values.size == 0:
        return LossDistribution(step=step, offset=0, pmf=np.zeros(1),
                                infinity=min(infinity, 1.0))
    spread = float(values.max() - values.min())
    step = max(step, spread / MAX_GRID_POINTS)
    offset, pmf = discretise(values, masses, step, upper)
    return LossDistribution(step=step, offset=offset, pmf=pmf, infinity=min(infinity, 1.0))

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

**Backends.**  Written once against :mod:`segshuffle.core.arrays`: numpy's on the server
and in a numpy client, the standard library's in a light client install (the web client's
JavaScript accountant is its port, held equal by the test vectors).  Only where the cells
pay differs: on lists from the first block that qualifies, on numpy from CELLS_FROM_ATOMS
atoms on (below that, numpy's cost per call exceeds what the cells save).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import arrays
from .bounded_cache import key_of, registered_cache
from .errors import AccountantError
from .pair_windows import MAX_ATOMS, block_starts, enumerable, split_window, total_window
from .privacy_loss import LossDistribution, discretise, grid_floor, grid_index

__all__ = ["MAX_ATOMS", "PairAtoms", "clear_caches", "pair_atoms", "pair_loss", "pair_losses"]

#: The most grid points one pair's loss distribution may span; the step grows beyond it.
MAX_GRID_POINTS = 1 << 17

#: A block is summed cell by cell (:func:`pair_loss`) when it has at least this many atoms
#: per grid cell it spans; sparser blocks are put on the grid atom by atom.
ATOMS_PER_CELL = 8

#: Per backend, the atoms from which a pair is summed by cells at all: numpy's cost per
#: call of the cell path exceeds what it saves below 50,000 atoms (the optimizer builds
#: thousands of small pairs); on lists every pass over the atoms costs, so from the first.
CELLS_FROM_ATOMS = {arrays.NUMPY: 50_000, arrays.PYTHON: 0}

#: Unit roundoff of a float64.
_UNIT_ROUNDOFF = 2.0**-53


@dataclass(frozen=True, eq=False)
class PairAtoms:
    """The lambda-free part of the block pair (module docstring), as vectors of the backend
    that built it.

    Per block: its lowest and highest observed totals (``low``, ``high``), and the
    blanket's mass on its totals ``here`` = W(B) and one below ``before`` = W'(B); ``a_lo``
    and ``a_hi``, its first and last split, and ``start``, the index of its first atom.
    Per atom, block by block and a increasing: its ``block``, its count ``a`` on x,
    ``split`` = h_{t_0}(a) and ``moment`` = a h_{t_0}(a).  ``tail`` bounds the P-mass
    outside the atoms at every lambda.
    """

    slots: int
    r: float
    low: Any
    high: Any
    here: Any
    before: Any
    a_lo: Any
    a_hi: Any
    start: Any
    block: Any
    a: Any
    split: Any
    moment: Any
    tail: float

    @property
    def size(self) -> int:
        """The number of atoms."""
        return len(self.split)


_atoms_cache = registered_cache(16)


def pair_atoms(slots: int, r: float) -> PairAtoms | None:
    """The atoms of the pair with ``slots`` blanket slots at rate ``r`` (None: too many),
    on the backend in use (kept per backend)."""
    if not (r > 0.0 and r < 0.5):
        raise AccountantError(f"r must be in (0, 1/2), got {r}")
    return _atoms_cache.get(key_of(arrays.name(), slots, r), lambda: _enumerate(slots, r))


def _enumerate(slots: int, r: float) -> PairAtoms | None:
    if not enumerable(slots, r):
        return None
    xp = arrays.namespace()
    q = 2.0 * r
    t_lo, t_hi = total_window(slots, q)
    starts = block_starts(slots, t_lo, t_hi + 1)
    windows = [split_window(t) for t in starts]
    low = xp.indices(starts)
    high = xp.indices([*(t - 1 for t in starts[1:]), t_hi + 1])
    a_lo = xp.indices([lo for lo, _ in windows])
    a_hi = xp.indices([hi for _, hi in windows])
    widths = a_hi - a_lo + 1
    first_atom = xp.cumsum(widths) - widths
    # w(t) for t = t_lo - 1 .. t_hi + 1: each block's W(B) and W'(B) as sums over its totals.
    weights = xp.binom_pmf(xp.arange(t_lo - 1, t_hi + 2), slots, q)
    offsets = [t - t_lo for t in starts]
    here = xp.segment_totals(weights[1:], offsets)
    before = xp.segment_totals(weights[:-1], offsets)
    block = xp.repeat(xp.arange(0, len(starts)), widths)
    a = xp.runs(a_lo, a_hi)
    split = xp.half_pmf_runs(low, a_lo, a_hi)  # h_{t_0}(a)
    # The P-mass outside: the blanket's totals outside the window, and per block the
    # splits outside its window, X ~ Binomial(t_0, 1/2): by symmetry Pr[X < a_lo] =
    # Pr[X >= t_0 - a_lo + 1], so Pr[X < a_lo] + Pr[X > a_hi] <= 2 Pr[X > min(t_0 - a_lo,
    # a_hi)], with equality for the windows around t_0 / 2 (one tail computed, not two).
    outside = xp.binom_cdf(t_lo - 1, slots, q) + xp.binom_sf(t_hi, slots, q)
    split_outside = xp.half_tail(low, xp.minimum(low - a_lo, a_hi) + 1) * 2.0
    outside += xp.total(xp.maximum(here, before) * split_outside * 2.0)
    return PairAtoms(slots=slots, r=r, low=low, high=high, here=here, before=before,
                     a_lo=a_lo, a_hi=a_hi, start=first_atom, block=block, a=a,
                     split=split, moment=split * a, tail=float(outside))


def clear_caches() -> None:
    """Forget the kept atoms (cold benchmarks)."""
    _atoms_cache.clear()


def _block_rates(atoms: PairAtoms, lam: float) -> tuple[Any, Any, Any]:
    """(t_0, pi(B), c) of every block at rate ``lam``.

    A block of total t_0 = 0 has one atom, a = 0, of loss 0 and share 1 whatever c is; it
    gets c = 1, so that the atoms' formulas give exactly that (ln 1 - ln 1 = 0, 1 / 1)
    without a case of their own."""
    xp = arrays.namespace()
    rho = atoms.r / (1.0 - 2.0 * atoms.r)
    low = atoms.low * 1.0
    pi = atoms.here * (1.0 - lam) + atoms.before * lam
    # t_1 >= t_0 >= 1 where c is used: the maximum only keeps t_0 = 0 from dividing by 0.
    coefficient = ((1.0 - lam) / lam) * rho
    c = xp.where(low > 0.0, (atoms.high * -1.0 + (atoms.slots + 1.0)) * coefficient * low
                 / xp.maximum(atoms.high * 1.0, 1.0), 1.0)
    return low, pi, c


def _split_loss(c: Any, t0: Any, a: Any, c_plus_a: Any = None) -> Any:
    """L(a | t_0) = ln(c + a) - ln(c + t_0 - a), evaluated the one way every caller does
    (the cells of :func:`pair_loss` must hold exactly the atoms this puts in them);
    ``c_plus_a``, when given, is c + a, already computed."""
    xp = arrays.namespace()
    with xp.quiet():
        return xp.log(c + a if c_plus_a is None else c_plus_a) - xp.log(c + (t0 - a))


def pair_losses(atoms: PairAtoms, lam: float, which: Any = None) -> tuple[Any, Any]:
    """(L, P-mass) of every atom of the block pair at rate ``lam`` (module docstring), in the
    atoms' order, or of the atoms at the indices ``which``.

    Atoms that world P cannot produce have L = -inf and P-mass 0 and should be
    dropped by the caller; those world Q cannot produce have L = +inf.
    """
    xp = arrays.namespace()
    low, pi, c = _block_rates(atoms, lam)
    if which is None:
        block, a, split = atoms.block, atoms.a, atoms.split
    else:
        block, a, split = (xp.take(atoms.block, which), xp.take(atoms.a, which),
                           xp.take(atoms.split, which))
    c_atom = xp.take(c, block)
    t0 = xp.take(low, block)
    c_plus_a = c_atom + a
    share = c_plus_a / (c_atom + t0 * 0.5)
    return _split_loss(c_atom, t0, a, c_plus_a), xp.take(pi, block) * split * share


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
    those with c = 0, lower bounds and lambda = 1 go atom by atom, and so do whole pairs
    below the backend's CELLS_FROM_ATOMS.
    """
    if not (lam > 0.0 and lam <= 1.0):
        raise AccountantError(f"lambda must be in (0, 1], got {lam}")
    if not upper or lam == 1.0 or atoms.size < CELLS_FROM_ATOMS[arrays.name()]:
        return _by_atom(atoms, lam, upper=upper, step=step)
    xp = arrays.namespace()
    t0, pi, c = _block_rates(atoms, lam)
    a_lo = atoms.a_lo * 1.0
    a_hi = atoms.a_hi * 1.0
    regular = (t0 > 0.0) & (c > 0.0) & (pi > 0.0)
    end_lo = xp.where(regular, _split_loss(c, t0, a_lo), 0.0)
    end_hi = xp.where(regular, _split_loss(c, t0, a_hi), 0.0)
    # Which blocks are summed is decided on the step asked for (a wider one only puts
    # more atoms in each cell); summing is exact either way, this only saves work.
    cells = grid_index(end_hi, step) - grid_index(end_lo, step) + 1
    summed = regular & (cells * ATOMS_PER_CELL <= atoms.a_hi - atoms.a_lo + 1)
    if not xp.any_true(summed):
        return _by_atom(atoms, lam, upper=upper, step=step)
    # Every other atom one by one: those of irregular blocks (infinite losses among them)
    # and of regular blocks too sparse to sum.
    others = xp.nonzero_at(xp.logical_not(summed))
    single = xp.runs(xp.take(atoms.start, others),
                     xp.take(atoms.start + (atoms.a_hi - atoms.a_lo), others))
    infinity, single_loss, single_mass = _kept_atoms(*pair_losses(atoms, lam, single))
    blocks = xp.nonzero_at(summed)
    summed_lo, summed_hi = xp.take(end_lo, blocks), xp.take(end_hi, blocks)
    ends = [summed_lo, summed_hi, single_loss]
    low_loss = min(xp.smallest(part) for part in ends if len(part))
    high_loss = max(xp.largest(part) for part in ends if len(part))
    step = max(step, (high_loss - low_loss) / MAX_GRID_POINTS)
    offset = grid_floor(low_loss, step, True)
    size = grid_floor(high_loss, step, True) - offset + 2
    cell_block, cell_index, cell_first, cell_end = _cells(atoms, c, t0, blocks, summed_lo,
                                                          summed_hi, step)
    # The sums of h and a h over each cell's run of atoms, in order.
    run_start = xp.floor_int(xp.take(atoms.start, cell_block)
                             + (cell_first - xp.take(a_lo, cell_block)))
    run_end = run_start + xp.floor_int(cell_end - cell_first)
    s0 = xp.run_totals(atoms.split, run_start, run_end)
    s1 = xp.run_totals(atoms.moment, run_start, run_end)
    c_cell = xp.take(c, cell_block)
    t0_cell = xp.take(t0, cell_block)
    scale = xp.take(pi, cell_block) / (c_cell + t0_cell * 0.5)
    p_cell = scale * (c_cell * s0 + s1)
    q_cell = scale * ((c_cell + t0_cell) * s0 - s1)
    count = cell_end - cell_first
    rounding = (count + 2.0) * (2.0 * _UNIT_ROUNDOFF) * (
        (c_cell + t0_cell) / (c_cell + t0_cell - (cell_end - 1.0)) + 1.0) + 4.0 * _UNIT_ROUNDOFF
    lift = 1.0 / -math.expm1(-step)
    with xp.quiet():
        raised = xp.maximum(p_cell - xp.exp((cell_index - 1e-9) * step) * q_cell, 0.0)
    up = xp.minimum(p_cell, (raised * (1.0 + 1e-12) + rounding * p_cell) * lift)
    pmf = (xp.scatter_add(cell_index, p_cell - up, size, offset)
           + xp.scatter_add(cell_index + 1, up, size, offset))
    if len(single_loss):
        pmf = pmf + discretise(single_loss, single_mass, step, True, (offset, size))[1]
    return LossDistribution(step=step, offset=offset, pmf=pmf,
                            infinity=min(infinity + atoms.tail, 1.0))


def _cells(atoms: PairAtoms, c: Any, t0: Any, blocks: Any, end_lo: Any, end_hi: Any,
           step: float) -> tuple[Any, Any, Any, Any]:
    """(block, grid index j, first atom a_j, end a_{j+1}) of every occupied cell of the
    summed ``blocks`` (whose first and last splits have the losses ``end_lo``, ``end_hi``),
    block by block and j increasing.

    Block b spans cells j_lo .. j_hi (the grid indices of its first and last split); the
    first atom of cell j > j_lo is the least a with cell(a) >= j: inverted from the loss,
    then moved an atom at a time until the same floating-point expression as
    discretise's confirms it (L is monotone: the inversion is off by an atom at most).
    """
    xp = arrays.namespace()
    a_lo = atoms.a_lo * 1.0
    a_hi = atoms.a_hi * 1.0
    j_lo = grid_index(end_lo, step)
    j_hi = grid_index(end_hi, step)
    per_block = j_hi - j_lo + 1
    cell_block = xp.repeat(blocks, per_block)
    rank = xp.arange(0, len(cell_block)) - xp.repeat(xp.cumsum(per_block) - per_block,
                                                      per_block)
    cell_index = xp.repeat(j_lo, per_block) + rank
    c_cell = xp.take(c, cell_block)
    t0_cell = xp.take(t0, cell_block)
    lo_cell = xp.take(a_lo, cell_block)
    hi_cell = xp.take(a_hi, cell_block)

    def cell(a: Any) -> Any:  # discretise's grid index, on the same loss expression
        return grid_index(_split_loss(c_cell, t0_cell, a), step)

    with xp.quiet():
        grow = xp.exp((cell_index - 1e-9) * step)
        guess = ((c_cell + t0_cell) * grow - c_cell) / (grow + 1.0)
    guess = xp.where(xp.isfinite(guess), guess, lo_cell + 1.0)
    first = xp.clip(xp.ceil(guess), lo_cell + 1.0, hi_cell)
    for _ in range(64):
        low_side = cell(first) < cell_index
        high_side = (first - 1.0 > lo_cell) & (cell(first - 1.0) >= cell_index)
        if not (xp.any_true(low_side) or xp.any_true(high_side)):
            break
        first = xp.clip(first + low_side * 1.0 - high_side * 1.0, lo_cell + 1.0, hi_cell)
    else:  # never seen: L is monotone, so the guesses are off by an atom at most
        raise AccountantError("the cells of a pair's loss distribution did not settle")
    first = xp.where(rank == 0, lo_cell, first)  # a block's first cell starts at its first split
    last = rank == xp.repeat(per_block - 1, per_block)
    end = xp.where(last, hi_cell + 1.0, xp.concatenate([first[1:], xp.vector([0.0])]))
    occupied = end > first
    return (xp.compress(occupied, cell_block), xp.compress(occupied, cell_index),
            xp.compress(occupied, first), xp.compress(occupied, end))


def _kept_atoms(loss: Any, p_mass: Any) -> tuple[float, Any, Any]:
    """(P-mass at +infinity, finite losses, their P-masses) of atoms of positive P-mass;
    those of loss -infinity never reach delta and are dropped."""
    xp = arrays.namespace()
    positive = p_mass > 0.0
    with xp.quiet():
        infinity = xp.total(xp.compress((loss == math.inf) & positive, p_mass))
    finite = xp.isfinite(loss) & positive
    return infinity, xp.compress(finite, loss), xp.compress(finite, p_mass)


def _by_atom(atoms: PairAtoms, lam: float, *, upper: bool, step: float) -> LossDistribution:
    """:func:`pair_loss` with every atom put on the grid by itself."""
    xp = arrays.namespace()
    infinity, values, masses = _kept_atoms(*pair_losses(atoms, lam))
    if upper:
        infinity += atoms.tail
    if not len(values):
        return LossDistribution(step=step, offset=0, pmf=xp.vector([0.0]),
                                infinity=min(infinity, 1.0))
    spread = xp.largest(values) - xp.smallest(values)
    step = max(step, spread / MAX_GRID_POINTS)
    offset, pmf = discretise(values, masses, step, upper)
    return LossDistribution(step=step, offset=offset, pmf=pmf, infinity=min(infinity, 1.0))

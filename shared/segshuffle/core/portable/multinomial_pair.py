"""The privacy loss distribution of the multinomial two-bin pair, for composition.

This is the numpy-free port of the accountant that light client installs use to verify a
server's privacy parameters; ``tests/test_portable_*.py`` keep it equal to the JavaScript
and numpy accountants.  The proof is in :mod:`segshuffle.core.multinomial_pair`; in short:

**The pair.**  k blanket slots each land on item x with probability r, on x' with
probability r, and elsewhere (or nowhere) with probability 1 - 2r; the victim adds one
message to x (world P) or to x' (world Q) with probability lambda.  The observed total t
on the pair has the same law in both worlds, pi(t) = (1 - lambda) w(t) + lambda w(t - 1)
with w the Binomial(k, 2r) pmf, and given t the split a on x has

    P(a | t) = h_t(a) (c_t + a) / (c_t + t / 2),   L(a | t) = ln(c_t + a) - ln(c_t + t - a),
    c_t = ((1 - lambda) / lambda) rho (k - t + 1),  rho = r / (1 - 2r),

h_t the Binomial(t, 1/2) pmf.

**Blocks.**  The totals are cut into blocks [t_0, t_1]
(:func:`segshuffle.core.pair_windows.block_starts`); the block pair reveals the block and
the split of t_0 messages with the victim's probability of the block's top total:
c = ((1 - lambda) / lambda) rho (k - t_1 + 1) t_0 / t_1.  The pair is a post-processing of
the block pair, so every divergence of it and of its compositions is at most the block
pair's.  A block of one total is exact.

**Enumeration.**  Totals within 9 standard deviations of the blanket's mean, splits
within 9 standard deviations of t_0 / 2; the P-mass outside is bounded from binomial
tails and, in an upper bound, put at +infinity.  Everything but pi(B) and c is
lambda-free and cached per (k, r).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import arrays
from ..arrays.python_distributions import binom_cdf, binom_log_pmf, binom_sf, ln_factorial
from ..bounded_cache import key_of, registered_cache
from ..errors import AccountantError
from ..pair_windows import MAX_ATOMS, block_starts, enumerable, split_window, total_window
from ..privacy_loss import LossDistribution, discretise, grid_floor

__all__ = ["MAX_ATOMS", "PairAtoms", "multinomial_pair_loss", "pair_atoms", "pair_losses"]


#: The most grid points one pair's loss distribution may span; the step grows beyond it.
_MAX_GRID_POINTS = 1 << 17

_INF = math.inf


@dataclass(frozen=True, slots=True, eq=False)
class PairAtoms:
    """The lambda-free part of the block pair.

    Per block: its lowest and highest observed totals (``low``, ``high``), the blanket's
    mass on its totals ``here`` = sum w(t) and one below ``before`` = sum w(t - 1), and
    its splits ``a_lo[i]`` .. ``a_hi[i]`` and the index ``start[i]`` of its first atom.  Per
    atom, block by block and a increasing: ``split`` = h_{t_0}(a) and ``moment`` =
    a h_{t_0}(a).  ``tail`` bounds the P-mass outside the atoms at every lambda.
    """

    slots: int
    r: float
    low: list[int]
    high: list[int]
    here: list[float]
    before: list[float]
    a_lo: list[int]
    a_hi: list[int]
    start: list[int]
    split: list[float]
    moment: list[float]
    tail: float


def _tail_outside(trials: int, p: float, lo: int, hi: int) -> float:
    """Pr[Binomial(trials, p) < lo] + Pr[Binomial(trials, p) > hi]."""
    below = binom_cdf(max(lo - 1, 0), trials, p) if lo > 0 else 0.0
    above = binom_sf(min(hi, trials), trials, p) if hi < trials else 0.0
    return below + above


_atoms_cache = registered_cache(16)


def pair_atoms(slots: int, r: float) -> PairAtoms | None:
    """The atoms of the pair with ``slots`` blanket slots at rate ``r`` (None: too many)."""
    return _atoms_cache.get(key_of(slots, r), lambda: _enumerate(slots, r))


def _enumerate(slots: int, r: float) -> PairAtoms | None:
    if not (r > 0.0 and r < 0.5):
        raise AccountantError(f"r must be in (0, 1/2), got {r}")
    if not enumerable(slots, r):
        return None
    q = 2.0 * r
    t_lo, t_hi = total_window(slots, q)
    low = block_starts(slots, t_lo, t_hi + 1)
    high = [t - 1 for t in low[1:]] + [t_hi + 1]
    windows = [split_window(t) for t in low]
    exp = math.exp
    weights = [exp(binom_log_pmf(t, slots, q)) for t in range(t_lo - 1, t_hi + 2)]
    here: list[float] = []
    before: list[float] = []
    for t0, t1 in zip(low, high, strict=True):
        start = t0 - t_lo
        end = t1 - t_lo
        here_sum = 0.0
        before_sum = 0.0
        for i in range(start, end + 1):
            here_sum += weights[i + 1]
            before_sum += weights[i]
        here.append(here_sum)
        before.append(before_sum)
    log2 = math.log(2.0)
    # ln j! for every j a split needs (a and t0 - a, both near t0 / 2): one table over
    # their range, not every j up to the largest total.
    first = min(min(a_lo, t0 - a_hi) for t0, (a_lo, a_hi) in zip(low, windows, strict=True))
    last = max(max(a_hi, t0 - a_lo) for t0, (a_lo, a_hi) in zip(low, windows, strict=True))
    table = [ln_factorial(j) for j in range(first, last + 1)]
    split: list[float] = []
    moment: list[float] = []
    starts: list[int] = []
    outside = _tail_outside(slots, q, t_lo, t_hi)
    for t0, (a_lo, a_hi), here_sum, before_sum in zip(low, windows, here, before, strict=True):
        log_t = ln_factorial(t0)
        t_log2 = t0 * log2
        starts.append(len(split))
        splits = [exp(log_t - table[a - first] - table[t0 - a - first] - t_log2)
                  for a in range(a_lo, a_hi + 1)]
        split.extend(splits)
        moment.extend([a * h for a, h in zip(range(a_lo, a_hi + 1), splits, strict=True)])
        outside += 2.0 * max(here_sum, before_sum) * _tail_outside(t0, 0.5, a_lo, a_hi)
    return PairAtoms(slots, r, low, high, here, before, [lo for lo, _ in windows],
                     [hi for _, hi in windows], starts, split, moment, outside)


def _log_or_inf(x: float) -> float:
    """ln x, -inf at 0 (the logarithm of a point world P or Q cannot produce)."""
    return math.log(x) if x > 0.0 else -_INF


def _block_rates(atoms: PairAtoms, lam: float, block: int) -> tuple[float, float]:
    """(pi(B), c) of one block at rate ``lam`` (c = 0 where t_0 = 0)."""
    t0 = atoms.low[block]
    pi = (1.0 - lam) * atoms.here[block] + lam * atoms.before[block]
    if t0 == 0:
        return pi, 0.0
    rho = atoms.r / (1.0 - 2.0 * atoms.r)
    t1 = atoms.high[block]
    return pi, ((1.0 - lam) / lam) * rho * (atoms.slots - t1 + 1.0) * t0 / t1


def _block_losses(atoms: PairAtoms, block: int, pi: float, c: float
                  ) -> tuple[list[float], list[float]]:
    """(L, P-mass) of one block's atoms, a increasing."""
    t0, a_lo, a_hi = atoms.low[block], atoms.a_lo[block], atoms.a_hi[block]
    at = atoms.start[block]
    splits = atoms.split[at:at + a_hi - a_lo + 1]
    if t0 == 0:
        return [0.0] * len(splits), [pi * h for h in splits]
    # ln(c + j) for every j a split needs (a and t0 - a), once.
    first = min(a_lo, t0 - a_hi)
    table = [_log_or_inf(c + j) for j in range(first, max(a_hi, t0 - a_lo) + 1)]
    middle = c + 0.5 * t0
    losses = [table[a - first] - table[t0 - a - first] for a in range(a_lo, a_hi + 1)]
    masses = [pi * h * ((c + a) / middle)
              for a, h in zip(range(a_lo, a_hi + 1), splits, strict=True)]
    return losses, masses


def pair_losses(atoms: PairAtoms, lam: float) -> tuple[list[float], list[float]]:
    """(L, P-mass) of every atom of the block pair at rate ``lam``, in the atoms' order.

    Atoms world P cannot produce get L = -inf and P-mass 0 (callers drop them); those
    world Q cannot produce get L = +inf.
    """
    losses: list[float] = []
    masses: list[float] = []
    for block in range(len(atoms.low)):
        block_losses, block_masses = _block_losses(atoms, block,
                                                   *_block_rates(atoms, lam, block))
        losses.extend(block_losses)
        masses.extend(block_masses)
    return losses, masses


#: A block is summed cell by cell when it has at least this many atoms per grid cell it
#: spans (the numpy accountant's rule, :mod:`segshuffle.core.multinomial_pair`).
ATOMS_PER_CELL = 8

#: Unit roundoff of a float64.
_UNIT_ROUNDOFF = 2.0**-53


def _split_loss(c: float, t0: int, a: int) -> float:
    """L(a | t_0) = ln(c + a) - ln(c + t_0 - a) for c > 0, as :func:`_block_losses` has it."""
    return math.log(c + a) - math.log(c + (t0 - a))


@arrays.on_python
def multinomial_pair_loss(atoms: PairAtoms, lam: float, *, upper: bool, step: float
                          ) -> LossDistribution:
    """The loss distribution of the pair at rate ``lam`` on the grid ``step``.

    Atoms of infinite loss go to the infinity atom (with the window's tail, in an upper
    bound); atoms of loss -infinity never reach delta and are dropped.  The step grows
    when the losses span more than 2^17 grid points.  In an upper bound at lambda < 1,
    blocks with c > 0 and at least ATOMS_PER_CELL atoms per grid cell are put on the grid
    cell by cell (the proof is the numpy accountant's, :func:`segshuffle.core.
    multinomial_pair.pair_loss`): each cell moves (P - e^{x'} Q) / (1 - e^{-h}) up, from
    the sums of h and a h over its run of splits, widened for their rounding.
    """
    if not (lam > 0.0 and lam <= 1.0):
        raise AccountantError(f"lambda must be in (0, 1], got {lam}")
    isfinite = math.isfinite
    infinity = atoms.tail if upper else 0.0
    kept_losses: list[float] = []
    kept_masses: list[float] = []
    summed: list[tuple[int, float, float]] = []  # (block, pi, c) of the blocks summed by cells
    low = _INF
    high = -_INF
    cells_allowed = upper and lam < 1.0
    for block in range(len(atoms.low)):
        pi, c = _block_rates(atoms, lam, block)
        t0, a_lo, a_hi = atoms.low[block], atoms.a_lo[block], atoms.a_hi[block]
        if cells_allowed and t0 > 0 and c > 0.0 and pi > 0.0:
            end_lo = _split_loss(c, t0, a_lo)
            end_hi = _split_loss(c, t0, a_hi)
            cells = grid_floor(end_hi, step, True) - grid_floor(end_lo, step, True) + 1
            if cells * ATOMS_PER_CELL <= a_hi - a_lo + 1:
                summed.append((block, pi, c))
                low = min(low, end_lo)
                high = max(high, end_hi)
                continue
        losses, masses = _block_losses(atoms, block, pi, c)
        for loss, mass in zip(losses, masses, strict=True):
            if not mass > 0.0:
                continue
            if loss == _INF:
                infinity += mass
            elif isfinite(loss):
                kept_losses.append(loss)
                kept_masses.append(mass)
    if kept_losses:
        low = min(low, min(kept_losses))
        high = max(high, max(kept_losses))
    if low == _INF:
        return LossDistribution(step, 0, arrays.namespace().vector([0.0]), min(infinity, 1.0),
                                0.0)
    step = max(step, (high - low) / _MAX_GRID_POINTS)
    # The grid of privacy_loss.discretise over the finite atoms of positive mass and the
    # cells' losses; the atoms are put on it by discretise, the cells by _spread_cells.
    xp = arrays.namespace()
    offset = grid_floor(low, step, upper)
    grid = (offset, grid_floor(high, step, upper) - offset + (2 if upper else 1))
    if kept_losses:
        _, pmf = discretise(xp.vector(kept_losses), xp.vector(kept_masses), step, upper, grid)
    else:
        pmf = xp.vector([0.0] * grid[1])
    if summed:
        lower = [0.0] * grid[1]
        raised = [0.0] * grid[1]
        for block, pi, c in summed:
            _spread_cells(atoms, block, pi, c, step, offset, lower, raised)
        pmf = pmf + xp.vector(lower) + xp.vector(raised)
    return LossDistribution(step, offset, pmf, min(infinity, 1.0), 0.0)


def _spread_cells(atoms: PairAtoms, block: int, pi: float, c: float, step: float,
                  offset: int, lower: list[float], raised: list[float]) -> None:
    """One block's atoms on the grid cell by cell: the run of splits whose grid index
    floor(L / h + 1e-9) is j moves min(P, ((P - e^{(j - 1e-9) h} Q)_+ (1 + 1e-12) +
    rounding P) / (1 - e^{-h})) of its P-mass P to ``raised[j + 1 - offset]`` and the rest
    to ``lower[j - offset]``."""
    t0, a_lo, a_hi = atoms.low[block], atoms.a_lo[block], atoms.a_hi[block]
    base = atoms.start[block] - a_lo  # the atom of split a is at base + a
    exp = math.exp
    ceil = math.ceil

    def cell(a: int) -> int:
        return grid_floor(_split_loss(c, t0, a), step, True)

    lift = 1.0 / -math.expm1(-step)
    scale = pi / (c + 0.5 * t0)
    first = a_lo
    last_cell = cell(a_hi)
    for j in range(cell(a_lo), last_cell + 1):
        if j < last_cell:
            # The least a with cell(a) >= j + 1: inverted, then checked.
            grow = exp((j + 1 - 1e-9) * step)
            guess = ((c + t0) * grow - c) / (1.0 + grow)
            end = min(max(ceil(guess), first), a_hi) if math.isfinite(guess) else first
            while end <= a_hi and cell(end) <= j:
                end += 1
            while end > first and cell(end - 1) > j:
                end -= 1
        else:
            end = a_hi + 1
        if end > first:
            count = end - first
            s0 = sum(atoms.split[base + first:base + end])
            s1 = sum(atoms.moment[base + first:base + end])
            p_cell = scale * (c * s0 + s1)
            q_cell = scale * ((c + t0) * s0 - s1)
            rounding = (2.0 * (count + 2.0) * _UNIT_ROUNDOFF
                        * (1.0 + (c + t0) / (c + t0 - (end - 1))) + 4.0 * _UNIT_ROUNDOFF)
            moved = max(p_cell - exp((j - 1e-9) * step) * q_cell, 0.0)
            up = min(p_cell, (moved * (1.0 + 1e-12) + rounding * p_cell) * lift)
            lower[j - offset] += p_cell - up
            raised[j + 1 - offset] += up
        first = end

"""The privacy loss distribution of the multinomial two-bin pair, for composition.

This is the numpy-free port of the accountant that light client installs use to verify a
server's privacy parameters; ``tests/test_portable_accountant*.py`` keep it equal to the
JavaScript and numpy accountants.

**The pair.**  k blanket slots each land on item x with probability r, on x' with
probability r, and elsewhere (or nowhere) with probability 1 - 2r; the victim adds one
message to x (world P) or to x' (world Q) with probability lambda.  The counts (a, b) on
(x, x') have

    P(a, b) = (1 - lambda) M(a, b) + lambda M(a - 1, b),
    Q(a, b) = (1 - lambda) M(a, b) + lambda M(a, b - 1),

with M the Multinomial(k; r, r) mass of the blanket: the count pair of
:mod:`.hockey_stick`, whose loss distribution is needed here to compose several pairs.

**The loss.**  With t = a + b and rho = r / (1 - 2r),
M(a - 1, b) / M(a, b) = a / (rho (k - t + 1)), so

    L(a, b) = ln(u + lambda a) - ln(u + lambda b),   u = (1 - lambda) rho (k - t + 1),

(at t = k + 1, u = 0 and L = ln(a / b)).  Under P the total is t = T + V with
T ~ Binomial(k, 2r), and given T the blanket splits as Binomial(T, 1/2).

**Enumeration.**  Every (T, A) in a window of 9 standard deviations around the means is
an atom; the mass outside is computed from the binomial tails and, in an upper bound, put
at +infinity.  The atoms' masses do not depend on lambda and are cached per (k, r);
the atoms are put on the grid of :mod:`.privacy_loss` as there (connecting the dots in an
upper bound, rounding down in a lower one), and its composition then applies.

**Evaluation.**  The loss of an observed point depends on its total only through u, so
ln(u + lambda j) is computed once per observed total and integer j, and each point's loss
is the difference of two entries of that table: the same operations on the same operands
as the loss of every point computed on its own.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, MutableSequence
from dataclasses import dataclass
from itertools import repeat
from operator import add, mul, sub
from typing import NamedTuple, cast

from .cache import key_of, registered_cache
from .distributions import binom_cdf, binom_log_pmf, binom_sf, ln_factorial
from .errors import AccountantError
from .privacy_loss import LossDistribution, grid_floor, round_down_atoms, spread_atoms

__all__ = ["MAX_ATOMS", "PairAtoms", "multinomial_pair_loss", "pair_atoms", "pair_losses"]

#: Standard deviations each side of the means enumerated (the rest is tail mass).
_WINDOW_SIGMAS = 9.0

#: The most atoms one pair may enumerate; beyond it :func:`pair_atoms` returns None.
MAX_ATOMS = 6_000_000

#: The most grid points one pair's loss distribution may span; the step grows beyond it.
_MAX_GRID_POINTS = 1 << 17

_INF = math.inf


@dataclass(frozen=True, slots=True, eq=False)
class PairAtoms:
    """The atoms of the pair: blanket totals ``t`` and counts ``a`` on x, with masses
    ``mass`` = w(T) h_T(A), for ``slots`` = k slots at rate ``r``; ``tail`` is the blanket
    mass outside the window.

    The atoms are listed total by total: those of total ``first_total + i`` are
    a = ``a_lo[i]`` .. ``a_hi[i]``, in increasing order.
    """

    slots: int
    r: float
    t: list[int]
    a: list[int]
    mass: list[float]
    tail: float
    first_total: int
    a_lo: list[int]
    a_hi: list[int]


def _total_window(slots: int, q: float) -> tuple[int, int]:
    mean = slots * q
    sigma = math.sqrt(max(mean * (1.0 - q), 0.0))
    margin = _WINDOW_SIGMAS * sigma + 2.0 * _WINDOW_SIGMAS + 2.0
    return max(0, math.floor(mean - margin)), min(slots, math.ceil(mean + margin))


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
    q = 2.0 * r
    t_lo, t_hi = _total_window(slots, q)
    sqrt = math.sqrt
    floor = math.floor
    ceil = math.ceil
    a_lo: list[int] = []
    a_hi: list[int] = []
    count = 0
    for t in range(t_lo, t_hi + 1):
        half_sd = 0.5 * sqrt(max(t, 1))
        margin = _WINDOW_SIGMAS * half_sd + _WINDOW_SIGMAS + 2.0
        low = max(0, floor(t / 2.0 - margin))
        high = min(t, ceil(t / 2.0 + margin))
        a_lo.append(low)
        a_hi.append(high)
        count += high - low + 1
    if count > MAX_ATOMS:
        return None
    # ln j! for every j an atom needs (a and t - a of each atom, and t itself).
    first = min(min(low, t - high)
                for t, low, high in zip(range(t_lo, t_hi + 1), a_lo, a_hi, strict=True))
    log_factorials = [ln_factorial(j) for j in range(first, t_hi + 1)]
    counts = list(range(first, t_hi + 1))  # shared int objects for the list of a
    exp = math.exp
    log2 = math.log(2.0)
    atom_t: list[int] = []
    atom_a: list[int] = []
    mass: list[float] = []
    outside = _tail_outside(slots, q, t_lo, t_hi)
    for t, low, high in zip(range(t_lo, t_hi + 1), a_lo, a_hi, strict=True):
        log_weight = binom_log_pmf(t, slots, q)
        log_t = log_factorials[t - first]
        t_log2 = t * log2
        atom_t.extend(repeat(t, high - low + 1))
        atom_a.extend(counts[low - first:high - first + 1])
        # ln C(t, a) - t ln 2 with ln (t - a)! read backwards from the same table.
        mass.extend([exp(log_weight + (((log_t - log_a) - log_b) - t_log2))
                     for log_a, log_b in zip(
                         log_factorials[low - first:high - first + 1],
                         reversed(log_factorials[t - high - first:t - low - first + 1]),
                         strict=True)])
        # Splits outside [a_lo, a_hi] within the window's totals.
        outside += exp(log_weight) * _tail_outside(t, 0.5, low, high)
    return PairAtoms(slots, r, atom_t, atom_a, mass, outside, t_lo, a_lo, a_hi)


def _log_table(u: float, lam: float, products: list[float], first: int, last: int
               ) -> list[float]:
    """ln(u + lam j) for j = first..last, with ``products[j]`` = lam j (-inf where the
    argument is 0 and NaN where it is negative, as in JavaScript)."""
    values = products[first:last + 1]
    if u > 0.0 and lam >= 0.0:  # every argument is positive
        return list(map(math.log, map(add, repeat(u), values)))
    log = math.log
    return [log(x) if x > 0.0 else (-_INF if x == 0.0 else math.nan)
            for x in map(add, repeat(u), values)]


class _Losses(NamedTuple):
    """The losses of the points reached without the victim's message (``shift0``: the atom
    itself) and with it (``shift1``: (T + 1, A + 1)), each in the order of the atoms.

    ``finite``: every log argument was positive, so every loss is finite; then, when asked
    for, ``bounds0`` and ``bounds1`` are the (smallest, largest) loss of each list.
    """

    shift0: MutableSequence[float]
    shift1: MutableSequence[float]
    finite: bool
    bounds0: tuple[float, float]
    bounds1: tuple[float, float]


def _split_losses(atoms: PairAtoms, lam: float, packed: bool = False) -> _Losses:
    """The losses of every observed point, from one table of ln(u + lam j) per observed
    total.  ``packed``: as arrays of doubles (a third of the memory of lists of floats, for
    the temporary losses of :func:`multinomial_pair_loss`), with their bounds; else as
    lists (bounds left out)."""
    rho = atoms.r / (1.0 - 2.0 * atoms.r)
    scale = (1.0 - lam) * rho
    slots = atoms.slots
    t_lo = atoms.first_total
    a_lo = atoms.a_lo
    a_hi = atoms.a_hi
    totals = len(a_lo)
    # The j each observed total T = t_lo + i needs: a and b = T - a of its shift-0 points
    # (atoms of total T) and of its shift-1 points (atoms of total T - 1, a + 1 and b).
    needed_lo = [0] * (totals + 1)
    needed_hi = [0] * (totals + 1)
    for i in range(totals):
        t = t_lo + i
        low = a_lo[i]
        high = a_hi[i]
        needed_lo[i] = min(needed_lo[i], low, t - high) if i > 0 else min(low, t - high)
        needed_hi[i] = max(needed_hi[i], high, t - low)
        needed_lo[i + 1] = min(low + 1, t - high)
        needed_hi[i + 1] = max(high + 1, t - low)
    products = list(map(mul, repeat(lam), range(max(needed_hi) + 1)))  # lam j
    tables = []
    finite = lam >= 0.0
    for i in range(totals + 1):
        u = scale * max(slots - (t_lo + i) + 1.0, 0.0)
        finite = finite and u > 0.0
        tables.append((needed_lo[i], _log_table(u, lam, products, needed_lo[i], needed_hi[i])))
    bounded = packed and finite
    shift0: MutableSequence[float] = array("d") if packed else []
    shift1: MutableSequence[float] = array("d") if packed else []
    low0 = low1 = _INF
    high0 = high1 = -_INF
    for i in range(totals):
        t = t_lo + i
        low = a_lo[i]
        high = a_hi[i]
        first, table = tables[i]
        chunk0 = map(sub, table[low - first:high - first + 1],
                     reversed(table[t - high - first:t - low - first + 1]))
        first, table = tables[i + 1]
        chunk1 = map(sub, table[low + 1 - first:high + 2 - first],
                     reversed(table[t - high - first:t - low - first + 1]))
        if bounded:
            values = list(chunk0)
            low0 = min(low0, min(values))
            high0 = max(high0, max(values))
            shift0.extend(values)
            values = list(chunk1)
            low1 = min(low1, min(values))
            high1 = max(high1, max(values))
            shift1.extend(values)
        else:
            shift0.extend(chunk0)
            shift1.extend(chunk1)
    return _Losses(shift0, shift1, finite, (low0, high0), (low1, high1))


def pair_losses(atoms: PairAtoms, lam: float) -> tuple[list[float], list[float]]:
    """(L, P-mass) of the observed points of the pair, each atom reached without and with
    the victim's message: L = ln(u + lam a) - ln(u + lam b).

    Points world P cannot produce get L = -inf or NaN; callers drop them.
    """
    losses = _split_losses(atoms, lam)
    loss = cast(list[float], losses.shift0)  # lists when not packed
    mass = atoms.mass
    p_mass = list(map(mul, repeat(1.0 - lam), mass))
    p_mass.extend(map(mul, repeat(lam), mass))
    loss.extend(losses.shift1)
    return loss, p_mass


def multinomial_pair_loss(atoms: PairAtoms, lam: float, *, upper: bool, step: float
                          ) -> LossDistribution:
    """The loss distribution of the pair at rate ``lam`` on the grid ``step``.

    Atoms of infinite loss go to the infinity atom (with the window's tail, in an upper
    bound); atoms of loss -infinity never reach delta and are dropped.  The step grows
    when the losses span more than 2^17 grid points.
    """
    if not (lam > 0.0 and lam <= 1.0):
        raise AccountantError(f"lambda must be in (0, 1], got {lam}")
    losses = _split_losses(atoms, lam, packed=True)
    mass = atoms.mass
    smallest_mass = min(mass) if mass else 0.0
    halves = [(losses.shift0, 1.0 - lam, losses.bounds0), (losses.shift1, lam, losses.bounds1)]
    # A half is plain when every point of it has a positive P-mass and a finite loss.
    plain = [losses.finite and share * smallest_mass > 0.0 for _, share, _ in halves]
    isfinite = math.isfinite
    infinity = 0.0
    low = _INF
    high = -_INF
    finite_count = 0
    for (values, share, bounds), simple in zip(halves, plain, strict=True):
        if simple:
            low = min(low, bounds[0])
            high = max(high, bounds[1])
            finite_count += len(values)
            continue
        for loss, atom_mass in zip(values, mass, strict=True):
            p_mass = share * atom_mass
            if not p_mass > 0.0:
                continue
            if loss == _INF:
                infinity += p_mass
            elif isfinite(loss):
                finite_count += 1
                low = min(low, loss)
                high = max(high, loss)
    if upper:
        infinity += atoms.tail
    if finite_count == 0:
        return LossDistribution(step, 0, [0.0], min(infinity, 1.0), 0.0)
    step = max(step, (high - low) / _MAX_GRID_POINTS)
    # The grid of privacy_loss.discretise over the finite atoms of positive mass, in the
    # order of the numpy accountant's (the shift-0 points, then the shift-1 points).
    offset = grid_floor(low, step, upper)
    size = grid_floor(high, step, upper) - offset + (2 if upper else 1)
    pmf = [0.0] * size
    raised = [0.0] * size if upper else []
    for (values, share, _), simple in zip(halves, plain, strict=True):
        if simple:
            losses: Iterable[float] = values
            masses: Iterable[float] = map(mul, repeat(share), mass)
        else:
            kept = [(loss, share * atom_mass) for loss, atom_mass in zip(values, mass, strict=True)
                    if share * atom_mass > 0.0 and isfinite(loss)]
            losses = [loss for loss, _ in kept]
            masses = [p_mass for _, p_mass in kept]
        if upper:
            spread_atoms(losses, masses, step, offset, pmf, raised)
        else:
            round_down_atoms(losses, masses, step, offset, pmf)
    if upper:
        pmf = list(map(add, pmf, raised))
    return LossDistribution(step, offset, pmf, min(infinity, 1.0), 0.0)

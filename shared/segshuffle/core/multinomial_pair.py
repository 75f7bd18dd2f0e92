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
from .pair_windows import MAX_ATOMS, block_starts, split_window, total_window
from .privacy_loss import LossDistribution, discretise

#: The most grid points one pair's loss distribution may span; the step grows beyond it.
MAX_GRID_POINTS = 1 << 17


@dataclass(frozen=True, eq=False)
class PairAtoms:
    """The lambda-free part of the block pair (module docstring).

    Per block: its lowest and highest observed totals (``low``, ``high``), and the
    blanket's mass on its totals ``here`` = W(B) and one below ``before`` = W'(B).
    Per atom: its ``block``, its count ``a`` on x and ``split`` = h_{t_0}(a).  ``tail``
    bounds the P-mass outside the atoms at every lambda.
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
    q = 2.0 * r
    t_lo, t_hi = total_window(slots, q)
    starts = block_starts(slots, t_lo, t_hi + 1)
    low = np.array(starts, dtype=np.int64)
    high = np.append(low[1:] - 1, t_hi + 1)
    a_lo, a_hi = (np.array(ends, dtype=np.int64)
                  for ends in zip(*map(split_window, starts), strict=True))
    widths = a_hi - a_lo + 1
    if int(widths.sum()) > MAX_ATOMS:
        return None
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
    return PairAtoms(slots=slots, r=r, low=low, high=high, here=here, before=before,
                     block=block, a=a, split=split, tail=outside)


def pair_losses(atoms: PairAtoms, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(L, P-mass) of every atom of the block pair at rate ``lam`` (module docstring).

    Atoms that world P cannot produce have L = -inf and P-mass 0 and should be
    dropped by the caller; those world Q cannot produce have L = +inf.
    """
    rho = atoms.r / (1.0 - 2.0 * atoms.r)
    low = atoms.low.astype(float)
    high = atoms.high.astype(float)
    pi = (1.0 - lam) * atoms.here + lam * atoms.before
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(low > 0.0, ((1.0 - lam) / lam) * rho * (atoms.slots - high + 1.0)
                     * low / high, 0.0)
    t0 = low[atoms.block]
    c_atom = c[atoms.block]
    a = atoms.a.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.where(t0 > 0.0, np.log(c_atom + a) - np.log(c_atom + (t0 - a)), 0.0)
        share = np.where(t0 > 0.0, (c_atom + a) / (c_atom + 0.5 * t0), 1.0)
    return loss, pi[atoms.block] * atoms.split * share


def pair_loss(atoms: PairAtoms, lam: float, *, upper: bool, step: float) -> LossDistribution:
    """The loss distribution of the pair at rate ``lam`` on the grid ``step`` (module docstring).

    Atoms of infinite loss (b = 0 < a where c = 0: at t = k + 1, or anywhere when
    lam = 1) go to the infinity atom; atoms of loss -infinity carry no P-mass that matters
    (they never reach delta), and are dropped.  The step grows when the losses span
    more than MAX_GRID_POINTS points.
    """
    if not 0.0 < lam <= 1.0:
        raise ValueError(f"lambda must be in (0, 1], got {lam}")
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

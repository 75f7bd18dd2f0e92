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

**The loss.**  With t = a + b and rho = r / (1 - 2r), M(a - 1, b) / M(a, b) =
a / (rho (k - t + 1)), so

    L(a, b) = log P(a, b) / Q(a, b) = log(u + lambda a) - log(u + lambda b),
    u = (1 - lambda) rho (k - t + 1).

At t = k + 1 (every slot and the victim on the pair) u = 0 and L = log(a / b).
Under P the observed total t = T + V has T ~ Binomial(k, 2r) and, given T, the
blanket splits as Binomial(T, 1/2); so P(a, t - a) = (1 - lambda) w(t) h_t(a) +
lambda w(t - 1) h_{t-1}(a - 1) with w the Binomial(k, 2r) pmf and h_t the
Binomial(t, 1/2) pmf.

**Enumeration.**  Every (t, a) in a window of WINDOW_SIGMAS standard deviations
around the means is an atom.  The P-mass outside the window is computed from
the binomial tails (not as a complement) and, in an upper bound, put at +infinity,
where it counts fully; a lower bound drops it.  The atoms' masses do not depend
on lambda and are cached per (k, r); each lambda costs two logarithms per atom.
Atoms are put on the grid of :mod:`segshuffle.core.privacy_loss` by its
:func:`~segshuffle.core.privacy_loss.discretise` (connecting the dots for upper bounds,
rounding down for lower ones), whose composition then applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from . import distributions
from .privacy_loss import LossDistribution, discretise

#: Standard deviations each side of the means enumerated (the rest is tail mass).
WINDOW_SIGMAS = 9.0

#: The most atoms one pair may enumerate; beyond it :func:`pair_atoms` returns None.
MAX_ATOMS = 6_000_000

#: The most grid points one pair's loss distribution may span; the step grows beyond it.
MAX_GRID_POINTS = 1 << 17


@dataclass(frozen=True, eq=False)
class PairAtoms:
    """The lambda-free part of the pair: the blanket's atoms (T, A) and their masses.

    ``mass`` = w(T) h_T(A).  The victim's message adds the observed point (T, A)
    with P-mass (1 - lambda) mass and (T + 1, A + 1) with P-mass lambda mass; world Q
    is the mirror image.  A point reached both ways is simply listed twice (the loss
    is a function of the point).  ``tail`` is the blanket mass outside the window.
    """

    slots: int
    r: float
    t: np.ndarray
    a: np.ndarray
    mass: np.ndarray
    tail: float

    def observed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(a, b, k - t + 1) of the observed points, both ways of reaching them, as floats."""
        return _observed(self)


@lru_cache(maxsize=16)
def _observed(atoms: PairAtoms) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = np.concatenate((atoms.t, atoms.t + 1)).astype(float)
    a = np.concatenate((atoms.a, atoms.a + 1)).astype(float)
    return a, t - a, np.maximum(atoms.slots - t + 1.0, 0.0)


def _total_window(slots: int, q: float) -> tuple[int, int]:
    mean = slots * q
    sigma = math.sqrt(max(mean * (1.0 - q), 0.0))
    margin = WINDOW_SIGMAS * sigma + 2.0 * WINDOW_SIGMAS + 2.0
    return max(0, math.floor(mean - margin)), min(slots, math.ceil(mean + margin))


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
    t_lo, t_hi = _total_window(slots, q)
    totals = np.arange(t_lo, t_hi + 1, dtype=np.int64)  # blanket totals T
    half_sd = 0.5 * np.sqrt(np.maximum(totals, 1))
    margin = WINDOW_SIGMAS * half_sd + WINDOW_SIGMAS + 2.0
    a_lo = np.maximum(0, np.floor(totals / 2.0 - margin)).astype(np.int64)
    a_hi = np.minimum(totals, np.ceil(totals / 2.0 + margin)).astype(np.int64)
    widths = a_hi - a_lo + 1
    if int(widths.sum()) > MAX_ATOMS:
        return None
    blanket_t = np.repeat(totals, widths)
    starts = np.repeat(a_lo - np.cumsum(np.concatenate(([0], widths[:-1]))), widths)
    blanket_a = np.arange(blanket_t.size, dtype=np.int64) + starts
    log_weight = distributions.binom_logpmf(totals, slots, q)
    log_split = (special.gammaln(blanket_t + 1.0) - special.gammaln(blanket_a + 1.0)
                 - special.gammaln(blanket_t - blanket_a + 1.0) - blanket_t * math.log(2.0))
    mass = np.exp(np.repeat(log_weight, widths) + log_split)
    # Mass outside: totals outside [t_lo, t_hi], and splits outside [a_lo, a_hi] within.
    outside = float(_binomial_tail_outside(np.array([slots]), q, np.array([t_lo]),
                                           np.array([t_hi]))[0])
    outside += float(np.sum(np.exp(log_weight)
                            * _binomial_tail_outside(totals, 0.5, a_lo, a_hi)))
    return PairAtoms(slots=slots, r=r, t=blanket_t, a=blanket_a, mass=mass, tail=outside)


def pair_losses(atoms: PairAtoms, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(L, P-mass) of every observed point: L = log(u + lam a) - log(u + lam b).

    u = (1 - lam) rho (k - t + 1), rho = r / (1 - 2r) (module docstring).  Points that
    world P cannot produce have L = -inf or NaN and should be dropped by the caller.
    """
    rho = atoms.r / (1.0 - 2.0 * atoms.r)
    a, b, remaining = atoms.observed()
    u = ((1.0 - lam) * rho) * remaining
    p_mass = np.concatenate(((1.0 - lam) * atoms.mass, lam * atoms.mass))
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.log(u + lam * a) - np.log(u + lam * b)
    return loss, p_mass


def pair_loss(atoms: PairAtoms, lam: float, *, upper: bool, step: float) -> LossDistribution:
    """The loss distribution of the pair at rate ``lam`` on the grid ``step`` (module docstring).

    Atoms of infinite loss (b = 0 < a where u = 0: at t = k + 1, or anywhere when
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

"""Calibrating the baselines: every guarantee is user level, on the server's full view.

- :func:`subexp_shuffle_mechanism`: the subset exponential randomizer in the
  single-message shuffle model.  For a subset size k, the amplified guarantee of
  n shuffled eps0-LDP reports is bounded by the variation-ratio pair with the
  randomizer's (p, beta, q) (see :mod:`segshuffle.experiments.privset`): a proven
  bound for one message per user, which is what the server sees.  The
  divergence grows with eps0, so the largest eps0 meeting the central target
  (eps, delta) is found by bisection on delta(eps) <= delta; the subset size is
  then the k whose (k, eps0(k)) has the smallest summed variance V.  Every local
  eps0 at least as small as the target is trivially enough (an eps-LDP report is
  (eps, 0)-DP after shuffling), so eps0 >= eps always.
- :func:`balls_into_bins_config`: the balls-into-bins protocol at its smallest
  calibrated blanket rate, in whichever variant has the smaller expected MSE
  against the users' own frequencies (formulas in :func:`expected_bib_mse`): one
  item per user (a single data message; its two-bin pair is the exact full view,
  :mod:`segshuffle.experiments.balls_into_bins`) or all s items (the segmented
  protocol with lambda = 1, calibrated by the user-level accountant
  :func:`segshuffle.core.accounting.full_signal_blanket`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ..core.accounting import UnprotectableLevelError
from ..core.hockey_stick import delta_for, variation_ratio_pair
from ..core.randomizers import blanket_probability, blanket_slots
from .balls_into_bins import VARIANTS, BallsIntoBins, Variant, calibrate_blanket
from .privset import SubsetExponential, optimal_subset

#: Local epsilons above this are not considered for the shuffled randomizer.
LOCAL_EPSILON_CAP = 20.0


def amplified_delta(mech: SubsetExponential, users: int, epsilon: float) -> float:
    """delta(epsilon) of n shuffled reports of ``mech`` (variation-ratio pair, finite p)."""
    p, beta, q = mech.variation_ratio_parameters()
    return delta_for(variation_ratio_pair(p, beta, q, users), epsilon)


def _largest_local_epsilon(d: int, s: int, k: int, users: int, epsilon: float, delta: float,
                           rtol: float) -> float:
    def feasible(eps0: float) -> bool:
        return amplified_delta(SubsetExponential(d, s, eps0, k), users, epsilon) <= delta

    low = epsilon  # always feasible (module docstring)
    high = 2.0 * epsilon
    while feasible(high):
        low, high = high, 2.0 * high
        if high > LOCAL_EPSILON_CAP:
            return low if not feasible(LOCAL_EPSILON_CAP) else LOCAL_EPSILON_CAP
    while high - low > rtol * low:
        mid = 0.5 * (low + high)
        if feasible(mid):
            low = mid
        else:
            high = mid
    return low


@lru_cache(maxsize=64)
def subexp_shuffle_mechanism(users: int, domain_size: int, set_size: int, epsilon: float,
                             delta: float, rtol: float = 1e-4) -> SubsetExponential:
    """The subset exponential randomizer whose shuffled reports are (epsilon, delta)-DP.

    Scans k over 1..d-s, stopping once the variance has risen for four
    consecutive k past the best one (V is unimodal in k in every case we checked;
    the scan is a safeguard, not an assumption the result depends on much).
    """
    d, s = domain_size, set_size
    best: SubsetExponential | None = None
    best_var = math.inf
    rising = 0
    for k in range(1, d - s + 1):
        eps0 = _largest_local_epsilon(d, s, k, users, epsilon, delta, rtol)
        mech = SubsetExponential(d, s, eps0, k)
        var = mech.total_variance(users)
        if var < best_var:
            best, best_var, rising = mech, var, 0
        else:
            rising += 1
            if rising >= 4:
                break
    assert best is not None
    return best


def subexp_local_mechanism(domain_size: int, set_size: int, epsilon: float
                           ) -> SubsetExponential:
    """PrivSet in the local model at its optimal subset size."""
    return optimal_subset(domain_size, set_size, epsilon)


def expected_bib_mse(users: int, domain_size: int, set_size: int, m: float,
                     variant: Variant) -> float:
    """E[sum_j (W^_j - w_j)^2] over the whole domain, w the users' own frequencies.

    Blanket: every count gets Binomial(n ceil(m), gamma / d) messages, variance
    n ceil(m) (gamma/d)(1 - gamma/d) per item.  one-item: a user's ball is on item j
    with probability 1/s when it holds j, and sum_j holders_j = n s, so the balls add
    n s (1/s)(1 - 1/s) = n (1 - 1/s) to the summed variance; the estimator scales by
    s / n.  all-items: the balls are the users' items themselves (no variance), scale 1/n.
    """
    d, s, n = domain_size, set_size, users
    per_slot = blanket_probability(m) / d
    blanket = n * blanket_slots(m) * d * per_slot * (1.0 - per_slot)
    if variant == "one-item":
        return (s / n) ** 2 * (n * (1.0 - 1.0 / s) + blanket)
    return blanket / n**2


@dataclass(frozen=True)
class BallsIntoBinsChoice:
    """The calibrated configuration and what it was chosen against."""

    config: BallsIntoBins
    expected_mse: float
    alternatives: tuple[tuple[str, float, float], ...]  # (variant, m, expected mse)


@lru_cache(maxsize=256)
def balls_into_bins_config(users: int, domain_size: int, set_size: int, epsilon: float,
                           delta: float) -> BallsIntoBinsChoice:
    """Balls-into-bins at user-level (epsilon, delta), in its better variant.

    A variant that no blanket rate protects (all-items beyond the accountant's cap
    :data:`segshuffle.core.blanket.MAX_BLANKET_RATE`, e.g. a few thousand users
    over a domain of thousands of items) is left out; ValueError when neither
    variant can be protected.
    """
    options = []
    refusals = []
    for variant in VARIANTS:
        try:
            m = calibrate_blanket(users, domain_size, set_size, epsilon, delta, variant)
        except UnprotectableLevelError as exc:
            refusals.append(f"{variant}: {exc}")
            continue
        options.append((variant, m, expected_bib_mse(users, domain_size, set_size, m, variant)))
    if not options:
        raise ValueError("no balls-into-bins variant can be protected: " + "; ".join(refusals))
    variant, m, mse = min(options, key=lambda o: o[2])
    return BallsIntoBinsChoice(
        config=BallsIntoBins(domain_size, set_size, m, variant),
        expected_mse=mse,
        alternatives=tuple(options),
    )

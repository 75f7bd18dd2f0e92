"""Slot blanket, any number of differing items: the revealed-send bound.

**Claim.**  N = h ceil(m) - 1 slots each land on a given item with probability r = gamma / d.
Reveal the victim's send indicators V (they do not depend on its data, so revealing them
only helps the server); by joint convexity,

    delta_user(E) <= sum_{j=1..s} Binom(s, lambda)(j) tau_j(E).

**Proof.**  Given V with j items sent, the view is a post-processing of the counts on the
<= 2j active items (the rest depends on the victim only through their total, which V
fixes).  Items common to x and x' cancel, leaving j' <= min(j, d // 2) disjoint pairs.
Hence tau_j = max_{i <= min(j, d // 2)} (D_i + eta_i) with

- D_1 the exact two-bin pair of :mod:`segshuffle.core.hockey_stick` at lambda = 1
  (multinomial blanket, no approximation);
- for i >= 2, D_i the i-fold composition of the lambda = 1 pair with independent
  Poisson(mu) bins and eta_i = max_t (F_Bin(N, 2ir)(t) - F_Poi(2i mu)(t))_+.
  Conditioned on their total the multinomial and the Poisson bins split alike,
  the divergence given the total t does not increase with t (one more uniform
  message is a post-processing), and Abel summation turns the CDF comparison into
  the slack eta_i (:mod:`segshuffle.core.poisson_comparison`).  Each i has its own
  mu_i, the largest with eta_i within the slack budget, and the i-fold loss
  distributions (:mod:`segshuffle.core.privacy_loss`, pessimistic grid) do not
  depend on lambda, so every lambda_k is the root of a polynomial inequality.

Sound at every gamma, and the smallest of the slot bounds near lambda = 1, where revealing
who sent costs nothing.

**Steering** (a loss grid coarser than the default: searches that only steer, never a
published value).  Every D_i takes one Poisson law: the mean of the steering estimate when
the accountant has one, else one cheap comparison at i = S, the most pairs (its mean per
pair comes out the smallest of the i's).  With one law for every i, the i-pair view is a
marginal of the j-pair view for i <= j (drop the other pairs: a post-processing), so
D_i <= D_j and the running maximum is redundant: tau_j = max(tau_1, D_j + eta), each j on
its own.  At lambda = 1, where Binom(s, lambda) puts all its weight on j = s, that is one
composition instead of s - 1 compositions and comparisons (the full-signal searches
evaluate nothing else, at every new m).

Written once against :mod:`segshuffle.core.arrays`: a bound keeps the backend it was built
on for its comparisons and compositions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from . import arrays
from .hockey_stick import delta_for, poisson_pair
from .poisson_comparison import dominated_poisson_mean, steering_poisson_mean
from .privacy_loss import DEFAULT_STEP, BinLaw, ComposedLoss, composed_pair

__all__ = ["TAUS_KEPT", "RevealedSendBound", "binomial_weights"]


def binomial_weights(set_size: int, lam: float) -> list[float]:
    """Binom(s, lambda)(j) for j = 0..s (s is small: products of exact binomial
    coefficients and powers, each within a few ulps)."""
    return [math.comb(set_size, j) * lam**j * (1.0 - lam) ** (set_size - j)
            for j in range(set_size + 1)]


#: Privacy levels whose tau_j one :class:`RevealedSendBound` keeps (the levels of a
#: campaign, at one m, are asked for over and over by the lambda searches).
TAUS_KEPT = 8


def _level_memory(table: dict[float, Any], eps: float, empty: Callable[[], Any]) -> Any:
    """The entry of ``table`` for the level E = ``eps``, a new ``empty()`` one where there is
    none, the oldest level forgotten once TAUS_KEPT are kept."""
    kept = table.get(eps)
    if kept is None:
        if len(table) >= TAUS_KEPT:
            table.pop(next(iter(table)))
        kept = table[eps] = empty()
    return kept


class RevealedSendBound:
    """tau_j(E) of the revealed-send bound (module docstring) for one (N, r, s, d) and slack budget.

    tau_1 is one exact pair and cheap; the i-fold compositions (i >= 2) and their Poisson
    comparisons are built on first use, so a caller that only needs tau_1 (for the lower
    bound of :meth:`user_delta_floor`) never pays for them.
    """

    def __init__(self, n_slots: int, r: float, set_size: int, domain_size: int,
                 slack: float, step: float = DEFAULT_STEP, *,
                 steering_law: BinLaw | None = None) -> None:
        if steering_law is not None and step <= DEFAULT_STEP:
            raise ValueError("a steering law is for searches that only steer (a coarse grid)")
        self.n_slots = n_slots
        self.r = r
        self.set_size = set_size
        self.active = min(set_size, domain_size // 2)
        self.slack = slack
        self.step = step
        self.steering_law = steering_law
        self.backend = arrays.name()  # its comparisons and compositions run there
        self._pair = poisson_pair(1.0, n_slots, r)
        self._poisson: dict[int, tuple[BinLaw, float]] = {}
        self._taus: dict[float, list[float]] = {}  # per E: tau_1 .. tau_i so far
        self._steering_taus: dict[float, dict[int, float]] = {}  # per E: tau_j by j

    def _composed_term(self, i: int) -> tuple[ComposedLoss, float]:
        """(D_i's composed loss, eta_i) for i >= 2 differing pairs.

        The Poisson comparison is kept here; the composition is kept by
        :func:`composed_pair`'s memory-bounded table (a reference here would hold it
        past that table's budget for as long as this bound is cached)."""
        if self.steering_law is not None:
            # Steering only: every D_i composes the one pair with Poisson(N r) bins (the
            # mean, which the comparisons lower a little) and is charged the whole slack
            # budget (the comparisons' eta comes close to it), so the i-fold compositions
            # share one pair loss and no comparison is computed.
            composed = composed_pair(self.steering_law, 1.0, i, upper=True, step=self.step)
            return composed, self.slack
        # Steering on the coarse grid: one comparison, at the most pairs, for every i
        # (module docstring); it need not be certified.
        compared = self.active if self.steering else i
        term = self._poisson.get(compared)
        if term is None:
            q = min(2.0 * compared * self.r, 1.0)
            if self.steering:
                nu, eta = steering_poisson_mean(self.n_slots, q, self.slack)
            else:
                nu, eta = dominated_poisson_mean(self.n_slots, q, self.slack)
            term = self._poisson[compared] = (BinLaw(nu / (2.0 * compared)), eta)
        law, eta = term
        return composed_pair(law, 1.0, i, upper=True, step=self.step), eta

    @property
    def steering(self) -> bool:
        """Whether this bound only steers searches (a loss grid coarser than the default)."""
        return self.step > DEFAULT_STEP

    def tau_one(self, eps: float) -> float:
        """tau_1(E): the exact lambda = 1 pair, at most 1 (the smallest tau_j)."""
        if self.active == 0:
            return 0.0
        return min(self._tau(eps, 1), 1.0)

    def _tau(self, eps: float, j: int) -> float:
        """tau_j(E) (1 <= j <= s), computing tau_1 .. tau_j where not yet kept.

        The taus do not depend on lambda, and a root search over lambda asks for them at
        one E many times: those computed at the last TAUS_KEPT levels are kept, each
        level's as far as some caller needed them (tau_j for j >= 2 costs a Poisson
        comparison and a j-fold composition, so a caller that can stop early should).
        A steering bound computes each tau_j (j >= 2) on its own (:meth:`_steering_tau`)."""
        if self.steering and j >= 2:
            return self._steering_tau(eps, j)
        kept = _level_memory(self._taus, eps, list)
        if len(kept) < j:
            with arrays.use(self.backend):
                self._extend(kept, eps, j)
        return kept[j - 1]

    def _steering_tau(self, eps: float, j: int) -> float:
        """tau_j(E) = max(tau_1, D_j + eta) of a steering bound (module docstring), kept for
        the last TAUS_KEPT levels."""
        kept = _level_memory(self._steering_taus, eps, dict)
        if j not in kept:
            value = 0.0
            if j <= self.active:
                with arrays.use(self.backend):
                    composed, eta = self._composed_term(j)
                    value = composed.delta(eps) + eta
            elif self.active >= 2:  # past the active pairs tau_j stays at tau_S
                value = self._steering_tau(eps, self.active)
            kept[j] = min(max(self._tau(eps, 1), value), 1.0)
        return kept[j]

    def _extend(self, kept: list[float], eps: float, j: int) -> None:
        """Append tau_{len(kept) + 1} .. tau_j to ``kept`` (a running maximum: D_i + eta_i
        for i up to the active pairs, tau_1 itself uncapped, the rest capped at 1)."""
        if not kept:
            kept.append(delta_for(self._pair, eps) if self.active > 0 else 0.0)
        running = kept[0] if len(kept) == 1 else max(kept[0], kept[-1])
        for i in range(len(kept) + 1, j + 1):
            if self.active == 0:
                kept.append(0.0)
                continue
            if i <= self.active:
                composed, eta = self._composed_term(i)
                running = max(running, composed.delta(eps) + eta)
            kept.append(min(running, 1.0))

    def has_taus(self, eps: float) -> bool:
        """Whether every tau_j at E = ``eps`` is kept (then :meth:`user_delta` costs a sum of
        s terms)."""
        if self.steering:
            return False
        kept = self._taus.get(eps)
        return kept is not None and len(kept) >= self.set_size

    def taus(self, eps: float) -> list[float]:
        """(tau_1, ..., tau_s) at E = ``eps``: non-decreasing in j, each at most 1."""
        if self.set_size == 0:
            return []
        return [self._tau(eps, j) for j in range(1, self.set_size + 1)]

    def user_delta(self, eps: float, lam: float) -> float:
        """sum_j Binom(s, lambda)(j) tau_j(E) (at most 1): :meth:`user_delta_below` with no
        ceiling, which never stops early."""
        return self.user_delta_below(eps, lam, math.inf)

    def user_delta_below(self, eps: float, lam: float, ceiling: float) -> float:
        """min(``ceiling``, :meth:`user_delta`), computing the taus only as far as needed.

        The sum is taken in increasing j.  After tau_1 .. tau_i, the taus still missing
        are each at least tau_i (they do not decrease), so

            sum_j w_j tau_j >= sum_{j <= i} w_j tau_j + (sum_{j > i} w_j) tau_i,

        w_j = Binom(s, lambda)(j).  Once that floor, lowered by a relative 1e-12 (far more
        than the rounding of a sum of s terms and of the weights' suffix sums), reaches
        ``ceiling``, the sum cannot be below it and ``ceiling`` is returned with no
        further composition.  Otherwise every tau is computed and the value is
        min(``ceiling``, sum, 1).
        At i = 1 the floor is :meth:`user_delta_floor`'s.  The other slot bounds are
        usually the smaller below lambda = 1, where this stops after a few taus instead
        of every Poisson comparison and composition.
        """
        if lam == 0.0:
            return 0.0
        weights = binomial_weights(self.set_size, lam)[1:]
        rest = [0.0] * len(weights)  # rest[i]: the weight of j > i + 1
        for i in range(len(weights) - 2, -1, -1):
            rest[i] = rest[i + 1] + weights[i + 1]
        total = 0.0
        for i, weight in enumerate(weights):
            if weight == 0.0 and i > 0 and self.steering:
                continue  # lambda = 1: a steering bound computes tau_s alone
            tau = self._tau(eps, i + 1)
            total += weight * tau
            if (total + rest[i] * tau) * (1.0 - 1e-12) >= ceiling:
                return ceiling
        return min(ceiling, min(1.0, total))

    def user_delta_floor(self, eps: float, lam: float) -> float:
        """A value :meth:`user_delta` is never below, from tau_1 alone (cheap).

        Every tau_j >= tau_1, so sum_j Binom(s, lambda)(j) tau_j >= (1 - (1 - lambda)^s)
        tau_1; the factor is rounded down by a relative 1e-12, far more than the few ulps
        that separate it from the computed sum of weights.
        """
        if lam == 0.0:
            return 0.0
        sent = -math.expm1(self.set_size * math.log1p(-lam)) if lam < 1.0 else 1.0
        return min(1.0, sent * self.tau_one(eps)) * (1.0 - 1e-12)

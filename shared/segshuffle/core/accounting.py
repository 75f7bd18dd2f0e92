"""User-level privacy accounting of the segmented protocol (docs/protocol.md, "Accounting").

The server sees the whole histogram of decrypted messages, null messages
included.  Every bound here is a bound on that full view; none goes through
group privacy.  ``users`` is h, the number of honest users whose blanket is
guaranteed, the victim included (:func:`segshuffle.core.rules.honest_users`: n,
or ceil((1 - f) ceil((1 - tau) n)) with a dropout tolerance tau and a fake
tolerance f).  A user at level E with Poisson rate lambda is protected when
delta_user(E) <= delta.

**Slot blanket** (:attr:`BlanketMode.SLOTS`, the paper's).  N = h ceil(m) - 1
slots each land on a given item with probability r = gamma / d (the one-item
mixture of :mod:`segshuffle.core.slot_single` counts all h ceil(m)).  Reveal the
victim's send indicators V (they do not depend on its data, so revealing them
only helps the server); by joint convexity,

    delta_user(E) <= sum_{j=1..s} Binom(s, lambda)(j) tau_j(E).

Given V with j items sent, the view is a post-processing of the counts on the
<= 2j active items (the rest depends on the victim only through their total,
which V fixes).  Items common to x and x' cancel, leaving j' <= min(j, d // 2)
disjoint pairs.  Hence tau_j = max_{i <= min(j, d // 2)} (D_i + eta_i) with

- D_1 the exact two-bin pair of :mod:`segshuffle.core.hockey_stick` at lambda = 1
  (multinomial blanket, no approximation);
- for i >= 2, D_i the i-fold composition of the lambda = 1 pair with independent
  Poisson(mu) bins and eta_i = max_t (F_Bin(N, 2ir)(t) - F_Poi(2i mu)(t))_+.
  Conditioned on their total the multinomial and the Poisson bins split alike,
  the divergence given the total t does not increase with t (one more uniform
  message is a post-processing), and Abel summation turns the CDF comparison into
  the slack eta_i (:mod:`segshuffle.core.poisson_comparison`).  Each i has its own
  mu_i, the largest with eta_i within the budget POISSON_SLACK_SHARE delta, and
  the i-fold PLDs (:mod:`segshuffle.core.privacy_loss`, pessimistic grid) do not
  depend on lambda, so every lambda_k is the root of a polynomial inequality.

**Independent blanket** (:attr:`BlanketMode.INDEPENDENT`).  Every item's blanket
count is Binomial(h - 1, m / d), independent across items, so the view of x
against x' is exactly the product of one item pair with lambda per item of x not
in x'; items common to both sets cancel.  Two s-sets of d items differ in at most
min(s, d - s) items (x' holds at most d - s items outside x), so delta_user is
computed from the min(s, d - s)-fold composed PLD (pessimistic grid): no slack, no
revealed V.  The exhibited lower bound composes the same number of pairs.

**Lower bounds** are divergences of an exhibited dataset's view
(:mod:`segshuffle.core.full_view`): the largest E the server can still
distinguish at delta.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import hockey_stick, poisson_comparison, slot_groups, slot_joint, slot_single, validation
from .blanket import BlanketMode, parse_mode, require_blanket_rate
from .full_view import clear_caches as clear_full_view_caches
from .full_view import single_item_full_view_delta, slot_view_lower_delta
from .hockey_stick import (
    EPSILON_CAP,
    CountPair,
    _largest_feasible,
    _smallest_feasible,
    delta_for,
    epsilon_for,
    poisson_pair,
    window_delta,
)
from .poisson_comparison import dominated_poisson_mean, steering_poisson_mean
from .privacy_loss import DEFAULT_STEP, LOWER_STEP, BinLaw, ComposedLoss, composed_pair
from .privacy_loss import clear_caches as clear_loss_caches
from .randomizers import blanket_probability, blanket_slots
from .rules import MAX_BLANKET_RATE, MAX_LEVEL
from .scalar_search import remembered
from .slot_groups import GroupsBound, group_geometry
from .slot_joint import JointView, joint_view
from .slot_single import SingleItemMixture, single_item_mixture

#: Relative precision of the epsilon searches (the CLI contract asks for 1e-4).
EPSILON_RTOL = 1e-8

#: Relative precision of the certified lambda searches (the root search is run to a
#: quarter of it, then verified feasible), so that a published level sits on its
#: constraint and its achieved epsilon is the level itself to about 1e-9.
LAMBDA_XTOL = 1e-7

#: Share of the target delta that the Poisson comparison's slack may take.
POISSON_SLACK_SHARE = 1e-3

#: Grid step of the loss in searches that only steer (the optimizer's m search):
#: coarser and with an uncertified Poisson comparison, several times faster.  Never
#: used for a published value: the optimizer recomputes every lambda at DEFAULT_STEP.
COARSE_STEP = 4e-3

#: Safety margins on every certified delta: delta_user is reported as
#: value (1 + CERTIFIED_RELATIVE_MARGIN) + CERTIFIED_ABSOLUTE_MARGIN.  The per-total sums
#: lose at most ~1e-11 relative to cancellation in P_t - e^E Q_t (measured against
#: 50-digit arithmetic), the FFT rounding is bounded separately, so rounding can never
#: put a published value below the exact one.
CERTIFIED_RELATIVE_MARGIN = 1e-9
CERTIFIED_ABSOLUTE_MARGIN = 1e-15

#: Group size (slots) from which a steering search estimates the slot bounds instead of
#: computing them (:class:`SlotAccountant`); smaller groups are cheap to bound exactly.
STEERING_GROUP_SLOTS = 200

#: Upper bounds count at most this many expected blanket messages on one item; counting
#: fewer is conservative (less blanket, larger delta) and keeps every window bounded.
ACCOUNTED_BLANKET_PER_ITEM = 1e7

#: The full-signal search's first top below one slot per user (:func:`full_signal_blanket`):
#: gamma = 0.999, where the rate m = 1 (gamma = 1) costs up to 30 times more to evaluate.
ONE_SLOT_PROBE = 0.999

#: Target delta assumed for the slack when a caller asks for a bare delta_user.
_DEFAULT_DELTA = 1e-9

__all__ = [
    "EPSILON_CAP",
    "AuditResult",
    "SlotBlanketBound",
    "UnprotectableLevelError",
    "audit",
    "blanket_geometry",
    "clear_caches",
    "full_signal_blanket",
    "independent_pairs",
    "item_pair",
    "max_lambda",
    "user_delta",
    "user_delta_lower",
    "user_epsilon",
    "user_level_holds",
]


class UnprotectableLevelError(ValueError):
    """No blanket rate within the cap gives a level its full signal (lambda = 1)."""


@dataclass(frozen=True)
class AuditResult:
    """Achieved user-level epsilon: upper bound and exhibited lower bound (None: > cap)."""

    epsilon_upper: float | None
    epsilon_lower: float | None


def blanket_geometry(users: int, m: float, domain_size: int, *, every_slot: bool = False
                     ) -> tuple[int, float]:
    """(N, r) of the slot blanket: N = users ceil(m) - 1, r = gamma / d.

    ``every_slot=True`` counts every slot, N = users ceil(m) (the victim's own included):
    the exhibited lower bounds, and the one-item mixture of
    :mod:`segshuffle.core.slot_single`, whose proof covers every slot.  The other
    upper bounds count one slot fewer (fewer slots: a larger delta, so still sound).

    With m = 0 there is no blanket (N = 0, r = 0).
    """
    slots = blanket_slots(m)
    if slots == 0:
        return 0, 0.0
    n_slots = users * slots - 1 + (1 if every_slot else 0)
    return max(n_slots, 0), blanket_probability(m) / domain_size


def item_pair(lam: float, users: int, m: float, domain_size: int, *, lower: bool = False
              ) -> CountPair:
    """The two-bin count pair of one item message sent with rate ``lam`` (slot blanket)."""
    n_slots, r = blanket_geometry(users, m, domain_size, every_slot=lower)
    return poisson_pair(lam, n_slots, r)


def _binomial_weights(set_size: int, lam: float) -> np.ndarray:
    """Binom(s, lambda)(j) for j = 0..s (s is small: products of exact binomial
    coefficients and powers, each within a few ulps)."""
    return np.array([math.comb(set_size, j) * lam**j * (1.0 - lam) ** (set_size - j)
                     for j in range(set_size + 1)])


#: Privacy levels whose tau_j one :class:`SlotBlanketBound` keeps (the levels of a
#: campaign, at one m, are asked for over and over by the lambda searches).
TAUS_KEPT = 8


class SlotBlanketBound:
    """tau_j(E) of the slot blanket (module docstring) for one (N, r, s, d) and slack budget.

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
        self._pair = poisson_pair(1.0, n_slots, r)
        self._poisson: dict[int, tuple[BinLaw, float]] = {}
        self._taus: dict[float, np.ndarray] = {}

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
        term = self._poisson.get(i)
        if term is None:
            # The coarse grid only steers searches: its comparison need not be certified.
            q = min(2.0 * i * self.r, 1.0)
            if self.step <= DEFAULT_STEP:
                nu, eta = dominated_poisson_mean(self.n_slots, q, self.slack)
            else:
                nu, eta = steering_poisson_mean(self.n_slots, q, self.slack)
            term = self._poisson[i] = (BinLaw(nu / (2.0 * i)), eta)
        law, eta = term
        return composed_pair(law, 1.0, i, upper=True, step=self.step), eta

    def tau_one(self, eps: float) -> float:
        """tau_1(E): the exact lambda = 1 pair, at most 1 (the smallest tau_j)."""
        if self.active == 0:
            return 0.0
        return min(delta_for(self._pair, eps), 1.0)

    def taus(self, eps: float) -> np.ndarray:
        """(tau_1, ..., tau_s) at E = ``eps``: non-decreasing in j, each at most 1.

        They do not depend on lambda, and a root search over lambda asks for them at
        one E many times: the last few are kept."""
        cached = self._taus.get(eps)
        if cached is None:
            if len(self._taus) >= TAUS_KEPT:
                self._taus.pop(next(iter(self._taus)))
            cached = self._taus[eps] = self._compute_taus(eps)
        return cached

    def _compute_taus(self, eps: float) -> np.ndarray:
        out = np.zeros(self.set_size)
        if self.active == 0:
            return out
        running = delta_for(self._pair, eps)
        out[0] = running
        for i in range(2, self.set_size + 1):
            if i <= self.active:
                composed, eta = self._composed_term(i)
                running = max(running, composed.delta(eps) + eta)
            out[i - 1] = min(running, 1.0)
        return out

    def user_delta(self, eps: float, lam: float) -> float:
        """sum_j Binom(s, lambda)(j) tau_j(E)."""
        if lam == 0.0:
            return 0.0
        weights = _binomial_weights(self.set_size, lam)[1:]
        return min(1.0, float(np.dot(weights, self.taus(eps))))

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


def _require_epsilon(eps: float) -> float:
    """An epsilon at which a divergence is evaluated: a number in [0, MAX_LEVEL] (not a
    string or a bool, which float() would take)."""
    if isinstance(eps, str | bool):
        raise ValueError(f"privacy level must be a number, got {eps!r}")
    value = validation.require_finite("privacy level", eps)
    if not 0.0 <= value <= MAX_LEVEL:
        raise ValueError(f"privacy level must be in [0, {MAX_LEVEL:g}], got {eps!r}")
    return value


def _certified(value: float) -> float:
    """An upper bound widened by the documented rounding margins, at most 1."""
    return min(1.0, value * (1.0 + CERTIFIED_RELATIVE_MARGIN) + CERTIFIED_ABSOLUTE_MARGIN)


def _accounted_trials(trials: int, p: float) -> int:
    """min(trials, ACCOUNTED_BLANKET_PER_ITEM / p): fewer blanket trials, never more."""
    if p <= 0.0:
        return trials
    return min(trials, math.floor(ACCOUNTED_BLANKET_PER_ITEM / p))


class SlotAccountant:
    """delta_user of the slot blanket: the smallest of the bounds that apply.

    - one differing pair at most (S = min(s, d // 2) = 1): the exact mixture of
      :mod:`segshuffle.core.slot_single` over ``every_slot`` = h ceil(m) slots, the
      victim's own included (the others count ``n_slots`` = h ceil(m) - 1);
    - S >= 2 and a blanket small enough to enumerate: the exact joint view of
      :mod:`segshuffle.core.slot_joint`, the largest over k = 1..S differing items
      (the full view up to its buckets, so nothing else is computed);
    - otherwise, S >= 2: the labelled-groups bound of :mod:`segshuffle.core.slot_groups`
      (where its pair is not degenerate and small enough to enumerate);
    - beside the groups (or alone), the revealed-send bound
      :class:`SlotBlanketBound`, sound at every gamma and the smaller one near
      lambda = 1, where revealing who sent costs nothing.

    With a loss grid coarser than DEFAULT_STEP the accountant only steers a search
    (the optimizer's m search): where the groups hold at least STEERING_GROUP_SLOTS
    slots, the two lambda-dependent bounds are then replaced by a cheap estimate:
    the composition of S pairs with independent Poisson bins at the mean group's
    rate (one small loss distribution per lambda).  It is not a bound and never
    reaches a published value.
    """

    def __init__(self, n_slots: int, gamma: float, set_size: int, domain_size: int,
                 slack: float, step: float, *, every_slot: int) -> None:
        self._revealed_arguments = (n_slots, gamma / domain_size if n_slots else 0.0,
                                     set_size, domain_size, slack, step)
        self._revealed: SlotBlanketBound | None = None
        self.gamma = gamma
        self.pairs = min(set_size, domain_size // 2)
        self.single: SingleItemMixture | None = None
        self.groups: GroupsBound | None = None
        self.joint: list[JointView] = []
        self.estimate: BinLaw | None = None
        self.single_estimate: tuple[int, float] | None = None
        self.step = step
        if step > DEFAULT_STEP and n_slots > 0 and gamma > 0.0 and self.pairs >= 1:
            p_group, r_pair = group_geometry(gamma, domain_size, self.pairs)
            if r_pair < 0.5 and n_slots * p_group >= STEERING_GROUP_SLOTS:
                if self.pairs == 1 and every_slot > 0:
                    # One differing item: the mixture's pair at the mean of b, one exact
                    # count pair (a window sum), instead of a loss distribution per rate.
                    self.single_estimate = slot_single.pair_at_mean(every_slot, gamma,
                                                                    domain_size)
                else:
                    self.estimate = BinLaw(n_slots * p_group * r_pair)
        steering = self.estimate is not None or self.single_estimate is not None
        if not steering and self.pairs == 1 and every_slot > 0:
            self.single = single_item_mixture(every_slot, gamma, domain_size)
        elif not steering and self.pairs >= 2 and n_slots > 0 and gamma > 0.0:
            # The most differing items first: the largest view is the one that may not
            # fit, and then the smaller ones are not built.
            joint: list[JointView] = []
            for k in range(self.pairs, 0, -1):
                view = joint_view(n_slots, gamma, domain_size, k)
                if not view.usable:
                    break
                joint.insert(0, view)
            if len(joint) == self.pairs:
                self.joint = joint
            else:
                groups = GroupsBound(n_slots, gamma, domain_size, self.pairs, slack, step)
                if groups.usable:
                    self.groups = groups

    def _steering_estimate(self, eps: float, lam: float) -> float:
        """The steering estimate at E and lambda (not a bound): S pairs with Poisson bins,
        or for one differing item the one-item mixture's pair at the mean of b."""
        if self.single_estimate is not None:
            slots, r1 = self.single_estimate
            return delta_for(poisson_pair(lam, slots, r1), eps)
        assert self.estimate is not None
        return composed_pair(self.estimate, lam, self.pairs, upper=True,
                             step=self.step).delta(eps)

    @property
    def revealed(self) -> SlotBlanketBound:
        """The revealed-send bound, built on first use (its Poisson comparisons cost).

        Beside the steering estimate it is an estimate too: its i-fold compositions take
        the estimate's Poisson(N gamma / d) bins (the same mean: p_g r_S = gamma / d)
        instead of a comparison's certified mean per i.
        """
        if self._revealed is None:
            self._revealed = SlotBlanketBound(*self._revealed_arguments,
                                              steering_law=self.estimate)
        return self._revealed

    def user_delta(self, eps: float, lam: float, enough: float = 0.0) -> float:
        """An upper bound on delta_user(E) at rate ``lam`` (before the certified margins).

        The smallest of the bounds that apply.  The revealed-send bound is the costly one
        (one Poisson comparison and composition per number of differing pairs); where the
        cheaper bounds are already at or below its floor (:meth:`SlotBlanketBound.
        user_delta_floor`), it cannot be the smallest and is not built.  Nor is it where
        they already certify ``enough`` (a check of delta_user <= delta needs no smaller
        bound than one at or below delta): the value is then a larger bound, still
        at most ``enough`` once certified.
        """
        if lam == 0.0 or self.pairs == 0:
            return 0.0
        if self.joint:  # the full view itself, up to the buckets: nothing to add
            return float(max(view.delta(eps, lam) for view in self.joint))
        if self.estimate is not None or self.single_estimate is not None:
            estimate = self._steering_estimate(eps, lam)
            # As below: where the estimate is at or below the revealed-send bound's floor,
            # that bound cannot be the smaller, and its compositions (one per number of
            # differing pairs, at every new m) are not built.
            if estimate <= self.revealed.user_delta_floor(eps, lam):
                return float(estimate)
            return float(min(self.revealed.user_delta(eps, lam), estimate))
        value = math.inf
        if self.single is not None:
            value = self.single.delta(eps, lam)
        # At lambda = 1 nothing is subsampled: revealing who sent costs nothing, and the
        # labelled groups (with their union bound) are not worth their loss distributions.
        if self.groups is not None and lam < 1.0:
            if enough > 0.0:  # a check: the first rung alone may already certify it
                value = min(value, self.groups.first_rung_delta(eps, lam))
            if _certified(value) > enough:
                value = min(value, self.groups.delta(eps, lam))
        if _certified(value) <= enough or value <= self.revealed.user_delta_floor(eps, lam):
            return float(value)
        return float(min(value, self.revealed.user_delta(eps, lam)))


@lru_cache(maxsize=256)
def _slot_bound(users: int, m: float, domain_size: int, set_size: int, slack: float,
                step: float = DEFAULT_STEP) -> SlotAccountant:
    n_slots, r = blanket_geometry(users, m, domain_size)
    every_slot = blanket_geometry(users, m, domain_size, every_slot=True)[0]
    return SlotAccountant(_accounted_trials(n_slots, r), blanket_probability(m), set_size,
                          domain_size, slack, step,
                          every_slot=_accounted_trials(every_slot, r))


def clear_caches() -> None:
    """Forget every cached per-(N, r) computation (benchmarks measure cold costs)."""
    _slot_bound.cache_clear()
    slot_single.clear_caches()
    slot_groups.clear_caches()
    slot_joint.clear_caches()
    clear_loss_caches()
    poisson_comparison.clear_caches()
    hockey_stick.clear_caches()
    clear_full_view_caches()


def _independent_law(users: int, m: float, domain_size: int, *, lower: bool) -> BinLaw:
    """One item's blanket count: Binomial(h - 1, m/d); Binomial(h, m/d) for lower bounds.

    Upper bounds count at most ACCOUNTED_BLANKET_PER_ITEM expected messages.
    """
    p = m / domain_size
    trials = users if lower else _accounted_trials(users - 1, p)
    return BinLaw(mean=trials * p, trials=trials)


def independent_pairs(set_size: int, domain_size: int) -> int:
    """The most items two s-sets of d items differ in: min(s, d - s).

    x' has s items, and at most d - s of them lie outside x.  In the independent
    mode each differing item is one item pair of the composition, in the upper and
    the exhibited lower bound alike.
    """
    return max(0, min(set_size, domain_size - set_size))


def _check(users: int, m: float, domain_size: int, set_size: int, mode: BlanketMode) -> None:
    validation.require_users("users", users)
    validation.require_domain(domain_size, set_size)
    require_blanket_rate(m, domain_size, mode)


def user_delta(level: float, lam: float, set_size: int, users: int, m: float,
               domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
               delta: float | None = None, step: float = DEFAULT_STEP,
               enough: float = 0.0) -> float:
    """An upper bound on the user-level delta at E = ``level`` of the server's full view.

    ``delta``, the target the caller will compare against, sets the Poisson
    slack budget of the slot bound (POISSON_SLACK_SHARE delta; 1e-9 assumed when
    omitted).  ``step`` is the loss grid (coarser: faster and looser, still an
    upper bound).  ``enough``: a check of delta_user <= ``enough`` (a client's) stops at
    the first slot bound that certifies it (:meth:`SlotAccountant.user_delta`), so a
    value at or below ``enough`` may be a larger bound than the smallest one.
    """
    mode = parse_mode(mode)
    level = _require_epsilon(level)
    lam = validation.require_unit_interval("lambda", lam)
    _check(users, m, domain_size, set_size, mode)
    if lam == 0.0:
        return 0.0
    target = (_DEFAULT_DELTA if delta is None
              else validation.require_probability_open("delta", delta))
    if mode is BlanketMode.SLOTS:
        bound = _slot_bound(users, m, domain_size, set_size, POISSON_SLACK_SHARE * target,
                            step)
        return _certified(bound.user_delta(level, lam, enough))
    pairs = independent_pairs(set_size, domain_size)
    if pairs == 0:
        return 0.0
    law = _independent_law(users, m, domain_size, lower=False)
    return _certified(composed_pair(law, lam, pairs, upper=True, step=step).delta(level))


def refuting_delta(level: float, lam: float, set_size: int, users: int, m: float,
                   domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
                   delta: float) -> float | None:
    """A certified lower bound on delta_user(E = ``level``) when it exceeds ``delta``; else None.

    A client refuses parameters as soon as one level provably fails, so this comes before
    the upper bounds: where it answers, no upper bound can certify ``delta`` (each is at
    least delta_user), and none is computed.

    Proof (slot blanket).  Take two datasets that differ in one user, whose item set is
    {j0} + R in one and {j1} + R in the other, R a set of s - 1 other items, and in which
    no other user holds j0 or j1 (s <= d - 2 leaves room for that).  The server's view
    determines the counts (C0, C1) of messages on j0 and j1, so by post-processing the
    divergence of those counts lower-bounds delta_user.  The counts come from the
    blanket, N = h ceil(m) slots each landing on j0 and on j1 with probability
    r = gamma / d (the victim's own slots included: every slot is in the view), and from
    the victim's differing item, sent with probability lambda: the two-bin pair
    (own = lambda, other = 0; :func:`segshuffle.core.hockey_stick.poisson_pair`), whose
    divergence at E is summed exactly per total count.  Only its window's terms are
    summed (:func:`segshuffle.core.hockey_stick.window_delta`: the omitted mass is left
    out, which can only lower the sum) and the result is lowered by the certified
    margins, which cover the terms' rounding; so the value returned is at most the
    exact divergence, and so at most delta_user.  It is returned only when it exceeds
    ``delta``.  The independent blanket has no such shortcut here (its check is one
    composition): None.
    """
    mode = parse_mode(mode)
    level = _require_epsilon(level)
    lam = validation.require_unit_interval("lambda", lam)
    _check(users, m, domain_size, set_size, mode)
    delta = validation.require_probability_open("delta", delta)
    if mode is not BlanketMode.SLOTS or lam == 0.0 or set_size > domain_size - 2:
        return None
    pair = item_pair(lam, users, m, domain_size, lower=True)  # over every slot
    if pair.n_slots * pair.r > ACCOUNTED_BLANKET_PER_ITEM:
        return None  # too large a blanket to sum; the upper bounds decide
    exhibited = window_delta(pair, level)
    certified = exhibited * (1.0 - CERTIFIED_RELATIVE_MARGIN) - CERTIFIED_ABSOLUTE_MARGIN
    return certified if certified > delta else None


def user_delta_lower(level: float, lam: float, set_size: int, users: int, m: float,
                     domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
                     full_view: bool = True) -> float:
    """The divergence at E = ``level`` of an exhibited dataset's view: a lower bound.

    Slot blanket: the larger of the two-bin pair of one differing item (any
    gamma) and, when gamma = 1 and 2s <= d, the aggregated view of
    :func:`segshuffle.core.full_view.slot_view_lower_delta` (exact for s = 1);
    for s = 1 and gamma < 1 the exact full view of
    :func:`segshuffle.core.full_view.single_item_full_view_delta` where its grid
    is affordable, and for s >= 2, 2s <= d and gamma < 1 the joint view of two
    disjoint sets (:mod:`segshuffle.core.slot_joint`, charged at the larger slot
    counts) where it is small enough to enumerate (``full_view=False`` skips
    both: a cheaper, smaller lower bound).
    Independent blanket: the exact composition, discretised optimistically.
    """
    mode = parse_mode(mode)
    lam = validation.require_unit_interval("lambda", lam)
    _check(users, m, domain_size, set_size, mode)
    if lam == 0.0 or domain_size < 2:
        return 0.0
    if mode is BlanketMode.INDEPENDENT:
        pairs = independent_pairs(set_size, domain_size)
        if pairs == 0:
            return 0.0
        law = _independent_law(users, m, domain_size, lower=True)
        if law.mean > ACCOUNTED_BLANKET_PER_ITEM:
            return 0.0  # too large a blanket to evaluate; 0 is a (trivial) lower bound
        return composed_pair(law, lam, pairs, upper=False, step=LOWER_STEP).delta(level)
    n_slots, r = blanket_geometry(users, m, domain_size, every_slot=True)
    if n_slots * r > ACCOUNTED_BLANKET_PER_ITEM:
        return 0.0  # as above
    value = delta_for(poisson_pair(lam, n_slots, r), level)
    gamma = blanket_probability(m)
    if n_slots > 0 and gamma == 1.0 and 2 * set_size <= domain_size:
        value = max(value, slot_view_lower_delta(level, lam, set_size, n_slots, r))
    elif n_slots > 0 and set_size == 1 and full_view:
        exact = single_item_full_view_delta(level, lam, n_slots, r, gamma)
        if exact is not None:
            value = max(value, exact)
    elif n_slots > 0 and set_size >= 2 and 2 * set_size <= domain_size and full_view:
        # Disjoint sets of s items: the joint view is exactly their full view.
        view = joint_view(n_slots, gamma, domain_size, set_size, lower=True)
        if view.usable:
            value = max(value, view.delta(level, lam))
    return value


def user_level_holds(level: float, lam: float, set_size: int, delta: float, users: int,
                     m: float, domain_size: int, *,
                     mode: str | BlanketMode = BlanketMode.SLOTS) -> bool:
    """Whether a user at level E sending with rate ``lam`` is (E, delta)-DP on the full view."""
    delta = validation.require_delta(delta)
    return user_delta(level, lam, set_size, users, m, domain_size, mode=mode,
                      delta=delta) <= delta


def max_lambda(level: float, set_size: int, delta: float, users: int, m: float,
               domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
               xtol: float = LAMBDA_XTOL, bracket: tuple[float, float] = (0.0, 1.0),
               step: float = DEFAULT_STEP) -> float:
    """lambda_k: the largest rate in [0, 1] with delta_user(E) <= delta.

    delta_user grows with lambda (the tau_j are non-decreasing in j, and a
    larger rate is a stochastically larger Binomial(s, lambda); in the
    independent mode a larger rate is a larger shift), so the feasible set is
    an interval [0, lambda_k].  ``bracket`` is a hint, verified before use.  The
    result is verified feasible and below the threshold by at most ``xtol``
    (``step``: the loss grid, see :func:`user_delta`).
    """
    mode = parse_mode(mode)
    level = validation.require_level("privacy level", level)
    delta = validation.require_delta(delta)
    _check(users, m, domain_size, set_size, mode)

    if mode is BlanketMode.SLOTS:
        bound = _slot_bound(users, m, domain_size, set_size, POISSON_SLACK_SHARE * delta, step)

        def value(lam: float) -> float:
            return _certified(bound.user_delta(level, lam))
    else:
        def value(lam: float) -> float:
            return user_delta(level, lam, set_size, users, m, domain_size, mode=mode,
                              delta=delta, step=step)

    excess = remembered(log_excess(value, delta))
    # A hint whose top is infeasible shows that lambda = 1 is too (delta_user grows with
    # lambda), without evaluating it: at lambda = 1 the slot bound's cheaper parts do
    # not apply, and a new m pays for all its compositions there.
    top = min(bracket[1], 1.0)
    if not (top < 1.0 and excess(top) > 0.0) and excess(1.0) <= 0.0:
        return 1.0
    lo, hi = _verified_bracket(excess, *bracket)
    return _largest_feasible(excess, lo, hi, rtol=xtol)


def log_excess(value: Callable[[float], float], delta: float) -> Callable[[float], float]:
    """x -> log value(x) - log delta: <= 0 exactly where value(x) <= delta.

    The accountant's searches look for where a divergence crosses delta.  The divergence
    moves by orders of magnitude across a bracket (it decays about exponentially away
    from the crossing), so on its own scale the root search sees a function close to a
    step and falls back to bisection; its logarithm is close to linear there, where the
    interpolating steps of :func:`~segshuffle.core.scalar_search.bracketed_root` land
    within a few evaluations.  The sign, and so every verified-feasible answer, is the
    same.  A value of 0 maps to the logarithm of the smallest normal float.
    """
    floor = sys.float_info.min
    log_delta = math.log(delta)

    def excess(x: float) -> float:
        return math.log(max(value(x), floor)) - log_delta

    return excess


#: Steps of the bracket search around a hint: each widening multiplies the gap by this.
_BRACKET_GROWTH = 1.6


def _verified_bracket(excess, lo: float, hi: float) -> tuple[float, float]:
    """(lo, hi) with excess(lo) <= 0 < excess(hi), found by widening a hint geometrically.

    excess(1) > 0 is known.  A hint that misses the root moves towards it in steps that
    grow by _BRACKET_GROWTH each time: upwards the steps add, downwards they divide,
    by a factor that itself grows by _BRACKET_GROWTH (1.6, 2.56, 4.1, ...: after k
    steps the rate has fallen by 1.6^(k (k + 1) / 2)).  So a close hint costs few
    evaluations and a bad one few more: a root 500 times below the hint is bracketed in
    five, and lambda = 1e-12, below which 0 is taken (excess(0) <= 0 always), is
    reached in at most eleven.  The bracket found is then at most one factor wide,
    which the root search's interpolation closes quickly on the logarithmic excess.
    """
    hi = min(hi, 1.0)
    if hi < 1.0 and excess(hi) <= 0.0:  # the root lies above the hint
        lo, step = hi, max(hi - lo, 1e-3)
        while True:
            candidate = min(1.0, lo + step)
            if candidate >= 1.0 or excess(candidate) > 0.0:
                return lo, candidate
            lo, step = candidate, step * _BRACKET_GROWTH
    if lo <= 0.0 or excess(lo) <= 0.0:
        return max(lo, 0.0), hi
    hi, factor = lo, _BRACKET_GROWTH  # the root lies below the hint
    while True:
        candidate = hi / factor
        if candidate < 1e-12:
            return 0.0, hi
        if excess(candidate) <= 0.0:
            return candidate, hi
        hi, factor = candidate, factor * _BRACKET_GROWTH


def user_epsilon(lam: float, set_size: int, delta: float, users: int, m: float,
                 domain_size: int, *, lower: bool = False, hint: float | None = None,
                 mode: str | BlanketMode = BlanketMode.SLOTS) -> float | None:
    """The smallest user-level E in [0, EPSILON_CAP] with delta_user(E) <= delta.

    delta_user falls as E grows, so the feasible set is an interval [E*, cap].
    ``None`` when even the cap does not reach delta.  With ``lower=True`` the
    exhibited dataset's divergence is used instead: the result is then a lower
    bound, the largest E (to 1e-5 relative) that the server can still tell apart
    at delta.  ``hint``, a value believed feasible, narrows the search.
    """
    mode = parse_mode(mode)
    lam = validation.require_unit_interval("lambda", lam)
    delta = validation.require_delta(delta)
    _check(users, m, domain_size, set_size, mode)

    if lower:
        return _lower_epsilon(lam, set_size, delta, users, m, domain_size, mode, hint)

    @remembered
    def excess(level: float) -> float:
        return user_delta(level, lam, set_size, users, m, domain_size, mode=mode,
                          delta=delta) - delta

    if hint is None and mode is BlanketMode.SLOTS and lam > 0.0:
        hint = _single_item_hint(lam, set_size, delta, users, m, domain_size)
    return _smallest_feasible_level(excess, hint, EPSILON_RTOL)


#: A hint brackets the epsilon search in [hint / _HINT_SPAN, hint] when it can.
_HINT_SPAN = 1.05


def _single_item_hint(lam: float, set_size: int, delta: float, users: int, m: float,
                      domain_size: int) -> float | None:
    """For one differing item, the epsilon of the mixture's heaviest pair, a little raised.

    The mixture is the accountant's own (cached, the same the search then evaluates).
    The exact mixture is concentrated on pairs with about N - E[b] slots, so their
    epsilon is within a fraction of a percent of the mixture's; only a hint (verified).
    """
    mixture = _slot_bound(users, m, domain_size, set_size, POISSON_SLACK_SHARE * delta).single
    if mixture is None:
        return None
    heaviest = max(range(len(mixture.weights)), key=mixture.weights.__getitem__)
    slots = mixture.slots[min(heaviest + 1, len(mixture.slots) - 1)]
    guess = epsilon_for(poisson_pair(lam, slots, mixture.r1), delta) if mixture.r1 else None
    return None if guess is None else guess * 1.01


def _smallest_feasible_level(excess, hint: float | None, rtol: float,
                             floor: float = 0.0) -> float | None:
    """Smallest E in [floor, cap] with excess(E) <= 0 (excess falls with E), or None."""
    if excess(floor) <= 0.0:
        return floor
    if hint is not None and floor < hint < EPSILON_CAP and excess(hint) <= 0.0:
        # A close hint: bracket the root from below within a few percent first.
        below = max(floor, hint / _HINT_SPAN)
        if below > floor and excess(below) > 0.0:
            return _smallest_feasible(excess, below, hint, rtol=rtol)
        return _smallest_feasible(excess, floor, below if below > floor else hint, rtol=rtol)
    if excess(EPSILON_CAP) > 0.0:
        return None
    return _smallest_feasible(excess, floor, EPSILON_CAP, rtol=rtol)


#: Relative precision of the lower-bound search over the exact full view (costlier).
_FULL_VIEW_RTOL = 1e-5


@lru_cache(maxsize=1024)
def _lower_epsilon(lam: float, set_size: int, delta: float, users: int, m: float,
                   domain_size: int, mode: BlanketMode, hint: float | None) -> float | None:
    """The exhibited lower bound on epsilon; levels sharing a lambda share it (cached).

    The cheap lower bound (no exact s = 1 full view) comes first; the exact full
    view, when it applies, can only move the answer up from there.
    """
    def excess(level: float, full_view: bool) -> float:
        return user_delta_lower(level, lam, set_size, users, m, domain_size, mode=mode,
                                full_view=full_view) - delta

    cheap = _smallest_feasible_level(remembered(lambda e: excess(e, False)), hint,
                                     EPSILON_RTOL)
    gamma = blanket_probability(m)
    applies = mode is BlanketMode.SLOTS and 0.0 < gamma < 1.0 and (
        set_size == 1 or (set_size >= 2 and 2 * set_size <= domain_size and joint_view(
            blanket_geometry(users, m, domain_size, every_slot=True)[0], gamma, domain_size,
            set_size, lower=True).usable))
    if not applies or cheap is None:
        return cheap
    return _smallest_feasible_level(remembered(lambda e: excess(e, True)), hint,
                                    _FULL_VIEW_RTOL, floor=cheap)


def audit(users: int, domain_size: int, set_size: int, m: float, lam: float, delta: float,
          *, mode: str | BlanketMode = BlanketMode.SLOTS) -> AuditResult:
    """Upper and exhibited lower user-level epsilon of one (m, lambda) setting (CLI ``audit``)."""
    upper = user_epsilon(lam, set_size, delta, users, m, domain_size, mode=mode)
    lower = user_epsilon(lam, set_size, delta, users, m, domain_size, mode=mode, lower=True,
                         hint=upper)
    return AuditResult(epsilon_upper=upper, epsilon_lower=lower)


def _smallest_feasible_integer(excess: Callable[[int], float], lo: int, hi: int) -> int:
    """The smallest integer c in (lo, hi] with excess(c) <= 0, given excess(hi) <= 0 <
    excess(lo) (or lo = 0, left unevaluated) and excess falling with c.

    The logarithmic excess of the full-signal search is close to linear in c, so the
    root is guessed by linear interpolation between the bracket's ends and the guess's
    neighbour on the other side is probed: when the guess is right, two evaluations
    end the search (bisection takes log2(hi - lo)).  Any round that does not halve the
    bracket is followed by a bisection step, so the search never takes more than about
    three times as many evaluations as bisection would.
    """
    f_lo = excess(lo) if lo > 0 else math.inf
    f_hi = excess(hi)
    bisect = not math.isfinite(f_lo)
    while hi - lo > 1:
        width = hi - lo
        if bisect:
            guess = (lo + hi) // 2
        else:
            guess = min(max(round(lo + width * f_lo / (f_lo - f_hi)), lo + 1), hi - 1)
        probes = [guess]
        while probes:
            c = probes.pop()
            value = excess(c)
            if value <= 0.0:
                hi, f_hi = c, value
            else:
                lo, f_lo = c, value
            neighbour = c - 1 if value <= 0.0 else c + 1
            if not bisect and c == guess and lo < neighbour < hi:
                probes.append(neighbour)
        bisect = not math.isfinite(f_lo) or hi - lo > width // 2
    return hi


#: Below this rate the full-signal search takes the rate itself (nothing smaller matters).
_SMALLEST_RATE = 1e-12


def _smallest_feasible_rate(excess: Callable[[float], float], top: float,
                            rtol: float) -> float:
    """The smallest m in (0, top] with excess(m) <= 0 (to ``rtol``), given excess(top) <= 0,
    excess falling with m and large as m -> 0.

    Such rates span orders of magnitude (m_k is 0.004 at a million users and d = 16), so
    the root is bracketed by decades below ``top`` and then searched in log m, where the
    logarithmic excess is close to linear: a handful of evaluations, where a search on m
    itself first bisects its way down from ``top``.  The answer is verified feasible.
    """
    hi, lo = top, top / 10.0
    while excess(lo) <= 0.0:
        if lo <= _SMALLEST_RATE:
            return lo
        hi, lo = lo, lo / 10.0
    log_lo, log_hi = math.log(lo), math.log(hi)
    # rtol relative in m is rtol absolute in log m: relative to the larger |log| end.
    scale = max(abs(log_lo), abs(log_hi), 1.0)
    ends = {log_lo: lo, log_hi: hi}  # evaluated already: exp(log(x)) need not be x

    def rate(t: float) -> float:
        return ends.get(t, min(math.exp(t), hi))

    return rate(_smallest_feasible(lambda t: excess(rate(t)), log_lo, log_hi,
                                   rtol=rtol / scale))


def full_signal_blanket(level: float, set_size: int, delta: float, users: int,
                        domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
                        rtol: float = 1e-9, step: float = DEFAULT_STEP) -> float:
    """m_k: the smallest blanket rate m at which lambda_k = 1 (paper, "Parameter choices").

    Slot blanket: within one bucket ceil(m) = c the bound falls as gamma = m / c
    grows, and at integer m = c it falls with c; so the smallest bucket whose
    m = c is feasible is found by doubling and bisection, and m_k by a root search
    on gamma inside it.  Independent blanket: the bound falls as m grows up to
    d / 2 (a per-item rate of 1/2), so m_k is a root search on (0, d / 2] (d / 2
    when even that does not suffice: the caller sees lambda_k < 1 there).  Every
    returned m is verified feasible (except that last case).
    """
    mode = parse_mode(mode)
    level = validation.require_level("privacy level", level)
    delta = validation.require_delta(delta)
    _check(users, 0.0, domain_size, set_size, mode)

    def value(m: float) -> float:
        return user_delta(level, 1.0, set_size, users, m, domain_size, mode=mode,
                          delta=delta, step=step)

    # In logarithms the excess is close to linear in m, so the root search is short.
    excess = remembered(log_excess(value, delta))

    if excess(0.0) <= 0.0:
        return 0.0
    if mode is BlanketMode.INDEPENDENT:
        # A Binomial(n, p) blanket is most variable at p = 1/2; past m = d/2 it only
        # gets more predictable (at m = d every user sends every item).
        top = domain_size / 2.0
        if excess(top) > 0.0:
            return top
        return _smallest_feasible_rate(excess, top, rtol)
    # Below one slot per user the rates span orders of magnitude and are searched by
    # decades below a top; m = 1 is the costliest top to evaluate (gamma = 1: every slot
    # sends, the steering estimate does not apply, and a million users' slots make large
    # loss distributions), so a top just below it is tried first.  The bound falls with
    # gamma inside the bucket ceil(m) = 1, so where that top holds, m_k lies below it.
    if excess(ONE_SLOT_PROBE) <= 0.0:
        return _smallest_feasible_rate(excess, ONE_SLOT_PROBE, rtol)
    hi = 1
    while excess(float(hi)) > 0.0:
        if hi >= MAX_BLANKET_RATE:
            raise UnprotectableLevelError(
                f"no blanket rate up to {MAX_BLANKET_RATE:g} protects level {level:g} with "
                "lambda = 1")
        hi = min(2 * hi, int(MAX_BLANKET_RATE))
    hi = _smallest_feasible_integer(lambda c: excess(float(c)), hi // 2, hi)
    if hi == 1:  # gamma = m: the rates below one slot span orders of magnitude
        return _smallest_feasible_rate(excess, 1.0, rtol)
    bucket_start = float(hi - 1)
    low_end = math.nextafter(bucket_start, math.inf)
    if excess(low_end) <= 0.0:
        return low_end
    return _smallest_feasible(excess, low_end, float(hi), rtol=rtol)


"""User-level privacy accounting of the segmented protocol: an upper bound on delta_user.

This module belongs to the numpy-free port of the client's privacy accountant, used by light
client installs (no numpy, no scipy) to verify a server's privacy parameters;
``tests/test_portable_accountant*.py`` keep it equal to the JavaScript and numpy accountants.

The server sees the whole histogram of decrypted messages, null messages included; every
bound here is a bound on that full view.  ``users`` is h, the number of honest users whose
blanket is guaranteed, the victim included.  A user at level E with Poisson rate lambda is
protected when delta_user(E) <= delta.

**Slot blanket** (the paper's).  N = h ceil(m) - 1 slots each land on a given item with
probability r = gamma / d.  The smallest of the bounds that apply is taken:

- at most one differing pair (S = min(s, d // 2) = 1): the exact mixture of
  :mod:`segshuffle.core.slot_single`, over all h ceil(m) slots (the victim's own included);
- S >= 2 and a blanket small enough to enumerate: the exact joint view of
  :mod:`segshuffle.core.slot_joint`, the largest over k = 1..S differing items;
- otherwise, S >= 2: the labelled-groups bound of :mod:`segshuffle.core.slot_groups`
  where it applies;
- beside those, the revealed-send bound: reveal the victim's send indicators V (they do not
  depend on its data); by joint convexity

      delta_user(E) <= sum_{j=1..s} Binom(s, lambda)(j) tau_j(E),

  and given j items sent the view is a post-processing of the counts on at most j disjoint
  differing pairs, so tau_j = max_{i <= min(j, d // 2)} (D_i + eta_i), with D_1 the exact
  two-bin pair of :mod:`.hockey_stick` at lambda = 1 and, for i >= 2, D_i the i-fold
  composition of the lambda = 1 pair with independent Poisson bins whose mean the binomial
  total dominates up to the slack eta_i (:mod:`segshuffle.core.poisson_comparison`).

**Independent blanket.**  Every item's blanket count is Binomial(h - 1, m / d), independent
across items, so the view is exactly the product of one item pair per item of x not in x':
two s-sets of d items differ in at most min(s, d - s) items, and delta_user comes from the
min(s, d - s)-fold composed loss distribution, with no slack.

Every value is reported as value (1 + 1e-9) + 1e-15, at most 1: the per-total sums lose at
most ~1e-11 relative to cancellation and the FFT rounding is charged separately, so rounding
never puts a reported value below the exact one.
"""

from __future__ import annotations

import math

from .. import arrays
from ..bounded_cache import key_of, registered_cache
from ..errors import AccountantError
from ..hockey_stick import delta_for, poisson_pair, window_delta
from ..poisson_comparison import dominated_poisson_mean
from ..privacy_loss import DEFAULT_STEP, BinLaw, ComposedLoss, composed_pair
from ..rules import MAX_LEVEL
from ..slot_groups import GroupsBound
from ..slot_joint import JointView, joint_view
from ..slot_single import SingleItemMixture, single_item_mixture
from .blanket import (
    BlanketMode,
    blanket_probability,
    blanket_slots,
    parse_mode,
    require_blanket_rate,
)
from .validation import require_domain, require_finite, require_unit_interval, require_users

__all__ = [
    "ACCOUNTED_BLANKET_PER_ITEM",
    "CERTIFIED_ABSOLUTE_MARGIN",
    "CERTIFIED_RELATIVE_MARGIN",
    "POISSON_SLACK_SHARE",
    "blanket_geometry",
    "refuting_delta",
    "user_delta",
]

#: Share of the target delta that the Poisson comparison's slack may take.
POISSON_SLACK_SHARE = 1e-3

#: Relative safety margin on every reported delta.
CERTIFIED_RELATIVE_MARGIN = 1e-9

#: Absolute safety margin on every reported delta.
CERTIFIED_ABSOLUTE_MARGIN = 1e-15

#: Upper bounds count at most this many expected blanket messages on one item; counting
#: fewer is conservative (less blanket, larger delta) and keeps every window bounded.
ACCOUNTED_BLANKET_PER_ITEM = 1e7

#: Target delta assumed for the slack when a caller asks for a bare delta_user.
DEFAULT_DELTA = 1e-9

#: Privacy levels whose tau_j one revealed-send bound keeps.
TAUS_KEPT = 8


def blanket_geometry(users: int, m: float, domain_size: int, *, every_slot: bool = False
                     ) -> tuple[int, float]:
    """(N, r) of the slot blanket: N = h ceil(m) - 1 slots, r = gamma / d ((0, 0) when m = 0).

    ``every_slot=True`` counts all h ceil(m) slots, the victim's own included: the
    one-item mixture of :mod:`segshuffle.core.slot_single`, whose proof covers every slot."""
    slots = blanket_slots(m)
    if slots == 0:
        return 0, 0.0
    n_slots = users * slots - 1 + (1 if every_slot else 0)
    return max(n_slots, 0), blanket_probability(m) / domain_size


def _binomial_weights(set_size: int, lam: float) -> list[float]:
    """Binom(s, lambda)(j) for j = 1..s (exact coefficients times powers: each within a few
    ulp)."""
    return [float(math.comb(set_size, j)) * lam**j * (1.0 - lam) ** (set_size - j)
            for j in range(1, set_size + 1)]


class RevealedSendBound:
    """tau_j(E) of the revealed-send bound for one (N, r, s, d) and slack budget."""

    def __init__(self, n_slots: int, r: float, set_size: int, domain_size: int,
                 slack: float, step: float) -> None:
        self.set_size = set_size
        self.active = min(set_size, domain_size // 2)
        self.pair = poisson_pair(1.0, n_slots, r)
        self.composed: dict[int, ComposedLoss] = {}
        self.eta: dict[int, float] = {}
        self.kept: dict[float, list[float]] = {}
        for i in range(2, self.active + 1):
            nu, eta = dominated_poisson_mean(n_slots, min(2.0 * i * r, 1.0), slack)
            self.composed[i] = composed_pair(BinLaw(nu / (2.0 * i)), 1.0, i, upper=True,
                                             step=step)
            self.eta[i] = eta

    def taus(self, eps: float) -> list[float]:
        """(tau_1, ..., tau_s) at E = ``eps``: non-decreasing in j, each at most 1 (the last
        few kept)."""
        taus = self.kept.get(eps)
        if taus is None:
            if len(self.kept) >= TAUS_KEPT:
                del self.kept[next(iter(self.kept))]
            taus = self.kept[eps] = self._compute_taus(eps)
        return taus

    def _compute_taus(self, eps: float) -> list[float]:
        out = [0.0] * self.set_size
        if self.active == 0:
            return out
        running = delta_for(self.pair, eps)
        out[0] = running
        for i in range(2, self.set_size + 1):
            if i <= self.active:
                running = max(running, self.composed[i].delta(eps) + self.eta[i])
            out[i - 1] = min(running, 1.0)
        return out

    def user_delta(self, eps: float, lam: float) -> float:
        """sum_j Binom(s, lambda)(j) tau_j(E)."""
        if lam == 0.0:
            return 0.0
        weights = _binomial_weights(self.set_size, lam)
        taus = self.taus(eps)
        total = 0.0
        for weight, tau in zip(weights, taus, strict=True):
            total += weight * tau
        return min(1.0, total)


class SlotAccountant:
    """delta_user of the slot blanket: the smallest of the bounds that apply (module
    docstring)."""

    def __init__(self, n_slots: int, gamma: float, set_size: int, domain_size: int,
                 slack: float, step: float, *, every_slot: int) -> None:
        self._revealed_arguments = (n_slots, gamma / domain_size if n_slots else 0.0,
                                    set_size, domain_size, slack, step)
        self._revealed: RevealedSendBound | None = None
        self.pairs = min(set_size, domain_size // 2)
        self.single: SingleItemMixture | None = None
        self.groups: GroupsBound | None = None
        self.joint: list[JointView] = []
        if self.pairs == 1 and every_slot > 0:
            self.single = single_item_mixture(every_slot, gamma, domain_size)
        elif self.pairs >= 2 and n_slots > 0 and gamma > 0.0:
            joint: list[JointView] = []
            for k in range(1, self.pairs + 1):
                view = joint_view(n_slots, gamma, domain_size, k)
                if not view.usable:  # the joint bound needs every k: stop at the first miss
                    break
                joint.append(view)
            else:
                self.joint = joint
            if not self.joint:
                groups = GroupsBound(n_slots, gamma, domain_size, self.pairs, slack, step)
                if groups.usable:
                    self.groups = groups

    @property
    def revealed(self) -> RevealedSendBound:
        """The revealed-send bound, built on first use (its Poisson comparisons cost)."""
        if self._revealed is None:
            self._revealed = RevealedSendBound(*self._revealed_arguments)
        return self._revealed

    def user_delta(self, eps: float, lam: float, enough: float = 0.0) -> float:
        """An upper bound on delta_user(E) at rate ``lam`` (before the certified margins):
        the smallest of the bounds that apply, the costly revealed-send one last and not at
        all where the others already certify ``enough`` (a check of delta_user <= delta
        needs no smaller bound)."""
        if lam == 0.0 or self.pairs == 0:
            return 0.0
        if self.joint:  # the full view itself, up to the buckets
            return max(view.delta(eps, lam) for view in self.joint)
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
        if _certified(value) <= enough:
            return value
        return min(value, self.revealed.user_delta(eps, lam))


def _accounted_trials(trials: int, p: float) -> int:
    """min(trials, floor(ACCOUNTED_BLANKET_PER_ITEM / p)): fewer blanket trials, never more."""
    if p <= 0.0:
        return trials
    limit = ACCOUNTED_BLANKET_PER_ITEM / p
    return trials if limit >= trials else math.floor(limit)


_slot_bound_cache = registered_cache(256)


def _slot_bound(users: int, m: float, domain_size: int, set_size: int, slack: float,
                step: float) -> SlotAccountant:
    """The (cached) slot accountant of one campaign geometry and slack."""
    def make() -> SlotAccountant:
        n_slots, r = blanket_geometry(users, m, domain_size)
        every_slot = blanket_geometry(users, m, domain_size, every_slot=True)[0]
        return SlotAccountant(_accounted_trials(n_slots, r), blanket_probability(m), set_size,
                              domain_size, slack, step,
                              every_slot=_accounted_trials(every_slot, r))

    return _slot_bound_cache.get(key_of(users, m, domain_size, set_size, slack, step), make)


def _independent_law(users: int, m: float, domain_size: int) -> BinLaw:
    """One item's blanket count in the independent mode: Binomial(h - 1, m / d), counting at
    most ACCOUNTED_BLANKET_PER_ITEM expected messages."""
    p = m / domain_size
    trials = _accounted_trials(users - 1, p)
    return BinLaw(trials * p, trials)


def _certified(value: float) -> float:
    """An upper bound widened by the rounding margins, at most 1."""
    return min(1.0, value * (1.0 + CERTIFIED_RELATIVE_MARGIN) + CERTIFIED_ABSOLUTE_MARGIN)


def _arguments(level: float, lam: float, set_size: int, users: int, m: float,
               domain_size: int, mode: str | BlanketMode, delta: float | None
               ) -> tuple[BlanketMode, float, float, int, int, int, float, float]:
    """The validated (mode, E, lambda, h, d, s, m, delta) of a call (:func:`user_delta`)."""
    blanket_mode = parse_mode(mode)
    eps = require_finite("privacy level", level)
    if not 0.0 <= eps <= MAX_LEVEL:
        raise AccountantError(f"privacy level must be in [0, {MAX_LEVEL:g}], got {level!r}")
    lam = require_unit_interval("lambda", lam)
    h = require_users("users", users)
    d, s = require_domain(domain_size, set_size)
    rate = require_blanket_rate(m, d, blanket_mode)
    target = DEFAULT_DELTA
    if delta is not None:
        target = require_finite("delta", delta)
        # A budget of zero or less admits no Poisson comparison at all.
        if not target > 0.0:
            raise AccountantError(f"delta must be > 0, got {delta!r}")
    return blanket_mode, eps, lam, h, d, s, rate, target


@arrays.on_python
def refuting_delta(level: float, lam: float, set_size: int, users: int, m: float,
                   domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
                   delta: float) -> float | None:
    """A certified lower bound on delta_user(E = ``level``) when it exceeds ``delta``; else None.

    The exhibited pair of datasets of the numpy accountant's ``refuting_delta`` (its
    docstring has the proof): one user's differing item j0 against j1, nobody else on
    either, the two-bin counts over every slot; the window's terms only, lowered by the
    certified margins.  None in the independent mode, where s > d - 2, or for a blanket
    too large to sum.
    """
    blanket_mode, eps, lam, h, d, s, rate, target = _arguments(
        level, lam, set_size, users, m, domain_size, mode, delta)
    if blanket_mode is not BlanketMode.SLOTS or lam == 0.0 or s > d - 2:
        return None
    n_slots, r = blanket_geometry(h, rate, d, every_slot=True)
    if n_slots * r > ACCOUNTED_BLANKET_PER_ITEM:
        return None
    exhibited = window_delta(poisson_pair(lam, n_slots, r), eps)
    certified = exhibited * (1.0 - CERTIFIED_RELATIVE_MARGIN) - CERTIFIED_ABSOLUTE_MARGIN
    return certified if certified > target else None


@arrays.on_python
def user_delta(level: float, lam: float, set_size: int, users: int, m: float,
               domain_size: int, *, mode: str | BlanketMode = BlanketMode.SLOTS,
               delta: float | None = None, enough: float = 0.0) -> float:
    """An upper bound on the user-level delta at E = ``level`` of the server's full view.

    For a user sending each of its ``set_size`` items with rate ``lam`` among ``users``
    honest users with blanket rate ``m`` over a privacy domain of ``domain_size`` items:
    level E in [0, 30], lam in [0, 1], s in 1..min(d, 64), h in 1..1e12, m in 0..1024 (at
    most d in the independent mode), d in 2..1e6.  ``mode`` is the campaign's blanket mode;
    ``delta``, the target the caller compares against, sets the Poisson slack budget of the
    slot bound (POISSON_SLACK_SHARE delta; 1e-9 assumed when omitted).  ``enough``: a check
    of delta_user <= ``enough`` stops at the first slot bound that certifies it, so a value
    at or below ``enough`` may be a larger bound than the smallest one.

    Raises AccountantError (a ValueError) on an argument out of range.
    """
    blanket_mode, eps, lam, h, d, s, rate, target = _arguments(
        level, lam, set_size, users, m, domain_size, mode, delta)
    if lam == 0.0:
        return 0.0
    if blanket_mode is BlanketMode.SLOTS:
        bound = _slot_bound(h, rate, d, s, POISSON_SLACK_SHARE * target, DEFAULT_STEP)
        return _certified(bound.user_delta(eps, lam, enough))
    pairs = max(0, min(s, d - s))  # the most items two s-sets of d items differ in
    if pairs == 0:
        return 0.0
    law = _independent_law(h, rate, d)
    return _certified(composed_pair(law, lam, pairs, upper=True, step=DEFAULT_STEP).delta(eps))

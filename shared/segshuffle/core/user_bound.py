"""The user-level bound of the server's full view: the smallest of the bounds that apply.

For a user at level E sending each of its s items with rate lambda among h honest users
(the victim included) with blanket rate m over d items, :func:`certified_user_delta` is an
upper bound on delta_user(E), the hockey-stick divergence of the server's whole view
between two datasets that differ in that user's item set.

**Slot blanket** (the paper's): :class:`SlotAccountant` takes the smallest of the bounds
that apply, each proved in its own module: the one-item mixture
(:mod:`segshuffle.core.slot_single`) where at most one pair of items can differ; the exact
joint view (:mod:`segshuffle.core.slot_joint`) where the blanket is small enough to
enumerate; else the labelled groups (:mod:`segshuffle.core.slot_groups`); and beside them
the revealed-send bound (:mod:`segshuffle.core.revealed_send`).  The minimum of upper
bounds is an upper bound.

**Independent blanket**: every item's blanket count is Binomial(h - 1, m / d), independent
across items, so the view of x against x' is exactly the product of one item pair per item
of x not in x' (items common to both sets cancel); two s-sets of d items differ in at most
min(s, d - s) items, so delta_user comes from that many composed item pairs
(:mod:`segshuffle.core.privacy_loss`, pessimistic grid): no slack, no revealed V.

**Certified.**  Every value is reported as value (1 + CERTIFIED_RELATIVE_MARGIN) +
CERTIFIED_ABSOLUTE_MARGIN, at most 1: the per-total sums lose at most ~1e-11 relative to
cancellation (measured against 50-digit arithmetic) and the FFT rounding is bounded
separately, so rounding never puts a value below the exact one.

**Refutation** (:func:`refuted_delta`): a certified lower bound from an exhibited pair of
datasets, so that a client refuses parameters without computing any upper bound.

Written once against :mod:`segshuffle.core.arrays`, numpy-free: the server's accountant
(:mod:`segshuffle.core.accounting`) runs it on numpy, the light client's
(:mod:`segshuffle.core.portable`) on lists; an accountant keeps the backend it was built on.
"""

from __future__ import annotations

import math

from . import arrays, slot_single
from .bounded_cache import key_of, registered_cache
from .hockey_stick import delta_for, poisson_pair, window_delta
from .privacy_loss import DEFAULT_STEP, BinLaw, composed_pair
from .randomizers import blanket_probability, blanket_slots
from .revealed_send import RevealedSendBound
from .slot_groups import GroupsBound, group_geometry
from .slot_joint import JointView, joint_view
from .slot_single import SingleItemMixture, single_item_mixture

__all__ = [
    "ACCOUNTED_BLANKET_PER_ITEM", "CERTIFIED_ABSOLUTE_MARGIN", "CERTIFIED_RELATIVE_MARGIN",
    "DEFAULT_DELTA", "POISSON_SLACK_SHARE", "STEERING_GROUP_SLOTS", "SlotAccountant",
    "accounted_trials", "blanket_geometry", "certified", "certified_user_delta",
    "independent_law", "independent_pairs", "refuted_delta", "slot_bound",
]

#: Share of the target delta that the Poisson comparison's slack may take.
POISSON_SLACK_SHARE = 1e-3

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

#: Target delta assumed for the slack when a caller asks for a bare delta_user.
DEFAULT_DELTA = 1e-9


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
      (:mod:`segshuffle.core.revealed_send`), sound at every gamma and the smaller one near
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
        self.backend = arrays.name()  # its bounds are built and evaluated there
        self._revealed_arguments = (n_slots, gamma / domain_size if n_slots else 0.0,
                                     set_size, domain_size, slack, step)
        self._revealed: RevealedSendBound | None = None
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
    def revealed(self) -> RevealedSendBound:
        """The revealed-send bound, built on first use (its Poisson comparisons cost).

        Beside the steering estimate it is an estimate too: its i-fold compositions take
        the estimate's Poisson(N gamma / d) bins (the same mean: p_g r_S = gamma / d)
        instead of a comparison's certified mean per i.
        """
        if self._revealed is None:
            with arrays.use(self.backend):
                self._revealed = RevealedSendBound(*self._revealed_arguments,
                                                   steering_law=self.estimate)
        return self._revealed

    def user_delta(self, eps: float, lam: float, enough: float = 0.0) -> float:
        """An upper bound on delta_user(E) at rate ``lam`` (before the certified margins).

        The smallest of the bounds that apply.  The revealed-send bound is the costly one
        (one Poisson comparison and composition per number of differing pairs): its
        terms are built only as far as its sum could still come out below the cheaper
        bounds (:meth:`RevealedSendBound.user_delta_below`), none where they are
        already at or below its floor from tau_1 alone.  Nor is it built where
        they already certify ``enough`` (a check of delta_user <= delta needs no smaller
        bound than one at or below delta): the value is then a larger bound, still
        at most ``enough`` once certified.
        """
        with arrays.use(self.backend):
            return self._user_delta(eps, lam, enough)

    def _user_delta(self, eps: float, lam: float, enough: float) -> float:
        if lam == 0.0 or self.pairs == 0:
            return 0.0
        if self.joint:  # the full view itself, up to the buckets: nothing to add
            return float(max(view.delta(eps, lam) for view in self.joint))
        if self.estimate is not None or self.single_estimate is not None:
            estimate = self._steering_estimate(eps, lam)
            # As below: the revealed-send bound's compositions (one per number of
            # differing pairs, at every new m) are built only as far as it could still
            # come out below the estimate.
            return float(self.revealed.user_delta_below(eps, lam, estimate))
        value = math.inf
        if self.single is not None:
            value = self.single.delta(eps, lam)
        # At lambda = 1 nothing is subsampled: revealing who sent costs nothing, and the
        # labelled groups (with their union bound) are not worth their loss distributions.
        if self.groups is not None and lam < 1.0:
            if enough > 0.0:  # a check: the first rung alone may already certify it
                value = min(value, self.groups.first_rung_delta(eps, lam))
            if certified(value) > enough and not self._revealed_is_smaller(eps, lam):
                value = min(value, self.groups.delta(eps, lam))
        if certified(value) <= enough:
            return float(value)
        return float(self.revealed.user_delta_below(eps, lam, value))

    def _revealed_is_smaller(self, eps: float, lam: float) -> bool:
        """Whether the revealed-send bound, its taus at E already kept, is at most the
        labelled groups' floor (:meth:`GroupsBound.floor_delta`, one composition instead
        of one per rung): then the groups cannot be the smaller, and the minimum is the
        revealed-send sum that :meth:`_user_delta` takes next.  Near lambda = 1, where
        revealing who sent costs little, that spares the groups' other rungs at every
        step of a root search once lambda = 1 has been evaluated."""
        revealed = self._revealed
        if self.groups is None or revealed is None or not revealed.has_taus(eps):
            return False
        floor = self.groups.floor_delta(eps, lam)
        return floor is not None and revealed.user_delta(eps, lam) <= floor


_slot_bounds = registered_cache(256)


def slot_bound(users: int, m: float, domain_size: int, set_size: int, slack: float,
               step: float = DEFAULT_STEP) -> SlotAccountant:
    """The (cached) slot accountant of one campaign geometry and slack budget, on the
    backend in use."""
    def make() -> SlotAccountant:
        n_slots, r = blanket_geometry(users, m, domain_size)
        every_slot = blanket_geometry(users, m, domain_size, every_slot=True)[0]
        return SlotAccountant(accounted_trials(n_slots, r), blanket_probability(m),
                              set_size, domain_size, slack, step,
                              every_slot=accounted_trials(every_slot, r))

    return _slot_bounds.get(key_of(arrays.name(), users, m, domain_size, set_size, slack,
                                   step), make)


def certified(value: float) -> float:
    """An upper bound widened by the documented rounding margins, at most 1."""
    return min(1.0, value * (1.0 + CERTIFIED_RELATIVE_MARGIN) + CERTIFIED_ABSOLUTE_MARGIN)


def accounted_trials(trials: int, p: float) -> int:
    """min(trials, ACCOUNTED_BLANKET_PER_ITEM / p): fewer blanket trials, never more."""
    if p <= 0.0:
        return trials
    return min(trials, math.floor(ACCOUNTED_BLANKET_PER_ITEM / p))


def independent_law(users: int, m: float, domain_size: int, *, lower: bool) -> BinLaw:
    """One item's blanket count: Binomial(h - 1, m/d); Binomial(h, m/d) for lower bounds.

    Upper bounds count at most ACCOUNTED_BLANKET_PER_ITEM expected messages.
    """
    p = m / domain_size
    trials = users if lower else accounted_trials(users - 1, p)
    return BinLaw(mean=trials * p, trials=trials)


def independent_pairs(set_size: int, domain_size: int) -> int:
    """The most items two s-sets of d items differ in: min(s, d - s).

    x' has s items, and at most d - s of them lie outside x.  In the independent
    mode each differing item is one item pair of the composition, in the upper and
    the exhibited lower bound alike.
    """
    return max(0, min(set_size, domain_size - set_size))


def certified_user_delta(level: float, lam: float, set_size: int, users: int, m: float,
                         domain_size: int, *, slots: bool, delta: float,
                         step: float = DEFAULT_STEP, enough: float = 0.0) -> float:
    """The certified upper bound on delta_user(E = ``level``) (module docstring), arguments
    already validated: ``slots`` the blanket mode, ``delta`` the target the caller compares
    against (it sets the slot bound's Poisson slack budget, POISSON_SLACK_SHARE delta),
    ``step`` the loss grid (coarser: faster and looser, still an upper bound).  ``enough``:
    a check of delta_user <= ``enough`` stops at the first slot bound that certifies it
    (:meth:`SlotAccountant.user_delta`), so a value at or below ``enough`` may be a larger
    bound than the smallest one."""
    if lam == 0.0:
        return 0.0
    if slots:
        bound = slot_bound(users, m, domain_size, set_size, POISSON_SLACK_SHARE * delta, step)
        return certified(bound.user_delta(level, lam, enough))
    pairs = independent_pairs(set_size, domain_size)
    if pairs == 0:
        return 0.0
    law = independent_law(users, m, domain_size, lower=False)
    return certified(composed_pair(law, lam, pairs, upper=True, step=step).delta(level))


def refuted_delta(level: float, lam: float, set_size: int, users: int, m: float,
                  domain_size: int, *, slots: bool, delta: float) -> float | None:
    """A certified lower bound on delta_user(E = ``level``) when it exceeds ``delta``; else
    None (arguments already validated).

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
    if not slots or lam == 0.0 or set_size > domain_size - 2:
        return None
    n_slots, r = blanket_geometry(users, m, domain_size, every_slot=True)
    if n_slots * r > ACCOUNTED_BLANKET_PER_ITEM:
        return None  # too large a blanket to sum; the upper bounds decide
    exhibited = window_delta(poisson_pair(lam, n_slots, r), level)
    certified_lower = exhibited * (1.0 - CERTIFIED_RELATIVE_MARGIN) - CERTIFIED_ABSOLUTE_MARGIN
    return certified_lower if certified_lower > delta else None


def clear_caches() -> None:
    """Forget the kept slot accountants (cold benchmarks)."""
    _slot_bounds.clear()

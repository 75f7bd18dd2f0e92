"""The revealed-send bound builds its terms only as far as it could still be the smaller.

Before, wherever the cheaper slot bounds were above its floor from tau_1 alone, the
revealed-send bound built every tau_j (a Poisson comparison and a j-fold composition each,
about 40 ms at a new m for s = 8) although the labelled groups usually stay the smaller
below lambda = 1: the sum's floor after tau_1 .. tau_i already shows it cannot win.
"""

from __future__ import annotations

import itertools

import pytest

from segshuffle.core import arrays, revealed_send, user_bound
from segshuffle.core.accounting import COARSE_STEP, POISSON_SLACK_SHARE
from segshuffle.core.privacy_loss import DEFAULT_STEP, BinLaw

DELTA = 1e-8


def _terms_built(monkeypatch) -> list[int]:
    built: list[int] = []
    compose = revealed_send.RevealedSendBound._composed_term

    def recorded(self, i: int):
        built.append(i)
        return compose(self, i)

    monkeypatch.setattr(revealed_send.RevealedSendBound, "_composed_term", recorded)
    return built


@pytest.mark.parametrize(("users", "m"), [(10_000, 1.64), (1_000, 16.4), (100, 164.3)])
def test_a_certified_evaluation_below_full_signal_builds_few_terms(users, m, monkeypatch
                                                                   ) -> None:
    user_bound.clear_caches()
    built = _terms_built(monkeypatch)
    bound = user_bound.slot_bound(users, m, 128, 8, POISSON_SLACK_SHARE * DELTA, DEFAULT_STEP)
    value = bound.user_delta(1.0, 0.5)
    assert bound.groups is not None
    assert value == pytest.approx(bound.groups.delta(1.0, 0.5), rel=0, abs=0)
    assert 1 <= len(built) <= 3  # of the seven (i = 2..8) built before


def _bound(backend: str) -> revealed_send.RevealedSendBound:
    n_slots, r = (20_000, 0.82 / 128) if backend == arrays.NUMPY else (4_000, 0.9 / 128)
    with arrays.use(backend):
        return revealed_send.RevealedSendBound(n_slots, r, 8, 128,
                                               POISSON_SLACK_SHARE * DELTA, DEFAULT_STEP)


@pytest.mark.parametrize("backend", [arrays.NUMPY, arrays.PYTHON])
def test_the_lazy_sum_is_the_full_sum_where_it_is_smaller(backend) -> None:
    full = _bound(backend)
    for eps, lam in itertools.product((0.5, 1.0, 2.0), (0.05, 0.3, 0.7, 0.99, 1.0)):
        whole = full.user_delta(eps, lam)
        for ceiling in (0.0, whole * 0.5, whole * (1 - 1e-9), whole, whole * 1.5, 1.0,
                        float("inf")):
            lazy = _bound(backend)  # nothing kept: it computes only what it needs
            assert lazy.user_delta_below(eps, lam, ceiling) == min(ceiling, whole)
            assert lazy.taus(eps) == full.taus(eps)


def test_tau_one_and_the_taus_share_their_first_term(monkeypatch) -> None:
    bound = _bound(arrays.NUMPY)
    calls: list[float] = []
    exact = revealed_send.delta_for

    def counted(pair, eps):
        calls.append(eps)
        return exact(pair, eps)

    monkeypatch.setattr(revealed_send, "delta_for", counted)
    bound.user_delta_floor(1.0, 0.5)
    bound.taus(1.0)
    assert calls == [1.0]  # before: once for the floor and again for the taus


def _steering_bound(law: object = None) -> revealed_send.RevealedSendBound:
    """A coarse-grid revealed-send bound at n = 1e4, m = 2, d = 128, s = 8 (gamma = 1: the
    labelled groups degenerate there, so the accountant has no steering estimate)."""
    n_slots, r = user_bound.blanket_geometry(10_000, 2.0, 128)
    return revealed_send.RevealedSendBound(n_slots, r, 8, 128, POISSON_SLACK_SHARE * DELTA,
                                           COARSE_STEP, steering_law=law)


def test_a_steering_bound_compares_once_and_composes_only_tau_s_at_full_signal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The full-signal searches evaluate lambda = 1 at every new m, where only tau_s has
    weight.  A coarse-grid bound computed every tau_j with its own Poisson comparison (7
    comparisons and 7 compositions at s = 8, most of a steering rate's cost); with one
    law for every number of pairs D_i <= D_s, so tau_s alone is one comparison and one
    composition."""
    compared: list[float] = []
    steering_mean = revealed_send.steering_poisson_mean

    def counted(trials: int, q: float, slack: float) -> tuple[float, float]:
        compared.append(q)
        return steering_mean(trials, q, slack)

    monkeypatch.setattr(revealed_send, "steering_poisson_mean", counted)
    built = _terms_built(monkeypatch)
    bound = _steering_bound()
    value = bound.user_delta(1.0, 1.0)
    assert built == [8] and len(compared) == 1
    # tau_s of a steering bound: D_s + eta with the law of the comparison at s pairs, and
    # no smaller than tau_1.
    composed, eta = bound._composed_term(8)
    assert value == pytest.approx(max(composed.delta(1.0) + eta, bound.tau_one(1.0)),
                                  rel=1e-12)


def test_steering_taus_track_the_running_maximum_they_replace() -> None:
    """With one law for every number of pairs the running maximum is redundant (D_i <= D_j
    for i <= j): the taus computed one by one rise with j, and the sum over j at lambda < 1
    is the one the running maximum gives, within the grid's rounding."""
    for law in (None, BinLaw(10_000 * 2 * 1.0 / 128)):
        bound = _steering_bound(law)
        for eps in (0.5, 1.0, 2.0):
            taus = bound.taus(eps)
            running = list(itertools.accumulate(taus, max))
            assert taus == pytest.approx(running, rel=1e-9, abs=1e-300)
            assert all(b >= a * (1 - 1e-9) for a, b in itertools.pairwise(taus))


def test_near_full_signal_the_groups_floor_spares_their_other_rungs(
        composed_group_sizes) -> None:
    """A root search near lambda = 1 evaluates lambda = 1 first (every tau kept), then
    rates just below, where the revealed-send bound is the smaller: the labelled groups
    composed every rung of their ladder at each of those rates (six pair compositions at
    n = 9000, m = 1.629, s = 8, about 25 ms), though their last rung alone already shows
    they cannot be the smaller.  The value is the minimum of the two bounds as before."""
    from segshuffle.core import slot_groups

    user_bound.clear_caches()
    slot_groups.clear_caches()
    bound = user_bound.slot_bound(9000, 1.629058, 128, 8, POISSON_SLACK_SHARE * DELTA)
    assert bound.groups is not None
    bound.user_delta(2.0, 1.0)
    composed = composed_group_sizes
    for lam in (0.996, 0.9855, 0.9853):
        value = bound.user_delta(2.0, lam)
        assert value == pytest.approx(min(bound.groups.delta(2.0, lam),
                                          bound.revealed.user_delta(2.0, lam)), rel=1e-12)
    composed.clear()
    for lam in (0.9961, 0.98551, 0.98531):
        bound.user_delta(2.0, lam)
    assert len(composed) == 3  # the last rung at each rate (six rungs each before)
    user_bound.clear_caches()
    slot_groups.clear_caches()

"""The joint view's stored enumeration against a direct one, view by view.

:mod:`segshuffle.core.slot_joint` keeps one graded lattice of views per number of
differing items, slices every bucket's views out of it, and stores one view per orbit of
the pairs' permutations, weighted by the orbit's size.  Here every view of every bucket
is listed with itertools and its P- and Q-masses are computed from the definition
(module docstring of slot_joint), in plain floats; the two deltas must agree, whatever
order the lattices were grown in.
"""

from __future__ import annotations

import itertools
import math

import pytest

from segshuffle.core import slot_joint, slot_joint_lattice


def _log_multinomial(counts: tuple[int, ...], slots: int, rate: float, null_rate: float
                     ) -> float | None:
    total = sum(counts)
    if min(counts) < 0 or total > slots:
        return None
    nulls = slots - total
    value = math.lgamma(slots + 1) - sum(math.lgamma(c + 1) for c in counts)
    value -= math.lgamma(nulls + 1)
    value += total * math.log(rate) if total else 0.0
    value += nulls * math.log(null_rate) if nulls else 0.0
    return value


def _direct_delta(view: slot_joint.JointView, eps: float, lam: float) -> float:
    """sum over buckets and views of max(0, P - e^E Q), each view from the definition."""
    k, d, gamma = view.pairs, view.domain_size, view.gamma
    inside = (1.0 - gamma) + 2.0 * k * gamma / d
    rate, null_rate = (gamma / d) / inside, (1.0 - gamma) / inside
    subsets = list(itertools.product((0, 1), repeat=k))
    value = 0.0
    for weight, slots, total, _ in view.plan:
        if weight <= 0.0:
            continue
        for counts in itertools.product(range(total + 1), repeat=2 * k):
            if sum(counts) > total:
                continue
            p = q = 0.0
            for subset in subsets:
                size = sum(subset)
                mix = lam ** size * (1.0 - lam) ** (k - size)
                on_x = tuple(c - b for c, b in zip(counts, subset + (0,) * k, strict=True))
                on_y = tuple(c - b for c, b in zip(counts, (0,) * k + subset, strict=True))
                log_p = _log_multinomial(on_x, slots, rate, null_rate)
                log_q = _log_multinomial(on_y, slots, rate, null_rate)
                p += 0.0 if log_p is None else mix * math.exp(log_p)
                q += 0.0 if log_q is None else mix * math.exp(log_q)
            value += weight * max(0.0, p - math.exp(eps) * q)
    return value


CASES = [  # (slots, gamma, d, k): windows narrow enough that every b is its own bucket
    (6, 0.6, 6, 2),
    (9, 0.35, 8, 2),
    (5, 0.8, 7, 3),
    (12, 0.2, 4, 1),
]


@pytest.mark.parametrize("grow", ["small first", "large first"])
@pytest.mark.slow  # 2-3 s on a 2-core machine: the fast tier stays within 3 minutes
def test_sliced_symmetric_enumeration_matches_the_definition(grow: str) -> None:
    slot_joint.clear_caches()
    cases = CASES if grow == "small first" else CASES[::-1]
    for n_slots, gamma, d, k in sorted(cases, key=lambda case: case[0],
                                       reverse=grow == "large first"):
        view = slot_joint.joint_view(n_slots, gamma, d, k)
        for eps, lam in [(0.2, 0.3), (1.0, 0.7), (2.5, 1.0)]:
            expected = _direct_delta(view, eps, lam)
            got = view.delta(eps, lam) - view.left_out
            assert got >= expected * (1 - 1e-9) - 1e-15, (n_slots, gamma, d, k, eps, lam)
            assert got <= expected * (1 + 1e-9) + 1e-15, (n_slots, gamma, d, k, eps, lam)


def test_a_bucket_of_a_grown_lattice_equals_one_of_its_own() -> None:
    """A bucket sliced from a lattice built for a larger total holds the same terms as one
    enumerated alone."""
    slot_joint.clear_caches()
    alone = slot_joint_lattice._bucket(7, 0.5, 8, 2, 5)
    slot_joint.clear_caches()
    slot_joint_lattice._lattice(2, 9)
    sliced = slot_joint_lattice._bucket(7, 0.5, 8, 2, 5)
    assert alone.p_terms.shape == sliced.p_terms.shape
    assert (alone.p_terms == sliced.p_terms).all() and (alone.q_terms == sliced.q_terms).all()

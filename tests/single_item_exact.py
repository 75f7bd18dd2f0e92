"""Exact user-level epsilon of one differing item (s = 1, slot blanket) by enumeration.

**The epsilon in closed form.**  For discrete P and Q,

    D_{e^E}(P || Q) = sum_v max(0, P(v) - e^E Q(v)) = max_S (P(S) - e^E Q(S)),

the maximum over every set S of views.  So D_{e^E}(P || Q) <= delta holds exactly
when e^E Q(S) >= P(S) - delta for every S, and the smallest such E is

    E*(P || Q) = max(0, max_S log((P(S) - delta) / Q(S))),

infinite when some S with Q(S) = 0 has P(S) > delta.  For a fixed Q(S) the largest
P(S) is a prefix of the views sorted by decreasing P/Q, so the maximum runs over
prefixes only.  The user-level epsilon is the larger of the two directions: no
bisection, and nothing left to a search tolerance.

**The views** come from :func:`tests.full_view.slot_views`, the brute-force
distribution of the whole histogram (victim's own slots included) for x = {0},
x' = {1}.  Sets of one item that differ are all of this form, and sets of s >= 2
items with d = 2 or 3 differ in at most one item, with their common items a
post-processing (the accountant treats both the same way).

Run as ``python -m tests.single_item_exact`` to sweep :data:`SWEEP` and print, per
case, the exact epsilon and the accountant's upper bound: the cases with no bound
where the exact epsilon is finite (and below the accountant's cap), and the largest
ratio of the bound to the exact value.  It then sweeps :data:`LARGE_SWEEP`, too large
to enumerate, at integer m, where the exhibited lower bound of
:func:`segshuffle.core.accounting.audit` is the exact epsilon (every slot sends, so the
non-null total reveals whether the victim sent: docs/protocol.md, "Lower bounds").
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from segshuffle.core.hockey_stick import EPSILON_CAP

from .full_view import View, slot_views


def _direction_epsilon(p: np.ndarray, q: np.ndarray, delta: float) -> float:
    """E*(P || Q) of the module docstring over aligned probability arrays."""
    keep = p > 0.0
    p, q = p[keep], q[keep]
    certain = q == 0.0  # views only P produces: in every maximising set
    base = float(np.sum(p[certain]))
    if base > delta:
        return math.inf
    p, q = p[~certain], q[~certain]
    order = np.argsort(-np.log(p) + np.log(q), kind="stable")
    prefix_p = base + np.cumsum(p[order])
    prefix_q = np.cumsum(q[order])
    above = prefix_p > delta
    if not above.any():
        return 0.0
    return max(0.0, float(np.max(np.log((prefix_p[above] - delta) / prefix_q[above]))))


def _aligned(p: Mapping[View, float], q: Mapping[View, float]) -> tuple[np.ndarray, np.ndarray]:
    """P and Q as arrays over the union of their views."""
    keys = sorted(set(p) | set(q))
    return (np.array([p.get(key, 0.0) for key in keys]),
            np.array([q.get(key, 0.0) for key in keys]))


def exact_epsilon(lam: float, users: int, m: float, d: int, delta: float) -> float:
    """The exact user-level epsilon of one differing item at rate ``lam`` (math.inf: none)."""
    p, q = _aligned(*slot_views(lam, users, m, d, (0,), (1,)))
    return max(_direction_epsilon(p, q, delta), _direction_epsilon(q, p, delta))


@dataclass(frozen=True)
class Case:
    """One point of a sweep: h users, domain d, blanket rate m, rate lambda, target delta."""

    users: int
    d: int
    m: float
    lam: float
    delta: float

    def __str__(self) -> str:
        return (f"h={self.users} d={self.d} m={self.m:g} lambda={self.lam:g} "
                f"delta={self.delta:g}")


@dataclass(frozen=True)
class Grid:
    """The product of the values swept on each axis, skipping views too large to enumerate."""

    users: tuple[int, ...]
    domains: tuple[int, ...]
    rates: tuple[float, ...]
    lambdas: tuple[float, ...]
    deltas: tuple[float, ...]
    max_slots: int = 40  # the enumeration has about (h ceil(m))^3 / 6 views

    def cases(self) -> Iterator[Case]:
        for users, d, m, lam, delta in itertools.product(self.users, self.domains, self.rates,
                                                         self.lambdas, self.deltas):
            if users * math.ceil(m) <= self.max_slots:
                yield Case(users, d, m, lam, delta)


#: The sweep of the command line: 2,400 cases, integer and fractional m, d from 2.
SWEEP = Grid(users=(2, 3, 4, 5, 6, 8, 10, 12), domains=(2, 3, 4, 6, 8),
             rates=(0.5, 1.0, 1.5, 2.0, 3.0), lambdas=(0.1, 0.3, 0.6, 1.0),
             deltas=(0.1, 1e-2, 1e-3))


#: Populations beyond enumeration, integer m only (the lower bound is exact there).
LARGE_SWEEP = Grid(users=(8, 30, 100, 1000, 10_000), domains=(4, 16, 64),
                   rates=(1.0, 2.0, 3.0), lambdas=(0.1, 0.5, 1.0), deltas=(1e-3, 1e-6),
                   max_slots=10**6)


@dataclass(frozen=True)
class Comparison:
    """The exact epsilon of a case and the accountant's upper bound (None: no bound)."""

    case: Case
    exact: float
    upper: float | None

    @property
    def missing(self) -> bool:
        """No bound although the exact epsilon is finite and within the accountant's cap."""
        return self.upper is None and self.exact <= EPSILON_CAP

    @property
    def below(self) -> bool:
        """A bound below the exact epsilon (beyond the searches' relative 1e-8)."""
        return self.upper is not None and self.upper < self.exact * (1.0 - 1e-8)

    @property
    def ratio(self) -> float | None:
        """upper / exact where both are finite and positive."""
        if self.upper is None or not 0.0 < self.exact < math.inf:
            return None
        return self.upper / self.exact


def compare(case: Case) -> Comparison:
    """The case's exact epsilon against :func:`segshuffle.core.accounting.user_epsilon`."""
    from segshuffle.core.accounting import user_epsilon

    exact = exact_epsilon(case.lam, case.users, case.m, case.d, case.delta)
    upper = user_epsilon(case.lam, 1, case.delta, case.users, case.m, case.d)
    return Comparison(case, exact, upper)


def compare_with_audit(case: Case) -> Comparison:
    """The case's upper bound against audit's lower bound, the exact epsilon at integer m."""
    from segshuffle.core.accounting import audit

    if case.m != math.ceil(case.m):
        raise ValueError(f"the lower bound is exact at integer m only, got m = {case.m}")
    result = audit(case.users, case.d, 1, case.m, case.lam, case.delta)
    exact = math.inf if result.epsilon_lower is None else result.epsilon_lower
    return Comparison(case, exact, result.epsilon_upper)


def main() -> int:
    below = _report("enumerated", [compare(case) for case in SWEEP.cases()])
    below += _report("integer m, beyond enumeration",
                     [compare_with_audit(case) for case in LARGE_SWEEP.cases()])
    return 1 if below else 0


def _report(title: str, comparisons: list[Comparison]) -> int:
    """Print a sweep's missing and below-exact cases and its ratios; the count below."""
    print(f"--- {title}")
    missing = [c for c in comparisons if c.missing]
    below = [c for c in comparisons if c.below]
    for c in missing:
        print(f"no bound: {c.case} exact={c.exact:.4f}")
    for c in below:
        print(f"BELOW EXACT: {c.case} exact={c.exact!r} upper={c.upper!r}")
    ratios = [(c.ratio, c) for c in comparisons if c.ratio is not None]
    worst_ratio, worst = max(ratios, key=lambda item: item[0])
    integer = [(r, c) for r, c in ratios if c.case.m == math.ceil(c.case.m)]
    worst_integer, worst_integer_case = max(integer, key=lambda item: item[0])
    print(f"cases: {len(comparisons)}; finite exact: "
          f"{sum(c.exact <= EPSILON_CAP for c in comparisons)}; no bound where exact is "
          f"finite: {len(missing)}; below exact: {len(below)}")
    closest_ratio, closest = min(ratios, key=lambda item: item[0])
    print(f"largest upper / exact: {worst_ratio:.9f} at {worst.case} (exact "
          f"{worst.exact:.4f}); at integer m: {worst_integer:.9f} at {worst_integer_case.case}")
    print(f"smallest upper / exact: {closest_ratio:.12f} at {closest.case}")
    return len(below)


if __name__ == "__main__":
    sys.exit(main())

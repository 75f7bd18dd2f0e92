"""Exact brute-force enumeration of the server's full view, for tests only (small n).

**The view.**  n honest users (the victim among them) send blanket messages over a
domain of d items; the victim, holding a set x of s distinct items, sends each of
them independently with probability lambda (otherwise a null).  The neighbouring
victim holds x'.  Other users' data messages are known to the adversary and are
left out.  The server sees the histogram of the non-null messages and the number
of nulls; as every user sends a fixed number of ciphertexts, the null count is a
function of the non-null total.  With the *active* items A = x union x' (|A| = a),
a sufficient statistic of the view is

    v = (counts on the active items, R),   R = non-null messages on all other items,

since, given R, the way R splits over the d - a other items is uniform and the same
under both hypotheses (so it cancels from every likelihood ratio).

**Slots blanket** (rate m > 0): every user fills c = ceil(m) slots, and each slot
independently carries, with probability gamma = m / c, an item drawn uniformly from
the d items, otherwise a null.  Over all N = n c slots (the victim's own included)
the category counts are

    (B_1, ..., B_a, R, Z) ~ Multinomial(N; r, ..., r, gamma (d - a) / d, 1 - gamma),
    r = gamma / d,

with Z the blanket nulls.  m = 0 means no blanket (c = 0).

**Independent blanket** (rate 0 < m <= d): every user sends a blanket message for
each item independently with probability m / d, so the active counts are independent
Binomial(n, m / d).  R is then independent of the victim and is left out.

**The victim.**  With S the (random) subset of x that is sent, each S having
probability lambda^|S| (1 - lambda)^(s - |S|),

    P(v) = sum_S lambda^|S| (1 - lambda)^(s - |S|) Pr[blanket view = v - 1_S],

and Q the same with x'.  The user-level guarantee at level E is

    delta(E) = max(D_{e^E}(P || Q), D_{e^E}(Q || P)),
    D_{e^E}(P || Q) = sum_v max(0, P(v) - e^E Q(v)).

Everything is a plain float64 sum over every outcome; the number of outcomes grows
like (n c)^(a + 1), so keep n c small.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache

from segshuffle.core.hockey_stick import delta_for, poisson_pair

#: A view: counts on the active items (sorted by item id), then R in slots mode.
View = tuple[int, ...]

#: A probability distribution over views.
Distribution = dict[View, float]


def compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every tuple of ``parts`` non-negative integers summing to ``total``."""
    if parts == 1:
        yield (total,)
        return
    for first in range(total + 1):
        for rest in compositions(total - first, parts - 1):
            yield (first, *rest)


def multinomial_pmf(counts: Sequence[int], probs: Sequence[float]) -> float:
    """Pr[Multinomial(sum(counts); probs) = counts] = (N! / prod k_i!) prod p_i^k_i.

    The coefficient is an exact integer; 0.0 ** 0 = 1 handles empty categories.
    """
    coefficient = math.factorial(sum(counts))
    for k in counts:
        coefficient //= math.factorial(k)
    probability = float(coefficient)
    for k, p in zip(counts, probs, strict=True):
        probability *= p**k
    return probability


def binomial_pmf(trials: int, p: float, k: int) -> float:
    """Pr[Binomial(trials, p) = k] = C(trials, k) p^k (1 - p)^(trials - k)."""
    return math.comb(trials, k) * p**k * (1.0 - p) ** (trials - k)


@lru_cache(maxsize=64)
def slot_blanket(users: int, m: float, d: int, active: int) -> Mapping[View, float]:
    """Distribution of the blanket's (B_1, ..., B_a, R) in slots mode (module docstring).

    Enumerates every (B_1, ..., B_a, R, Z) with sum N = users ceil(m); Z is dropped
    from the key, which loses nothing as Z = N - sum(B) - R.  Cached: do not mutate.
    """
    slots = math.ceil(m)
    gamma = m / slots if slots else 0.0
    r = gamma / d
    probs = (r,) * active + (gamma * (d - active) / d, 1.0 - gamma)
    return {counts[:-1]: multinomial_pmf(counts, probs)
            for counts in compositions(users * slots, active + 2)}


@lru_cache(maxsize=64)
def independent_blanket(users: int, m: float, d: int, active: int) -> Mapping[View, float]:
    """Distribution of the active counts in independent mode: a i.i.d. Binomial(users, m / d).

    Cached: do not mutate.
    """
    q = m / d
    pmf = [binomial_pmf(users, q, k) for k in range(users + 1)]
    return {counts: math.prod(pmf[k] for k in counts)
            for counts in itertools.product(range(users + 1), repeat=active)}


def add_victim(blanket: Mapping[View, float], active: Sequence[int], items: Sequence[int],
               lam: float) -> Distribution:
    """P(v) = sum_S lam^|S| (1 - lam)^(s - |S|) blanket(v - 1_S) over the subsets S of ``items``.

    ``active`` lists the item ids of the first len(active) view coordinates; any
    further coordinate (R) is not touched by the victim.
    """
    positions = [active.index(item) for item in items]
    view = {}
    for sent in itertools.product((0, 1), repeat=len(items)):
        weight = math.prod(lam if bit else 1.0 - lam for bit in sent)
        if weight == 0.0:
            continue
        shift = [0] * len(next(iter(blanket)))
        for position, bit in zip(positions, sent, strict=True):
            shift[position] += bit
        for counts, probability in blanket.items():
            key = tuple(map(operator.add, counts, shift))
            view[key] = view.get(key, 0.0) + weight * probability
    return view


def hockey_stick(p: Mapping[View, float], q: Mapping[View, float], level: float) -> float:
    """D_{e^E}(P || Q) = sum_v max(0, P(v) - e^E Q(v)); views outside supp P contribute 0."""
    e = math.exp(level)
    return math.fsum(max(0.0, prob - e * q.get(v, 0.0)) for v, prob in p.items())


def _check_sets(d: int, x: Sequence[int], x_prime: Sequence[int]) -> list[int]:
    """Validate the two item sets and return the sorted active items x union x'."""
    if not (len(x) == len(x_prime) >= 1):
        raise ValueError(f"x and x' must have the same size >= 1, got {x}, {x_prime}")
    for items in (x, x_prime):
        if len(set(items)) != len(items) or not all(0 <= i < d for i in items):
            raise ValueError(f"need distinct items in 0..{d - 1}, got {items}")
    return sorted(set(x) | set(x_prime))


def slot_views(lam: float, users: int, m: float, d: int, x: Sequence[int],
               x_prime: Sequence[int]) -> tuple[Distribution, Distribution]:
    """(P, Q): the full-view distributions in slots mode for the victim sets x and x'."""
    active = _check_sets(d, x, x_prime)
    blanket = slot_blanket(users, float(m), d, len(active))
    return add_victim(blanket, active, x, lam), add_victim(blanket, active, x_prime, lam)


def independent_views(lam: float, users: int, m: float, d: int, x: Sequence[int],
                      x_prime: Sequence[int]) -> tuple[Distribution, Distribution]:
    """(P, Q): the distributions of the active counts in independent mode."""
    if not 0.0 < m <= d:
        raise ValueError(f"independent mode needs 0 < m <= d, got m={m}, d={d}")
    active = _check_sets(d, x, x_prime)
    blanket = independent_blanket(users, float(m), d, len(active))
    return add_victim(blanket, active, x, lam), add_victim(blanket, active, x_prime, lam)


def symmetric_delta(p: Mapping[View, float], q: Mapping[View, float], level: float) -> float:
    """max(D_{e^E}(P || Q), D_{e^E}(Q || P))."""
    return max(hockey_stick(p, q, level), hockey_stick(q, p, level))


def slot_full_view_delta(level: float, lam: float, users: int, m: float, d: int,
                         x: Sequence[int], x_prime: Sequence[int]) -> float:
    """Exact user-level delta(E) of the full view in slots mode (module docstring)."""
    return symmetric_delta(*slot_views(lam, users, m, d, x, x_prime), level)


def independent_full_view_delta(level: float, lam: float, users: int, m: float, d: int,
                                x: Sequence[int], x_prime: Sequence[int]) -> float:
    """Exact user-level delta(E) of the full view in independent mode (module docstring)."""
    return symmetric_delta(*independent_views(lam, users, m, d, x, x_prime), level)


def old_pair_item_delta(level: float, lam: float, s: int, users: int, m: float, d: int) -> float:
    """The old item-level delta'(E / s) of the Poisson pair with N = users ceil(m) - 1, r = gamma/d.

    That pair sees only the counts on the two candidate items, with N blanket slots
    that exclude the victim's own; m = 0 gives N = 0, r = 0.
    """
    slots = math.ceil(m)
    if slots == 0:
        n_slots, r = 0, 0.0
    else:
        n_slots, r = users * slots - 1, (m / slots) / d
    return delta_for(poisson_pair(lam, n_slots, r), level / s)


def old_pair_group_privacy_holds(level: float, lam: float, s: int, delta: float, users: int,
                                 m: float, d: int) -> bool:
    """The old (unsound) rule: (E, delta) holds when delta'(E / s) <= delta / (s e^{(s-1) E / s}).

    Item-level delta' is :func:`old_pair_item_delta`; group privacy over s items
    turns it into user level.  It is unsound because the pair ignores what the
    full view adds: the non-null total (which reveals whether the victim sent)
    and the victim's own blanket slots.
    """
    target = delta / (s * math.exp((s - 1) * level / s))
    return old_pair_item_delta(level, lam, s, users, m, d) <= target

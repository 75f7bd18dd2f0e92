"""What a random fill would buy: unsent item slots carrying a uniform item instead of a null.

The fill makes every user's non-null count s + its blanket, whatever its level, so the
null count no longer tells the levels apart.  This measures, on three of the paper's
panels at their m* and lambdas (docs/results.md):

- the estimator's variance summed over the items (docs/protocol.md section 5) today and
  with the fill at the same m and lambdas: each unsent slot is one more uniform message,
  so with U ~ sum_k Binomial(s n_k, 1 - lambda_k) unsent slots an item's count gains
  variance E[U] (1/D)(1 - 1/D) + Var[U] / D^2;
- round 2's level guarantee today (the certified epsilon of core.level_privacy, full
  view) and the exhibited lower bound from the victim's messages on its own items alone
  (U_x = Binomial(N, s gamma / D) + Binomial(s, rho)), with rho = lambda today and
  rho = lambda + (1 - lambda) s / D with the fill: a view the fill does not hide.

    .venv/bin/python benchmarks/level_random_fill.py
"""

from __future__ import annotations

import math
import time

import numpy as np

from segshuffle.core.level_privacy import LevelSetting, level_epsilon
from segshuffle.core.privacy_loss import BinLaw
from segshuffle.core.randomizers import blanket_probability, blanket_slots
from segshuffle.core.scalar_search import bracketed_root

#: (panel, n, s, D, m*, shares, lambdas) of docs/results.md's slot blanket at m*.
PANELS = [
    ("msnbc-s1", 5000, 4, 21, 0.580792, (0.25, 0.5, 0.25), (0.5207, 1.0, 1.0)),
    ("synthetic-s2", 5000, 4, 128, 1.02, (0.5, 0.25, 0.25), (0.282, 0.5348, 1.0)),
    ("synthetic-s1", 5000, 8, 128, 6.93, (0.25, 0.5, 0.25), (0.5028, 1.0, 1.0)),
]


def variance(n: int, shares, lambdas, s: int, d: int, m: float, fill: bool) -> float:
    counts = [n * share for share in shares]
    weight = sum(c * lam for c, lam in zip(counts, lambdas, strict=True))
    data = s * sum(c * lam * (1.0 - lam) for c, lam in zip(counts, lambdas, strict=True))
    value = n * m * (1.0 - blanket_probability(m) / d) + data
    if fill:
        unsent = s * sum(c * (1.0 - lam) for c, lam in zip(counts, lambdas, strict=True))
        value += unsent * (1.0 - 1.0 / d) + data / d
    return value / weight**2


def own_items_epsilon(n: int, s: int, d: int, m: float, rho: float, other: float,
                      delta: float) -> float | None:
    """The smallest E at which U_x tells rho from rho' apart by at most delta (a lower
    bound on the full view's epsilon)."""
    slots = n * blanket_slots(m)
    law = BinLaw(mean=slots * s * blanket_probability(m) / d, trials=slots)
    lo, hi = law.window()
    f = law.pmf(np.arange(lo, hi + 1))
    weights = [np.array([math.comb(s, j) * r**j * (1.0 - r) ** (s - j) for j in range(s + 1)])
               for r in (rho, other)]
    p, q = (np.convolve(f, w) for w in weights)

    def excess(level: float) -> float:
        e = math.exp(level)
        return max(float(np.sum(np.maximum(p - e * q, 0.0))),
                   float(np.sum(np.maximum(q - e * p, 0.0)))) - delta

    if excess(0.0) <= 0.0:
        return 0.0
    if excess(30.0) > 0.0:
        return None
    return bracketed_root(excess, 0.0, 30.0, xtol=1e-9, rtol=1e-6)


def main() -> int:
    for name, n, s, d, m, shares, lambdas in PANELS:
        started = time.process_time()
        delta = 0.01 / n
        today, filled = (variance(n, shares, lambdas, s, d, m, fill) for fill in (False, True))
        print(f"{name} (n = {n}, s = {s}, D = {d}, m = {m:g}): variance {today:.4g}, with "
              f"the fill {filled:.4g} ({100.0 * (filled / today - 1.0):+.0f}%)")
        low = lambdas[0]
        for high in sorted(set(lambdas[1:])):
            full = level_epsilon(low, high, LevelSetting(n, s, d, m), delta)
            now = own_items_epsilon(n, s, d, m, low, high, delta)
            spread = s / d
            with_fill = own_items_epsilon(n, s, d, m, low + (1 - low) * spread,
                                          high + (1 - high) * spread, delta)
            print(f"  lambdas {low:g} / {high:g}: round 2 eps <= {full:.3g} today; own "
                  f"items alone >= {now:.3g} today, >= {with_fill:.3g} with the fill")
        print(f"  ({time.process_time() - started:.2f} CPU s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

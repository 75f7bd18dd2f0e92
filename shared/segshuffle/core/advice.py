"""Plain-language notes on a parameter set, for people reading a command's output.

The optimizer always returns *some* parameters; whether they are useful is another
matter.  :func:`parameter_notes` says so when they are not, in words a first-time user
understands: estimates that will be mostly noise, looser levels that cannot get more
signal than stricter ones, a level whose rate is so small its users are barely seen, a
blanket rate at its cap.  Pure: the notes are computed from the published numbers only.
"""

from __future__ import annotations

from collections.abc import Sequence

from .rules import MAX_BLANKET_RATE

TINY_RATE = 0.01
"""A level sending each item with a smaller probability is said to be barely seen."""


def _levels(values: Sequence[float]) -> str:
    names = [f"{v:g}" for v in values]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def parameter_notes(levels: Sequence[float], lambdas: Sequence[float],
                    epsilons: Sequence[float | None], m: float, mse_bound: float | None,
                    set_size: int, users: float) -> list[str]:
    """Notes on published parameters (empty when there is nothing to say)."""
    notes = []
    if mse_bound is not None and mse_bound > set_size:
        notes.append(f"with {users:g} users the estimates are mostly noise: the MSE bound "
                     f"{mse_bound:.3g} exceeds s = {set_size}, the sum of all true shares "
                     "(more users, fewer or looser levels help)")
    if m >= 0.999 * MAX_BLANKET_RATE:
        notes.append(f"the blanket rate is at its cap (m = {m:g}): the strictest level "
                     "needs more users to be protected at a useful rate")
    full = [(level, eps) for level, lam, eps in zip(levels, lambdas, epsilons, strict=True)
            if lam >= 1.0]
    if len(full) >= 2:
        shared = full[0][1]
        said = "" if shared is None else f" (eps {shared:.4g})"
        notes.append(f"levels {_levels([level for level, _ in full])} all send every item "
                     f"(lambda = 1) and get the same guarantee{said}: the blanket that "
                     "protects the stricter levels already covers them, so a looser level "
                     "cannot send more")
    for level, lam in zip(levels, lambdas, strict=True):
        if 0.0 < lam < TINY_RATE:
            notes.append(f"level {level:g} sends each item with probability {lam:.2g} only: "
                         "its users' items are barely seen (optimize --min-lambda keeps a "
                         "floor)")
    return notes

"""One-dimensional searches: a bracketed root and a bounded minimum (Brent's methods).

The accountant's searches (the smallest epsilon meeting a delta, the largest lambda
meeting a level) and the optimizer's refinement of m need only these two, so they are
written here rather than imported from ``scipy.optimize`` (about 0.2 s of CPU to import,
a tenth of a command-line ``optimize``).

Both are R. P. Brent's algorithms ("Algorithms for Minimization without Derivatives",
1973, chapters 4 and 5):

- :func:`bracketed_root` keeps a bracket [b, c] with f(b) and f(c) of opposite signs
  and |f(b)| <= |f(c)|, and steps from b by inverse quadratic interpolation, the
  secant, or bisection, taking the interpolated step only when it lands well inside
  the bracket and shrinks it fast enough; so it needs no more than about
  (log2(width / tol))^2 evaluations, and far fewer on smooth functions.  It returns
  b once the bracket is at most 2 tol wide, tol = 2 eps |b| + (xtol + rtol |b|) / 2,
  so the crossing lies within xtol + rtol |b| (plus rounding) of the answer.  Callers
  that need a feasible point nudge it themselves (the function may be discontinuous:
  then the answer is within the tolerance of a jump).
- :func:`bounded_minimum` combines golden-section steps with parabolic interpolation
  through the three best points, and stops when the interval around the best point is
  within ``xatol`` (or after ``maxiter`` evaluations).  Infinite values (a constraint
  that fails) are handled by golden-section steps only.
- :func:`refined_minimum` starts from a point already known to be good (a grid's best,
  with its neighbours' values) and stops as soon as the parabola through the best point
  and its nearest neighbours predicts less than a relative ``ftol`` to gain.

Every loop is bounded by its ``maxiter``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

_EPS = sys.float_info.epsilon
_SQRT_EPS = math.sqrt(_EPS)
_GOLDEN = 0.5 * (3.0 - math.sqrt(5.0))


def remembered(function: Callable[[float], float]) -> Callable[[float], float]:
    """``function`` with its values kept for the length of one search.

    A search over a costly function (a certified bound) verifies its bracket, hands the
    ends to :func:`bracketed_root`, which evaluates them again, and verifies its answer,
    which the root search evaluated last: kept, each value is computed once.  One
    search asks for a few dozen points at most, so the memory is bounded by its length.
    """
    values: dict[float, float] = {}

    def value_at(x: float) -> float:
        value = values.get(x)
        if value is None:
            value = values[x] = function(x)
        return value

    return value_at


class NoConvergenceError(RuntimeError):
    """A root search used up its evaluations (never seen on the accountant's functions)."""


def bracketed_root(f: Callable[[float], float], a: float, b: float, *, xtol: float,
                   rtol: float, maxiter: int = 200,
                   accept: Callable[[float], bool] | None = None) -> float:
    """A crossing of ``f`` in [a, b], where f(a) and f(b) have opposite signs (or one is 0).

    The answer is within xtol + rtol |x| of a point where f changes sign; or, with
    ``accept``, the first point evaluated whose value it accepts (the ends first).
    """
    fa = f(a)
    if fa == 0.0 or (accept is not None and accept(fa)):
        return a
    fb = f(b)
    if fb == 0.0 or (accept is not None and accept(fb)):
        return b
    if (fa > 0.0) == (fb > 0.0):
        raise ValueError(f"f({a!r}) and f({b!r}) have the same sign")
    c, fc = a, fa
    d = e = b - a
    for _ in range(maxiter):
        if (fb > 0.0) == (fc > 0.0):  # keep the crossing between b and c
            c, fc = a, fa
            d = e = b - a
        if abs(fc) < abs(fb):  # b is the best point so far
            a, b, c = b, c, b
            fa, fb, fc = fb, fc, fb
        tol = 2.0 * _EPS * abs(b) + 0.5 * (xtol + rtol * abs(b))
        half = 0.5 * (c - b)
        if abs(half) <= tol or fb == 0.0:
            return b
        if abs(e) < tol or abs(fa) <= abs(fb):
            d = e = half  # bisection
        else:
            s = fb / fa
            if a == c:  # secant
                p, q = 2.0 * half * s, 1.0 - s
            else:  # inverse quadratic interpolation through a, b, c
                q, r = fa / fc, fb / fc
                p = s * (2.0 * half * q * (q - r) - (b - a) * (r - 1.0))
                q = (q - 1.0) * (r - 1.0) * (s - 1.0)
            if p > 0.0:
                q = -q
            else:
                p = -p
            if 2.0 * p < min(3.0 * half * q - abs(tol * q), abs(e * q)):
                e, d = d, p / q  # the interpolated step is accepted
            else:
                d = e = half
        a, fa = b, fb
        b += d if abs(d) > tol else math.copysign(tol, half)
        fb = f(b)
        if accept is not None and accept(fb):
            return b
    raise NoConvergenceError(f"no crossing found to tolerance in {maxiter} evaluations")


def bounded_minimum(f: Callable[[float], float], a: float, b: float, *, xatol: float,
                    maxiter: int) -> tuple[float, float]:
    """(x, f(x)): a local minimum of ``f`` on [a, b] to about ``xatol``, at most
    ``maxiter`` evaluations."""
    x = w = v = a + _GOLDEN * (b - a)
    fx = fw = fv = f(x)
    d = e = 0.0
    for _ in range(maxiter - 1):
        middle = 0.5 * (a + b)
        tol1 = _SQRT_EPS * abs(x) + xatol / 3.0
        tol2 = 2.0 * tol1
        if abs(x - middle) <= tol2 - 0.5 * (b - a):
            break
        golden = True
        if abs(e) > tol1 and math.isfinite(fx) and math.isfinite(fw) and math.isfinite(fv):
            r = (x - w) * (fx - fv)
            q = (x - v) * (fx - fw)
            p = (x - v) * q - (x - w) * r
            q = 2.0 * (q - r)
            if q > 0.0:
                p = -p
            q = abs(q)
            previous, e = e, d
            if abs(p) < abs(0.5 * q * previous) and q * (a - x) < p < q * (b - x):
                d = p / q  # parabolic step
                u = x + d
                if u - a < tol2 or b - u < tol2:
                    d = tol1 if x < middle else -tol1
                golden = False
        if golden:
            e = (b - x) if x < middle else (a - x)
            d = _GOLDEN * e
        u = x + (d if abs(d) >= tol1 else math.copysign(tol1, d))
        fu = f(u)
        if fu <= fx:
            if u < x:
                b = x
            else:
                a = x
            v, fv, w, fw, x, fx = w, fw, x, fx, u, fu
        else:
            if u < x:
                a = u
            else:
                b = u
            if fu <= fw or w == x:
                v, fv, w, fw = w, fw, u, fu
            elif fu <= fv or v in (x, w):
                v, fv = u, fu
    return x, fx


def _parabola_vertex(a: float, fa: float, b: float, fb: float, c: float, fc: float
                     ) -> tuple[float, float] | None:
    """(v, p(v)): the vertex of the parabola through three points with a < b < c, when it
    opens upwards (a minimum); None otherwise."""
    ab, cb = b - a, b - c
    fab, fcb = fb - fa, fb - fc
    denominator = ab * fcb - cb * fab
    if not denominator < 0.0:  # p'' = 2 (ab fcb - cb fab) / (ab cb (a - c)), and ab cb < 0
        return None
    vertex = b - 0.5 * (ab * ab * fcb - cb * cb * fab) / denominator
    # The parabola's value at its vertex, by Lagrange's form.
    value = (fa * (vertex - b) * (vertex - c) / ((a - b) * (a - c))
             + fb * (vertex - a) * (vertex - c) / ((b - a) * (b - c))
             + fc * (vertex - a) * (vertex - b) / ((c - a) * (c - b)))
    return vertex, value


def refined_minimum(f: Callable[[float], float], a: float, b: float, x: float, *,
                    known: dict[float, float], xatol: float, ftol: float,
                    maxiter: int) -> tuple[float, float]:
    """(x, f(x)): the best point found by refining a good point ``x`` of [a, b].

    ``known`` holds values of f already evaluated (x's among them; points outside [a, b]
    are ignored).  Each step interpolates a parabola through the best point and its
    nearest evaluated neighbours on either side: its vertex is evaluated when it lies
    between them, unless the parabola predicts it to be lower than the best value by at
    most ``ftol`` times that value's magnitude (then the best point is returned: on a
    smooth function nothing worth an evaluation is left), or it lies within ``xatol``
    of an evaluated point.  Without two such neighbours, or where the parabola opens
    downwards or a value is infinite, a golden-section step into the wider side is
    taken instead.  At most ``maxiter`` evaluations.
    """
    values = {point: value for point, value in known.items() if a <= point <= b}
    if x not in values:
        values[x] = f(x)
    best = min(values, key=lambda point: (values[point], point))
    for _ in range(maxiter):
        below = [point for point in values if point < best]
        above = [point for point in values if point > best]
        candidate = None
        if below and above:
            left, right = max(below), min(above)
            fitted = (_parabola_vertex(left, values[left], best, values[best], right,
                                       values[right])
                      if math.isfinite(values[left] + values[right] + values[best]) else None)
            if fitted is not None and left < fitted[0] < right:
                if values[best] - fitted[1] <= ftol * abs(values[best]):
                    break
                candidate = fitted[0]
        if candidate is None:
            left = max(below, default=a)
            right = min(above, default=b)
            wider_right = right - best >= best - left
            candidate = (best + _GOLDEN * (right - best) if wider_right
                         else best - _GOLDEN * (best - left))
        if min(abs(candidate - point) for point in values) <= xatol:
            break
        values[candidate] = f(candidate)
        if values[candidate] < values[best]:
            best = candidate
    return best, values[best]

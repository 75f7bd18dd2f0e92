"""Real-input discrete Fourier transforms for convolving probability vectors, without numpy.

The transforms of the standard-library array backend (:mod:`.python_backend`), which light
client installs verify parameters with; the port of the JavaScript accountant's
``clients/web/src/accountant/fft.js``.  ``tests/test_portable_accountant*.py`` and
``tests/test_portable_distributions.py`` keep it equal to the JavaScript and numpy
accountants.

A transform of real length n (a power of two) is taken as one complex transform of
length n / 2 on z[k] = x[2k] + i x[2k + 1], then split into the spectra of the even
and odd samples.  The complex transform is iterative, decimation in time after a
bit-reversal permutation: one radix-2 pass when log2(n / 2) is odd, then radix-4 passes.
Its twiddle factors are computed directly by cos and sin for each index (the angle
2 pi j / n formed as a double plus its exact error, reduced to the first octant by
symmetry), so they are correctly rounded to within an ulp and the error grows only like
log2(n) ulp of the vector's norm.  Linear convolution of two vectors of lengths a and b
needs any length n >= a + b - 1: padding to the next power of two instead of another
fast length changes the result only by rounding.

The arithmetic is the JavaScript module's, operation for operation: the data are held
as Python ``complex`` numbers, whose product (a.real b.real - a.imag b.imag,
a.real b.imag + a.imag b.real) and sums round exactly as the JavaScript's separate real
and imaginary parts do, and each radix-4 pass runs as whole-list operations over the
butterflies that share a twiddle factor (or over the blocks that share a list of them),
which is what makes it fast in CPython.  Spectra are :class:`Spectrum` pairs of float
lists, as the JavaScript's ``{re, im}`` pairs of arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from operator import add, mul, sub
from typing import NamedTuple

from ..bounded_cache import BoundedCache

__all__ = [
    "Spectrum",
    "irfft",
    "multiply_spectra",
    "next_power_of_two",
    "power_spectrum",
    "rfft",
]


class Spectrum(NamedTuple):
    """A spectrum X[0..n/2] of a real vector: real and imaginary parts."""

    re: list[float]
    im: list[float]


def next_power_of_two(size: int) -> int:
    """The smallest power of two >= ``size`` (at least 2)."""
    n = 2
    while n < size:
        n *= 2
    return n


#: 2 pi split into a 26-bit head (whose products with integers below 2^27 are exact)
#: and the rest in two parts, for twiddle angles accurate to far below an ulp.
TWO_PI_HEAD = 6.2831852436065674  # 2 pi to 26 bits
TWO_PI_MID = 2 * math.pi - TWO_PI_HEAD
TWO_PI_LOW = 2.4492935982947064e-16  # 2 pi - 2 * math.pi


def _first_octant(n: int) -> tuple[list[float], list[float]]:
    """cos and sin of 2 pi j / n for 0 <= j <= n / 8 (n a power of two, at least 8).

    The angle is formed as a double plus its exact error, and the error is applied to
    first order, so both are within about half an ulp of the exact values.
    """
    cos = math.cos
    sin = math.sin
    cosines = []
    sines = []
    for j in range(n // 8 + 1):
        head = TWO_PI_HEAD * j  # exact
        rest = TWO_PI_MID * j + TWO_PI_LOW * j
        total = head + rest
        error = (rest - (total - head)) / n
        angle = total / n  # n a power of two: exact scaling
        c = cos(angle)
        s = sin(angle)
        cosines.append(c - error * s)
        sines.append(s + error * c)
    return cosines, sines


def _unit_roots(n: int) -> tuple[list[float], list[float]]:
    """cos and -sin of 2 pi j / n for 0 <= j < n.

    Each angle is reduced to the first octant by symmetry, the second half by exact
    negation.
    """
    if n < 8:
        cos = []
        sin = []
        for j in range(n):
            angle = (2 * math.pi * j) / n
            cos.append(math.cos(angle))
            sin.append(-math.sin(angle))
        return cos, sin
    eighth = n // 8
    oc, os_ = _first_octant(n)
    neg_oc = [-x for x in oc]
    neg_os = [-x for x in os_]
    # j in 0..e: the octant itself; e < j <= 2e: its mirror (2e - j);
    # 2e < j <= 3e: j - 2e; 3e < j < 4e: 4e - j.
    cos = (oc
           + os_[eighth - 1::-1]
           + neg_os[1:eighth + 1]
           + neg_oc[eighth - 1:0:-1])
    sin = (neg_os
           + neg_oc[eighth - 1::-1]
           + neg_oc[1:eighth + 1]
           + neg_os[eighth - 1:0:-1])
    cos += [-x for x in cos]
    sin += [-x for x in sin]
    return cos, sin


class _Roots:
    """The unit roots of one length n, with what the transforms derive from them."""

    __slots__ = ("_forward", "_half", "_half_conj", "_inverse", "_permutation", "cos", "n",
                 "sin")

    def __init__(self, n: int) -> None:
        self.n = n
        self.cos, self.sin = _unit_roots(n)
        self._forward: list[complex] | None = None
        self._inverse: list[complex] | None = None
        self._permutation: list[int] | None = None
        self._half: list[complex] | None = None
        self._half_conj: list[complex] | None = None

    def forward(self) -> list[complex]:
        """cos + i sin (= e^{-2 pi i j / n}) for j < n."""
        if self._forward is None:
            self._forward = list(map(complex, self.cos, self.sin))
        return self._forward

    def inverse(self) -> list[complex]:
        """cos - i sin (= e^{+2 pi i j / n}) for j < n (exact negations)."""
        if self._inverse is None:
            self._inverse = [complex(c, -s) for c, s in zip(self.cos, self.sin, strict=True)]
        return self._inverse

    def half(self) -> list[complex]:
        """cos + i sin for j < n / 2, then -1 + 0i (the splitting twiddles of rfft)."""
        if self._half is None:
            half = self.n >> 1
            roots = list(map(complex, self.cos[:half], self.sin[:half]))
            roots.append(complex(-1.0, 0.0))
            self._half = roots
        return self._half

    def half_conj(self) -> list[complex]:
        """cos - i sin for j < n / 2 (the splitting twiddles of irfft)."""
        if self._half_conj is None:
            half = self.n >> 1
            self._half_conj = [complex(c, -s) for c, s in zip(self.cos[:half], self.sin[:half],
                                                               strict=True)]
        return self._half_conj

    def permutation(self) -> list[int]:
        """The bit reversal of log2(n) bits of each index."""
        if self._permutation is None:
            order = [0]
            while len(order) < self.n:
                order = [2 * r for r in order] + [2 * r + 1 for r in order]
            self._permutation = order
        return self._permutation


#: The unit roots per length n.
_roots_cache: BoundedCache[_Roots] = BoundedCache(8)


def _roots(n: int) -> _Roots:
    return _roots_cache.get(n, lambda: _Roots(n))


#: i for the forward transform, -i for the inverse (the rotation of the radix-4 pass).
_PLUS_I = complex(0.0, 1.0)
_MINUS_I = complex(0.0, -1.0)


def _complex_transform(z: list[complex], inverse: bool) -> list[complex]:
    """The complex DFT of length n (a power of two) of ``z``.

    X[k] = sum_j z[j] e^{-2 pi i jk/n}, or the unscaled inverse (e^{+...}) when
    ``inverse``.  Decimation in time after a bit-reversal permutation: one radix-2 pass
    when log2(n) is odd, then radix-4 passes, each combining four sub-transforms of
    length M with the twiddles W^k, W^2k and W^3k (W = e^{-2 pi i / 4M}, all read from
    the table, none formed as a product).  Returns a new list.
    """
    n = len(z)
    if n <= 1:
        return list(z)
    roots = _roots(n)
    z = list(map(z.__getitem__, roots.permutation()))
    table = roots.inverse() if inverse else roots.forward()
    rotation = _MINUS_I if inverse else _PLUS_I
    size = 1
    if (n.bit_length() - 1) % 2 == 1:
        even = z[0::2]
        odd = z[1::2]
        z[0::2] = list(map(add, even, odd))
        z[1::2] = list(map(sub, even, odd))
        size = 2
    while size < n:
        step = 4 * size
        stride = n // step  # also the number of blocks
        if size >= stride:
            # Few long blocks: each butterfly position k of a block has its own twiddles.
            w1 = table[0:size * stride:stride]
            w2 = table[0:2 * size * stride:2 * stride]
            w3 = table[0:3 * size * stride:3 * stride]
            for start in range(0, n, step):
                e1 = start + size
                e2 = e1 + size
                e3 = e2 + size
                e4 = e3 + size
                x0 = z[start:e1]
                # a1 = W^2 A1, a2 = W A2, a3 = W^3 A3 (A1 and A2 swapped by the bit
                # reversal order)
                a1 = list(map(mul, z[e1:e2], w2))
                a2 = list(map(mul, z[e2:e3], w1))
                a3 = list(map(mul, z[e3:e4], w3))
                u0 = list(map(add, x0, a1))
                u1 = list(map(sub, x0, a1))
                v0 = list(map(add, a2, a3))
                # i (a2 - a3) forward, -i (a2 - a3) inverse: C1 = u1 - that, C3 = u1 + that
                v1 = list(map(mul, map(sub, a2, a3), repeat(rotation)))
                z[start:e1] = map(add, u0, v0)
                z[e1:e2] = map(sub, u1, v1)
                z[e2:e3] = map(sub, u0, v0)
                z[e3:e4] = map(add, u1, v1)
        else:
            # Many short blocks: the butterflies at position k of every block share twiddles.
            for k in range(size):
                t1 = repeat(table[k * stride])
                t2 = repeat(table[2 * k * stride])
                t3 = repeat(table[3 * k * stride])
                i1 = k + size
                i2 = i1 + size
                i3 = i2 + size
                x0 = z[k::step]
                a1 = list(map(mul, z[i1::step], t2))
                a2 = list(map(mul, z[i2::step], t1))
                a3 = list(map(mul, z[i3::step], t3))
                u0 = list(map(add, x0, a1))
                u1 = list(map(sub, x0, a1))
                v0 = list(map(add, a2, a3))
                v1 = list(map(mul, map(sub, a2, a3), repeat(rotation)))
                z[k::step] = list(map(add, u0, v0))
                z[i1::step] = list(map(sub, u1, v1))
                z[i2::step] = list(map(sub, u0, v0))
                z[i3::step] = list(map(add, u1, v1))
        size = step
    return z


def rfft(x: Sequence[float], n: int) -> Spectrum:
    """The spectrum X[0..n/2] of the real vector x zero-padded (or cut) to length n.

    n must be a power of two (at least 2).
    """
    half = n >> 1
    values = list(x[:n]) if len(x) > n else list(x)
    if len(values) < n:
        values.extend([0.0] * (n - len(values)))
    z = _complex_transform(list(map(complex, values[0::2], values[1::2])), False)
    # E = (Z[k] + conj Z[N-k]) / 2 and O = (Z[k] - conj Z[N-k]) / (2i), X = E + W^k O,
    # with Z[a] for a = k mod N and Z[b] for b = (N - k) mod N, k = 0..N (N = n / 2).
    za = [*z, z[0]]
    zb = [z[0], *z[half - 1:0:-1], z[0]]
    zb_conj = [c.conjugate() for c in zb]
    minus_half_i = complex(-0.0, -0.5)
    spectrum = [
        (s * 0.5) + w * (d * minus_half_i)
        for s, d, w in zip(map(add, za, zb_conj), map(sub, za, zb_conj), _roots(n).half(),
                           strict=True)
    ]
    return Spectrum([c.real for c in spectrum], [c.imag for c in spectrum])


def irfft(re: Sequence[float], im: Sequence[float], n: int) -> list[float]:
    """The real vector of length n whose spectrum is X[0..n/2] (the inverse of :func:`rfft`).

    Scaled by 1/n; n must be a power of two (at least 2).
    """
    half = n >> 1
    spectrum = list(map(complex, re[:half + 1], im[:half + 1]))
    # E = (X[k] + conj X[N-k]) / 2, O = (X[k] - conj X[N-k]) W^{-k} / 2, Z = E + i O.
    xk = spectrum[:half]
    xb_conj = [c.conjugate() for c in spectrum[half:0:-1]]
    conj_roots = _roots(n).half_conj()
    plus_i = _PLUS_I
    z = [
        (s * 0.5) + plus_i * ((d * 0.5) * w)
        for s, d, w in zip(map(add, xk, xb_conj), map(sub, xk, xb_conj), conj_roots,
                           strict=True)
    ]
    z = _complex_transform(z, True)
    scale = 1 / half
    out = [0.0] * n
    out[0::2] = [c.real * scale for c in z]
    out[1::2] = [c.imag * scale for c in z]
    return out


def _complex_list(x: Spectrum | tuple[Sequence[float], Sequence[float]]) -> list[complex]:
    re, im = x
    return list(map(complex, re, im))


def _split(values: list[complex]) -> Spectrum:
    return Spectrum([c.real for c in values], [c.imag for c in values])


def multiply_spectra(x: Spectrum, y: Spectrum) -> Spectrum:
    """The elementwise complex product of two spectra, as a new spectrum."""
    return _split(list(map(mul, _complex_list(x), _complex_list(y))))


def power_spectrum(x: Spectrum, exponent: int) -> Spectrum:
    """The elementwise integer power (exponent >= 1) of a spectrum, by binary exponentiation."""
    result: list[complex] | None = None
    base = _complex_list(x)
    remaining = exponent
    while True:
        if remaining & 1:
            result = base if result is None else list(map(mul, result, base))
        remaining >>= 1
        if remaining == 0:
            break
        base = list(map(mul, base, base))
    if result is None:  # exponent < 1: as the JavaScript, nothing to raise
        raise ValueError(f"exponent must be at least 1, not {exponent}")
    return _split(result)

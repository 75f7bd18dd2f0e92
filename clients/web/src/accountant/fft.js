// Real-input discrete Fourier transforms for convolving probability vectors.
//
// A transform of real length n (a power of two) is taken as one complex transform of
// length n / 2 on z[k] = x[2k] + i x[2k + 1] (iterative radix-2, decimation in time,
// twiddle factors computed directly by cos/sin for each index, so they are correctly
// rounded to within an ulp and the error grows only like log2(n) ulp of the vector's
// norm), then split into the spectra of the even and odd samples.  Linear convolution of
// two vectors of lengths a and b needs any length n >= a + b - 1: padding to the next
// power of two instead of another fast length changes the result only by rounding.

import { BoundedCache } from "./cache.js";

/** The smallest power of two >= `size` (at least 2). @param {number} size */
export function nextPowerOfTwo(size) {
  let n = 2;
  while (n < size) n *= 2;
  return n;
}

/** 2 pi split into a 26-bit head (whose products with integers below 2^27 are exact)
 * and the rest in two parts, for twiddle angles accurate to far below an ulp. */
const TWO_PI_HEAD = 6.2831852436065674; // 2 pi to 26 bits
const TWO_PI_MID = 2 * Math.PI - TWO_PI_HEAD;
const TWO_PI_LOW = 2.4492935982947064e-16; // 2 pi - 2 * Math.PI

/** The last {@link firstOctant} result (no allocation per twiddle). */
let octantCos = 1;
let octantSin = 0;

/**
 * cos and sin of 2 pi j / n for 0 <= j <= n / 8 (n a power of two), into octantCos and
 * octantSin: the angle is formed as a double plus its exact error, and the error is
 * applied to first order, so both are within about half an ulp of the exact values.
 * @param {number} j @param {number} n
 */
function firstOctant(j, n) {
  const head = TWO_PI_HEAD * j; // exact
  const rest = TWO_PI_MID * j + TWO_PI_LOW * j;
  const sum = head + rest;
  const error = (rest - (sum - head)) / n;
  const angle = sum / n; // n a power of two: exact scaling
  const c = Math.cos(angle);
  const s = Math.sin(angle);
  octantCos = c - error * s;
  octantSin = s + error * c;
}

/**
 * Fills cos[j] and sin[j] with cos and -sin of 2 pi j / n for 0 <= j < n, reducing each
 * angle to the first octant by symmetry (the second half by exact negation).
 * @param {number} n @param {Float64Array} cos @param {Float64Array} sin
 */
function fillUnitRoots(n, cos, sin) {
  const half = n >> 1;
  if (n < 8) {
    for (let j = 0; j < n; j += 1) {
      const angle = (2 * Math.PI * j) / n;
      cos[j] = Math.cos(angle);
      sin[j] = -Math.sin(angle);
    }
    return;
  }
  const eighth = n / 8;
  for (let j = 0; j < half; j += 1) {
    if (j <= eighth) {
      firstOctant(j, n);
      cos[j] = octantCos;
      sin[j] = -octantSin;
    } else if (j <= 2 * eighth) {
      firstOctant(2 * eighth - j, n);
      cos[j] = octantSin;
      sin[j] = -octantCos;
    } else if (j <= 3 * eighth) {
      firstOctant(j - 2 * eighth, n);
      cos[j] = -octantSin;
      sin[j] = -octantCos;
    } else {
      firstOctant(4 * eighth - j, n);
      cos[j] = -octantCos;
      sin[j] = -octantSin;
    }
  }
  for (let j = half; j < n; j += 1) {
    cos[j] = -cos[j - half];
    sin[j] = -sin[j - half];
  }
}

/** cos and sin of -2 pi j / n for j < n, per length n. */
const twiddleCache = new BoundedCache(8);

/** @param {number} n @returns {{cos: Float64Array, sin: Float64Array}} */
function twiddles(n) {
  return twiddleCache.get(String(n), () => {
    const cos = new Float64Array(n);
    const sin = new Float64Array(n);
    fillUnitRoots(n, cos, sin);
    return { cos, sin };
  });
}

/**
 * In-place complex DFT of length n (a power of two): X[k] = sum_j x[j] e^{-2 pi i jk/n},
 * or the unscaled inverse (e^{+...}) when `inverse`.  Decimation in time after a
 * bit-reversal permutation: one radix-2 pass when log2(n) is odd, then radix-4 passes,
 * each combining four sub-transforms of length M with the twiddles W^k, W^2k and W^3k
 * (W = e^{-2 pi i / 4M}, all read from the table, none formed as a product).
 * @param {Float64Array} re @param {Float64Array} im @param {boolean} inverse
 */
function complexTransform(re, im, inverse) {
  const n = re.length;
  if (n <= 1) return;
  for (let i = 1, j = 0; i < n; i += 1) {
    let bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      let t = re[i]; re[i] = re[j]; re[j] = t;
      t = im[i]; im[i] = im[j]; im[j] = t;
    }
  }
  const { cos, sin } = twiddles(n);
  const sign = inverse ? -1 : 1;
  let size = 1;
  if (Math.log2(n) % 2 === 1) {
    for (let a = 0; a < n; a += 2) {
      const xr = re[a + 1];
      const xi = im[a + 1];
      re[a + 1] = re[a] - xr;
      im[a + 1] = im[a] - xi;
      re[a] += xr;
      im[a] += xi;
    }
    size = 2;
  }
  for (; size < n; size *= 4) {
    const stride = n / (4 * size);
    for (let start = 0; start < n; start += 4 * size) {
      for (let k = 0; k < size; k += 1) {
        const i0 = start + k;
        const i1 = i0 + size;
        const i2 = i1 + size;
        const i3 = i2 + size;
        const w1r = cos[k * stride];
        const w1i = sign * sin[k * stride];
        const w2r = cos[2 * k * stride];
        const w2i = sign * sin[2 * k * stride];
        const w3r = cos[3 * k * stride];
        const w3i = sign * sin[3 * k * stride];
        // a1 = W^2 A1, a2 = W A2, a3 = W^3 A3 (A1 and A2 swapped by the bit reversal order)
        const a1r = re[i1] * w2r - im[i1] * w2i;
        const a1i = re[i1] * w2i + im[i1] * w2r;
        const a2r = re[i2] * w1r - im[i2] * w1i;
        const a2i = re[i2] * w1i + im[i2] * w1r;
        const a3r = re[i3] * w3r - im[i3] * w3i;
        const a3i = re[i3] * w3i + im[i3] * w3r;
        const u0r = re[i0] + a1r;
        const u0i = im[i0] + a1i;
        const u1r = re[i0] - a1r;
        const u1i = im[i0] - a1i;
        const v0r = a2r + a3r;
        const v0i = a2i + a3i;
        const v1r = sign * (a2r - a3r);
        const v1i = sign * (a2i - a3i);
        re[i0] = u0r + v0r;
        im[i0] = u0i + v0i;
        re[i2] = u0r - v0r;
        im[i2] = u0i - v0i;
        // C1 = u1 - i v1 (forward; + i v1 inverse), C3 the other sign
        re[i1] = u1r + v1i;
        im[i1] = u1i - v1r;
        re[i3] = u1r - v1i;
        im[i3] = u1i + v1r;
      }
    }
  }
}

/**
 * The spectrum X[0..n/2] of the real vector x zero-padded to length n (a power of two).
 * @param {ArrayLike<number>} x @param {number} n
 * @returns {{re: Float64Array, im: Float64Array}}
 */
export function rfft(x, n) {
  const half = n >> 1;
  const zr = new Float64Array(half);
  const zi = new Float64Array(half);
  const used = Math.min(x.length, n);
  for (let j = 0; j < used; j += 1) {
    if (j & 1) zi[j >> 1] = x[j];
    else zr[j >> 1] = x[j];
  }
  complexTransform(zr, zi, false);
  const { cos, sin } = twiddles(n);
  const re = new Float64Array(half + 1);
  const im = new Float64Array(half + 1);
  for (let k = 0; k <= half; k += 1) {
    const a = k % half;
    const b = (half - k) % half;
    // E = (Z[k] + conj Z[N-k]) / 2 and O = (Z[k] - conj Z[N-k]) / (2i), X = E + W^k O.
    const er = 0.5 * (zr[a] + zr[b]);
    const ei = 0.5 * (zi[a] - zi[b]);
    const or = 0.5 * (zi[a] + zi[b]);
    const oi = -0.5 * (zr[a] - zr[b]);
    const wr = k < half ? cos[k] : -1;
    const wi = k < half ? sin[k] : 0;
    re[k] = er + (wr * or - wi * oi);
    im[k] = ei + (wr * oi + wi * or);
  }
  return { re, im };
}

/**
 * The real vector of length n whose spectrum is X[0..n/2] (the inverse of {@link rfft},
 * scaled by 1/n).
 * @param {Float64Array} re @param {Float64Array} im @param {number} n @returns {Float64Array}
 */
export function irfft(re, im, n) {
  const half = n >> 1;
  const zr = new Float64Array(half);
  const zi = new Float64Array(half);
  const { cos, sin } = twiddles(n);
  for (let k = 0; k < half; k += 1) {
    const b = half - k;
    // E = (X[k] + conj X[N-k]) / 2, O = (X[k] - conj X[N-k]) W^{-k} / 2, Z = E + i O.
    const er = 0.5 * (re[k] + re[b]);
    const ei = 0.5 * (im[k] - im[b]);
    const dr = 0.5 * (re[k] - re[b]);
    const di = 0.5 * (im[k] + im[b]);
    const wr = cos[k];
    const wi = -sin[k];
    const or = dr * wr - di * wi;
    const oi = dr * wi + di * wr;
    zr[k] = er - oi;
    zi[k] = ei + or;
  }
  complexTransform(zr, zi, true);
  const out = new Float64Array(n);
  const scale = 1 / half;
  for (let k = 0; k < half; k += 1) {
    out[2 * k] = zr[k] * scale;
    out[2 * k + 1] = zi[k] * scale;
  }
  return out;
}

/**
 * Elementwise complex product of two spectra, into a new pair of arrays.
 * @param {{re: Float64Array, im: Float64Array}} x @param {{re: Float64Array, im: Float64Array}} y
 */
export function multiplySpectra(x, y) {
  const size = x.re.length;
  const re = new Float64Array(size);
  const im = new Float64Array(size);
  for (let k = 0; k < size; k += 1) {
    re[k] = x.re[k] * y.re[k] - x.im[k] * y.im[k];
    im[k] = x.re[k] * y.im[k] + x.im[k] * y.re[k];
  }
  return { re, im };
}

/**
 * Elementwise integer power (exponent >= 1) of a spectrum, by binary exponentiation.
 * @param {{re: Float64Array, im: Float64Array}} x @param {number} exponent
 */
export function powerSpectrum(x, exponent) {
  /** @type {{re: Float64Array, im: Float64Array} | null} */
  let result = null;
  let base = x;
  let remaining = exponent;
  for (;;) {
    if (remaining & 1) result = result === null ? base : multiplySpectra(result, base);
    remaining >>= 1;
    if (remaining === 0) break;
    base = multiplySpectra(base, base);
  }
  return /** @type {{re: Float64Array, im: Float64Array}} */ (result);
}

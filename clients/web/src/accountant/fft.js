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

/** cos and sin of -2 pi j / n for j < n / 2, per complex length n. */
const twiddleCache = new BoundedCache(8);

/** @param {number} n @returns {{cos: Float64Array, sin: Float64Array}} */
function twiddles(n) {
  return twiddleCache.get(String(n), () => {
    const half = n >> 1;
    const cos = new Float64Array(Math.max(half, 1));
    const sin = new Float64Array(Math.max(half, 1));
    for (let j = 0; j < half; j += 1) {
      const angle = (-2 * Math.PI * j) / n;
      cos[j] = Math.cos(angle);
      sin[j] = Math.sin(angle);
    }
    return { cos, sin };
  });
}

/**
 * In-place complex DFT of length n (a power of two): X[k] = sum_j x[j] e^{-2 pi i jk/n},
 * or the unscaled inverse (e^{+...}) when `inverse`.
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
  for (let length = 2; length <= n; length *= 2) {
    const half = length >> 1;
    const stride = n / length;
    for (let start = 0; start < n; start += length) {
      for (let k = 0; k < half; k += 1) {
        const wr = cos[k * stride];
        const wi = sign * sin[k * stride];
        const a = start + k;
        const b = a + half;
        const xr = re[b] * wr - im[b] * wi;
        const xi = re[b] * wi + im[b] * wr;
        re[b] = re[a] - xr;
        im[b] = im[a] - xi;
        re[a] += xr;
        im[a] += xi;
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

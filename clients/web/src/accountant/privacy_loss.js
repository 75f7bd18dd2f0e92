// Privacy loss distributions of item pairs with independent bins, and their composition.
//
// The item pair.  Let f be the mass function of one bin's blanket count (Poisson(mu), or
// Binomial(n, p)), and f_lam(a) = (1 - lam) f(a) + lam f(a - 1) that of a bin that also
// gets the victim's message with probability lam.  With the two bins independent,
//
//   P(a, b) = f_lam(a) f(b),   Q(a, b) = f(a) f_lam(b),
//
// so the privacy loss ln P/Q splits into one term per bin, L(a, b) = l(a) - l(b) with
// l(a) = ln(1 - lam + lam f(a - 1) / f(a)), A ~ f_lam and B ~ f independent under P.  The
// loss distribution (PLD) of the pair is that of l(A) convolved with that of -l(B), and
// the PLD of j independent pairs is its j-fold convolution.  For Poisson(mu),
// f(a - 1)/f(a) = a / mu; for Binomial(n, p) it is a (1 - p) / ((n - a + 1) p).  Where
// f(a) = 0 < f_lam(a), or f_lam(b) = 0 < f(b), the loss is +infinity.
//
// Hockey stick from the PLD.  For a loss L ~ P,
//
//   delta(E) = E_P[(1 - e^{E - L})_+] = Pr[L = inf] + sum_{L_i > E} p_i (1 - e^{E - L_i}),
//
// which does not decrease when any loss value grows.
//
// Discretisation (pessimistic).  Each per-bin loss is rounded up to the grid of step h,
// and the mass of counts outside the summation window is moved to +infinity.  A sum of
// rounded-up terms is at least the rounded-up sum and delta grows with the loss, so every
// delta computed from it is an upper bound (the loss error is at most 2 h per pair).
// (Rounding down and dropping the outside mass gives lower bounds: `upper = false`.)
//
// Composition is by FFT, whose rounding is absolute, ~1e-16 of the largest entry.  The
// exact result has no negative entry, so the largest negative excursion of the computed
// one measures that rounding: four times it (floored at 2^-52 of the largest entry) is
// charged per grid point summed (`noise`), and the pair's own rounding is carried
// through the composition (`inherited`).  Those two allowances depend on the transform's
// rounding, so they move (by ~1e-14 absolute at most) with the transform's length and
// algorithm; they are part of the upper bound, not of the divergence.

import { AccountantError } from "./errors.js";
import { registeredCache, keyOf } from "./cache.js";
import { binomCdf, binomPmf, binomSf, poissonPmf, poissonTails } from "./distributions.js";
import { irfft, multiplySpectra, nextPowerOfTwo, powerSpectrum, rfft } from "./fft.js";

/** Default grid step of the loss (the eps error is at most 2 h per composed pair). */
export const DEFAULT_STEP = 1e-4;

/** The most grid points one per-bin loss distribution may span; the step grows beyond it. */
export const MAX_BIN_POINTS = 1 << 14;

/** Standard deviations each side of the mean covered by a bin's summation window. */
export const WINDOW_SIGMAS = 12.0;

/** Relative safety factor on the measured FFT noise floor. */
const NOISE_FACTOR = 4.0;

/** Up to this many pairs of atoms a convolution may be summed atom by atom. */
const DIRECT_PAIRS = 1 << 20;

/**
 * The blanket count of one bin: Poisson(mean) when `trials` is null, else
 * Binomial(trials, mean / trials).
 */
export class BinLaw {
  /** @param {number} mean @param {number | null} [trials] */
  constructor(mean, trials = null) {
    this.mean = mean;
    this.trials = trials;
  }

  /** The success probability of the binomial. */
  get p() {
    return this.mean / /** @type {number} */ (this.trials);
  }

  /** A cache key. */
  get key() {
    return keyOf(this.mean, this.trials === null ? "poisson" : this.trials);
  }

  /** Counts lo..hi summed explicitly (mean +- 12 sd + 146); the rest is tail mass. */
  window() {
    const sigma = Math.sqrt(Math.max(this.mean, 0.0));
    const margin = WINDOW_SIGMAS * sigma + WINDOW_SIGMAS ** 2 + 2.0;
    const lo = Math.max(0, Math.floor(this.mean - margin));
    let hi = Math.ceil(this.mean + margin) + 1;
    if (this.trials !== null) hi = Math.min(hi, this.trials + 1);
    return [lo, hi];
  }

  /** f(count), 0 outside the support. @param {number} count */
  pmf(count) {
    if (this.mean === 0.0 || this.trials === 0) return count === 0 ? 1.0 : 0.0;
    if (this.trials === null) return poissonPmf(count, this.mean);
    return binomPmf(count, this.trials, this.p);
  }

  /** Pr[count < lo] + Pr[count > hi]. @param {number} lo @param {number} hi */
  outside(lo, hi) {
    if (this.mean === 0.0 || this.trials === 0) return lo <= 0 && 0 <= hi ? 0.0 : 1.0;
    if (this.trials === null) {
      const tails = poissonTails([lo - 1, hi], this.mean);
      return tails.lower[0] + tails.upper[1];
    }
    return binomCdf(lo - 1, this.trials, this.p) + binomSf(hi, this.trials, this.p);
  }

  /** f(a - 1) / f(a) for a >= 1 inside the support (inf where f(a) = 0 < f(a - 1)), 0 at a <= 0.
   * @param {number} a */
  previousRatio(a) {
    if (a <= 0.0) return 0.0;
    if (this.trials === null) return this.mean > 0.0 ? a / this.mean : Infinity;
    if (this.trials === 0 || this.mean === 0.0) return Infinity;
    const p = this.p;
    const remaining = this.trials - a + 1.0;
    return remaining > 0.0 ? (a * (1.0 - p)) / (remaining * p) : Infinity;
  }
}

/**
 * @typedef {object} LossDistribution
 * @property {number} step grid step h
 * @property {number} offset the first entry's grid index
 * @property {Float64Array} pmf masses at h (offset + i)
 * @property {number} infinity the atom at +infinity
 * @property {number} noise bound on the absolute rounding of each entry
 */

/**
 * Grid index of one loss, rounded up (upper) or down; the margin of 1e-9 steps covers
 * the rounding of the logarithm (~1e-16 |l|).
 * @param {number} loss @param {number} step @param {boolean} upper
 */
export function gridIndex(loss, step, upper) {
  const scaled = loss / step;
  return upper ? Math.ceil(scaled + 1e-9) : Math.floor(scaled - 1e-9);
}

/**
 * Whether summing atom by atom (exact) costs less than an FFT of `denseSize` points.
 * @param {number} atomsX @param {number} atomsY @param {number} denseSize
 */
export function sparseIsCheaper(atomsX, atomsY, denseSize) {
  const pairs = atomsX * atomsY;
  return pairs <= DIRECT_PAIRS && pairs <= 8 * denseSize;
}

/** Entries added in order into bins index - low. @returns {Float64Array} */
function binCount(indices, weights, low, size) {
  const out = new Float64Array(size);
  for (let i = 0; i < indices.length; i += 1) out[indices[i] - low] += weights[i];
  return out;
}

/** @param {ArrayLike<number>} values */
function minOf(values) {
  let out = Infinity;
  for (let i = 0; i < values.length; i += 1) if (values[i] < out) out = values[i];
  return out;
}

/** @param {ArrayLike<number>} values */
function maxOf(values) {
  let out = -Infinity;
  for (let i = 0; i < values.length; i += 1) if (values[i] > out) out = values[i];
  return out;
}

/**
 * The PLD of one item pair with independent bins of law `law` at rate `lam` (module
 * comment).  The step grows when the loss range would need more than MAX_BIN_POINTS.
 * @param {BinLaw} law @param {number} lam @param {{upper: boolean, step?: number}} options
 * @returns {LossDistribution}
 */
export function pairLoss(law, lam, { upper, step = DEFAULT_STEP }) {
  if (!(lam > 0.0 && lam <= 1.0)) throw new AccountantError(`lambda must be in (0, 1], got ${lam}`);
  const [lo, hi] = law.window();
  const size = hi - lo + 1;
  const loss = new Float64Array(size);
  const f = new Float64Array(size);
  const fLam = new Float64Array(size);
  let previous = law.pmf(lo - 1);
  for (let i = 0; i < size; i += 1) {
    const current = law.pmf(lo + i);
    f[i] = current;
    fLam[i] = (1.0 - lam) * current + lam * previous;
    previous = current;
    let value = Math.log1p(lam * (law.previousRatio(lo + i) - 1.0));
    if (!(current > 0.0)) value = Infinity;
    if (!(fLam[i] > 0.0)) value = -Infinity;
    loss[i] = value;
  }
  // A ~ f_lam contributes l(A); B ~ f contributes -l(B).
  let aInf = 0.0;
  let bInf = 0.0;
  const aIndex = [];
  const aProbs = [];
  const bIndex = [];
  const bProbs = [];
  let spreadLow = Infinity;
  let spreadHigh = -Infinity;
  for (let i = 0; i < size; i += 1) {
    const finite = Number.isFinite(loss[i]);
    if (finite) {
      spreadLow = Math.min(spreadLow, loss[i]);
      spreadHigh = Math.max(spreadHigh, loss[i]);
    }
    if (!(finite && fLam[i] > 0.0) && loss[i] > 0) aInf += fLam[i];
    if (!(finite && f[i] > 0.0) && loss[i] < 0) bInf += f[i];
  }
  if (upper) {
    // A lies outside lo..hi when the blanket does, or when the blanket lies outside
    // lo-1..hi-1 and the message was sent.
    aInf += (1.0 - lam) * law.outside(lo, hi) + lam * law.outside(lo - 1, hi - 1);
    bInf += law.outside(lo, hi);
  }
  const spread = spreadHigh >= spreadLow ? spreadHigh - spreadLow : 0.0;
  step = Math.max(step, spread / MAX_BIN_POINTS);
  for (let i = 0; i < size; i += 1) {
    if (!Number.isFinite(loss[i])) continue;
    if (fLam[i] > 0.0) {
      aIndex.push(gridIndex(loss[i], step, upper));
      aProbs.push(fLam[i]);
    }
    if (f[i] > 0.0) {
      bIndex.push(gridIndex(-loss[i], step, upper));
      bProbs.push(f[i]);
    }
  }
  let offset;
  let pmf;
  let noise;
  if (aIndex.length === 0 || bIndex.length === 0) { // every outcome has an infinite loss
    offset = 0;
    pmf = new Float64Array(1);
    noise = 0.0;
  } else {
    const aMin = minOf(aIndex);
    const bMin = minOf(bIndex);
    const aSpan = maxOf(aIndex) - aMin;
    const bSpan = maxOf(bIndex) - bMin;
    if (sparseIsCheaper(aIndex.length, bIndex.length, aSpan + bSpan + 1)) {
      // Few atoms on a wide grid: add every pair of atoms exactly (no FFT rounding).
      offset = aMin + bMin;
      pmf = new Float64Array(aSpan + bSpan + 1);
      for (let i = 0; i < aIndex.length; i += 1) {
        for (let j = 0; j < bIndex.length; j += 1) {
          pmf[aIndex[i] + bIndex[j] - offset] += aProbs[i] * bProbs[j];
        }
      }
      noise = 0.0;
    } else {
      const aPmf = binCount(aIndex, aProbs, aMin, aSpan + 1);
      const bPmf = binCount(bIndex, bProbs, bMin, bSpan + 1);
      offset = aMin + bMin;
      [pmf, noise] = fftConvolve(aPmf, bPmf);
    }
  }
  const infinity = 1.0 - (1.0 - Math.min(aInf, 1.0)) * (1.0 - Math.min(bInf, 1.0));
  return { step, offset, pmf, infinity, noise };
}

/**
 * A bound on the FFT's absolute rounding per entry of a non-negative result: four times
 * the largest negative excursion, floored at 2^-52 of the largest entry.
 * @param {Float64Array} raw @param {number} size entries of raw that belong to the result
 */
function noiseFloor(raw, size) {
  let low = 0.0;
  let high = -Infinity;
  for (let i = 0; i < size; i += 1) {
    if (raw[i] < low) low = raw[i];
    if (raw[i] > high) high = raw[i];
  }
  return NOISE_FACTOR * Math.max(-low, 2 ** -52 * high);
}

/** The first `size` entries of raw, clipped at 0. @param {Float64Array} raw @param {number} size */
function clipped(raw, size) {
  const out = new Float64Array(size);
  for (let i = 0; i < size; i += 1) out[i] = raw[i] > 0.0 ? raw[i] : 0.0;
  return out;
}

/**
 * x * y by FFT, clipped at 0, with the per-entry rounding bound of {@link noiseFloor}.
 * @param {Float64Array} x @param {Float64Array} y @returns {[Float64Array, number]}
 */
function fftConvolve(x, y) {
  const size = x.length + y.length - 1;
  const n = nextPowerOfTwo(size);
  const spectrum = multiplySpectra(rfft(x, n), rfft(y, n));
  const raw = irfft(spectrum.re, spectrum.im, n);
  return [clipped(raw, size), noiseFloor(raw, size)];
}

/**
 * The j-fold composition of a pair's PLD, ready for hockey-stick evaluation: only grid
 * points with a positive loss are kept (the others never count at E >= 0), with suffix
 * sums of p_i and p_i e^{-L_i}.
 */
export class ComposedLoss {
  /**
   * @param {number} step @param {number} first grid index of tailP[0]
   * @param {Float64Array} tailP @param {Float64Array} tailQ @param {number} infinity
   * @param {number} noise @param {number} inherited @param {boolean} upper
   */
  constructor(step, first, tailP, tailQ, infinity, noise, inherited, upper) {
    this.step = step;
    this.first = first;
    this.tailP = tailP;
    this.tailQ = tailQ;
    this.infinity = infinity;
    this.noise = noise;
    this.inherited = inherited;
    this.upper = upper;
  }

  /**
   * delta(E) = Pr[L = inf] + sum_{L_i > E} p_i (1 - e^{E - L_i}), with the rounding
   * allowances in an upper bound.
   * @param {number} eps @returns {number}
   */
  delta(eps) {
    if (eps < 0.0) throw new AccountantError(`eps must be >= 0, got ${eps}`);
    const start = Math.max(0, Math.floor(eps / this.step) + 1 - this.first);
    let value = this.infinity;
    if (start < this.tailP.length) {
      value += Math.max(0.0, this.tailP[start] - Math.exp(eps) * this.tailQ[start]);
      if (this.upper) value += this.noise * (this.tailP.length - start);
    }
    if (this.upper) value += this.inherited;
    return Math.min(value, 1.0);
  }
}

/** @param {Float64Array} values */
function countNonzero(values) {
  let count = 0;
  for (let i = 0; i < values.length; i += 1) if (values[i] !== 0) count += 1;
  return count;
}

/**
 * x * y summed atom by atom over the non-zero entries (exact: no FFT rounding).
 * @param {number} xOffset @param {Float64Array} x @param {number} yOffset @param {Float64Array} y
 * @returns {[number, Float64Array]}
 */
function sparseConvolve(xOffset, x, yOffset, y) {
  const xi = [];
  const yi = [];
  for (let i = 0; i < x.length; i += 1) if (x[i] !== 0) xi.push(i);
  for (let i = 0; i < y.length; i += 1) if (y[i] !== 0) yi.push(i);
  if (xi.length === 0 || yi.length === 0) return [xOffset + yOffset, new Float64Array(1)];
  const low = xi[0] + yi[0];
  const pmf = new Float64Array(xi[xi.length - 1] + yi[yi.length - 1] - low + 1);
  for (const i of xi) for (const j of yi) pmf[i + j - low] += x[i] * y[j];
  return [xOffset + yOffset + low, pmf];
}

/**
 * The `times`-fold composition of `pair`: atom by atom while the atoms are few (exact),
 * the remaining power by FFT, whose rounding is bounded by {@link noiseFloor}.
 * @param {LossDistribution} pair @param {number} times @param {boolean} upper
 * @returns {ComposedLoss}
 */
export function composeLoss(pair, times, upper) {
  // Rounding already in the pair's pmf: an L1 error of at most G noise, which the
  // composition carries into the result at most `times` over.
  const inherited = times * pair.noise * pair.pmf.length;
  let offset = pair.offset;
  let pmf = pair.pmf;
  let done = 1;
  let noise = 0.0;
  const atoms = countNonzero(pair.pmf);
  while (done < times && sparseIsCheaper(countNonzero(pmf), atoms,
    pmf.length + pair.pmf.length - 1)) {
    [offset, pmf] = sparseConvolve(offset, pmf, pair.offset, pair.pmf);
    done += 1;
  }
  if (done < times) {
    const remaining = times - done;
    const size = pmf.length + remaining * (pair.pmf.length - 1);
    const n = nextPowerOfTwo(size);
    const pairSpectrum = rfft(pair.pmf, n);
    // Nothing summed yet: pmf is the pair itself, whose transform is at hand.
    const base = done === 1 ? pairSpectrum : rfft(pmf, n);
    const spectrum = multiplySpectra(base, powerSpectrum(pairSpectrum, remaining));
    const raw = irfft(spectrum.re, spectrum.im, n);
    noise = noiseFloor(raw, size);
    pmf = clipped(raw, size);
    offset += remaining * pair.offset;
  }
  // 1 - (1 - p)^times without the cancellation that loses a p below 1e-16.
  let infinity = 1.0;
  if (pair.infinity < 1.0) infinity = -Math.expm1(times * Math.log1p(-pair.infinity));
  // Keep the grid points of positive loss: index offset + i >= 1.
  const firstKept = Math.min(pmf.length, Math.max(0, 1 - offset));
  const kept = pmf.length - firstKept;
  const tailP = new Float64Array(kept);
  const tailQ = new Float64Array(kept);
  let sumP = 0.0;
  let sumQ = 0.0;
  for (let i = kept - 1; i >= 0; i -= 1) {
    const mass = pmf[firstKept + i];
    const loss = pair.step * (offset + firstKept + i);
    sumP += mass;
    sumQ += mass * Math.exp(-loss);
    tailP[i] = sumP;
    tailQ[i] = sumQ;
  }
  return new ComposedLoss(pair.step, offset + firstKept, tailP, tailQ, Math.min(infinity, 1.0),
    noise, inherited, upper);
}

const composedCache = registeredCache(512);

/**
 * The `times`-fold composition of the item pair of {@link pairLoss} (cached).
 * @param {BinLaw} law @param {number} lam @param {number} times
 * @param {{upper: boolean, step?: number}} options @returns {ComposedLoss}
 */
export function composedPair(law, lam, times, { upper, step = DEFAULT_STEP }) {
  return composedCache.get(keyOf(law.key, lam, times, upper, step),
    () => composeLoss(pairLoss(law, lam, { upper, step }), times, upper));
}

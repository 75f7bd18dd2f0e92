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
// Discretisation.  Losses are put on a grid of step h, each bin's loss law on its own
// (each bin is a pair of its own, (f_lam, f) and (f, f_lam), and the item pair is their
// composition), then the two are convolved.  Upper bounds connect the dots: an atom of
// P-mass p at loss L between the grid points x = i h and x + h is split into p (1 - w) at
// x and p w at x + h, with w = (1 - e^{-(L - x)}) / (1 - e^{-h}), which keeps its P-mass
// and its Q-mass p e^{-L}.  In z = e^{-L} the split is a mean-preserving spread; every
// hockey-stick divergence is the P-expectation of (1 - a z)_+, convex and non-increasing
// in z, so by Jensen the split raises every one of them: the grid pair dominates the pair
// (Blackwell), and its compositions dominate the compositions.  L is shifted up by 1e-9
// steps and w widened by a relative 1e-12 (then capped at 1) for the rounding of the
// logarithm and the exponentials: extra mass moved up only raises the divergences.  The
// error is second order in h.  The mass of counts outside the summation window goes to
// +infinity.  Lower bounds (`upper = false`) round every loss down to the grid and drop
// the outside mass (the loss error is at most 2 h per pair).
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

/** Grid step of the loss for upper bounds (connect the dots: the error is second order). */
export const DEFAULT_STEP = 2e-3;

/**
 * Grid step of the loss for lower bounds (rounded down: the eps error is at most 2 h a
 * pair).  Only the numpy accountant computes lower bounds; the name is kept alike.
 */
export const LOWER_STEP = 1e-4;

/** The most grid points one per-bin loss distribution may span; the step grows beyond it. */
export const MAX_BIN_POINTS = 1 << 14;

/** Standard deviations each side of the mean covered by a bin's summation window. */
export const WINDOW_SIGMAS = 12.0;

/** Relative safety factor on the measured FFT noise floor. */
const NOISE_FACTOR = 4.0;

/** Up to this many pairs of atoms a convolution may be summed atom by atom. */
const DIRECT_PAIRS = 1 << 20;

/** Relative widening of the share of an atom's mass moved up to the grid point above it. */
const UPWARD_MARGIN = 1e-12;

/**
 * Steps a loss is moved outwards (up in an upper bound, down in a lower one) before it is
 * placed: covers the rounding of the logarithm (~1e-16 |l|).
 */
const LOSS_MARGIN = 1e-9;

/**
 * Chernoff exponents from which the mass outside a bin's window is bounded rather than
 * summed (`BinLaw.outsideBound`): e^-50 ~ 2e-22 is far below any delta a campaign
 * certifies.
 */
export const CHERNOFF_FROM = 50.0;

/** Relative amount by which a Chernoff exponent is lowered before use (its rounding). */
const EXPONENT_MARGIN = 1e-6;

/**
 * mu h(k / mu), h(x) = x ln x - x + 1 (h(0) = 1), as mu ((1 + u) ln(1 + u) - u) with
 * u = (k - mu) / mu.
 * @param {number} k @param {number} mean
 */
function poissonExponent(k, mean) {
  if (k <= 0) return mean;
  const u = (k - mean) / mean;
  return mean * ((1.0 + u) * Math.log1p(u) - u);
}

/**
 * n D(k / n || p), the Kullback-Leibler divergence of Bernoulli laws, each logarithm as
 * log1p of the gap a - p over p and 1 - p.  At p = 1 every trial succeeds: an infinite
 * exponent below n, 0 at n (as the Python accountant's guard).
 * @param {number} k @param {number} trials @param {number} p
 */
function binomialExponent(k, trials, p) {
  if (p >= 1.0) return k >= trials ? 0.0 : Infinity;
  if (k <= 0) return -trials * Math.log1p(-p);
  if (k >= trials) return -trials * Math.log(p);
  const a = k / trials;
  const gap = a - p;
  return trials * (a * Math.log1p(gap / p) + (1.0 - a) * Math.log1p(-gap / (1.0 - p)));
}

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

  /**
   * An upper bound on `outside`: Chernoff's on each tail where the window reaches far
   * into it (both bounds at most e^-CHERNOFF_FROM), else the tails' sums (the Python
   * accountant's segshuffle.core.privacy_loss.BinLaw.outside_bound, with its proof).
   * @param {number} lo @param {number} hi
   */
  outsideBound(lo, hi) {
    if (this.mean === 0.0 || this.trials === 0) return this.outside(lo, hi);
    const below = lo <= 0 ? 0.0 : this.tailBound(lo - 1, false);
    const above = this.trials !== null && hi >= this.trials
      ? 0.0
      : this.tailBound(hi + 1, true);
    if (below === null || above === null) return this.outside(lo, hi);
    return below + above;
  }

  /**
   * Chernoff's bound on Pr[X >= k] (`upperTail`) or Pr[X <= k], or null where k is on the
   * other side of the mean or the bound exceeds e^-CHERNOFF_FROM.
   * @param {number} k @param {boolean} upperTail
   * @returns {number | null}
   */
  tailBound(k, upperTail) {
    if (upperTail ? k < this.mean : k > this.mean) return null;
    let exponent = this.trials === null
      ? poissonExponent(k, this.mean)
      : binomialExponent(k, this.trials, this.p);
    exponent *= 1.0 - EXPONENT_MARGIN;
    return exponent >= CHERNOFF_FROM ? Math.exp(-exponent) : null;
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
 * Index of the grid point an atom at `loss` is placed from: floor(l / h + 1e-9) in an
 * upper bound (its mass is split between that point and the next), floor(l / h - 1e-9) in
 * a lower bound (all of it goes there).  Non-decreasing in the loss, so the smallest and
 * largest loss give the grid's ends.
 * @param {number} loss @param {number} step @param {boolean} upper
 */
export function gridFloor(loss, step, upper) {
  const scaled = loss / step;
  return upper ? Math.floor(scaled + LOSS_MARGIN) : Math.floor(scaled - LOSS_MARGIN);
}

/**
 * Connect the dots: each atom (L, p) is split between the grid points x = i h at or below
 * it and x + h, p (1 - w) added to `lower[i - offset]` and p w to `raised[i + 1 - offset]`,
 * with
 *
 *   w = min(1, (1 - e^{-(L - x)}) / (1 - e^{-h}) (1 + 1e-12)),   i = floor(L / h + 1e-9),
 *
 * computed as the numpy accountant does (with s = L / h + 1e-9, the numerator is
 * -expm1(-(s - i) h)).  The entries of `lower` and `raised` are summed in the order of the
 * atoms; the grid's mass is their entrywise sum ({@link discretise}).  Atoms without a
 * positive mass or a finite loss are left out.
 * @param {ArrayLike<number>} losses @param {ArrayLike<number>} masses @param {number} step
 * @param {number} offset @param {Float64Array} lower @param {Float64Array} raised
 */
export function spreadAtoms(losses, masses, step, offset, lower, raised) {
  const denominator = -Math.expm1(-step);
  const widen = 1.0 + UPWARD_MARGIN;
  for (let k = 0; k < losses.length; k += 1) {
    const mass = masses[k];
    if (!(mass > 0.0 && Number.isFinite(losses[k]))) continue;
    const scaled = losses[k] / step + LOSS_MARGIN;
    const below = Math.floor(scaled);
    const w = (-Math.expm1(-(scaled - below) * step) / denominator) * widen;
    const up = mass * (w < 1.0 ? w : 1.0);
    const at = below - offset;
    lower[at] += mass - up;
    raised[at + 1] += up;
  }
}

/**
 * Each atom's mass added, in order, at its loss rounded down to the grid (a lower bound):
 * `pmf[floor(L / h - 1e-9) - offset]`; atoms without a positive mass or a finite loss
 * are left out.
 * @param {ArrayLike<number>} losses @param {ArrayLike<number>} masses @param {number} step
 * @param {number} offset @param {Float64Array} pmf
 */
export function roundDownAtoms(losses, masses, step, offset, pmf) {
  for (let k = 0; k < losses.length; k += 1) {
    if (!(masses[k] > 0.0 && Number.isFinite(losses[k]))) continue;
    pmf[Math.floor(losses[k] / step - LOSS_MARGIN) - offset] += masses[k];
  }
}

/**
 * [offset, pmf]: the atoms (`losses`, `masses`; at least one, all finite) on the grid
 * h (offset + i), by connecting the dots in an upper bound ({@link spreadAtoms}: each atom
 * keeps its P-mass and its Q-mass, and the grid pair dominates the atoms') and by rounding
 * down in a lower one ({@link roundDownAtoms}).  In an upper bound the grid runs from the
 * point below the smallest loss to the point above the largest, so its last entry (and its
 * first, where a share is capped at 1) may be 0, as in the numpy accountant.
 * @param {ArrayLike<number>} losses @param {ArrayLike<number>} masses @param {number} step
 * @param {boolean} upper @returns {[number, Float64Array]}
 */
export function discretise(losses, masses, step, upper) {
  const offset = gridFloor(minOf(losses), step, upper);
  const size = gridFloor(maxOf(losses), step, upper) - offset + (upper ? 2 : 1);
  const pmf = new Float64Array(size);
  if (!upper) {
    roundDownAtoms(losses, masses, step, offset, pmf);
    return [offset, pmf];
  }
  const raised = new Float64Array(size);
  spreadAtoms(losses, masses, step, offset, pmf, raised);
  for (let i = 0; i < size; i += 1) pmf[i] += raised[i];
  return [offset, pmf];
}

/**
 * Whether summing atom by atom (exact) costs less than an FFT of `denseSize` points.
 * @param {number} atomsX @param {number} atomsY @param {number} denseSize
 */
export function sparseIsCheaper(atomsX, atomsY, denseSize) {
  const pairs = atomsX * atomsY;
  return pairs <= DIRECT_PAIRS && pairs <= 8 * denseSize;
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
  const aLosses = [];
  const aProbs = [];
  const bLosses = [];
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
    // (Each tail's mass is bounded, BinLaw.outsideBound.)
    aInf += (1.0 - lam) * law.outsideBound(lo, hi) + lam * law.outsideBound(lo - 1, hi - 1);
    bInf += law.outsideBound(lo, hi);
  }
  const spread = spreadHigh >= spreadLow ? spreadHigh - spreadLow : 0.0;
  step = Math.max(step, spread / MAX_BIN_POINTS);
  for (let i = 0; i < size; i += 1) {
    if (!Number.isFinite(loss[i])) continue;
    if (fLam[i] > 0.0) {
      aLosses.push(loss[i]);
      aProbs.push(fLam[i]);
    }
    if (f[i] > 0.0) {
      bLosses.push(-loss[i]);
      bProbs.push(f[i]);
    }
  }
  let offset;
  let pmf;
  let noise;
  if (aLosses.length === 0 || bLosses.length === 0) { // every outcome has an infinite loss
    offset = 0;
    pmf = new Float64Array(1);
    noise = 0.0;
  } else {
    // Each bin is a pair of its own ((f_lam, f) and (f, f_lam)); the item pair is their
    // composition, so each is put on the grid and the two are convolved.
    const [aOffset, aPmf] = discretise(aLosses, aProbs, step, upper);
    const [bOffset, bPmf] = discretise(bLosses, bProbs, step, upper);
    if (countNonzero(aPmf) * countNonzero(bPmf) <= DIRECT_PAIRS) {
      // Add every pair of atoms exactly while that is affordable: FFT rounding charged
      // here would be carried through every composition.
      [offset, pmf] = sparseConvolve(aOffset, aPmf, bOffset, bPmf);
      noise = 0.0;
    } else {
      offset = aOffset + bOffset;
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

// A Poisson law that a binomial blanket total dominates, up to a stated slack.
//
// The revealed-send bound of the slot blanket replaces the multinomial blanket on 2j
// active bins by independent Poisson(nu) bins.  It needs
//
//   eta = max_t (F_B(t) - F_P(t))_+,   B ~ Binomial(N, q),  P ~ Poisson(nu),
//
// to be small (F a CDF): then for every non-increasing g with 0 <= g <= 1,
// E[g(B)] <= E[g(P)] + eta, by Abel summation: E[g(X)] = sum_t F_X(t) (g(t) - g(t + 1))
// with non-negative differences that sum to at most g(0) <= 1.  eta grows with nu (a
// Poisson law is stochastically increasing in its mean), so the largest admissible nu
// is found by bisection.  A binomial has lighter tails than the Poisson law of the same
// mean, so nu sits a few standard deviations times q / 2 below N q.
//
// Rounding.  eta must hold to an absolute precision far below the accountant's relative
// margin (the slack is 1e-3 delta), and above the means both CDFs are close to 1, so the
// difference is never formed from two numbers near 1: it equals S_P(t) - S_B(t) with
// S = 1 - F the upper tails.  Each tail comes with a bound on its relative error (rho_B,
// rho_P), and the excess at t is charged as the smaller of
//
//   F_B (1 + rho_B) - F_P (1 - rho_P)   and   S_P (1 + rho_P) - S_B (1 - rho_B),
//
// each an upper bound on the exact difference, so the computed eta is never below the
// exact one.  Below the window the difference is at most F_B(lo - 1), above it at most
// S_P(hi), both widened alike.  rho_B is the bound the Python accountant states for its
// binomial tails (1e-10; these are within ~1e-13), so both charge the same eta.

import { registeredCache, keyOf } from "./cache.js";
import { binomCdf, binomTailsRange, poissonTails } from "./distributions.js";

/** Standard deviations each side of the means over which the CDFs are compared. */
const SIGMAS = 14.0;

/** The relative error charged on a binomial tail (module comment). */
export const BINOMIAL_TAIL_RTOL = 1e-10;

/** Totals compared during the bisection (the answer is then verified on all of them). */
const COARSE_POINTS = 256;

/**
 * Totals lo..hi within 14 standard deviations (plus 50) of the mean, clipped to the support.
 * @param {number} trials @param {number} q @returns {[number, number]}
 */
function windowBounds(trials, q) {
  const mean = trials * q;
  const sigma = Math.sqrt(Math.max(mean, 1.0));
  const lo = Math.max(0, Math.floor(mean - SIGMAS * sigma - 50));
  const hi = Math.min(trials, Math.ceil(mean + SIGMAS * sigma + 50));
  return [lo, hi];
}

/**
 * @typedef {object} ComparedTotals
 * @property {number[]} t totals compared (increasing)
 * @property {Float64Array} lower F_B on them
 * @property {Float64Array} upper S_B = 1 - F_B on them
 * @property {number} below F_B(lo - 1): a bound on the difference below the window
 */

/**
 * Every total of the window, with both binomial tails there.
 * @param {number} trials @param {number} q @returns {ComparedTotals}
 */
function fullWindow(trials, q) {
  const [lo, hi] = windowBounds(trials, q);
  const t = [];
  for (let k = lo; k <= hi; k += 1) t.push(k);
  const { lower, upper } = binomTailsRange(lo, hi, trials, q);
  return { t, lower, upper, below: binomCdf(lo - 1, trials, q) };
}

/**
 * A certified upper bound on max_t (F_B(t) - F_P(t))_+ (module comment).
 * @param {ComparedTotals} totals @param {number} nu @returns {number}
 */
function excessOn(totals, nu) {
  if (nu <= 0.0) return 0.0;
  const poisson = poissonTails(totals.t, nu);
  const rhoB = BINOMIAL_TAIL_RTOL;
  const rhoP = poisson.rtol;
  let excess = -Infinity;
  for (let i = 0; i < totals.t.length; i += 1) {
    const viaLower = totals.lower[i] * (1.0 + rhoB) - poisson.lower[i] * (1.0 - rhoP);
    const viaUpper = poisson.upper[i] * (1.0 + rhoP) - totals.upper[i] * (1.0 - rhoB);
    excess = Math.max(excess, Math.min(viaLower, viaUpper));
  }
  const above = poisson.upper[totals.t.length - 1] * (1.0 + rhoP); // S_P(hi) bounds every t > hi
  return Math.max(0.0, excess, above, totals.below * (1.0 + rhoB));
}

/**
 * The largest nu in [0, mean] (to `precision` times the gap) that is `admissible`: the
 * gap mean - nu, a few times q sqrt(mean), is bracketed by doubling from that unit, then
 * bisected.
 * @param {(nu: number) => boolean} admissible @param {number} mean @param {number} q
 * @param {number} precision @returns {number}
 */
function largestAdmissible(admissible, mean, q, precision) {
  if (admissible(mean)) return mean;
  const unit = Math.max(q * Math.sqrt(mean), 1e-9 * mean);
  let gap = unit;
  while (gap < mean && !admissible(mean - gap)) gap *= 2.0;
  let lo;
  let hi;
  if (gap >= mean) {
    lo = 0.0;
    hi = mean - gap / 2.0;
  } else {
    lo = mean - gap;
    hi = gap > unit ? mean - gap / 2.0 : mean;
  }
  while (hi - lo > precision * Math.max(gap, unit)) {
    const mid = 0.5 * (lo + hi);
    if (admissible(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}

const dominatedCache = registeredCache(4096);

/**
 * [nu, eta]: a nu within about 1e-4 relative of the largest with eta <= `slack`, and
 * eta = the excess at that nu, verified on every total of the window (nu = 0 always
 * qualifies).  The bisection compares the CDFs at about 256 totals (the difference is
 * smooth in t); its answer is then checked on every total and lowered until it passes.
 * @param {number} trials @param {number} q @param {number} slack @returns {[number, number]}
 */
export function dominatedPoissonMean(trials, q, slack) {
  return dominatedCache.get(keyOf(trials, q, slack), () => {
    if (trials <= 0 || q <= 0.0) return [0.0, 0.0];
    const [lo, hi] = windowBounds(trials, q);
    const stride = Math.max(1, Math.floor((hi - lo + 1) / COARSE_POINTS));
    const full = fullWindow(trials, q);
    // Subsample the full window rather than evaluate twice.
    const keep = [];
    for (let i = 0; i < full.t.length; i += stride) keep.push(i);
    keep.push(full.t.length - 1);
    const coarse = {
      t: keep.map((i) => full.t[i]),
      lower: Float64Array.from(keep, (i) => full.lower[i]),
      upper: Float64Array.from(keep, (i) => full.upper[i]),
      below: full.below,
    };
    let nu = largestAdmissible((value) => excessOn(coarse, value) <= slack, trials * q, q, 1e-3);
    let step = Math.max(q * Math.sqrt(trials * q), 1e-9 * trials * q) / 64.0;
    let eta = excessOn(full, nu);
    while (eta > slack) {
      nu = Math.max(0.0, nu - step);
      step *= 2.0;
      eta = excessOn(full, nu);
    }
    return [nu, eta];
  });
}

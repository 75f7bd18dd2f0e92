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

import { registeredCache, keyOf } from "./cache.js";
import { binomCdf, binomCdfRange, poissonCdfRange, poissonSf } from "./distributions.js";

/** Standard deviations each side of the means over which the CDFs are compared. */
const SIGMAS = 14.0;

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
 * @property {Float64Array} fBinomial F_B on them
 * @property {number} below F_B below the window: a bound on the difference there
 */

/**
 * Every total of the window with F_B there.  Above the window, up to `trials`, F_B is
 * within 1e-40 of 1 and the difference is at most the Poisson tail checked by the caller.
 * @param {number} trials @param {number} q @returns {ComparedTotals}
 */
function fullWindow(trials, q) {
  const [lo, hi] = windowBounds(trials, q);
  const t = [];
  for (let k = lo; k <= hi; k += 1) t.push(k);
  const below = lo > 0 ? binomCdf(lo - 1, trials, q) : 0.0;
  return { t, fBinomial: binomCdfRange(lo, hi, trials, q), below };
}

/**
 * max(0, max_t (F_B(t) - F_P(t)), Pr[P > t_last] + 1e-40, F_B below the window).
 * @param {ComparedTotals} totals @param {number} nu @returns {number}
 */
function excessOn(totals, nu) {
  if (nu <= 0.0) return 0.0;
  const { t, fBinomial, below } = totals;
  const first = t[0];
  const last = t[t.length - 1];
  const fPoisson = poissonCdfRange(first, last, nu);
  let excess = -Infinity;
  for (let i = 0; i < t.length; i += 1) {
    excess = Math.max(excess, fBinomial[i] - fPoisson[t[i] - first]);
  }
  // Past the window the binomial CDF is 1 (to 1e-40): the difference is the Poisson tail.
  const tail = poissonSf(last, nu) + 1e-40;
  return Math.max(0.0, excess, tail, below);
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
      fBinomial: Float64Array.from(keep, (i) => full.fBinomial[i]),
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

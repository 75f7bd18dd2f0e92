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
 * [lo, hi]: lo the largest nu in [0, mean] (to `precision` times the gap) that is
 * `admissible`, hi the smallest nu it found not to be (Infinity when `mean` is).  The gap
 * mean - nu, a few times q sqrt(mean), is bracketed by doubling from that unit, then
 * bisected.  This defines the comparison's answer; `largestAdmissible` reaches the same one
 * with fewer evaluations.
 * @param {(nu: number) => boolean} admissible @param {number} mean @param {number} q
 * @param {number} precision @returns {[number, number]}
 */
function bisection(admissible, mean, q, precision) {
  if (admissible(mean)) return [mean, Infinity];
  const unit = gapUnit(mean, q);
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
  return [lo, hi];
}

/** The scale of the gap mean - nu: q sqrt(mean) (at least 1e-9 mean). */
function gapUnit(mean, q) {
  return Math.max(q * Math.sqrt(mean), 1e-9 * mean);
}

/** Guided evaluations of `largestAdmissible` before it lets the bisection ask. */
const GUIDED_EVALUATIONS = 10;

/**
 * The crossing's gap in units and the log excess's slope per unit of nu there, as the last
 * search found them (the next one starts from them).  Only the cost depends on them.
 */
const lastShape = [3.1, 5.0];

/**
 * Evaluations of f(nu) = ln eta(nu) - ln slack so far, and the answers they imply: eta
 * grows with nu, so every nu at or below the largest admissible nu seen is admissible and
 * every nu at or above the smallest inadmissible one is not.
 */
class Knowledge {
  /** @param {(nu: number) => number} excess @param {number} slack */
  constructor(excess, slack) {
    this.excess = excess;
    this.logSlack = Math.log(slack);
    this.evaluations = 0;
    this.ok = -Infinity;
    this.okF = NaN;
    this.bad = Infinity;
    this.badF = NaN;
  }

  get bracketed() {
    return this.ok > -Infinity && this.bad < Infinity;
  }

  /** f(nu), remembered (an excess of 0 counts as e^-745). @param {number} nu */
  evaluate(nu) {
    this.evaluations += 1;
    const excess = this.excess(nu);
    const f = (excess > 0.0 ? Math.log(excess) : -745.0) - this.logSlack;
    if (f <= 0.0) {
      if (nu > this.ok) {
        this.ok = nu;
        this.okF = f;
      }
    } else if (nu < this.bad) {
      this.bad = nu;
      this.badF = f;
    }
    return f;
  }

  /** true / false where the evaluations decide, else null. @param {number} nu */
  decided(nu) {
    if (nu <= this.ok) return true;
    if (nu >= this.bad) return false;
    return null;
  }

  /** Whether nu is admissible, evaluating only what is not yet decided. @param {number} nu */
  admissible(nu) {
    if (this.decided(nu) === null) this.evaluate(nu);
    return this.decided(nu) === true;
  }

  /** The bisection's final [lo, hi] if the crossing were at `crossing`; evaluates nothing. */
  cell(crossing, mean, q, precision) {
    return bisection((nu) => {
      const answer = this.decided(nu);
      return answer === null ? nu <= crossing : answer;
    }, mean, q, precision);
  }
}

/**
 * The bisection's answer for the predicate excess(nu) <= slack in about 5 evaluations
 * instead of 13: its questions are answered from what earlier evaluations imply, so the
 * answer does not depend on which points were evaluated; those are chosen from the last
 * search's crossing and slope (a step half past the predicted crossing), by regula falsi
 * with the Illinois weights, and at the ends of the cell the bracket predicts.
 * @param {(nu: number) => number} excess @param {number} slack @param {number} mean
 * @param {number} q @param {number} precision @returns {number}
 */
function largestAdmissible(excess, slack, mean, q, precision) {
  if (!(slack > 0.0)) return bisection((nu) => excess(nu) <= slack, mean, q, precision)[0];
  const known = new Knowledge(excess, slack);
  const unit = gapUnit(mean, q);
  const gapUnits = lastShape[0];
  let slope = lastShape[1];
  let x = Math.min(Math.max(mean - gapUnits * unit, 0.0), mean);
  let f = known.evaluate(x);
  while (!known.bracketed && known.evaluations < GUIDED_EVALUATIONS) {
    const following = Math.min(Math.max(x - (1.5 * f / slope) * unit, 0.0), mean);
    if (following === x) break;
    const fFollowing = known.evaluate(following);
    if (fFollowing !== f) slope = Math.max((fFollowing - f) / ((following - x) / unit), 1e-3);
    x = following;
    f = fFollowing;
  }
  let staleSide = 0;
  let weightOk = 1.0;
  let weightBad = 1.0;
  while (known.bracketed && known.evaluations < GUIDED_EVALUATIONS) {
    const fOk = known.okF * weightOk;
    const fBad = known.badF * weightBad;
    const crossing = known.ok + (known.bad - known.ok) * (-fOk / (fBad - fOk));
    const [lo, hi] = known.cell(crossing, mean, q, precision);
    const undecided = [lo, hi].filter((nu) => Number.isFinite(nu) && known.decided(nu) === null);
    if (undecided.length === 0) break;
    if (4.0 * (hi - lo) >= known.bad - known.ok) {
      for (const nu of undecided) known.evaluate(nu);
      continue;
    }
    const half = 0.5 * (hi - lo);
    if (known.evaluate(Math.min(Math.max(crossing, known.ok + half), known.bad - half)) <= 0.0) {
      weightOk = 1.0;
      weightBad = staleSide < 0 ? weightBad * 0.5 : 1.0;
      staleSide = -1;
    } else {
      weightOk = staleSide > 0 ? weightOk * 0.5 : 1.0;
      weightBad = 1.0;
      staleSide = 1;
    }
  }
  const answer = bisection((nu) => known.admissible(nu), mean, q, precision)[0];
  if (known.bracketed && known.bad > known.ok) {
    lastShape[0] = (mean - answer) / unit;
    lastShape[1] = Math.max((known.badF - known.okF) / ((known.bad - known.ok) / unit), 1e-3);
  }
  return answer;
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
    let nu = largestAdmissible((value) => excessOn(coarse, value), slack, trials * q, q, 1e-3);
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

// Hockey-stick divergence of the two-bin count pair, evaluated per total count.
//
// A count pair is (N, r, own, other): N blanket trials each land on the victim's item
// j0 with probability r and on j1 with probability r; the victim's message lands on its
// own item with probability `own` and on the other with `other`.  With (B0, B1) the
// blanket counts and (D0, D1) the victim's contribution,
//
//   P = (B0 + D0, B1 + D1),   Q = (B0 + D1, B1 + D0),
//   delta(eps) = D_{e^eps}(P || Q) = sum_{a,b} max(0, P(a, b) - e^eps Q(a, b)).
//
// The Poisson randomizer with the slot blanket is own = lambda, other = 0, with
// N = h ceil(m) - 1 slots and r = gamma / d.
//
// Per total.  Given t = a + b, write w0(t) for the Binomial(N, 2r) mass at t and w1(t)
// for the same at t - 1.  The blanket's share of a is then Binomial(t, 1/2), and after
// dividing by w0(t) C(t, a) / 2^t,
//
//   P ~ K0 + c (own a + other b),   Q ~ K0 + c (other a + own b),
//   K0 = 1 - own - other,           1 / c = rho (N - t + 1),  rho = r / (1 - 2r).
//
// P / Q grows with a, so P > e^eps Q exactly for a >= a*(t), the smallest integer above
//
//   x(t) = [K0 (e^eps - 1) rho (N - t + 1) + t (e^eps own - other)] / ((own - other)(1 + e^eps)).
//
// With S_c(k) = Pr[Binomial(c, 1/2) >= k] the per-total masses of {a >= a*} are
//
//   P_t = K0 w0 S_t(a*) + own w1 S_{t-1}(a* - 1) + other w1 S_{t-1}(a*),
//   Q_t = K0 w0 S_t(a*) + other w1 S_{t-1}(a* - 1) + own w1 S_{t-1}(a*),
//
// and delta(eps) = sum_t (P_t - e^eps Q_t).
//
// Truncation.  Only totals within 9.5 standard deviations (plus a skew margin) of the
// mean are summed.  An omitted total contributes at most K0 w0(t) + (own + other) w1(t),
// so that binomial mass, weighted the same way, is added: the result is an upper bound
// on the exact divergence up to the rounding of the terms (~1e-13 relative).

import { AccountantError } from "./errors.js";
import { registeredCache, keyOf } from "./cache.js";
import { binomCdf, binomPmf, binomSf, compensatedSum, halfTail } from "./distributions.js";

/** Standard deviations each side of the mean spanned by the summation window (plus a skew
 * margin); the binomial mass outside, below 1e-20, is added to the result. */
const WINDOW_SIGMAS = 9.5;

/**
 * @typedef {object} CountPair
 * @property {number} nSlots N, the blanket trials that may land on the two items
 * @property {number} r the chance that one trial lands on j0 (the same for j1)
 * @property {number} own the chance that the victim's message lands on its own item
 * @property {number} other the chance that it lands on the other item
 */

/**
 * The pair of the Poisson randomizer with rate `lam` and the slot blanket (own = lambda).
 * @param {number} lam @param {number} nSlots @param {number} r @returns {CountPair}
 */
export function poissonPair(lam, nSlots, r) {
  if (!(lam >= 0 && lam <= 1)) throw new AccountantError(`lambda must be in [0, 1], got ${lam}`);
  if (nSlots < 0) throw new AccountantError(`n_slots must be >= 0, got ${nSlots}`);
  if (!(r >= 0 && r <= 0.5)) throw new AccountantError(`r must be in [0, 1/2], got ${r}`);
  return { nSlots, r, own: lam, other: 0.0 };
}

/**
 * @typedef {object} PairWindow
 * @property {Float64Array} t totals lo..hi
 * @property {Float64Array} w0 Binomial(N, 2r) masses at t
 * @property {Float64Array} w1 the same at t - 1
 * @property {number} omitted0 w0 mass outside the window
 * @property {number} omitted1 w1 mass outside the window
 * @property {Float64Array} rhoSlack rho (N - t + 1)
 */

const windowCache = registeredCache(256);

/**
 * The summation window and weights of Binomial(N, 2r) (cached per (N, r)).  Totals range
 * over 0..N+1 (the victim may add one); the mass outside the window is computed from the
 * binomial tails.
 * @param {number} nSlots @param {number} r @returns {PairWindow}
 */
export function pairWindow(nSlots, r) {
  return windowCache.get(keyOf(nSlots, r), () => {
    const trials = nSlots;
    const prob = 2.0 * r;
    let lo;
    let hi;
    let w0;
    let w1;
    let omitted0;
    let omitted1;
    if (trials === 0 || prob === 0.0) {
      // No blanket mass lands on j0 or j1: the totals are 0 and 1.
      lo = 0;
      hi = 1;
      w0 = Float64Array.of(1, 0);
      w1 = Float64Array.of(0, 1);
      omitted0 = 0.0;
      omitted1 = 0.0;
    } else {
      const mean = trials * prob;
      const sigma = Math.sqrt(trials * prob * (1.0 - prob));
      const margin = WINDOW_SIGMAS * sigma + WINDOW_SIGMAS ** 2 + 2.0;
      lo = Math.max(0, Math.floor(mean - margin));
      hi = Math.min(trials + 1, Math.ceil(mean + margin) + 1);
      const size = hi - lo + 1;
      const pmf = new Float64Array(size + 1);
      for (let i = 0; i <= size; i += 1) pmf[i] = binomPmf(lo - 1 + i, trials, prob);
      w0 = pmf.slice(1);
      w1 = pmf.slice(0, size);
      omitted0 = binomCdf(lo - 1, trials, prob) + binomSf(hi, trials, prob);
      omitted1 = binomCdf(lo - 2, trials, prob) + binomSf(hi - 1, trials, prob);
    }
    const size = hi - lo + 1;
    const t = new Float64Array(size);
    const rhoSlack = new Float64Array(size);
    const rho = prob < 1.0 ? r / (1.0 - prob) : Infinity;
    for (let i = 0; i < size; i += 1) {
      t[i] = lo + i;
      const remaining = trials - t[i] + 1;
      rhoSlack[i] = remaining === 0 ? 0.0 : rho * remaining;
    }
    return { t, w0, w1, omitted0, omitted1, rhoSlack };
  });
}

/**
 * delta(eps) = D_{e^eps}(P || Q) of the count pair (module comment): the sum over the
 * window plus the omitted mass, an upper bound on the exact divergence.
 * @param {CountPair} pair @param {number} eps (>= 0) @returns {number}
 */
export function deltaFor(pair, eps) {
  const [inside, omitted] = windowSum(pair, eps);
  return inside + omitted;
}

/**
 * The window's part of deltaFor, without the omitted mass: a lower bound on the pair's
 * exact divergence, up to the rounding of its terms.
 * @param {CountPair} pair @param {number} eps (>= 0) @returns {number}
 */
export function windowDelta(pair, eps) {
  return windowSum(pair, eps)[0];
}

/**
 * [sum of the window's terms, the omitted mass that bounds every term outside it].
 * @param {CountPair} pair @param {number} eps @returns {[number, number]}
 */
function windowSum(pair, eps) {
  if (!(eps >= 0)) throw new AccountantError(`eps must be >= 0, got ${eps}`);
  const { own, other } = pair;
  if (own <= other) return [0.0, 0.0]; // identical distributions
  const window = pairWindow(pair.nSlots, pair.r);
  const e = Math.exp(eps);
  const k0 = Math.max(0.0, 1.0 - own - other);
  const denominator = (own - other) * (1.0 + e);
  const slope = e * own - other;
  const size = window.t.length;
  const terms = new Float64Array(size);
  for (let i = 0; i < size; i += 1) {
    const t = window.t[i];
    let aStar;
    if (k0 === 0.0 && other === 0.0) {
      // Every message is the victim's or the blanket's: x = t - t / (1 + e), so
      // a* = t + 1 - ceil(t / (1 + e)) <= t exactly, also where e / (1 + e) rounds to 1.
      aStar = t + 1 - Math.ceil(t / (1.0 + e));
    } else {
      // A threshold beyond every a (rho = inf, or overflow) empties the set for that t.
      const base = k0 > 0.0 ? k0 * (e - 1.0) * window.rhoSlack[i] : 0.0;
      let x = (base + t * slope) / denominator;
      if (!Number.isFinite(x)) x = t + 1.0;
      aStar = Math.min(Math.max(Math.floor(x) + 1.0, 0.0), t + 1.0);
    }
    // S_{t-1}(a*) from the tail sums, S_{t-1}(a* - 1) by adding the mass at a* - 1, and
    // S_t(a*) by Pascal's rule as the mean of the two: sums of non-negative terms only.
    const previous = Math.max(t - 1, 0);
    const sPrevHi = halfTail(previous, aStar);
    const sPrevLo = Math.min(sPrevHi + binomPmf(aStar - 1, previous, 0.5), 1.0);
    const sT = t === 0 ? (aStar <= 0 ? 1.0 : 0.0) : 0.5 * (sPrevLo + sPrevHi);
    const shared = k0 * window.w0[i] * sT;
    const pT = shared + window.w1[i] * (own * sPrevLo + other * sPrevHi);
    const qT = shared + window.w1[i] * (other * sPrevLo + own * sPrevHi);
    terms[i] = Math.max(pT - e * qT, 0.0);
  }
  const omitted = k0 * window.omitted0 + (own + other) * window.omitted1;
  return [compensatedSum(terms), omitted];
}

// Slot blanket, several differing items: the labelled-groups bound.
//
// Setting.  N blanket slots each carry, with probability gamma, an item uniform over the d
// items, else a null.  The victim holds x = (x_1..x_S) or x' = (x'_1..x'_S), 2S <= d
// distinct items, and sends its j-th item with probability lambda.
//
// Labelled slots.  Give every slot an independent label J uniform on 1..S, and let a slot
// labelled J land on x_J and on x'_J with probability S gamma / d each, never on the
// other pairs' items, on each of the d - 2S other items with probability gamma / d, and be
// null otherwise.  Averaged over J every slot still lands on each item with probability
// gamma / d, independently: the blanket has exactly the protocol's law.  Reveal to the
// server each group's size N_j (slots labelled j on x_j, x'_j or null) and its counts on
// x_j and x'_j, with the victim's j-th message in group j: the real view is a function of
// this one, so its divergence is at most this one's.
//
// (N_1, ..., N_S) ~ Multinomial(N; p_g, ..., p_g), p_g = (1 - gamma + 2 S gamma / d) / S,
// does not depend on the victim's data; given the sizes the groups are independent, and
// group j is the two-bin pair of multinomial_pair.js with N_j slots at rate
// r_S = (S gamma / d) / (1 - gamma + 2 S gamma / d).  Averaging over revealed sizes,
//
//   delta_user(E) <= E[D_E(pair(N_1) x ... x pair(N_S))] <= E[F(min_j N_j)],
//   F(k) = D_E(S-fold composition of pair(k, r_S, lambda)),
//
// as one more slot in a group is a post-processing.  Overlapping sets use a common item
// and an outside item as a pair whose two worlds agree, which only lowers the divergence;
// with S = min(s, d // 2) the bound covers every pair of sets.
//
// The expectation.  F does not increase, so for any ladder k_0 < ... < k_L and v_0 = 1,
// v_i = F(k_{i-1} + 1) (made non-increasing by a running maximum from the right),
//
//   E[F(M)] <= v_{L+1} + sum_i Pr[M <= k_i] (v_i - v_{i+1}),   M = min_j N_j,
//
// by Abel summation, with Pr[M <= k] <= min(1, S Pr[N_1 <= k]).  k_0 is where
// S Pr[N_1 <= k_0] fits the slack budget; the rest of the ladder is spaced in standard
// deviations of N_1.  Once the charged min(1, S Pr[N_1 <= k_j]) reaches 1, the terms
// from j on telescope to v_j: the bound is the same formula on the ladder
// k_0 < ... < k_{j-1} (itself a ladder), so the rungs from k_j on (the largest groups,
// the costliest compositions) are not evaluated.  For S = 2 and small groups the
// expectation over (N_1, N_2) is also taken exactly (each term an exact product of two
// pairs by sorted losses, no grid) and the smaller bound is kept.

import { registeredCache, keyOf } from "./cache.js";
import { binomCdf, binomIsf, binomPmf, binomPpf, fsum } from "./distributions.js";
import { enumerable, multinomialPairLoss, pairAtoms, pairLosses } from "./multinomial_pair.js";
import { DEFAULT_STEP, composeLoss } from "./privacy_loss.js";

/** Ladder points in standard deviations of one group's size (above k_0). */
const LADDER_SIGMAS = [-6.0, -4.0, -3.0, -2.0, -1.25, -0.5, 0.25];

/** Ladder points closer than this share of the group size are merged. */
const LADDER_MERGE = 5e-3;

/** The exact two-group expectation is taken while the mean group size is at most this. */
const EXACT_PAIR_GROUPS = 32.0;

/**
 * [p_g, r_S]: a slot's chance to be in one given group, and the group's pair rate.
 * @param {number} gamma @param {number} domainSize @param {number} pairs @returns {[number, number]}
 */
export function groupGeometry(gamma, domainSize, pairs) {
  const inside = (1.0 - gamma) + (2.0 * pairs * gamma) / domainSize;
  return [inside / pairs, Math.min(0.5, ((pairs * gamma) / domainSize) / inside)];
}

const composedGroupsCache = registeredCache(512);

/**
 * The `pairs`-fold composition of the group pair with `slots` slots (null: too many atoms).
 * @returns {import("./privacy_loss.js").ComposedLoss | null}
 */
function composedGroups(slots, r, lam, pairs, step) {
  return composedGroupsCache.get(keyOf(slots, r, lam, pairs, step), () => {
    const atoms = pairAtoms(slots, r);
    if (atoms === null) return null;
    return composeLoss(multinomialPairLoss(atoms, lam, { upper: true, step }), pairs, true);
  });
}

/**
 * @typedef {object} SortedLosses
 * @property {Float64Array} loss atoms' losses, increasing
 * @property {Float64Array} pMass their P-mass
 * @property {Float64Array} tailP suffix sums of P-mass (one more entry: 0)
 * @property {Float64Array} tailQ suffix sums of Q-mass
 * @property {number} tail the window's outside mass
 */

const sortedCache = registeredCache(4096);

/** A pair's atoms sorted by loss, with suffix sums (null: too many atoms). @returns {SortedLosses | null} */
function sortedLosses(slots, r, lam) {
  return sortedCache.get(keyOf(slots, r, lam), () => {
    const atoms = pairAtoms(slots, r);
    if (atoms === null) return null;
    const [allLoss, allMass] = pairLosses(atoms, lam);
    const order = [];
    for (let i = 0; i < allLoss.length; i += 1) {
      if (allMass[i] > 0.0 && !Number.isNaN(allLoss[i]) && allLoss[i] !== -Infinity) order.push(i);
    }
    order.sort((i, j) => allLoss[i] - allLoss[j] || i - j);
    const size = order.length;
    const loss = Float64Array.from(order, (i) => allLoss[i]);
    const pMass = Float64Array.from(order, (i) => allMass[i]);
    const tailP = new Float64Array(size + 1);
    const tailQ = new Float64Array(size + 1);
    let sumP = 0.0;
    let sumQ = 0.0;
    for (let i = size - 1; i >= 0; i -= 1) {
      const qMass = loss[i] === Infinity ? 0.0 : pMass[i] * Math.exp(-Math.min(loss[i], 700.0));
      sumP += pMass[i];
      sumQ += qMass;
      tailP[i] = sumP;
      tailQ[i] = sumQ;
    }
    return { loss, pMass, tailP, tailQ, tail: atoms.tail };
  });
}

/** The first index whose value exceeds x in an increasing array. @param {Float64Array} values @param {number} x */
function searchRight(values, x) {
  let lo = 0;
  let hi = values.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (values[mid] <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * D_{e^E} of the product of two pairs, summed atom by atom (no grid), plus their tails:
 * D = sum_i p_i [TP(E - l_i) - e^{E - l_i} TQ(E - l_i)] with TP, TQ the second pair's P-
 * and Q-mass above a loss.  The outer sum is correctly rounded.
 * @param {SortedLosses} first @param {SortedLosses} second @param {number} eps
 */
function productDelta(first, second, eps) {
  const terms = new Float64Array(first.loss.length);
  for (let i = 0; i < first.loss.length; i += 1) {
    const shifted = eps - first.loss[i];
    const start = searchRight(second.loss, shifted);
    const scale = shifted === -Infinity ? 0.0 : Math.exp(Math.min(shifted, 700.0));
    const inner = second.tailP[start] - scale * second.tailQ[start];
    terms[i] = first.pMass[i] * Math.max(inner, 0.0);
  }
  return fsum(terms) + first.tail + second.tail;
}

/** E[F(min_j N_j)] of the module comment for one (N, gamma, d, S) and slack budget. */
export class GroupsBound {
  /**
   * @param {number} nSlots @param {number} gamma @param {number} domainSize
   * @param {number} pairs @param {number} slack @param {number} [step]
   */
  constructor(nSlots, gamma, domainSize, pairs, slack, step = DEFAULT_STEP) {
    this.nSlots = nSlots;
    this.pairs = pairs;
    this.slack = slack;
    this.step = step;
    [this.pGroup, this.r] = groupGeometry(gamma, domainSize, pairs);
    const n = nSlots;
    const p = this.pGroup;
    const mean = n * p;
    const sd = Math.sqrt(n * p * (1.0 - p));
    // k_0: the largest k with S Pr[N_1 <= k] within the slack.
    let k0 = binomPpf(slack / pairs, n, p);
    while (k0 >= 0 && pairs * binomCdf(k0, n, p) > slack) k0 -= 1;
    let ladder = [k0];
    for (const z of LADDER_SIGMAS) {
      const k = Math.min(n, Math.floor(mean + z * sd));
      const last = ladder[ladder.length - 1];
      if (k > last && (k - last) > LADDER_MERGE * k) ladder.push(k);
    }
    if (ladder[0] < 0) { // nothing to charge 1: Pr[N_1 <= -1] = 0
      ladder = ladder.length > 1 ? ladder.slice(1) : [0];
    }
    const charged = ladder.map((k) => (k < 0 ? 0.0 : Math.min(binomCdf(k, n, p) * pairs, 1.0)));
    // Rungs from the first one charged 1 on weigh nothing (header).
    const first = charged.findIndex((cdf) => cdf >= 1.0);
    const live = Math.max(first < 0 ? ladder.length : first, 1);
    this.ladder = ladder.slice(0, live);
    this.ladderCdf = charged.slice(0, live);
  }

  /**
   * Whether the pairs are non-degenerate (r_S < 1/2) and small enough to enumerate
   * (counted at the largest rung, not built: a check may need only the first).
   */
  get usable() {
    return this.r > 0.0 && this.r < 0.5
      && enumerable(Math.max(this.ladder[this.ladder.length - 1] + 1, 1), this.r);
  }

  /** F(slots) at (E, lambda). */
  f(slots, eps, lam) {
    const composed = composedGroups(slots, this.r, lam, this.pairs, this.step);
    return composed === null ? 1.0 : composed.delta(eps);
  }

  /**
   * The ladder bound with its first rung alone, F(k_0 + 1) + Pr[M <= k_0] (1 - F(k_0 + 1))
   * (the Abel summation holds for any ladder): one composition, the first that
   * ladderDelta computes.
   * @param {number} eps @param {number} lam @returns {number}
   */
  firstRungDelta(eps, lam) {
    const first = this.f(this.ladder[0] + 1, eps, lam);
    return Math.min(first + this.ladderCdf[0] * (1.0 - first), 1.0);
  }

  /**
   * The Abel-summed ladder bound with the union bound on the minimum.
   * @param {number} eps @param {number} lam @returns {number}
   */
  ladderDelta(eps, lam) {
    const values = [1.0, ...this.ladder.map((k) => this.f(k + 1, eps, lam))];
    // v_0 = 1, v_{i+1} = F(k_i + 1), made non-increasing from the right.
    for (let i = values.length - 2; i >= 0; i -= 1) values[i] = Math.max(values[i], values[i + 1]);
    let sum = 0.0;
    for (let i = 0; i < this.ladder.length; i += 1) {
      sum += this.ladderCdf[i] * (values[i] - values[i + 1]);
    }
    return Math.min(values[values.length - 1] + sum, 1.0);
  }

  /**
   * S = 2, small groups: the sum over (N_1, N_2) of the exact product divergence, sizes
   * outside the central quantiles (mass at most the slack) charged 1.  null where it does
   * not apply.
   * @param {number} eps @param {number} lam @returns {number | null}
   */
  exactPairDelta(eps, lam) {
    const n = this.nSlots;
    const p = this.pGroup;
    if (this.pairs !== 2 || n * p > EXACT_PAIR_GROUPS || this.step > DEFAULT_STEP) return null;
    const lo = Math.max(0, binomPpf(this.slack / 4.0, n, p) - 1);
    const hi = Math.min(n, binomIsf(this.slack / 4.0, n, p) + 1);
    /** @type {Map<number, SortedLosses>} */
    const pairs = new Map();
    for (let size = lo; size <= hi; size += 1) {
      const losses = sortedLosses(size, this.r, lam);
      if (losses === null) return null;
      pairs.set(size, losses);
    }
    let total = 0.0;
    let covered = 0.0;
    for (let n1 = lo; n1 <= hi; n1 += 1) {
      const w1 = binomPmf(n1, n, p);
      const rest = n - n1;
      for (let n2 = lo; n2 <= hi; n2 += 1) {
        const weight = binomPmf(n2, rest, p / (1.0 - p)) * w1;
        if (weight < 1e-300 || n2 > rest) continue;
        const product = productDelta(/** @type {SortedLosses} */ (pairs.get(n1)),
          /** @type {SortedLosses} */ (pairs.get(n2)), eps);
        total += weight * Math.min(1.0, product);
        covered += weight;
      }
    }
    return Math.min(1.0, total + Math.max(0.0, 1.0 - covered) + 1e-15);
  }

  /**
   * The smaller of the ladder bound and (S = 2, small groups) the exact expectation.
   * @param {number} eps @param {number} lam @returns {number}
   */
  delta(eps, lam) {
    if (lam === 0.0) return 0.0;
    const value = this.ladderDelta(eps, lam);
    const exact = this.exactPairDelta(eps, lam);
    return exact === null ? value : Math.min(value, exact);
  }
}

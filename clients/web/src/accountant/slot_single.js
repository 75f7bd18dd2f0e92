// Slot blanket, one differing item: the exact full view as a mixture of count pairs.
//
// Claim.  Let the victim's sets differ in one item, x against x' (items common to both
// are sent alike in both worlds, independently of everything else, and drop out).  N
// blanket slots each carry, with probability gamma, an item uniform over the d items,
// else a null.  Let b be the number of slots landing on the d - 2 items outside {x, x'}.
// Then
//
//   delta_full(E) = sum_b Binom(N, gamma (d - 2) / d)(b) delta_pair(N - b, r1, lambda)(E),
//   r1 = (gamma / d) / (1 - gamma + 2 gamma / d),
//
// with delta_pair the two-bin count pair of hockey_stick.js.  Why: b has the same law in
// both worlds and the server reads it off the histogram; its split over the outside items
// is uniform in both worlds and cancels from every likelihood ratio.  Given b, each of
// the other N - b slots is on x or on x' with probability r1 each, else a null, and the
// null count is a function of (b, and the counts on x and x').  An observed label with
// the same law in both worlds averages the divergence, with equality.
//
// Which slots.  N = h ceil(m), every blanket slot of the accounted honest users, the
// victim's own included: the victim's client draws its slots as every honest client
// does, independently of x, and its data message is a separate ciphertext (the pair's
// Bernoulli(lambda) message), so its slots belong to the blanket in both worlds and the
// mixture is the view's divergence itself.  Rounding (binomial tail differences, the
// pairs' per-total sums: about 1e-11 relative) is covered by the certified margins of
// accounting.js.
//
// Bucketing.  delta_pair does not grow with its slot count (one more independent slot is
// a randomised map applied to both views), so charging every b of a bucket [b_lo, b_hi]
// the pair at N - b_hi is an upper bound, and the mass of b above the summed window is
// charged 1.  Buckets are single values where the window is narrow and widen towards the
// tails elsewhere.

import { registeredCache, keyOf } from "./cache.js";
import { binomCdf, binomSf } from "./distributions.js";
import { deltaFor, poissonPair } from "./hockey_stick.js";

/** Standard deviations of b summed above its mean (above: charged 1) and below it. */
const UPPER_SIGMAS = 10.0;
const LOWER_SIGMAS = 6.0;

/** Where the window of b is at most this wide, every b is a bucket of its own. */
const EXACT_WIDTH = 160;

/** Bucket edges, in standard deviations from the mean, for wider windows. */
const BUCKET_EDGES = [-6.0, -3.0, -2.0, -1.5, -1.0, -0.6, -0.3, 0.0, 0.3, 0.6, 1.0, 1.5, 2.0,
  2.5, 3.0, 4.0, 5.0, 6.5, 8.0, 10.0];

/** Bucket edges where one standard deviation of b is below COARSE_BELOW of the slots. */
const COARSE_EDGES = [-6.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.5, 5.0, 7.0, 10.0];
const COARSE_BELOW = 2e-3;

/** The buckets of the claim: weights, slots charged, and the mass charged 1. */
export class SingleItemMixture {
  /**
   * @param {number} r1 @param {Float64Array} weights @param {Float64Array} slots
   * @param {number} tail
   */
  constructor(r1, weights, slots, tail) {
    this.r1 = r1;
    this.weights = weights;
    this.slots = slots;
    this.tail = tail;
  }

  /**
   * An upper bound on delta_full(E) at rate `lam` (exact but for the buckets).
   * @param {number} eps @param {number} lam @returns {number}
   */
  delta(eps, lam) {
    if (lam === 0.0) return 0.0;
    let total = this.tail;
    for (let i = 0; i < this.weights.length; i += 1) {
      const weight = this.weights[i];
      if (weight > 0.0) total += weight * deltaFor(poissonPair(lam, this.slots[i], this.r1), eps);
    }
    return Math.min(total, 1.0);
  }
}

/**
 * Increasing bucket tops b_0 < b_1 < ... (the last one: the summed window's top).
 * @param {number} nSlots @param {number} qOut @returns {number[]}
 */
function edges(nSlots, qOut) {
  const mean = nSlots * qOut;
  const sd = Math.sqrt(nSlots * qOut * (1.0 - qOut));
  const lo = Math.max(0, Math.floor(mean - LOWER_SIGMAS * sd - 2));
  const hi = Math.min(nSlots, Math.ceil(mean + UPPER_SIGMAS * sd + 2));
  if (hi - lo + 1 <= EXACT_WIDTH) {
    const out = [];
    for (let b = lo; b <= hi; b += 1) out.push(b);
    return out;
  }
  // Where one standard deviation of b is a small share of the pair's slots, the pair
  // barely changes across it: fewer, wider buckets cost a relative ~1e-4 there.
  const zs = sd < COARSE_BELOW * (nSlots - mean) ? COARSE_EDGES : BUCKET_EDGES;
  const tops = new Set(zs.map((z) => Math.min(hi, Math.max(lo, Math.floor(mean + z * sd)))));
  tops.add(hi);
  return [...tops].sort((a, b) => a - b);
}

const mixtureCache = registeredCache(256);

/**
 * The mixture of the claim for N = `nSlots` slots at rate gamma over d items (cached).
 * @param {number} nSlots @param {number} gamma @param {number} domainSize
 * @returns {SingleItemMixture}
 */
export function singleItemMixture(nSlots, gamma, domainSize) {
  return mixtureCache.get(keyOf(nSlots, gamma, domainSize), () => {
    const d = domainSize;
    if (d < 2 || nSlots === 0 || gamma === 0.0) {
      return new SingleItemMixture(0.0, Float64Array.of(1), Float64Array.of(0), 0.0);
    }
    const qOut = (gamma * (d - 2)) / d;
    // 1 - q_out written without the cancellation; r1 <= 1/2 exactly (1/2 at gamma = 1).
    const r1 = Math.min(0.5, (gamma / d) / ((1.0 - gamma) + (2.0 * gamma) / d));
    if (qOut === 0.0) {
      return new SingleItemMixture(r1, Float64Array.of(1), Float64Array.of(nSlots), 0.0);
    }
    const tops = edges(nSlots, qOut);
    const mean = nSlots * qOut;
    // Each weight is a difference of the small tail on its side of the mean, so no weight
    // is a difference of numbers close to 1.
    const weights = new Float64Array(tops.length);
    let previousCdf = 0.0;
    let previousSf = 1.0; // Pr[b > -1]
    for (let i = 0; i < tops.length; i += 1) {
      const cdf = binomCdf(tops[i], nSlots, qOut);
      const sf = binomSf(tops[i], nSlots, qOut);
      const start = i === 0 ? -1 : tops[i - 1];
      const weight = start >= mean ? previousSf - sf : cdf - previousCdf;
      weights[i] = Math.max(weight, 0.0);
      previousCdf = cdf;
      previousSf = sf;
    }
    const last = tops[tops.length - 1];
    const tail = last < nSlots ? binomSf(last, nSlots, qOut) : 0.0;
    const slots = Float64Array.from(tops, (top) => nSlots - top);
    return new SingleItemMixture(r1, weights, slots, tail);
  });
}

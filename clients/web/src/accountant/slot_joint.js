// Slot blanket, small populations: the exact joint view of k differing items.
//
// Why.  The labelled-groups bound (slot_groups.js) shows the server every group's size;
// in a population of a few dozen users a small group that landed entirely on x_j
// betrays the victim with a probability of the order of the target delta.  Where the
// blanket is small, the divergence of the real view is cheap to compute exactly instead.
//
// Claim.  Let the victim's sets differ in k items, x_1..x_k against x'_1..x'_k (2k <= d
// distinct items; common items are sent alike in both worlds and drop out), each sent
// with probability lambda.  N blanket slots each carry, with probability gamma, an item
// uniform over the d items, else a null.  With b the slots on the d - 2k items outside
// the pairs,
//
//   delta_k(E) = sum_b Binom(N, gamma (d - 2k) / d)(b) Delta_k(N - b)(E),
//
// where Delta_k(M) is the divergence of the counts c on the 2k active items when each of
// M slots lands on every active item with probability q = (gamma/d) / (1 - gamma + 2k gamma/d)
// and is a null otherwise:
//
//   P(c) = sum_{T subset of 1..k} lambda^|T| (1 - lambda)^(k - |T|) Mult_M(c - e_T),
//   Q(c) = the same with the shifts e'_T on the x'_j,
//   Delta_k(M)(E) = sum_c max(0, P(c) - e^E Q(c)).
//
// As for one item (slot_single.js), b has the same law in both worlds and is read off
// the histogram, its split over the outside items cancels, and an observed label with
// the same law in both worlds averages the divergence with equality.  Sets differing in
// fewer items are the k' < k case, so the user's bound is the largest delta_k'.
//
// Bucketing and truncation.  Delta_k(M) does not grow with M (one more independent slot
// is a randomised map applied to both views): every b of a bucket is charged the view at
// M = N - b_hi, and the mass of b above the window is charged 1.  Within one M the views
// with more than K active messages are left out and charged their P-mass, at most
// Pr[Binomial(M, 2kq) > K - k].
//
// Numerics.  Every Mult_M value is a product of log-factorials and two logarithms,
// relatively accurate to far better than ROUNDING; a value that underflows costs at most
// UNDERFLOW per atom.  A term P - e^E Q is counted only where positive, so its rounding is
// at most ROUNDING (P + e^E Q) <= 2 ROUNDING P; terms rounding could have dropped are
// charged the same way.

import { registeredCache, keyOf } from "./cache.js";
import { AccountantError } from "./errors.js";
import { binomCdf, binomSf, compensatedSum, lnFactorial, upperQuantile } from "./distributions.js";

/** The most float64 values (views times 2 (k + 1) polynomial terms) one joint view may store. */
export const MAX_VALUES = 6_000_000;

/** Enumerated joint views kept in memory. */
const JOINT_VIEWS_KEPT = 4;

/** P-mass a bucket's truncation at K may leave out (charged 1). */
const VIEW_TAIL = 1e-13;

/** Mass of b above the summed window (charged 1). */
const BUCKET_TAIL = 1e-13;

/** Where the window of b is at most this wide, every b is a bucket of its own. */
const EXACT_WIDTH = 48;

/** Bucket edges, in standard deviations of b from its mean, for wider windows. */
const BUCKET_EDGES = [-7.0, -4.0, -3.0, -2.4, -2.0, -1.6, -1.3, -1.0, -0.8, -0.6, -0.4, -0.2,
  0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.4, 3.0, 3.6, 4.3, 5.0, 6.0, 7.0, 8.5];

/**
 * Bucket edges of the coarser plans, tried in turn where the finer plan exceeds MAX_VALUES:
 * wider buckets at low b (where the views are many), fine ones at high b (where a wide
 * bucket would be charged at a small slot count); each is charged at its largest b.
 */
const COARSE_BUCKET_EDGES = [
  [-3.0, -2.0, -1.5, -1.0, -0.6, -0.3, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.4, 3.0,
    3.6, 4.3, 5.0, 6.0, 7.0, 8.5],
  [-2.0, -1.0, -0.5, 0.0, 0.3, 0.6, 1.0, 1.4, 1.8, 2.2, 2.6, 3.0, 3.6, 4.3, 5.0, 6.0, 7.0, 8.5],
  [0.5, 1.0, 1.5, 2.0, 2.6, 3.2, 4.0, 5.0, 6.0, 7.0, 8.5],
];

/** Relative rounding error charged per counted term. */
const ROUNDING = 1e-11;

/** Mass an underflowed multinomial value may have lost, per atom and shift. */
const UNDERFLOW = 1e-300;

/**
 * C(n, k) as a double (exact below 2^53; only compared with MAX_VALUES above).
 * @param {number} n @param {number} k
 */
function binomialCoefficient(n, k) {
  let value = 1n;
  for (let i = 1; i <= k; i += 1) value = (value * BigInt(n - k + i)) / BigInt(i);
  return Number(value);
}

/** The number of vectors of `parts` non-negative integers with sum at most `total`. */
export function atomCount(parts, total) {
  return binomialCoefficient(total + parts, parts);
}

/**
 * Every vector of `parts` non-negative integers with sum at most `total`, in
 * lexicographic order (first coordinate slowest), as rows of a flat array.
 * @param {number} parts @param {number} total @returns {Int32Array}
 */
export function compositionsUpTo(parts, total) {
  const count = atomCount(parts, total);
  const rows = new Int32Array(count * parts);
  const current = new Int32Array(parts);
  let row = 0;
  /** @param {number} position @param {number} room */
  const fill = (position, room) => {
    if (position === parts) {
      rows.set(current, row * parts);
      row += 1;
      return;
    }
    for (let value = 0; value <= room; value += 1) {
      current[position] = value;
      fill(position + 1, room - value);
    }
  };
  fill(0, total);
  return rows;
}

/**
 * A table of C(a, b) for a <= total + parts + 1 and b <= parts, for ranking.
 * @param {number} parts @param {number} total @returns {Float64Array[]}
 */
function rankTable(parts, total) {
  const top = total + parts + 1;
  const table = [];
  for (let a = 0; a <= top; a += 1) {
    const row = new Float64Array(parts + 1);
    for (let b = 0; b <= Math.min(a, parts); b += 1) {
      row[b] = b === 0 ? 1 : table[a - 1][b - 1] + (b <= a - 1 ? table[a - 1][b] : 0);
    }
    table.push(row);
  }
  return table;
}

/**
 * The index of one vector in {@link compositionsUpTo}: the vectors that agree with v
 * before coordinate i and are smaller there number C(R_i + p_i + 1, p_i + 1)
 * - C(R_i - v_i + p_i + 1, p_i + 1), with p_i coordinates after it and R_i the total
 * left after the prefix.
 * @param {ArrayLike<number>} vector @param {number} total @param {Float64Array[]} table
 */
function compositionRank(vector, total, table) {
  const parts = vector.length;
  let rank = 0;
  let room = total;
  for (let i = 0; i < parts; i += 1) {
    const after = parts - i - 1;
    rank += table[room + after + 1][after + 1] - table[room - vector[i] + after + 1][after + 1];
    room -= vector[i];
  }
  return rank;
}

/**
 * @typedef {object} Bucket
 * @property {number} weight Pr[b in the bucket]
 * @property {number} slots the slot count M charged
 * @property {Float64Array[]} pTerms pTerms[j][i] = sum over j-subsets T of Mult_M(view i - e_T)
 * @property {Float64Array[]} qTerms the same with the shifts on the x'_j
 */

/**
 * Buckets [b_lo, b_hi] covering b ~ Binomial(N, q_out) up to the window's top, and the
 * mass above it; `coarse` = i >= 1 cuts at COARSE_BUCKET_EDGES[i - 1] however narrow the
 * window.
 * @param {number} nSlots @param {number} qOut @param {number} coarse
 * @returns {[Array<[number, number]>, number]}
 */
function bucketWindow(nSlots, qOut, coarse) {
  if (qOut <= 0.0 || nSlots === 0) return [[[0, 0]], 0.0];
  const mean = nSlots * qOut;
  const sd = Math.sqrt(nSlots * qOut * (1.0 - qOut));
  const hi = upperQuantile(nSlots, qOut, BUCKET_TAIL);
  const above = hi < nSlots ? binomSf(hi, nSlots, qOut) : 0.0;
  const cuts = coarse > 0 ? COARSE_BUCKET_EDGES[coarse - 1] : BUCKET_EDGES;
  const lo = Math.max(0, Math.floor(mean + cuts[0] * sd));
  let tops;
  if (hi - lo + 1 <= EXACT_WIDTH && coarse === 0) {
    tops = [];
    for (let b = lo; b <= hi; b += 1) tops.push(b);
  } else {
    const set = new Set(cuts.map((z) => Math.min(hi, Math.max(lo, Math.floor(mean + z * sd)))));
    set.add(hi);
    tops = [...set].sort((a, b) => a - b);
  }
  /** @type {Array<[number, number]>} */
  const buckets = [];
  let start = 0;
  for (const top of tops) {
    if (top >= start) {
      buckets.push([start, top]);
      start = top + 1;
    }
  }
  return [buckets, above];
}

/**
 * [weight, charged slot count M, view total K, left-out mass] per bucket, and the number of
 * views they enumerate.
 * @param {Array<[number, number]>} buckets @param {number} n @param {number} qOut
 * @param {number} rate @param {number} k
 * @returns {[Array<[number, number, number, number]>, number]}
 */
function bucketPlan(buckets, n, qOut, rate, k) {
  /** @type {Array<[number, number, number, number]>} */
  const plan = [];
  let atoms = 0;
  for (const [bLo, bHi] of buckets) {
    const weight = qOut > 0.0
      ? binomCdf(bHi, n, qOut) - (bLo > 0 ? binomCdf(bLo - 1, n, qOut) : 0.0)
      : 1.0;
    const slots = n - bHi;
    const [total, truncated] = viewTotal(slots, rate, k);
    plan.push([Math.max(weight, 0.0), slots, total, truncated]);
    atoms += atomCount(2 * k, total);
  }
  return [plan, atoms];
}

/**
 * K, the most active messages enumerated, and the P-mass left out above it.
 * @param {number} slots @param {number} rate @param {number} pairs @returns {[number, number]}
 */
function viewTotal(slots, rate, pairs) {
  if (slots === 0 || rate <= 0.0) return [pairs, 0.0];
  const spread = Math.min(1.0, 2 * pairs * rate);
  const blanket = upperQuantile(slots, spread, VIEW_TAIL);
  const left = blanket < slots ? binomSf(blanket, slots, spread) : 0.0;
  return [blanket + pairs, left];
}

/** x ln y, 0 at x = 0. */
function xlogy(x, y) {
  return x === 0 ? 0.0 : x * Math.log(y);
}

/**
 * The enumerated views of one bucket, as polynomials in lambda.
 * @returns {Bucket}
 */
function makeBucket(weight, slots, gamma, domainSize, pairs, total) {
  const inside = (1.0 - gamma) + (2.0 * pairs * gamma) / domainSize;
  const rate = (gamma / domainSize) / inside;
  const nullRate = (1.0 - gamma) / inside;
  const parts = 2 * pairs;
  const views = compositionsUpTo(parts, total);
  const count = views.length / parts;
  let largest = 0;
  for (let i = 0; i < views.length; i += 1) largest = Math.max(largest, views[i]);
  const top = Math.max(slots, largest);
  const logFactorials = new Float64Array(top + 2);
  for (let k = 0; k < top + 2; k += 1) logFactorials[k] = lnFactorial(k);
  // Mult_M of every view (the views are valid: non-negative, total <= K; those above M
  // have probability 0), and 0 at index `count` for shifted views outside the set.
  const blanket = new Float64Array(count + 1);
  for (let i = 0; i < count; i += 1) {
    let sum = 0;
    let logs = 0;
    for (let j = 0; j < parts; j += 1) {
      const c = views[i * parts + j];
      sum += c;
      logs += logFactorials[c];
    }
    if (sum > slots) continue;
    const nulls = slots - sum;
    const logValue = logFactorials[slots] - logs - logFactorials[nulls]
      + xlogy(sum, rate) + xlogy(nulls, nullRate);
    blanket[i] = Math.exp(logValue);
  }
  const table = rankTable(parts, total);
  const pTerms = Array.from({ length: pairs + 1 }, () => new Float64Array(count));
  const qTerms = Array.from({ length: pairs + 1 }, () => new Float64Array(count));
  const moved = new Int32Array(parts);
  for (let mask = 0; mask < 1 << pairs; mask += 1) {
    let size = 0;
    for (let j = 0; j < pairs; j += 1) size += (mask >> j) & 1;
    for (const side of [0, 1]) {
      const terms = side === 0 ? pTerms[size] : qTerms[size];
      for (let i = 0; i < count; i += 1) {
        let valid = true;
        for (let j = 0; j < parts; j += 1) {
          const inPair = j % pairs;
          const shifted = Math.floor(j / pairs) === side ? (mask >> inPair) & 1 : 0;
          moved[j] = views[i * parts + j] - shifted;
          if (moved[j] < 0) valid = false;
        }
        terms[i] += blanket[valid ? compositionRank(moved, total, table) : count];
      }
    }
  }
  return { weight, slots, pTerms, qTerms };
}

/** delta_k of the module comment for one (N, gamma, d, k): an upper bound (plan and cached views). */
/**
 * A lower bound on the values (views times 2 (k + 1)) of every plan of the joint view, known
 * before the plan is built (the proof is in the Python accountants' joint_budget module):
 * the top bucket has at least N - ceil(N q_out + t) - 1 slots, t from Bernstein's inequality
 * at BUCKET_TAIL, and its view total is at least k + floor(M s) - 1 (the median).
 * @param {number} n @param {number} qOut @param {number} rate @param {number} k @returns {number}
 */
function valuesFloor(n, qOut, rate, k) {
  const logTail = -Math.log(BUCKET_TAIL);
  const q = Math.min(Math.max(qOut, 0.0), 1.0);
  const variance = n * q * (1.0 - q);
  const reach = logTail / 3.0 + Math.sqrt((logTail * logTail) / 9.0 + 2.0 * logTail * variance);
  const top = Math.ceil(n * q + reach) + 1;
  const slots = Math.max(0, n - top);
  const spread = Math.min(1.0, 2 * k * Math.max(rate, 0.0));
  const total = k + Math.max(0, Math.floor(slots * spread) - 1);
  return atomCount(2 * k, total) * 2 * (k + 1);
}

export class JointView {
  /** @param {number} nSlots @param {number} gamma @param {number} domainSize @param {number} pairs */
  constructor(nSlots, gamma, domainSize, pairs) {
    const n = nSlots;
    const d = domainSize;
    const k = pairs;
    if (!(k >= 1 && 2 * k <= d && gamma > 0.0 && gamma <= 1.0 && n >= 0)) {
      throw new AccountantError(`no joint view for N=${n}, gamma=${gamma}, d=${d}, k=${k}`);
    }
    this.nSlots = nSlots;
    this.gamma = gamma;
    this.domainSize = domainSize;
    this.pairs = pairs;
    const qOut = (gamma * (d - 2 * k)) / d;
    const inside = (1.0 - gamma) + (2.0 * k * gamma) / d;
    const rate = (gamma / d) / inside;
    let buckets;
    let above;
    let plan;
    let atoms;
    let coarse = 0;
    const floor = valuesFloor(n, qOut, rate, k);
    if (floor > MAX_VALUES) {  // no plan fits: not planned (valuesFloor)
      this.coarse = COARSE_BUCKET_EDGES.length;
      this.above = 1.0;
      this.atoms = floor / (2 * (k + 1));
      this.values = floor;
      this.leftOut = 1.0;
      this.plan = [];
      return;
    }
    for (; coarse <= COARSE_BUCKET_EDGES.length; coarse += 1) {
      [buckets, above] = bucketWindow(n, qOut, coarse);
      [plan, atoms] = bucketPlan(buckets, n, qOut, rate, k);
      if (atoms * 2 * (k + 1) <= MAX_VALUES || coarse === COARSE_BUCKET_EDGES.length) break;
    }
    /** The plan's 1-based index in COARSE_BUCKET_EDGES (0: a bucket per b or BUCKET_EDGES). */
    this.coarse = coarse;
    this.above = above;
    this.atoms = atoms;
    this.values = atoms * 2 * (k + 1);
    let leftOut = 0;
    for (const [weight, , total, truncated] of plan) {
      leftOut += weight * (truncated + UNDERFLOW * atomCount(2 * k, total) * (1 << k));
    }
    /** What an upper bound charges beyond the enumerated views. */
    this.leftOut = this.above + leftOut;
    this.plan = plan;
  }

  /** Whether the enumeration fits the MAX_VALUES budget. */
  get usable() {
    return this.values <= MAX_VALUES;
  }

  /** @returns {string} */
  get key() {
    return keyOf(this.nSlots, this.gamma, this.domainSize, this.pairs);
  }

  /**
   * delta_k(E) at rate `lam`: an upper bound.
   * @param {number} eps @param {number} lam @returns {number}
   */
  delta(eps, lam) {
    if (lam === 0.0) return 0.0;
    const [p, q] = jointMasses(this, lam);
    const e = Math.exp(eps);
    const positive = new Float64Array(p.length);
    const near = new Float64Array(p.length);
    for (let i = 0; i < p.length; i += 1) {
      const scaled = e * q[i];
      const gap = p[i] - scaled;
      positive[i] = Math.max(gap, 0.0);
      // Terms rounding could have moved across zero count towards the error too.
      if (gap > -2.0 * ROUNDING * (p[i] + scaled)) near[i] = p[i];
    }
    const value = compensatedSum(positive);
    const error = 2.0 * ROUNDING * compensatedSum(near);
    return Math.min(1.0, value + error + this.leftOut);
  }
}

const bucketsCache = registeredCache(JOINT_VIEWS_KEPT);
const massesCache = registeredCache(2 * JOINT_VIEWS_KEPT);
const jointCache = registeredCache(256);

/** The enumerated buckets of one joint view (large: few are kept). @param {JointView} view */
function jointBuckets(view) {
  return bucketsCache.get(view.key, () => {
    if (!view.usable) {
      throw new AccountantError(`${view.values} stored values exceed the budget of ${MAX_VALUES}`);
    }
    return view.plan.filter(([weight]) => weight > 0.0).map(([weight, slots, total]) =>
      makeBucket(weight, slots, view.gamma, view.domainSize, view.pairs, total));
  });
}

/**
 * [P, Q] of every view at rate `lam`, each bucket's weighted by its probability.
 * @param {JointView} view @param {number} lam @returns {[Float64Array, Float64Array]}
 */
function jointMasses(view, lam) {
  return massesCache.get(keyOf(view.key, lam), () => {
    const k = view.pairs;
    const mix = Array.from({ length: k + 1 }, (_, j) => lam ** j * (1.0 - lam) ** (k - j));
    const buckets = jointBuckets(view);
    let size = 0;
    for (const bucket of buckets) size += bucket.pTerms[0].length;
    const p = new Float64Array(size);
    const q = new Float64Array(size);
    let at = 0;
    for (const bucket of buckets) {
      const count = bucket.pTerms[0].length;
      for (let i = 0; i < count; i += 1) {
        let sumP = 0;
        let sumQ = 0;
        for (let j = 0; j <= k; j += 1) {
          sumP += mix[j] * bucket.pTerms[j][i];
          sumQ += mix[j] * bucket.qTerms[j][i];
        }
        p[at + i] = bucket.weight * sumP;
        q[at + i] = bucket.weight * sumQ;
      }
      at += count;
    }
    return [p, q];
  });
}

/**
 * The (cached) plan of the joint view of `pairs` differing items, N slots, rate gamma.
 * @param {number} nSlots @param {number} gamma @param {number} domainSize @param {number} pairs
 * @returns {JointView}
 */
export function jointView(nSlots, gamma, domainSize, pairs) {
  return jointCache.get(keyOf(nSlots, gamma, domainSize, pairs),
    () => new JointView(nSlots, gamma, domainSize, pairs));
}

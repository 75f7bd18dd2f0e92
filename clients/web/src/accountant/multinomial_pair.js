// The privacy loss distribution of the multinomial two-bin pair, for composition: the port
// of segshuffle.core.multinomial_pair (the proof is there).
//
// The pair.  k blanket slots each land on item x with probability r, on x' with
// probability r, and elsewhere (or nowhere) with probability 1 - 2r; the victim adds one
// message to x (world P) or to x' (world Q) with probability lambda.  The observed total t
// on the pair has the same law in both worlds, pi(t) = (1 - lambda) w(t) + lambda w(t - 1)
// with w the Binomial(k, 2r) pmf, and given t the split a on x has
//
//   P(a | t) = h_t(a) (c_t + a) / (c_t + t / 2),   L(a | t) = ln(c_t + a) - ln(c_t + t - a),
//   c_t = ((1 - lambda) / lambda) rho (k - t + 1),  rho = r / (1 - 2r),
//
// h_t the Binomial(t, 1/2) pmf.
//
// Blocks.  The totals are cut into blocks [t_0, t_1] (blockStarts); the block pair reveals
// the block and the split of t_0 messages with the victim's probability of the block's
// top total: c = ((1 - lambda) / lambda) rho (k - t_1 + 1) t_0 / t_1.  The pair is a
// post-processing of the block pair, so every divergence of it and of its compositions
// is at most the block pair's.  A block of one total is exact.
//
// Enumeration.  Totals within WINDOW_SIGMAS standard deviations of the blanket's mean,
// splits within WINDOW_SIGMAS standard deviations of t_0 / 2; the P-mass outside is
// bounded from binomial tails and, in an upper bound, put at +infinity.  Everything but
// pi(B) and c is lambda-free and cached per (k, r).

import { registeredCache, keyOf } from "./cache.js";
import { AccountantError } from "./errors.js";
import { binomCdf, binomLogPmf, binomSf, lnFactorial } from "./distributions.js";
import { gridFloor, roundDownAtoms, spreadAtoms } from "./privacy_loss.js";

/** Standard deviations each side of the means enumerated (the rest is tail mass). */
const WINDOW_SIGMAS = 9.0;

/**
 * Relative width of a block of observed totals: a block starting at total t_0 spans
 * max(1, floor(BLOCK_SHARE min(t_0, k + 1 - t_0))) totals.
 */
const BLOCK_SHARE = 1e-3;

/** The most atoms one pair may enumerate; beyond it {@link pairAtoms} returns null. */
export const MAX_ATOMS = 6_000_000;

/** The most grid points one pair's loss distribution may span; the step grows beyond it. */
const MAX_GRID_POINTS = 1 << 17;

/**
 * The lambda-free part of the block pair.  Per block: its lowest and highest observed
 * totals, the blanket's mass on its totals (here) and one below (before), its splits
 * aLo..aHi.  Per atom, block by block and a increasing: split = h_{t_0}(a).
 * @typedef {object} PairAtoms
 * @property {number} slots k
 * @property {number} r
 * @property {Int32Array} low
 * @property {Int32Array} high
 * @property {Float64Array} here
 * @property {Float64Array} before
 * @property {Int32Array} aLo
 * @property {Int32Array} aHi
 * @property {Float64Array} split
 * @property {number} tail bound on the P-mass outside the atoms, at every lambda
 */

/** @param {number} slots @param {number} q @returns {[number, number]} */
function totalWindow(slots, q) {
  const mean = slots * q;
  const sigma = Math.sqrt(Math.max(mean * (1.0 - q), 0.0));
  const margin = WINDOW_SIGMAS * sigma + 2.0 * WINDOW_SIGMAS + 2.0;
  return [Math.max(0, Math.floor(mean - margin)), Math.min(slots, Math.ceil(mean + margin))];
}

/** The splits a of `total` messages enumerated. @param {number} total @returns {[number, number]} */
function splitWindow(total) {
  const halfSd = 0.5 * Math.sqrt(Math.max(total, 1));
  const margin = WINDOW_SIGMAS * halfSd + WINDOW_SIGMAS + 2.0;
  return [Math.max(0, Math.floor(total / 2.0 - margin)), Math.min(total, Math.ceil(total / 2.0 + margin))];
}

/**
 * The lowest total of every block covering the observed totals tLo..tEnd of a pair with
 * `slots` slots (the last block is cut at tEnd).
 * @param {number} slots @param {number} tLo @param {number} tEnd @returns {number[]}
 */
export function blockStarts(slots, tLo, tEnd) {
  const starts = [];
  for (let t = tLo; t <= tEnd; t += Math.max(1, Math.floor(BLOCK_SHARE * Math.min(t, slots + 1 - t)))) {
    starts.push(t);
  }
  return starts;
}

/**
 * Whether the pair with `slots` slots at rate `r` has at most MAX_ATOMS atoms, counted
 * block by block without building them (what a bound asks before it relies on the pair).
 * @param {number} slots @param {number} r @returns {boolean}
 */
export function enumerable(slots, r) {
  const [tLo, tHi] = totalWindow(slots, 2.0 * r);
  let count = 0;
  for (const start of blockStarts(slots, tLo, tHi + 1)) {
    const [aLo, aHi] = splitWindow(start);
    count += aHi - aLo + 1;
  }
  return count <= MAX_ATOMS;
}

/** Pr[Binomial(trials, p) < lo] + Pr[Binomial(trials, p) > hi]. */
function tailOutside(trials, p, lo, hi) {
  const below = lo > 0 ? binomCdf(Math.max(lo - 1, 0), trials, p) : 0.0;
  const above = hi < trials ? binomSf(Math.min(hi, trials), trials, p) : 0.0;
  return below + above;
}

const atomsCache = registeredCache(16);

/**
 * The atoms of the pair with `slots` blanket slots at rate `r` (null: too many).
 * @param {number} slots @param {number} r @returns {PairAtoms | null}
 */
export function pairAtoms(slots, r) {
  return atomsCache.get(keyOf(slots, r), () => {
    if (!(r > 0.0 && r < 0.5)) throw new AccountantError(`r must be in (0, 1/2), got ${r}`);
    const q = 2.0 * r;
    if (!enumerable(slots, r)) return null;
    const [tLo, tHi] = totalWindow(slots, q);
    const starts = blockStarts(slots, tLo, tHi + 1);
    const blocks = starts.length;
    const low = Int32Array.from(starts);
    const high = new Int32Array(blocks);
    const aLo = new Int32Array(blocks);
    const aHi = new Int32Array(blocks);
    let count = 0;
    for (let i = 0; i < blocks; i += 1) {
      high[i] = i + 1 < blocks ? low[i + 1] - 1 : tHi + 1;
      [aLo[i], aHi[i]] = splitWindow(low[i]);
      count += aHi[i] - aLo[i] + 1;
    }
    const weights = new Float64Array(tHi - tLo + 3);  // w(t) for t = tLo - 1 .. tHi + 1
    for (let i = 0; i < weights.length; i += 1) weights[i] = Math.exp(binomLogPmf(tLo - 1 + i, slots, q));
    const here = new Float64Array(blocks);
    const before = new Float64Array(blocks);
    for (let i = 0; i < blocks; i += 1) {
      let hereSum = 0.0;
      let beforeSum = 0.0;
      for (let j = low[i] - tLo; j <= high[i] - tLo; j += 1) {
        hereSum += weights[j + 1];
        beforeSum += weights[j];
      }
      here[i] = hereSum;
      before[i] = beforeSum;
    }
    const split = new Float64Array(count);
    const log2 = Math.log(2.0);
    let outside = tailOutside(slots, q, tLo, tHi);
    let at = 0;
    for (let i = 0; i < blocks; i += 1) {
      const t0 = low[i];
      const logT = lnFactorial(t0);
      const tLog2 = t0 * log2;
      for (let a = aLo[i]; a <= aHi[i]; a += 1) {
        split[at] = Math.exp(logT - lnFactorial(a) - lnFactorial(t0 - a) - tLog2);
        at += 1;
      }
      outside += 2.0 * Math.max(here[i], before[i]) * tailOutside(t0, 0.5, aLo[i], aHi[i]);
    }
    return { slots, r, low, high, here, before, aLo, aHi, split, tail: outside };
  });
}

/**
 * (L, P-mass) of every atom of the block pair at rate `lam`, in the atoms' order.  Atoms
 * world P cannot produce get L = -inf and P-mass 0 (callers drop them); those world Q
 * cannot produce get L = +inf.
 * @param {PairAtoms} atoms @param {number} lam @returns {[Float64Array, Float64Array]}
 */
export function pairLosses(atoms, lam) {
  const loss = new Float64Array(atoms.split.length);
  const pMass = new Float64Array(atoms.split.length);
  let at = 0;
  for (let i = 0; i < atoms.low.length; i += 1) {
    const [pi, c] = blockRates(atoms, lam, i);
    at += writeBlockAtoms(atoms, i, at, pi, c, loss, pMass, at);
  }
  return [loss, pMass];
}

/** [pi(B), c] of block `i` at rate `lam` (c = 0 where t0 = 0). */
function blockRates(atoms, lam, i) {
  const t0 = atoms.low[i];
  const pi = (1.0 - lam) * atoms.here[i] + lam * atoms.before[i];
  if (t0 === 0) return [pi, 0.0];
  const rho = atoms.r / (1.0 - 2.0 * atoms.r);
  return [pi, ((1.0 - lam) / lam) * rho * (atoms.slots - atoms.high[i] + 1.0) * t0 / atoms.high[i]];
}

/**
 * (L, P-mass) of block `i`'s atoms (the first of which is atom `at`), written to `loss` and
 * `pMass` from index `out`; returns their number.
 */
function writeBlockAtoms(atoms, i, at, pi, c, loss, pMass, out) {
  const t0 = atoms.low[i];
  const middle = c + 0.5 * t0;
  let k = out;
  for (let a = atoms.aLo[i]; a <= atoms.aHi[i]; a += 1, k += 1) {
    const h = atoms.split[at + k - out];
    loss[k] = t0 === 0 ? 0.0 : Math.log(c + a) - Math.log(c + (t0 - a));
    pMass[k] = t0 === 0 ? pi * h : pi * h * ((c + a) / middle);
  }
  return k - out;
}

/**
 * A block is summed cell by cell when it has at least this many atoms per grid cell it
 * spans (the Python accountants' rule).
 */
const ATOMS_PER_CELL = 8;

/** Unit roundoff of a float64. */
const UNIT_ROUNDOFF = 2 ** -53;

/** L(a | t0) = ln(c + a) - ln(c + t0 - a), as pairLosses has it. */
function splitLoss(c, t0, a) {
  return Math.log(c + a) - Math.log(c + (t0 - a));
}

/**
 * The loss distribution of the pair at rate `lam` on the grid `step`.  Atoms of
 * infinite loss go to the infinity atom (with the window's tail, in an upper bound);
 * atoms of loss -infinity never reach delta and are dropped.  The step grows when the
 * losses span more than MAX_GRID_POINTS points.  In an upper bound at lambda < 1, blocks
 * with c > 0 and at least ATOMS_PER_CELL atoms per grid cell are put on the grid cell by
 * cell (the proof is in the Python accountant's multinomial_pair.pair_loss): each cell
 * moves (P - e^{x'} Q) / (1 - e^{-h}) up, from the sums of h and a h over its run of
 * splits, widened for their rounding.
 * @param {PairAtoms} atoms @param {number} lam @param {{upper: boolean, step: number}} options
 * @returns {import("./privacy_loss.js").LossDistribution}
 */
export function multinomialPairLoss(atoms, lam, { upper, step }) {
  if (!(lam > 0.0 && lam <= 1.0)) throw new AccountantError(`lambda must be in (0, 1], got ${lam}`);
  const cellsAllowed = upper && lam < 1.0;
  const loss = new Float64Array(atoms.split.length);
  const pMass = new Float64Array(atoms.split.length);
  let kept = 0;
  const summed = [];  // [block, first atom, pi, c] of the blocks summed by cells
  let infinity = 0.0;
  let low = Infinity;
  let high = -Infinity;
  let at = 0;
  for (let i = 0; i < atoms.low.length; i += 1) {
    const t0 = atoms.low[i];
    const aLo = atoms.aLo[i];
    const aHi = atoms.aHi[i];
    const [pi, c] = blockRates(atoms, lam, i);
    if (cellsAllowed && t0 > 0 && c > 0.0 && pi > 0.0) {
      const endLo = splitLoss(c, t0, aLo);
      const endHi = splitLoss(c, t0, aHi);
      const cells = gridFloor(endHi, step, true) - gridFloor(endLo, step, true) + 1;
      if (cells * ATOMS_PER_CELL <= aHi - aLo + 1) {
        summed.push([i, at, pi, c]);
        if (endLo < low) low = endLo;
        if (endHi > high) high = endHi;
        at += aHi - aLo + 1;
        continue;
      }
    }
    // The block atom by atom: written after the atoms kept so far, then kept or not.
    const count = writeBlockAtoms(atoms, i, at, pi, c, loss, pMass, kept);
    at += count;
    const written = kept;
    for (let k = written; k < written + count; k += 1) {
      const atomLoss = loss[k];
      const mass = pMass[k];
      if (!(mass > 0.0)) continue;
      if (atomLoss === Infinity) infinity += mass;
      else if (Number.isFinite(atomLoss)) {
        loss[kept] = atomLoss;
        pMass[kept] = mass;
        kept += 1;
        if (atomLoss < low) low = atomLoss;
        if (atomLoss > high) high = atomLoss;
      }
    }
  }
  if (upper) infinity += atoms.tail;
  if (low === Infinity) {
    return { step, offset: 0, pmf: new Float64Array(1), infinity: Math.min(infinity, 1.0), noise: 0.0 };
  }
  step = Math.max(step, (high - low) / MAX_GRID_POINTS);
  // privacy_loss.js discretise over the finite atoms of positive mass.
  const offset = gridFloor(low, step, upper);
  const pmf = new Float64Array(gridFloor(high, step, upper) - offset + (upper ? 2 : 1));
  const singleLoss = loss.subarray(0, kept);
  const singleMass = pMass.subarray(0, kept);
  if (upper) {
    const raised = new Float64Array(pmf.length);
    spreadAtoms(singleLoss, singleMass, step, offset, pmf, raised);
    for (const [block, first, pi, c] of summed) {
      spreadCells(atoms, block, first, pi, c, step, offset, pmf, raised);
    }
    for (let i = 0; i < pmf.length; i += 1) pmf[i] += raised[i];
  } else {
    roundDownAtoms(singleLoss, singleMass, step, offset, pmf);
  }
  return { step, offset, pmf, infinity: Math.min(infinity, 1.0), noise: 0.0 };
}

/**
 * One block's atoms on the grid cell by cell: the run of splits whose grid index
 * floor(L / h + 1e-9) is j moves min(P, ((P - e^{(j - 1e-9) h} Q)_+ (1 + 1e-12) +
 * rounding P) / (1 - e^{-h})) of its P-mass P to `raised[j + 1 - offset]`, the rest to
 * `lower[j - offset]`.
 */
function spreadCells(atoms, block, startAtom, pi, c, step, offset, lower, raised) {
  const t0 = atoms.low[block];
  const aLo = atoms.aLo[block];
  const aHi = atoms.aHi[block];
  const base = startAtom - aLo;  // the atom of split a is at base + a
  const cell = (a) => gridFloor(splitLoss(c, t0, a), step, true);
  const lift = 1.0 / -Math.expm1(-step);
  const scale = pi / (c + 0.5 * t0);
  let first = aLo;
  const lastCell = cell(aHi);
  for (let j = cell(aLo); j <= lastCell; j += 1) {
    let end = aHi + 1;
    if (j < lastCell) {
      // The least a with cell(a) >= j + 1: inverted, then checked.
      const grow = Math.exp((j + 1 - 1e-9) * step);
      const guess = ((c + t0) * grow - c) / (1.0 + grow);
      end = Number.isFinite(guess) ? Math.min(Math.max(Math.ceil(guess), first), aHi) : first;
      while (end <= aHi && cell(end) <= j) end += 1;
      while (end > first && cell(end - 1) > j) end -= 1;
    }
    if (end > first) {
      let s0 = 0.0;
      let s1 = 0.0;
      for (let a = first; a < end; a += 1) {
        const h = atoms.split[base + a];
        s0 += h;
        s1 += a * h;
      }
      const count = end - first;
      const pCell = scale * (c * s0 + s1);
      const qCell = scale * ((c + t0) * s0 - s1);
      const rounding = 2.0 * (count + 2.0) * UNIT_ROUNDOFF * (1.0 + (c + t0) / (c + t0 - (end - 1)))
        + 4.0 * UNIT_ROUNDOFF;
      const moved = Math.max(pCell - Math.exp((j - 1e-9) * step) * qCell, 0.0);
      const up = Math.min(pCell, (moved * (1.0 + 1e-12) + rounding * pCell) * lift);
      lower[j - offset] += pCell - up;
      raised[j + 1 - offset] += up;
    }
    first = end;
  }
}

// The privacy loss distribution of the multinomial two-bin pair, for composition.
//
// The pair.  k blanket slots each land on item x with probability r, on x' with
// probability r, and elsewhere (or nowhere) with probability 1 - 2r; the victim adds one
// message to x (world P) or to x' (world Q) with probability lambda.  The counts (a, b)
// on (x, x') have
//
//   P(a, b) = (1 - lambda) M(a, b) + lambda M(a - 1, b),
//   Q(a, b) = (1 - lambda) M(a, b) + lambda M(a, b - 1),
//
// with M the Multinomial(k; r, r) mass of the blanket: the count pair of hockey_stick.js,
// whose loss distribution is needed here to compose several pairs.
//
// The loss.  With t = a + b and rho = r / (1 - 2r), M(a - 1, b) / M(a, b) = a / (rho (k - t + 1)),
//
//   L(a, b) = ln(u + lambda a) - ln(u + lambda b),   u = (1 - lambda) rho (k - t + 1),
//
// (at t = k + 1, u = 0 and L = ln(a / b)).  Under P the total is t = T + V with
// T ~ Binomial(k, 2r), and given T the blanket splits as Binomial(T, 1/2).
//
// Enumeration.  Every (T, A) in a window of WINDOW_SIGMAS standard deviations around the
// means is an atom; the mass outside is computed from the binomial tails and, in an
// upper bound, put at +infinity.  The atoms' masses do not depend on lambda and are
// cached per (k, r); the atoms are put on the grid of privacy_loss.js as there
// (connecting the dots in an upper bound, rounding down in a lower one), and its
// composition then applies.

import { registeredCache, keyOf } from "./cache.js";
import { AccountantError } from "./errors.js";
import { binomCdf, binomLogPmf, binomSf, lnFactorial } from "./distributions.js";
import { gridFloor, roundDownAtoms, spreadAtoms } from "./privacy_loss.js";

/** Standard deviations each side of the means enumerated (the rest is tail mass). */
const WINDOW_SIGMAS = 9.0;

/** The most atoms one pair may enumerate; beyond it {@link pairAtoms} returns null. */
export const MAX_ATOMS = 6_000_000;

/** The most grid points one pair's loss distribution may span; the step grows beyond it. */
const MAX_GRID_POINTS = 1 << 17;

/**
 * @typedef {object} PairAtoms
 * @property {number} slots k
 * @property {number} r
 * @property {Int32Array} t blanket totals T of the atoms
 * @property {Int32Array} a blanket counts A on x
 * @property {Float64Array} mass w(T) h_T(A)
 * @property {number} tail blanket mass outside the window
 */

/** @param {number} slots @param {number} q @returns {[number, number]} */
function totalWindow(slots, q) {
  const mean = slots * q;
  const sigma = Math.sqrt(Math.max(mean * (1.0 - q), 0.0));
  const margin = WINDOW_SIGMAS * sigma + 2.0 * WINDOW_SIGMAS + 2.0;
  return [Math.max(0, Math.floor(mean - margin)), Math.min(slots, Math.ceil(mean + margin))];
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
    const [tLo, tHi] = totalWindow(slots, q);
    const totals = tHi - tLo + 1;
    const aLo = new Int32Array(totals);
    const aHi = new Int32Array(totals);
    let count = 0;
    for (let i = 0; i < totals; i += 1) {
      const t = tLo + i;
      const halfSd = 0.5 * Math.sqrt(Math.max(t, 1));
      const margin = WINDOW_SIGMAS * halfSd + WINDOW_SIGMAS + 2.0;
      aLo[i] = Math.max(0, Math.floor(t / 2.0 - margin));
      aHi[i] = Math.min(t, Math.ceil(t / 2.0 + margin));
      count += aHi[i] - aLo[i] + 1;
    }
    if (count > MAX_ATOMS) return null;
    const atomT = new Int32Array(count);
    const atomA = new Int32Array(count);
    const mass = new Float64Array(count);
    const log2 = Math.log(2.0);
    let outside = tailOutside(slots, q, tLo, tHi);
    let at = 0;
    for (let i = 0; i < totals; i += 1) {
      const t = tLo + i;
      const logWeight = binomLogPmf(t, slots, q);
      const logT = lnFactorial(t);
      for (let a = aLo[i]; a <= aHi[i]; a += 1) {
        atomT[at] = t;
        atomA[at] = a;
        const logSplit = logT - lnFactorial(a) - lnFactorial(t - a) - t * log2;
        mass[at] = Math.exp(logWeight + logSplit);
        at += 1;
      }
      // Splits outside [a_lo, a_hi] within the window's totals.
      outside += Math.exp(logWeight) * tailOutside(t, 0.5, aLo[i], aHi[i]);
    }
    return { slots, r, t: atomT, a: atomA, mass, tail: outside };
  });
}

/**
 * The observed points of the pair (each atom reached without and with the victim's
 * message) with their loss L = ln(u + lam a) - ln(u + lam b) and P-mass.  Points world P
 * cannot produce get L = -inf or NaN; callers drop them.
 * @param {PairAtoms} atoms @param {number} lam @returns {[Float64Array, Float64Array]}
 */
export function pairLosses(atoms, lam) {
  const rho = atoms.r / (1.0 - 2.0 * atoms.r);
  const count = atoms.t.length;
  const loss = new Float64Array(2 * count);
  const pMass = new Float64Array(2 * count);
  const scale = (1.0 - lam) * rho;
  for (let shift = 0; shift <= 1; shift += 1) {
    const share = shift === 0 ? 1.0 - lam : lam;
    for (let i = 0; i < count; i += 1) {
      const t = atoms.t[i] + shift;
      const a = atoms.a[i] + shift;
      const b = t - a;
      const remaining = Math.max(atoms.slots - t + 1.0, 0.0);
      const u = scale * remaining;
      loss[shift * count + i] = Math.log(u + lam * a) - Math.log(u + lam * b);
      pMass[shift * count + i] = share * atoms.mass[i];
    }
  }
  return [loss, pMass];
}

/**
 * The loss distribution of the pair at rate `lam` on the grid `step`.  Atoms of
 * infinite loss go to the infinity atom (with the window's tail, in an upper bound);
 * atoms of loss -infinity never reach delta and are dropped.  The step grows when the
 * losses span more than MAX_GRID_POINTS points.
 * @param {PairAtoms} atoms @param {number} lam @param {{upper: boolean, step: number}} options
 * @returns {import("./privacy_loss.js").LossDistribution}
 */
export function multinomialPairLoss(atoms, lam, { upper, step }) {
  if (!(lam > 0.0 && lam <= 1.0)) throw new AccountantError(`lambda must be in (0, 1], got ${lam}`);
  const [loss, pMass] = pairLosses(atoms, lam);
  let infinity = 0.0;
  let low = Infinity;
  let high = -Infinity;
  let finiteCount = 0;
  for (let i = 0; i < loss.length; i += 1) {
    if (!(pMass[i] > 0.0)) continue;
    if (loss[i] === Infinity) infinity += pMass[i];
    else if (Number.isFinite(loss[i])) {
      finiteCount += 1;
      if (loss[i] < low) low = loss[i];
      if (loss[i] > high) high = loss[i];
    }
  }
  if (upper) infinity += atoms.tail;
  if (finiteCount === 0) {
    return { step, offset: 0, pmf: new Float64Array(1), infinity: Math.min(infinity, 1.0), noise: 0.0 };
  }
  step = Math.max(step, (high - low) / MAX_GRID_POINTS);
  // privacy_loss.js discretise over the finite atoms of positive mass, in their order.
  const offset = gridFloor(low, step, upper);
  const pmf = new Float64Array(gridFloor(high, step, upper) - offset + (upper ? 2 : 1));
  if (upper) {
    const raised = new Float64Array(pmf.length);
    spreadAtoms(loss, pMass, step, offset, pmf, raised);
    for (let i = 0; i < pmf.length; i += 1) pmf[i] += raised[i];
  } else {
    roundDownAtoms(loss, pMass, step, offset, pmf);
  }
  return { step, offset, pmf, infinity: Math.min(infinity, 1.0), noise: 0.0 };
}

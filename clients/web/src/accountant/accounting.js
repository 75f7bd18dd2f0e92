// User-level privacy accounting of the segmented protocol: an upper bound on delta_user.
//
// The server sees the whole histogram of decrypted messages, null messages included;
// every bound here is a bound on that full view.  `users` is h, the number of honest
// users whose blanket is guaranteed, the victim included.  A user at level E with
// Poisson rate lambda is protected when delta_user(E) <= delta.
//
// Slot blanket (the paper's).  N = h ceil(m) - 1 slots each land on a given item with
// probability r = gamma / d.  The smallest of the bounds that apply is taken:
//
// - one differing pair at most (S = min(s, d // 2) = 1): the exact mixture of
//   slot_single.js, over all h ceil(m) slots (the victim's own included);
// - S >= 2 and a blanket small enough to enumerate: the exact joint view of
//   slot_joint.js, the largest over k = 1..S differing items;
// - otherwise, S >= 2: the labelled-groups bound of slot_groups.js where it applies;
// - beside those, the revealed-send bound: reveal the victim's send indicators V (they
//   do not depend on its data); by joint convexity
//
//     delta_user(E) <= sum_{j=1..s} Binom(s, lambda)(j) tau_j(E),
//
//   and given j items sent the view is a post-processing of the counts on at most j
//   disjoint differing pairs, so tau_j = max_{i <= min(j, d // 2)} (D_i + eta_i), with D_1
//   the exact two-bin pair of hockey_stick.js at lambda = 1 and, for i >= 2, D_i the
//   i-fold composition of the lambda = 1 pair with independent Poisson bins whose mean
//   the binomial total dominates up to the slack eta_i (poisson_comparison.js).
//
// Independent blanket.  Every item's blanket count is Binomial(h - 1, m / d),
// independent across items, so the view is exactly the product of one item pair per item
// of x not in x': two s-sets of d items differ in at most min(s, d - s) items, and
// delta_user comes from the min(s, d - s)-fold composed loss distribution, no slack.
//
// Every value is reported as value (1 + 1e-9) + 1e-15, at most 1: the per-total sums
// lose at most ~1e-11 relative to cancellation and the FFT rounding is charged
// separately, so rounding never puts a reported value below the exact one.

import { AccountantError } from "./errors.js";
import { registeredCache, keyOf } from "./cache.js";
import { BlanketMode, blanketProbability, blanketSlots, parseMode, requireBlanketRate } from "./blanket.js";
import { deltaFor, poissonPair, windowDelta } from "./hockey_stick.js";
import { dominatedPoissonMean } from "./poisson_comparison.js";
import { BinLaw, DEFAULT_STEP, composedPair } from "./privacy_loss.js";
import { MAX_LEVEL } from "../rules.js";
import { GroupsBound } from "./slot_groups.js";
import { jointView } from "./slot_joint.js";
import { singleItemMixture } from "./slot_single.js";
import { requireDomain, requireFinite, requireUnitInterval, requireUsers } from "./validation.js";

/** Share of the target delta that the Poisson comparison's slack may take. */
export const POISSON_SLACK_SHARE = 1e-3;

/** Relative safety margin on every reported delta. */
export const CERTIFIED_RELATIVE_MARGIN = 1e-9;

/** Absolute safety margin on every reported delta. */
export const CERTIFIED_ABSOLUTE_MARGIN = 1e-15;

/** Upper bounds count at most this many expected blanket messages on one item; counting
 * fewer is conservative (less blanket, larger delta) and keeps every window bounded. */
export const ACCOUNTED_BLANKET_PER_ITEM = 1e7;

/** Target delta assumed for the slack when a caller asks for a bare delta_user. */
const DEFAULT_DELTA = 1e-9;

/** Privacy levels whose tau_j one revealed-send bound keeps. */
const TAUS_KEPT = 8;

/**
 * [N, r] of the slot blanket: N = h ceil(m) - 1 slots, r = gamma / d ([0, 0] when m = 0).
 * `everySlot` counts all h ceil(m) slots, the victim's own included: the one-item
 * mixture of slot_single.js, whose proof covers every slot.
 * @param {number} users @param {number} m @param {number} domainSize
 * @param {boolean} [everySlot] @returns {[number, number]}
 */
export function blanketGeometry(users, m, domainSize, everySlot = false) {
  const slots = blanketSlots(m);
  if (slots === 0) return [0, 0.0];
  const nSlots = users * slots - 1 + (everySlot ? 1 : 0);
  return [Math.max(nSlots, 0), blanketProbability(m) / domainSize];
}

/** C(n, k) correctly rounded to a double. @param {number} n @param {number} k */
function binomialCoefficient(n, k) {
  let value = 1n;
  for (let i = 1; i <= k; i += 1) value = (value * BigInt(n - k + i)) / BigInt(i);
  return Number(value);
}

/**
 * Binom(s, lambda)(j) for j = 1..s (exact coefficients times powers: each within a few ulp).
 * @param {number} setSize @param {number} lam @returns {number[]}
 */
function binomialWeights(setSize, lam) {
  const out = [];
  for (let j = 1; j <= setSize; j += 1) {
    out.push(binomialCoefficient(setSize, j) * lam ** j * (1.0 - lam) ** (setSize - j));
  }
  return out;
}

/**
 * tau_j(E) of the revealed-send bound for one (N, r, s, d) and slack budget.  tau_1 is one
 * exact pair; each tau_j for j >= 2 costs a Poisson comparison and a j-fold composition,
 * built on first use, so that a sum that can stop early (userDeltaBelow) never pays for
 * the rest.
 */
class RevealedSendBound {
  /**
   * @param {number} nSlots @param {number} r @param {number} setSize @param {number} domainSize
   * @param {number} slack @param {number} step
   */
  constructor(nSlots, r, setSize, domainSize, slack, step) {
    this.nSlots = nSlots;
    this.r = r;
    this.slack = slack;
    this.step = step;
    this.setSize = setSize;
    this.active = Math.min(setSize, Math.floor(domainSize / 2));
    this.pair = poissonPair(1.0, nSlots, r);
    /** @type {Map<number, [import("./privacy_loss.js").ComposedLoss, number]>} */
    this.terms = new Map();
    /** @type {Map<number, number[]>} per E: tau_1 .. tau_i computed so far */
    this.kept = new Map();
  }

  /** [D_i's composed loss, eta_i] for i >= 2 differing pairs (built on first use).
   * @param {number} i */
  term(i) {
    let term = this.terms.get(i);
    if (term === undefined) {
      const [nu, eta] = dominatedPoissonMean(this.nSlots, Math.min(2.0 * i * this.r, 1.0),
        this.slack);
      term = [composedPair(new BinLaw(nu / (2.0 * i)), 1.0, i, { upper: true, step: this.step }),
        eta];
      this.terms.set(i, term);
    }
    return term;
  }

  /** tau_j(E) (1 <= j <= s), computing tau_1 .. tau_j where not yet kept (the last few
   * levels' kept, each as far as some caller needed).
   * @param {number} eps @param {number} j @returns {number} */
  tau(eps, j) {
    let kept = this.kept.get(eps);
    if (kept === undefined) {
      if (this.kept.size >= TAUS_KEPT) this.kept.delete(this.kept.keys().next().value);
      kept = [];
      this.kept.set(eps, kept);
    }
    if (kept.length === 0) kept.push(this.active > 0 ? deltaFor(this.pair, eps) : 0.0);
    let running = kept.length === 1 ? kept[0] : Math.max(kept[0], kept[kept.length - 1]);
    for (let i = kept.length + 1; i <= j; i += 1) {
      if (this.active === 0) {
        kept.push(0.0);
        continue;
      }
      if (i <= this.active) {
        const [composed, eta] = this.term(i);
        running = Math.max(running, composed.delta(eps) + eta);
      }
      kept.push(Math.min(running, 1.0));
    }
    return kept[j - 1];
  }

  /**
   * min(`ceiling`, sum_j w_j tau_j(E), 1), w_j = Binom(s, lambda)(j), the taus computed
   * only as far as needed: after tau_1 .. tau_i the sum is at least sum_{j <= i} w_j tau_j
   * + (sum_{j > i} w_j) tau_i (the taus do not decrease); once that floor, lowered by a
   * relative 1e-12, reaches `ceiling`, `ceiling` is returned.
   * @param {number} eps @param {number} lam @param {number} ceiling @returns {number}
   */
  userDeltaBelow(eps, lam, ceiling) {
    if (lam === 0.0) return 0.0;
    const weights = binomialWeights(this.setSize, lam);
    const rest = new Array(weights.length).fill(0.0); // rest[i]: the weight of j > i + 1
    for (let i = weights.length - 2; i >= 0; i -= 1) rest[i] = rest[i + 1] + weights[i + 1];
    let sum = 0.0;
    for (let i = 0; i < weights.length; i += 1) {
      const tau = this.tau(eps, i + 1);
      sum += weights[i] * tau;
      if ((sum + rest[i] * tau) * (1.0 - 1e-12) >= ceiling) return ceiling;
    }
    return Math.min(ceiling, Math.min(1.0, sum));
  }
}

/** delta_user of the slot blanket: the smallest of the bounds that apply (module comment). */
class SlotAccountant {
  /**
   * @param {number} nSlots @param {number} gamma @param {number} setSize
   * @param {number} domainSize @param {number} slack @param {number} step
   * @param {number} everySlot all h ceil(m) slots (the one-item mixture's)
   */
  constructor(nSlots, gamma, setSize, domainSize, slack, step, everySlot) {
    this.revealedArguments = [nSlots, nSlots ? gamma / domainSize : 0.0, setSize, domainSize,
      slack, step];
    /** @type {RevealedSendBound | null} */
    this.revealedBound = null;
    this.pairs = Math.min(setSize, Math.floor(domainSize / 2));
    this.single = null;
    this.groups = null;
    /** @type {import("./slot_joint.js").JointView[]} */
    this.joint = [];
    if (this.pairs === 1 && everySlot > 0) {
      this.single = singleItemMixture(everySlot, gamma, domainSize);
    } else if (this.pairs >= 2 && nSlots > 0 && gamma > 0.0) {
      const joint = [];
      for (let k = 1; k <= this.pairs; k += 1) joint.push(jointView(nSlots, gamma, domainSize, k));
      if (joint.every((view) => view.usable)) {
        this.joint = joint;
      } else {
        const groups = new GroupsBound(nSlots, gamma, domainSize, this.pairs, slack, step);
        if (groups.usable) this.groups = groups;
      }
    }
  }

  /** The revealed-send bound, built on first use (its Poisson comparisons cost). */
  get revealed() {
    if (this.revealedBound === null) {
      const [nSlots, r, setSize, domainSize, slack, step] = this.revealedArguments;
      this.revealedBound = new RevealedSendBound(nSlots, r, setSize, domainSize, slack, step);
    }
    return this.revealedBound;
  }

  /** An upper bound on delta_user(E) at rate `lam` (before the certified margins): the
   * smallest of the bounds that apply, the costly revealed-send one last, only as far as
   * it could still be the smaller, and not at all where the others already certify
   * `enough` (a check of delta_user <= delta needs no smaller bound).
   * @param {number} eps @param {number} lam @param {number} [enough] */
  userDelta(eps, lam, enough = 0.0) {
    if (lam === 0.0 || this.pairs === 0) return 0.0;
    if (this.joint.length > 0) { // the full view itself, up to the buckets
      return Math.max(...this.joint.map((view) => view.delta(eps, lam)));
    }
    let value = Infinity;
    if (this.single !== null) value = this.single.delta(eps, lam);
    // At lambda = 1 nothing is subsampled: revealing who sent costs nothing, and the
    // labelled groups (with their union bound) are not worth their loss distributions.
    if (this.groups !== null && lam < 1.0) {
      // A check: the first rung alone may already certify it.
      if (enough > 0.0) value = Math.min(value, this.groups.firstRungDelta(eps, lam));
      if (certified(value) > enough) value = Math.min(value, this.groups.delta(eps, lam));
    }
    if (certified(value) <= enough) return value;
    // Its terms are built only as far as its sum could still come out below `value`.
    return this.revealed.userDeltaBelow(eps, lam, value);
  }
}

/**
 * min(trials, ACCOUNTED_BLANKET_PER_ITEM / p): fewer blanket trials, never more.
 * @param {number} trials @param {number} p
 */
function accountedTrials(trials, p) {
  if (p <= 0.0) return trials;
  return Math.min(trials, Math.floor(ACCOUNTED_BLANKET_PER_ITEM / p));
}

const slotBoundCache = registeredCache(256);

/** The (cached) slot accountant of one campaign geometry and slack. */
function slotBound(users, m, domainSize, setSize, slack, step) {
  return slotBoundCache.get(keyOf(users, m, domainSize, setSize, slack, step), () => {
    const [nSlots, r] = blanketGeometry(users, m, domainSize);
    const everySlot = blanketGeometry(users, m, domainSize, true)[0];
    return new SlotAccountant(accountedTrials(nSlots, r), blanketProbability(m), setSize,
      domainSize, slack, step, accountedTrials(everySlot, r));
  });
}

/**
 * One item's blanket count in the independent mode: Binomial(h - 1, m / d), counting at
 * most ACCOUNTED_BLANKET_PER_ITEM expected messages.
 * @param {number} users @param {number} m @param {number} domainSize
 */
function independentLaw(users, m, domainSize) {
  const p = m / domainSize;
  const trials = accountedTrials(users - 1, p);
  return new BinLaw(trials * p, trials);
}

/** An upper bound widened by the rounding margins, at most 1. @param {number} value */
function certified(value) {
  return Math.min(1.0, value * (1.0 + CERTIFIED_RELATIVE_MARGIN) + CERTIFIED_ABSOLUTE_MARGIN);
}

/**
 * @typedef {object} UserDeltaOptions
 * @property {"slots" | "independent"} [mode] the campaign's blanket mode (default "slots")
 * @property {number | null} [delta] the target delta the caller compares against: it sets
 *   the Poisson slack budget of the slot bound (1e-3 delta; 1e-9 assumed when omitted)
 * @property {number} [enough] a check of delta_user <= enough stops at the first slot
 *   bound that certifies it, so a value at or below enough may be a larger bound than
 *   the smallest one (default 0: the smallest)
 */

/**
 * The validated [mode, E, lambda, h, d, s, m, delta] of a call (userDelta's arguments).
 * @returns {[string, number, number, number, number, number, number, number]}
 */
function validated(level, lambda, setSize, users, m, domainSize, mode, delta) {
  const blanketMode = parseMode(mode);
  const eps = requireFinite("privacy level", level);
  if (!(eps >= 0.0 && eps <= MAX_LEVEL)) {
    throw new AccountantError(`privacy level must be in [0, ${MAX_LEVEL}], got ${level}`);
  }
  const lam = requireUnitInterval("lambda", lambda);
  const h = requireUsers("users", users);
  const [d, s] = requireDomain(domainSize, setSize);
  const rate = requireBlanketRate(m, d, blanketMode);
  let target = DEFAULT_DELTA;
  if (delta !== undefined && delta !== null) {
    target = requireFinite("delta", delta);
    // A budget of zero or less admits no Poisson comparison at all.
    if (!(target > 0.0)) throw new AccountantError(`delta must be > 0, got ${delta}`);
  }
  return [blanketMode, eps, lam, h, d, s, rate, target];
}

/**
 * A certified lower bound on delta_user(E = `level`) when it exceeds `delta`, else null:
 * the exhibited pair of datasets of the Python accountant's refuting_delta (whose
 * docstring has the proof): one user's differing item j0 against j1, nobody else on
 * either, the two-bin counts over every slot; the window's terms only, lowered by the
 * certified margins.  Null in the independent mode, where s > d - 2, or for a blanket too
 * large to sum.  A check asks it first: a level it refutes fails whatever the upper
 * bounds say, and they are not computed.
 * @param {number} level @param {number} lambda @param {number} setSize @param {number} users
 * @param {number} m @param {number} domainSize
 * @param {{ mode?: "slots" | "independent", delta: number }} options
 * @returns {number | null}
 */
export function refutingDelta(level, lambda, setSize, users, m, domainSize,
  { mode = BlanketMode.SLOTS, delta } = /** @type {any} */ ({})) {
  const [blanketMode, eps, lam, h, d, s, rate, target] = validated(
    level, lambda, setSize, users, m, domainSize, mode, requireFinite("delta", delta));
  if (blanketMode !== BlanketMode.SLOTS || lam === 0.0 || s > d - 2) return null;
  const [nSlots, r] = blanketGeometry(h, rate, d, true);
  if (nSlots * r > ACCOUNTED_BLANKET_PER_ITEM) return null;
  const exhibited = windowDelta(poissonPair(lam, nSlots, r), eps);
  const lower = exhibited * (1.0 - CERTIFIED_RELATIVE_MARGIN) - CERTIFIED_ABSOLUTE_MARGIN;
  return lower > target ? lower : null;
}

/**
 * An upper bound on the user-level delta at E = `level` of the server's full view, for a
 * user sending each of its `setSize` items with rate `lambda` among `users` honest users
 * with blanket rate `m` over a privacy domain of `domainSize` items.
 *
 * Throws AccountantError on an argument out of range.
 * @param {number} level privacy level E in [0, 30]
 * @param {number} lambda the Poisson rate in [0, 1]
 * @param {number} setSize s, 1..min(d, 64)
 * @param {number} users h, the honest users, 1..1e12
 * @param {number} m the blanket rate, 0..1024 (at most d in the independent mode)
 * @param {number} domainSize d, the privacy domain size, 2..1e6
 * @param {UserDeltaOptions} [options]
 * @returns {number}
 */
export function userDelta(level, lambda, setSize, users, m, domainSize,
  { mode = BlanketMode.SLOTS, delta, enough = 0.0 } = {}) {
  const [blanketMode, eps, lam, h, d, s, rate, target] = validated(
    level, lambda, setSize, users, m, domainSize, mode, delta);
  if (lam === 0.0) return 0.0;
  if (blanketMode === BlanketMode.SLOTS) {
    const bound = slotBound(h, rate, d, s, POISSON_SLACK_SHARE * target, DEFAULT_STEP);
    return certified(bound.userDelta(eps, lam, enough));
  }
  const pairs = Math.max(0, Math.min(s, d - s)); // the most items two s-sets of d items differ in
  if (pairs === 0) return 0.0;
  const law = independentLaw(h, rate, d);
  return certified(composedPair(law, lam, pairs, { upper: true, step: DEFAULT_STEP }).delta(eps));
}

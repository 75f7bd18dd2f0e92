// @ts-check
// The rules the server, the shuffler and every client compute identically: the user
// counts n_min and h, the default delta and the client's defaults, the caps, and
// the message geometry of the two blanket modes. One party decides each quantity and
// another checks it, so the definitions here must give exactly what the services'
// definitions give, to the last bit.
//
// n_min and h are ceilings of products with a tolerance. Computed in floating point,
// 0.45 of 100 users could come out as 55.000000000000007 and round up to 56; so, as the
// services do, they are computed in exact rational arithmetic on the number's shortest
// round-trip decimal, the text it has in every JSON document.

export const MAX_LEVEL = 30.0;
export const MIN_LEVEL = 0.01;
export const MAX_LEVELS = 10000;
export const MAX_USERS = 1e12;
export const MAX_DOMAIN_SIZE = 1000000;
export const MAX_SET_SIZE = 64;
export const MAX_BLANKET_RATE = 1024.0;
/** The largest correlation ratio R a campaign may guard against (docs/protocol.md 5.1). */
export const MAX_CORRELATION_RATIO = 1000.0;
export const MAX_MESSAGES_PER_USER = 4096;
export const MIN_DELTA = 1e-12;
export const DEFAULT_DELTA_FACTOR = 0.01;
/**
 * The shuffler's default floor on participants per release, and the smallest campaign
 * min_users a client accepts unless its app sets another (segshuffle.core.rules).
 */
export const SHUFFLER_MIN_USERS = 10;
/**
 * The largest delta a client accepts unless its app sets another: a fixed number that
 * nothing the server chooses moves, the default delta rule 0.01 / n at the shuffler's
 * default floor of 10 users (segshuffle.core.rules.CLIENT_DELTA_CEILING).
 */
export const CLIENT_DELTA_CEILING = DEFAULT_DELTA_FACTOR / SHUFFLER_MIN_USERS;
export const DEFAULT_DROPOUT_TOLERANCE = 0.1;
/** Most participants a campaign's min_users may name (the creation request's cap). */
export const MAX_CAMPAIGN_USERS = 100000000;

/** The two blanket modes: ceil(m) slots, or one Bernoulli(m / D) slot per item. */
export const BlanketMode = Object.freeze({ SLOTS: "slots", INDEPENDENT: "independent" });

/**
 * A finite non-negative number as an exact fraction of its shortest round-trip decimal
 * (ECMAScript's Number::toString has the same digits as the services' repr).
 * @param {number} value @returns {{ num: bigint, den: bigint }}
 */
export function decimalFraction(value) {
  const match = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(value));
  if (!match) throw new RangeError(`not a finite non-negative number: ${value}`);
  const fraction = match[2] ?? "";
  const exponent = Number(match[3] ?? 0) - fraction.length;
  const digits = BigInt(match[1] + fraction);
  return exponent >= 0
    ? { num: digits * 10n ** BigInt(exponent), den: 1n }
    : { num: digits, den: 10n ** BigInt(-exponent) };
}

/**
 * ceil((1 - t) * x) for fractions t in [0, 1) and x >= 0.
 * @param {{ num: bigint, den: bigint }} t @param {{ num: bigint, den: bigint }} x
 */
function ceilComplementTimes(t, x) {
  const num = (t.den - t.num) * x.num;
  const den = t.den * x.den;
  return (num + den - 1n) / den;
}

function requireTolerance(name, value) {
  if (!(typeof value === "number" && Number.isFinite(value) && value >= 0 && value < 1)) {
    throw new RangeError(`${name} must be in [0, 1), got ${value}`);
  }
}

/**
 * n_min = max(1, ceil((1 - tau) n)), exact: the participants below which round 2 is
 * never released.
 * @param {number} users n (may be fractional) @param {number} dropoutTolerance tau
 * @returns {number}
 */
export function accountingUsers(users, dropoutTolerance) {
  if (!(typeof users === "number" && Number.isFinite(users) && users >= 0)) {
    throw new RangeError(`users must be a finite number >= 0, got ${users}`);
  }
  requireTolerance("dropout tolerance", dropoutTolerance);
  const value = ceilComplementTimes(decimalFraction(dropoutTolerance), decimalFraction(users));
  return Math.max(1, Number(value));
}

/**
 * h = max(1, ceil((1 - f) n_min)), exact: the honest round-2 participants whose blanket
 * every published epsilon is accounted with, when a fraction f may be fake.
 * @param {number} users @param {number} dropoutTolerance @param {number} fakeTolerance
 * @returns {number}
 */
export function honestUsers(users, dropoutTolerance, fakeTolerance) {
  requireTolerance("fake tolerance", fakeTolerance);
  const nMin = accountingUsers(users, dropoutTolerance);
  const value = ceilComplementTimes(decimalFraction(fakeTolerance), { num: BigInt(nMin), den: 1n });
  return Math.max(1, Number(value));
}

/**
 * The delta of a campaign that leaves it unset: 0.01 / n.
 * @param {number} users
 */
export function defaultDelta(users) {
  if (!(Number.isFinite(users) && users >= 1)) throw new RangeError(`users must be at least 1, got ${users}`);
  return DEFAULT_DELTA_FACTOR / users;
}

function parseMode(mode) {
  if (mode !== BlanketMode.SLOTS && mode !== BlanketMode.INDEPENDENT) {
    throw new RangeError(`blanket mode must be one of slots, independent, got ${mode}`);
  }
  return mode;
}

/**
 * The blanket rate m, checked: finite, 0 <= m <= 1024, and m <= D in the independent mode.
 * @param {number} m @param {number} domainSize D @param {string} mode @returns {number}
 */
export function requireBlanketRate(m, domainSize, mode) {
  parseMode(mode);
  if (!(typeof m === "number" && Number.isFinite(m) && m >= 0)) {
    throw new RangeError(`blanket rate m must be a finite number >= 0, got ${m}`);
  }
  if (m > MAX_BLANKET_RATE) throw new RangeError(`blanket rate m must be at most ${MAX_BLANKET_RATE}, got ${m}`);
  if (mode === BlanketMode.INDEPENDENT && m > domainSize) {
    throw new RangeError(`blanket rate m must be at most the privacy domain size ${domainSize} `
      + `in the independent mode, got ${m}`);
  }
  return m;
}

/**
 * Blanket ciphertexts per fixed-size submission: ceil(m) slots, or D in the independent
 * mode (0 when m = 0).
 * @param {number} m @param {number} domainSize @param {string} mode @returns {number}
 */
export function blanketSlots(m, domainSize, mode) {
  requireBlanketRate(m, domainSize, mode);
  if (m === 0) return 0;
  if (mode === BlanketMode.SLOTS) return Math.ceil(m);
  if (!(Number.isInteger(domainSize) && domainSize >= 1)) {
    throw new RangeError(`domain size must be an integer >= 1, got ${domainSize}`);
  }
  return domainSize;
}

/**
 * Data ciphertexts of one fixed-size round-2 submission: s + blanket slots, at most 4096.
 * @param {number} setSize @param {number} m @param {number} domainSize @param {string} mode
 * @returns {number}
 */
export function messagesPerUser(setSize, m, domainSize, mode) {
  if (!(Number.isInteger(setSize) && setSize >= 1)) {
    throw new RangeError(`set size must be an integer >= 1, got ${setSize}`);
  }
  const count = setSize + blanketSlots(m, domainSize, mode);
  if (count > MAX_MESSAGES_PER_USER) {
    throw new RangeError(`${count} messages per user exceed the cap of ${MAX_MESSAGES_PER_USER} `
      + `(${mode} blanket, m = ${m}, d = ${domainSize})`);
  }
  return count;
}

/** The chance that one blanket slot carries a message: m / ceil(m), or m / D. */
export function slotProbability(m, domainSize, mode) {
  const slots = blanketSlots(m, domainSize, mode);
  return slots === 0 ? 0 : m / slots;
}

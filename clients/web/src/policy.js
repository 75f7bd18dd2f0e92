// @ts-check
// What an app accepts from a campaign: limits shipped with the app that no answer of a
// server can move (docs/protocol.md section 6).

import { UsageError } from "./errors.js";
import { CLIENT_DELTA_CEILING, MAX_USERS, MIN_DELTA, SHUFFLER_MIN_USERS } from "./rules.js";

/**
 * @typedef {object} PolicyOptions
 * @property {number} [minFakeTolerance] smallest fraction f of fake or colluding
 *   participants the campaign must account for (default 0)
 * @property {number | null} [minUsers] smallest min_users the campaign may have
 *   (default: the shuffler's default floor, 10; an app whose shuffler runs with another
 *   floor sets it)
 * @property {number | null} [deltaCeiling] largest delta accepted (default 1e-3, a fixed
 *   number that nothing the server chooses moves)
 * @property {boolean} [allowUnpadded] accept campaigns without padding ids; sets smaller
 *   than s are then refused before anything is sealed
 * @property {boolean} [allowVariableSize] accept submissions that carry only the sent
 *   slots (their number then tells the user's level to the shuffler)
 */

/**
 * @typedef {Readonly<{ minFakeTolerance: number, minUsers: number | null,
 *   deltaCeiling: number | null, allowUnpadded: boolean, allowVariableSize: boolean }>} Policy
 */

const isNumber = (value) => typeof value === "number" && Number.isFinite(value);

/**
 * A validated policy (defaults filled in); invalid values are a UsageError.
 * @param {PolicyOptions} [options] @returns {Policy}
 */
export function makePolicy(options = {}) {
  const known = new Set(["minFakeTolerance", "minUsers", "deltaCeiling", "allowUnpadded",
    "allowVariableSize"]);
  for (const name of Object.keys(options)) {
    if (!known.has(name)) throw new UsageError(`policy: unknown setting ${name}`);
  }
  const { minFakeTolerance = 0, minUsers = null, deltaCeiling = null, allowUnpadded = false,
    allowVariableSize = false } = options;
  if (!(isNumber(minFakeTolerance) && minFakeTolerance >= 0 && minFakeTolerance < 1)) {
    throw new UsageError(`minFakeTolerance must be in [0, 1), got ${minFakeTolerance}`);
  }
  if (minUsers !== null && !(Number.isInteger(minUsers) && minUsers >= 1 && minUsers <= MAX_USERS)) {
    throw new UsageError(`minUsers must be an integer in [1, ${MAX_USERS}], got ${minUsers}`);
  }
  if (deltaCeiling !== null && !(isNumber(deltaCeiling) && deltaCeiling >= MIN_DELTA && deltaCeiling < 1)) {
    throw new UsageError(`deltaCeiling must be in [${MIN_DELTA}, 1), got ${deltaCeiling}`);
  }
  for (const [name, value] of [["allowUnpadded", allowUnpadded], ["allowVariableSize", allowVariableSize]]) {
    if (typeof value !== "boolean") throw new UsageError(`${name} must be true or false`);
  }
  return Object.freeze({ minFakeTolerance, minUsers, deltaCeiling, allowUnpadded, allowVariableSize });
}

/** This policy requiring at least `minimum` fake tolerance (the stricter wins). */
export function withFakeTolerance(policy, minimum) {
  const floor = makePolicy({ minFakeTolerance: minimum }).minFakeTolerance;
  return Object.freeze({ ...policy, minFakeTolerance: Math.max(floor, policy.minFakeTolerance) });
}

/** The smallest campaign min_users accepted: the app's, else the shuffler's default floor. */
export function minUsersRequired(policy) {
  return policy.minUsers ?? SHUFFLER_MIN_USERS;
}

/** The fewest round-1 users a published count may claim. */
export function usersFloor(policy, campaignMinUsers) {
  return Math.max(campaignMinUsers, minUsersRequired(policy));
}

/** The largest delta accepted: the app's ceiling, else the fixed default. */
export function deltaLimit(policy) {
  return policy.deltaCeiling ?? CLIENT_DELTA_CEILING;
}

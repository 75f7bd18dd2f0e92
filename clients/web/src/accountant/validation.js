// Argument checks: each throws an AccountantError whose message names the argument.

import { AccountantError } from "./errors.js";
import { MAX_DOMAIN_SIZE, MAX_SET_SIZE, MAX_USERS } from "../rules.js";

/** @param {unknown} value @returns {string} */
function show(value) {
  return typeof value === "string" ? JSON.stringify(value) : String(value);
}

/**
 * A finite number (anything else, strings included, is refused).
 * @param {string} name @param {unknown} value @returns {number}
 */
export function requireFinite(name, value) {
  if (typeof value !== "number") {
    throw new AccountantError(`${name} must be a number, got ${show(value)}`);
  }
  if (!Number.isFinite(value)) throw new AccountantError(`${name} must be finite, got ${show(value)}`);
  return value;
}

/** A number in the closed interval [0, 1]. @param {string} name @param {unknown} value */
export function requireUnitInterval(name, value) {
  const number = requireFinite(name, value);
  if (!(number >= 0 && number <= 1)) {
    throw new AccountantError(`${name} must be in [0, 1], got ${show(value)}`);
  }
  return number;
}

/** A finite number >= 0. @param {string} name @param {unknown} value */
export function requireNonNegative(name, value) {
  const number = requireFinite(name, value);
  if (number < 0) throw new AccountantError(`${name} must be >= 0, got ${show(value)}`);
  return number;
}

/**
 * An integer (a number with no fractional part; booleans are refused) of at least
 * `minimum`.
 * @param {string} name @param {unknown} value @param {number} minimum @returns {number}
 */
export function requireInt(name, value, minimum) {
  if (typeof value === "bigint" && value <= BigInt(Number.MAX_SAFE_INTEGER)
      && value >= -BigInt(Number.MAX_SAFE_INTEGER)) {
    value = Number(value);
  }
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new AccountantError(`${name} must be an integer, got ${show(value)}`);
  }
  if (value < minimum) throw new AccountantError(`${name} must be >= ${minimum}, got ${show(value)}`);
  return value;
}

/** A user count: an integer in [minimum, MAX_USERS]. @param {string} name @param {unknown} users */
export function requireUsers(name, users, minimum = 1) {
  if (typeof users === "number" && Number.isFinite(users) && users > MAX_USERS) {
    throw new AccountantError(`${name} must be at most 1e+12, got ${show(users)}`);
  }
  const n = requireInt(name, users, minimum);
  if (n > MAX_USERS) throw new AccountantError(`${name} must be at most 1e+12, got ${show(users)}`);
  return n;
}

/**
 * Domain size 2 <= d <= MAX_DOMAIN_SIZE and set size 1 <= s <= min(d, MAX_SET_SIZE).
 * @param {unknown} domainSize @param {unknown} setSize @returns {[number, number]}
 */
export function requireDomain(domainSize, setSize) {
  const d = requireInt("domain size", domainSize, 2);
  const s = requireInt("set size", setSize, 1);
  if (d > MAX_DOMAIN_SIZE) {
    throw new AccountantError(`domain size must be at most ${MAX_DOMAIN_SIZE}, got ${d}`);
  }
  if (s > MAX_SET_SIZE) throw new AccountantError(`set size must be at most ${MAX_SET_SIZE}, got ${s}`);
  if (s > d) throw new AccountantError(`set size (${s}) must not exceed the domain size (${d})`);
  return [d, s];
}

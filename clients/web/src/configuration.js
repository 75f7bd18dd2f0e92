// @ts-check
// Whether a campaign configuration is one the server could have been asked to create:
// the ranges, caps and cross-field rules of a creation request, so that a configuration
// no admin could have obtained (a level of 100, a set larger than the domain, a domain of
// ten million items) is refused before anything depends on it. Each problem is named by
// its field, or by `configuration` for a rule across fields.

import {
  BlanketMode, MAX_BLANKET_RATE, MAX_CAMPAIGN_USERS, MAX_CORRELATION_RATIO, MAX_DOMAIN_SIZE,
  MAX_LEVEL, MAX_LEVELS, MAX_MESSAGES_PER_USER, MAX_SET_SIZE, MIN_DELTA, MIN_LEVEL, messagesPerUser, requireBlanketRate,
} from "./rules.js";

export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const MAX_ITEM_NAMES = 100000;
const MAX_ITEM_NAME_LENGTH = 200;

/** @typedef {[check: string, text: string]} Problem */

const finite = (value) => typeof value === "number" && Number.isFinite(value);
const within = (value, low, high) => finite(value) && value >= low && value <= high;

/** The per-field problems, in the order of the creation request's fields. */
function fieldProblems(config) {
  /** @type {Problem[]} */
  const problems = [];
  const refuse = (field, text) => problems.push([field, `${field}: ${text}`]);
  if (!ID_PATTERN.test(config.id)) refuse("id", "not a campaign id");
  const items = config.items;
  if (items !== null) {
    if (items.length < 2 || items.length > MAX_ITEM_NAMES) {
      refuse("items", `between 2 and ${MAX_ITEM_NAMES} names`);
    } else if (!items.every((name) => name.length >= 1 && [...name].length <= MAX_ITEM_NAME_LENGTH)) {
      refuse("items", `every name has 1 to ${MAX_ITEM_NAME_LENGTH} characters`);
    }
  }
  if (!(Number.isInteger(config.domain_size) && config.domain_size >= 2
        && config.domain_size <= MAX_DOMAIN_SIZE)) {
    refuse("domain_size", `an integer in [2, ${MAX_DOMAIN_SIZE}]`);
  }
  if (!(Number.isInteger(config.set_size) && config.set_size >= 1 && config.set_size <= MAX_SET_SIZE)) {
    refuse("set_size", `an integer in [1, ${MAX_SET_SIZE}]`);
  }
  const levels = config.levels;
  if (levels.length < 1 || levels.length > MAX_LEVELS) {
    refuse("levels", `1 to ${MAX_LEVELS} levels`);
  } else if (!levels.every((level) => within(level, MIN_LEVEL, MAX_LEVEL))) {
    refuse("levels", `every level in [${MIN_LEVEL}, ${MAX_LEVEL}]`);
  } else if (!levels.every((level, i) => i === 0 || level > levels[i - 1])) {
    refuse("levels", "levels must be strictly increasing");
  }
  if (config.delta !== null && !(finite(config.delta) && config.delta >= MIN_DELTA && config.delta < 1)) {
    refuse("delta", `in [${MIN_DELTA}, 1)`);
  }
  if (!(Number.isInteger(config.min_users) && config.min_users >= 2
        && config.min_users <= MAX_CAMPAIGN_USERS)) {
    refuse("min_users", `an integer in [2, ${MAX_CAMPAIGN_USERS}]`);
  }
  for (const field of ["dropout_tolerance", "fake_tolerance"]) {
    const value = config[field];
    if (!(finite(value) && value >= 0 && value < 1)) refuse(field, "in [0, 1)");
  }
  if (!within(config.correlation_ratio ?? 1, 1, MAX_CORRELATION_RATIO)) {
    refuse("correlation_ratio", `in [1, ${MAX_CORRELATION_RATIO}]`);
  }
  const eps = config.level_privacy;
  if (eps !== null && !(finite(eps) && eps > 0 && eps <= MAX_LEVEL)) {
    refuse("level_privacy", `null or in (0, ${MAX_LEVEL}]`);
  }
  const insecure = config.insecure_parameters;
  if (insecure !== null) {
    if (!within(insecure.m, 0, MAX_BLANKET_RATE)) {
      refuse("insecure_parameters", `m in [0, ${MAX_BLANKET_RATE}]`);
    } else if (insecure.lambdas.length < 1 || insecure.lambdas.length > MAX_LEVELS
               || !insecure.lambdas.every((lam) => within(lam, 0, 1))) {
      refuse("insecure_parameters", "1 or more rates, each in [0, 1]");
    }
  }
  return problems;
}

/** The first rule across fields that fails, as the creation request checks them. */
function crossFieldProblem(config) {
  const items = config.items;
  if (items !== null) {
    if (new Set(items).size !== items.length) return "item names must be unique";
    if (config.domain_size !== items.length) return "domain_size must equal the number of items";
  }
  const d = config.domain_size;
  if (config.set_size > d) return "set_size must not exceed the domain size";
  const privacyDomain = d + (config.padding ? config.set_size : 0);
  if (privacyDomain > MAX_DOMAIN_SIZE) {
    return `the domain including padding must not exceed ${MAX_DOMAIN_SIZE}`;
  }
  if (config.blanket_mode === BlanketMode.INDEPENDENT) {
    // Every positive rate gives the same submission size in this mode: s + D messages.
    try {
      messagesPerUser(config.set_size, 1.0, privacyDomain, config.blanket_mode);
    } catch (error) {
      return `the independent blanket mode sends one data message per item of the privacy `
        + `domain (D = ${privacyDomain}) besides the s items: ${error.message} (at most `
        + `${MAX_MESSAGES_PER_USER})`;
    }
  }
  const insecure = config.insecure_parameters;
  if (insecure !== null) {
    if (insecure.lambdas.length !== config.levels.length) {
      return "insecure_parameters.lambdas needs one rate per level";
    }
    try {
      requireBlanketRate(insecure.m, privacyDomain, config.blanket_mode);
    } catch (error) {
      return error.message;
    }
  }
  return null;
}

/**
 * What makes `config` (as readConfig gives it) one no creation request could have
 * produced; empty when it is well formed.
 * @param {ReturnType<typeof import("./answers.js").readConfig>} config
 * @returns {Problem[]}
 */
export function wellFormedProblems(config) {
  const problems = fieldProblems(config);
  if (problems.length) return problems;
  const rule = crossFieldProblem(config);
  return rule === null ? [] : [["configuration", `configuration: ${rule}`]];
}

/** d + s with padding, d without: the domain the accounting and the decoder use. */
export function privacyDomainSize(config) {
  return config.domain_size + (config.padding ? config.set_size : 0);
}

/** s with padding, 0 without. */
export function paddingItems(config) {
  return config.padding ? config.set_size : 0;
}

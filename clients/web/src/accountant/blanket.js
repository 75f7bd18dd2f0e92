// The two blanket modes and the slot geometry the accountant needs.
//
// "slots" (the paper's random-number blanket): each user fills c = ceil(m) slots, each
// carrying with probability gamma = m / c an item uniform over the d items of the
// privacy domain, else a null.  "independent": each user sends, for each of the d
// items independently, one blanket message with probability m / d (so m <= d).

import {
  BlanketMode, MAX_BLANKET_RATE, blanketSlots as submissionSlots, slotProbability,
} from "../rules.js";
import { AccountantError } from "./errors.js";
import { requireNonNegative } from "./validation.js";

export { BlanketMode };

/**
 * The mode named by `mode`; an AccountantError naming the choices otherwise.
 * @param {unknown} mode @returns {"slots" | "independent"}
 */
export function parseMode(mode) {
  if (mode === BlanketMode.SLOTS || mode === BlanketMode.INDEPENDENT) return mode;
  const shown = typeof mode === "string" ? `'${mode}'` : String(mode);
  throw new AccountantError(`blanket mode must be one of slots, independent, got ${shown}`);
}

/**
 * 0 <= m <= MAX_BLANKET_RATE, and m <= d in the independent mode (a rate per item <= 1).
 * @param {unknown} m @param {number} domainSize @param {string} mode @returns {number}
 */
export function requireBlanketRate(m, domainSize, mode) {
  const rate = requireNonNegative("blanket rate m", m);
  if (rate > MAX_BLANKET_RATE) {
    throw new AccountantError(`blanket rate m must be at most ${MAX_BLANKET_RATE}, got ${rate}`);
  }
  if (parseMode(mode) === BlanketMode.INDEPENDENT && rate > domainSize) {
    throw new AccountantError(`blanket rate m must be at most the privacy domain size ${domainSize} `
      + `in the independent mode, got ${rate}`);
  }
  return rate;
}

/** Slots a user fills in the slots mode: ceil(m), 0 when m = 0 (the rule of ../rules.js).
 * @param {number} m */
export function blanketSlots(m) {
  return submissionSlots(m, 1, BlanketMode.SLOTS);
}

/** gamma = m / ceil(m): the chance that one slot carries a message (0 when m = 0).
 * @param {number} m */
export function blanketProbability(m) {
  return slotProbability(m, 1, BlanketMode.SLOTS);
}

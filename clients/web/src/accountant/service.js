// The accountant behind messages: one request, one reply. The module worker (worker.js)
// answers with it off the page's main thread, and where there is no worker (Node) the
// runner (../accountant_runner.js) calls it in-process, so a value is computed by the
// same code, and crosses to the caller as the same double, wherever it runs.

import { userDelta } from "./accounting.js";

/**
 * The arguments of userDelta: level, lambda, set size, users, m, domain size, options.
 * @typedef {[number, number, number, number, number, number,
 *   { mode?: string, delta?: number }]} UserDeltaArgs
 */

/** @typedef {{ id: number, args: UserDeltaArgs }} Request */

/**
 * The bound, or the error the accountant threw (its class name and message).
 * @typedef {{ id: number, value: number }
 *   | { id: number, error: { name: string, message: string } }} Reply
 */

/**
 * The reply to `request`: never throws.
 * @param {Request} request @returns {Reply}
 */
export function answer(request) {
  const id = request?.id;
  try {
    if (!Array.isArray(request?.args)) throw new TypeError("a request carries its arguments");
    return { id, value: userDelta(...request.args) };
  } catch (error) {
    const name = typeof error?.name === "string" ? error.name : "Error";
    return { id, error: { name, message: String(error?.message ?? error) } };
  }
}

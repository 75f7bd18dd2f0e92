// The accountant behind messages: one request, one reply. The module worker (worker.js)
// answers with it off the page's main thread, and where there is no worker (Node) the
// runner (../accountant_runner.js) calls it in-process, so a value is computed by the
// same code, and crosses to the caller as the same double, wherever it runs.

import { refutingDelta, userDelta } from "./accounting.js";

/**
 * The arguments of userDelta: level, lambda, set size, users, m, domain size, options.
 * @typedef {[number, number, number, number, number, number,
 *   { mode?: string, delta?: number }]} UserDeltaArgs
 */

/**
 * A request: userDelta's bound, or with kind "refute" refutingDelta's (a certified lower
 * bound above the delta asked, or null).
 * @typedef {{ id: number, args: UserDeltaArgs, kind?: "refute" }} Request
 */

/**
 * The bound, or the error the accountant threw (its class name and message).
 * @typedef {{ id: number, value: number | null }
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
    const [level, lam, setSize, users, m, domainSize, options] = request.args;
    if (request.kind === "refute") {
      return { id, value: refutingDelta(level, lam, setSize, users, m, domainSize,
        { mode: options?.mode, delta: /** @type {number} */ (options?.delta) }) };
    }
    return { id, value: userDelta(...request.args) };
  } catch (error) {
    const name = typeof error?.name === "string" ? error.name : "Error";
    return { id, error: { name, message: String(error?.message ?? error) } };
  }
}

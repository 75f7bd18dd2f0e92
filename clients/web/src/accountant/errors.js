// The one error class of the accountant.

/**
 * Raised where an argument is outside what the accountant accepts (a privacy level out
 * of range, a rate outside [0, 1], a domain smaller than the set size, ...) and where a
 * computation cannot be carried out faithfully.  The message names the offending
 * argument and is fit to show as it is.
 */
export class AccountantError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = "AccountantError";
  }
}

// The errors the client raises. Every one is a SegshuffleError, so an app can catch the
// whole family at once and branch on the subclass: a refusal to take part
// (VerificationError, CampaignEndedError), a service's answer (HttpError), no answer
// (NetworkError, RetryBudgetExceeded), an answer that is not what the protocol says
// (ProtocolError), or a mistake of the calling code or its saved state (UsageError,
// StateError).

/** Base class of every error this package throws. */
export class SegshuffleError extends Error {
  /** @param {string} message @param {{ cause?: unknown }} [options] */
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The calling code asked for something the session cannot do (wrong order, bad input). */
export class UsageError extends SegshuffleError {}

/** A saved session document is malformed, altered, or at odds with the options given. */
export class StateError extends UsageError {}

/**
 * What the services published does not check out, or is outside what the app accepts;
 * nothing more is sent. `check` names the first failed check (a field of the
 * configuration or the parameters, or one of `campaign`, `config_hash`,
 * `parameters_hash`, `key`, `signature`, `round1_participants`, `release_threshold`,
 * `insecure`, ...), `checks` every failed check in order: the names docs/protocol.md
 * section 6 and the test vectors use.
 */
export class VerificationError extends SegshuffleError {
  /**
   * @param {string} message
   * @param {{ check: string, checks?: readonly string[], cause?: unknown }} details
   */
  constructor(message, { check, checks, cause }) {
    super(message, cause === undefined ? undefined : { cause });
    /** @type {string} */
    this.check = check;
    /** @type {readonly string[]} */
    this.checks = Object.freeze(checks && checks.length ? [...checks] : [check]);
  }
}

/** A service answered with a body that is not the document the protocol defines. */
export class ProtocolError extends SegshuffleError {
  /** @param {string} message @param {{ status?: number, cause?: unknown }} [details] */
  constructor(message, details = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    /** @type {number | undefined} the HTTP status of the answer */
    this.status = details.status;
  }
}

export const PROBLEM_PREFIX = "urn:segshuffle:error:";

/**
 * @typedef {object} ProblemDocument An RFC 9457 problem document, as the services send it.
 * @property {string} [type] `urn:segshuffle:error:<name>`
 * @property {string} [title]
 * @property {number} [status]
 * @property {string} [detail]
 */

/**
 * A service refused a request: a status of 400 or more, with the RFC 9457 problem
 * document when it sent one. `problem` is the short name (`already-submitted`,
 * `wrong-phase`, `rate-limited`...), `retryAfterMs` the answer's `Retry-After`.
 */
export class HttpError extends SegshuffleError {
  /**
   * @param {string} message
   * @param {{ status: number, document?: ProblemDocument | null, retryAfterMs?: number | null }} details
   */
  constructor(message, { status, document = null, retryAfterMs = null }) {
    super(message);
    /** @type {number} */
    this.status = status;
    /** @type {ProblemDocument | null} */
    this.document = document;
    const type = document?.type;
    /** @type {string | null} */
    this.problem = typeof type === "string" && type.startsWith(PROBLEM_PREFIX)
      ? type.slice(PROBLEM_PREFIX.length) : null;
    /** @type {string | null} */
    this.detail = typeof document?.detail === "string" ? document.detail : null;
    /** @type {number | null} */
    this.retryAfterMs = retryAfterMs;
  }

  /** Whether trying again later may succeed (the transport retries these itself). */
  get transient() {
    return this.status === 429 || this.status >= 500;
  }
}

/** A request got no answer (connection refused or reset, DNS, timeout, CORS refusal). */
export class NetworkError extends SegshuffleError {}

/**
 * A request kept failing transiently until its retry budget (attempts or total wait)
 * ran out; `lastError` is the last failure (an HttpError or a NetworkError).
 */
export class RetryBudgetExceeded extends SegshuffleError {
  /**
   * @param {string} message
   * @param {{ lastError: HttpError | NetworkError, attempts: number, waitedMs: number }} details
   */
  constructor(message, { lastError, attempts, waitedMs }) {
    super(message, { cause: lastError });
    this.lastError = lastError;
    this.attempts = attempts;
    this.waitedMs = waitedMs;
  }
}

/** The campaign ended without results (`failed` or `aborted`); `reason` says why. */
export class CampaignEndedError extends SegshuffleError {
  /** @param {string} phase @param {string | null} reason */
  constructor(phase, reason) {
    super(`the campaign ${phase}: ${reason || "no reason given"}`);
    this.phase = phase;
    this.reason = reason;
  }
}

/** A wait for a campaign phase ran out of time (the campaign is still running). */
export class WaitTimeoutError extends SegshuffleError {}

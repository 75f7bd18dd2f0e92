// The errors the client raises. Every one is a SegshuffleError, so an app can catch the
// whole family at once and branch on the subclass: a refusal to take part
// (VerificationError, CampaignEndedError), a service's answer (HttpError), no answer
// (NetworkError, RetryBudgetExceeded), an answer that is not what the protocol says
// (ProtocolError), or a mistake of the calling code or its saved state (UsageError,
// StateError). A submission that did not end stored says whether it certainly is not
// (SubmissionRefusedError) or whether that is not known yet (SubmissionUnknownError).

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

/**
 * A wait ran out of its time budget before what it waited for came; nothing was sent and
 * waiting again later is safe. `waitingFor` says what: `phase` (waitForPhase), or, in
 * fetchParameters, `parameters` (not published yet), `round1-release` (the shuffler's
 * round-1 status does not say released yet) or `service` (the shuffler kept failing:
 * `cause` is the last failure).
 */
export class WaitTimeoutError extends SegshuffleError {
  /** @param {string} message @param {{ waitingFor?: string, cause?: unknown }} [details] */
  constructor(message, { waitingFor = "phase", cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    /** @type {string} */
    this.waitingFor = waitingFor;
  }
}

/**
 * The shuffler refused a submission: it is certainly not stored (`stored` is false). An
 * HttpError with the refusal's problem (`wrong-phase`, `wrong-submission-size`,
 * `replay`...). `already-submitted` is a refusal only when no try of this session may
 * have arrived: the round then holds a submission of this token that the session has no
 * record of (its saved state was not kept), and this one was not stored.
 */
export class SubmissionRefusedError extends HttpError {
  /** The refusal `error` (an HttpError) as a SubmissionRefusedError. @param {HttpError} error */
  static of(error) {
    const refused = new SubmissionRefusedError(`${error.message} (not stored)`, {
      status: error.status, document: error.document, retryAfterMs: error.retryAfterMs,
    });
    return refused;
  }

  /** @type {false} */
  get stored() {
    return false;
  }
}

/**
 * Whether a submission is stored is not known (`stored` is null): a try may have arrived
 * (its answer was lost) and the wait budget ran out before a retry could tell, or the
 * shuffler, asked again, answered that the round or the token has ended (`wrong-phase`,
 * `unauthorized`), as it does once a round that may hold it has been released. The
 * session's saved state records the round as "unknown" with the sealed submission: the
 * same submit call again, on this session or on one resumed from the state, sends the
 * very same submission with the same token, and the answer settles it (stored, or
 * already-submitted: stored before). `lastError` is the last failure.
 */
export class SubmissionUnknownError extends SegshuffleError {
  /** @param {string} message @param {{ lastError: HttpError | NetworkError }} details */
  constructor(message, { lastError }) {
    super(message, { cause: lastError });
    this.lastError = lastError;
  }

  /** @type {null} */
  get stored() {
    return null;
  }
}

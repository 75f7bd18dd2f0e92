// @ts-check
// The errors the client raises. Every one is a SegshuffleError, so an app can catch the
// whole family at once and branch on the kind, each of which says what the app can do:
//
// - OfflineError: the device was offline (navigator.onLine false) until the time budget
//   ran out; the session waited for the browser's `online` event. Try again once online.
//   It is a ServiceUnreachableError with a known cause: test for it first.
// - ServiceUnreachableError: the shuffler gave no usable answer (no answer, a CORS
//   refusal, 5xx or 429) until the time budget ran out. Try again later.
// - RefusedError: the service refused the request for good (a 4xx other than 429);
//   `problem` and `document` carry its RFC 9457 problem document. Trying the same again
//   gets the same answer. A refused submission is a SubmissionRefusedError.
// - VerificationError: something the services published does not check out; `check`
//   names the failed check. Nothing more is sent.
//
// Besides these: the campaign ended (CampaignEndedError), a wait for the campaign ran out
// of time (WaitTimeoutError), a submission's outcome is not known yet
// (SubmissionUnknownError), an answer that is not what the protocol says
// (ProtocolError), and mistakes of the calling code or its saved state (UsageError,
// StateError). HttpError and NetworkError describe one try; they reach the app as the
// `lastError` of the kinds above (RefusedError is an HttpError itself).

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
 * A service answered a try with a status of 400 or more, with the RFC 9457 problem
 * document when it sent one. `problem` is the short name (`already-submitted`,
 * `wrong-phase`, `rate-limited`...), `retryAfterMs` the answer's `Retry-After`. A
 * transient one (429, 5xx) is retried and reaches the app only as a `lastError`; a final
 * one is a RefusedError.
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

/**
 * The service refused the request for good: a 4xx other than 429, with its problem
 * document (`document`, `problem`, `detail`). The same request again gets the same
 * answer; the app can show `detail` or act on `problem` (`invitation-used`,
 * `unknown-campaign`, `wrong-phase`...).
 */
export class RefusedError extends HttpError {}

/**
 * The final answer `error` as the refusal the app receives: a SubmissionRefusedError for a
 * submission, else a RefusedError (the package's entry point does not export this).
 * @param {HttpError} error @param {boolean} [submission]
 * @returns {RefusedError}
 */
export function refusalOf(error, submission = false) {
  const Kind = submission ? SubmissionRefusedError : RefusedError;
  const message = submission ? `${error.message} (not stored)` : error.message;
  return new Kind(message, {
    status: error.status, document: error.document, retryAfterMs: error.retryAfterMs,
  });
}

/** One try got no answer (connection refused or reset, DNS, timeout, CORS refusal). */
export class NetworkError extends SegshuffleError {}

/**
 * @typedef {object} UnreachableDetails
 * @property {HttpError | NetworkError} lastError the last try's failure
 * @property {number} attempts the tries made
 * @property {number} waitedMs the milliseconds from the first try to giving up
 */

/**
 * The shuffler gave no usable answer until the time budget ran out (the retry option's
 * `budgetMs`, or the session's `waitBudgetMs` for a wait or a submission): no answer at
 * all (stopped, unreachable, or a CORS setting that does not list the page's origin: a
 * browser does not tell these apart), or 5xx and 429 answers only. `lastError` is the
 * last failure. A submission that ends so was not stored (`stored` false); one that may
 * have arrived ends as a SubmissionUnknownError instead.
 */
export class ServiceUnreachableError extends SegshuffleError {
  /** @param {string} message @param {UnreachableDetails} details */
  constructor(message, { lastError, attempts, waitedMs }) {
    super(message, { cause: lastError });
    /** @type {HttpError | NetworkError} */
    this.lastError = lastError;
    /** @type {number} */
    this.attempts = attempts;
    /** @type {number} */
    this.waitedMs = waitedMs;
  }

  /**
   * A submission that ended so was certainly not stored.
   * @returns {false}
   */
  get stored() {
    return false;
  }
}

/**
 * The device was offline (the browser's `navigator.onLine` false) when the time budget
 * ran out. While offline a session does not try again and again: it waits for the
 * browser's `online` event and carries on at once when it comes; this is the answer
 * when it did not come in time. A ServiceUnreachableError whose cause is known.
 */
export class OfflineError extends ServiceUnreachableError {}

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
 * A wait ran out of its time budget before what it waited for came, the shuffler
 * answering all along; nothing was sent and waiting again later is safe. `waitingFor`
 * says what: `phase` (waitForPhase), or, in fetchParameters, `parameters` (not published
 * yet) or `round1-release` (the shuffler's round-1 status does not say released yet). A
 * shuffler that stopped answering is a ServiceUnreachableError (or an OfflineError).
 */
export class WaitTimeoutError extends SegshuffleError {
  /** @param {string} message @param {{ waitingFor?: string, cause?: unknown }} details */
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
export class SubmissionRefusedError extends RefusedError {

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
